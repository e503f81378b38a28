"""Bring submissions into the nbgrader course: ``submitted/<student>/<track>-<slug>/kernel.py``.

Two kinds of source:

- a folder of ``<student>/<track>/<slug>/kernel.py`` or ``<student>/<track>-<slug>/kernel.py``
  (the run phase's ``find_submissions`` reads both layouts);
- an LMS-style zip of files named ``<student>_<track>-<slug>_kernel.py``, handed to
  ``nbgrader zip_collect`` with a FileNameCollector regular expression per assignment. A file of
  the zip that is named otherwise is listed in ``Collected.unmatched`` with the name it should
  have (the closest assignment, and the student it would belong to), never skipped silently.

Only ``kernel.py`` is taken: nothing else a learner hands in reaches the course, so no file of
theirs can sit next to the notebook (where a ``torch.py`` would shadow the real one). A link, a
folder or an oversized file is refused with a message, not followed. Each submission's time goes
to nbgrader's ``timestamp.txt`` beside it (``grader.grade.deadlines``): the zip entry's time, or
for a folder the ``timestamp.txt`` beside the kernel.py, else the kernel.py's modification time.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
import shutil
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.catalog import Module
from grader.grade import course, deadlines
from grader.grade.phases import Bar, quiet_bar
from grader.grade.store import MAX_SOURCE_BYTES, find_submissions

KEPT = ("kernel.py", "timestamp.txt")  # and the assignment's notebook, in submitted/<student>/<assignment>/
MAX_ZIP_MEMBERS = 20_000
MAX_ZIP_BYTES = 512 << 20
ARCHIVES = (".zip", ".gz", ".tar", ".tgz", ".bz2", ".xz")
# What a student id may hold in a zip's file names (as _zip_pattern takes them).
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # a zip entry's earliest time: written when the time is unknown
EXTENDED_TIMESTAMP = 0x5455  # the zip extra field that holds the modification time in UTC


class CollectError(RuntimeError):
    """The source cannot be collected; the message says why and what to do."""


@dataclass
class Collected:
    submissions: list[tuple[str, str]] = field(default_factory=list)  # (student, assignment)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # (student, assignment, why)
    # Files of a zip named for no assignment of the course: (name in the zip, what to do).
    unmatched: list[tuple[str, str]] = field(default_factory=list)


def submitted_dir(course_dir: Path, student: str, assignment: str) -> Path:
    return Path(course_dir) / "submitted" / student / assignment


def collect(
    source: Path,
    course_dir: Path,
    modules: list[Module] | None = None,
    bar: Bar | None = None,
    students: list[str] | None = None,
) -> Collected:
    """Copy the submissions in ``source`` (a folder or a zip) into the course's submitted/;
    ``bar`` counts them (a refused one tagged as such). With ``students``, only theirs are
    collected: the other students' files in submitted/ stay as they were."""
    source, bar = Path(source), bar or quiet_bar()
    assignments = course.modules_by_assignment(modules)
    wanted = set(students) if students else None
    if source.is_file() and zipfile.is_zipfile(source):
        collected = _collect_zip(source, Path(course_dir), list(assignments), wanted)
        bar.total = len(collected.submissions) + len(collected.refused)
        bar.advance(len(collected.submissions))
        bar.advance(len(collected.refused), tag="refused")
        return collected
    if source.is_dir():
        return _collect_folder(source, Path(course_dir), list(assignments.values()), bar, wanted)
    raise CollectError(
        f"{source} is neither a folder of submissions nor a zip file. Give a folder of "
        "<student>/<track>/<slug>/kernel.py (or <student>/<track>-<slug>/kernel.py), "
        "or an LMS zip of <student>_<track>-<slug>_kernel.py files."
    )


