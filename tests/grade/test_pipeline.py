"""The record phase end to end: example submissions of module 01 go through collect, the run phase,
nbgrader autograde, feedback and export (`python -m grader grade` without the CLI), and the
scores, the gradebook, the feedback and a re-run are checked. About 45 s on 2 CPU cores.

The students: complete, stub (with a tampered notebook and a torch.py beside its kernel.py),
partial, torch-compute (hostile: 0 with a reason) and writes-files (hostile, no effect: it also
tries to write the course's folder, records and gradebook).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.authoring import example_submissions
from grader.core import cases, device
from grader.core.catalog import REPO_ROOT, find_module
from grader.core.checks import build_inputs
from grader.grade import course, record, release, runphase
from grader.grade import pipeline as grading
from grader.sandbox.isolation import GiB, Limits, Sandbox, offers

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.filterwarnings("ignore"),
    pytest.mark.heavy,
]


def _needs_nbgrader() -> None:
    """Only the tests that run nbgrader skip without it; the others run anyway."""
    pytest.importorskip("nbgrader", reason="grading needs the [grading] extra (nbgrader)")


VECTOR_ADD = find_module("missing-elements/01-vector-add")
ASSIGNMENT = course.assignment_name(VECTOR_ADD)
STUDENTS = ["complete", "partial", "stub", "torch-compute", "writes-files"]
# CPU-time limits (see grader.grade.budget.Budget): far beyond what a correct call needs.
LIMITS = (
    Limits(case_seconds=60, startup_seconds=120)
    if device.is_cuda()
    else Limits(case_seconds=30, startup_seconds=120, memory_bytes=1 * GiB)
)
FULL_CORRECTNESS = course.POINTS["public"] + course.POINTS["hidden"]
TAMPERED_CELL = "print('tampered'); 4"
GRADEBOOK_ATTACK = """
import sqlite3 as _sqlite3
for _folder in EXTRA_TARGETS:
    try:
        _db = _sqlite3.connect(f"file:{_folder}/gradebook.db?mode=rw", uri=True)
        _db.execute("UPDATE grade SET auto_score = 99")
        _db.execute("CREATE TABLE pwned (x)")
        _db.commit()
        print("writes-files changed the gradebook in", _folder)
    except Exception as _error:
        print("writes-files could not open the gradebook:", type(_error).__name__)
