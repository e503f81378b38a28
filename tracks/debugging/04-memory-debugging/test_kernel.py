"""Public tests for 04-memory-debugging.  Run:  pytest tracks/debugging/04-memory-debugging

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. dot() is the module's main function (SPEC); cases with spec=ADD_BIAS call
add_bias(), spec=COLUMN_SUM column_sum(), spec=SCALE scale().

Under the interpreter every case runs inside the course's memory checker
(grader.memcheck): an access outside the tensors a kernel was given stops the call, and two
programs storing to one element without an atomic, a read of memory nothing has written, or an
output element nothing wrote fails the case, each with the line, the program and the lane. Such
bugs often leave the numbers right on a CPU, so the numbers alone would not catch them. On a GPU
the checker is off: there the same bugs show as wrong or changing results (the poisoned outputs,
the repeated runs below) or, under compute-sanitizer, as its reports (see the README).

The tools (guard bands, poisoned buffers) are tested on their own, with a kernel defined here
that writes exactly where it is told, and around add_bias(): they need no checker, so they work
natively on a GPU too.
"""

import pytest
import torch
import triton
import triton.language as tl

from grader import device
from grader.cases import Case, Spec, refusal
from grader.checks import check_case
from grader import memcheck
from grader.loading import todo_summary

PYTEST_ONLY = {
    "test_dot_gives_the_same_value_twice":
        "every graded dot case already catches an accumulator left uncleared: during a graded call each "
        "torch.empty allocation is filled with NaN, so the result is NaN; this test shows the symptom met "
        "without that poison (the memory holds the previous call's result).",
    "test_column_sum_gives_the_same_result_every_run":
        "it repeats column_sum() ten times on a GPU to show a race as sums that change from run to run; each "
        "graded case calls it once, and on a GPU the cuda_only column_sum cases catch the same lost sums as "
        "wrong values.",
    "test_guarded_empty_lies_between_two_bands_of_canaries":
        "guarded_empty() is a host-side tool that launches no kernel, and the grader's evidence check fails "
        "any graded call that returns a non-empty tensor without launching a Triton kernel; its canary bands "
        "also lie outside the returned view, and only the bytes a view addresses come back from the grader's "
        "child.",
    "test_check_guards_finds_a_store_past_the_end":
        "it overruns a buffer with a kernel defined in this test file and reads the str check_guards() "
        "returns: the grader's child runs only the submission's functions, compares tensor outputs only, and "
        "refuses out-of-bounds stores under the interpreter.",
    "test_check_guards_finds_a_store_before_the_start":
        "it overruns a buffer with a kernel defined in this test file and reads the str check_guards() "
        "returns: the grader's child runs only the submission's functions, compares tensor outputs only, and "
        "refuses out-of-bounds stores under the interpreter.",
    "test_add_bias_writes_nothing_outside_its_output":
        "it reads the canary bands around add_bias()'s out= buffer after the call: the grader compares only "
        "the elements of the tensors a call returns, never the memory around them (under the interpreter its "
        "child refuses such a store outright).",
    "test_poisoned_empty_sets_every_bit":
        "poisoned_empty() is a host-side tool that launches no kernel, and the grader's evidence check fails "
        "any graded call that returns a non-empty tensor without launching a Triton kernel; its bits (all "
        "ones) are also checked here exactly, which no tolerance does.",
    "test_never_written_finds_the_elements_no_kernel_stored":
        "never_written() compares bits with PyTorch on the host and launches no kernel, and the grader's "
        "evidence check fails any graded call that returns a non-empty tensor without launching a Triton "
        "kernel or computes with PyTorch; its input also needs a kernel defined in this test file.",
}


# ---- dot --------------------------------------------------------------------------------------------

