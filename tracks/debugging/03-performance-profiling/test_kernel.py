"""Public tests for 03-performance-profiling.  Run:  pytest tracks/debugging/03-performance-profiling

Four kinds of tests:

- bias_act() cases (SPEC and CASES, as data: the grader reads them too). Its values are compared
  with a float64 reference; on a CPU, the cases large enough to judge ("memory traffic checked")
  also read the memory traffic the call asked for, as the interpreter saw it: the warp-wide
  accesses must be coalesced, the programs must each move a fair amount of memory (4 KiB), and
  the call must move no more than 1.25 x the bytes the problem needs. On a GPU the speed itself
  is tested.
- bench() on a fake GPU: a device whose work runs only when someone waits for it, and a clock
  that says how much time has passed. The order of flushes, stopwatch readings and calls is then
  visible, and each timing mistake gives its own wrong number.
- the GB/s, TFLOP/s and roofline arithmetic, on numbers worked out by hand.
- refusals (cases of CASES too): bias_act(), the rates and roofline() must refuse impossible inputs
  with an error that says what is wrong.
"""

import math
import weakref
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import triton

from grader import device
from grader.cases import Case, Spec, refusal
from grader.checks import check_case, compare, expect_error
from grader.instrument import AccessRecorder
from grader.traffic import Traffic, describe

PYTEST_ONLY = {
    "test_bench_times_each_call_alone":
        "bench() takes a Python function to time and a stopwatch; this test hands it a fake GPU's functions "
        "and clock, and the grader sends its sandboxed child tensors and plain data only.",
    "test_bench_calls_fn_warmup_plus_rep_times":
        "bench() takes a Python function to time and a stopwatch; this test hands it a fake GPU's functions "
        "and clock, and the grader sends its sandboxed child tensors and plain data only.",
    "test_bench_warm_up_calls_come_before_the_first_clock_reading":
        "bench() takes a Python function to time and a stopwatch; this test hands it a fake GPU's functions "
        "and clock, and the grader sends its sandboxed child tensors and plain data only.",
    "test_wall_clock_waits_for_the_device_before_every_reading":
        "WallClock() takes a clock and a sync function (here a fake GPU's), and the grader sends its "
        "sandboxed child tensors and plain data only.",
    "test_bench_flushes_before_every_timed_call_outside_the_interval":
        "bench() takes a Python function to time and a stopwatch; this test hands it a fake GPU's functions "
        "and clock, and the grader sends its sandboxed child tensors and plain data only.",
    "test_bench_without_a_flush_does_not_flush":
        "bench() takes a Python function to time and a stopwatch; this test hands it a fake GPU's functions "
        "and clock, and the grader sends its sandboxed child tensors and plain data only.",
    "test_bench_returns_the_median_and_the_quantiles":
        "bench() takes a Python function to time and a stopwatch; this test hands it a fake GPU's functions "
        "and clock, and the grader sends its sandboxed child tensors and plain data only.",
    "test_quantile_interpolates_between_ranks":
        "quantile() returns a Python float, and the grader's comparison takes tensor outputs only: its values"
        " are checked here against numpy.quantile.",
    "test_bench_rejects_bad_counts":
        "the calls it refuses pass bench() a Python function and a fake stopwatch, which the grader's "
        "sandboxed child cannot receive (it receives tensors and plain data only).",
    "test_bench_without_a_gpu_asks_for_a_stopwatch":
        "it passes bench() a Python function, which the grader's sandboxed child cannot receive, and runs "
        "only on a machine without a GPU.",
    "test_cache_flusher_writes_the_whole_buffer_each_call":
        "cache_flusher() returns a function, and the test counts the bytes it writes with a PyTorch dispatch "
        "mode in this process: the grader can neither receive a function back nor watch it write.",
    "test_achieved_gbps_and_tflops":
        "achieved_gbps() and achieved_tflops() return Python floats, and the grader's comparison takes tensor"
        " outputs only (their refusals are graded cases).",
    "test_roofline_of_a_copy_is_memory_bound":
        "roofline() returns a Roofline named tuple of floats and a str, and the grader's comparison takes "
        "tensor outputs only (its refusals are graded cases).",
    "test_roofline_of_an_element_wise_kernel_is_memory_bound":
        "roofline() returns a Roofline named tuple of floats and a str, and the grader's comparison takes "
        "tensor outputs only (its refusals are graded cases).",
    "test_roofline_of_a_large_matmul_is_compute_bound":
        "roofline() returns a Roofline named tuple of floats and a str, and the grader's comparison takes "
        "tensor outputs only (its refusals are graded cases).",
    "test_roofline_at_the_ridge_meets_both_roofs":
        "roofline() returns a Roofline named tuple of floats and a str, and the grader's comparison takes "
        "tensor outputs only (its refusals are graded cases).",
    "test_roofline_of_a_kernel_that_moves_no_byte":
        "roofline() returns a Roofline named tuple of floats and a str, and the grader's comparison takes "
        "tensor outputs only (its refusals are graded cases).",
    "test_bench_agrees_with_triton_do_bench_on_a_copy":
        "it times a 256 MiB copy on a GPU with bench() and with triton.testing.do_bench: a stopwatch is "
        "checked against another here, which no graded call of the module's functions can do.",
    "test_flush_buffer_is_larger_than_the_l2_cache":
        "it compares the constant L2_FLUSH_BYTES with this GPU's L2 size; the grader grades calls of the "
        "module's functions, and a constant is no call.",
    "test_bias_act_reaches_copy_bandwidth":
        "it times bias_act() in this process against the copy bandwidth; the grader times bias_act() itself "
        "on a GPU, on SPEC's bench_cases (the same shapes), against the reference measured in the same run.",
}

