"""The order of a parallel run of this suite: longest units first, from the last run's timings."""

import json

from grader.authoring import test_order


def test_the_files_that_test_every_module_split_by_track():
    assert (
        test_order.work_unit("tests/test_mistakes.py::test_x[optimization/02-pipelining: a]")
        == "tests/test_mistakes.py:optimization"
    )
    assert test_order.work_unit("tests/test_runphase.py::test_y") == "tests/test_runphase.py"
    assert test_order.work_unit("tests/test_x.py::test_z[abc/def]") == "tests/test_x.py"


def test_measured_units_go_longest_first_and_unmeasured_heavy_ones_before_them():
    units = {"a": [1], "b": [1, 2, 3], "c": [1, 2], "heavy-new": [1], "d": [1]}
    history = {"a": 100.0, "b": 5.0, "c": 300.0, "d": 5.0}
    assert test_order.longest_first(units, history, heavy={"heavy-new"}) == ["heavy-new", "c", "a", "b", "d"]
    # Before any run: heavy first, then by number of tests.
    assert test_order.longest_first(units, {}, heavy={"a"}) == ["a", "b", "c", "heavy-new", "d"]


def test_a_run_merges_its_timings_per_device_mode(tmp_path):
    (tmp_path / test_order.HISTORY_FILE).write_text(json.dumps({"cuda": {"old": 9.0}, "interpreter": {"x": 1.0}}))
    clock = test_order.UnitClock(tmp_path, "cuda")
    clock.add("tests/test_a.py::t1", 1.25)
    clock.add("tests/test_a.py::t2", 2.0)
    clock.add("tests/test_mistakes.py::t[mastery/05-production-ready: m]", 4.0)
    clock.save()
    assert test_order.read_history(tmp_path, "cuda") == {
        "old": 9.0,
        "tests/test_a.py": 3.2,
        "tests/test_mistakes.py:mastery": 4.0,
    }
    assert test_order.read_history(tmp_path, "interpreter") == {"x": 1.0}


def test_an_unreadable_history_means_the_default_order(tmp_path):
    assert test_order.read_history(tmp_path, "cuda") == {}
    (tmp_path / test_order.HISTORY_FILE).write_text("{not json")
    assert test_order.read_history(tmp_path, "cuda") == {}
    (tmp_path / test_order.HISTORY_FILE).write_text(json.dumps({"cuda": {"a": "slow", "b": float("nan"), "c": 2}}))
    assert test_order.read_history(tmp_path, "cuda") == {"c": 2.0}
    (tmp_path / test_order.HISTORY_FILE).write_text("{not json")
    clock = test_order.UnitClock(tmp_path, "cuda")
    clock.add("tests/test_a.py::t", 1.0)
    clock.save()  # a broken file is replaced, not crashed on
    assert test_order.read_history(tmp_path, "cuda") == {"tests/test_a.py": 1.0}


def test_this_machine_s_timings_override_the_shipped_ones_unit_by_unit(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / test_order.SHIPPED_FILE).write_text(json.dumps({"cuda": {"a": 300.0, "b": 2.0}}))
    assert test_order.expected_seconds(tmp_path, "cuda") == {"a": 300.0, "b": 2.0}
    (tmp_path / test_order.HISTORY_FILE).write_text(json.dumps({"cuda": {"b": 50.0, "c": 1.0}}))
    assert test_order.expected_seconds(tmp_path, "cuda") == {"a": 300.0, "b": 50.0, "c": 1.0}
    assert test_order.expected_seconds(tmp_path, "interpreter") == {}


def test_the_shipped_timings_name_units_of_this_suite():
    """A renamed or split file leaves its old timing behind: the shipped file must be refreshed."""
    from grader.core.catalog import REPO_ROOT

    units = {
        test_order.work_unit(f"{path.relative_to(REPO_ROOT).as_posix()}::t[{track}/x]")
        for path in [*REPO_ROOT.glob("tests/**/test_*.py"), *REPO_ROOT.glob("tracks/*/*/test_kernel.py")]
        for track in ("missing-elements", "optimization", "debugging", "mastery")
    }
    units |= {unit.split(":")[0] for unit in units}
    for mode in ("cuda", "interpreter"):
        shipped = test_order.read_history(REPO_ROOT, mode, test_order.SHIPPED_FILE)
        assert shipped, f"{test_order.SHIPPED_FILE} has no timings for {mode}"
        assert not set(shipped) - units, f"{test_order.SHIPPED_FILE} times units that no longer exist"
