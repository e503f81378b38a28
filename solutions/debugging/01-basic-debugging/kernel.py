"""Finding wrong results: three small kernels that compute the wrong answer, and two tools that
help you see where.

    row_max(x)     the largest value of each row (over the last dimension), like torch.amax(x, -1)
    row_mean(x)    the mean of each row, like torch.mean(x, -1)
    transpose(x)   x.T for a 2-D x, as a new contiguous tensor

The three kernels run, return tensors of the right shape, and pass some of their tests. They also
hold five bugs between them, of the kinds that kernel writers really make. None of them shows on
every input: each needs a particular row length, layout, dtype or grid shape. The tests report
what goes wrong (which outputs, which values), never which line is at fault. Finding the line is
the exercise; the README shows the tools (the interpreter with pdb, tl.device_print,
tl.static_print, tl.static_assert, tl.device_assert) and walks through one bug from symptom to line.

The two tools at the bottom are yours to write:

    boundary_sizes(block)       the sizes that put a kernel's masks to the test
    first_mismatch(out, ref)    where the first wrong element is, and how many are wrong

Check your work:  make check M=debugging/01-basic-debugging
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# The row kernels walk a row in chunks of at most this many lanes: a chunk sits in registers (16
# values per thread with 8 warps), and longer rows take several trips around the loop.
MAX_BLOCK_N = 4096
# transpose() moves TILE x TILE tiles; the tile goes through on-chip memory, so that both the
# reads from x and the writes to its transpose touch consecutive addresses.
TILE = 64
# The most programs a CUDA grid may have along its second axis.
MAX_GRID_Y = 65535


# ---- row_max ------------------------------------------------------------------------------

@triton.jit
def max_keeping_nan(a, b):
    # tl.max skips NaN (like C's fmax), but torch.amax returns NaN for a row that holds one.
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def row_max_kernel(x_ptr, out_ptr, x_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    # BUG: the row offset uses the row length instead of the row stride
    # SYMPTOM: indices 1\.\.|rows? 1\.\.|not contiguous
    # Rows are x_row_stride elements apart, which is N only when they are packed.
    x_row_ptr = x_ptr + row * x_row_stride
    # STUB: x_row_ptr = x_ptr + row * N
    # END BUG
    running_max = tl.full([BLOCK_N], float("-inf"), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        # BUG: masked lanes are loaded without a value that leaves the maximum alone
        # SYMPTOM: NaN although|above every value|not a power of two
        # -inf is the one value that cannot raise a maximum; without other= the lanes past the
        # row's end hold whatever the hardware leaves there (0 on today's GPUs, NaN here).
        x = tl.load(x_row_ptr + cols, mask=mask, other=float("-inf"))
        # STUB: x = tl.load(x_row_ptr + cols, mask=mask)
        # END BUG
        running_max = tl.maximum(running_max, x.to(tl.float32), propagate_nan=tl.PropagateNan.ALL)
    row_max = tl.reduce(running_max, 0, max_keeping_nan)
    tl.store(out_ptr + row, row_max.to(out_ptr.dtype.element_ty))


# ---- row_mean -----------------------------------------------------------------------------

@triton.jit
def row_mean_kernel(x_ptr, out_ptr, x_row_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    x_row_ptr = x_ptr + row * x_row_stride
    # BUG: the sums are kept in the input's dtype
    # SYMPTOM: overflow
    # float32 whatever x holds: a sum of fp16 values passes fp16's largest value, 65504, long
    # before their mean does, and each fp16 addition rounds to 11 significant bits.
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    # STUB: acc = tl.zeros([BLOCK_N], dtype=x_ptr.dtype.element_ty)
    # END BUG
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        # BUG: the mask keeps one lane too many
        # SYMPTOM: past the end|one element too many|out of bounds
        # Lanes N and up lie past the row's end: the last chunk of a row keeps N - start lanes.
        mask = cols < N
        # STUB: mask = cols <= N
        # END BUG
        x = tl.load(x_row_ptr + cols, mask=mask, other=0.0)
        acc += x
    mean = tl.sum(acc, axis=0) / N
    tl.store(out_ptr + row, mean.to(out_ptr.dtype.element_ty))


# ---- transpose ----------------------------------------------------------------------------

@triton.jit
def transpose_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, stride_yn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # BUG: the two program ids are read from each other's axis
    # SYMPTOM: never written
    # The grid is (tiles down x's rows, tiles across x's columns): axis 0 picks the row tile.
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    # STUB: pid_m = tl.program_id(axis=1)
    # STUB: pid_n = tl.program_id(axis=0)
    # END BUG
    # 64-bit offsets: row * stride passes 2^31 in tensors of more than 2^31 elements.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tile = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_n[None, :] * stride_xn, mask=mask, other=0.0)
    # y[n, m] = x[m, n]: the tile goes back transposed, to rows offs_n and columns offs_m of y.
    mask_t = (offs_n[:, None] < N) & (offs_m[None, :] < M)
    tl.store(y_ptr + offs_n[:, None] * stride_ym + offs_m[None, :] * stride_yn, tl.trans(tile), mask=mask_t)


# ---- launchers ----------------------------------------------------------------------------

def _rows(x: torch.Tensor, api: str) -> torch.Tensor:
    """x as a 2-D tensor of rows (its last dimension), each row's elements one apart in memory."""
    check_tensors(("x", x))
    if x.dim() == 0:
        raise ValueError(f"{api}() reduces over the last dimension of x, but x is a 0-dimensional "
                         "tensor (a scalar): give it at least one dimension, e.g. x.reshape(1).")
    if x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}: its rows are empty, and an empty row has no "
                         f"{'maximum' if api == 'row_max' else 'mean'}. Give x a last dimension of "
                         "at least 1.")
    rows = x.reshape(-1, x.shape[-1])  # a view where it can be, a copy where it must
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    return rows


