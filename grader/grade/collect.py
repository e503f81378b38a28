"""Bring submissions into the nbgrader course: ``submitted/<student>/<track>-<slug>/kernel.py``.

Two kinds of source:

- a folder of ``<student>/<track>/<slug>/kernel.py`` or ``<student>/<track>-<slug>/kernel.py``
  (the run phase's ``find_submissions`` reads both layouts);
- an LMS-style zip of files named ``<student>_<track>-<slug>_kernel.py``, handed to
  ``nbgrader zip_collect`` with a FileNameCollector regular expression per assignment.

Only ``kernel.py`` is taken: nothing else a learner hands in reaches the course, so no file of
theirs can sit next to the notebook (where a ``torch.py`` would shadow the real one). A link, a
folder or an oversized file is refused with a message, not followed.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.catalog import Module
from grader.grade import course
from grader.grade.phases import Bar, quiet_bar
from grader.grade.store import MAX_SOURCE_BYTES, find_submissions

KEPT = ("kernel.py", "timestamp.txt")  # and the assignment's notebook, in submitted/<student>/<assignment>/
MAX_ZIP_MEMBERS = 20_000
MAX_ZIP_BYTES = 512 << 20
ARCHIVES = (".zip", ".gz", ".tar", ".tgz", ".bz2", ".xz")


class CollectError(RuntimeError):
    """The source cannot be collected; the message says why and what to do."""


@dataclass
class Collected:
    submissions: list[tuple[str, str]] = field(default_factory=list)  # (student, assignment)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (student, assignment, why)


def submitted_dir(course_dir: Path, student: str, assignment: str) -> Path:
    return Path(course_dir) / "submitted" / student / assignment


def collect(source: Path, course_dir: Path, modules: list[Module] | None = None, bar: Bar | None = None) -> Collected:
    """Copy the submissions in ``source`` (a folder or a zip) into the course's submitted/;
    ``bar`` counts them (a refused one tagged as such)."""
    source, bar = Path(source), bar or quiet_bar()
    assignments = course.modules_by_assignment(modules)
    if source.is_file() and zipfile.is_zipfile(source):
        collected = _collect_zip(source, Path(course_dir), list(assignments))
        bar.total = len(collected.submissions) + len(collected.refused)
        bar.advance(len(collected.submissions))
        bar.advance(len(collected.refused), tag="refused")
        return collected
    if source.is_dir():
        return _collect_folder(source, Path(course_dir), list(assignments.values()), bar)
    raise CollectError(f"{source} is neither a folder of submissions nor a zip file. Give a folder of "
                       "<student>/<track>/<slug>/kernel.py (or <student>/<track>-<slug>/kernel.py), "
                       "or an LMS zip of <student>_<track>-<slug>_kernel.py files.")


def _refusal(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file():
        return "kernel.py is a link or not a regular file, so it was not collected: ask for the file itself"
    if path.stat().st_size > MAX_SOURCE_BYTES:
        return (f"kernel.py is larger than {MAX_SOURCE_BYTES >> 10} KiB, so it was not collected: ask for "
                "the kernel file alone, without data pasted into it")
    return None


def _collect_folder(source: Path, course_dir: Path, modules: list[Module], bar: Bar) -> Collected:
    collected = Collected()
    found = find_submissions(source, modules)
    bar.total = len(found)
    for submission in found:
        assignment = course.assignment_name(submission.module)
        why = _refusal(submission.path)
        if why:
            collected.refused.append((submission.student, assignment, why))
            bar.advance(tag="refused")
            continue
        folder = submitted_dir(course_dir, submission.student, assignment)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / "kernel.py"
        if not target.is_file() or target.read_bytes() != submission.path.read_bytes():
            target.unlink(missing_ok=True)
            shutil.copyfile(submission.path, target)
        collected.submissions.append((submission.student, assignment))
        bar.advance(note=f"{submission.student} {assignment}")
    _keep_only_submissions(course_dir)
    return collected


def _zip_assignments(archive: Path, assignments: list[str]) -> list[str]:
    """The assignments with a file in the zip, after checking that it is safe to unpack."""
    with zipfile.ZipFile(archive) as handle:
        members = handle.infolist()
    if len(members) > MAX_ZIP_MEMBERS or sum(m.file_size for m in members) > MAX_ZIP_BYTES:
        raise CollectError(f"{archive} holds more than {MAX_ZIP_MEMBERS} files or {MAX_ZIP_BYTES >> 20} MiB "
                           "unpacked; split it, or unpack it and pass the folder.")
    nested = [m.filename for m in members if m.filename.lower().endswith(ARCHIVES)]
    if nested:
        raise CollectError(f"{archive} contains archives ({', '.join(nested[:3])}); unpack those first and "
                           "zip their kernel.py files, or pass a folder instead.")
    names = [Path(m.filename).name for m in members]
    return [a for a in assignments if any(_zip_pattern(a).match("/" + name) for name in names)]


def _zip_pattern(assignment: str) -> re.Pattern:
    """<student>_<assignment>_kernel.py, anywhere in the unpacked tree (nbgrader matches the path)."""
    return re.compile(rf".*/(?P<student_id>[A-Za-z0-9][A-Za-z0-9._@-]*?)_{re.escape(assignment)}_"
                      r"(?P<file_id>kernel)\.py$")


def _collect_zip(archive: Path, course_dir: Path, assignments: list[str]) -> Collected:
    found = _zip_assignments(archive, assignments)
    if not found:
        raise CollectError(f"No file in {archive} is named <student>_<assignment>_kernel.py for an assignment "
                           f"of this course ({', '.join(assignments)}).")
    for assignment in found:
        inbox = course_dir / "downloaded" / assignment / "archive"
        shutil.rmtree(inbox, ignore_errors=True)
        inbox.mkdir(parents=True)
        shutil.copyfile(archive, inbox / archive.name)
        course.nbgrader(course_dir, "zip_collect", assignment, "--force",
                        f"--FileNameCollectorPlugin.named_regexp={_zip_pattern(assignment).pattern}")
    collected = Collected()
    for assignment in found:
        for folder in sorted((course_dir / "submitted").glob(f"*/{assignment}")):
            why = _refusal(folder / "kernel.py")
            if why:
                collected.refused.append((folder.parent.name, assignment, why))
            else:
                collected.submissions.append((folder.parent.name, assignment))
    _keep_only_submissions(course_dir)
    return collected


def _keep_only_submissions(course_dir: Path) -> None:
    """Remove from submitted/ anything but kernel.py and nbgrader's timestamp (the notebook is put
    back from the release before autograding)."""
    for folder in (Path(course_dir) / "submitted").glob("*/*"):
        for path in folder.iterdir():
            if path.name not in (*KEPT, f"{folder.name}.ipynb"):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
