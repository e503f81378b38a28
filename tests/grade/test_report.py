"""What the instructor's table, grades.csv, scores.png and report.md say, and what the feedback
says of ungraded performance and of an unchanged starting kernel: totals out of what was graded,
never a finished file and an untouched one read alike. Records are built here (unit level, a few
seconds); tests/grade/test_pipeline.py runs the real pipeline."""

from __future__ import annotations

import csv

import pytest

from grader.core.catalog import find_module
from grader.core.markers import open_todos, stub_for
from grader.grade import record, report, results
from grader.grade.pipeline import ClassGrades, Row

VECTOR_ADD = find_module("missing-elements/01-vector-add")
SHARED_MEMORY = find_module("optimization/03-shared-memory")  # its starting kernel is correct, only slow
BASIC_DEBUGGING = find_module("debugging/01-basic-debugging")
NO_GPU = {"graded": False, "reason": "not graded: needs a CUDA GPU"}


def _record(
    module,
    public=(True, True),
    hidden=(True,),
    todos=0,
    starting=False,
    performance=None,
    integrity=None,
    message="add() raised ValueError: wrong size\nsecond line",
) -> dict:
    rows = [
        {
            "name": f"case {i}",
            "visibility": "public",
            "passed": ok,
            "kind": "" if ok else "error",
            "message": "" if ok else message,
            "seconds": 0.1,
        }
        for i, ok in enumerate(public)
    ]
    rows += [
        {
            "name": f"hidden case {i + 1}",
            "visibility": "hidden",
            "passed": ok,
            "kind": "" if ok else "wrong",
            "message": "" if ok else "Hidden case failed: the output is wrong.",
            "seconds": 0.1,
        }
        for i, ok in enumerate(hidden)
    ]
    passed = sum(row["passed"] for row in rows)
    return {
        "module": module.id,
        "submission_sha256": "ab" * 32,
        "device": "CPU (Triton interpreter)",
        "graded_at": "2025-01-01T00:00:00+00:00",
        "summary": "",
        "load_error": None,
        "todos": [f"TODO {n + 1} (line {10 + n}): something" for n in range(todos)],
        "starting_kernel": starting,
        "cases": rows,
        "totals": {"passed": passed, "total": len(rows)},
        "integrity": integrity,
        "performance": dict(performance or NO_GPU),
    }


def _row(student, module, rec, scores) -> Row:
    return Row(student, f"{module.track}-{module.slug}", module, record=rec, scores=dict(scores))


def _grading(tmp_path, rows) -> ClassGrades:
    return ClassGrades(rows=rows, course_dir=tmp_path / "course", out=tmp_path / "grades", protections={}, seconds={})


FULL_OPTIMIZATION = {"public": 2.0, "hidden": 2.0, "performance": 0.0}


# --- totals out of what was graded ------------------------------------------------------------


def test_totals_and_grades_csv_are_out_of_what_was_graded(tmp_path):
    rows = [
        _row("ada", SHARED_MEMORY, _record(SHARED_MEMORY), FULL_OPTIMIZATION),
        _row("ada", VECTOR_ADD, _record(VECTOR_ADD), {"public": 4.0, "hidden": 4.0, "performance": 0.0}),
        _row(
            "bob",
            VECTOR_ADD,
            _record(VECTOR_ADD, performance={"graded": True, "credit": 0.5, "ratio": 0.6}),
            {"public": 4.0, "hidden": 4.0, "performance": 1.0},
        ),
        _row(
            "cyd",
            VECTOR_ADD,
            _record(VECTOR_ADD, integrity={"violation": "torch", "message": "computed with PyTorch"}),
            {"public": 0, "hidden": 0, "performance": 0},
        ),
    ]
    assert [report.out_of(row) for row in rows] == [4, 8, 10, 10]  # an integrity finding counts every part
    grading = _grading(tmp_path, rows)
    grading.out.mkdir()
    report.write_csv(grading, grading.out / "grades.csv")
    written = list(csv.DictReader(open(grading.out / "grades.csv")))
    assert list(written[0]) == report.CSV_COLUMNS and report.CSV_COLUMNS[:13] == [
        "student",
        "module",
        "assignment",
        "public",
        "hidden",
        "performance",
        "total",
        "max_points",
        "cases_passed",
        "cases_total",
        "status",
        "reason",
        "feedback",
    ]  # the old columns first, in order
    assert [(r["total"], r["max_points"], r["left_out"], r["left_out_points"]) for r in written] == [
        ("4.0", "4", "performance", "6"),
        ("8.0", "8", "performance", "2"),
        ("9.0", "10", "", "0"),
        ("0", "10", "", "0"),
    ]
    table = report.table(grading)
    assert "4/4" in table and "8/8" in table and "9/10" in table and "0/10*" in table
    assert "counts as 0" not in table and "out of 4 instead of 10" in table and "out of 8 instead of 10" in table