def dot_inputs(case, rand):
    """x and y of length n; entries of size n ** -0.25 make the dot product about 1 in size.

    params["past fp16"] ("start" or "end") puts there two products past float16's largest value,
    300 * 300 and 300 * -300, which cancel. The other entries of those cases are of size 1 and
    multiples of 1/8 (x) and 1/16 (y): each product is a multiple of 1/128, so every float32 sum of
    them below 2^17 is exact, and the two cancel exactly whatever order the programs and lanes add
    them in."""
    n = case.params["n"]
    where = case.params.get("past fp16")
    scale = 1.0 if where else max(n, 1) ** -0.25
    if case.params.get("layout") == "strided":  # every other element of longer vectors
        x = rand.randn(2 * n, dtype=case.dtype, scale=scale)[::2]
        y = rand.randn(2 * n, dtype=case.dtype, scale=scale)[::2]
    else:
        x, y = rand.randn(n, dtype=case.dtype, scale=scale), rand.randn(n, dtype=case.dtype, scale=scale)
    if where:
        x.copy_((x * 8).round() / 8)
        y.copy_((y * 16).round() / 16)
        first = 0 if where == "start" else n - 2
        x[first:first + 2] = 300.0
        y[first], y[first + 1] = 300.0, -300.0
    return (x, y), {}


def dot_reference(x, y):
    return (x * y).sum()


SPEC = Spec(
    api="dot",
    make_inputs=dot_inputs,
    reference=dot_reference,
    # a float32 sum of up to 2^24 products, in an order the atomics choose
    tolerances={torch.float32: (2e-4, 1e-4)},
    bytes_moved=lambda case: 2 * case.params["n"] * case.dtype.itemsize,
    torch_baseline=torch.dot,
    bench_cases=tuple(Case({"n": 1 << 28}, dtype) for dtype in (torch.float32, torch.bfloat16)),
    ceiling="copy",
    target=0.85,
)


# ---- add_bias ---------------------------------------------------------------------------------------

def matrix(case, rand):
    """x of shape params["shape"], laid out as params["layout"] says."""
    M, N = case.params["shape"]
    layout = case.params.get("layout", "contiguous")
    if layout == "transposed":  # the transpose of a contiguous (N, M) matrix
        return rand.randn(N, M, dtype=case.dtype).t()
    if layout == "row-strided":  # the first N columns of a wider matrix: rows N + 16 apart
        return rand.randn(M, N + 16, dtype=case.dtype)[:, :N]
    return rand.randn(M, N, dtype=case.dtype)


def add_bias_inputs(case, rand):
    x = matrix(case, rand)
    return (x, rand.randn(x.shape[1], dtype=case.dtype)), {}


def add_bias_reference(x, bias):
    return x + bias


X_TRANSPOSED = ("x is a transpose: its columns are x.stride(1) elements apart (M of them), not 1, so every "
                "address into x needs both of its strides.")

ADD_BIAS = Spec(
    api="add_bias",
    make_inputs=add_bias_inputs,
    reference=add_bias_reference,
    bytes_moved=lambda case: (2 * case.params["shape"][0] + 1) * case.params["shape"][1] * case.dtype.itemsize,
    torch_baseline=lambda x, bias, out=None: torch.add(x, bias, out=out),
    bench_cases=(Case({"shape": (16384, 8192)}), Case({"shape": (16384, 8192)}, torch.bfloat16)),
    ceiling="copy",
    target=0.85,
    # The guard-band tools compare bits and list the positions that differ; the static gate
    # refuses PyTorch compute elsewhere in kernel.py.
    allowed_tensor_methods=frozenset({"as_strided", "nonzero"}),
)


# ---- column_sum -------------------------------------------------------------------------------------

def column_sum_inputs(case, rand):
    return (matrix(case, rand),), {}


def column_sum_reference(x):
    return x.sum(dim=0)


COLUMN_SUM = Spec(
    api="column_sum",
    make_inputs=column_sum_inputs,
    reference=column_sum_reference,
    # float32 sums of up to 20000 values of size 1, in an order the atomics choose
    tolerances={torch.float32: (2e-4, 1e-4)},
    bytes_moved=lambda case: case.params["shape"][0] * case.params["shape"][1] * case.dtype.itemsize,
    torch_baseline=lambda x: x.sum(dim=0),
    bench_cases=(Case({"shape": (65536, 4096)}), Case({"shape": (65536, 4096)}, torch.bfloat16)),
    ceiling="copy",
    target=0.85,
)


# ---- scale ------------------------------------------------------------------------------------------

def scale_inputs(case, rand):
    shape = case.params["shape"]
    layout = case.params.get("layout", "contiguous")
    if layout == "offset":  # starts one element into its buffer: 2 bytes for fp16, so not 4-aligned
        x = rand.randn(shape[0] + 1, dtype=case.dtype)[1:]
    elif layout == "transposed":
        x = rand.randn(*reversed(shape), dtype=case.dtype).t()
    else:
        x = rand.randn(*shape, dtype=case.dtype)
    return (x, case.params.get("alpha", 0.5)), {}


