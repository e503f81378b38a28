"""Tensors past 2**31 elements, on a GPU: what the modules' `test_offsets_past_two_to_the_31`
share (vector add, and the matmuls). An index or an offset ``row * stride`` computed in int32
wraps around there, to an address before the tensor (an illegal access, or wrong values). The
matmul products below put a's rows, a transposed b's columns and c's rows past 2**31 in turn,
and c is compared with float32 arithmetic a block at a time (a float32 copy of the whole of a
would take 8.6 GB)."""

from __future__ import annotations

from collections.abc import Callable

import torch

# a of BIG_M x BIG_K float16 holds 2**31 + 2**21 elements (4.3 GB); its rows from
# FIRST_ROW_PAST_INT32 on start past element 2**31.
BIG_M, BIG_K = 65600, 32768
FIRST_ROW_PAST_INT32 = 2**31 // BIG_K
FREE_BYTES_NEEDED = 14 * 2**30  # a, the other operands, c and a block of float32 at once
INT64_FIX = (
    "An offset row * stride past 2**31 wraps around in int32 arithmetic, to an address before "
    "the tensor: compute offs_m and offs_n in tl.int64 "
    "(pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)) before multiplying them by the strides."
)
# What a product's extra arguments are, from its b (a bias of one value per column of c, say), and
# what the kernel applies to a @ b (``epilogue(product, columns)``), or None.
Extras = Callable[[torch.Tensor], tuple[tuple, Callable | None]]


def why_not_here() -> str | None:
    """Why these products cannot run in this process (for pytest.skip), or None."""
    from grader.core import device

    if not device.is_cuda():
        return "needs a CUDA GPU: the interpreter would take hours over 2**31 elements"
    free, _ = torch.cuda.mem_get_info()
    if free < FREE_BYTES_NEEDED:
        return f"needs about {FREE_BYTES_NEEDED / 2**30:.0f} GB of free GPU memory ({free / 2**30:.1f} GB free)"
    return None


# A vector of float16 whose last blocks start past element 2**31, with a partial last block (4.3 GB).
BIG_VECTOR = 2**31 + 2**20 + 3
BLOCK_START_FIX = (
    "A block's first index pid * BLOCK_SIZE passes 2**31 here, and int32 arithmetic wraps it "
    "around to a negative index: compute it in tl.int64 (pid.to(tl.int64) * BLOCK_SIZE)."
)


def check_vector_add(add: Callable) -> None:
    """``add(x, y)`` on two float16 vectors of ``BIG_VECTOR`` elements, compared with PyTorch's sum a
    slice at a time; an AssertionError says where and what to fix."""
    torch.manual_seed(0)
    x = torch.empty(BIG_VECTOR, dtype=torch.float16, device="cuda").uniform_(-1, 1)
    y = torch.empty(BIG_VECTOR, dtype=torch.float16, device="cuda").uniform_(-1, 1)
    what = f"x + y for vectors of {BIG_VECTOR} float16 elements"
    out = _run(what, add, x, y, fix=BLOCK_START_FIX)
    step = 2**28
    for start in range(0, BIG_VECTOR, step):
        part = slice(start, start + step)
        wrong = out[part] != x[part] + y[part]
        if wrong.any():
            first = start + int(wrong.nonzero()[0])
            past = " (past 2**31)" if first >= 2**31 else ""
            raise AssertionError(
                f"{what}: {int(wrong.sum())} wrong elements in {start} to {min(start + step, BIG_VECTOR) - 1}, "
                f"the first at index {first}{past}. {BLOCK_START_FIX}"
            )


def products() -> list[tuple[torch.Tensor, torch.Tensor, str]]:
    """(a, b, what) for the four products; a's rows, a transposed b's columns and c's rows each pass
    2**31 in one of them."""
    torch.manual_seed(0)
    a = torch.randn(BIG_M, BIG_K, dtype=torch.float16, device="cuda").mul_(BIG_K**-0.25)
    narrow = torch.randn(BIG_K, 16, dtype=torch.float16, device="cuda").mul_(BIG_K**-0.25)
    wide = torch.randn(BIG_K, 256, dtype=torch.float16, device="cuda").mul_(BIG_K**-0.25)
    short = torch.randn(16, BIG_K, dtype=torch.float16, device="cuda").mul_(BIG_K**0.25 / 4)  # c about 1
    past = f"from {FIRST_ROW_PAST_INT32} on past 2**31 elements"
    return [
        (a, narrow, f"a of {BIG_M} x {BIG_K} (rows {past}) times b of {BIG_K} x 16"),
        (a, wide, f"a of {BIG_M} x {BIG_K} (rows {past}) times b of {BIG_K} x 256"),
        (
            narrow.t(),
            a.t(),
            f"a of 16 x {BIG_K} times b = the transpose of a {BIG_M} x {BIG_K} matrix (columns {past})",
        ),
        (
            a[:, :16],
            short,
            f"a = the first 16 columns of a {BIG_M} x {BIG_K} matrix times b of 16 x {BIG_K}, so c is "
            f"{BIG_M} x {BIG_K} (rows of a and of c {past})",
        ),
    ]


def check_matmuls(matmul: Callable, extras: Extras | None = None) -> None:
    """Run ``matmul(a, b, *extra)`` on each product and compare c; an AssertionError says which
    product, where and what to fix."""
    for a, b, what in products():
        extra, epilogue = extras(b) if extras is not None else ((), None)
        c = _run(what, matmul, a, b, *extra)
        assert_matches(c, a, b, what, epilogue)
        del c


def _run(what: str, function: Callable, *args, fix: str = INT64_FIX):
    """function(*args), synchronized; a GPU error fails with what to fix."""
    from grader.core import device

    try:
        c = function(*args)
        device.synchronize()
    except torch.cuda.OutOfMemoryError:
        raise
    except RuntimeError as error:  # an illegal address; the CUDA context is then lost for later tests too
        raise AssertionError(f"{what}: the launch failed ({str(error).splitlines()[0]}). {fix}") from None
    return c


def assert_matches(c, a, b, what: str, epilogue: Callable | None = None, block: int = 4096) -> None:
    """c against a float32 a @ b (then ``epilogue(product, columns)``), a block of rows (of columns,
    for a wide c) at a time."""
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
            raise AssertionError(
                f"{what}: {count} elements wrong in c's {span}, the first c[{row}, {col}] = "
                f"{got[i, j].item():.4g} where float32 arithmetic gives {expected[i, j].item():.4g}. {INT64_FIX}"
            )