"""


def _gradebook_state(path: Path) -> tuple:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns, path.stat().st_uid


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {name for (name,) in db.execute("select name from sqlite_master where type='table'")}


class Graded:
    def __init__(self, tmp: Path):
        self.source, self.course_dir, self.out = tmp / "source", tmp / "course", tmp / "grades"
        self.gradebook = self.course_dir / "gradebook.db"
        self.around_run_phase: list[tuple] = []
        self.tables_before: set[str] = set()
        self.protections: dict = {}

    def options(self) -> runphase.Options:
        unsafe = not offers(self.protections, "processes")
        # The gate would refuse writes-files before it runs; these tests are about what lies
        # behind it (the sandbox keeps the gradebook out of reach) and about the record phase.
        return runphase.Options(limits=LIMITS, allow_unsafe=unsafe, policy_gate=False)

    def feedback(self, student: str) -> str:
        return (self.course_dir / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


def _prepare_students(graded: Graded, examples: Path) -> None:
    for student in STUDENTS:
        (graded.source / student).parent.mkdir(parents=True, exist_ok=True)
        os.rename(examples / student, graded.source / student)
    writer = graded.source / "writes-files" / VECTOR_ADD.track / VECTOR_ADD.slug / "kernel.py"
    targets = [str(graded.course_dir), str(course.results_dir(graded.course_dir)), str(graded.course_dir / "submitted")]
    text = writer.read_text().replace("EXTRA_TARGETS = []", f"EXTRA_TARGETS = {targets!r}")
    mark = 'MARK = "written-by-writes-files"\n'
    assert mark in text
    writer.write_text(text.replace(mark, mark + GRADEBOOK_ATTACK, 1))
    # Whatever else the learner hands in must not reach the notebook's folder, or run.
    stub = graded.source / "stub" / ASSIGNMENT
    (stub / "torch.py").write_text("raise SystemExit('a learner module shadowed torch')\n")
    import nbformat

    tampered = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TAMPERED_CELL)])
    nbformat.write(tampered, str(stub / f"{ASSIGNMENT}.ipynb"))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    _needs_nbgrader()
    tmp = tmp_path_factory.mktemp("grading")
    result = Graded(tmp)
    with Sandbox(allow_unsafe=True) as sandbox:
        result.protections = sandbox.probe()
    if not offers(result.protections, "view"):
        pytest.skip("no private file system view here: writes-files would write the real course folder")
    example_submissions.assemble(tmp / "examples", modules=[VECTOR_ADD])
    _prepare_students(result, tmp / "examples")

    real_run = runphase.run

    def watched_run(*args, **kwargs):  # the gradebook before and after the learners' code ran
        result.tables_before = _tables(result.gradebook)
        before = _gradebook_state(result.gradebook)
        summary = real_run(*args, **kwargs)
        result.around_run_phase = [before, _gradebook_state(result.gradebook)]
        return summary

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runphase, "run", watched_run)
        result.grading = grading.grade(
            result.source, result.course_dir, result.out, [VECTOR_ADD], result.options(), progress=False
        )
    result.rows = {row.student: row for row in result.grading.rows}
    return result


def _expected_partial_points() -> float:
    """The partial example's grid rounds down: only sizes that are multiples of 1024 pass."""
    spec, public = cases.public(VECTOR_ADD)
    cuda = device.is_cuda()

    def share(case_list):
        case_list = cases.for_mode(case_list, cuda)
        covered = [build_inputs(spec, c, on=device.torch_device())[0][0].numel() % 1024 == 0 for c in case_list]
        return sum(covered) / len(covered)

    hidden = cases.hidden(VECTOR_ADD)
    return round(course.POINTS["public"] * share(public), 2) + round(course.POINTS["hidden"] * share(hidden), 2)


# --- scores ----------------------------------------------------------------------------------


def test_every_student_is_graded_by_nbgrader(graded):
    assert sorted(graded.rows) == STUDENTS
    assert not graded.grading.grader_errors
    for row in graded.rows.values():
        assert set(row.scores) == {"public", "hidden", "performance"}, row.student


def test_the_summary_counts_what_every_phase_did(graded):
    from grader.grade.phases import table

    n = len(STUDENTS)  # five different files, of one module
    counts = {r.name: (r.done, r.total, r.unit) for r in graded.grading.phases}
    assert counts == {
        "generate assignments": (None, None, ""),
        "collect": (n, n, "submissions"),
        "run phase": (n, n, "gradings"),
        "place notebooks": (None, None, ""),
        "autograde": (n, n, "notebooks"),
        "feedback": (n, n, "feedback pages"),
        "export": (n, n, "grades"),
    }
    assert list(graded.grading.seconds) == list(counts)  # report.md's timings
    assert all(r.seconds is not None and r.seconds >= 0 for r in graded.grading.phases)
    assert f"autograde             {n}/{n} notebooks" in table(graded.grading.phases)


def test_complete_scores_full_correctness_and_performance_is_not_graded_on_cpu(graded):
    row = graded.rows["complete"]
    assert row.scores["public"] + row.scores["hidden"] == FULL_CORRECTNESS
    if device.is_cuda():
        assert row.record["performance"]["graded"] is True
    else:
        assert row.scores["performance"] == 0
        assert record.performance_status(row.record) == "not graded"


def test_stub_scores_zero_despite_its_tampered_notebook(graded):
    row = graded.rows["stub"]
    assert row.total == 0 and "TODO(s) open" in grading_reason(row)
    autograded = graded.course_dir / "autograded" / "stub" / ASSIGNMENT
    assert TAMPERED_CELL not in (autograded / f"{ASSIGNMENT}.ipynb").read_text()
    for folder in (graded.course_dir / "submitted" / "stub" / ASSIGNMENT, autograded):
        assert not (folder / "torch.py").exists()


def grading_reason(row) -> str:
    from grader.grade import report

    return report.reason(row)