def scale_reference(x, alpha):
    return alpha * x


SCALE = Spec(
    api="scale",
    make_inputs=scale_inputs,
    reference=scale_reference,
    bytes_moved=lambda case: 2 * torch.Size(case.params["shape"]).numel() * case.dtype.itemsize,
    torch_baseline=lambda x, alpha: alpha * x,
    bench_cases=tuple(Case({"shape": (1 << 28,)}, dtype) for dtype in (torch.float32, torch.bfloat16)),
    ceiling="copy",
    target=0.90,
)


OVERHANG = ("the tiles at the bottom or right edge overhang the matrix: their extra lanes must "
            "neither load nor store.")
SHARED = ("several programs add partial sums into the same output elements: on a GPU they run "
          "at the same time.")
HALF = ("fp16 and bf16 values are 2 bytes each: the type of the pointer decides how far apart "
        "consecutive offsets are.")

PAST_FP16 = ("300 * 300 = 90000 is past float16's largest value (65504): multiply after converting to "
             "float32, where the two products cancel; multiplied in float16 they are inf and -inf, and "
             "their sum NaN.")

# The last case of each function (cuda_only ones aside) is the notebook's quick check: one where
# that function's planted bug shows.
CASES = [
    Case({"n": 1}, label="one element"),
    Case({"n": 1000}, label="a partial block"),
    Case({"n": 8192}, label="exactly two blocks"),
    Case({"n": 100_000}, label="more blocks than programs: each program loops"),
    Case({"n": 3001}, torch.float16, label="fp16"),
    Case({"n": 1000, "past fp16": "start"}, torch.float16, label="products past float16's range", hint=PAST_FP16),
    Case({"n": 8192, "past fp16": "end"}, torch.float16, label="products past float16's range, in the second block",
         hint=PAST_FP16),
    Case({"n": 5000, "layout": "strided", "past fp16": "end"}, torch.float16,
         label="products past float16's range, every other element", hint=PAST_FP16),
    Case({"n": 2000}, torch.bfloat16, label="bf16"),
    Case({"n": 0}, label="empty: the sum of nothing is 0"),
    Case({"n": 5000, "layout": "strided"}, label="every other element"),
    Case({"n": 1 << 24}, label="large", cuda_only=True),
    Case({"n": (1 << 24) + 3}, torch.bfloat16, label="large", cuda_only=True),

    Case({"shape": (1, 1)}, spec=ADD_BIAS, label="one element"),
    Case({"shape": (8, 64)}, spec=ADD_BIAS, label="powers of two: no tile overhangs"),
    Case({"shape": (0, 16)}, spec=ADD_BIAS, label="no rows"),
    Case({"shape": (37, 300)}, spec=ADD_BIAS, label="tiles overhang both edges", hint=OVERHANG),
    Case({"shape": (5, 100)}, torch.float16, spec=ADD_BIAS, label="a tile wider than the matrix", hint=OVERHANG),
    Case({"shape": (64, 257)}, spec=ADD_BIAS, label="one column past a tile", hint=OVERHANG),
    Case({"shape": (20, 70), "layout": "row-strided"}, spec=ADD_BIAS, label="strided rows", hint=OVERHANG),
    Case({"shape": (30, 40), "layout": "transposed"}, torch.float16, spec=ADD_BIAS, label="x a transpose",
         hint=X_TRANSPOSED),
    Case({"shape": (37, 300), "layout": "transposed"}, spec=ADD_BIAS, label="x a transpose, tiles overhang",
         hint=X_TRANSPOSED),
    Case({"shape": (6, 90), "layout": "transposed"}, torch.bfloat16, spec=ADD_BIAS, label="x a transpose, bf16",
         hint=X_TRANSPOSED),
    Case({"shape": (3, 1000)}, torch.bfloat16, spec=ADD_BIAS, label="bf16"),
    Case({"shape": (4096, 4096)}, spec=ADD_BIAS, label="large", cuda_only=True),
    Case({"shape": (1000, 3000)}, torch.float16, spec=ADD_BIAS, label="large", cuda_only=True),

    Case({"shape": (1, 1)}, spec=COLUMN_SUM, label="one element"),
    Case({"shape": (5, 7)}, spec=COLUMN_SUM, label="fewer rows than a tile: one program per column"),
    Case({"shape": (0, 10)}, spec=COLUMN_SUM, label="no rows: every sum is 0"),
    Case({"shape": (100, 30)}, spec=COLUMN_SUM, label="four programs share each column", hint=SHARED),
    Case({"shape": (300, 200)}, torch.float16, spec=COLUMN_SUM, label="programs share columns", hint=SHARED),
    Case({"shape": (257, 64)}, torch.bfloat16, spec=COLUMN_SUM, label="programs share columns", hint=SHARED),
    Case({"shape": (64, 300), "layout": "transposed"}, spec=COLUMN_SUM, label="x a transpose", hint=SHARED),
    Case({"shape": (8192, 1024)}, spec=COLUMN_SUM, label="large", cuda_only=True),
    Case({"shape": (20_000, 333)}, torch.float16, spec=COLUMN_SUM, label="large", cuda_only=True),

    Case({"shape": (1,)}, spec=SCALE, label="one element"),
    Case({"shape": (3000,)}, spec=SCALE, label="fp32"),
    Case({"shape": (0,)}, spec=SCALE, label="empty"),
    Case({"shape": (3001,)}, torch.float16, spec=SCALE, label="fp16", hint=HALF),
    Case({"shape": (2048,)}, torch.bfloat16, spec=SCALE, label="bf16", hint=HALF),
    Case({"shape": (7, 300), "alpha": -3.0}, torch.float16, spec=SCALE, label="2-D fp16", hint=HALF),
    Case({"shape": (1000,), "layout": "offset"}, torch.float16, spec=SCALE,
         label="fp16 starting at an odd element", hint=HALF),
    Case({"shape": (30, 40), "layout": "transposed"}, torch.bfloat16, spec=SCALE, label="x a transpose", hint=HALF),
    Case({"shape": (1 << 26,)}, torch.float16, spec=SCALE, label="large", cuda_only=True),
]


