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
    # TODO: find which row this program normalizes
    # HINT: the grid has one program per row, along axis 0.
    row = tl.program_id(axis=0)
    # STUB: row = ...
    # END TODO
    # 64-bit from here on: row * row stride overflows 32 bits once x holds 2^31 elements.
    row = row.to(tl.int64)
    # TODO: point at the first element of this row in x and in y
    # HINT: rows are x_row_stride elements apart in x (y_row_stride in y), which need not be N.
    x_row_ptr = x_ptr + row * x_row_stride
    y_row_ptr = y_ptr + row * y_row_stride
    # STUB: x_row_ptr = ...
    # STUB: y_row_ptr = ...
    # END TODO
    # TODO: compute the column index of every lane of the block
    # HINT: one block spans the whole row: BLOCK_N lanes, numbered from 0.
    col_offsets = tl.arange(0, BLOCK_N)
    # STUB: col_offsets = ...
    # END TODO
    # TODO: build the mask of the lanes that hold a real column
    # HINT: BLOCK_N is N rounded up to a power of two; the lanes past N must not load or store.
    mask = col_offsets < N
    # STUB: mask = ...
    # END TODO

    # Statistics in float32 even for fp16/bf16 input: a sum of thousands of fp16 values would
    # round away most of the small terms.
    # TODO: load the row and convert it to float32
    # HINT: give masked lanes a defined value with `other=` (0.0): Triton leaves them undefined otherwise.
    # HINT: a block of values converts with `.to(tl.float32)`.
    x = tl.load(x_row_ptr + col_offsets, mask=mask, other=0.0).to(tl.float32)
    # STUB: x = ...
    # END TODO
    # Shift by the row's first element before summing. An unshifted sum(x) / N is rounded on the
    # grid of the row's magnitude: a constant row of 12345.6 gets a mean an ulp (1e-3) off, and
    # rstd ~ 1/sqrt(eps) ~ 316 turns x - mean into y ~ 0.3 instead of 0. x - x0 is exact for any
    # x within a factor of two of x0 (0 for a constant row), so the sums see only the spread. x0
    # sits in the cache line just loaded: the extra load costs no memory traffic.
    # TODO: shift the row by its first element, with the masked lanes forced to zero
    # HINT: x0 is the row's first element in float32: a scalar tl.load at x_row_ptr (N >= 1, no mask).
    # HINT: after subtracting x0 the masked lanes hold -x0; tl.where(mask, a, 0.0) puts them back to 0.
    x0 = tl.load(x_row_ptr).to(tl.float32)
    x_shifted = tl.where(mask, x - x0, 0.0)
    # STUB: x0 = ...
    # STUB: x_shifted = ...
    # END TODO
    # TODO: compute the mean of the shifted row, then the mean of the row
    # HINT: tl.sum reduces a block to a scalar; divide by the number of real columns, not BLOCK_N.
    # HINT: shifting every value by x0 shifts the mean by x0: add it back for the mean you save.
    shifted_mean = tl.sum(x_shifted, axis=0) / N
    mean = x0 + shifted_mean
    # STUB: shifted_mean = ...
    # STUB: mean = ...
    # END TODO
    # Pass two: the variance of the centred values. Centre the shifted row: x - mean would subtract
    # two large numbers and bring back the rounding of mean; x_shifted - shifted_mean does not.
    # The masked lanes become -shifted_mean and must be set back to 0 before squaring.
    # TODO: centre the row, with the masked lanes forced to zero
    # HINT: x - mean equals x_shifted - shifted_mean, computed from small numbers; then tl.where again.
    x_centred = tl.where(mask, x_shifted - shifted_mean, 0.0)
    # STUB: x_centred = ...
    # END TODO
    # TODO: compute the (biased) variance of the row
    # HINT: the mean of the squared centred values; PyTorch's layer_norm divides by N, not N - 1.
    var = tl.sum(x_centred * x_centred, axis=0) / N
    # STUB: var = ...
    # END TODO
    # TODO: compute the reciprocal standard deviation
    # HINT: eps keeps it finite when the variance is 0 (a constant row, or N == 1).
    rstd = 1.0 / tl.sqrt(var + eps)
    # STUB: rstd = ...
    # END TODO
    # TODO: normalize the centred row
    # HINT: multiplying by rstd is cheaper than dividing by the standard deviation.
    x_hat = x_centred * rstd
    # STUB: x_hat = ...
    # END TODO

    # TODO: load the weight and the bias (one value per column) in float32
    # HINT: they are vectors of length N shared by every row: same columns, same mask, no row offset.
    weight = tl.load(weight_ptr + col_offsets, mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + col_offsets, mask=mask).to(tl.float32)
    # STUB: weight = ...
    # STUB: bias = ...
    # END TODO
    # TODO: apply the affine transform
    # HINT: scale each column by its weight, then shift it by its bias.
    y = x_hat * weight + bias
    # STUB: y = ...
    # END TODO
    # TODO: store the row of y in y's dtype
    # HINT: y_ptr.dtype.element_ty is the element type y holds; convert with .to(...) and mask the store.
    tl.store(y_row_ptr + col_offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
    # END TODO
    # TODO: save this row's mean and rstd for the backward pass
    # HINT: one float32 value per row in each: the row number is the offset, and a scalar needs no mask.
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    # END TODO


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

    # TODO: allocate y, one row per row of x_rows, in x's dtype
    # HINT: its values are all overwritten by the kernel, so it needs no initial values.
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    # STUB: y = ...
    # END TODO
    # TODO: allocate mean and rstd: one float32 value per row
    # HINT: the statistics stay in float32 even when x is fp16 or bf16.
    mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    # STUB: mean = ...
    # STUB: rstd = ...
    # END TODO
    if n_rows == 0:
        return y.view(x.shape), mean.view(x.shape[:-1]), rstd.view(x.shape[:-1])

    # TODO: choose the block: the smallest power of two that holds a whole row
    # HINT: tl.arange needs a power-of-two size; triton has a helper that rounds up to one.
    BLOCK_N = triton.next_power_of_2(n_cols)
    # STUB: BLOCK_N = ...
    # END TODO
    # TODO: choose num_warps: more warps for longer rows
    # HINT: aim at about 16 values of the row per thread (a warp has 32 threads), within 1 to 32 warps.
    num_warps = min(max(BLOCK_N // 512, 1), 32)
    # STUB: num_warps = ...
    # END TODO
    # TODO: choose the grid
    # HINT: one program per row; the grid is a tuple.
    grid = (n_rows,)
    # STUB: grid = ...
    # END TODO
    # TODO: launch the kernel
    # HINT: pass the tensors, both row strides (tensor.stride(0)), N, eps, then BLOCK_N and num_warps by keyword.
    layer_norm_kernel[grid](x_rows, y, weight, bias, mean, rstd,
                            x_rows.stride(0), y.stride(0), n_cols, eps,
                            BLOCK_N=BLOCK_N, num_warps=num_warps)
    # END TODO
    return y.view(x.shape), mean.view(x.shape[:-1]), rstd.view(x.shape[:-1])


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
