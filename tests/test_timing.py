"""Performance credit: full at the module's threshold, linear down to the floor, none below."""

import pytest

from grader.core.cases import Spec
from grader.grade.timing import credit


@pytest.mark.parametrize("ratio, expected", [(1.3, 1.0), (0.8, 1.0), (0.6, 0.5), (0.4, 0.0), (0.1, 0.0)])
def test_credit_is_linear_between_floor_and_threshold(ratio, expected):
    spec = Spec(api="f", make_inputs=None, reference=None)  # the defaults: 0.8, floor at half of it
    assert (spec.learner_threshold, spec.floor) == (0.8, 0.4)
    assert credit(ratio, spec.learner_threshold, spec.floor) == pytest.approx(expected)


def test_a_module_can_raise_the_floor_above_its_slow_starting_kernel():
    spec = Spec(api="f", make_inputs=None, reference=None, learner_threshold=0.9, learner_floor=0.6)
    assert credit(0.55, spec.learner_threshold, spec.floor) == 0.0
    assert credit(0.75, spec.learner_threshold, spec.floor) == pytest.approx(0.5)