# Refusals: the right error, and a message that says what to do (graded like the results).
# check_guards() is a tool: only its refusal is a case (refusal() makes the inputs).
CHECK_GUARDS = Spec(api="check_guards", make_inputs=None, reference=None)

CASES += [
    refusal(SPEC, lambda rand: ((rand.randn(5), rand.randn(6)), {}), (ValueError, TypeError), r"length",
            why="say that x and y have different lengths", label="refuses vectors of two lengths"),
    refusal(SPEC, lambda rand: ((rand.randn(2, 3), rand.randn(2, 3)), {}), (ValueError, TypeError), r"dimensions",
            why="say that x and y must be vectors (1 dimension)", label="refuses matrices"),
    refusal(ADD_BIAS, lambda rand: ((rand.randn(4, 8), rand.randn(7)), {}), (ValueError, TypeError), r"shape",
            why="name the shape the bias must have, one value per column of x",
            label="refuses a bias of the wrong length"),
    refusal(ADD_BIAS, lambda rand: ((rand.randn(4, 8), rand.randn(8)), {"out": rand.randn(8, 4)}),
            (ValueError, TypeError), r"shape", why="say that out must have x's shape",
            label="refuses an out of the wrong shape"),
    refusal(COLUMN_SUM, lambda rand: ((rand.randn(5),), {}), (ValueError, TypeError), r"dimensions",
            why="say that x must be a matrix (2 dimensions)", label="refuses a vector"),
    refusal(SCALE, lambda rand: ((torch.ones(5, dtype=torch.int32, device=rand.device), 2.0), {}),
            (ValueError, TypeError), r"dtype", why="name x's dtype and say that the kernel does not support it",
            label="refuses integers"),
    refusal(CHECK_GUARDS, lambda rand: ((rand.randn(10),), {"pad": 16}), (ValueError, TypeError), r"guarded_empty",
            why="say that the tensor must come from guarded_empty(), with its bands around it",
            label="refuses a tensor without bands"),
]


def test_matches_reference(kernel, case, monkeypatch):
    # These cases are about memory errors: the checker stays on for them even where it was switched
    # off (make check MEMCHECK=0), since an unchecked out-of-bounds store corrupts host memory.
    monkeypatch.setenv(memcheck.ENV_SWITCH, "1")
    check_case(kernel, SPEC, case)