# ----------------------------------------------------------------------------------------------
# bias_act(): values, and on a CPU the memory traffic of the call
# ----------------------------------------------------------------------------------------------

# Sectors touched per sector needed, for loads and for stores. Not 1: a row that does not start on a
# 32-byte boundary (an fp16 row of 513 elements) costs a warp one sector more, whatever the kernel.
MAX_EXCESS = 2.0
MIN_BYTES_PER_PROGRAM = 4096  # loaded + stored, on average over the programs of the call
MAX_BYTES_OVER_MINIMUM = 1.25  # bytes moved per byte the problem needs


def n_rows(case) -> int:
    return math.prod(case.params["shape"][:-1])


def bytes_moved(case) -> int:
    """The fewest bytes bias_act() can move: read x, write y, read the bias."""
    n_cols = case.params["shape"][-1]
    bias = n_cols if case.params.get("bias", True) else 0
    return (2 * n_rows(case) * n_cols + bias) * case.dtype.itemsize


def traffic_checked(case) -> bool:
    """Whether a case is large enough to judge its memory traffic: a few warps of rows and columns,
    laid out so that the best kernel can read every row or every column contiguously."""
    return (n_rows(case) >= 32 and case.params["shape"][-1] >= 64
            and case.params.get("layout", "contiguous") in ("contiguous", "transposed"))


class TrafficWatch:
    """What the interpreter's kernels ask of memory from the moment a case's inputs are made until
    its result is judged.

    The harness compares a case's values; nothing in that path looks at memory traffic. So the
    inputs start a recorder (make_inputs), and the judge, which receives the same inputs, reads it.
    In between, run_case only computes the reference (PyTorch) and calls bias_act(). A watch ends
    when the judge reads it, or when its input tensor is freed (a case built and never run).
    Nothing is recorded on a GPU, or in a process that builds inputs but runs no kernel (the
    grader's parent): then the judge sees no traffic and judges the values alone.
    """

    def __init__(self):
        self.open: dict[int, tuple] = {}  # id(x) -> (recorder, traffic, raw accesses)

    def start(self, x: torch.Tensor, minimum_bytes: int) -> None:
        if device.is_cuda():
            return
        traffic, raw = Traffic(minimum_bytes=minimum_bytes), []

        def record(access):
            traffic.add(access)
            raw.append((access.kind, access.touched, access.itemsize))

        recorder = AccessRecorder(on_access=record).__enter__()
        self.open[id(x)] = (recorder, traffic, raw)
        weakref.finalize(x, self._end, id(x), recorder)

    def _end(self, key: int, recorder) -> None:
        entry = self.open.get(key)
        if entry is not None and entry[0] is recorder:
            del self.open[key]
            recorder.__exit__(None, None, None)

    def collect(self, x: torch.Tensor):
        """(traffic, raw accesses) recorded since x was made, or None when nothing was."""
        entry = self.open.get(id(x))
        if entry is None:
            return None
        self._end(id(x), entry[0])
        _, traffic, raw = entry
        return (traffic, raw) if traffic.programs else None


WATCH = TrafficWatch()


def bias_act_inputs(case, rand):
    """(x, bias) in the layout the case asks for, and the activation when the case sets one. The
    bias is params["bias"]: True (a contiguous vector), False (None) or "strided"."""
    shape = case.params["shape"]
    layout = case.params.get("layout", "contiguous")
    scale = case.params.get("scale", 2.0)
    if layout == "contiguous":
        x = rand.randn(*shape, dtype=case.dtype, scale=scale)
    else:  # "transposed", "sliced" (every other column of a wider x), "padded" (NaN around it)
        x = rand.matrix(*shape, layout=layout, dtype=case.dtype, scale=scale)
    if case.params.get("nan"):  # NaN in every fifth column: the activations must let it through
        x[..., ::5] = float("nan")
    with_bias = case.params.get("bias", True)
    if with_bias == "strided":  # every other element of a vector twice as long: a view of stride 2
        bias = rand.randn(2 * shape[-1], dtype=case.dtype)[::2]
    else:
        bias = rand.randn(shape[-1], dtype=case.dtype) if with_bias else None
    kwargs = {"activation": case.params["activation"]} if "activation" in case.params else {}
    WATCH.start(x, bytes_moved(case))
    return (x, bias), kwargs


def reference(x, bias=None, activation="silu"):
    z = x if bias is None else x + bias
    if activation == "silu":
        return z * torch.sigmoid(z)
    return torch.relu(z) if activation == "relu" else z


