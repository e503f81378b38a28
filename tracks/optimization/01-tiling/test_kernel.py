"""Public tests for 01-tiling.  Run:  pytest tracks/optimization/01-tiling

SPEC and CASES describe the correctness tests as data (the grader reads them too); TRAFFIC holds
the memory-traffic bars, which the interpreter checks on a CPU (on a GPU the speed is measured
instead). transpose() is the module's main function; cases with spec=MATMUL call matmul().
"""

import pytest
import torch

from grader.cases import Case, Spec, Suspect, matmul_bytes, matmul_flops, matmul_inputs, refusal
from grader.checks import check_case, matmul_refusals
from grader.traffic import TrafficBar, check_bar

PYTEST_ONLY = {
    "test_offsets_past_two_to_the_31": (
        "Inputs of more than 2**31 elements take about 13 GB of GPU memory, more than the grader gives one "
        "correctness process beside the others; make check runs it on a GPU with the memory free."),
    "test_memory_traffic": (
        "The traffic report is counted by hooks in Triton's interpreter inside the process that runs "
        "the learner's kernel, where a submission could patch or switch them off, so it cannot decide "
        "points; the speed it predicts is graded on a GPU instead."),
}


def transpose_inputs(case, rand):
    M, N = case.params["shape"]
    return (rand.matrix(M, N, case.params.get("layout", "row-major"), case.dtype),), {}


def transpose_bytes(case):
    M, N = case.params["shape"]
    return 2 * M * N * case.dtype.itemsize


# Typical wrong computations, which the diagnosis names when a kernel's outputs equal one of them
# (they get float64 copies of the inputs, which keep a transposed x's strides).

def _transpose_strides_ignored(x):
    """The tile loaded from x_ptr + row * N + col, as if x were row-major, for an x that is itself
    a transpose: the load reads x's memory in its own order. (A sliced x's memory holds values
    that are not in x: not computable.)"""
    M, N = x.shape
    if x.is_contiguous() or not x.t().is_contiguous():
        raise ValueError("only an x stored as a transpose shows this mistake in computable values")
    return x.t().contiguous().reshape(M, N).t().contiguous()


TRANSPOSE_SUSPECTS = (
    Suspect("a load that ignores x's strides (x_ptr + rows * N + cols, as if x were row-major)",
            _transpose_strides_ignored,
            "the tests pass transposed and sliced views: address the tile with x's own strides, "
            "x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn."),
)


def _matmul_last_k_step(block_k):
    """a @ b from the last k-step alone: the accumulator replaced at every step (acc = tl.dot(a, b))
    with steps of block_k."""
    def compute(a, b):
        K = a.shape[1]
        if K <= block_k:
            raise ValueError("a single k-step: the mistake does not show")
        start = (K - 1) // block_k * block_k
        return a[:, start:] @ b[start:]
    return compute


# One per k-step a launcher may choose; the first whose values every wrong output matches is named.
MATMUL_SUSPECTS = tuple(
    Suspect("the last k-step alone (the accumulator replaced at every step: acc = tl.dot(a, b))",
            _matmul_last_k_step(block_k),
            "each k-step must add to what the earlier ones summed: acc = tl.dot(a, b, acc) (or acc += "
            "tl.dot(a, b)).")
    for block_k in (16, 32, 64, 128))


SPEC = Spec(
    api="transpose",
    make_inputs=transpose_inputs,
    reference=lambda x: x.t().contiguous(),
    suspects=TRANSPOSE_SUSPECTS,
    bytes_moved=transpose_bytes,
    torch_baseline=lambda x: x.t().contiguous(),
    bench_cases=tuple(Case({"shape": (8192, 8192)}, dtype) for dtype in (torch.float32, torch.float16)),
    ceiling="copy",
    target=0.85,
    kernel_writes_outputs=True,  # moving the data is the exercise: no PyTorch copy may do it
)

MATMUL = Spec(
    api="matmul",
    make_inputs=matmul_inputs,
    reference=lambda a, b: a @ b,
    suspects=MATMUL_SUSPECTS,
    # tl.dot rounds float32 operands to TF32 on a GPU; the interpreter multiplies exactly.
    tolerances={torch.float32: (5e-3, 5e-3)},
    interpreter_tolerances={torch.float32: (1e-4, 1e-4)},
    flops=matmul_flops,
    bytes_moved=matmul_bytes,
    torch_baseline=torch.matmul,
    bench_cases=(Case({"mnk": (4096, 4096, 4096)}, torch.float16),),
    ceiling="torch",
    target=0.75,
)

