"""The benchmark's rule for wrong results: a course implementation is not timed; PyTorch's own
baseline is timed all the same, with a note that says how far off it is."""

import importlib.util
import io
from dataclasses import replace

import pytest
import torch

from grader.core import bench, cases, device
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


def _production_benchmark():
    module = find_module("mastery/05-production-ready")
    spec = importlib.util.spec_from_file_location("production_benchmark", module.learner_dir / "benchmark.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    return module, benchmark


def test_the_production_benchmark_compares_three_agreeing_variants_per_operator(monkeypatch):
    """mastery/05's benchmark.py, run at small float32 sizes with a counting timer: every operator
    has its PyTorch, bare-launch and custom-op variants, and they agree before being timed."""
    module, benchmark = _production_benchmark()
    for _, _, sizes in benchmark.OPERATORS.values():
        shape = (1, 2, 24, 16) if sizes is benchmark.ATTENTION_SIZES else (5, 48)
        monkeypatch.setitem(sizes, "tiny", [(shape, torch.float32)])
    calls = []
    kernels = load_kernel(module, "solutions").namespace
    rows = benchmark.measure(kernels, "tiny", lambda fn: calls.append(fn()) or 1.0, where=device.torch_device())
    assert [op for op, *_ in rows] == ["layer_norm_gelu", "bias_gelu_residual", "attention"]
    assert all(set(values) == {"PyTorch eager", "bare launch", "custom op"} for *_, values in rows)
    assert len(calls) == 9
    assert "attention" in benchmark.table(rows, rows)
    # the study notebook times one operator the same way
    only = benchmark.measure(kernels, "tiny", lambda fn: 1.0, where=device.torch_device(), operators=["attention"])
    assert [op for op, *_ in only] == ["attention"]


def test_a_missed_row_is_called_host_bound_only_when_the_kernel_is_shorter_than_the_host_work():
    _, benchmark = _production_benchmark()
    tiny = [("op", (1, 64), torch.float32, {"PyTorch eager": 20.0, "bare launch": 20.0, "custom op": 110.0})]
    short_kernel = ("op", (8192, 4096), torch.float32, {"PyTorch eager": 0.2, "bare launch": 0.097, "custom op": 0.11})
    long_kernel = ("op", (8192, 8192), torch.float32, {"PyTorch eager": 0.5, "bare launch": 0.3, "custom op": 0.4})
    met = ("op", (4096, 4096), torch.float32, {"PyTorch eager": 0.1, "bare launch": 0.05, "custom op": 0.05})
    (note,) = benchmark.host_bound_notes([short_kernel, long_kernel, met], tiny)
    assert "op (8192, 4096) fp32 runs 97 us" in note and "110 us of host work" in note


def test_the_host_column_marks_host_bound_and_synchronizing_calls(untimed):
    """``make bench HOST=1``: each row gains its host and GPU time per call; a row whose host time
    reaches its GPU time is starred and explained, a call that waits for the GPU says so."""
    spec, public = cases.public(VECTOR_ADD)
    case = cases.for_mode(public, False)[0]
    split = {
        "reference": bench.HostAndDevice(host_ms=0.020, device_ms=0.050),
        "learner": bench.HostAndDevice(host_ms=0.080, device_ms=0.050),
        "pytorch": bench.HostAndDevice(host_ms=0.400, device_ms=None, synchronizes=True),
    }
    rows = [bench.Measurement(case, impl, 0.05, 1000.0, None, split=value) for impl, value in split.items()]
    table = bench.format_table(spec, rows, copy_gbs=1000.0)
    lines = table.splitlines()
    assert "host ms" in lines[1] and "GPU ms" in lines[1]
    assert lines[3].endswith("0.020     0.050") and lines[4].endswith("0.080     0.050*")
    assert lines[5].endswith("0.400      sync")
    assert any(line.startswith("*: host-bound") for line in lines) and any(line.startswith("sync:") for line in lines)
    plain = bench.format_table(spec, [bench.Measurement(case, "reference", 0.05, 1000.0, None)], copy_gbs=1000.0)
    assert "host ms" not in plain and "host-bound" not in plain


@pytest.mark.cuda
def test_host_and_gpu_time_are_told_apart_on_a_gpu():
    if not device.is_cuda():
        pytest.skip("needs a CUDA GPU: host and GPU time are the same clock under the interpreter")
    x = torch.randn(1 << 24, device="cuda")
    many_launches = bench.host_and_device_ms(lambda: [x[:1024].add_(1) for _ in range(50)])
    one_big = bench.host_and_device_ms(lambda: x.mul_(1.0))
    waits = bench.host_and_device_ms(lambda: x.sum().item())
    assert many_launches.host_bound and not one_big.host_bound, (many_launches, one_big)
    assert waits.synchronizes and waits.device_ms is None


def test_a_wrong_library_baseline_is_timed_with_its_name_in_the_note(untimed):
    spec, public = cases.public(VECTOR_ADD)
    case = cases.for_mode(public, False)[0]
    reference = load_kernel(VECTOR_ADD, "solutions").api(spec.api)
    rows = bench.measure(spec, case, {"reference": reference, "Liger-Kernel": _off_by_one})
    assert [row.impl for row in rows] == ["reference", "Liger-Kernel"]
    assert rows[1].note.startswith(f"Liger-Kernel's own result on {case.name} is outside")


def test_comparisons_beyond_pytorch_get_a_speedup_line_per_case():
    spec, public = cases.public(VECTOR_ADD)
    first, second = cases.for_mode(public, False)[:2]
    times = {"reference": 0.5, "pytorch": 0.75, "torch.compile": 0.5, "Liger-Kernel": 1.0}
    rows = [bench.Measurement(c, impl, ms, 1.0 / ms, None) for c in (first, second) for impl, ms in times.items()]
    lines = bench.format_table(spec, rows, copy_gbs=1000.0).splitlines()
    expected = (
        "reference runs at 1.50 x eager PyTorch, 1.00 x torch.compile, 2.00 x Liger-Kernel (their time / its time)"
    )
    assert lines.count(f"{first.name}: {expected}") == 1 and lines.count(f"{second.name}: {expected}") == 1
    only_pytorch = [r for r in rows if r.impl in ("reference", "pytorch")]
    assert "their time / its time" not in bench.format_table(spec, only_pytorch, copy_gbs=1000.0)


def test_make_bench_against_picks_the_named_comparisons_and_leaves_out_what_does_not_import():
    from grader.learn import speed

    def missing():
        raise ImportError("No module named 'liger_kernel'")

    spec = replace(cases.public(VECTOR_ADD)[0], library_baselines={"Liger-Kernel": missing, "Other": lambda: abs})
    assert list(speed.offered(spec)) == ["torch.compile", "Liger-Kernel", "Other"]
    out = io.StringIO()
    assert speed.comparisons(spec, (), out) == {} and out.getvalue() == ""
    assert speed.comparisons(spec, ["other"], out) == {"Other": abs}
    found = speed.comparisons(spec, ["all"], out)
    assert list(found) == ["torch.compile", "Other"]
    assert "Liger-Kernel is left out of add()'s table: it does not load here (No module named 'liger_kernel')" in (
        out.getvalue()
    )

    def broken():
        raise AttributeError("module 'triton' has no attribute 'foo'")

    spec = replace(spec, library_baselines={"Liger-Kernel": broken})
    assert speed.comparisons(spec, ["liger"], out) == {}  # a version that does not fit: left out too
    assert "it does not load here (AttributeError: module 'triton' has no attribute 'foo')" in out.getvalue()


def test_the_training_kernels_offer_liger_kernel_and_time_a_layers_sizes_in_make_bench_only():
    from grader.learn import speed

    module = find_module("mastery/04-training-kernels")
    module_spec, public = cases.public(module)
    specs = {spec.api: spec for spec in cases.specs_of(module_spec, public) if spec.bench_cases}
    for api in ("rms_norm", "layer_norm", "swiglu"):
        assert list(speed.offered(specs[api])) == ["torch.compile", "Liger-Kernel"]
        shapes = {(case.params["shape"], case.dtype) for case in specs[api].bench_only_cases}
        assert ((4096, 1024), torch.bfloat16) in shapes and ((8192, 4096), torch.float32) in shapes
        assert not shapes & {(case.params["shape"], case.dtype) for case in specs[api].bench_cases}


def test_one_repeat_that_waited_does_not_make_a_call_synchronizing():
    """``make bench HOST=1`` marked a bf16 rms_norm "sync" on an H200 although nothing in it waits
    for the GPU: one of its five repeats outlasted the sleep. A call that synchronizes waits in
    most repeats; an outlier is left out of the medians."""
    fine = [bench.Repeat(0.7, 0.4, waited=False) for _ in range(4)]
    outlier = bench.Repeat(3.0, 0.4, waited=True)
    assert bench.split_of([*fine[:2], outlier, *fine[2:]]) == bench.HostAndDevice(0.7, 0.4)
    waits = [bench.Repeat(2.0, 2.0, waited=True) for _ in range(3)]
    assert bench.split_of([*fine[:2], *waits]) == bench.HostAndDevice(2.0, None, synchronizes=True)


def test_a_library_baseline_that_raises_is_left_out_with_a_line(untimed):
    spec, public = cases.public(VECTOR_ADD)
    case = cases.for_mode(public, False)[0]
    reference = load_kernel(VECTOR_ADD, "solutions").api(spec.api)

    def refuses(x, y):
        raise NotImplementedError("float32 is not supported")

    failed = []
    rows = bench.measure(spec, case, {"reference": reference, "Liger-Kernel": refuses}, failed=failed)
    assert [row.impl for row in rows] == ["reference"]
    assert failed == [
        f"Liger-Kernel raised on {case.name} and is not timed there: NotImplementedError: float32 is not supported"
    ]
    with pytest.raises(NotImplementedError):  # the course's own kernel raising is never left out
        bench.measure(spec, case, {"reference": refuses}, failed=failed)


def test_optimizer_steps_are_not_offered_to_torch_compile():
    from grader.learn import speed

    module = find_module("mastery/04-training-kernels")
    module_spec, public = cases.public(module)
    adamw = next(s for s in cases.specs_of(module_spec, public) if s.api == "adamw" and s.bench_cases)
    assert adamw.torch_baseline is not None and "torch.compile" not in speed.offered(adamw)


def test_where_a_call_is_host_bound_the_speedup_line_compares_loop_times():
    spec, public = cases.public(VECTOR_ADD)
    case = cases.for_mode(public, False)[0]
    split = {  # (ms from do_bench, host ms, GPU ms): PyTorch's ms hides most of its host time
        "reference": (0.27, 0.36, 0.04),
        "pytorch": (0.07, 0.18, 0.03),
        "torch.compile": (0.32, 0.49, 0.02),
    }
    rows = [
        bench.Measurement(case, impl, ms, 1.0, None, split=bench.HostAndDevice(host, gpu))
        for impl, (ms, host, gpu) in split.items()
    ]
    lines = bench.format_table(spec, rows, copy_gbs=1000.0).splitlines()
    assert (
        f"{case.name}: reference runs at 0.50 x eager PyTorch, 1.36 x torch.compile "
        "(in a loop, the longer of host and GPU time; their time / its time)"
    ) in lines
    # GPU-bound everywhere: the benchmark's own times, as before
    bound = [replace(r, split=bench.HostAndDevice(0.01, r.ms)) for r in rows]
    assert f"{case.name}: reference runs at 0.26 x eager PyTorch, 1.19 x torch.compile (their time / its time)" in (
        bench.format_table(spec, bound, copy_gbs=1000.0).splitlines()
    )


def test_the_graph_column_shows_each_replayed_call_and_a_dash_where_none_could_be_captured():
    spec, public = cases.public(VECTOR_ADD)
    case = cases.for_mode(public, False)[0]
    rows = [
        bench.Measurement(case, "reference", 0.3, 1.0, None, split=bench.HostAndDevice(0.36, 0.04), graph_ms=0.041),
        bench.Measurement(
            case,
            "pytorch",
            0.1,
            1.0,
            None,
            note="eager PyTorch cannot be captured in a CUDA graph on the case (RuntimeError: sync).",
            split=bench.HostAndDevice(0.18, 0.03),
        ),
    ]
    lines = bench.format_table(spec, rows, copy_gbs=1000.0).splitlines()
    assert lines[1].rstrip().endswith("GPU ms  graph ms")
    assert lines[3].rstrip().endswith("0.041") and lines[4].rstrip().endswith("-")
    assert any(line.startswith("graph ms: the call captured once in a CUDA graph") for line in lines)
    assert "Note: eager PyTorch cannot be captured in a CUDA graph on the case (RuntimeError: sync)." in lines
    without = [replace(r, graph_ms=None) for r in rows]
    assert "graph ms" not in bench.format_table(spec, without, copy_gbs=1000.0)