def test_partial_scores_the_cases_its_grid_covers(graded):
    expected = _expected_partial_points()
    assert 0 < expected < FULL_CORRECTNESS
    assert graded.rows["partial"].total == pytest.approx(expected, abs=0.011)


def test_computing_with_pytorch_scores_zero_with_the_reason(graded):
    row = graded.rows["torch-compute"]
    assert row.total == 0 and "computed with PyTorch" in grading_reason(row)


def test_writing_around_has_no_effect_and_scores_full_correctness(graded):
    row = graded.rows["writes-files"]
    assert row.scores["public"] + row.scores["hidden"] == FULL_CORRECTNESS
    log = (
        course.results_dir(graded.course_dir)
        / "logs"
        / VECTOR_ADD.track
        / VECTOR_ADD.slug
        / f"{row.record['submission_sha256']}.log"
    ).read_text()
    assert "writes-files could not open the gradebook" in log and "changed the gradebook" not in log
    assert not list(graded.course_dir.rglob("written-by-writes-files"))


def test_our_csv_and_nbgraders_export_agree(graded):
    import csv

    ours = {row["student"]: row for row in csv.DictReader(open(graded.out / "grades.csv"))}
    theirs = {row["student_id"]: row for row in csv.DictReader(open(graded.out / "nbgrader-grades.csv"))}
    assert sorted(ours) == sorted(theirs) == STUDENTS
    for student in STUDENTS:
        assert float(ours[student]["total"]) == pytest.approx(float(theirs[student]["score"]))
        if not device.is_cuda():
            assert ours[student]["performance"] == "not graded"
    assert ours["torch-compute"]["reason"] and not ours["complete"]["reason"]
    assert (graded.out / "scores.png").stat().st_size > 1000
    assert "| stub | missing-elements/01-vector-add |" in (graded.out / "report.md").read_text()


# --- the gradebook and results are the parent's alone ------------------------------------------


def test_the_gradebook_is_untouched_while_learner_code_runs(graded):
    before, after = graded.around_run_phase
    assert before == after  # same bytes, same modification time, same owner
    assert after[2] == os.getuid()
    tables = _tables(graded.gradebook)
    assert tables == graded.tables_before and "pwned" not in tables
    with sqlite3.connect(graded.gradebook) as db:
        students = {name for (name,) in db.execute("select id from student")}
        scores = [score for (score,) in db.execute("select auto_score from grade")]
    assert students == set(STUDENTS)
    assert all(0 <= score <= max(course.POINTS.values()) for score in scores)


def test_records_are_complete_and_named_by_their_submission(graded):
    records = list((course.results_dir(graded.course_dir) / "records").rglob("*.json"))
    assert len(records) >= len(STUDENTS), "the run phase left fewer records than students"
    for path in records:
        data = json.loads(path.read_text())
        assert path.name.startswith(data["submission_sha256"])


# --- feedback ------------------------------------------------------------------------------


def test_feedback_shows_pass_fail_diagnosis_and_performance(graded):
    html = graded.feedback("partial")
    assert "PASS" in html and "FAIL" in html
    assert "the last, partial block is probably not launched" in " ".join(html.split())  # (lines fold)
    assert "Hidden case failed" in html
    assert "(the same problem as above)" in html  # sizes 1 and 7: nothing written, said once
    # (the notebook's own text always explains NOT GRADED; the report line says what happened)
    assert ("Performance: NOT GRADED" in html) != device.is_cuda()
    assert ("Performance: 0 of 2 points: not timed" in html) == device.is_cuda()  # cases fail first
    assert "TODO 1 (line" in graded.feedback("stub")
    assert "computed with PyTorch" in graded.feedback("torch-compute")


def test_feedback_leaks_no_hidden_case_and_no_traceback(graded):
    # (nbgrader copies each learner's own kernel.py beside the feedback: complete's is a solution)
    assert release.find_leaks(graded.course_dir / "feedback", [VECTOR_ADD], "*.html") == []
    _, public = cases.public(VECTOR_ADD)
    public_text = " ".join(c.name for c in public)
    hidden_params = {str(v) for c in cases.hidden(VECTOR_ADD) for v in c.params.values()}
    for student in STUDENTS:
        html = graded.feedback(student)
        assert "most recent call last" not in html and "output_error" not in html, student
        assert "output_stderr" not in html, student
        assert not [p for p in hidden_params if p not in public_text and p in html], student