def test_the_note_on_left_out_points_is_absent_when_everything_was_graded(tmp_path):
    timed = _record(VECTOR_ADD, performance={"graded": True, "credit": 1.0, "ratio": 1.1})
    grading = _grading(tmp_path, [_row("ada", VECTOR_ADD, timed, {"public": 4, "hidden": 4, "performance": 2})])
    assert report.left_out_note(grading.rows) == "" and "10/10" in report.table(grading)


def test_each_modules_axis_ends_at_what_it_is_out_of(tmp_path):
    rows = [
        _row("ada", SHARED_MEMORY, _record(SHARED_MEMORY), FULL_OPTIMIZATION),
        _row("ada", VECTOR_ADD, _record(VECTOR_ADD), {"public": 4.0, "hidden": 4.0, "performance": 0.0}),
        _row("bob", VECTOR_ADD, None, {}),
    ]  # no grade: not plotted
    data = report.plot_data(_grading(tmp_path, rows))
    assert data == {
        SHARED_MEMORY.id: (
            {"edited": [4.0], "unchanged starting kernel": []},
            4,
            "points out of 4 (performance not graded)",
        ),
        VECTOR_ADD.id: (
            {"edited": [8.0], "unchanged starting kernel": []},
            8,
            "points out of 8 (performance not graded)",
        ),
    }
    rows.append(_row("cyd", SHARED_MEMORY, _record(SHARED_MEMORY, starting=True), FULL_OPTIMIZATION))
    assert report.plot_data(_grading(tmp_path, rows))[SHARED_MEMORY.id][0] == {
        "edited": [4.0],
        "unchanged starting kernel": [4.0],
    }  # the same points, told apart
    pytest.importorskip("matplotlib")
    assert report.plot(_grading(tmp_path, rows), tmp_path / "scores.png")
    assert (tmp_path / "scores.png").stat().st_size > 1000


def test_report_md_says_which_file_counts_what_and_holds_the_class_view(tmp_path):
    rows = [
        _row("ada", SHARED_MEMORY, _record(SHARED_MEMORY), FULL_OPTIMIZATION),
        _row(
            "bob",
            VECTOR_ADD,
            _record(VECTOR_ADD, public=(True, False), todos=2, message="add() raised <b>|x|</b>"),
            {"public": 2, "hidden": 4, "performance": 0},
        ),
    ]
    grading = _grading(tmp_path, rows)
    report.write(grading)
    text = (grading.out / "report.md").read_text()
    assert report.OUT_OF_LINE in text and "nbgrader-grades.csv" in report.OUT_OF_LINE
    assert "counts as 0" not in text and "## The class, module by module" in text
    assert "| bob | missing-elements/01-vector-add | 2 | 4 | not graded | 6 | 8 | graded |" in text
    assert "<b>" not in text and "&lt;b&gt;\\|x\\|&lt;/b&gt;" in text  # the submission's text, escaped
    assert {p.name for p in grading.out.iterdir()} >= {"grades.csv", "report.md", "overview.html"}


# --- the starting kernel ----------------------------------------------------------------------