def torch_bias_act(x, bias=None, activation="silu"):
    """What PyTorch runs for the same thing: an addition, then the activation (two kernels)."""
    z = x if bias is None else x + bias
    return F.silu(z) if activation == "silu" else F.relu(z) if activation == "relu" else z.clone()


def _size(count: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def _times(count: float) -> str:
    return "once" if count == 1 else "twice" if count == 2 else f"{count:.1f} times"


def per_tensor(raw, tensors: dict) -> str:
    """How often each of the call's tensors was loaded and stored, per element ("y stored twice")."""
    parts, attributed = [], 0
    for name, tensor in tensors.items():
        if tensor is None or not tensor.numel():
            continue
        start = tensor.data_ptr()
        extent = sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride()))
        end = start + (extent + 1) * tensor.element_size()
        nbytes = tensor.numel() * tensor.element_size()
        moved = {"load": 0, "store": 0}
        for kind, touched, itemsize in raw:
            inside = int(np.count_nonzero((touched >= start) & (touched < end))) * itemsize
            moved["store" if kind != "load" else "load"] += inside
            attributed += inside
        said = [f"{verb} {_times(moved[kind] / nbytes)}" for kind, verb in (("load", "loaded"), ("store", "stored"))
                if moved[kind]]
        if said:
            parts.append(f"{name} {' and '.join(said)}")
    other = sum(touched.size * itemsize for _, touched, itemsize in raw) - attributed
    if other > 0:
        parts.append(f"{_size(other)} of memory that is none of x, bias and y")
    return "; ".join(parts)


def traffic_problems(traffic: Traffic, raw, tensors: dict) -> list[str]:
    """What the memory traffic of one bias_act() call misses, each as a sentence about the symptom."""
    problems = []
    for kind in ("load", "store"):
        worst = traffic.worst_line(kind)
        if worst is not None and traffic.excess(kind) > MAX_EXCESS:
            problems.append(
                f"bias_act() touches {traffic.sectors_per_access(kind):.1f} sectors per warp-wide {kind}; "
                f"coalesced is {traffic.ideal_per_access(kind):.1f} (worst: line {worst.line}, "
                f"{worst.sectors_per_access:.1f}); the bar is {MAX_EXCESS:g} x coalesced. The 32 lanes of a "
                "warp reach addresses far apart, so most of every 32-byte sector the memory delivers goes "
                "unused.")
    moved = traffic.bytes_loaded + traffic.bytes_stored
    programs = len(traffic.programs)
    if programs > 1 and moved / programs < MIN_BYTES_PER_PROGRAM:
        problems.append(
            f"bias_act() runs {programs} programs that move {_size(moved / programs)} each on average (loads "
            f"and stores); the bar is {_size(MIN_BYTES_PER_PROGRAM)} per program. A GPU keeps only so "
            "many programs on a multiprocessor at once, and programs this small cannot keep enough "
            "memory requests in flight: the start-up of each costs more than its work.")
    over = traffic.bytes_over_minimum
    if over is not None and over > MAX_BYTES_OVER_MINIMUM:
        problems.append(
            f"bias_act() moves {over:.2f} x the bytes the problem needs ({_size(moved)} for "
            f"{_size(traffic.minimum_bytes)}; the bar is {MAX_BYTES_OVER_MINIMUM:g} x): "
            f"{per_tensor(raw, tensors)}. The problem needs x loaded once, y stored once, and the "
            "bias once.")
    if problems:
        problems.append("The memory-traffic report of this call:\n" + describe(traffic))
    return problems


def _what_y_matches(y, x, bias, activation) -> str | None:
    """A sentence when a wrong y is another combination of x, the bias and the activation."""
    if bias is None or activation is None or not y.numel():
        return None
    got = y.detach().double()
    atol, rtol = VALUES.tolerance(y.dtype)
    act = reference(x.double(), None, activation)
    for formula, value in ((f"{activation}(x) + bias", act + bias.double()), (f"{activation}(x)", act)):
        if torch.allclose(got, value, atol=atol, rtol=rtol):
            return f"y matches {formula}, not {activation}(x + bias)."
    return None


def judge_bias_act(outputs, references, args, kwargs, case):
    """The values against the reference; then, where the interpreter recorded the call and the
    case is large enough, its memory traffic."""
    problems = compare(VALUES, replace(case, spec=VALUES, hint=""), outputs, references, (args, kwargs))
    recorded = WATCH.collect(args[0])
    if problems:
        matches = _what_y_matches(outputs[0], args[0], args[1], kwargs.get("activation", "silu"))
        return problems + ([matches] if matches else [])
    if recorded is None or not traffic_checked(case):
        return []
    traffic, raw = recorded
    return traffic_problems(traffic, raw, {"x": args[0], "bias": args[1], "y": outputs[0]})