# --- re-grading ----------------------------------------------------------------------------


def test_regrading_gives_the_same_result_without_running_anything(graded, monkeypatch):
    def no_sandbox(*args, **kwargs):
        raise AssertionError("a re-run must not start a sandbox")

    monkeypatch.setattr(runphase, "make_sandbox", no_sandbox)
    autograded = graded.course_dir / "autograded" / "complete" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    mtime = autograded.stat().st_mtime_ns
    again = grading.grade(graded.source, graded.course_dir, graded.out, [VECTOR_ADD], graded.options(), progress=False)
    assert again.children_started == 0 and again.autograded == 0
    reused = {r.name: (r.done, r.tags, r.seconds is None) for r in again.phases}
    assert reused["run phase"] == (len(STUDENTS), {"reused": len(STUDENTS)}, False)
    assert reused["autograde"] == reused["feedback"] == reused["export"] == (0, {}, True)  # skipped
    assert {r.student: r.scores for r in again.rows} == {r.student: r.scores for r in graded.grading.rows}
    assert autograded.stat().st_mtime_ns == mtime


def test_the_cli_regrades_and_prints_the_table(graded):
    command = [
        sys.executable,
        "-m",
        "grader.grade.commands",
        "grade",
        str(graded.source),
        "--course",
        str(graded.course_dir),
        "--out",
        str(graded.out),
        "--module",
        VECTOR_ADD.id,
    ]
    if graded.options().allow_unsafe:
        command.append("--allow-unsafe")
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "torch-compute" in result.stdout and "computed with PyTorch" in result.stdout
    summary = result.stdout[result.stdout.index("\nphase ") :]  # after the grades table
    assert f"run phase             {len(STUDENTS)}/{len(STUDENTS)} gradings ({len(STUDENTS)} reused)" in summary
    assert "autograde             nothing changed" in summary and "\ntotal " in summary
    assert "\r" not in result.stderr and "run phase: " in result.stderr  # plain lines, not a bar
    assert "Nothing changed since the last run" in (graded.out / "report.md").read_text()


def test_regrading_one_student_changes_only_that_students_record_and_grade(graded):
    """--student partial --regrade, without a source: partial's record is made again (on the
    folder's secret, so on the same hidden inputs) and autograded again; every other student's
    record, notebook and points stay; lms.csv and the summaries still cover the class."""
    import csv

    others = [student for student in STUDENTS if student != "partial"]
    notebook = lambda student: graded.course_dir / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    before = {student: notebook(student).stat().st_mtime_ns for student in others}
    again = grading.grade(
        None,
        graded.course_dir,
        graded.out,
        [VECTOR_ADD],
        graded.options(),
        progress=False,
        students=["partial"],
        regrade=True,
    )
    rows = {row.student: row for row in again.rows}
    assert sorted(rows) == STUDENTS and again.children_started > 0 and again.autograded == 1
    old = graded.rows["partial"].record
    assert rows["partial"].record["graded_at"] != old["graded_at"]
    verdicts = lambda record: [(case["name"], case["passed"], case["message"]) for case in record["cases"]]
    assert verdicts(rows["partial"].record) == verdicts(old)
    assert rows["partial"].scores == graded.rows["partial"].scores
    assert len(list((course.results_dir(graded.course_dir) / "replaced").rglob("*.json"))) == 1
    for student in others:
        assert notebook(student).stat().st_mtime_ns == before[student], student
        assert (rows[student].record, rows[student].scores) == (
            graded.rows[student].record,
            graded.rows[student].scores,
        ), student
    with open(graded.out / "lms.csv", newline="") as handle:
        assert sorted(line["student"] for line in csv.DictReader(handle)) == STUDENTS
    assert sorted(p.stem for p in (graded.out / "students").glob("*.md")) == STUDENTS


# --- collecting an LMS zip -------------------------------------------------------------------


