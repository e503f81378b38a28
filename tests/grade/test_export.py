"""What an instructor publishes (grader.grade.export, grader.grade.deadlines): lms.csv, the
students' summaries, the roster and the deadline file, built from rows as the pipeline has them
after nbgrader (points from the gradebook, records from the run phase), without running either.
"""

from __future__ import annotations

import csv
import datetime as dt
import sys
from pathlib import Path

import pytest

from grader.core.catalog import find_module
from grader.grade import course, deadlines, export, report
from grader.grade.pipeline import ClassGrades, Row

VECTOR_ADD = find_module("missing-elements/01-vector-add")
SOFTMAX = find_module("missing-elements/03-softmax")
TILING = find_module("optimization/01-tiling")
UTC = dt.timezone.utc
DUE = dt.datetime(2026, 3, 2, 23, 0, tzinfo=UTC)


def _record(module, passed: int = 4, total: int = 4, performance_graded: bool = False) -> dict:
    cases = [
        {
            "name": f"case {i}",
            "visibility": "public",
            "passed": i < passed,
            "seconds": 0.0,
            "message": "" if i < passed else "3 of 1000 elements are wrong: check the mask",
        }
        for i in range(total)
    ]
    return {
        "module": module.id,
        "load_error": None,
        "integrity": None,
        "todos": [],
        "cases": cases,
        "totals": {"passed": passed, "total": total},
        "graded_at": "2026-03-01T10:00:00+00:00",
        "performance": {
            "graded": performance_graded,
            "reason": "" if performance_graded else "not graded: needs a CUDA GPU",
        },
    }


def _row(student: str, module, scores: dict | None = None, submitted_at=None, **record) -> Row:
    row = Row(
        student,
        course.assignment_name(module),
        module,
        record=_record(module, **record),
        scores=dict(scores if scores is not None else {"public": 4.0, "hidden": 4.0, "performance": 0.0}),
    )
    row.submitted_at = submitted_at
    return row


def _lms(rows, roster=None, due=None) -> list[dict]:
    table = export.lms_rows(export.publish(rows, roster, due))
    return [dict(zip(table[0], line)) for line in table[1:]]


def _grading(tmp_path: Path, rows: list[Row]) -> ClassGrades:
    return ClassGrades(rows, tmp_path / "course", tmp_path / "grades", protections={}, seconds={})


# --- lms.csv -------------------------------------------------------------------------------------


def test_columns_are_the_runs_modules_in_course_order_then_the_totals():
    rows = [
        _row("bo", SOFTMAX),
        _row("al", TILING, {"public": 2.0, "hidden": 2.0, "performance": 0.0}),
        _row("al", VECTOR_ADD),
    ]
    header = export.lms_rows(export.publish(rows))[0]
    assert header == [
        "student",
        "missing-elements-01-vector-add",
        "missing-elements-03-softmax",
        "optimization-01-tiling",
        "total",
        "out_of",
        "late_penalty",
        "late",
        "missing",
        "notes",
    ]
    assert "missing-elements-02-matrix-mul" not in header  # a course module nobody was assigned


def test_out_of_leaves_out_performance_that_was_not_graded_and_points_have_two_decimals():
    cpu = _row("al", VECTOR_ADD, {"public": 1.333, "hidden": 2.6667, "performance": 0.0})
    gpu = _row("al", TILING, {"public": 2.0, "hidden": 1.0, "performance": 4.5}, performance_graded=True)
    [al] = _lms([cpu, gpu])
    assert al["missing-elements-01-vector-add"] == "4.00" and al["optimization-01-tiling"] == "7.50"
    assert al["total"] == "11.50"
    assert al["out_of"] == "18.00"  # 8 (no performance on a CPU) + 10 (timed on a GPU)
    assert al["late_penalty"] == "0.00" and al["late"] == "" and al["missing"] == "" and al["notes"] == ""


def test_a_student_who_skipped_a_module_gets_a_named_zero_out_of_what_the_others_were():
    rows = [_row("al", VECTOR_ADD), _row("al", SOFTMAX), _row("bo", VECTOR_ADD)]
    by_student = {line["student"]: line for line in _lms(rows)}
    bo = by_student["bo"]
    assert bo["missing-elements-03-softmax"] == "0.00" and bo["missing"] == "missing-elements-03-softmax"
    assert bo["total"] == "8.00" and bo["out_of"] == "16.00"
    assert by_student["al"]["missing"] == ""