CASES = [
    Case({"shape": (1, 1)}, label="1 x 1"),
    Case({"shape": (1, 70)}, label="one row"),
    Case({"shape": (70, 1)}, label="one column"),
    Case({"shape": (64, 64)}, label="exactly one tile"),
    Case({"shape": (65, 63)}, label="one past and one short of a tile"),
    Case({"shape": (200, 130)}, torch.float16, label="several tiles, tails both ways"),
    Case({"shape": (33, 300), "layout": "transposed"}, label="x itself a transpose"),
    Case({"shape": (90, 50), "layout": "sliced"}, torch.float16, label="sliced x"),
    Case({"shape": (40, 70), "layout": "sliced"}, label="sliced x, wide"),
    Case({"shape": (129, 257)}, torch.bfloat16, label="tails", cuda_only=True),
    Case({"shape": (4099, 3001)}, label="large, odd", cuda_only=True),
    # The starting matmul runs one program per output element, which the interpreter takes about
    # 15 ms each to run: the CPU cases stay small so that a first check takes seconds, not minutes.
    Case({"mnk": (1, 1, 1)}, spec=MATMUL, label="1 x 1 x 1"),
    Case({"mnk": (16, 16, 16)}, spec=MATMUL, label="one 16 x 16 tile"),
    Case({"mnk": (9, 20, 40)}, spec=MATMUL, label="odd sizes"),
    Case({"mnk": (12, 20, 70)}, torch.float16, spec=MATMUL, label="K with a partial last step"),
    # One case wide but a single k-step, one narrow with several: what fails then tells a loop over
    # K (an accumulator overwritten, a k mask) from a tile too narrow for N.
    Case({"mnk": (8, 40, 16)}, spec=MATMUL, label="wide, one k-step"),
    Case({"mnk": (20, 16, 90)}, spec=MATMUL, label="one tile wide, several k-steps"),
    Case({"mnk": (20, 15, 30), "layouts": ("transposed", "sliced")}, spec=MATMUL,
         label="a transposed, b sliced"),
    Case({"mnk": (12, 10, 24), "layouts": ("sliced", "row-major")}, torch.float16, spec=MATMUL,
         label="sliced a"),
    Case({"mnk": (10, 12, 20), "layouts": ("transposed", "transposed")}, spec=MATMUL,
         label="both transposed"),
    Case({"mnk": (10, 18, 100), "layouts": ("row-major", "transposed")}, spec=MATMUL,
         label="several k-steps, b transposed",
         hint="K = 100 takes four k-steps of 32, the last one partial: each step adds to the "
              "accumulator, its k mask compares with what is left of K (K - k), and both pointers "
              "advance by BLOCK_K times their own k stride."),
    Case({"mnk": (8, 8, 1024), "entry_scale": 1.0}, torch.float16, spec=MATMUL, label="long K, fp16",
         hint="each element of c sums 1024 products of entries of size 1, so it grows to about 32: the "
              "accumulator must be float32 (tl.zeros(..., dtype=tl.float32)); a float16 one rounds every "
              "partial sum to 11 significant bits, and the roundings add up over K."),
    Case({"mnk": (4, 8, 2048), "entry_scale": 1.0}, torch.float16, spec=MATMUL, label="longer K, fp16"),
    Case({"mnk": (8, 6, 1024), "entry_scale": 1.0, "layouts": ("row-major", "transposed")}, torch.float16,
         spec=MATMUL, label="long K, fp16, b transposed"),
    Case({"mnk": (300, 200, 150)}, torch.float16, spec=MATMUL, label="several tiles each way",
         cuda_only=True),
    Case({"mnk": (2048 + 5, 1024 - 3, 512 + 1)}, spec=MATMUL, label="large, odd", cuda_only=True),
]

# Refusals: bad inputs must raise a clear error before any kernel runs (graded like the results).
CASES += [
    refusal(SPEC, lambda rand: ((rand.randn(5),), {}), (ValueError, TypeError), r"dimensions",
            why="say that transpose() takes a matrix (2 dimensions)", label="refuses a vector"),
    refusal(SPEC, lambda rand: ((torch.ones(3, 4, dtype=torch.int32, device=rand.device),), {}),
            (ValueError, TypeError), r"dtype", why="name x's dtype and say that the kernel does not support it",
            label="refuses integers"),
    *matmul_refusals(MATMUL),
]

TRAFFIC = [
    TrafficBar(Case({"shape": (96, 160)}), coalesced=("load", "store"), todo="load the tile",
               lesson="Read and write whole rows: give each program a 2-D tile of x, load it along x's "
                      "rows and store it along y's rows (the tile's columns)."),
    TrafficBar(Case({"mnk": (16, 16, 64)}, spec=MATMUL), coalesced=(), max_loads_per_output=16,
               todo="tile of outputs",
               lesson="Let each program compute a tile of outputs, so that every element of a and b "
                      "it loads serves a whole row or column of the tile (a 16 x 16 tile needs 8 "
                      "loads per output here, one element per program 128)."),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


def test_memory_traffic(kernel, bar):
    check_bar(kernel, SPEC, bar)


BEYOND_INT32 = 46341  # 46341 ** 2 elements: just past 2 ** 31


@pytest.mark.cuda
def test_offsets_past_two_to_the_31(kernel):
    """A transpose and a matmul whose input holds more than 2**31 elements: an offset row * stride
    computed in int32 wraps around to an address before the tensor (an illegal access, or wrong
    values). Make the row and column offsets tl.int64."""
    from grader import device

    if not device.is_cuda():
        pytest.skip("needs a CUDA GPU: the interpreter would take hours over 2**31 elements")
    free, _ = torch.cuda.mem_get_info()
    if free < 14 * 2 ** 30:
        pytest.skip(f"needs about 14 GB of free GPU memory ({free / 2 ** 30:.1f} GB free)")
    x = torch.randn(BEYOND_INT32, BEYOND_INT32, dtype=torch.float16, device="cuda")
    y = kernel.api("transpose")(x)
    torch.cuda.synchronize()
    assert torch.equal(y, x.t()), "transpose() of a 46341 x 46341 float16 matrix (past 2**31 elements) is " \
        "wrong: are the offsets int32? Make rows and cols tl.int64 before multiplying by the strides."
    del x, y
    a = torch.randn(65600, 32768, dtype=torch.float16, device="cuda") * 32768 ** -0.25
    b = torch.randn(32768, 16, dtype=torch.float16, device="cuda") * 32768 ** -0.25
    c = kernel.api("matmul")(a, b)
    torch.cuda.synchronize()
    expected = (a @ b).float()
    assert torch.allclose(c.float(), expected, atol=5e-2, rtol=5e-2), \
        "matmul() of a 65600 x 32768 a (past 2**31 elements) is wrong: are offs_m * stride_am computed in " \
        "int32? Make the row and column offsets tl.int64."

