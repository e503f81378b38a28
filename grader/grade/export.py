"""The grades to publish: ``lms.csv`` for an LMS gradebook, and one summary a student can be sent.

``lms.csv`` has a row per student and these columns, in this order (docs/instructors.md):

    student, <one per module of the run, in course order>, total, out_of, late_penalty, late,
    missing, notes

A module's cell holds the points nbgrader gave (``Row.scores``) less its late penalty, to two
decimals; ``out_of`` adds up what each module is out of, which is what was graded
(``scoring.graded_parts``: performance that was not graded, on a CPU, is left out, never counted
as 0). Without a GPU, a module whose starting kernel already passes every case is not graded at
all (0 of 0: only speed shows the work): its cell is left empty, counted nowhere, and ``notes``
says why. A module a student did not hand in is 0, named in ``missing``; with a roster, students who
handed in nothing get such a row too, and a student who is not on it is named in ``notes``. A
submission with no grade (a grader error) is left empty and counted nowhere, with the reason in
``notes``, so that it is fixed before grades are published rather than published as 0.

Late penalties (``grader.grade.deadlines``) are a percent of the points earned per day late; they
change these files only, never nbgrader's gradebook. ``students/<student>.md`` gives the same
numbers per module with the reason points were lost and where the feedback page is.
"""

from __future__ import annotations

import csv
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grader.grade import course, report
from grader.grade.deadlines import Deadline
from grader.grade.scoring import NOT_GRADED_HERE, graded_parts, no_work_reason, not_graded_here, points

LMS_CSV = "lms.csv"
STUDENTS_DIR = "students"
TOTAL_COLUMNS = ("total", "out_of", "late_penalty", "late", "missing", "notes")
MAX_ROSTER_BYTES = 10 << 20


class RosterError(ValueError):
    """The roster cannot be read; the message says what it should look like."""


@dataclass
class Entry:
    """One student's one module, as published."""

    student: str
    assignment: str
    row: object | None  # pipeline.Row; None: nothing handed in
    out_of: int
    earned: float | None = None  # nbgrader's points; None: no grade
    hours_late: float | None = None  # None: no deadline, or no submission time
    deadline: Deadline | None = None

    @property
    def missing(self) -> bool:
        return self.row is None

    @property
    def not_graded_here(self) -> bool:
        """Graded, but no part could show the work on this machine (``scoring.not_graded_here``)."""
        return self.row is not None and not_graded_here(self.row.record, self.row.module.track)

    @property
    def penalty_percent(self) -> float:
        if self.deadline is None or self.hours_late is None:
            return 0.0
        return self.deadline.penalty_percent(self.hours_late)

    @property
    def penalty(self) -> float:
        """The points a late submission loses."""
        return round((self.earned or 0.0) * self.penalty_percent / 100, 2)

    @property
    def points(self) -> float | None:
        """What is published: the points earned less the late penalty (None: no grade, or not
        graded on this machine)."""
        if self.earned is None or self.not_graded_here:
            return None
        return round(self.earned - self.penalty, 2)


@dataclass
class Published:
    """What ``publish`` decided: the entries, and what the instructor should look at."""

    students: list[str]
    assignments: list[str]
    entries: dict[tuple[str, str], Entry]
    not_on_roster: list[str] = field(default_factory=list)
    roster: list[str] | None = None
    lms_csv: Path | None = None
    summaries: Path | None = None

    def of(self, student: str) -> list[Entry]:
        return [self.entries[student, a] for a in self.assignments if (student, a) in self.entries]

    @property
    def missing(self) -> list[Entry]:
        return [e for e in self.entries.values() if e.missing]

    @property
    def late(self) -> list[Entry]:
        return [e for e in self.entries.values() if e.hours_late]

    @property
    def ungraded(self) -> list[Entry]:
        return [e for e in self.entries.values() if not e.missing and e.earned is None]


# ----------------------------------------------------------------------------------------------
# The roster
# ----------------------------------------------------------------------------------------------


def read_roster(path: Path) -> list[str]:
    """The student ids in ``path``: one per line, or a CSV whose header has a ``student`` column
    (an LMS's roster export, say). Blank lines and lines starting with # are skipped."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size > MAX_ROSTER_BYTES:
        raise RosterError(
            f"The roster {path} is not a file (or is over {MAX_ROSTER_BYTES >> 20} MiB): give a "
            "file with one student id per line, or a CSV with a student column."
        )
    with open(path, newline="", encoding="utf-8-sig") as handle:
        lines = [row for row in csv.reader(handle) if row and row[0].strip() and not row[0].startswith("#")]
    if not lines:
        raise RosterError(
            f"The roster {path} names no student: give one student id per line, or a CSV with a student column."
        )
    header = [cell.strip().lower() for cell in lines[0]]
    if "student" in header:
        column = header.index("student")
        ids = [row[column].strip() for row in lines[1:] if len(row) > column and row[column].strip()]
    elif len(lines[0]) > 1:
        raise RosterError(
            f"The roster {path} has several columns but none is called student: name the column "
            "of student ids student, or give one id per line."
        )
    else:
        ids = [row[0].strip() for row in lines]
    return list(dict.fromkeys(ids))


# ----------------------------------------------------------------------------------------------
# What is published
# ----------------------------------------------------------------------------------------------


def out_of(row) -> int:
    """What a row's points are out of: the parts that were graded."""
    return sum(graded_parts(row.record, row.module.track).values())