def test_the_roster_adds_whoever_handed_in_nothing_and_names_who_is_not_on_it():
    rows = [_row("al", VECTOR_ADD), _row("zed", VECTOR_ADD)]
    published = export.publish(rows, roster=["al", "cy"])
    by_student = {line["student"]: line for line in _lms(rows, roster=["al", "cy"])}
    assert sorted(by_student) == ["al", "cy", "zed"]
    assert by_student["cy"]["missing-elements-01-vector-add"] == "0.00"
    assert by_student["cy"]["missing"] == "missing-elements-01-vector-add" and by_student["cy"]["out_of"] == "8.00"
    assert published.not_on_roster == ["zed"] and "not on the roster" in by_student["zed"]["notes"]
    assert "not on the roster" not in by_student["al"]["notes"]


def test_a_submission_without_a_grade_is_left_empty_and_counted_nowhere():
    broken = _row("al", SOFTMAX, scores={})
    broken.record, broken.problem = None, "Grader error: the grading worker died twice"
    [al] = _lms([_row("al", VECTOR_ADD), broken])
    assert al["missing-elements-03-softmax"] == "" and al["missing"] == ""
    assert al["total"] == "8.00" and al["out_of"] == "8.00"
    assert "missing-elements-03-softmax: no grade (Grader error" in al["notes"]


# --- the roster ----------------------------------------------------------------------------------