def test_the_starting_kernel_is_told_from_the_finished_file_everywhere(tmp_path):
    stub_record = _record(SHARED_MEMORY, todos=6, starting=True)
    done_record = _record(SHARED_MEMORY)
    rows = [
        _row("still", SHARED_MEMORY, stub_record, FULL_OPTIMIZATION),
        _row("done", SHARED_MEMORY, done_record, FULL_OPTIMIZATION),
    ]
    still, done = rows
    assert still.total == done.total  # the same points: traffic bars do not decide points on a CPU
    assert report.status(still) == "unchanged starting kernel" and report.status(done) == "graded"
    assert report.reason(still).startswith("unchanged starting kernel") and "6 TODO(s) open" in report.reason(still)
    assert report.reason(done) == ""
    table = report.table(_grading(tmp_path, rows))
    assert "4/4*" in table and "  still optimization-03-shared-memory: unchanged starting kernel" in table
    assert "  done " not in table

    stub_text, _ = record.part_report(stub_record, "public", 2)
    done_text, _ = record.part_report(done_record, "public", 2)
    assert stub_text.startswith("Your kernel.py is still the starting kernel")
    assert "memory traffic against the module's bars; speed is graded on a GPU" in stub_text
    assert f"make check M={SHARED_MEMORY.id}" in stub_text and "starting kernel" not in done_text
    stub_speed, _ = record.part_report(stub_record, "performance", 6)
    done_speed, _ = record.part_report(done_record, "performance", 6)
    assert stub_speed != done_speed and "code you were given" in stub_speed


def test_an_unchanged_stub_that_fails_is_told_what_to_do_by_track():
    failing = _record(VECTOR_ADD, public=(False, False), todos=8, starting=True)
    assert "complete its TODOs" in record.starting_kernel_note(failing)
    planted = _record(BASIC_DEBUGGING, public=(False,), todos=3, starting=True)
    assert "bugs planted in it" in record.starting_kernel_note(planted)
    assert record.starting_kernel_note(_record(VECTOR_ADD, starting=None)) == ""  # unknown: nothing said


def test_the_starting_kernel_is_found_by_syntax_not_by_text(monkeypatch):
    stub = stub_for(VECTOR_ADD)
    assert results.is_starting_kernel(stub, VECTOR_ADD) is True
    reworded = "# my notes\n" + stub.replace("\n\n", "\n\n\n").replace("# TODO 1:", "# done? ")
    redocumented = stub.replace('"""', '"""Mine. ', 1)
    assert results.is_starting_kernel(reworded, VECTOR_ADD) is True
    assert results.is_starting_kernel(redocumented, VECTOR_ADD) is True
    assert results.is_starting_kernel(stub + "\nEXTRA = 1\n", VECTOR_ADD) is False
    assert results.is_starting_kernel((VECTOR_ADD.solution_dir / "kernel.py").read_text(), VECTOR_ADD) is False
    assert results.is_starting_kernel(stub + "\ndef (:\n", VECTOR_ADD) is False
    assert results.is_starting_kernel("(" * 100_000, VECTOR_ADD) is False  # too deep to parse: not the stub

    def no_solution(module):
        raise FileNotFoundError(module.solution_dir / "kernel.py")

    monkeypatch.setattr(results, "stub_for", no_solution)
    assert results.is_starting_kernel(stub, VECTOR_ADD) is None  # a checkout without solutions cannot tell


# --- feedback on performance left out -------------------------------------------------------


def test_ungraded_performance_says_what_the_grade_is_out_of():
    text, points = record.part_report(_record(SHARED_MEMORY), "performance", 6)
    assert points == 0 and text.startswith("Performance: NOT GRADED (not graded: needs a CUDA GPU).")
    assert "Its 6 points were left out of this grade because speed is graded on a CUDA GPU only" in text
    assert "here the module is out of 4" in text and "you have 4 of 4" in text and "is out of 10" in text
    half = _record(VECTOR_ADD, public=(True, False), hidden=(False,))
    text, _ = record.part_report(half, "performance", 2)
    assert "out of 8" in text and "you have 2 of 8" in text
    other = _record(VECTOR_ADD, performance={"graded": False, "reason": "not graded: no reference in this checkout"})
    text, _ = record.part_report(other, "performance", 2)
    assert "on a CUDA GPU only" not in text and "no reference in this checkout" in text


# --- reasons ---------------------------------------------------------------------------------