SPEC = Spec(
    api="bias_act",
    make_inputs=bias_act_inputs,
    reference=reference,
    output_names=("y",),
    judge=judge_bias_act,
    bytes_moved=bytes_moved,
    torch_baseline=torch_bias_act,
    bench_cases=tuple(Case({"shape": shape}, dtype) for shape, dtype in
                      (((8192, 8192), torch.float32), ((16384, 8192), torch.float16),
                       ((16384, 8192), torch.bfloat16), ((1 << 20, 128), torch.float16))),
    ceiling="copy",
    target=0.8,
    # bench() times with CUDA events (torch.cuda.Event).
    allowed_torch_names=frozenset({"cuda.Event"}),
)
VALUES = replace(SPEC, judge=None)  # the same Spec comparing values only, for the judge

TRAFFIC_HINT = (f"large enough to judge the memory traffic too: at most {MAX_EXCESS:g} sectors touched per "
                f"sector needed by the warp-wide loads and stores, at least {MIN_BYTES_PER_PROGRAM // 1024} "
                f"KiB moved per program, at most {MAX_BYTES_OVER_MINIMUM:g} x the bytes the problem needs.")

STRIDED_BIAS = ("the bias is every other element of a longer vector (stride 2): the kernel reads it at "
                "bias_ptr + cols, so bias_act() must hand it a contiguous copy (bias.contiguous()), or pass the "
                "bias's stride and use it.")

COMPUTE_FP32 = "16-bit x and no bias: the arithmetic is float32 only if the kernel converts x to float32 itself."
PAST_EXP = ("|x| well past 88, where exp(x) is inf in float32: silu written with exp(-x), x / (1 + exp(-x)), "
            "gives x or 0 there; a form with exp(x) gives inf / inf = NaN.")
NAN_THROUGH = ("x holds NaN: torch.relu returns NaN there, so the kernel must let it through (tl.maximum and a "
               "select on x > 0 turn it into a number).")

CASES = [
    Case({"shape": (64, 100)}, label="memory traffic checked", hint=TRAFFIC_HINT),
    Case({"shape": (48, 64)}, torch.float16, label="memory traffic checked", hint=TRAFFIC_HINT),
    Case({"shape": (96, 80), "activation": "relu"}, label="memory traffic checked, relu", hint=TRAFFIC_HINT),
    Case({"shape": (40, 72), "layout": "transposed"}, label="memory traffic checked, x a transpose",
         hint=TRAFFIC_HINT),
    Case({"shape": (2, 2, 12, 96)}, torch.float16, label="memory traffic checked, 4-D", hint=TRAFFIC_HINT),
    Case({"shape": (33, 70), "bias": False}, label="memory traffic checked, no bias", hint=TRAFFIC_HINT),
    Case({"shape": (1, 1)}, label="one element"),
    Case({"shape": (1, 7)}, label="one short row"),
    Case({"shape": (7,)}, torch.float16, label="1-D: one row"),
    Case({"shape": (5, 1)}, label="one column"),
    Case({"shape": (0, 16)}, label="an empty batch: no rows"),
    Case({"shape": (20, 36), "layout": "sliced"}, label="every other column of a wider x"),
    Case({"shape": (24, 40), "layout": "padded"}, torch.float16, label="the corner of a larger x"),
    Case({"shape": (30, 50), "activation": None}, label="bias only"),
    Case({"shape": (5, 130), "activation": "relu", "bias": False}, torch.float16, label="relu only"),
    Case({"shape": (9, 33), "bias": False}, torch.float16, label="silu only, fp16", hint=COMPUTE_FP32),
    Case({"shape": (2, 3, 20), "bias": False}, torch.bfloat16, label="silu only, bf16", hint=COMPUTE_FP32),
    Case({"shape": (6, 50), "scale": 60.0}, label="x past exp's float32 range", hint=PAST_EXP),
    Case({"shape": (5, 40), "scale": 60.0, "bias": False}, torch.float16, label="fp16, x past exp's float32 range",
         hint=PAST_EXP),
    Case({"shape": (7, 30), "scale": 60.0, "layout": "sliced"}, label="x past exp's float32 range, sliced",
         hint=PAST_EXP),
    Case({"shape": (8, 40), "activation": "relu", "nan": True}, label="NaN through relu", hint=NAN_THROUGH),
    Case({"shape": (6, 24), "activation": "relu", "nan": True, "bias": False}, torch.float16,
         label="NaN through relu, fp16", hint=NAN_THROUGH),
    Case({"shape": (3, 4, 20), "activation": "relu", "nan": True}, label="NaN through relu, 3-D", hint=NAN_THROUGH),
    Case({"shape": (5, 33), "bias": "strided"}, label="a strided bias", hint=STRIDED_BIAS),
    Case({"shape": (3, 4, 20), "bias": "strided", "activation": "relu"}, torch.float16,
         label="a strided bias, 3-D, relu", hint=STRIDED_BIAS),
    Case({"shape": (20, 36), "layout": "sliced", "bias": "strided", "activation": None},
         label="every other column of a wider x, a strided bias, bias only", hint=STRIDED_BIAS),
    Case({"shape": (64, 1000)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (4096, 4096)}, label="large", cuda_only=True),
    Case({"shape": (3000, 5000), "layout": "transposed"}, torch.float16, label="large, x a transpose",
         cuda_only=True),
    Case({"shape": (100_000, 100), "activation": "relu"}, torch.float16, label="many short rows",
         cuda_only=True),
]


