"""Where the run phase's inputs and outputs live: submitted files, records, the student index.

Submissions are found as ``<root>/<student>/<track>/<slug>/kernel.py`` or, as nbgrader collects
them, ``<root>/<student>/<track>-<slug>/kernel.py``. Records live in
``<results>/records/<track>/<slug>/<sha256>-<cases>.json``, one per (module, sha256 of the file,
hash of the course's cases), written atomically and reused when they exist, so a re-run costs
almost nothing and an interrupted run loses only the submissions in progress. A regrade moves a
record to ``<results>/replaced/`` first (``set_aside``), so that the file is graded again.
``<results>/students.json`` maps each student to their records, and ``<results>/secret`` holds
the seed of the hidden cases' inputs for every run on this folder (``run_secret``).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from grader.core import device
from grader.core.catalog import Module
from grader.grade.record_format import RECORD_VERSION, problems

MAX_SOURCE_BYTES = 1 << 20
SECRET_FILE = "secret"
SECRET_BITS = 48


@dataclass
class Submission:
    student: str
    module: Module
    path: Path


def find_submissions(root: Path, modules: list[Module]) -> list[Submission]:
    """Every ``kernel.py`` under ``root`` in either layout, sorted by student and module."""
    found = []
    for student_dir in sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith(".")):
        for module in modules:
            for candidate in (
                student_dir / module.track / module.slug / "kernel.py",
                student_dir / f"{module.track}-{module.slug}" / "kernel.py",
            ):
                if candidate.exists() or candidate.is_symlink():
                    found.append(Submission(student_dir.name, module, candidate))
                    break
    return found


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cases_hash(module: Module) -> str:
    """What decides a module's grade besides the submission: its public and hidden cases, the
    device mode (which cases run), and the record format."""
    hidden = module.solution_dir / "hidden.py"
    parts = {
        "record_version": RECORD_VERSION,
        "mode": device.mode(),
        "public": sha256((module.learner_dir / "test_kernel.py").read_bytes()),
        "hidden": sha256(hidden.read_bytes()) if hidden.is_file() else "",
    }
    return sha256(json.dumps(parts, sort_keys=True).encode())[:16]


def starting_source(module: Module) -> bytes | None:
    """The module's starting kernel.py as learners receive it (generated from the reference), or
    None where this checkout has no reference to generate it from."""
    from grader.core.markers import stub_for

    if not (module.solution_dir / "kernel.py").is_file():
        return None
    return stub_for(module).encode()


def starting_record(results_dir: Path, module: Module) -> dict | None:
    """The record of the module's starting kernel in ``results_dir`` (the run phase grades it
    beside the class), or None: which cases pass with no work done."""
    source = starting_source(module)
    if source is None:
        return None
    return read_record(record_path(results_dir, module, sha256(source), cases_hash(module)))


def record_path(results_dir: Path, module: Module, submission_sha: str, cases_sha: str) -> Path:
    return Path(results_dir) / "records" / module.track / module.slug / f"{submission_sha}-{cases_sha}.json"


def read_record(path: Path) -> dict | None:
    """A complete record of this format from an earlier run (``record_format.problems`` finds
    none), or None: the file is then graded again."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if not problems(record) else None


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def log_path(results_dir: Path, module: Module, submission_sha: str) -> Path:
    """Where the log of a grading of the file with this hash is kept."""
    return Path(results_dir) / "logs" / module.track / module.slug / f"{submission_sha}.log"


def keep(results_dir: Path, module: Module, record: dict, log: str) -> Path:
    """Write a grading's log, then its record (the record last: a record means the log is there);
    return the record's path."""
    submission_sha, cases_sha = record["submission_sha256"], record["cases_sha256"]
    write_atomically(log_path(results_dir, module, submission_sha), log)
    path = record_path(results_dir, module, submission_sha, cases_sha)
    write_atomically(path, json.dumps(record, indent=1) + "\n")
    return path