def _row_launch(kernel, x: torch.Tensor, api: str) -> torch.Tensor:
    rows = _rows(x, api)
    n_rows, n_cols = rows.shape
    out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    if n_rows:  # a grid of 0 programs is an error; no rows need no launch
        block_n = min(triton.next_power_of_2(n_cols), MAX_BLOCK_N)
        num_warps = min(max(block_n // 512, 1), 8)
        kernel[(n_rows,)](rows, out, rows.stride(0), n_cols, BLOCK_N=block_n, num_warps=num_warps)
    return out.view(x.shape[:-1])


def row_max(x: torch.Tensor) -> torch.Tensor:
    """The largest value of each row of x (its last dimension): shape x.shape[:-1], x's dtype.

    Like torch.amax(x, dim=-1), a row that holds a NaN has NaN as its maximum.
    """
    return _row_launch(row_max_kernel, x, "row_max")


def row_mean(x: torch.Tensor) -> torch.Tensor:
    """The mean of each row of x (its last dimension): shape x.shape[:-1], x's dtype, like
    torch.mean(x, dim=-1). The sums are float32 whatever x's dtype."""
    return _row_launch(row_mean_kernel, x, "row_mean")


def transpose(x: torch.Tensor) -> torch.Tensor:
    """x.T for a 2-D x of any strides, as a new contiguous tensor of shape (N, M)."""
    check_tensors(("x", x), ndim=2)
    M, N = x.shape
    y = torch.empty((N, M), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    grid = (triton.cdiv(M, TILE), triton.cdiv(N, TILE))
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"x has {N} columns: more than the {MAX_GRID_Y} tiles of {TILE} that a CUDA "
                         "grid holds along its second axis. Transpose it in slices of at most "
                         f"{MAX_GRID_Y * TILE} columns.")
    transpose_kernel[grid](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                           BLOCK_M=TILE, BLOCK_N=TILE, num_warps=4)
    return y


# ---- your tools ---------------------------------------------------------------------------

def is_prime(n: int) -> bool:
    """True for 2, 3, 5, 7, 11, ...: trial division, fast enough for block-sized numbers."""
    if n < 2:
        return False
    divisor = 2
    while divisor * divisor <= n:
        if n % divisor == 0:
            return False
        divisor += 1
    return True


def boundary_sizes(block: int) -> list[int]:
    """The sizes that put a kernel's masks to the test around a block of ``block`` lanes.

    At least: 1 (a single element), block - 1 (one lane short of a block), block (exactly one
    block), block + 1 (one lane into the next block), the largest prime below block - 1 and the
    smallest prime above block + 1 (an odd prime is never a multiple of a block, so it cannot line
    up with one by accident). Sorted, each once, all positive: boundary_sizes(64) returns
    [1, 61, 63, 64, 65, 67], boundary_sizes(1) returns [1, 2, 3].
    """
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int (a number of lanes), got {block!r}.")
    # TODO: return the sizes of the sweep, sorted, each once, all positive
    # HINT: collect them in a set literal, {1, block - 1, block, block + 1}, and add the two primes with
    # HINT: sizes |= {below, above} (a set drops repeats; kernel.py may not call .add, a tensor method's name).
    # HINT: is_prime above tells a prime; step down from block - 2 and up from block + 2 until you meet one.
    # HINT: there may be no prime below block - 1 (for block 3 or less); keep only sizes >= 1, in order.
    sizes = {1, block - 1, block, block + 1}
    below = block - 2
    while below >= 2 and not is_prime(below):
        below -= 1
    above = block + 2
    while not is_prime(above):
        above += 1
    sizes |= {below, above}
    return sorted(size for size in sizes if size >= 1)
    # STUB: return []
    # END TODO


# (atol, rtol) per dtype: |out - ref| <= atol + rtol * |ref| passes, as in the course's tests.
TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}


def first_mismatch(out: torch.Tensor, ref: torch.Tensor, atol: float | None = None,
                   rtol: float | None = None) -> str | None:
    """None when out matches ref, else one sentence: how many elements are wrong and the first one.

    An element is right when |out - ref| <= atol + rtol * |ref|; NaN is right only where ref is NaN
    too, inf only where ref is the same inf. atol and rtol default to TOLERANCES[out.dtype].
    The first wrong element is the first in row-major order (the order of out.flatten()), and the
    sentence reads, for example:

        "3 of 1000 elements are wrong; the first, at index (2, 17), is 0 where -0.513 was expected"

    (the values printed with f"{value:.6g}"). Tensors of different shapes give
    "out has shape (4,) but ref has shape (5,)".
    """
    if tuple(out.shape) != tuple(ref.shape):
        return f"out has shape {tuple(out.shape)} but ref has shape {tuple(ref.shape)}"
    default_atol, default_rtol = TOLERANCES.get(out.dtype, (0.0, 0.0))
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    got, want = out.detach().double(), ref.detach().to(out.device).double()
    # TODO: find the wrong elements: their count, and the index of the first
    # HINT: torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True) is True where an element is right.
    # HINT: .nonzero() of a boolean tensor lists its True elements' indices, one per row, in row-major order.
    wrong = ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    wrong_indices = wrong.nonzero()
    if wrong_indices.shape[0] == 0:
        return None
    first = tuple(wrong_indices[0].tolist())
    # STUB: return None
    # END TODO
    # TODO: describe them in one sentence, as the docstring shows
    # HINT: .tolist() turns a one-element tensor into a Python number: got[first].tolist().
    return (f"{wrong_indices.shape[0]} of {wrong.numel()} elements are wrong; the first, at index "
            f"{first}, is {got[first].tolist():.6g} where {want[first].tolist():.6g} was expected")
    # END TODO


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
