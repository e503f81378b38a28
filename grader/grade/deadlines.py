"""Due dates, submission times and late penalties (``python -m grader grade --deadlines FILE``).

A deadline file gives, per assignment, a due time with its timezone, a penalty per day late and
a cap, as TOML or CSV (the formats are in docs/instructors.md). A submission's time is nbgrader's
``timestamp.txt`` in ``submitted/<student>/<assignment>/``: collect writes it from the zip
entry's time, or from the kernel.py's modification time for a folder source. A time written
without an offset (a zip entry's, which carries none) is read in the deadline's timezone.

Late penalties are applied to the published grades only (``grader.grade.export``): nbgrader's
gradebook keeps the points the submission earned.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

from grader.grade import course

TIMESTAMP = "timestamp.txt"  # nbgrader's name, in submitted/<student>/<assignment>/
MAX_TIMESTAMP_BYTES = 200
SETTINGS = ("due", "penalty_per_day", "cap", "timezone")


class DeadlineError(ValueError):
    """The deadline file cannot be used; the message says where and what to write instead."""


@dataclass(frozen=True)
class Deadline:
    due: dt.datetime  # with a timezone
    penalty_per_day: float = 0.0  # percent of the points earned, per day or part of a day late
    cap: float = 100.0  # the most percent a late submission loses

    def hours_late(self, submitted: dt.datetime) -> float:
        """Hours after the due time (0 when on time); a time without offset is read in the
        deadline's timezone."""
        if submitted.tzinfo is None:
            submitted = submitted.replace(tzinfo=self.due.tzinfo)
        return max(0.0, (submitted - self.due).total_seconds() / 3600)

    def penalty_percent(self, hours_late: float) -> float:
        """Percent of the points earned that ``hours_late`` costs: each started day counts."""
        days = math.ceil(hours_late / 24) if hours_late > 0 else 0
        return min(self.cap, days * self.penalty_per_day)


def load(path: Path) -> dict[str, Deadline]:
    """The deadlines in ``path`` (.toml or .csv), by assignment name."""
    path = Path(path)
    if not path.is_file():
        raise DeadlineError(f"The deadline file {path} does not exist: check the path.")
    if path.suffix.lower() == ".toml":
        entries = _toml_entries(path)
    elif path.suffix.lower() == ".csv":
        entries = _csv_entries(path)
    else:
        raise DeadlineError(
            f"{path} is neither .toml nor .csv: write the deadlines in one of those formats "
            "(docs/instructors.md shows both)."
        )
    return {_assignment(name, path): _deadline(settings, f"{path}: {name}") for name, settings in entries.items()}


def _toml_entries(path: Path) -> dict[str, dict]:
    """Top-level settings are defaults; each table is an assignment's (its name the module id)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise DeadlineError(
            f"Reading {path} needs Python 3.11 or newer (tomllib): write the deadlines as "
            "CSV instead, or grade with a newer Python."
        ) from None
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise DeadlineError(f"{path} is not valid TOML ({error}): fix that line and try again.") from None
    defaults = {key: value for key, value in data.items() if not isinstance(value, dict)}
    tables = {key: value for key, value in data.items() if isinstance(value, dict)}
    if not tables:
        raise DeadlineError(
            f"{path} names no assignment: add a table per assignment, e.g. "
            '["missing-elements/01-vector-add"] with due = 2026-03-02T23:59:00+01:00.'
        )
    return {name: {**defaults, **settings} for name, settings in tables.items()}


def _csv_entries(path: Path) -> dict[str, dict]:
    """A header ``module,due,penalty_per_day,cap`` (and optionally ``timezone``), a row each."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or "module" not in rows[0] or "due" not in rows[0]:
        raise DeadlineError(
            f"{path} needs a header with at least module and due (module,due,penalty_per_day,cap) "
            "and a row per assignment."
        )
    return {
        row["module"].strip(): {k: v.strip() for k, v in row.items() if k != "module" and v and v.strip()}
        for row in rows
        if (row.get("module") or "").strip()
    }


