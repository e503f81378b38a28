"""The order in which a parallel run of the course's own suite starts its work (``--dist loadfile``).

A work unit is a test file, or for the files that test every module in turn (planted mistakes,
hidden cases, notebooks) the part of it that tests one track. Each unit runs on one worker, so
that its module-scoped fixtures (a graded class, a Ray cluster) are built once.

A unit that takes minutes and starts last ends the run minutes late, so the longest units go
first. How long a unit takes is known from the last run on this machine (``UnitClock`` keeps it,
per device mode, in a file beside the suite). A fresh checkout starts from the timings that ship
with the suite (measured on the course's reference machines: an H100 for "cuda", 2 CPU cores for
"interpreter"); units in neither go by the ``heavy`` marker, then by their number of tests.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

HISTORY_FILE = ".test-unit-seconds.json"  # in the suite's root folder, ignored by git
SHIPPED_FILE = "tests/unit-seconds.json"  # the same format, committed: refresh it from a HISTORY_FILE
_TRACK_IN_ID = re.compile(r"\[(missing-elements|optimization|debugging|mastery)/")


def work_unit(nodeid: str) -> str:
    file = nodeid.split("::", 1)[0]
    track = _TRACK_IN_ID.search(nodeid)
    return f"{file}:{track[1]}" if track else file


def expected_seconds(root: Path, mode: str) -> dict[str, float]:
    """Seconds per unit: this machine's last runs where they timed the unit, the shipped timings
    otherwise."""
    return {**read_history(root, mode, SHIPPED_FILE), **read_history(root, mode)}


def read_history(root: Path, mode: str, name: str = HISTORY_FILE) -> dict[str, float]:
    """Seconds per unit measured by earlier runs in this device mode; {} when none is readable."""
    try:
        history = json.loads((root / name).read_text()).get(mode, {})
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(history, dict):
        return {}
    return {unit: float(s) for unit, s in history.items() if isinstance(s, (int, float)) and math.isfinite(s)}


def longest_first(units: dict[str, list], history: dict[str, float], heavy: set[str]) -> list[str]:
    """The units' names, longest expected first. A unit never measured counts as longer than all
    others when marked heavy, and as the shortest otherwise; ties go to the unit with more tests."""

    def expected(name: str) -> float:
        if name in history:
            return history[name]
        return math.inf if name in heavy else 0.0

    return sorted(units, key=lambda name: (-expected(name), -len(units[name])))


class UnitClock:
    """Adds up the seconds each unit's tests took (setup, call and teardown) and, at the end of a
    run that was not interrupted, merges them into the history file under the device mode."""

    def __init__(self, root: Path, mode: str):
        self.root, self.mode = root, mode
        self.seconds: dict[str, float] = {}

    def add(self, nodeid: str, duration: float) -> None:
        unit = work_unit(nodeid)
        self.seconds[unit] = self.seconds.get(unit, 0.0) + duration

    def save(self) -> None:
        if not self.seconds:
            return
        path = self.root / HISTORY_FILE
        try:
            known = json.loads(path.read_text())
            if not isinstance(known, dict):
                known = {}
        except (OSError, ValueError):
            known = {}
        mode_history = known.get(self.mode) if isinstance(known.get(self.mode), dict) else {}
        known[self.mode] = {**mode_history, **{unit: round(s, 1) for unit, s in self.seconds.items()}}
        try:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
            tmp.replace(path)  # workers of a later run never read half a file
        except OSError:
            pass  # a read-only checkout runs in the default order next time
