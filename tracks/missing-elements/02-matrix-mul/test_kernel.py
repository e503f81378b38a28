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


# test_offsets_past_two_to_the_31: a of BIG_M x BIG_K float16 holds 2**31 + 2**21 elements (4.3 GB);
# its rows from FIRST_ROW_PAST_INT32 on start past element 2**31.
BIG_M, BIG_K = 65600, 32768
FIRST_ROW_PAST_INT32 = 2 ** 31 // BIG_K
INT64_FIX = ("An offset row * stride past 2**31 wraps around in int32 arithmetic, to an address before "
             "the tensor: compute offs_m and offs_n in tl.int64 "
             "(pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)) before multiplying them by the strides.")


def big_inputs():
    """(a, b, what) for the four products past 2**31 elements; a's rows, a transposed b's columns and
    c's rows each pass 2**31 in one of them."""
    torch.manual_seed(0)
    a = torch.randn(BIG_M, BIG_K, dtype=torch.float16, device="cuda").mul_(BIG_K ** -0.25)
    narrow = torch.randn(BIG_K, 16, dtype=torch.float16, device="cuda").mul_(BIG_K ** -0.25)
    wide = torch.randn(BIG_K, 256, dtype=torch.float16, device="cuda").mul_(BIG_K ** -0.25)
    short = torch.randn(16, BIG_K, dtype=torch.float16, device="cuda").mul_(BIG_K ** 0.25 / 4)  # c about 1
    past = f"from {FIRST_ROW_PAST_INT32} on past 2**31 elements"
    return [
        (a, narrow, f"a of {BIG_M} x {BIG_K} (rows {past}) times b of {BIG_K} x 16"),
        (a, wide, f"a of {BIG_M} x {BIG_K} (rows {past}) times b of {BIG_K} x 256"),
        (narrow.t(), a.t(), f"a of 16 x {BIG_K} times b = the transpose of a {BIG_M} x {BIG_K} matrix "
                            f"(columns {past})"),
        (a[:, :16], short, f"a = the first 16 columns of a {BIG_M} x {BIG_K} matrix times b of 16 x {BIG_K}, so c "
                           f"is {BIG_M} x {BIG_K} (rows of a and of c {past})"),
    ]


def big_result(what, function, *args):
    """function(*args), synchronized; a GPU error fails the test with what to fix."""
    try:
        c = function(*args)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        raise
    except RuntimeError as error:  # an illegal address; the CUDA context is then lost for later tests too
        pytest.fail(f"{what}: the launch failed ({str(error).splitlines()[0]}). {INT64_FIX}")
    return c


def assert_matches_in_blocks(c, a, b, what, epilogue=None, block=4096):
    """c against a float32 a @ b (then epilogue(product, columns)), a block of rows (of columns, for a
    wide c) at a time: a float32 copy of the whole of a would take 8.6 GB."""
    M, N = c.shape
    by_rows = M >= N
    for start in range(0, M if by_rows else N, block):
        part = slice(start, start + block)
        rows, cols = (part, slice(None)) if by_rows else (slice(None), part)
        expected = a[rows].float() @ b[:, cols].float()
        if epilogue is not None:
            expected = epilogue(expected, cols)
        got = c[rows, cols].float()
        wrong = ~torch.isclose(got, expected, atol=1e-2, rtol=1e-2)  # float32 sums over K = 32768, float16 c
        if wrong.any():
            i, j = wrong.nonzero()[0].tolist()
            row, col = (start + i, j) if by_rows else (i, start + j)
            span = f"{'rows' if by_rows else 'columns'} {start} to {start + got.shape[not by_rows] - 1}"
            count = f"{int(wrong.sum())} of {wrong.numel()}"
            pytest.fail(f"{what}: {count} elements wrong in c's {span}, the first c[{row}, {col}] = "
                        f"{got[i, j].item():.4g} where float32 arithmetic gives {expected[i, j].item():.4g}. "
                        f"{INT64_FIX}")


@pytest.mark.cuda
def test_offsets_past_two_to_the_31(kernel):
    """Matmuls whose a, b or c holds more than 2**31 elements: an offset row * stride computed in int32
    wraps around to an address before the tensor (an illegal access, or wrong values). Make the row
    and column offsets tl.int64."""
    from grader import device

    if not device.is_cuda():
        pytest.skip("needs a CUDA GPU: the interpreter would take hours over 2**31 elements")
    free, _ = torch.cuda.mem_get_info()
    if free < 14 * 2 ** 30:
        pytest.skip(f"needs about 14 GB of free GPU memory ({free / 2 ** 30:.1f} GB free)")
    matmul = kernel.api("matmul")
    for a, b, what in big_inputs():
        c = big_result(what, matmul, a, b)
        assert_matches_in_blocks(c, a, b, what)
        del c