def test_reason_counts_open_todos_whenever_cases_fail_and_else_names_the_failure():
    other_cause = _record(VECTOR_ADD, public=(True, False), todos=2)  # the TODOs are not what fails
    reason = report.reason(_row("ada", VECTOR_ADD, other_cause, {"public": 2}))
    assert reason == "2 TODO(s) open; first failure: add() raised ValueError: wrong size"
    no_todos = _record(VECTOR_ADD, public=(False, True))
    assert report.reason(_row("bob", VECTOR_ADD, no_todos, {"public": 2})) == "add() raised ValueError: wrong size"
    stub = _record(VECTOR_ADD, public=(False, False), hidden=(False,), todos=6, starting=True)
    assert report.reason(_row("cyd", VECTOR_ADD, stub, {"public": 0})).startswith(
        "unchanged starting kernel: 6 TODO(s) open; first failure:"
    )
    assert report.reason(_row("dee", VECTOR_ADD, _record(VECTOR_ADD, todos=3), {"public": 4})) == ""


# --- what a failed hidden case says of TODOs ---------------------------------------------------


def test_a_hidden_failure_names_todos_only_where_the_call_reaches_them():
    stub = stub_for(VECTOR_ADD)
    todos = open_todos(stub)
    note = results.hidden_todo_note(stub, todos, "add", VECTOR_ADD.track)
    assert note.startswith(" (") and "still open in the code add() runs" in note
    assert results.hidden_todo_note(stub, [], "add", VECTOR_ADD.track) == ""
    # a file that does not parse: which code runs is unknown, so the note says "may"
    assert (
        results.hidden_todo_note("def (:\n", todos, "add", VECTOR_ADD.track)
        == f" ({len(todos)} TODO(s) are still open in kernel.py; they may be the cause.)"
    )


def test_in_the_debugging_track_planted_bugs_are_not_blamed_on_todos():
    stub = stub_for(BASIC_DEBUGGING)
    todos = open_todos(stub)
    assert todos  # tools to write; the kernels' bugs are planted, with no TODO
    assert results.hidden_todo_note(stub, todos, "row_max", BASIC_DEBUGGING.track) == ""
    assert "boundary_sizes() runs" in results.hidden_todo_note(stub, todos, "boundary_sizes", BASIC_DEBUGGING.track)


# --- a module that no part can grade on this machine ------------------------------------------


def _given(rec: dict, names=None) -> dict:
    """``rec`` as ``record.with_given`` leaves it: ``names`` (default: every case) pass in the
    starting kernel."""
    return {**rec, "given": sorted(names if names is not None else (row["name"] for row in rec["cases"]))}


NOTHING = {"public": 0.0, "hidden": 0.0, "performance": 0.0}  # what the notebook's cells give it


def test_without_a_gpu_a_module_whose_starting_kernel_passes_every_case_is_not_graded(tmp_path):
    finished = _row("ada", SHARED_MEMORY, _given(_record(SHARED_MEMORY)), NOTHING)
    untouched = _row("bob", SHARED_MEMORY, _given(_record(SHARED_MEMORY, starting=True)), NOTHING)
    for row in (finished, untouched):
        assert report.out_of(row) == 0 and report.left_out(row) == {"public": 2, "hidden": 2, "performance": 6}
        assert report.status(row) == "not graded: needs a GPU"
        assert "only speed shows the work" in report.reason(row) and "grade this module on a GPU" in report.reason(row)
    grading = _grading(tmp_path, [finished, untouched])
    table = report.table(grading)
    assert "not graded: needs a GPU*" in table and "0/0" not in table and "4/4" not in table
    assert "the starting kernel already passes every case, so only speed shows the work" in table
    assert '(2 not graded at all: "not graded: needs a GPU")' in table
    grading.out.mkdir()
    report.write_csv(grading, grading.out / "grades.csv")
    written = list(csv.DictReader(open(grading.out / "grades.csv")))
    assert [(r["total"], r["max_points"], r["status"], r["left_out_points"]) for r in written] == [
        ("0.0", "0", "not graded: needs a GPU", "10")
    ] * 2
    groups, end, label = report.plot_data(grading)[SHARED_MEMORY.id]
    assert not any(groups.values()) and end == 0 and label == "not graded: needs a GPU (2 submission(s))"
    pytest.importorskip("matplotlib")
    report.write(grading)
    text = (grading.out / "report.md").read_text()
    assert "| 0.0 | 0 | not graded: needs a GPU |" in text and "only speed shows the work" in text


