"""Performance credit: full at the module's threshold, linear down to the floor, none below."""

import pytest

from grader.grade.timing import FLOOR_FRACTION, credit


@pytest.mark.parametrize("ratio, expected", [(1.3, 1.0), (0.8, 1.0), (0.6, 0.5), (0.4, 0.0), (0.1, 0.0)])
def test_credit_is_linear_between_floor_and_threshold(ratio, expected):
    assert FLOOR_FRACTION == 0.5
    assert credit(ratio, threshold=0.8) == pytest.approx(expected)
