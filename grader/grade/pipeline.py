"""``python -m grader grade``: grade a folder (or zip) of submissions end to end with nbgrader.

    collect -> run phase (sandboxed, parallel) -> released notebook beside each kernel.py ->
    nbgrader autograde -> generate_feedback -> export -> table, grades.csv, report

The run phase does the grading (``grader.grade.runphase``); nbgrader records it: each assignment
notebook's autograder cells read the run phase's record through ``grader.grade.record``. Every
nbgrader command costs seconds of start-up, so each runs once for the whole course (all
students and assignments at once), and only when something changed: a re-run with the same
submissions reuses every record and every autograded notebook.

With no source, the example submissions (``grader.authoring.example_submissions``) are graded;
with no source and a selection (``students``, ``regrade``), what the course has collected.
``students`` limits the run phase and nbgrader to those students' submissions, and ``regrade``
has their records made again (``store.set_aside``); the outputs still describe every student of
the run's modules, read from the records and the gradebook as they are. Besides report.py's
files, ``grader.grade.export`` writes ``lms.csv`` and a summary per student.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import difflib
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from grader.authoring import example_submissions
from grader.core.catalog import REPO_ROOT, Module
from grader.grade import collect, course, export, report, runphase, store
from grader.grade.deadlines import Deadline, read_timestamp
from grader.grade.phases import Phases, Result
from grader.grade.record import with_given

DEFAULT_OUT = REPO_ROOT / "build" / "grades"
EXAMPLES_DIR = REPO_ROOT / "build" / "examples"
SELECTED = ".selected"  # in the course folder: copies of the selected students' files, for the run phase
STAMP = "graded-from.txt"  # in submitted/ and autograded/: which record and notebook were used
# nbgrader autograde runs all the notebooks of a command in one notebook kernel (see _record_phase).
SHARED_KERNEL = True


class SelectionError(RuntimeError):
    """The students or modules asked for have nothing to grade; the message says what there is."""


@dataclass
class Row:
    """One student's submission of one assignment."""

    student: str
    assignment: str
    module: Module
    record: dict | None = None
    problem: str = ""  # why there is no record or no grade (refused, the grader's own error)
    scores: dict[str, float] = field(default_factory=dict)  # part -> points, from the gradebook
    feedback: Path | None = None
    submitted_at: datetime.datetime | None = None  # from nbgrader's timestamp.txt, if any

    @property
    def total(self) -> float:
        return round(sum(self.scores.values()), 2)


@dataclass
class ClassGrades:
    """What `make grade` produced for a class: a row per (student, assignment), where the outputs
    went, and how each phase went."""

    rows: list[Row]
    course_dir: Path
    out: Path
    protections: dict
    seconds: dict[str, float]  # step -> wall seconds
    children_started: int = 0
    autograded: int = 0  # notebooks nbgrader executed in this run
    grader_errors: list[str] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # not collected: (student, assignment, why)
    profile: str = ""  # the run phase's --profile table
    phases: list[Result] = field(default_factory=list)  # what each phase did, for phases.table
    unmatched: list[tuple[str, str]] = field(default_factory=list)  # files of a zip: (name, what to do)
    notes: list[str] = field(default_factory=list)  # what a regrade replaced, and whom else it concerns
    published: export.Published | None = None  # lms.csv and the students' summaries


def assemble_examples(modules: list[Module] | None = None) -> Path:
    """The bundled example students, freshly written under build/examples."""
    shutil.rmtree(EXAMPLES_DIR, ignore_errors=True)
    example_submissions.assemble(EXAMPLES_DIR, modules)
    return EXAMPLES_DIR


