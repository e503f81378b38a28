"""On-chip reuse and reductions: a softmax that reads each row once, and the sum of a long vector
shared out over the whole GPU.

A memory-bound kernel is as fast as the bytes it moves. The starting softmax makes three trips
through memory, one kernel per pass (the row maximum, the sum of exponentials, the output), so
it reads x three times. A row that fits in one block can stay on chip between the passes: one
read, one write. A row too long for one block can still be done in two reads with the online
softmax, which keeps a running maximum and rescales the running sum whenever the maximum grows.

The starting vector sum is right but runs as a single program, so on a GPU one multiprocessor
does all the work while a hundred wait. A two-stage reduction lets many programs each sum a
chunk (``tl.sum`` adds a block as a tree, in log2(BLOCK) steps), then one small program adds the
partial sums: every multiprocessor reads, and the result is the same from run to run.

Check your work:  make check M=optimization/03-shared-memory
    (on a CPU it prints the memory-traffic report; on a GPU, the speed against the reference)
    or, in this folder with the course's environment active:  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

ROW_BLOCK_LIMIT = 8192  # the longest row kept on chip in one block; longer rows use the online kernel
CHUNK = 4096  # elements per step of the online kernel and of the vector sum


# TODO 1: once softmax_row_kernel and softmax_online_kernel below work, delete these starting kernels
#   Hint: they are the three-pass softmax that the launcher starts with: each one reads x again.
@triton.jit
def row_max_kernel(x_ptr, max_ptr, n_cols, stride_xm, stride_xn, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    best = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        best = tl.maximum(best, x.to(tl.float32))
    tl.store(max_ptr + row, tl.max(best, axis=0))


@triton.jit
def row_sum_kernel(x_ptr, max_ptr, sum_ptr, n_cols, stride_xm, stride_xn, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    row_max = tl.load(max_ptr + row)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        total += tl.exp(x.to(tl.float32) - row_max)
    tl.store(sum_ptr + row, tl.sum(total, axis=0))


@triton.jit
def normalize_kernel(x_ptr, max_ptr, sum_ptr, y_ptr, n_cols, stride_xm, stride_xn, stride_ym, stride_yn,
                     BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    row_max, row_sum = tl.load(max_ptr + row), tl.load(sum_ptr + row)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < n_cols, other=-float("inf"))
        y = tl.exp(x.to(tl.float32) - row_max) / row_sum
        tl.store(y_ptr + row * stride_ym + cols * stride_yn, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_xm, stride_xn, stride_ym, stride_yn,
                       BLOCK: tl.constexpr):
    """One program per row; the whole row (n_cols <= BLOCK) is one block, loaded once."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # TODO 2: load the row once (padding with -inf), and compute its softmax from that one copy
    #   Hint: the three starting kernels each loaded the row; here it stays in registers, so the
    #   Hint: maximum (tl.max), the exponentials and their sum (tl.sum) all read the same block.
    #   Hint: work in float32, subtract the maximum before tl.exp, divide by the sum.
    y = ...
    tl.store(y_ptr + row * stride_ym + cols * stride_yn, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_xm, stride_xn, stride_ym, stride_yn,
                          BLOCK: tl.constexpr):
    """One program per row, for rows longer than one block: two reads instead of three."""
    row = tl.program_id(axis=0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    # Lane i keeps the running maximum and the running sum of exp(x - maximum) of the elements
    # it has seen; the lanes are combined once, after the loop.
    running_max = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    running_sum = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols * stride_xn, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        # TODO 3: fold this chunk into the running maximum and the running sum, in one read
        #   Hint: when the maximum grows from m to m', every term already in the sum was computed
        #   Hint: as exp(x - m): multiply the sum by exp(m - m') to make them exp(x - m').
        #   Hint: a lane that has seen only -inf has nothing to rescale: guard exp(-inf - -inf).
        running_max = ...
        running_sum = ...
    # TODO 4: combine the lanes' running maxima and sums into the row's maximum and sum
    #   Hint: rescale each lane's sum to the row's maximum before adding them up.
    row_max = ...
    row_sum = ...
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols * stride_xn, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(y_row + cols * stride_yn, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor (any strides), in x's dtype."""
    check_tensors(("x", x), ndim=2)
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    strides = (x.stride(0), x.stride(1), y.stride(0), y.stride(1))
    # TODO 5: launch the one-pass kernel for rows that fit in one block, the online kernel for longer ones
    #   Hint: a row fits when triton.next_power_of_2(N) <= ROW_BLOCK_LIMIT; give it a block that size.
    #   Hint: longer rows go through softmax_online_kernel in chunks of CHUNK. One program per row.
    #   Hint: wide blocks need more warps: 16 for 8192 elements, 8 from 2048, else 4.
    # The starting launcher: three kernels, three reads of x.
    row_max = torch.empty(M, dtype=torch.float32, device=x.device)
    row_sum = torch.empty(M, dtype=torch.float32, device=x.device)
    row_max_kernel[(M,)](x, row_max, N, x.stride(0), x.stride(1), BLOCK=CHUNK)
    row_sum_kernel[(M,)](x, row_max, row_sum, N, x.stride(0), x.stride(1), BLOCK=CHUNK)
    normalize_kernel[(M,)](x, row_max, row_sum, y, N, *strides, BLOCK=CHUNK)
    return y


@triton.jit
def partial_sums_kernel(x_ptr, partial_ptr, n, stride, BLOCK: tl.constexpr):
    """Stage 1: program p adds up elements [p * BLOCK, (p + 1) * BLOCK) into partial_ptr[p]."""
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets * stride, mask=offsets < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + tl.program_id(axis=0), tl.sum(values, axis=0))


@triton.jit
def total_kernel(values_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    """One program adds up n values, BLOCK at a time, and writes the total in out's dtype."""
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        acc += tl.load(values_ptr + offsets * stride, mask=offsets < n, other=0.0).to(tl.float32)
    tl.store(out_ptr, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def vector_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of a 1-D tensor (any stride) as a 0-dimensional tensor of x's dtype, accumulated
    in float32."""
    check_tensors(("x", x), ndim=1)
    out = torch.empty((), dtype=x.dtype, device=x.device)
    n = x.numel()
    # TODO 6: split the sum in two stages: many programs each add up one CHUNK, then one adds the partial sums
    #   Hint: stage 1 is partial_sums_kernel on triton.cdiv(n, CHUNK) programs, writing float32 partial
    #   Hint: sums; stage 2 is total_kernel on the partials (stride 1), one program.
    #   Hint: an empty x still needs a launch of stage 2: the sum of nothing is 0.
    # The starting launch: one program walks the whole vector.
    total_kernel[(1,)](x, out, n, x.stride(0), BLOCK=CHUNK)
    return out


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
