"""Public tests for 02-matrix-mul.  Run:  pytest tracks/missing-elements/02-matrix-mul

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. Shapes cover 1 x 1 x 1, sizes that are not multiples of any block, K with a
partial last step, tall and wide matrices, and transposed or sliced (non-contiguous) inputs.
"""

import pytest
import torch

from grader.cases import Case, Spec, refusal
from grader.checks import check_case, matmul_refusals

PYTEST_ONLY = {
    "test_offsets_past_two_to_the_31": (
        "Inputs of more than 2**31 elements take about 13 GB of GPU memory, more than the grader gives one "
        "correctness process beside the others; make check runs it on a GPU with the memory free."),
}


def make_operand(rand, rows, cols, layout, dtype, scale):
    """A (rows, cols) matrix stored as ``layout`` says:
    "row-major";  "transposed": the transpose of a row-major (cols, rows) matrix;
    "sliced": every other column of a matrix twice as wide;
    "padded": the top-left corner of a larger matrix whose other elements are NaN, so that a
    kernel that reads past the edge (a missing mask) gets NaN into its sums and shows it."""
    if layout == "transposed":
        return rand.randn(cols, rows, dtype=dtype, scale=scale).t()
    if layout == "sliced":
        return rand.randn(rows, 2 * cols, dtype=dtype, scale=scale)[:, ::2]
    if layout == "padded":
        padded = torch.full((rows + 16, cols + 16), float("nan"), dtype=dtype, device=rand.device)
        padded[:rows, :cols] = rand.randn(rows, cols, dtype=dtype, scale=scale)
        return padded[:rows, :cols]
    return rand.randn(rows, cols, dtype=dtype, scale=scale)


def make_inputs(case, rand):
    M, N, K = case.params["mnk"]
    layout_a, layout_b = case.params.get("layouts", ("row-major", "row-major"))
    # Entries of size K ** -0.25 make every output element about 1 in size whatever K is, so one
    # set of tolerances fits every shape.
    scale = max(K, 1) ** -0.25
    a = make_operand(rand, M, K, layout_a, case.dtype, scale)
    b = make_operand(rand, K, N, layout_b, case.dtype, scale)
    return (a, b), {}


def flops(case):
    M, N, K = case.params["mnk"]
    return 2 * M * N * K


def bytes_moved(case):
    M, N, K = case.params["mnk"]
    return (M * K + K * N + M * N) * case.dtype.itemsize


SPEC = Spec(
    api="matmul",
    make_inputs=make_inputs,
    reference=lambda a, b: a @ b,
    # On a GPU, tl.dot on float32 inputs uses TF32 tensor cores (10-bit mantissa), so float32
    # results are good to about 1e-3 relative, not 1e-6. float16/bfloat16 use the defaults.
    tolerances={torch.float32: (5e-3, 5e-3)},
    # Under the interpreter tl.dot is exact float32 arithmetic: only summation order differs.
    interpreter_tolerances={torch.float32: (1e-4, 1e-4)},
    flops=flops,
    bytes_moved=bytes_moved,
    torch_baseline=torch.matmul,
    bench_cases=tuple(Case({"mnk": (4096, 4096, 4096)}, dtype) for dtype in
                      (torch.float16, torch.bfloat16)),
    ceiling="torch",
    target=0.75,
)

CASES = [
    Case({"mnk": (1, 1, 1)}, label="1 x 1 x 1"),
    Case({"mnk": (16, 16, 16)}, label="one 16 x 16 tile"),
    Case({"mnk": (33, 65, 17)}, label="odd sizes"),
    Case({"mnk": (48, 40, 100)}, label="K not a multiple of BLOCK_K"),
    Case({"mnk": (70, 90, 130), "layouts": ("padded", "padded")}, torch.float16,
         label="K not a multiple of BLOCK_K, NaN past the edges"),
    Case({"mnk": (20, 36, 50), "layouts": ("padded", "padded")},
         label="NaN past the edges"),
    Case({"mnk": (300, 8, 40)}, label="tall and skinny"),
    Case({"mnk": (3, 600, 24)}, torch.float16, label="short and wide"),
    Case({"mnk": (257, 300, 65)}, label="several tiles each way"),
    Case({"mnk": (40, 50, 70), "layouts": ("row-major", "transposed")}, label="b transposed"),
    Case({"mnk": (37, 29, 45), "layouts": ("transposed", "row-major")}, torch.float16,
         label="a transposed"),
    Case({"mnk": (31, 47, 53), "layouts": ("sliced", "transposed")}, label="sliced a, transposed b"),
    Case({"mnk": (65, 33, 129)}, torch.bfloat16, label="odd sizes", cuda_only=True),
    Case({"mnk": (1000, 1500, 700), "layouts": ("row-major", "transposed")}, torch.float16,
         label="large, b transposed", cuda_only=True),
    Case({"mnk": (2048 + 3, 1024 - 5, 1024 + 7)}, label="large, odd", cuda_only=True),
    Case({"mnk": (4096, 4096, 4096)}, torch.float16, label="benchmark size", cuda_only=True),
]

# Refusals: bad inputs must raise a clear error before any kernel runs (graded like the results).
CASES += [
    *matmul_refusals(SPEC),
    refusal(SPEC, lambda rand: ((rand.randn(4, 5), rand.randn(5)), {}), (ValueError, TypeError), r"dimensions",
            why="say that both operands must be 2-D matrices (b here is a vector)", label="refuses a vector"),
    refusal(SPEC, lambda rand: ((torch.ones(4, 5, dtype=torch.int32, device=rand.device),
                                 torch.ones(5, 3, dtype=torch.int32, device=rand.device)), {}), (ValueError, TypeError),
            r"dtype", why="say that the dtype (int32) is not one the kernel supports",
            label="refuses integer tensors"),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


@pytest.mark.cuda
def test_offsets_past_two_to_the_31(kernel):
    """Matmuls whose a, b or c holds more than 2**31 elements: an offset row * stride computed in int32
    wraps around to an address before the tensor (an illegal access, or wrong values). Make the row
    and column offsets tl.int64."""
    from grader import large_offsets

    if (why := large_offsets.why_not_here()) is not None:
        pytest.skip(why)
    large_offsets.check_matmuls(kernel.api("matmul"))
