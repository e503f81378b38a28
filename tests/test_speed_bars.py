"""On a GPU: every optimization module's speed bar separates its starting kernel from its reference.

The starting kernel (the untouched learner stub, which is correct) must earn no performance
credit, and the reference full credit, when both are timed in the same run against the reference,
as the grader times a submission. On a CPU these tests skip: the interpreter's timings say nothing
about a GPU (the memory-traffic bars stand in for them there).
"""

import pytest

from grader.core import bench, cases
from grader.core.loading import load_kernel
from grader.core.markers import modules_with_solutions
from grader.grade.timing import credit

MODULES = [m for m in modules_with_solutions() if m.track == "optimization"]


@pytest.mark.cuda
@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_starting_kernel_earns_nothing_and_the_reference_everything(module):
    spec, _ = cases.public(module)
    case = spec.bench_cases[0]
    start = load_kernel(module, "learner").api(spec.api)
    reference = load_kernel(module, "solutions").api(spec.api)
    rows = {row.impl: row.ms for row in bench.measure(
        spec, case, {"reference": reference, "starting kernel": start, "reference again": reference})}
    start_ratio = rows["reference"] / rows["starting kernel"]
    reference_ratio = rows["reference"] / rows["reference again"]
    assert credit(start_ratio, spec.learner_threshold, spec.floor) == 0.0, (
        f"{module.id}: the starting kernel runs at {start_ratio:.2f} x the reference on {case.name}, above "
        f"the floor of {spec.floor:.2f}: it would earn performance credit without any of the TODOs.")
    assert credit(reference_ratio, spec.learner_threshold, spec.floor) == 1.0, (
        f"{module.id}: the reference timed twice gives {reference_ratio:.2f}, below the threshold of "
        f"{spec.learner_threshold:.2f}: timing noise alone would cost a finished kernel credit.")