def _assignment(name: str, path: Path) -> str:
    """The assignment that ``name`` (a module id ``track/slug`` or an assignment name) means."""
    modules = course.modules_by_assignment()
    candidate = name.strip().replace("/", "-")
    if candidate in modules:
        return candidate
    close = get_close_matches(candidate, list(modules), n=1)
    hint = f" Did you mean {modules[close[0]].id}?" if close else ""
    raise DeadlineError(
        f"{path} gives a deadline for {name!r}, which is no module of this course: write its "
        f"module id (track/slug, as `make progress` lists it).{hint}"
    )


def _deadline(settings: dict, where: str) -> Deadline:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise DeadlineError(
            f"{where}: unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(SETTINGS)}."
        )
    if "due" not in settings:
        raise DeadlineError(
            f"{where} has no due time: add due = 2026-03-02T23:59:00+01:00 (with its offset, or a timezone setting)."
        )
    due = _due(settings["due"], settings.get("timezone"), where)
    per_day = _percent(settings.get("penalty_per_day", 0), "penalty_per_day", where)
    cap = _percent(settings.get("cap", 100), "cap", where)
    return Deadline(due, per_day, cap)


def _due(value, timezone: str | None, where: str) -> dt.datetime:
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise DeadlineError(
                f"{where}: due {value!r} is not a date and time: write it as 2026-03-02T23:59:00+01:00."
            ) from None
    if not isinstance(value, dt.datetime):  # a TOML date without a time
        raise DeadlineError(
            f"{where}: due {value!r} has no time of day: write e.g. {value}T23:59:00 with an "
            "offset or a timezone setting."
        )
    if value.tzinfo is not None:
        return value
    if not timezone:
        raise DeadlineError(
            f"{where}: due {value.isoformat()} has no timezone: add its offset "
            f'({value.isoformat()}+01:00) or a timezone setting (timezone = "Europe/Zurich").'
        )
    return value.replace(tzinfo=_zone(timezone, where))


def _zone(name: str, where: str) -> dt.tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise DeadlineError(
            f"{where}: timezone {name!r} is unknown here: use an IANA name such as "
            "Europe/Zurich or America/New_York, or write the offset into the due time."
        ) from None


def _percent(value, name: str, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 <= number <= 100:
        raise DeadlineError(f"{where}: {name} is {value!r}; it is a percent of the points earned, from 0 to 100.")
    return number


# ----------------------------------------------------------------------------------------------
# Submission times
# ----------------------------------------------------------------------------------------------


def write_timestamp(folder: Path, when: dt.datetime) -> None:
    """Record when the submission in ``folder`` was handed in, as nbgrader's timestamp.txt."""
    (Path(folder) / TIMESTAMP).write_text(when.isoformat(" ", timespec="seconds"))


def read_timestamp(folder: Path) -> dt.datetime | None:
    """The time in ``folder``'s timestamp.txt (None when there is none, or it cannot be read)."""
    path = Path(folder) / TIMESTAMP
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_TIMESTAMP_BYTES:
            return None
        return parse_time(path.read_text())
    except (OSError, UnicodeDecodeError):
        return None


def parse_time(text: str) -> dt.datetime | None:
    """A timestamp as nbgrader writes it: ISO ("2026-03-02 23:59:00", with or without an offset),
    or with a zone name after it, as its exchange does ("2026-03-02 22:59:00.123456 UTC")."""
    parts = text.split()
    zone = None
    if len(parts) == 3:
        parts, zone = parts[:2], parts[2]
    try:
        when = dt.datetime.fromisoformat(" ".join(parts))
    except ValueError:
        return None
    if zone is None or when.tzinfo is not None:
        return when if zone is None else None
    if zone.upper() in ("UTC", "GMT", "Z"):
        return when.replace(tzinfo=dt.timezone.utc)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return when.replace(tzinfo=ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return None