# Refusals: the right error, and a message that says what to do (graded like the results). The
# rates and roofline() take plain numbers: only their refusals are cases (refusal() makes the
# inputs, and a refusal has no result to compare).
ACHIEVED_GBPS = Spec(api="achieved_gbps", make_inputs=None, reference=None)
ACHIEVED_TFLOPS = Spec(api="achieved_tflops", make_inputs=None, reference=None)
ROOFLINE = Spec(api="roofline", make_inputs=None, reference=None)
H100 = dict(peak_gbps=3350.0, peak_tflops=989.4)

CASES += [
    refusal(SPEC, lambda rand: ((torch.ones(4, 8, dtype=torch.int32, device=rand.device), None), {}),
            (ValueError, TypeError), r"dtype", why="name x's dtype and say that the kernel does not support it",
            label="refuses integers"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), rand.randn(7)), {}), (ValueError, TypeError), r"shape",
            why="name the shape the bias must have, one value per element of x's last dimension",
            label="refuses a bias of the wrong length"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), rand.randn(8, dtype=torch.float16)), {}),
            (ValueError, TypeError), r"dtype", why="say that the bias and x have different dtypes",
            label="refuses a bias of another dtype"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), None, "gelu"), {}), (ValueError, TypeError), r"activation",
            why="name the activations it knows", label="refuses an unknown activation"),
    refusal(SPEC, lambda rand: ((rand.randn(), None), {}), (ValueError, TypeError), r"dimension",
            why="say that x needs at least one dimension, the last being the columns the bias runs along",
            label="refuses a 0-d tensor"),
    refusal(ACHIEVED_GBPS, lambda rand: ((1000, 0.0), {}), (ValueError, TypeError), r"ms",
            why="say that ms must be a positive time", label="refuses a time of 0 ms"),
    refusal(ACHIEVED_TFLOPS, lambda rand: ((1000, -1.0), {}), (ValueError, TypeError), r"ms",
            why="say that ms must be a positive time", label="refuses a negative time"),
    refusal(ROOFLINE, lambda rand: ((1e9, 1e9, 0.0), dict(H100)), (ValueError, TypeError), r"ms",
            why="say that ms must be a positive time", label="refuses a time of 0 ms"),
    refusal(ROOFLINE, lambda rand: ((1e9, 1e9, 1.0), {"peak_gbps": 0.0, "peak_tflops": 989.4}),
            (ValueError, TypeError), r"peak_gbps", why="say that peak_gbps must be positive",
            label="refuses a bandwidth of 0"),
    refusal(ROOFLINE, lambda rand: ((-1, 1e9, 1.0), dict(H100)), (ValueError, TypeError), r"nbytes",
            why="say that nbytes cannot be negative", label="refuses a negative byte count"),
    refusal(ROOFLINE, lambda rand: ((0, 0, 1.0), dict(H100)), (ValueError, TypeError), r"bytes",
            why="say that a kernel that moves no bytes and does no FLOPs has no place under the roofs",
            label="refuses a kernel that does nothing"),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


# ----------------------------------------------------------------------------------------------
# bench() on a fake GPU
# ----------------------------------------------------------------------------------------------

class FakeGPU:
    """A GPU and a host clock, slowed down to seconds so that every mistake shows.

    ``fn()`` and ``flush()`` queue work and return at once, as kernel launches do; the queued work
    runs when someone waits for it (``sync()``); ``clock()`` reads the time without waiting. The
    first call of ``fn`` compiles it first, on the host: that takes COMPILE seconds before it returns.
    """
    COMPILE = 2.0
    FLUSH = 0.5

    def __init__(self, seconds_per_call):
        self.seconds_per_call = list(seconds_per_call)
        self.now = 0.0
        self.queued = 0.0
        self.calls = 0
        self.log = []

    def fn(self):
        if self.calls == 0:
            self.now += self.COMPILE
        self.queued += self.seconds_per_call[self.calls % len(self.seconds_per_call)]
        self.calls += 1
        self.log.append("fn")

    def flush(self):
        self.queued += self.FLUSH
        self.log.append("flush")

    def sync(self):
        self.now += self.queued
        self.queued = 0.0
        self.log.append("sync")

    def clock(self):
        self.log.append("clock")
        return self.now


def _fake_bench(kernel, seconds, warmup=3, rep=5, **options):
    gpu = FakeGPU(seconds)
    stopwatch = kernel.api("WallClock")(gpu.clock, gpu.sync)
    options.setdefault("flush", gpu.flush)
    timing = kernel.api("bench")(gpu.fn, warmup=warmup, rep=rep, stopwatch=stopwatch, **options)
    return gpu, timing


# Call k (from 0) takes SECONDS[k] seconds of GPU time; the first three are the warm-up calls.
SECONDS = [0.1, 0.2, 0.3, 1.0, 1.5, 1.2, 9.0, 1.1]


def _timed_ms(warmup=3, rep=5):
    return [1000.0 * SECONDS[(warmup + k) % len(SECONDS)] for k in range(rep)]