def _usual_out_of(rows: list) -> int:
    """What a module that was not handed in is out of: what most of its graded submissions were
    out of in this run (on a CPU, without performance), else its full points."""
    counts = Counter(out_of(row) for row in rows if row.scores)
    if counts:
        return max(counts.items(), key=lambda item: (item[1], item[0]))[0]
    return sum(points(rows[0].module.track).values())


def _course_order(assignments) -> list[str]:
    order = {name: index for index, name in enumerate(course.modules_by_assignment())}
    return sorted(assignments, key=lambda a: (order.get(a, len(order)), a))


def publish(rows: list, roster: list[str] | None = None, deadlines: dict[str, Deadline] | None = None) -> Published:
    """The entries to publish from the run's rows (``pipeline.Row``): every student of the rows
    and the roster, every module with a submission among the rows."""
    assignments = _course_order({row.assignment for row in rows})
    by_cell = {(row.student, row.assignment): row for row in rows}
    students = sorted({row.student for row in rows} | set(roster or []))
    usual = {a: _usual_out_of([row for row in rows if row.assignment == a]) for a in assignments}
    entries = {}
    for student in students:
        for assignment in assignments:
            row = by_cell.get((student, assignment))
            entries[student, assignment] = _entry(
                student, assignment, row, usual[assignment], (deadlines or {}).get(assignment)
            )
    not_on_roster = sorted({row.student for row in rows} - set(roster)) if roster is not None else []
    return Published(students, assignments, entries, not_on_roster, roster)


def _entry(student: str, assignment: str, row, usual: int, deadline: Deadline | None) -> Entry:
    if row is None:
        return Entry(student, assignment, None, usual, earned=0.0, deadline=deadline)
    entry = Entry(student, assignment, row, out_of(row), deadline=deadline)
    if row.scores:
        entry.earned = row.total
    submitted = getattr(row, "submitted_at", None)
    if deadline is not None and submitted is not None:
        entry.hours_late = deadline.hours_late(submitted)
    return entry


def _number(value: float) -> str:
    return f"{value:.2f}"


def _notes(published: Published, student: str) -> list[str]:
    notes = [f"not on the roster: check the id {student!r}"] if student in published.not_on_roster else []
    for entry in published.of(student):
        if entry.missing:
            continue
        if entry.earned is None:
            notes.append(f"{entry.assignment}: no grade ({report.reason(entry.row)}); grade it again before publishing")
        elif entry.not_graded_here:
            notes.append(f"{entry.assignment}: {NOT_GRADED_HERE}, as {no_work_reason()}")
        elif entry.hours_late:
            notes.append(
                f"{entry.assignment}: {entry.hours_late:.2f} h late, -{_number(entry.penalty)} points "
                f"({entry.penalty_percent:g}%)"
            )
        elif entry.deadline is not None and entry.hours_late is None:
            notes.append(f"{entry.assignment}: no submission time, so no late penalty")
    return notes


def lms_rows(published: Published) -> list[list[str]]:
    """The header and a row per student of ``lms.csv``."""
    table = [["student", *published.assignments, *TOTAL_COLUMNS]]
    for student in published.students:
        entries = published.of(student)
        counted = [e for e in entries if e.points is not None]
        hours = [e.hours_late for e in entries if e.hours_late is not None]
        table.append(
            [
                student,
                *("" if e.points is None else _number(e.points) for e in entries),
                _number(sum(e.points for e in counted)),
                _number(sum(e.out_of for e in counted)),
                _number(sum(e.penalty for e in counted)),
                _number(max(hours)) if hours else "",
                " ".join(e.assignment for e in entries if e.missing),
                "; ".join(_notes(published, student)),
            ]
        )
    return table


def write_lms(published: Published, path: Path) -> None:
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(lms_rows(published))


# ----------------------------------------------------------------------------------------------
# A summary per student
# ----------------------------------------------------------------------------------------------


def summary_name(student: str) -> str:
    """A file name for ``student``'s summary (ids from a folder source may hold any character)."""
    name = re.sub(r"[^A-Za-z0-9._@-]", "_", student).lstrip(".")
    return f"{name or 'student'}.md"


