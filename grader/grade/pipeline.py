"""``python -m grader grade``: grade a folder (or zip) of submissions end to end with nbgrader.

    collect -> run phase (sandboxed, parallel) -> released notebook beside each kernel.py ->
    nbgrader autograde -> generate_feedback -> export -> table, grades.csv, report

The run phase does the grading (``grader.grade.runphase``); nbgrader records it: each assignment
notebook's autograder cells read the run phase's record through ``grader.grade.record``. Every
nbgrader command costs seconds of start-up, so each runs once for the whole course (all
students and assignments at once), and only when something changed: a re-run with the same
submissions reuses every record and every autograded notebook.

With no source, the example submissions (``grader.authoring.example_submissions``) are graded.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from grader.authoring import example_submissions
from grader.core.catalog import REPO_ROOT, Module
from grader.grade import collect, course, report, runphase
from grader.grade.phases import Phases, Result

DEFAULT_OUT = REPO_ROOT / "build" / "grades"
EXAMPLES_DIR = REPO_ROOT / "build" / "examples"
STAMP = "graded-from.txt"  # in submitted/ and autograded/: which record and notebook were used
# nbgrader autograde runs all the notebooks of a command in one notebook kernel (see _record_phase).
SHARED_KERNEL = True


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

    @property
    def total(self) -> float:
        return round(sum(self.scores.values()), 2)


@dataclass
class Grading:
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


def assemble_examples(modules: list[Module] | None = None) -> Path:
    """The bundled example students, freshly written under build/examples."""
    shutil.rmtree(EXAMPLES_DIR, ignore_errors=True)
    example_submissions.assemble(EXAMPLES_DIR, modules)
    return EXAMPLES_DIR


def grade(source: Path | None = None, course_dir: Path = course.DEFAULT_COURSE_DIR, out: Path = DEFAULT_OUT,
          modules: list[Module] | None = None, options: runphase.Options | None = None,
          progress: bool = True) -> Grading:
    """Grade every submission in ``source`` (default: the examples) and write the outputs."""
    course_dir, out = Path(course_dir).resolve(), Path(out).resolve()
    phases = Phases(progress)
    if source is None:
        with phases.phase("assemble examples"):
            source = assemble_examples(modules)
    with phases.phase("generate assignments"):
        assignments = course.generate_assignments(course_dir, modules)
    with phases.phase("collect", unit="submissions") as bar:
        collected = collect.collect(Path(source), course_dir, modules, bar)
    options = options or runphase.Options()
    # The child must not see the course: the gradebook, the results, the other submissions.
    options = dataclasses.replace(options, hide=(*options.hide, course_dir))
    graded_modules = list(course.modules_by_assignment(modules).values())
    summary = runphase.run(course_dir / "submitted", course.results_dir(course_dir), graded_modules,
                           options, progress=phases)
    rows = _rows(course_dir, assignments, summary, collected)
    with phases.phase("place notebooks"):
        stale = _place_notebooks(course_dir, rows)
    # One nbgrader command for the whole course; one per assignment when only some are graded.
    targets = ["*"] if modules is None else sorted({row.assignment for row in stale})
    grader_errors = _record_phase(course_dir, out, stale, targets, phases)
    _read_gradebook(course_dir, rows)
    grading = Grading(rows, course_dir, out, summary.protections, phases.seconds, summary.children_started,
                      len(stale), grader_errors, collected.refused, summary.profile_table(), phases.results)
    report.write(grading)
    return grading


def _output(course_dir: Path, folder: str, row: Row, suffix: str) -> Path:
    """The notebook (``.ipynb``) or page (``.html``) nbgrader writes for ``row`` in ``folder``."""
    return course_dir / folder / row.student / row.assignment / f"{row.assignment}{suffix}"


def _record_phase(course_dir: Path, out: Path, stale: list[Row], targets: list[str], phases: Phases,
                  shared_kernel: bool | None = None) -> list[str]:
    """nbgrader autograde, generate_feedback and export, where anything changed; return the
    grader errors found in the autograded notebooks.

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
            for target in targets:
                course.nbgrader(course_dir, "autograde", target, *arguments, check=False, on_item=bar.advance)
            bar.finish(sum(_output(course_dir, "autograded", row, ".ipynb").is_file() for row in stale))
        grader_errors = _scrub_errors(course_dir, stale)
    else:
        phases.skip("autograde", "notebooks", "nothing changed")
    if stale or not export.is_file():
        with phases.phase("feedback", len(stale), "feedback pages") as bar:
            for target in targets:
                course.nbgrader(course_dir, "generate_feedback", target, check=False, on_item=bar.advance)
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


def _rows(course_dir: Path, assignments: list[str], summary: runphase.RunSummary,
          collected: collect.Collected) -> list[Row]:
    by_assignment = course.modules_by_assignment()
    outcomes = {(s.student, s.module.id): outcome for outcome in summary.outcomes for s in outcome.submissions}
    rows = []
    for folder in sorted((course_dir / "submitted").glob("*/*")):
        student, assignment = folder.parent.name, folder.name
        if assignment not in assignments or not (folder / "kernel.py").is_file():
            continue
        row = Row(student, assignment, by_assignment[assignment])
        outcome = outcomes.get((student, row.module.id))
        if outcome is not None:
            row.record, row.problem = outcome.record, outcome.error or ""
        rows.append(row)
    for student, assignment, why in collected.refused:
        if not any(r.student == student and r.assignment == assignment for r in rows):
            rows.append(Row(student, assignment, by_assignment[assignment], problem=why))
    return sorted(rows, key=lambda r: (r.student, r.assignment))


def _stamp(row: Row, notebook: bytes) -> str:
    record = row.record or {}
    return json.dumps({"submission": record.get("submission_sha256"), "cases": record.get("cases_sha256"),
                       "notebook": hashlib.sha256(notebook).hexdigest()}, sort_keys=True)


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
            found.append(f"{row.student} {row.assignment}: nbgrader did not autograde it "
                         f"(see {course_dir / 'logs' / 'nbgrader-autograde.log'})")
            continue
        notebook = nbformat.read(str(path), as_version=4)
        changed = False
        for cell in notebook.cells:
            for index, output in enumerate(cell.get("outputs", [])):
                if output.get("output_type") == "error":
                    found.append(f"{row.student} {row.assignment} cell {cell.get('id')}: "
                                 f"{output.get('ename')}: {output.get('evalue')}")
                    cell.outputs[index] = nbformat.v4.new_output(
                        "stream", name="stdout", text="The grader could not run this cell; your instructor "
                                                      "has been told. It scores 0 points for now.\n")
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
