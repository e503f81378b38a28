"""Row-wise softmax: out[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))).

The first kernel in the course that reduces: each program owns one whole row, loads it once into
registers, finds its maximum, exponentiates, sums, divides and stores, so every element crosses
memory exactly twice (one read, one write). Subtracting the row's maximum first is what keeps
exp() from overflowing; padding the unused lanes of the block with -inf is what keeps them out of
the maximum and the sum. Tensors of any rank work: the leading dimensions are flattened into rows.

Check your work:  make check M=missing-elements/03-softmax
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# The whole row lives in one block of registers, so the row length is capped. At 65536 columns
# and 32 warps each thread already holds 64 values; longer rows need a loop over chunks of the
# row (the online softmax of the optimization track), not a bigger block.
MAX_COLUMNS = 65536


@triton.jit
# TODO 1: make BLOCK_SIZE a compile-time constant
#   Hint: tl.arange needs a size that is known when the kernel is compiled.
def softmax_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK_SIZE):
    # TODO 2: find which row this program handles
    #   Hint: the grid launches one program per row, along axis 0.
    row = ...
    # TODO 3: point at the first element of this row in x
    #   Hint: rows need not be packed: step over whole rows with x's row stride, not with n_cols.
    #   Hint: program ids are 32-bit; widen the row index to 64 bits so huge tensors do not overflow.
    x_row_ptr = ...
    # TODO 4: compute the column index of every lane of the block
    #   Hint: the block starts at column 0 of the row and spans BLOCK_SIZE lanes.
    col_offsets = ...
    # TODO 5: build the mask of lanes that hold real columns
    #   Hint: BLOCK_SIZE is rounded up to a power of two, so it is usually longer than the row.
    mask = ...
    # TODO 6: load the row, padding the masked lanes so that they cannot change the result
    #   Hint: a padded lane must lose the max and add nothing to the sum: which value has exp() == 0?
    #   Hint: tl.load's `other=` gives masked lanes a value; then compute in float32 with .to().
    row_values = ...
    # TODO 7: subtract the row's maximum from every value
    #   Hint: subtracting the same c from every value changes no softmax; with c = max, the largest exponent is exp(0) = 1.
    #   Hint: tl.max(block, axis=0) reduces a 1-D block to one number.
    row_minus_max = ...
    # TODO 8: exponentiate
    #   Hint: element-wise, like any arithmetic on a block; padded lanes become exp(-inf) = 0.
    numerator = ...
    # TODO 9: add up the exponentials of the row
    #   Hint: the same kind of reduction as the maximum.
    denominator = ...
    # TODO 10: normalise so that the row sums to one
    #   Hint: a block divided by a scalar divides every lane.
    softmax_values = ...
    # TODO 11: point at the first element of this row in the output
    #   Hint: the output has its own row stride; do not assume it equals x's.
    out_row_ptr = ...
    # TODO 12: store the row in the output's dtype
    #   Hint: convert the float32 values to the element type the output pointer points to.
    #   Hint: only the real columns may be written.


def warps_for(block_size: int) -> int:
    """How many warps (groups of 32 threads) share one row of block_size lanes."""
    # TODO 13: choose num_warps from the block size
    #   Hint: too few warps and each thread holds too many values (registers spill to memory);
    #   Hint: too many and short rows leave threads idle. Grow it with the block, 4 up to 32.
    num_warps = ...
    return num_warps


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of x (any rank >= 1); same shape and dtype as x."""
    check_tensors(("x", x))
    if x.dim() == 0:
        raise ValueError("x is a 0-dimensional tensor; softmax needs at least one dimension to "
                         "normalise over. Pass x.reshape(1) for a single number.")
    n_cols = x.shape[-1]
    if n_cols > MAX_COLUMNS:
        raise ValueError(f"x has {n_cols} columns in its last dimension, but this kernel keeps a "
                         f"whole row in one block and supports at most {MAX_COLUMNS}. Use "
                         "torch.softmax for longer rows (or a looped kernel, see the "
                         "optimization track).")
    if x.numel() == 0:
        return torch.empty_like(x)
    # The kernel walks each row with unit steps, so the last dimension must be contiguous. The
    # rows themselves may sit anywhere: their distance is passed as a stride below.
    if x.stride(-1) != 1:
        x = x.contiguous()
    # TODO 14: view x as a 2-D tensor of rows: all leading dimensions flattened into one
    #   Hint: keep the last dimension and let PyTorch work out how many rows there are.
    #   Hint: reshape returns a view (no copy) whenever the leading dimensions can be merged.
    x_rows = ...
    n_rows = x_rows.shape[0]
    # TODO 15: allocate the output as a packed (contiguous) tensor of rows
    #   Hint: one row per row of x_rows, with x's dtype and device; the kernel overwrites it all.
    out_rows = ...
    # TODO 16: choose the block size: the smallest power of two that holds a whole row
    #   Hint: tl.arange only takes powers of two; triton has a helper that rounds up to one.
    block_size = ...
    # TODO 17: choose the grid: how many programs to launch
    #   Hint: one program per row; the grid is a tuple.
    grid = ...
    # TODO 18: launch the kernel
    #   Hint: kernel[grid](arguments...) in the kernel's parameter order; tensors become pointers.
    #   Hint: a row stride is the 2-D view's stride along dim 0, one for x and one for the output.
    #   Hint: BLOCK_SIZE and num_warps (ask warps_for) go in as keyword arguments.
    return out_rows.view(x.shape)


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