# ---- bugs that only a GPU shows as wrong numbers -----------------------------------------------------

def test_dot_gives_the_same_value_twice(kernel):
    # An accumulator that is not cleared before the atomics start holds whatever the memory held:
    # often the previous call's result, whose memory the allocator hands out again.
    where = device.torch_device()
    x, y = torch.randn(3000, device=where), torch.randn(3000, device=where)
    first, second = float(kernel.api("dot")(x, y)), float(kernel.api("dot")(x, y))
    if abs(first - second) > 1e-4 * (1 + abs(first)):
        raise AssertionError(f"dot(x, y) gave {first:.6g}, then {second:.6g} for the same x and y: the "
                             "result depends on what the memory held before the call.")


@pytest.mark.cuda
def test_column_sum_gives_the_same_result_every_run(kernel):
    # Under the interpreter programs run one after another; on a GPU thousands run at once, and a
    # read-add-write that is not atomic loses some of the sums, a different few on every run.
    x = torch.randn(16384, 512, device="cuda")
    expected = x.double().sum(dim=0)
    runs = [kernel.api("column_sum")(x) for _ in range(10)]
    for k, got in enumerate(runs):
        wrong = int(((got.double() - expected).abs() > 1e-3 + 1e-4 * expected.abs()).sum())
        if wrong:
            changing = sum(not torch.equal(runs[0], other) for other in runs[1:])
            raise AssertionError(f"run {k + 1} of 10: {wrong} of the 512 column sums are wrong, and the "
                                 f"result changed from run to run {changing} times in 9: programs that add "
                                 "to the same sums are losing each other's additions (a race).")


# ---- the tools: guard bands and poisoned buffers ---------------------------------------------------

def _tool(kernel, name):
    """kernel.py's tool ``name``, which says so plainly when a TODO in it is still a `...`."""
    fn = kernel.api(name)

    def call(*args, **kwargs):
        try:
            result = fn(*args, **kwargs)
        except (TypeError, AttributeError) as error:
            if "ellipsis" not in str(error):
                raise
            result = ...
        if result is ...:
            raise AssertionError(f"{name}() is not finished: a `...` placeholder is still in it.\n"
                                 + todo_summary(kernel.todos))
        return result

    return call


@triton.jit
def _store_range_kernel(out_ptr, start, stop, value, BLOCK: tl.constexpr):
    """Stores ``value`` to out_ptr[start:stop], wherever that is: past the end, or before the start
    with a negative start. This is a planted overrun: no mask protects the tensor's edges."""
    offsets = start + tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, value, mask=offsets < stop)


def _store_range(out: torch.Tensor, start: int, stop: int, value: float = 1.0) -> None:
    if stop > start:
        _store_range_kernel[(triton.cdiv(stop - start, 64),)](out, start, stop, value, BLOCK=64)


GUARDED_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]


@pytest.mark.parametrize("dtype", GUARDED_DTYPES, ids=str)
def test_guarded_empty_lies_between_two_bands_of_canaries(kernel, dtype):
    tensor = _tool(kernel, "guarded_empty")((3, 5), dtype, pad=8, device=device.torch_device())
    assert isinstance(tensor, torch.Tensor), f"guarded_empty returned {type(tensor).__name__}, not a tensor"
    assert tuple(tensor.shape) == (3, 5) and tensor.dtype == dtype and tensor.is_contiguous(), (
        f"guarded_empty((3, 5), {dtype}) gave shape {tuple(tensor.shape)}, dtype {tensor.dtype}, "
        f"contiguous={tensor.is_contiguous()}: expected a contiguous (3, 5) {dtype} tensor.")
    canary = kernel.namespace.CANARY[tensor.element_size()]
    bits = tensor.view(kernel.namespace.SAME_WIDTH_INT[tensor.element_size()])
    start = tensor.storage_offset()
    assert start >= 8, f"the tensor starts {start} elements into its buffer: the band before it needs 8"
    before = bits.as_strided((8,), (1,), start - 8)
    after = bits.as_strided((8,), (1,), start + 15)
    for side, band in (("before", before), ("after", after)):
        assert bool((band == canary).all()), (
            f"the 8 elements {side} the tensor should all hold the canary {canary:#x}, got "
            f"{[hex(v & (1 << 8 * tensor.element_size()) - 1) for v in band.tolist()]}")
    assert _tool(kernel, "check_guards")(tensor, pad=8) is None, "check_guards reports damage on untouched bands"


