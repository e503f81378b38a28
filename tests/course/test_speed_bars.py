"""On a GPU: the grader's timed case of every module measures the GPU, and every optimization
module's speed bar separates its starting kernel from its reference.

The starting kernel (the untouched learner stub, which is correct) must earn no performance
credit, and the reference full credit, when both are timed in the same run against the reference,
as the grader times a submission. On a CPU these tests skip: the interpreter's timings say nothing
about a GPU (the memory-traffic bars stand in for them there).
"""

import pytest
import torch

from grader.core import bench, cases, protocols
from grader.core.loading import load_kernel
from grader.core.markers import modules_with_solutions
from grader.grade import scoring, timing

MODULES = [m for m in modules_with_solutions() if m.track == "optimization"]
TIMED = [m for m in modules_with_solutions() if cases.public(m)[0].bench_cases]
# The GPU's share of the timed loop that the reference must reach. The kernels' time and the
# loop's are two measurements, and a compute-bound kernel's clocks move between them (busy 0.87 to
# 1.02 for the matmul modules on an H100), so this catches a case whose host work is about as long
# as its GPU work (conv2d at batch 32: 0.76), not a small share.
BUSY = 0.8


def _gpu_ms_per_call(fn, input_sets: list, calls: int) -> float:
    """Milliseconds of GPU work (kernels, copies) per call, from a trace of ``calls`` calls. Not
    measured with the timed loop's own clock: the trace slows the host side of each call, which
    would make a call with much host work look host-bound."""
    from torch.autograd import DeviceType

    timing.loop_ms(fn, input_sets, 1)  # compiled and tuned before the trace
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as trace:
        for i in range(calls):
            args, kwargs = input_sets[i % len(input_sets)]
            fn(*args, **kwargs)
        torch.cuda.synchronize()
    work = [e for e in trace.events() if e.device_type == DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in work) / 1e3 / calls


@pytest.mark.cuda
@pytest.mark.timed
@pytest.mark.parametrize("module", TIMED, ids=[m.id for m in TIMED])
def test_the_graded_timing_measures_the_gpu_not_the_host(module):
    """The grader times back-to-back calls by the wall clock. If the reference's GPU work per call
    were shorter than its Python and launch work, the clock would measure the host, whose speed
    moves with the machine's load, and identical files would get different grades."""
    spec, _ = cases.public(module)
    case = spec.bench_cases[0]
    on = torch.device("cuda", torch.cuda.current_device())
    reference = protocols.timed(spec.protocol, load_kernel(module, "solutions").api(spec.api), spec.api)
    plan = timing.time_reference(timing.TimingInputs(case, timing.rotated_inputs(spec, case, 0, on)), reference, on)
    busy = _gpu_ms_per_call(reference, plan.input_sets, min(plan.reps, 50)) / plan.reference_ms
    print(f"{module.id}: {case.name}: GPU busy {busy:.2f} of the timed loop ({plan.reference_ms:.4f} ms a call)")
    assert busy >= BUSY, (
        f"{module.id}: on {case.name} the reference's GPU work fills only {busy:.0%} of its timed "
        f"loop ({plan.reference_ms:.4f} ms a call): the grade would time the host. Make the module's "
        "first benchmark case larger."
    )


@pytest.mark.cuda
@pytest.mark.timed
@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_starting_kernel_earns_nothing_and_the_reference_everything(module):
    """Timed as the grader times a submission: calls back to back over a window of about 0.3 s,
    rotating over input sets that together overflow the L2 cache, the repetitions set by the
    reference."""
    spec, _ = cases.public(module)
    case = spec.bench_cases[0]
    on = torch.device("cuda", torch.cuda.current_device())
    start = protocols.timed(spec.protocol, load_kernel(module, "learner").api(spec.api), spec.api)
    reference = protocols.timed(spec.protocol, load_kernel(module, "solutions").api(spec.api), spec.api)
    plan = timing.time_reference(timing.TimingInputs(case, timing.rotated_inputs(spec, case, 0, on)), reference, on)
    start_ratio = plan.reference_ms / timing.loop_ms(start, plan.input_sets, plan.reps)
    reference_ratio = plan.reference_ms / timing.loop_ms(reference, plan.input_sets, plan.reps)
    print(f"{module.id}: starting kernel {start_ratio:.3f}, reference again {reference_ratio:.3f} x the reference")
    assert scoring.credit(start_ratio, spec.learner_threshold, spec.floor) == 0.0, (
        f"{module.id}: the starting kernel runs at {start_ratio:.2f} x the reference on {case.name}, above "
        f"the floor of {spec.floor:.2f}: it would earn performance credit without any of the TODOs."
    )
    assert scoring.credit(reference_ratio, spec.learner_threshold, spec.floor) == 1.0, (
        f"{module.id}: the reference timed twice gives {reference_ratio:.2f}, below the threshold of "
        f"{spec.learner_threshold:.2f}: timing noise alone would cost a finished kernel credit."
    )


def test_make_check_reports_every_benchmark_case_against_the_bar(monkeypatch):
    """The words of the GPU speed report, with the timings faked (they need a GPU)."""
    import io

    from grader.core.catalog import find_module
    from grader.learn import speed

    module = find_module("optimization/03-shared-memory")
    spec, _ = cases.public(module)
    timed = {"yours": 2.0, "reference": 1.0, "pytorch": 3.0}
    monkeypatch.setattr(bench, "copy_bandwidth_gbs", lambda: 3000.0)
    monkeypatch.setattr(
        bench,
        "measure",
        lambda spec, case, impls: [bench.Measurement(case, name, timed[name], 1000.0, None) for name in impls],
    )
    out = io.StringIO()
    assert speed.report_speed(module, "learner", out) is False  # make check: not done yet
    text = out.getvalue()
    assert text.count("Speed on ") == len(spec.bench_cases) == 2
    assert (
        "runs at 0.50 x the reference speed (1.50 x PyTorch's): it is below the course's bar of 0.90 x "
        "(no performance credit at or below 0.60 x)" in text
    )
    timed["yours"] = 1.05
    assert speed.report_speed(module, "learner", io.StringIO()) is True
    assert speed.report_speed(module, "solutions", io.StringIO()) is None  # nothing to compare with


def test_progress_does_not_count_a_module_below_the_speed_bar_as_done(tmp_path, monkeypatch):
    from grader.core.catalog import find_module
    from grader.learn import progress

    monkeypatch.setattr(progress, "STORE", tmp_path / "progress.json")
    module = find_module("optimization/01-tiling")
    path = module.learner_dir / "kernel.py"
    progress.record(module, path, 30, 30, slow=True)
    assert progress.state(module) == progress.State(module, False, "all 30 tests pass; below the speed bar on a GPU")
    progress.record(module, path, 30, 30)
    assert progress.state(module).done
