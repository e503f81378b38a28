"""Layer normalization over the last dimension, one Triton program per row.

For each row x of length N:   mean = sum(x) / N
                              var  = sum((x - mean)^2) / N          (biased, as PyTorch does)
                              rstd = 1 / sqrt(var + eps)
                              y    = (x - mean) * rstd * weight + bias
The kernel keeps the whole row in registers, so it reads x from memory once and writes y once,
and it saves mean and rstd per row: a backward pass needs them and should not recompute them.

The statistics are computed in float32 whatever the input dtype, in two passes over the row that
is already on chip: first the mean, then the variance of the *centred* values. The one-pass
formula E[x^2] - mean^2 subtracts two large, nearly equal numbers when the mean is large
compared with the spread, and loses most of its digits. Both passes work on the row shifted by
its first element, x - x[0], for the same reason: see the comment in the kernel.

Check your work:  make check M=missing-elements/04-layer-norm
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# A program keeps its whole row in registers, as float32 whatever x's dtype. Up to 32768 values
# fit (32 warps, 32 values per thread); up to 65536 the compiler spills some to slower local
# memory, still correct. Longer rows need a loop over chunks of the row (the optimization track).
MAX_COLUMNS = 65536


@triton.jit
def layer_norm_kernel(x_ptr, y_ptr, weight_ptr, bias_ptr, mean_ptr, rstd_ptr,
                      x_row_stride, y_row_stride, N, eps, BLOCK_N: tl.constexpr):
    # TODO 1: find which row this program normalizes
    #   Hint: the grid has one program per row, along axis 0.
    row = ...
    # 64-bit from here on: row * row stride overflows 32 bits once x holds 2^31 elements.
    row = row.to(tl.int64)
    # TODO 2: point at the first element of this row in x and in y
    #   Hint: rows are x_row_stride elements apart in x (y_row_stride in y), which need not be N.
    x_row_ptr = ...
    y_row_ptr = ...
    # TODO 3: compute the column index of every lane of the block
    #   Hint: one block spans the whole row: BLOCK_N lanes, numbered from 0.
    col_offsets = ...
    # TODO 4: build the mask of the lanes that hold a real column
    #   Hint: BLOCK_N is N rounded up to a power of two; the lanes past N must not load or store.
    mask = ...

    # Statistics in float32 even for fp16/bf16 input: a sum of thousands of fp16 values would
    # round away most of the small terms.
    # TODO 5: load the row and convert it to float32
    #   Hint: give masked lanes a defined value with `other=` (0.0): Triton leaves them undefined otherwise.
    #   Hint: a block of values converts with `.to(tl.float32)`.
    x = ...
    # Shift by the row's first element before summing. An unshifted sum(x) / N is rounded on the
    # grid of the row's magnitude: a constant row of 12345.6 gets a mean an ulp (1e-3) off, and
    # rstd ~ 1/sqrt(eps) ~ 316 turns x - mean into y ~ 0.3 instead of 0. x - x0 is exact for any
    # x within a factor of two of x0 (0 for a constant row), so the sums see only the spread. x0
    # sits in the cache line just loaded: the extra load costs no memory traffic.
    # TODO 6: shift the row by its first element, with the masked lanes forced to zero
    #   Hint: x0 is the row's first element in float32: a scalar tl.load at x_row_ptr (N >= 1, no mask).
    #   Hint: after subtracting x0 the masked lanes hold -x0; tl.where(mask, a, 0.0) puts them back to 0.
    x0 = ...
    x_shifted = ...
    # TODO 7: compute the mean of the shifted row, then the mean of the row
    #   Hint: tl.sum reduces a block to a scalar; divide by the number of real columns, not BLOCK_N.
    #   Hint: shifting every value by x0 shifts the mean by x0: add it back for the mean you save.
    shifted_mean = ...
    mean = ...
    # Pass two: the variance of the centred values. Centre the shifted row: x - mean would subtract
    # two large numbers and bring back the rounding of mean; x_shifted - shifted_mean does not.
    # The masked lanes become -shifted_mean and must be set back to 0 before squaring.
    # TODO 8: centre the row, with the masked lanes forced to zero
    #   Hint: x - mean equals x_shifted - shifted_mean, computed from small numbers; then tl.where again.
    x_centred = ...
    # TODO 9: compute the (biased) variance of the row
    #   Hint: the mean of the squared centred values; PyTorch's layer_norm divides by N, not N - 1.
    var = ...
    # TODO 10: compute the reciprocal standard deviation
    #   Hint: eps keeps it finite when the variance is 0 (a constant row, or N == 1).
    rstd = ...
    # TODO 11: normalize the centred row
    #   Hint: multiplying by rstd is cheaper than dividing by the standard deviation.
    x_hat = ...

    # TODO 12: load the weight and the bias (one value per column) in float32
    #   Hint: they are vectors of length N shared by every row: same columns, same mask, no row offset.
    weight = ...
    bias = ...
    # TODO 13: apply the affine transform
    #   Hint: scale each column by its weight, then shift it by its bias.
    y = ...
    # TODO 14: store the row of y in y's dtype
    #   Hint: y_ptr.dtype.element_ty is the element type y holds; convert with .to(...) and mask the store.
    # TODO 15: save this row's mean and rstd for the backward pass
    #   Hint: one float32 value per row in each: the row number is the offset, and a scalar needs no mask.


def _check_inputs(x, weight, bias):
    check_tensors(("x", x))
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}; layer_norm normalizes over the last "
                         "dimension, which must have at least one element.")
    n_cols = x.shape[-1]
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        check_tensors(("x", x), (name, param))
        if tuple(param.shape) != (n_cols,):
            raise ValueError(f"{name} must have shape ({n_cols},), one value per element of x's "
                             f"last dimension, got {tuple(param.shape)}.")
    if n_cols > MAX_COLUMNS:
        raise ValueError(f"x has {n_cols} elements in its last dimension, but this kernel keeps a "
                         f"whole row in one block and supports at most {MAX_COLUMNS}. Use "
                         "torch.nn.functional.layer_norm for longer rows.")


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5):
    """Normalize x over its last dimension: returns (y, mean, rstd).

    y has x's shape and dtype; mean and rstd are float32 of shape x.shape[:-1], the statistics a
    backward pass needs. weight and bias have shape (N,) and x's dtype; None means no scaling
    (all ones) and no shift (all zeros), as in torch.nn.functional.layer_norm.
    """
    _check_inputs(x, weight, bias)
    n_cols = x.shape[-1]
    # Leading dimensions become rows. reshape copies only when it must; the kernel then needs
    # unit steps along a row, but rows may be any distance apart (it takes the row stride).
    x_rows = x.reshape(-1, n_cols)
    if x_rows.stride(-1) != 1:
        x_rows = x_rows.contiguous()
    n_rows = x_rows.shape[0]
    # None means identity; a vector of N ones or zeros costs nothing next to an M x N tensor
    # and keeps a single kernel.
    if weight is None:
        weight = torch.ones(n_cols, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = torch.zeros(n_cols, dtype=x.dtype, device=x.device)
    weight, bias = weight.contiguous(), bias.contiguous()

    # TODO 16: allocate y, one row per row of x_rows, in x's dtype
    #   Hint: its values are all overwritten by the kernel, so it needs no initial values.
    y = ...
    # TODO 17: allocate mean and rstd: one float32 value per row
    #   Hint: the statistics stay in float32 even when x is fp16 or bf16.
    mean = ...
    rstd = ...
    if n_rows == 0:
        return y.view(x.shape), mean.view(x.shape[:-1]), rstd.view(x.shape[:-1])

    # TODO 18: choose the block: the smallest power of two that holds a whole row
    #   Hint: tl.arange needs a power-of-two size; triton has a helper that rounds up to one.
    BLOCK_N = ...
    # TODO 19: choose num_warps: more warps for longer rows
    #   Hint: aim at about 16 values of the row per thread (a warp has 32 threads), within 1 to 32 warps.
    num_warps = ...
    # TODO 20: choose the grid
    #   Hint: one program per row; the grid is a tuple.
    grid = ...
    # TODO 21: launch the kernel
    #   Hint: pass the tensors, both row strides (tensor.stride(0)), N, eps, then BLOCK_N and num_warps by keyword.
    return y.view(x.shape), mean.view(x.shape[:-1]), rstd.view(x.shape[:-1])


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
