"""The scoring rules (grader.grade.scoring): what each part of a module is worth and how a record
turns into points."""

import pytest

from grader.grade import scoring


def test_every_module_is_out_of_ten_and_the_optimization_track_is_mostly_speed():
    assert scoring.points("missing-elements") == {"public": 4, "hidden": 4, "performance": 2}
    assert scoring.points("optimization") == {"public": 2, "hidden": 2, "performance": 6}
    for track in ("missing-elements", "optimization", "debugging", "mastery"):
        assert sum(scoring.points(track).values()) == 10 and tuple(scoring.points(track)) == scoring.PARTS


def test_the_credit_curve_is_linear_between_the_floor_and_the_threshold():
    assert scoring.credit(0.5, 0.8, 0.5) == 0.0 and scoring.credit(0.3, 0.8, 0.5) == 0.0
    assert scoring.credit(0.8, 0.8, 0.5) == 1.0 and scoring.credit(3.0, 0.8, 0.5) == 1.0
    assert scoring.credit(0.65, 0.8, 0.5) == pytest.approx(0.5)


def test_part_points_are_a_share_of_the_part_clamped_and_rounded():
    assert scoring.part_points(1 / 3, 4) == 1.33
    assert scoring.part_points(1.5, 4) == 4.0 and scoring.part_points(-1.0, 4) == 0.0


def test_cases_are_counted_by_visibility():
    rows = [{"visibility": "public", "passed": True}, {"visibility": "public", "passed": False},
            {"visibility": "hidden", "passed": True}]
    assert scoring.case_share(rows, "public") == (1, 2) and scoring.case_share(rows, "hidden") == (1, 1)


def test_an_integrity_finding_withholds_every_part():
    assert scoring.withheld({"integrity": None}) is None
    assert scoring.withheld({"integrity": {"violation": "torch", "message": "computed with PyTorch"}}) == \
        "computed with PyTorch"


def test_performance_left_out_is_none_not_zero():
    assert scoring.performance_share({"graded": False, "reason": "needs a CUDA GPU"}, 0.8, 0.5) is None
    assert scoring.performance_share({"graded": True, "credit": 0.25}, 0.8, 0.5) == 0.25
    assert scoring.performance_share({"graded": True, "ratio": 0.65}, 0.8, 0.5) == pytest.approx(0.5)


def test_graded_parts_leave_out_performance_that_was_not_graded():
    from grader.grade.scoring import graded_parts
    cpu = {"performance": {"graded": False, "reason": "no CUDA GPU"}}
    assert graded_parts(cpu, "optimization") == {"public": 2, "hidden": 2}
    assert graded_parts({"performance": {"graded": True, "credit": 0.5}}, "optimization")["performance"] == 6
    cheat = {**cpu, "integrity": {"violation": "torch", "message": "computed with PyTorch"}}
    assert sum(graded_parts(cheat, "mastery").values()) == 10
    assert sum(graded_parts(None, "mastery").values()) == 10