def grade(
    source: Path | None = None,
    course_dir: Path = course.DEFAULT_COURSE_DIR,
    out: Path = DEFAULT_OUT,
    modules: list[Module] | None = None,
    options: runphase.Options | None = None,
    progress: bool = True,
    students: list[str] | None = None,
    regrade: bool = False,
    roster: list[str] | None = None,
    deadlines: dict[str, Deadline] | None = None,
) -> ClassGrades:
    """Grade every submission in ``source`` (default: the examples; with ``students`` or
    ``regrade``, what is collected) and write the outputs. ``students`` limits the grading to
    theirs; ``regrade`` makes the selected records again. ``roster`` and ``deadlines`` go to
    ``lms.csv`` and the students' summaries (``grader.grade.export``)."""
    course_dir, out = Path(course_dir).resolve(), Path(out).resolve()
    phases = Phases(progress)
    collected_only = source is None and bool(students or regrade)
    if source is None and not collected_only:
        with phases.phase("assemble examples"):
            source = assemble_examples(modules)
    with phases.phase("generate assignments"):
        assignments = course.generate_assignments(course_dir, modules)
    if collected_only:
        collected = collect.Collected()
        phases.skip("collect", "submissions", "the course's collected submissions")
    else:
        with phases.phase("collect", unit="submissions") as bar:
            collected = collect.collect(Path(source), course_dir, modules, bar, students)
    chosen = set(_selected(course_dir, assignments, students, collected_only))
    results = course.results_dir(course_dir)
    notes = _set_aside(course_dir, results, chosen) if regrade else []
    options = options or runphase.Options()
    # The child must not see the course: the gradebook, the results, the other submissions.
    options = dataclasses.replace(options, hide=(*options.hide, course_dir))
    graded_modules = list(course.modules_by_assignment(modules).values())
    root = _stage(course_dir, chosen) if students else course_dir / "submitted"
    try:
        summary = runphase.run(root, results, graded_modules, options, progress=phases)
    finally:
        if students:
            shutil.rmtree(root, ignore_errors=True)
    rows = _rows(course_dir, assignments, summary, collected)
    picked = [row for row in rows if (row.student, row.assignment) in chosen] if students else rows
    with phases.phase("place notebooks"):
        stale = _place_notebooks(course_dir, picked)
    # One nbgrader command for the whole course; one per assignment when only some are graded.
    targets = ["*"] if modules is None else sorted({row.assignment for row in stale})
    grader_errors = _record_phase(
        course_dir, out, stale, targets, phases, students=sorted({row.student for row in stale}) if students else None
    )
    _read_gradebook(course_dir, rows)
    _read_times(course_dir, rows)
    grading = ClassGrades(
        rows,
        course_dir,
        out,
        summary.protections,
        phases.seconds,
        summary.children_started,
        len(stale),
        grader_errors,
        collected.refused,
        summary.profile_table(),
        phases.results,
        collected.unmatched,
        notes,
    )
    report.write(grading)
    _add_to_report(grading)
    grading.published = export.write(grading, roster, deadlines)
    return grading


def _selected(
    course_dir: Path, assignments: list[str], students: list[str] | None, collected_only: bool
) -> list[tuple[str, str]]:
    """The (student, assignment) pairs in submitted/ that this run grades: every one of its
    assignments, or only ``students``' (each must have one)."""
    present = [
        (folder.parent.name, folder.name)
        for folder in sorted((course_dir / "submitted").glob("*/*"))
        if folder.name in assignments and os.path.lexists(folder / "kernel.py")
    ]
    if collected_only and not present:
        raise SelectionError(
            f"Nothing of {', '.join(assignments)} is collected in {course_dir / 'submitted'} yet: "
            "pass the submissions (a folder or an LMS zip; SUBMISSIONS=... for make grade)."
        )
    if not students:
        return present
    known = sorted({student for student, _ in present})
    for student in students:
        if student not in known:
            close = difflib.get_close_matches(student, known, n=3)
            hint = (
                f" Did you mean {' or '.join(close)}?"
                if close
                else f" Students with a submission: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}."
            )
            raise SelectionError(
                f"{student!r} has no submission of {', '.join(assignments)} in "
                f"{course_dir / 'submitted'}: check the name, or collect theirs first.{hint}"
            )
    return [(student, assignment) for student, assignment in present if student in students]


def _set_aside(course_dir: Path, results: Path, chosen: set[tuple[str, str]]) -> list[str]:
    """Move the records of the chosen submissions aside, so that the run phase makes them again;
    return what the instructor should know: what went where, and which other students share a
    file (and so its new record)."""
    by_assignment = course.modules_by_assignment()
    regraded = {assignment for _, assignment in chosen}
    files = {pair: _source(course_dir, *pair) for pair in _all_submitted(course_dir) if pair[1] in regraded}
    notes = []
    for student, assignment in sorted(chosen):
        source, module = files.get((student, assignment)), by_assignment[assignment]
        moved = store.set_aside(results, module, source) if source is not None else None
        if moved is None:
            continue
        notes.append(f"Regrading {student} {assignment}: the old record is kept in {moved}.")
        sharing = sorted(
            other
            for (other, a), text in files.items()
            if a == assignment and text == source and (other, a) not in chosen
        )
        if sharing:
            notes.append(
                f"  {', '.join(sharing)} handed in the same file: the new record is theirs too, and "
                "their gradebook entries follow it the next time they are graded."
            )
    return notes


def _all_submitted(course_dir: Path) -> list[tuple[str, str]]:
    return [(folder.parent.name, folder.name) for folder in sorted((course_dir / "submitted").glob("*/*"))]


def _source(course_dir: Path, student: str, assignment: str) -> bytes | None:
    try:
        return store.read_source(collect.submitted_dir(course_dir, student, assignment) / "kernel.py")
    except (OSError, ValueError):
        return None