def _late_cell(entry: Entry) -> tuple[str, str]:
    if entry.hours_late is None:
        return "", ""
    if not entry.hours_late:
        return "on time", ""
    return f"{entry.hours_late:.2f} h", f"-{_number(entry.penalty)} ({entry.penalty_percent:g}%)"


def _module_id(assignment: str) -> str:
    module = course.modules_by_assignment().get(assignment)
    return module.id if module is not None else assignment


def _summary_line(entry: Entry) -> str:
    module = _module_id(entry.assignment)
    if entry.missing:
        return f"| {module} | 0.00 | {entry.out_of} | | | no submission |"
    if entry.earned is None:
        why = report.reason(entry.row) or "not graded yet"
        return f"| {module} | no grade yet | {entry.out_of} | | | {why.replace('|', '/')} |"
    if entry.not_graded_here:
        return f"| {module} | {NOT_GRADED_HERE} | {entry.out_of} | | | {NOT_GRADED_HERE}: see below |"
    late, penalty = _late_cell(entry)
    why = report.reason(entry.row).replace("|", "/")
    return f"| {module} | {_number(entry.points)} | {entry.out_of} | {late} | {penalty} | {why} |"


def summary(published: Published, student: str, course_dir: Path) -> str:
    """``student``'s summary, in Markdown that reads as plain text too."""
    entries = published.of(student)
    counted = [e for e in entries if e.points is not None]
    total, possible = sum(e.points for e in counted), sum(e.out_of for e in counted)
    penalty = sum(e.penalty for e in counted)
    lines = [
        f"# Grades of {student}",
        "",
        "| module | points | out of | late | late penalty | why points were lost |",
        "|---|---|---|---|---|---|",
        *(_summary_line(e) for e in entries),
        f"| total | {_number(total)} | {possible} | | {f'-{_number(penalty)}' if penalty else ''} | |",
        "",
    ]
    lines += _summary_notes(entries)
    lines += _feedback_lines(entries, course_dir)
    return "\n".join(lines).rstrip() + "\n"


def _summary_notes(entries: list[Entry]) -> list[str]:
    lines = []
    left_out = {
        e.row.module.id
        for e in entries
        if e.row is not None
        and e.earned is not None
        and not e.not_graded_here
        and e.out_of < sum(points(e.row.module.track).values())
    }
    if left_out:
        lines += [
            "Performance was not graded for " + ", ".join(sorted(left_out)) + " (it needs a CUDA GPU): "
            "those modules are out of their correctness points only.",
            "",
        ]
    nothing = sorted(e.row.module.id for e in entries if e.earned is not None and e.not_graded_here)
    if nothing:
        lines += [
            f"Not graded on this machine ({NOT_GRADED_HERE}): {', '.join(nothing)}, as {no_work_reason()}.",
            "",
        ]
    for entry in entries:
        if entry.hours_late and entry.deadline is not None:
            deadline = entry.deadline
            lines += [
                f"{_module_id(entry.assignment)} was due {deadline.due.isoformat(' ')} and handed in "
                f"{entry.hours_late:.2f} hours late: each day or part of a day costs "
                f"{deadline.penalty_per_day:g}% of the points earned, at most {deadline.cap:g}%.",
                "",
            ]
    return lines


def _feedback_lines(entries: list[Entry], course_dir: Path) -> list[str]:
    pages = [(e.row.module.id, e.row.feedback) for e in entries if e.row is not None and e.row.feedback]
    if not pages:
        return []
    lines = ["Feedback, a page per module (the grader's report on every case):", ""]
    for module, page in pages:
        where = os.path.relpath(page, course_dir)
        lines.append(f"- {module}: {Path(page).name} (in the course folder: {where})")
    return lines


def write_summaries(published: Published, folder: Path, course_dir: Path) -> None:
    """One summary per student in ``folder``; summaries of an earlier run that this run has no
    student for are removed, so that the folder holds only what this run published."""
    folder.mkdir(parents=True, exist_ok=True)
    written = set()
    for student in published.students:
        name = summary_name(student)
        while name in written:  # two ids that differ only in characters a file name cannot hold
            name = name[:-3] + "_.md"
        (folder / name).write_text(summary(published, student, course_dir))
        written.add(name)
    for old in folder.glob("*.md"):
        if old.name not in written:
            old.unlink()


def write(grading, roster: list[str] | None = None, deadlines: dict[str, Deadline] | None = None) -> Published:
    """``lms.csv`` and ``students/`` in ``grading.out``, from the run's rows."""
    published = publish(grading.rows, roster, deadlines)
    grading.out.mkdir(parents=True, exist_ok=True)
    published.lms_csv = grading.out / LMS_CSV
    published.summaries = grading.out / STUDENTS_DIR
    write_lms(published, published.lms_csv)
    write_summaries(published, published.summaries, grading.course_dir)
    return published
