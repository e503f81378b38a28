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
    rows = [
        {"visibility": "public", "passed": True},
        {"visibility": "public", "passed": False},
        {"visibility": "hidden", "passed": True},
    ]
    assert scoring.case_share(rows, "public") == (1, 2) and scoring.case_share(rows, "hidden") == (1, 1)


def test_an_integrity_finding_withholds_every_part():
    assert scoring.withheld({"integrity": None}) is None
    assert (
        scoring.withheld({"integrity": {"violation": "torch", "message": "computed with PyTorch"}})
        == "computed with PyTorch"
    )


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


def test_cases_the_starting_kernel_passes_show_no_work_and_breaking_one_costs_a_case():
    from grader.grade.scoring import work_share

    rows = [{"name": n, "passed": p} for n, p in [("a", True), ("b", True), ("c", False), ("d", False)]]
    assert work_share(rows, {"a", "b"}) == (0.0, 2, 0)  # the untouched file: nothing earned
    rows[2]["passed"] = rows[3]["passed"] = True
    assert work_share(rows, {"a", "b"}) == (1.0, 2, 2)  # finished
    rows[0]["passed"] = False
    assert work_share(rows, {"a", "b"}) == (0.5, 2, 2)  # one fixed case cancelled by one broken
    assert work_share(rows, None)[0] == 0.75 and work_share(rows, {"a", "b", "c", "d"})[0] == 0.75


def test_feedback_counts_only_the_cases_the_starting_kernel_fails():
    from grader.grade.record import part_report, with_given

    def record(passes):
        return {
            "module": "debugging/02-error-handling",
            "cases_sha256": "c",
            "submission_sha256": "f" * 64,
            "device": "cpu",
            "graded_at": "now",
            "cases": [
                {"name": n, "visibility": "public", "passed": p, "message": "" if p else "wrong"}
                for n, p in passes.items()
            ],
        }

    starting = record({"a": True, "b": True, "c": False, "d": False})
    untouched = with_given(record({"a": True, "b": True, "c": False, "d": False}), starting)
    text, points = part_report(untouched, "public", 4)
    assert points == 0 and "already pass in the starting kernel" in text
    assert part_report(with_given(record({"a": True, "b": True, "c": True, "d": True}), starting), "public", 4)[1] == 4
    other_cases = {**starting, "cases_sha256": "other"}  # a starting record of other cases says nothing
    assert (
        part_report(with_given(record({"a": True, "b": True, "c": False, "d": False}), other_cases), "public", 4)[1]
        == 2
    )


def test_the_parts_of_a_module_count_as_their_points_whatever_their_number_of_cases():
    from grader.grade.scoring import parts_share, work_share

    # Part "scan" has 2 cases, "norms" 8: a finished scan is its weight's share, not 2 cases in 10.
    rows = [{"name": f"n{i}", "passed": False, "part": "norms"} for i in range(8)] + [
        {"name": f"s{i}", "passed": True, "part": "scan"} for i in range(2)
    ]
    weights = {"norms": 0.7, "scan": 0.3}
    assert parts_share(rows, set(), weights) == (pytest.approx(0.3), 10, 2)
    assert work_share(rows, set())[0] == pytest.approx(0.2), "unweighted, the scan's work would count 2 in 10"
    assert parts_share(rows, set(), None) == work_share(rows, set()), "a module of one part is unchanged"
    # A part with no rows here (no hidden case of it in this checkout) drops out of the weights.
    assert parts_share(rows[8:], set(), weights)[0] == pytest.approx(1.0)
    # Cases the starting kernel passes show no work within their part too.
    rows[-1]["passed"] = False
    assert parts_share(rows, {"s0"}, weights)[0] == pytest.approx(0.0)
    assert parts_share(rows, set(), weights)[0] == pytest.approx(0.15)


def test_a_module_of_several_parts_reports_each_part_s_cases_and_speed():
    from grader.grade import record

    parts = [
        {"name": "norms", "title": "the norms", "weight": 0.5},
        {"name": "scan", "title": "the scan", "weight": 0.5},
    ]
    rows = [
        {"name": "n", "visibility": "public", "passed": True, "message": "", "part": "norms"},
        {"name": "s1", "visibility": "public", "passed": False, "message": "wrong", "part": "scan"},
        {"name": "s2", "visibility": "public", "passed": False, "message": "wrong", "part": "scan"},
        {"name": "s3", "visibility": "public", "passed": True, "message": "", "part": "scan"},
    ]
    performance = {
        "graded": True,
        "credit": 0.5,
        "ratio": 0.7,
        "parts": {
            "norms": {"reason": "1.02 x the reference's speed"},
            "scan": {"reason": "not timed: the kernel must pass every case of the scan part first"},
        },
    }
    rec = {
        "module": "mastery/04-training-kernels",
        "cases": rows,
        "parts": parts,
        "given": [],
        "submission_sha256": "0" * 64,
        "device": "cpu",
        "graded_at": "now",
        "integrity": None,
        "performance": performance,
    }
    text, points = record.part_report(rec, "public", 4)
    assert points == pytest.approx(4 * (0.5 * 1 + 0.5 * 1 / 3), abs=0.01), "each part half, not 2 cases in 4"
    assert "part 1, the norms (50%): 1 of 1 pass; part 2, the scan (50%): 1 of 3 pass" in text
    text, points = record.part_report(rec, "performance", 2)
    assert points == 1.0 and "part 1, the norms (50%): 1.02 x" in text and "every case of the scan part" in text