def _stage(course_dir: Path, chosen: set[tuple[str, str]]) -> Path:
    """A folder holding copies of only the chosen submissions, for the run phase to grade (the
    same bytes: the same records)."""
    root = course_dir / SELECTED
    shutil.rmtree(root, ignore_errors=True)
    for student, assignment in sorted(chosen):
        original = collect.submitted_dir(course_dir, student, assignment) / "kernel.py"
        copy = root / student / assignment / "kernel.py"
        copy.parent.mkdir(parents=True)
        if original.is_symlink():  # refused by the run phase, as it would be in submitted/
            copy.symlink_to(os.readlink(original))
        else:
            shutil.copyfile(original, copy)
    return root


def _read_times(course_dir: Path, rows: list[Row]) -> None:
    """Each row's submission time, from nbgrader's timestamp.txt beside the kernel.py."""
    for row in rows:
        row.submitted_at = read_timestamp(collect.submitted_dir(course_dir, row.student, row.assignment))


def extra_lines(grading: ClassGrades) -> list[str]:
    """What the grades table does not show: files of a zip named for no assignment, and what a
    regrade replaced."""
    lines = []
    if grading.unmatched:
        lines += ["", "Files in the zip named for no assignment, so not collected:"]
        lines += [f"  {name}: {what}" for name, what in grading.unmatched]
    if grading.notes:
        lines += ["", *grading.notes]
    return lines


def _add_to_report(grading: ClassGrades) -> None:
    """``extra_lines`` at the end of report.md, under a heading of their own."""
    lines = extra_lines(grading)
    if not lines:
        return
    path = grading.out / "report.md"
    text = path.read_text() if path.is_file() else ""
    path.write_text(text + "\n## Not collected, and regrades\n\n```" + "\n".join(lines) + "\n```\n")


def _output(course_dir: Path, folder: str, row: Row, suffix: str) -> Path:
    """The notebook (``.ipynb``) or page (``.html``) nbgrader writes for ``row`` in ``folder``."""
    return course_dir / folder / row.student / row.assignment / f"{row.assignment}{suffix}"


def _record_phase(
    course_dir: Path,
    out: Path,
    stale: list[Row],
    targets: list[str],
    phases: Phases,
    shared_kernel: bool | None = None,
    students: list[str] | None = None,
) -> list[str]:
    """nbgrader autograde, generate_feedback and export, where anything changed; return the
    grader errors found in the autograded notebooks. With ``students``, autograde and feedback
    run for theirs only (a command each: nbgrader takes one student at a time), so that no other
    student's gradebook entry changes.

    With ``shared_kernel`` (default: ``SHARED_KERNEL``), each autograde command runs all its
    notebooks in one notebook kernel (``grader.grade.autograde``) instead of one kernel each:
    the same outputs, grades and feedback, in a fraction of the time.

    Each step's bar follows nbgrader's log as it runs; its count is then what nbgrader wrote."""
    grader_errors: list[str] = []
    export = out / "nbgrader-grades.csv"
    if stale:
        shared = SHARED_KERNEL if shared_kernel is None else shared_kernel
        arguments = course.shared_kernel_arguments() if shared else []
        with phases.phase("autograde", len(stale), "notebooks") as bar:
            for target in _each_student(targets, students):
                course.nbgrader(course_dir, "autograde", *target, *arguments, check=False, on_item=bar.advance)
            bar.finish(sum(_output(course_dir, "autograded", row, ".ipynb").is_file() for row in stale))
        grader_errors = _scrub_errors(course_dir, stale)
    else:
        phases.skip("autograde", "notebooks", "nothing changed")
    if stale or not export.is_file():
        with phases.phase("feedback", len(stale), "feedback pages") as bar:
            for target in _each_student(targets, students):
                course.nbgrader(course_dir, "generate_feedback", *target, check=False, on_item=bar.advance)
            bar.finish(sum(_output(course_dir, "feedback", row, ".html").is_file() for row in stale))
        with phases.phase("export", unit="grades") as bar:
            out.mkdir(parents=True, exist_ok=True)
            course.nbgrader(course_dir, "export", f"--to={export}")
            with open(export, newline="") as handle:  # a row per student and assignment, after a header
                bar.finish(max(0, sum(1 for _ in csv.reader(handle)) - 1))
    else:
        phases.skip("feedback", "feedback pages", "nothing changed")
        phases.skip("export", "grades", "nothing changed")
    return grader_errors


def _each_student(targets: list[str], students: list[str] | None) -> list[tuple[str, ...]]:
    """The arguments of one nbgrader command per assignment target, and per student if given."""
    if students is None:
        return [(target,) for target in targets]
    return [(target, f"--student={student}") for target in targets for student in students]