def test_bench_times_each_call_alone(kernel):
    _, timing = _fake_bench(kernel, SECONDS)
    got, want = list(timing.times_ms), _timed_ms()
    if len(got) != len(want):
        raise AssertionError(f"bench(warmup=3, rep=5) returned {len(got)} times; expected one per timed "
                             f"repetition, 5.")
    if np.allclose(got, want):
        return
    got_a, want_a = np.array(got, dtype=float), np.array(want)
    first_calls = np.array([1000.0 * s for s in SECONDS[:5]])
    first_calls[0] += 1000.0 * FakeGPU.COMPILE
    gaps = got_a - want_a
    if np.allclose(got_a, 0.0, atol=1e-9):
        symptom = "every time is 0 ms: the stopwatch stops before the queued call has run"
    elif np.allclose(got_a, first_calls):
        symptom = ("these are the times of the first five calls, the very first with the "
                   f"{1000 * FakeGPU.COMPILE:g} ms it spends compiling: no call is left untimed to warm up")
    elif np.allclose(gaps[1:], 1000 * FakeGPU.FLUSH):
        more = " (the first even more)" if gaps[0] > 1000 * FakeGPU.FLUSH + 1e-6 else ""
        symptom = (f"the repetitions are {1000 * FakeGPU.FLUSH:g} ms too long{more}, the time one cache flush "
                   "takes: the flush is inside the timed interval, or still running when the stopwatch starts")
    elif abs(gaps[0] - 1000 * FakeGPU.COMPILE) < 1e-6:
        symptom = (f"the first time is {1000 * FakeGPU.COMPILE:g} ms too long, the time the first call spends "
                   "compiling: it is timed")
    elif np.allclose(got_a * 1000, want_a):
        symptom = "every time is 1000 times too small: seconds, where bench() reports milliseconds"
    else:
        symptom = "the times differ from the calls' own durations"
    raise AssertionError(f"On a fake GPU whose timed calls take {want} ms, bench() measured "
                         f"{[round(t, 3) for t in got]} ms: {symptom}.")


def test_bench_calls_fn_warmup_plus_rep_times(kernel):
    gpu, _ = _fake_bench(kernel, SECONDS, warmup=4, rep=6)
    assert gpu.calls == 10, (f"bench(warmup=4, rep=6) called fn {gpu.calls} times; expected 4 untimed "
                             "warm-up calls and 6 timed ones.")


def test_bench_warm_up_calls_come_before_the_first_clock_reading(kernel):
    gpu, _ = _fake_bench(kernel, SECONDS, warmup=3, rep=2)
    before = gpu.log[:gpu.log.index("clock")] if "clock" in gpu.log else gpu.log
    assert before.count("fn") == 3, (f"fn was called {before.count('fn')} time(s) before the stopwatch first "
                                     "read the clock; the 3 warm-up calls should all come first, untimed.")


def test_wall_clock_waits_for_the_device_before_every_reading(kernel):
    gpu, _ = _fake_bench(kernel, SECONDS, warmup=1, rep=3)
    readings = [i for i, event in enumerate(gpu.log) if event == "clock"]
    assert len(readings) == 6, f"the stopwatch read the clock {len(readings)} times for 3 repetitions; expected 6."
    unsynced = [k for k, i in enumerate(readings) if i == 0 or gpu.log[i - 1] != "sync"]
    assert not unsynced, (f"clock readings {unsynced} (of 0..5) were taken while work was still queued on the "
                          f"device (events in order: {gpu.log}). A launch returns before the GPU has run it.")


def test_bench_flushes_before_every_timed_call_outside_the_interval(kernel):
    gpu, _ = _fake_bench(kernel, SECONDS, warmup=2, rep=4)
    flushes = gpu.log.count("flush")
    assert flushes == 4, f"the cache was flushed {flushes} times for 4 timed repetitions; expected once before each."
    readings = [i for i, event in enumerate(gpu.log) if event == "clock"]
    assert len(readings) == 8, f"the stopwatch read the clock {len(readings)} times for 4 repetitions; expected 8."
    last_warm_up = [i for i, event in enumerate(gpu.log) if event == "fn"][1]
    for k, (start, stop) in enumerate(zip(readings[::2], readings[1::2])):
        before = gpu.log[(readings[2 * k - 1] if k else last_warm_up) + 1:start]
        assert "flush" in before, (f"repetition {k} starts its stopwatch without a flush since the previous "
                                   f"call (events in order: {gpu.log}).")
        assert "flush" not in gpu.log[start:stop], (f"repetition {k} flushes the cache between its two clock "
                                                    f"readings (events: {gpu.log}): the flush is timed.")


def test_bench_without_a_flush_does_not_flush(kernel):
    gpu, timing = _fake_bench(kernel, SECONDS, flush=False)
    assert "flush" not in gpu.log and len(timing.times_ms) == 5