def test_a_roster_is_one_id_per_line_or_a_csv_with_a_student_column(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("# the class\nal\n\nbo\nal\n")
    assert export.read_roster(plain) == ["al", "bo"]
    lms = tmp_path / "lms.csv"
    lms.write_text("\ufeffName,Student,Section\nAl Ng,al,1\nBo Li,bo,2\n", encoding="utf-8")
    assert export.read_roster(lms) == ["al", "bo"]


@pytest.mark.parametrize(
    "text, said", [("name,section\nAl,1\n", "none is called student"), ("\n# nobody\n", "names no student")]
)
def test_a_roster_that_cannot_be_read_says_what_it_should_hold(tmp_path, text, said):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(export.RosterError, match=said):
        export.read_roster(path)


# --- deadlines -----------------------------------------------------------------------------------


def test_a_late_submission_loses_a_percent_per_started_day_up_to_the_cap_in_lms_csv_only():
    deadline = deadlines.Deadline(DUE, penalty_per_day=10, cap=15)
    late = _row("al", VECTOR_ADD, submitted_at=DUE + dt.timedelta(hours=26))  # two started days: 20%, capped
    on_time = _row("bo", VECTOR_ADD, submitted_at=DUE - dt.timedelta(minutes=1))
    by_student = {line["student"]: line for line in _lms([late, on_time], due={late.assignment: deadline})}
    al = by_student["al"]
    assert al["missing-elements-01-vector-add"] == "6.80" and al["total"] == "6.80"
    assert al["late_penalty"] == "1.20" and al["late"] == "26.00"
    assert "26.00 h late, -1.20 points (15%)" in al["notes"]
    assert by_student["bo"]["missing-elements-01-vector-add"] == "8.00" and by_student["bo"]["late"] == "0.00"
    assert late.scores == {"public": 4.0, "hidden": 4.0, "performance": 0.0}  # the gradebook's points


def test_a_time_without_offset_is_read_in_the_deadlines_timezone():
    from zoneinfo import ZoneInfo

    due = dt.datetime(2026, 3, 2, 23, 59, tzinfo=ZoneInfo("Europe/Zurich"))
    deadline = deadlines.Deadline(due, penalty_per_day=50)
    assert deadline.hours_late(dt.datetime(2026, 3, 2, 23, 0)) == 0  # 23:00 in Zurich: on time
    assert deadline.hours_late(dt.datetime(2026, 3, 3, 1, 59)) == pytest.approx(2.0)
    assert deadline.hours_late(dt.datetime(2026, 3, 2, 23, 0, tzinfo=UTC)) == pytest.approx(0.0167, abs=1e-3)


def test_no_submission_time_means_no_penalty_and_says_so():
    row = _row("al", VECTOR_ADD)  # no timestamp.txt
    [al] = _lms([row], due={row.assignment: deadlines.Deadline(DUE, 10, 50)})
    assert al["total"] == "8.00" and al["late"] == ""
    assert "no submission time, so no late penalty" in al["notes"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib needs Python 3.11")
def test_a_toml_deadline_file_gives_defaults_and_one_table_per_module(tmp_path):
    path = tmp_path / "deadlines.toml"
    path.write_text(
        'timezone = "Europe/Zurich"\npenalty_per_day = 10\ncap = 30\n\n'
        '["missing-elements/01-vector-add"]\ndue = 2026-03-02T23:59:00+01:00\n\n'
        '["missing-elements-03-softmax"]\ndue = "2026-03-09 23:59"\npenalty_per_day = 25\n'
    )
    loaded = deadlines.load(path)
    assert set(loaded) == {"missing-elements-01-vector-add", "missing-elements-03-softmax"}
    first, second = loaded["missing-elements-01-vector-add"], loaded["missing-elements-03-softmax"]
    assert first.due == dt.datetime(2026, 3, 2, 22, 59, tzinfo=UTC) and (first.penalty_per_day, first.cap) == (10, 30)
    assert second.due.utcoffset() == dt.timedelta(hours=1) and second.penalty_per_day == 25


def test_a_csv_deadline_file_has_a_row_per_module(tmp_path):
    path = tmp_path / "deadlines.csv"
    path.write_text("module,due,penalty_per_day,cap\nmissing-elements/01-vector-add,2026-03-02T23:59:00-05:00,5,\n")
    loaded = deadlines.load(path)["missing-elements-01-vector-add"]
    assert loaded.due == dt.datetime(2026, 3, 3, 4, 59, tzinfo=UTC) and loaded.penalty_per_day == 5
    assert loaded.cap == 100  # an empty cap: none


@pytest.mark.parametrize(
    "row, said",
    [
        ("missing-elements/01-vector-ad,2026-03-02T23:59:00+01:00,5,50", "Did you mean missing-elements/01-vector-add"),
        ("missing-elements/01-vector-add,2026-03-02T23:59:00,5,50", "has no timezone"),
        ("missing-elements/01-vector-add,next monday,5,50", "is not a date and time"),
        ("missing-elements/01-vector-add,2026-03-02T23:59:00+01:00,5,150", "from 0 to 100"),
    ],
)
def test_a_deadline_file_with_a_mistake_names_it(tmp_path, row, said):
    path = tmp_path / "deadlines.csv"
    path.write_text(f"module,due,penalty_per_day,cap\n{row}\n")
    with pytest.raises(deadlines.DeadlineError, match=said):
        deadlines.load(path)


def test_nbgraders_timestamps_are_read_with_or_without_a_zone(tmp_path):
    assert deadlines.parse_time("2026-03-02 22:59:00.123456 UTC") == dt.datetime(
        2026, 3, 2, 22, 59, 0, 123456, tzinfo=UTC
    )
    assert deadlines.parse_time("2026-03-02 23:59:00+01:00").utcoffset() == dt.timedelta(hours=1)
    assert deadlines.parse_time("2026-03-02 23:59:00").tzinfo is None
    assert deadlines.parse_time("yesterday") is None
    deadlines.write_timestamp(tmp_path, DUE)
    assert deadlines.read_timestamp(tmp_path) == DUE


# --- the students' summaries and the files ------------------------------------------------------


def test_each_student_gets_a_summary_with_points_out_of_penalty_reason_and_feedback(tmp_path):
    failing = _row(
        "al",
        VECTOR_ADD,
        {"public": 3.0, "hidden": 4.0, "performance": 0.0},
        passed=3,
        submitted_at=DUE + dt.timedelta(hours=5),
    )
    failing.feedback = tmp_path / "course" / "feedback" / "al" / failing.assignment / f"{failing.assignment}.html"
    grading = _grading(tmp_path, [failing, _row("bo", VECTOR_ADD)])
    published = export.write(
        grading, roster=["al", "bo", "cy"], deadlines={failing.assignment: deadlines.Deadline(DUE, 10, 50)}
    )
    text = (tmp_path / "grades" / "students" / "al.md").read_text()
    assert "| missing-elements/01-vector-add | 6.30 | 8 | 5.00 h | -0.70 (10%) |" in text
    assert report.reason(failing) and report.reason(failing) in text
    assert f"{failing.assignment}.html (in the course folder: feedback/al/{failing.assignment}/" in text
    assert "Performance was not graded" in text and "costs 10% of the points earned, at most 50%" in text
    assert "| no submission |" in (tmp_path / "grades" / "students" / "cy.md").read_text()
    with open(published.lms_csv, newline="") as handle:
        assert [line["student"] for line in csv.DictReader(handle)] == ["al", "bo", "cy"]


def test_summaries_of_students_no_longer_in_the_run_are_removed_and_odd_ids_make_safe_names(tmp_path):
    folder = tmp_path / "grades" / "students"
    folder.mkdir(parents=True)
    (folder / "gone.md").write_text("an earlier run's\n")
    export.write(_grading(tmp_path, [_row("../al b", VECTOR_ADD)]))
    assert sorted(p.name for p in folder.iterdir()) == ["_al_b.md"]


# --- a module that no part can grade on this machine ---------------------------------------------

DEBUGGING = find_module("debugging/02-error-handling")
NOTHING = {"public": 0.0, "hidden": 0.0, "performance": 0.0}  # what the notebook's cells give it


def _given(row: Row, names=None) -> Row:
    """``row`` with its record as ``record.with_given`` leaves it: ``names`` (default: every case)
    pass in the starting kernel."""
    cases = row.record["cases"]
    row.record = {**row.record, "given": sorted(names if names is not None else (c["name"] for c in cases))}
    return row


def test_without_a_gpu_a_module_whose_starting_kernel_passes_every_case_is_not_published(tmp_path):
    idle = _given(_row("al", TILING, NOTHING))
    assert export.out_of(idle) == 0
    [al] = _lms([_row("al", VECTOR_ADD), idle])
    assert al["optimization-01-tiling"] == "" and al["missing"] == ""  # not a 0 for the LMS to import
    assert al["total"] == "8.00" and al["out_of"] == "8.00"
    assert (
        "optimization-01-tiling: not graded: needs a GPU, as the starting kernel already passes every case"
        in (al["notes"])
    )
    assert "grade this module on a GPU" in al["notes"]
    published = export.publish([idle])
    assert not published.ungraded, "not a grader error to grade again on the same machine"
    text = export.summary(published, "al", tmp_path)
    assert "| optimization/01-tiling | not graded: needs a GPU | 0 |" in text
    assert "Not graded on this machine (not graded: needs a GPU): optimization/01-tiling, as the starting" in text
    assert "only speed shows the work" in text and "Performance was not graded for" not in text


def test_on_a_gpu_or_where_the_starting_kernel_fails_some_cases_the_points_are_as_before(tmp_path):
    timed = _given(_row("al", TILING, {"public": 2.0, "hidden": 2.0, "performance": 3.0}, performance_graded=True))
    planted = _given(_row("al", DEBUGGING, {"public": 4.0, "hidden": 0.0, "performance": 0.0}), ["case 0"])
    [al] = _lms([timed, planted])
    assert al["optimization-01-tiling"] == "7.00" and al["debugging-02-error-handling"] == "4.00"
    assert al["total"] == "11.00" and al["out_of"] == "18.00" and al["notes"] == ""
    assert "not graded: needs a GPU" not in export.summary(export.publish([timed, planted]), "al", tmp_path)


def test_an_integrity_finding_still_publishes_zero_of_everything():
    cheat = _given(_row("al", TILING, NOTHING))
    cheat.record["integrity"] = {"violation": "torch", "message": "computed with PyTorch"}
    [al] = _lms([cheat])
    assert al["optimization-01-tiling"] == "0.00" and al["total"] == "0.00" and al["out_of"] == "10.00"
