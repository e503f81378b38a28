"""The record phase's shared notebook kernel (grader/grade/autograde.py): the same submissions of
module 01 are autograded by nbgrader with a kernel per notebook (nbgrader's own way) and with
one kernel for all, and everything the learners and the instructor get must be the same:
scores, grades.csv byte for byte, nbgrader's export, the feedback HTML, the autograded notebooks
(but for the execution timestamps nbclient writes). About a minute on 2 CPU cores.

The shared kernel itself is checked directly: reset between notebooks (namespace, execution
count, current folder) and replaced when it dies or a cell fails. Nothing here depends on how
long anything takes.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.authoring import example_submissions
from grader.core import device
from grader.core.catalog import find_module
from grader.grade import collect, course, pipeline, record, report, runphase
from grader.grade.phases import Phases
from grader.sandbox.isolation import GiB, Limits

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.filterwarnings("ignore"),
    pytest.mark.heavy,
]

VECTOR_ADD = find_module("missing-elements/01-vector-add")
ASSIGNMENT = course.assignment_name(VECTOR_ADD)
# Full marks, a load error and open TODOs: three different reports, so that a kernel reading the
# wrong folder's kernel.py shows.
STUDENTS = ["complete", "syntax-error", "stub"]
LIMITS = (
    Limits(case_seconds=60, startup_seconds=120)
    if device.is_cuda()
    else Limits(case_seconds=30, startup_seconds=120, memory_bytes=1 * GiB)
)


def _needs_nbgrader() -> None:
    pytest.importorskip("nbgrader", reason="the record phase needs the [grading] extra (nbgrader)")


def _without_execution_times(path: Path) -> dict:
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    return notebook


@dataclasses.dataclass
class Run:
    course_dir: Path
    out: Path
    rows: list
    errors: list

    def files(self, pattern: str) -> list[Path]:
        return sorted(p.relative_to(self.course_dir) for p in self.course_dir.glob(pattern))


def _record_phase(course_dir: Path, rows: list, shared: bool) -> Run:
    """The pipeline's record phase on a course whose notebooks are in place, as ``grade`` runs it."""
    out = course_dir.parent / "grades"
    rows = [dataclasses.replace(row, scores={}, feedback=None) for row in rows]
    errors = pipeline._record_phase(course_dir, out, rows, [ASSIGNMENT], Phases(enabled=False), shared_kernel=shared)
    pipeline._read_gradebook(course_dir, rows)
    grading = pipeline.ClassGrades(
        rows=rows,
        course_dir=course_dir,
        out=out,
        protections={},
        seconds={},
        autograded=len(rows),
        grader_errors=errors,
    )
    report.write_csv(grading, out / "grades.csv")
    return Run(course_dir, out, rows, errors)


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[Run, Run]:
    """One course, graded once by the run phase, then copied: the copies differ only in how
    nbgrader runs their notebooks."""
    _needs_nbgrader()
    tmp = tmp_path_factory.mktemp("record-phase")
    example_submissions.assemble(tmp / "examples", modules=[VECTOR_ADD], handwritten=False)
    shutil.copytree(example_submissions.HANDWRITTEN / "syntax-error", tmp / "examples" / "syntax-error")
    serial_course, shared_course = tmp / "serial" / "course", tmp / "shared" / "course"
    assignments = course.generate_assignments(serial_course, [VECTOR_ADD])
    collected = collect.collect(tmp / "examples", serial_course, [VECTOR_ADD])
    # These three files are the course's own or harmless: no need for the sandbox's process limit.
    options = runphase.Options(limits=LIMITS, allow_unsafe=True, hide=(serial_course,))
    summary = runphase.run(
        serial_course / "submitted", course.results_dir(serial_course), [VECTOR_ADD], options, progress=False
    )
    rows = pipeline._rows(serial_course, assignments, summary, collected)
    assert [row.student for row in rows] == sorted(STUDENTS) and all(row.record for row in rows), rows
    assert len(pipeline._place_notebooks(serial_course, rows)) == len(STUDENTS)
    shutil.copytree(serial_course, shared_course, symlinks=True)
    course.build(shared_course, [VECTOR_ADD])  # its nbgrader_config.py names its own folder
    # Side by side (separate courses, separate gradebooks): less wall time on 2 cores.
    with ThreadPoolExecutor(2) as pool:
        serial = pool.submit(_record_phase, serial_course, rows, False)
        shared = pool.submit(_record_phase, shared_course, rows, True)
        return serial.result(), shared.result()


# --- the same result either way ------------------------------------------------------------


def test_both_ways_grade_every_notebook_with_the_same_scores(both):
    serial, shared = both
    assert serial.errors == shared.errors == []
    scores = [{row.student: row.scores for row in run.rows} for run in both]
    assert scores[0] == scores[1]
    assert set(scores[0]) == set(STUDENTS) and all(len(s) == 3 for s in scores[0].values())
    assert (
        scores[0]["complete"]["public"] + scores[0]["complete"]["hidden"]
        == course.POINTS["public"] + course.POINTS["hidden"]
    )
    assert sum(scores[0]["stub"].values()) == sum(scores[0]["syntax-error"].values()) == 0