def test_bench_returns_the_median_and_the_quantiles(kernel):
    _, timing = _fake_bench(kernel, SECONDS, quantiles=(0.0, 0.25, 0.5, 1.0))
    want = _timed_ms()
    expected = [float(np.quantile(want, q)) for q in (0.0, 0.25, 0.5, 1.0)]
    assert timing.median_ms == pytest.approx(float(np.median(want)), rel=1e-9), (
        f"median_ms is {timing.median_ms} for times {want} ms; the median is {np.median(want)} (the mean, "
        f"{np.mean(want):.1f}, is pulled up by the one slow repetition).")
    assert list(timing.quantiles_ms) == pytest.approx(expected, rel=1e-9), (
        f"quantiles_ms at (0, 0.25, 0.5, 1) is {list(timing.quantiles_ms)} for times {want}; expected {expected}.")


def test_quantile_interpolates_between_ranks(kernel):
    quantile = kernel.api("quantile")
    for values in ([3.0], [2.0, 1.0], [5.0, 1.0, 4.0, 2.0], [float(v) for v in np.linspace(0, 1, 7) ** 2]):
        for q in (0.0, 0.1, 0.25, 0.5, 0.8, 1.0):
            got, want = quantile(values, q), float(np.quantile(values, q))
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (
                f"quantile({values}, {q}) = {got}; numpy.quantile gives {want} (the value at rank "
                f"q * (n - 1) = {q * (len(values) - 1):g} of the sorted values, interpolated).")


def test_bench_rejects_bad_counts(kernel):
    gpu = FakeGPU([1.0])
    stopwatch = kernel.api("WallClock")(gpu.clock, gpu.sync)
    expect_error(kernel.api("bench"), gpu.fn, rep=0, stopwatch=stopwatch, match="rep")
    expect_error(kernel.api("bench"), gpu.fn, warmup=-1, stopwatch=stopwatch, match="warmup")


@pytest.mark.skipif(device.is_cuda() or torch.cuda.is_available(), reason="checks the CPU-only message")
def test_bench_without_a_gpu_asks_for_a_stopwatch(kernel):
    expect_error(kernel.api("bench"), lambda: None, match="stopwatch")


def test_cache_flusher_writes_the_whole_buffer_each_call(kernel):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Writes(TorchDispatchMode):
        """Bytes written by in-place operators (zero_, fill_, copy_, ...) while the mode is on."""

        def __init__(self):
            super().__init__()
            self.nbytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__.endswith("_") and args and isinstance(args[0], torch.Tensor):
                self.nbytes += args[0].numel() * args[0].element_size()
            return func(*args, **(kwargs or {}))

    flush = kernel.api("cache_flusher")(nbytes=1 << 20, device="cpu")
    assert callable(flush), f"cache_flusher() returned {flush!r}; it should return a function to call."
    for _ in range(2):
        with Writes() as writes:
            flush()
        assert writes.nbytes >= 1 << 20, (f"one call of the flush function wrote {writes.nbytes} bytes; it should "
                                          f"write all {1 << 20} bytes of its buffer every time.")


# ----------------------------------------------------------------------------------------------
# GB/s, TFLOP/s and the roofline
# ----------------------------------------------------------------------------------------------

H100_RIDGE = 989.4e12 / 3350e9  # about 295 FLOPs per byte


def test_achieved_gbps_and_tflops(kernel):
    gbps, tflops = kernel.api("achieved_gbps"), kernel.api("achieved_tflops")
    assert gbps(3.35e9, 1.0) == pytest.approx(3350.0, rel=1e-12), "3.35e9 bytes in 1 ms is 3350 GB/s."
    assert gbps(2 * 4096 * 4096 * 4, 0.05) == pytest.approx(2684.35456, rel=1e-12), \
        "a 4096 x 4096 float32 copy (read + write: 134217728 bytes) in 0.05 ms is 2684.35456 GB/s."
    assert gbps(0, 2.0) == 0.0
    assert tflops(2 * 4096 ** 3, 0.2) == pytest.approx(687.194767, rel=1e-9), \
        "a 4096^3 matmul (2 * 4096^3 FLOPs) in 0.2 ms is 687.194767 TFLOP/s."
    assert tflops(1e12, 1000.0) == pytest.approx(1.0, rel=1e-12), "1e12 FLOPs in one second is 1 TFLOP/s."


def test_roofline_of_a_copy_is_memory_bound(kernel):
    nbytes = 2 * (1 << 30)  # read and write 1 GiB
    point = kernel.api("roofline")(nbytes, 0, 0.8, **H100)
    assert point.bound == "memory", f"a copy does no arithmetic, so it is memory-bound; got {point.bound!r}."
    assert point.intensity == 0.0 and point.roof_tflops == 0.0
    assert point.ridge == pytest.approx(H100_RIDGE, rel=1e-12), \
        f"ridge = 989.4 TFLOP/s / 3350 GB/s = {H100_RIDGE:.2f} FLOP/byte; got {point.ridge}."
    assert point.achieved_gbps == pytest.approx(nbytes / 0.8e-3 / 1e9, rel=1e-12)
    assert point.fraction == pytest.approx(nbytes / 0.8e-3 / 1e9 / 3350.0, rel=1e-12), \
        "a memory-bound kernel reaches achieved GB/s / peak GB/s of its roof."