def remove_stale_temporaries(results_dir: Path) -> None:
    """Half-written files of a writer that was killed (``write_atomically``'s temporaries)."""
    for path in results_dir.rglob(".*.tmp"):
        pid = path.name.rsplit(".", 3)[-3]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            path.unlink(missing_ok=True)


def read_source(path: Path) -> bytes:
    """The submitted file, refusing what is not a plain file of reasonable size."""
    if path.is_symlink() or not path.is_file():
        raise ValueError("kernel.py must be a regular file (not a link or a folder).")
    if path.stat().st_size > MAX_SOURCE_BYTES:
        raise ValueError(f"kernel.py is larger than {MAX_SOURCE_BYTES // 1024} KiB.")
    return path.read_bytes()


def existing_record(module: Module, source: bytes, results_dir: Path) -> tuple[dict | None, Path]:
    """The record of an earlier run for this file and the course's current cases, if any."""
    submission_sha = sha256(source)
    path = record_path(results_dir, module, submission_sha, cases_hash(module))
    record = read_record(path)
    return (record if record and record.get("submission_sha256") == submission_sha else None), path


def graded_with_other_cases(module: Module, source: bytes, results_dir: Path) -> bool:
    """Whether this file has a record made with other cases than the course's current ones (the
    module's cases changed since it was graded)."""
    current = record_path(results_dir, module, sha256(source), cases_hash(module))
    return any(path != current for path in current.parent.glob(f"{sha256(source)}-*.json"))


def update_index(results_dir: Path, graded: list) -> None:
    """Add each graded (submissions, record, record path, error) to ``students.json``."""
    path = results_dir / "students.json"
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError):
        index = {}
    for outcome in graded:
        for submission in outcome.submissions:
            entry = index.setdefault(submission.student, {})
            if outcome.record is None:
                entry[submission.module.id] = {"error": outcome.error}
                continue
            totals = outcome.record["totals"]
            entry[submission.module.id] = {
                "record": str(outcome.record_path.relative_to(results_dir)),
                "passed": totals["passed"],
                "total": totals["total"],
            }
    write_atomically(path, json.dumps(index, indent=1, sort_keys=True) + "\n")


def run_secret(results_dir: Path) -> int:
    """The secret that seeds the hidden cases' inputs (and the timed inputs) of every grading
    whose record goes to ``results_dir``: drawn once, kept in ``<results>/secret`` (readable by
    this user only; the results folder is hidden from every sandboxed child), so that a student
    graded again, or later, meets the same inputs as the class."""
    path = Path(results_dir) / SECRET_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{secrets.randbits(SECRET_BITS)}\n")
        try:
            os.link(temporary, path)  # only if no other process stored one first
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    return _read_secret(path)


class SecretError(RuntimeError):
    """The stored secret cannot be read; the message says what to do."""


def _read_secret(path: Path) -> int:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 64:
            raise ValueError("not a small regular file")
        if path.stat().st_mode & 0o077:  # readable by others: this user's alone again, where it can be
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600)
        value = int(path.read_text().strip())
        if not 0 <= value < 1 << SECRET_BITS:
            raise ValueError("out of range")
    except (OSError, ValueError) as error:
        raise SecretError(
            f"{path} does not hold the course run's secret ({error}). Delete it to draw a new one: "
            "records made with the old one stay valid, but regrades will meet other hidden "
            "inputs than the class did."
        ) from None
    return value


def set_aside(results_dir: Path, module: Module, source: bytes) -> Path | None:
    """Move the record of this file (for the course's current cases) to ``<results>/replaced/``,
    so that the next run grades the file again; return where it went (None: there was none).
    A record shared by identical files of other students goes too: they are the same file."""
    path = record_path(results_dir, module, sha256(source), cases_hash(module))
    if not path.is_file():
        return None
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = Path(results_dir) / "replaced" / module.track / module.slug / f"{path.stem}-{stamp}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, target)
    return target