def test_grades_csv_and_nbgraders_export_are_byte_identical(both):
    serial, shared = both
    assert (serial.out / "grades.csv").read_bytes() == (shared.out / "grades.csv").read_bytes()
    assert (serial.out / "nbgrader-grades.csv").read_bytes() == (shared.out / "nbgrader-grades.csv").read_bytes()


def test_feedback_is_byte_identical(both):
    serial, shared = both
    pages = serial.files("feedback/*/*/*.html")
    assert len(pages) == len(STUDENTS) and pages == shared.files("feedback/*/*/*.html")
    for page in pages:
        assert (serial.course_dir / page).read_bytes() == (shared.course_dir / page).read_bytes(), page
    stub = (shared.course_dir / "feedback" / "stub" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "TODO 1 (line" in stub and "syntax error" not in stub  # its own kernel.py, not a neighbour's


def test_autograded_notebooks_differ_only_in_execution_times(both):
    serial, shared = both
    notebooks = serial.files("autograded/*/*/*.ipynb")
    assert len(notebooks) == len(STUDENTS) and notebooks == shared.files("autograded/*/*/*.ipynb")
    for path in notebooks:
        mine, theirs = (_without_execution_times(run.course_dir / path) for run in both)
        assert mine == theirs, path
        counts = [cell.get("execution_count") for cell in theirs["cells"] if cell["cell_type"] == "code"]
        assert counts == [1, 2, 3], path  # as in a kernel of its own


# --- the shared kernel on its own ----------------------------------------------------------


def _run(execute, folder: Path, source: str):
    """Run a one-cell notebook in ``folder``; return the cell and the words it printed."""
    import nbformat

    folder.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    execute.preprocess(notebook, {"metadata": {"path": str(folder)}})
    cell = notebook.cells[0]
    printed = "".join(output.get("text", "") for output in cell.outputs if output.get("output_type") == "stream")
    return cell, printed.split()


def _execute():
    from grader.grade import autograde

    # nbgrader makes a new preprocessor for every notebook
    return autograde.SharedKernelExecute(timeout=120, extra_arguments=course.KERNEL_ARGUMENTS)


def test_the_shared_kernel_is_reset_between_notebooks_and_replaced_when_it_dies(tmp_path):
    _needs_nbgrader()
    from nbclient.exceptions import DeadKernelError
    from nbclient.util import run_sync

    from grader.grade import autograde

    probe = "import os; print(os.getpid(), os.getcwd(), 'left' in globals()); left = 1"
    try:
        first, (pid, cwd, left) = _run(_execute(), tmp_path / "a", probe)
        assert (cwd, left, first.execution_count) == (str(tmp_path / "a"), "False", 1)
        second, (again, cwd, left) = _run(_execute(), tmp_path / "b", probe)
        assert again == pid, "the second notebook did not run in the first one's kernel"
        assert (cwd, left, second.execution_count) == (str(tmp_path / "b"), "False", 1)

        with pytest.raises(DeadKernelError):
            _run(_execute(), tmp_path / "c", "import os; os._exit(1)")
        fourth, (new, cwd, left) = _run(_execute(), tmp_path / "d", probe)
        assert new != pid and (cwd, left, fourth.execution_count) == (str(tmp_path / "d"), "False", 1)
    finally:
        km = autograde._shared.get("km")
        autograde.shut_down()
    assert km is not None and not run_sync(km.is_alive)() and not autograde._shared


def test_a_failed_cell_gives_the_next_notebook_a_kernel_of_its_own(tmp_path):
    _needs_nbgrader()
    from grader.grade import autograde

    try:
        _, (pid,) = _run(_execute(), tmp_path / "a", "import os; print(os.getpid())")
        failed, (same,) = _run(_execute(), tmp_path / "b", "import os; print(os.getpid()); raise ValueError('x')")
        assert same == pid and failed.outputs[-1]["output_type"] == "error"
        _, (new,) = _run(_execute(), tmp_path / "c", "import os; print(os.getpid())")
        assert new != pid
    finally:
        autograde.shut_down()


def test_shared_kernel_arguments_replace_only_nbgraders_execute():
    _needs_nbgrader()
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import Execute

    steps = [argument.split("=", 1)[1] for argument in course.shared_kernel_arguments()]
    defaults = Autograde.autograde_preprocessors.default()
    assert len(steps) == len(defaults)
    for step, default in zip(steps, defaults):
        expected = (
            "grader.grade.autograde.SharedKernelExecute"
            if default is Execute
            else f"{default.__module__}.{default.__qualname__}"
        )
        assert step == expected


def test_score_prints_its_report_in_one_write(tmp_path, monkeypatch):
    writes = []

    class Recorder(io.StringIO):
        def write(self, text):
            writes.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stdout", Recorder())
    assert record.score(VECTOR_ADD.id, "public", 4, folder=tmp_path) == 0  # no kernel.py there
    assert len(writes) == 1 and writes[0].endswith(
        "points. There is no kernel.py beside this notebook: submit "
        "your kernel.py in the assignment's folder, next to the "
        "notebook.\n"
    )