def test_zip_collection_takes_only_kernel_files(tmp_path):
    _needs_nbgrader()
    from grader.grade import collect

    complete = (VECTOR_ADD.solution_dir / "kernel.py").read_bytes()
    archive = tmp_path / "lms-download.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr(f"alice_{ASSIGNMENT}_kernel.py", complete)
        handle.writestr(f"folder/bob.smith_{ASSIGNMENT}_kernel.py", "# bob\n")
        handle.writestr(f"bob.smith_{ASSIGNMENT}_torch.py", "raise SystemExit\n")
        handle.writestr("carol_some-other-course_kernel.py", "# not ours\n")
    course_dir = tmp_path / "course"
    course.generate_assignments(course_dir, [VECTOR_ADD])
    collected = collect.collect(archive, course_dir, [VECTOR_ADD])
    assert sorted(collected.submissions) == [("alice", ASSIGNMENT), ("bob.smith", ASSIGNMENT)]
    submitted = course_dir / "submitted"
    assert (submitted / "alice" / ASSIGNMENT / "kernel.py").read_bytes() == complete
    assert (submitted / "bob.smith" / ASSIGNMENT / "kernel.py").read_text() == "# bob\n"
    assert sorted(p.name for p in submitted.rglob("*") if p.is_file()) == [
        "kernel.py",
        "kernel.py",
        "timestamp.txt",
        "timestamp.txt",
    ]


def test_a_linked_kernel_is_not_collected(tmp_path):
    from grader.grade import collect

    folder = tmp_path / "source" / "mallory" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / "kernel.py").symlink_to(VECTOR_ADD.solution_dir / "kernel.py")
    collected = collect.collect(tmp_path / "source", tmp_path / "course", [VECTOR_ADD])
    assert collected.submissions == []
    [(student, assignment, why)] = collected.refused
    assert (student, assignment) == ("mallory", ASSIGNMENT) and why.startswith("kernel.py is a link")
    assert not (tmp_path / "course" / "submitted" / "mallory" / ASSIGNMENT / "kernel.py").exists()


# --- the cells' API on its own -----------------------------------------------------------------


def _record(**performance) -> dict:
    return {
        "module": VECTOR_ADD.id,
        "submission_sha256": "0" * 64,
        "device": "a GPU",
        "graded_at": "now",
        "summary": "",
        "load_error": None,
        "todos": [],
        "totals": {},
        "cases": [
            {"name": "a", "visibility": "public", "passed": True, "message": "", "seconds": 0},
            {
                "name": "hidden case 1",
                "visibility": "hidden",
                "passed": False,
                "message": "Hidden case failed: the output is wrong.",
                "seconds": 0,
            },
        ],
        "performance": performance,
    }


@pytest.mark.parametrize("ratio, points", [(1.2, 2.0), (0.8, 2.0), (0.6, 1.0), (0.4, 0.0), (0.1, 0.0)])
def test_performance_points_from_the_ratio_are_linear_down_to_the_floor(ratio, points):
    spec, _ = cases.public(VECTOR_ADD)
    assert spec.learner_threshold == 0.8  # the expected points assume it
    text, got = record.part_report(_record(graded=True, ratio=ratio), "performance", 2)
    assert got == pytest.approx(points) and "NOT GRADED" not in text
    assert f"{ratio:.2f} x the reference's speed" in text and "Full points from 0.80 x" in text


def test_performance_credit_in_the_record_is_used_and_not_graded_is_said():
    text, points = record.part_report(
        _record(graded=True, credit=0.25, ratio=0.5, reason="0.50 x", threshold=0.8, floor=0.4), "performance", 2
    )
    assert points == 0.5 and "0.50 x" in text and "none at or below 0.40 x" in text
    text, points = record.part_report(_record(graded=False, reason="not graded: needs a CUDA GPU"), "performance", 2)
    assert points == 0 and text.startswith("Performance: NOT GRADED (not graded: needs a CUDA GPU)")


def test_hidden_cases_are_reported_by_number_with_generic_messages():
    text, points = record.part_report(_record(graded=False), "hidden", 4)
    assert points == 0 and "FAIL  hidden case 1" in text and "the output is wrong" in text


