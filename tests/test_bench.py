"""The benchmark's rule for wrong results: a course implementation is not timed; PyTorch's own
baseline is timed all the same, with a note that says how far off it is."""

import pytest

from grader.core import bench, cases
from grader.core.catalog import find_module
from grader.core.loading import load_kernel

VECTOR_ADD = find_module("missing-elements/01-vector-add")


def _off_by_one(x, y):
    return x + y + 1


@pytest.fixture
def untimed(monkeypatch):
    """GPU timing stands in for nothing on a CPU: each call runs once and counts 2 ms."""
    monkeypatch.setattr(bench, "time_ms", lambda fn: (fn(), 2.0)[1])


def test_a_wrong_pytorch_baseline_is_timed_with_a_note(untimed):
    spec, public = cases.public(VECTOR_ADD)
    case = cases.for_mode(public, False)[0]
    reference = load_kernel(VECTOR_ADD, "solutions").api(spec.api)
    rows = bench.measure(spec, case, {"reference": reference, "pytorch": _off_by_one})
    assert [row.impl for row in rows] == ["reference", "pytorch"] and rows[1].ms == 2.0
    assert rows[0].note is None
    assert "outside this module's tolerance" in rows[1].note and case.name in rows[1].note
    assert "Largest error 1 " in rows[1].note and "\n" not in rows[1].note
    assert "check the loads" not in rows[1].note  # advice for a learner's kernel, not for PyTorch
    table = bench.format_table(spec, rows, copy_gbs=1000.0)
    assert table.splitlines()[-1] == f"Note: {rows[1].note}"


def test_a_wrong_course_implementation_is_not_timed(untimed):
    spec, public = cases.public(VECTOR_ADD)
    case = cases.for_mode(public, False)[0]
    with pytest.raises(AssertionError, match="yours is wrong on .*, so it is not timed"):
        bench.measure(spec, case, {"yours": _off_by_one, "pytorch": _off_by_one})