# --- where correctness shows no work and speed cannot be graded ----------------------------------

NO_GPU = {"graded": False, "reason": "not graded: needs a CUDA GPU"}


def _record(module_id, passes, given, performance=None, integrity=None):
    """A record whose cases pass as ``passes`` ({name: (visibility, passed)}), with ``given``."""
    return {
        "module": module_id,
        "cases_sha256": "c",
        "submission_sha256": "f" * 64,
        "device": "cpu",
        "graded_at": "now",
        "starting_kernel": False,
        "load_error": None,
        "integrity": integrity,
        "given": sorted(given),
        "performance": dict(performance or NO_GPU),
        "cases": [
            {"name": n, "visibility": v, "passed": p, "message": "" if p else "wrong"} for n, (v, p) in passes.items()
        ],
    }


OPTIMIZATION = "optimization/03-shared-memory"
EVERY_CASE = {"p1": ("public", True), "p2": ("public", True), "h1": ("hidden", True)}


def test_without_a_gpu_a_module_whose_starting_kernel_passes_every_case_is_not_graded():
    from grader.grade.record import graded_total, part_report

    finished = _record(OPTIMIZATION, EVERY_CASE, given=EVERY_CASE)
    assert scoring.shows_no_work(finished, "public") and scoring.shows_no_work(finished, "hidden")
    assert scoring.graded_parts(finished, "optimization") == {}
    assert scoring.not_graded_here(finished, "optimization")
    assert graded_total(finished) == (0.0, 0)
    why = "the starting kernel already passes every case, so only speed shows the work"
    for part, out_of in scoring.points("optimization").items():
        text, points = part_report(finished, part, out_of)
        assert points == 0 and "NOT GRADED" in text and why in text and "grade this module on a GPU" in text
    assert "This module is not graded on this machine" in part_report(finished, "performance", 6)[0]
    assert "pass: NOT GRADED, 0 of 2 points" in part_report(finished, "public", 2)[0]


def test_on_a_gpu_the_same_record_is_graded_as_before():
    from grader.grade.record import graded_total, part_report

    timed = _record(OPTIMIZATION, EVERY_CASE, EVERY_CASE, performance={"graded": True, "credit": 0.5, "ratio": 1.0})
    assert not scoring.shows_no_work(timed, "public") and not scoring.not_graded_here(timed, "optimization")
    assert scoring.graded_parts(timed, "optimization") == scoring.points("optimization")
    assert graded_total(timed) == (7.0, 10)  # 2 + 2 for the cases, half of the 6 for speed
    text, points = part_report(timed, "public", 2)
    assert points == 2 and "NOT GRADED" not in text


def test_where_the_starting_kernel_passes_only_some_cases_they_count_as_before():
    from grader.grade.record import graded_total, part_report

    passes = {"a": ("public", True), "b": ("public", True), "c": ("public", True), "h": ("hidden", True)}
    debugging = _record("debugging/02-error-handling", passes, given={"a", "h"})
    assert not scoring.shows_no_work(debugging, "public") and scoring.shows_no_work(debugging, "hidden")
    assert scoring.graded_parts(debugging, "debugging") == {"public": 4}  # its hidden case shows no work
    assert graded_total(debugging) == (4.0, 4)
    text, points = part_report(debugging, "hidden", 4)
    assert points == 0 and "every hidden case" in text
    some = _record("debugging/02-error-handling", {**passes, "h": ("hidden", True), "i": ("hidden", True)}, {"a", "h"})
    assert scoring.graded_parts(some, "debugging") == {"public": 4, "hidden": 4}
    assert graded_total(some) == (8.0, 8) and part_report(some, "public", 4)[1] == 4


def test_an_integrity_finding_still_counts_every_part_as_failed():
    from grader.grade.record import graded_total, part_report

    cheat = _record(OPTIMIZATION, EVERY_CASE, EVERY_CASE, integrity={"violation": "torch", "message": "used torch"})
    assert not scoring.shows_no_work(cheat, "public") and not scoring.not_graded_here(cheat, "optimization")
    assert scoring.graded_parts(cheat, "optimization") == scoring.points("optimization")
    assert graded_total(cheat) == (0.0, 10)
    assert all(part_report(cheat, part, n)[1] == 0 for part, n in scoring.points("optimization").items())


def test_a_checkout_without_hidden_cases_leaves_them_out_only_where_no_case_shows_work():
    public_only = {"p1": ("public", True), "p2": ("public", True)}
    assert scoring.graded_parts(_record(OPTIMIZATION, public_only, public_only), "optimization") == {}
    partly = _record("debugging/02-error-handling", {**public_only, "p3": ("public", False)}, public_only)
    assert scoring.graded_parts(partly, "debugging") == {"public": 4, "hidden": 4}  # as before


def test_the_notebook_says_when_a_module_is_not_graded_without_a_gpu():
    """The assignment notebook's introduction tells the optimization track (correct but slow
    starting kernels) that without a GPU nothing is graded, and no other track."""
    from grader.core.catalog import find_module
    from grader.grade import course

    def intro(module_id):
        module = find_module(module_id)
        return course._intro(module, course.assignment_name(module))

    assert "not graded until it runs on a GPU" in intro("optimization/03-shared-memory")
    assert "not graded until it runs on a GPU" not in intro("debugging/02-error-handling")