def _refusal(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file():
        return "kernel.py is a link or not a regular file, so it was not collected: ask for the file itself"
    if path.stat().st_size > MAX_SOURCE_BYTES:
        return (
            f"kernel.py is larger than {MAX_SOURCE_BYTES >> 10} KiB, so it was not collected: ask for "
            "the kernel file alone, without data pasted into it"
        )
    return None


def _collect_folder(
    source: Path, course_dir: Path, modules: list[Module], bar: Bar, students: set[str] | None = None
) -> Collected:
    collected = Collected()
    found = [s for s in find_submissions(source, modules) if students is None or s.student in students]
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
        deadlines.write_timestamp(folder, _folder_time(submission.path))
        collected.submissions.append((submission.student, assignment))
        bar.advance(note=f"{submission.student} {assignment}")
    _keep_only_submissions(course_dir)
    return collected


def _folder_time(kernel: Path) -> dt.datetime:
    """When a kernel.py of a folder source was handed in: the ``timestamp.txt`` beside it (as
    nbgrader's own submitted/ folders have), else the file's modification time."""
    given = deadlines.read_timestamp(kernel.parent)
    if given is not None:
        return given
    return dt.datetime.fromtimestamp(kernel.stat().st_mtime, dt.timezone.utc).replace(microsecond=0)


def _zip_members(archive: Path) -> list[zipfile.ZipInfo]:
    """The files of the zip (not its folders), after checking that it is safe to unpack."""
    with zipfile.ZipFile(archive) as handle:
        members = handle.infolist()
    if len(members) > MAX_ZIP_MEMBERS or sum(m.file_size for m in members) > MAX_ZIP_BYTES:
        raise CollectError(
            f"{archive} holds more than {MAX_ZIP_MEMBERS} files or {MAX_ZIP_BYTES >> 20} MiB "
            "unpacked; split it, or unpack it and pass the folder."
        )
    nested = [m.filename for m in members if m.filename.lower().endswith(ARCHIVES)]
    if nested:
        raise CollectError(
            f"{archive} contains archives ({', '.join(nested[:3])}); unpack those first and "
            "zip their kernel.py files, or pass a folder instead."
        )
    return [m for m in members if not m.is_dir()]


def _zip_pattern(assignment: str, students: set[str] | None = None) -> re.Pattern:
    """<student>_<assignment>_kernel.py, anywhere in the unpacked tree (nbgrader matches the path);
    with ``students``, only theirs."""
    student = "|".join(re.escape(s) for s in sorted(students)) if students else r"[A-Za-z0-9][A-Za-z0-9._@-]*?"
    return re.compile(rf".*/(?P<student_id>{student})_{re.escape(assignment)}_(?P<file_id>kernel)\.py$")


def _owner(member: zipfile.ZipInfo, assignment: str, students: set[str] | None = None) -> str | None:
    """The student whose kernel.py of ``assignment`` ``member`` is, if it is one."""
    match = _zip_pattern(assignment, students).match("/" + Path(member.filename).name)
    return match["student_id"] if match else None


def _collect_zip(
    archive: Path, course_dir: Path, assignments: list[str], students: set[str] | None = None
) -> Collected:
    members = _zip_members(archive)
    collected = Collected(unmatched=unmatched(members, list(course.modules_by_assignment())))
    _refuse_duplicates(archive, members, assignments, students)
    owners = {
        (owner, assignment): member
        for assignment in assignments
        for member in members
        if (owner := _owner(member, assignment, students))
    }
    found = sorted({assignment for _, assignment in owners})
    if not found:
        raise CollectError(_nothing_found(archive, assignments, collected.unmatched, students))
    for assignment in found:
        inbox = course_dir / "downloaded" / assignment / "archive"
        shutil.rmtree(inbox, ignore_errors=True)
        inbox.mkdir(parents=True)
        shutil.copyfile(archive, inbox / archive.name)
        course.nbgrader(
            course_dir,
            "zip_collect",
            assignment,
            "--force",
            f"--FileNameCollectorPlugin.named_regexp={_zip_pattern(assignment, students).pattern}",
        )
    for (student, assignment), member in sorted(owners.items()):
        folder = submitted_dir(course_dir, student, assignment)
        why = _refusal(folder / "kernel.py")
        if why:
            collected.refused.append((student, assignment, why))
            continue
        collected.submissions.append((student, assignment))
        when = _entry_time(member)
        if when is not None:
            deadlines.write_timestamp(folder, when)
    _keep_only_submissions(course_dir)
    return collected


def _refuse_duplicates(
    archive: Path, members: list[zipfile.ZipInfo], assignments: list[str], students: set[str] | None
) -> None:
    """Two files for one student and assignment (in two folders of the zip): nbgrader cannot tell
    which counts, so the instructor must."""
    seen: dict[tuple[str, str], str] = {}
    for assignment in assignments:
        for member in members:
            owner = _owner(member, assignment, students)
            if owner is None:
                continue
            if (owner, assignment) in seen:
                raise CollectError(
                    f"{archive} holds two files for {owner}'s {assignment}: "
                    f"{seen[owner, assignment]} and {member.filename}. Keep the one to grade, "
                    "zip again and collect."
                )
            seen[owner, assignment] = member.filename


def _nothing_found(
    archive: Path, assignments: list[str], misnamed: list[tuple[str, str]], students: set[str] | None
) -> str:
    whose = f" of {', '.join(sorted(students))}" if students else ""
    text = (
        f"No file{whose} in {archive} is named <student>_<assignment>_kernel.py for an assignment "
        f"of this run ({', '.join(assignments)})."
    )
    if misnamed:
        text += " Files named otherwise:\n" + "\n".join(f"  {name}: {advice}" for name, advice in misnamed[:10])
    return text


def _entry_time(member: zipfile.ZipInfo) -> dt.datetime | None:
    """When a zip entry was last modified: in UTC where the zip says it (the extended timestamp
    field, which Info-ZIP and most tools write), else the entry's local time without an offset
    (read in the deadline's timezone); None when the zip gives no time."""
    extra = member.extra
    while len(extra) >= 4:
        kind, size = struct.unpack("<HH", extra[:4])
        body, extra = extra[4 : 4 + size], extra[4 + size :]
        if kind == EXTENDED_TIMESTAMP and len(body) >= 5 and body[0] & 1:
            seconds = struct.unpack("<i", body[1:5])[0]
            return dt.datetime.fromtimestamp(seconds, dt.timezone.utc)
    if tuple(member.date_time) <= ZIP_EPOCH:
        return None
    return dt.datetime(*member.date_time)


# ----------------------------------------------------------------------------------------------
# Files named for no assignment: what they probably are, and what to do
# ----------------------------------------------------------------------------------------------


def unmatched(members: list[zipfile.ZipInfo], assignments: list[str]) -> list[tuple[str, str]]:
    """(name, what to do) for each file of the zip that is no ``<student>_<assignment>_kernel.py``
    of one of ``assignments`` (the course's, so that a file of a module left out of this run
    with --module is not reported)."""
    patterns = [_zip_pattern(a) for a in assignments]
    found = []
    for member in members:
        if not any(p.match("/" + Path(member.filename).name) for p in patterns):
            found.append((member.filename, advice(member.filename, assignments)))
    return found


def advice(name: str, assignments: list[str]) -> str:
    """What to do about a file of the zip called ``name``, which no assignment's pattern took:
    the name it should have, from the closest assignment and the student part, if they parse."""
    base = Path(name).name
    if name.startswith("__MACOSX/") or base.startswith("._") or base == ".DS_Store":
        return "macOS's archive metadata, not a submission: nothing to do."
    stem, suffix = (base[:-3], ".py") if base.endswith(".py") else (base, Path(base).suffix)
    student, assignment, piece, rest = _parse(stem, assignments)
    problems = []
    if assignment is None:
        problems.append(f"{piece!r} is no assignment of this course" if piece else "it names no assignment")
    elif piece != assignment:
        problems.append(f"{piece!r} is no assignment of this course (the closest is {assignment})")
    student_id = student
    if not student:
        problems.append("it names no student")
    elif not STUDENT_ID.fullmatch(student):
        student_id = re.sub(r"[^A-Za-z0-9.@-]+", ".", student).strip(".") or "<student>"
        problems.append(f"{student!r} is no student id (letters, digits and . _ @ - only: no spaces)")
    target = f"{student_id or '<student>'}_{assignment or '<assignment>'}_kernel.py"
    whose = f" ({student_id}'s {assignment})" if student and assignment else ""
    if student_id != student:
        whose = f" (or with the student's LMS login in place of {student_id})"
    if suffix != ".py" or (rest and not rest.lower().startswith("kernel")):
        return (
            f"only kernel.py files are graded, so this one was left out: nothing to do, unless it is the "
            f"kernel to grade; then rename it to {target}{whose} and collect again."
        )
    if rest.lower() != "kernel":
        problems.append(f"it ends in {rest!r} instead of kernel" if rest else "it does not end in _kernel.py")
    return f"{'; '.join(problems)}: rename it to {target}{whose} and collect again."


def _parse(stem: str, assignments: list[str]) -> tuple[str, str | None, str, str]:
    """(student part, closest assignment or None, the part taken for the assignment, the part
    after it) of a file name without ``.py``: the assignment part is the piece between
    underscores most like an assignment's name, and what comes before it the student's."""
    pieces = stem.split("_")
    for index, piece in enumerate(pieces):  # "frank-optimization-03": the track and number say which
        named = _by_number(piece, assignments)
        if named is not None:
            head, assignment = named
            student = "_".join(pieces[:index] + ([head] if head else []))
            return student, assignment, piece, "_".join(pieces[index + 1 :])
    best, best_index, best_ratio = None, None, 0.0
    for index, piece in enumerate(pieces):
        match = difflib.get_close_matches(piece.lower(), assignments, n=1, cutoff=0.6)
        ratio = difflib.SequenceMatcher(None, piece.lower(), match[0]).ratio() if match else 0.0
        if match and ratio >= best_ratio:
            best, best_index, best_ratio = match[0], index, ratio
    if best_index is not None:
        return "_".join(pieces[:best_index]), best, pieces[best_index], "_".join(pieces[best_index + 1 :])
    if len(pieces) == 1:  # "kernel", or a name that is neither a student's nor an assignment's
        return ("", None, "", pieces[0]) if pieces[0].lower().startswith("kernel") else ("", None, pieces[0], "")
    if pieces[-1].lower().startswith("kernel"):  # <student>[_<something>]_kernel
        return pieces[0], None, "_".join(pieces[1:-1]), pieces[-1]
    return pieces[0], None, "_".join(pieces[1:]), ""


def _by_number(piece: str, assignments: list[str]) -> tuple[str, str] | None:
    """(what comes before it, the assignment) where ``piece`` names exactly one assignment by its
    track and number (``optimization-03``, ``missing-elements-01``) between hyphens: a name cut short
    or run together with the student's is closest to that assignment, whatever a spelling
    distance says. None where no assignment or several are named so."""
    low, found = piece.lower(), []
    for assignment in assignments:
        prefix = re.match(r"(.+?-\d{2})(?:-|$)", assignment)
        at = low.find(prefix[1]) if prefix else -1
        end = at + len(prefix[1]) if prefix else 0
        if at >= 0 and (at == 0 or low[at - 1] == "-") and (end == len(low) or low[end] == "-"):
            found.append((piece[: max(0, at - 1)], assignment))
    return found[0] if len(found) == 1 else None


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