def test_on_a_gpu_or_where_the_starting_kernel_fails_some_cases_totals_are_as_before(tmp_path):
    timed = {"graded": True, "credit": 0.5, "ratio": 1.0}
    gpu = _row(
        "ada", SHARED_MEMORY, _given(_record(SHARED_MEMORY, performance=timed)), {**FULL_OPTIMIZATION, "performance": 3}
    )
    debugging = _given(_record(BASIC_DEBUGGING, public=(True, True), hidden=(True, True)), ["case 0", "hidden case 1"])
    planted = _row("bob", BASIC_DEBUGGING, debugging, {"public": 4.0, "hidden": 4.0, "performance": 0.0})
    assert (report.out_of(gpu), report.status(gpu), report.reason(gpu)) == (10, "graded", "")
    assert (report.out_of(planted), report.status(planted), report.reason(planted)) == (8, "graded", "")
    table = report.table(_grading(tmp_path, [gpu, planted]))
    assert "7/10" in table and "8/8" in table and "not graded: needs a GPU" not in table
    assert report.plot_data(_grading(tmp_path, [gpu]))[SHARED_MEMORY.id] == (
        {"edited": [7.0], "unchanged starting kernel": []},
        10,
        "points out of 10",
    )


def test_an_integrity_finding_is_still_zero_of_everything(tmp_path):
    finding = {"violation": "torch", "message": "computed with PyTorch"}
    cheat = _row("cyd", SHARED_MEMORY, _given(_record(SHARED_MEMORY, integrity=finding)), NOTHING)
    assert report.out_of(cheat) == 10 and report.left_out(cheat) == {} and report.status(cheat) == "graded"
    assert report.reason(cheat) == "integrity: computed with PyTorch"
    assert "0/10*" in report.table(_grading(tmp_path, [cheat]))


def test_the_pipeline_s_rows_carry_the_cases_the_starting_kernel_passes(tmp_path, monkeypatch):
    from grader.grade import collect, pipeline, runphase, store

    course_dir, results = tmp_path / "course", tmp_path / "course" / "results"
    assignment = f"{SHARED_MEMORY.track}-{SHARED_MEMORY.slug}"
    (course_dir / "submitted" / "ada" / assignment).mkdir(parents=True)
    (course_dir / "submitted" / "ada" / assignment / "kernel.py").write_text("# ada's\n")
    finished = {**_record(SHARED_MEMORY), "cases_sha256": "c"}
    starting = {**_record(SHARED_MEMORY, starting=True), "cases_sha256": "c"}
    asked = []
    monkeypatch.setattr(store, "starting_record", lambda where, module: asked.append((where, module.id)) or starting)
    outcome = runphase.FileOutcome([store.Submission("ada", SHARED_MEMORY, tmp_path / "x.py")], record=finished)
    summary = runphase.RunSummary([outcome], results, {})
    [row] = pipeline._rows(course_dir, [assignment], summary, collect.Collected())
    assert asked == [(results, SHARED_MEMORY.id)] and "given" not in finished  # read once, not written back
    assert row.record["given"] == ["case 0", "case 1", "hidden case 1"]
    assert report.status(_row("ada", SHARED_MEMORY, row.record, NOTHING)) == "not graded: needs a GPU"


def test_a_grade_without_a_current_record_is_starred_with_why(tmp_path):
    """A gradebook score whose run-phase record is gone (the module's cases changed since, and only
    another student was graded again) is not shown as a plain grade: it is starred, with the reason."""
    stale = _row("ada", VECTOR_ADD, None, {"public": 4.0, "hidden": 4.0, "performance": 0.0})
    stale.problem = "graded with earlier cases of this module, which have changed since: run make grade ..."
    text = report.table(_grading(tmp_path, [stale]))
    assert "8/10*" in text and "ada missing-elements-01-vector-add: graded with earlier cases" in text


def test_a_file_graded_with_other_cases_is_told_apart(tmp_path):
    from grader.grade import store

    source = b"# a kernel\n"
    assert not store.graded_with_other_cases(VECTOR_ADD, source, tmp_path)
    current = store.record_path(tmp_path, VECTOR_ADD, store.sha256(source), store.cases_hash(VECTOR_ADD))
    current.parent.mkdir(parents=True)
    current.write_text("{}")
    assert not store.graded_with_other_cases(VECTOR_ADD, source, tmp_path), "the current cases' record"
    current.with_name(f"{store.sha256(source)}-0123456789abcdef.json").write_text("{}")
    assert store.graded_with_other_cases(VECTOR_ADD, source, tmp_path)