@pytest.mark.parametrize("dtype", GUARDED_DTYPES, ids=str)
def test_check_guards_finds_a_store_past_the_end(kernel, dtype):
    tensor = _tool(kernel, "guarded_empty")((4, 6), dtype, pad=16, device=device.torch_device())
    _store_range(tensor, 0, 24 + 3)  # the whole tensor, then 3 elements more
    report = _tool(kernel, "check_guards")(tensor, pad=16, name="out")
    assert report is not None, "three elements past the end were overwritten, but check_guards saw nothing"
    for needed in ("3 element", "past the end of out", "from 0 to 2"):
        assert needed in report, f"the report should say {needed!r}: {report!r}"
    assert "before" not in report, f"only the band after the tensor changed: {report!r}"


def test_check_guards_finds_a_store_before_the_start(kernel):
    tensor = _tool(kernel, "guarded_empty")((10,), torch.float32, pad=16, device=device.torch_device())
    _store_range(tensor, -5, -2)  # elements 5, 4 and 3 before the first one
    report = _tool(kernel, "check_guards")(tensor, pad=16, name="out")
    assert report is not None, "three elements before the start were overwritten, but check_guards saw nothing"
    for needed in ("3 element", "before the start of out", "from 3 to 5"):
        assert needed in report, f"the report should say {needed!r}: {report!r}"
    assert "past the end" not in report, f"only the band before the tensor changed: {report!r}"


@pytest.mark.parametrize("shape", [(37, 300), (5, 100), (64, 257)], ids=str)
def test_add_bias_writes_nothing_outside_its_output(kernel, shape):
    # No checker needed: out lies between canaries, so this catches an overrun on a GPU as well.
    where = device.torch_device()
    x, bias = torch.randn(*shape, device=where), torch.randn(shape[1], device=where)
    out = _tool(kernel, "guarded_empty")(shape, torch.float32, pad=8192, device=where)
    result = kernel.api("add_bias")(x, bias, out=out)
    report = _tool(kernel, "check_guards")(out, pad=8192, name="out")
    if report:
        raise AssertionError(f"add_bias(x, bias, out=out) with x of shape {shape}: {report}")
    assert result is out, "add_bias(..., out=out) should write into out and return it"
    torch.testing.assert_close(out, x + bias)


@pytest.mark.parametrize("dtype", GUARDED_DTYPES, ids=str)
def test_poisoned_empty_sets_every_bit(kernel, dtype):
    tensor = _tool(kernel, "poisoned_empty")((2, 3), dtype, device=device.torch_device())
    assert isinstance(tensor, torch.Tensor) and tuple(tensor.shape) == (2, 3) and tensor.dtype == dtype, (
        f"poisoned_empty((2, 3), {dtype}) should give a (2, 3) {dtype} tensor, got {tensor!r}")
    bits = tensor.view(kernel.namespace.SAME_WIDTH_INT[tensor.element_size()])
    assert bool((bits == -1).all()), f"every bit should be set (0xFF bytes), got {bits.tolist()}"
    assert bool(_tool(kernel, "never_written")(tensor).all()), "never_written should be True everywhere at first"


def test_never_written_finds_the_elements_no_kernel_stored(kernel):
    out = _tool(kernel, "poisoned_empty")((100,), torch.float32, device=device.torch_device())
    _store_range(out, 0, 60)  # a grid that stops short: elements 60..99 are never written
    _store_range(out, 70, 71, float("nan"))  # a NaN a kernel computed is a written value
    unwritten = _tool(kernel, "never_written")(out)
    assert unwritten.dtype == torch.bool and tuple(unwritten.shape) == (100,), (
        f"never_written should give a bool tensor of the input's shape, got {unwritten.dtype} "
        f"{tuple(unwritten.shape)}")
    expected = torch.arange(100, device=out.device) >= 60
    expected[70] = False
    if not torch.equal(unwritten, expected):
        found = unwritten.nonzero().flatten().tolist()
        raise AssertionError(f"elements 60..99 except 70 were never written (70 holds a computed NaN); "
                             f"never_written marked {found}")