def _rows(
    course_dir: Path, assignments: list[str], summary: runphase.RunSummary, collected: collect.Collected
) -> list[Row]:
    by_assignment = course.modules_by_assignment()
    outcomes = {(s.student, s.module.id): outcome for outcome in summary.outcomes for s in outcome.submissions}
    starting: dict[str, dict | None] = {}  # module id -> its starting kernel's record in this results folder
    rows = []
    for folder in sorted((course_dir / "submitted").glob("*/*")):
        student, assignment = folder.parent.name, folder.name
        if assignment not in assignments or not (folder / "kernel.py").is_file():
            continue
        row = Row(student, assignment, by_assignment[assignment])
        outcome = outcomes.get((student, row.module.id))
        if outcome is not None:
            row.record, row.problem = outcome.record, outcome.error or ""
        else:  # not graded in this run (another student was selected): its record as it is
            source = _source(course_dir, student, assignment)
            row.record = None if source is None else store.existing_record(row.module, source, summary.results_dir)[0]
            if row.record is None and source is not None:
                if store.graded_with_other_cases(row.module, source, summary.results_dir):
                    row.problem = f"graded with earlier cases: make grade M={row.module.id} grades it again"
        if row.record is not None:  # the cases the starting kernel passes, as the notebook's cells see them
            if row.module.id not in starting:
                starting[row.module.id] = store.starting_record(summary.results_dir, row.module)
            row.record = with_given(row.record, starting[row.module.id])
        rows.append(row)
    for student, assignment, why in collected.refused:
        if not any(r.student == student and r.assignment == assignment for r in rows):
            rows.append(Row(student, assignment, by_assignment[assignment], problem=why))
    return sorted(rows, key=lambda r: (r.student, r.assignment))


def _stamp(row: Row, notebook: bytes) -> str:
    """What an autograded notebook was made from: the record (its file, cases and when it was
    made, so that a record made again, by a regrade, is autograded again) and the notebook."""
    record = row.record or {}
    return json.dumps(
        {
            "submission": record.get("submission_sha256"),
            "cases": record.get("cases_sha256"),
            "graded_at": record.get("graded_at"),
            "notebook": hashlib.sha256(notebook).hexdigest(),
        },
        sort_keys=True,
    )


def _place_notebooks(course_dir: Path, rows: list[Row]) -> list[Row]:
    """Put the released notebook beside each kernel.py (whatever the learner handed in is
    replaced); return the rows whose autograded notebook is missing or out of date."""
    stale = []
    for row in rows:
        submitted = collect.submitted_dir(course_dir, row.student, row.assignment)
        if not (submitted / "kernel.py").is_file():
            continue
        notebook = course.released_notebook(course_dir, row.assignment).read_bytes()
        (submitted / f"{row.assignment}.ipynb").write_bytes(notebook)
        stamp = _stamp(row, notebook)
        (submitted / STAMP).write_text(stamp)
        autograded = course_dir / "autograded" / row.student / row.assignment
        done = autograded / STAMP
        if not (autograded / f"{row.assignment}.ipynb").is_file() or not done.is_file() or done.read_text() != stamp:
            shutil.rmtree(autograded, ignore_errors=True)
            shutil.rmtree(course_dir / "feedback" / row.student / row.assignment, ignore_errors=True)
            stale.append(row)
    return stale


def _scrub_errors(course_dir: Path, rows: list[Row]) -> list[str]:
    """Replace any error output (a traceback) in the autograded notebooks with one line, so that
    feedback never shows grader internals; return what was replaced, for the instructor."""
    import nbformat

    found = []
    for row in rows:
        path = _output(course_dir, "autograded", row, ".ipynb")
        if not path.is_file():
            found.append(
                f"{row.student} {row.assignment}: nbgrader did not autograde it "
                f"(see {course_dir / 'logs' / 'nbgrader-autograde.log'})"
            )
            continue
        notebook = nbformat.read(str(path), as_version=4)
        changed = False
        for cell in notebook.cells:
            for index, output in enumerate(cell.get("outputs", [])):
                if output.get("output_type") == "error":
                    found.append(
                        f"{row.student} {row.assignment} cell {cell.get('id')}: "
                        f"{output.get('ename')}: {output.get('evalue')}"
                    )
                    cell.outputs[index] = nbformat.v4.new_output(
                        "stream",
                        name="stdout",
                        text="The grader could not run this cell; your instructor "
                        "has been told. It scores 0 points for now.\n",
                    )
                    changed = True
        if changed:
            nbformat.write(notebook, str(path))
    return found


def _read_gradebook(course_dir: Path, rows: list[Row]) -> None:
    """Each row's points per part, and its feedback file, as nbgrader recorded them."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}", course.COURSE_ID) as gradebook:
        for row in rows:
            try:
                notebook = gradebook.find_submission_notebook(row.assignment, row.assignment, row.student)
            except MissingEntry:
                continue
            row.scores = {grade.name: float(grade.score) for grade in notebook.grades}
            feedback = _output(course_dir, "feedback", row, ".html")
            row.feedback = feedback if feedback.is_file() else None