def test_score_never_writes_to_stderr_nor_shows_a_traceback(tmp_path, capfd, monkeypatch):
    points = record.score(VECTOR_ADD.id, "public", 4, folder=tmp_path)  # no kernel.py there
    out, err = capfd.readouterr()
    assert points == 0 and err == "" and "no kernel.py beside this notebook" in out

    def noisy(module_id, folder):
        import warnings

        warnings.warn("a warning", stacklevel=1)
        os.write(2, b"C code on stderr\n")
        print("Python on stderr", file=sys.stderr)
        raise RuntimeError("the grader broke\nsecond line")

    monkeypatch.setattr(record, "find_record", noisy)
    points = record.score(VECTOR_ADD.id, "hidden", 4, folder=tmp_path)
    out, err = capfd.readouterr()
    assert points == 0 and err == ""
    assert out.count("\n") == 1 and "RuntimeError: the grader broke" in out and "Traceback" not in out


def test_a_missing_record_is_produced_in_the_sandbox_then_reused(tmp_path, capfd, monkeypatch):
    folder = tmp_path / "autograded" / "dana" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_bytes((VECTOR_ADD.solution_dir / "kernel.py").read_bytes())
    monkeypatch.setenv(course.RESULTS_ENV, str(tmp_path / "results"))
    assert record.score(VECTOR_ADD.id, "hidden", 4, folder=folder) == 4
    assert list((tmp_path / "results" / "records").rglob("*.json"))

    def no_sandbox(*args, **kwargs):
        raise AssertionError("the record exists: no sandbox is needed")

    monkeypatch.setattr(runphase, "make_sandbox", no_sandbox)
    assert record.score(VECTOR_ADD.id, "public", 4, folder=folder) == 4
    assert capfd.readouterr().err == ""


def test_an_error_output_is_replaced_by_one_line_before_feedback(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="grading needs the [grading] extra (nbgrader)")

    path = tmp_path / "autograded" / "eve" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    path.parent.mkdir(parents=True)
    cell = nbformat.v4.new_code_cell("score(...)")
    cell.outputs = [
        nbformat.v4.new_output(
            "error", ename="CellTimeoutError", evalue="", traceback=["Traceback (most recent call last):", "  secret"]
        )
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), str(path))
    found = grading._scrub_errors(tmp_path, [grading.Row("eve", ASSIGNMENT, VECTOR_ADD)])
    assert len(found) == 1 and "CellTimeoutError" in found[0]
    text = path.read_text()
    assert "most recent call last" not in text and "could not run this cell" in text


def test_a_learner_file_beside_the_notebook_cannot_shadow_a_module(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    (tmp_path / "torch.py").write_text("raise SystemExit('a learner file shadowed torch')\n")
    for name, value in course.environment(tmp_path / "course").items():
        monkeypatch.setenv(name, value)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch; print(torch.__file__)")])
    nbclient.NotebookClient(
        notebook, extra_arguments=course.KERNEL_ARGUMENTS, timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = "".join(output.get("text", "") for output in notebook.cells[0].outputs)
    assert printed.strip().endswith("__init__.py") and str(tmp_path) not in printed, printed


def test_an_edited_tracks_kernel_does_not_change_the_stub_student(tmp_path, monkeypatch):
    from grader.core.markers import stub_for

    # Someone's finished kernel in tracks/ (a copy here: the repository's tracks/ stay untouched).
    learner = tmp_path / "tracks" / VECTOR_ADD.id
    learner.mkdir(parents=True)
    (learner / "kernel.py").write_text((VECTOR_ADD.solution_dir / "kernel.py").read_text())
    monkeypatch.setattr(type(VECTOR_ADD), "learner_dir", property(lambda self: tmp_path / "tracks" / self.id))
    example_submissions.assemble(tmp_path / "examples", modules=[VECTOR_ADD], handwritten=False)
    handed_in = (tmp_path / "examples" / "stub" / ASSIGNMENT / "kernel.py").read_text()
    assert handed_in == stub_for(VECTOR_ADD) != (learner / "kernel.py").read_text()