def test_roofline_of_an_element_wise_kernel_is_memory_bound(kernel):
    # bias + SiLU on 2^26 fp16 elements: about 6 FLOPs per element for 4 bytes (2 read, 2 written)
    elements = 1 << 26
    point = kernel.api("roofline")(4 * elements, 6 * elements, 0.09, **H100)
    assert point.bound == "memory" and point.intensity == pytest.approx(1.5, rel=1e-12)
    assert point.roof_tflops == pytest.approx(1.5 * 3350e9 / 1e12, rel=1e-12), \
        "below the ridge the roof is intensity x bandwidth: 1.5 FLOP/byte x 3350 GB/s = 5.025 TFLOP/s."
    assert point.fraction == pytest.approx(4 * elements / 0.09e-3 / 1e9 / 3350.0, rel=1e-12)


def test_roofline_of_a_large_matmul_is_compute_bound(kernel):
    n = 4096
    nbytes, flops = 3 * n * n * 2, 2 * n ** 3  # fp16 a, b read and c written once; 2 FLOPs per multiply-add
    point = kernel.api("roofline")(nbytes, flops, 0.2, **H100)
    assert point.bound == "compute", (f"intensity {flops / nbytes:.0f} FLOP/byte is above the ridge "
                                      f"({H100_RIDGE:.0f}): compute-bound; got {point.bound!r}.")
    assert point.intensity == pytest.approx(flops / nbytes, rel=1e-12)
    assert point.roof_tflops == pytest.approx(989.4, rel=1e-12), "above the ridge the roof is the peak FLOP/s."
    assert point.achieved_tflops == pytest.approx(flops / 0.2e-3 / 1e12, rel=1e-12)
    assert point.fraction == pytest.approx(flops / 0.2e-3 / 1e12 / 989.4, rel=1e-12), \
        "a compute-bound kernel reaches achieved TFLOP/s / peak TFLOP/s of its roof."


def test_roofline_at_the_ridge_meets_both_roofs(kernel):
    nbytes = 1e9
    point = kernel.api("roofline")(nbytes, H100_RIDGE * nbytes, 1.0, **H100)
    assert point.bound == "compute", "a kernel exactly at the ridge counts as compute-bound."
    assert point.roof_tflops == pytest.approx(989.4, rel=1e-9)
    point = kernel.api("roofline")(nbytes, 0.99 * H100_RIDGE * nbytes, 1.0, **H100)
    assert point.bound == "memory", "just below the ridge, the memory roof is the lower one."


def test_roofline_of_a_kernel_that_moves_no_byte(kernel):
    point = kernel.api("roofline")(0, 1e9, 1.0, **H100)
    assert point.bound == "compute" and point.intensity == math.inf and point.roof_tflops == 989.4


# ----------------------------------------------------------------------------------------------
# On a GPU: the stopwatch against Triton's, and the speed of bias_act()
# ----------------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.timed
def test_bench_agrees_with_triton_do_bench_on_a_copy(kernel):
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)

    def copy():
        dst.copy_(src)

    for _ in range(2000):  # about 0.4 s of copies: the GPU's clocks up before either stopwatch runs
        copy()
    torch.cuda.synchronize()
    ours = kernel.api("bench")(copy, warmup=10, rep=100).median_ms
    theirs = triton.testing.do_bench(copy, warmup=25, rep=100, return_mode="median")
    assert abs(ours / theirs - 1) <= 0.10, (
        f"bench() gives a median of {ours:.4f} ms for a 256 MiB copy, triton.testing.do_bench "
        f"{theirs:.4f} ms: more than 10 % apart.")


@pytest.mark.cuda
def test_flush_buffer_is_larger_than_the_l2_cache(kernel):
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)
    assert kernel.api("L2_FLUSH_BYTES") >= 2 * l2, (
        f"L2_FLUSH_BYTES is {kernel.api('L2_FLUSH_BYTES')} bytes but this GPU's L2 holds {l2}: a flush "
        "should write at least twice that.")


@pytest.mark.cuda
@pytest.mark.timed
@pytest.mark.parametrize("shape,dtype", [((8192, 8192), torch.float32), ((16384, 8192), torch.float16)],
                         ids=["8192x8192 fp32", "16384x8192 fp16"])
def test_bias_act_reaches_copy_bandwidth(kernel, shape, dtype):
    from grader.bench import copy_bandwidth_gbs, time_ms

    x = torch.randn(shape, device="cuda", dtype=dtype)
    bias = torch.randn(shape[-1], device="cuda", dtype=dtype)
    fn = kernel.api("bias_act")
    torch.testing.assert_close(fn(x, bias), torch_bias_act(x, bias), atol=2e-2, rtol=2e-2)
    nbytes = bytes_moved(Case({"shape": shape}, dtype))
    gbps = nbytes / time_ms(lambda: fn(x, bias)) / 1e6
    copy = copy_bandwidth_gbs()
    assert gbps >= 0.8 * copy, (
        f"bias_act() moves {gbps:.0f} GB/s on {shape} {dtype}: {gbps / copy:.2f} x the copy bandwidth "
        f"measured now ({copy:.0f} GB/s); the bar is 0.8 x.")
