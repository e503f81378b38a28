"""Training kernels: what a training step runs besides its matrix products, in three parts, each an
exercise for one sitting (the README has a section for each).

Part 1, the backward passes: the backward kernels of normalization, gated activations, ReLU and
dropout, each joined to its forward in a torch.autograd.Function so that loss.backward() runs
Triton kernels both ways.

    rms_norm(x, weight, eps)          y = x * rstd * weight                  saves rstd per row
    layer_norm(x, weight, bias, eps)  y = (x - mean) * rstd * weight + bias  saves mean and rstd
    swiglu(gate, up)                  y = silu(gate) * up                    saves gate and up
    silu_and_mul(x)                   swiglu of the two halves of x's last dimension
    relu(x)                           y = max(x, 0)                          saves y
    dropout(x, p, seed)               y = keep * x / (1 - p)                 saves the seed only
    dropout_with_mask(x, p, seed)     the same, returns (y, mask)            saves the mask

Part 2, the optimizer step: adamw and sgd update lists of tensors in place as torch.optim.AdamW
and torch.optim.SGD do, one launch per parameter dtype; unscale_grads does what
torch.amp.GradScaler.unscale_ does before the step. training_loop.py, beside this file, trains a
small model with them in mixed precision.

Part 3, the selective scan: Mamba's selective_scan, forward, and backward as a reverse scan.

All kernels compute in float32 (float64 for float64 inputs, so that torch.autograd.gradcheck can
compare them with finite differences) and store in the tensor's own dtype.

Check your work:  make check M=mastery/04-training-kernels              (every part)
                  make check M=mastery/04-training-kernels K=optimizer  (one part: backward, optimizer or scan)
    or, in this folder with the course's environment active:  python kernel.py
"""

import math

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# The Triton dtype of each torch dtype: parts 2 and 3 pass it to their kernels as a tl.constexpr.
_TL_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
              torch.float64: tl.float64}


# =================================================================================================
# PART 1: the backward passes
#
# Each op decides what its forward saves for the backward (the statistics of a row, the inputs, the
# output, or only a seed) and recomputes the rest: in a memory-bound op every extra tensor written
# and read back costs as much as the work itself. The norms' weight gradient is a sum over all
# rows: rather than write an M x N tensor of products and sum it, each backward program handles a
# block of rows, keeps a running partial sum of its rows in registers, and writes one partial row;
# a second, tiny kernel adds the partial rows up.
#
# Check this part alone:  make check M=mastery/04-training-kernels K=backward
# =================================================================================================

# A norm program keeps a whole row in registers (the backward: x, dy, weight and the partial sums
# of its rows). Up to 65536 columns compile and run; past about 8192 the compiler spills some of
# them to local memory, still correct. Longer rows need a loop over chunks of the row.
MAX_COLUMNS = 65536
# The dtypes every function takes: the three training dtypes, and float64 for gradcheck.
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
ELEMENTWISE_BLOCK = 1024  # elements per program of the element-wise kernels


def compute_dtype(tensor: torch.Tensor):
    """The dtype kernels compute in for ``tensor``: float64 stays float64, the rest is float32."""
    return tl.float64 if tensor.dtype == torch.float64 else tl.float32


def as_rows(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a 2-D (rows, last dimension) tensor whose rows are contiguous. reshape copies
    only when it must; rows may then be any distance apart (the kernels take the row stride)."""
    rows = tensor.reshape(-1, tensor.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


# Host arithmetic for the launches of the norms, whose steps the host's time can outlast: Triton's
# triton.cdiv and triton.next_power_of_2 are constexpr functions that unwrap their arguments on
# every call, about 2 us each from Python on a CPU (0.01-0.03 us for these), five times a step.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0


def row_block(n_cols: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) for a program that holds a whole row: about 8 values per thread."""
    block_n = next_power_of_2(n_cols)
    return block_n, min(max(block_n // 256, 1), 16)


def check_norm_inputs(x, params, eps):
    check_tensors(("x", x), dtypes=DTYPES)
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}; the norm runs over the last dimension, which "
                         "must have at least one element.")
    n_cols = x.shape[-1]
    for name, param in params:
        check_tensors(("x", x), (name, param), dtypes=DTYPES)
        if tuple(param.shape) != (n_cols,):
            raise ValueError(f"{name} must have shape ({n_cols},), one value per element of x's last "
                             f"dimension, got {tuple(param.shape)}.")
    if n_cols > MAX_COLUMNS:
        raise ValueError(f"x has {n_cols} elements in its last dimension, but these kernels keep a whole "
                         f"row in one block and support at most {MAX_COLUMNS}.")
    # NaN fails every comparison, so it is refused too; eps = inf would make every rstd 0: y = 0 (or
    # the bias) without a word
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 <= eps < math.inf:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}.")


# ----------------------------------------------------------------------------------------------
# The second stage of every weight gradient: add up the partial rows
# ----------------------------------------------------------------------------------------------

@triton.jit
def norm_partial_sum_kernel(partial_ptr, out_ptr, n_partials, n_cols,
                            BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[c] = sum over p of partial[p, c]: program i adds up columns [i * BLOCK_N, (i+1) * BLOCK_N)
    of the (n_partials, n_cols) partial sums, BLOCK_P rows at a time."""
    cols = tl.program_id(axis=0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    total = tl.zeros((BLOCK_N,), dtype=partial_ptr.dtype.element_ty)
    for start in range(0, n_partials, BLOCK_P):
        rows = start + tl.arange(0, BLOCK_P)
        mask = (rows[:, None] < n_partials) & col_mask[None, :]
        block = tl.load(partial_ptr + rows[:, None].to(tl.int64) * n_cols + cols[None, :], mask=mask, other=0.0)
        total += tl.sum(block, axis=0)
    tl.store(out_ptr + cols, total.to(out_ptr.dtype.element_ty), mask=col_mask)


def sum_partials(partial: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The column sums of ``partial`` (n_partials, N), in ``like``'s dtype. It launches even when
    there are no partial rows (x had no rows): the sum of nothing is 0."""
    n_partials, n_cols = partial.shape
    out = torch.empty(n_cols, dtype=like.dtype, device=like.device)
    block_n = 64
    norm_partial_sum_kernel[(cdiv(n_cols, block_n),)](partial, out, n_partials, n_cols,
                                                       BLOCK_P=32, BLOCK_N=block_n)
    return out


_MULTIPROCESSORS = {}


def multiprocessors(where: torch.device) -> int:
    """The GPU's multiprocessor count, asked once per device: the backward passes run on the
    autograd engine's thread next to the GPU's work, and every microsecond of host time there
    shows in a step that takes half a millisecond."""
    if where not in _MULTIPROCESSORS:
        _MULTIPROCESSORS[where] = torch.cuda.get_device_properties(where).multi_processor_count
    return _MULTIPROCESSORS[where]


def backward_programs(n_rows: int, n_cols: int, where: torch.device) -> tuple[int, int]:
    """(programs, rows_per_program) for a norm's backward. Every program writes one partial row of
    the weight gradient, so the programs should be few (the partial rows stay small) but enough to
    keep every multiprocessor busy: a few per multiprocessor, more for short rows (measured on an
    H100: 2 for rows of 4096 and longer, 8 for rows of 1024). Without a GPU, four programs."""
    if where.type == "cuda":
        per_multiprocessor = min(max(8192 // next_power_of_2(n_cols), 2), 8)
        wanted = per_multiprocessor * multiprocessors(where)
    else:
        wanted = 4
    rows_per_program = cdiv(n_rows, max(min(wanted, n_rows), 1))
    return cdiv(n_rows, max(rows_per_program, 1)), max(rows_per_program, 1)


# ----------------------------------------------------------------------------------------------
# RMSNorm
# ----------------------------------------------------------------------------------------------

@triton.jit
def rms_norm_forward_kernel(x_ptr, weight_ptr, y_ptr, rstd_ptr, x_row_stride, y_row_stride, n_cols, eps,
                            BLOCK_N: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """One program per row: rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * weight."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * y_row_stride + cols, (x * rstd * weight).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def rms_norm_backward_kernel(dy_ptr, x_ptr, weight_ptr, rstd_ptr, dx_ptr, partial_dw_ptr,
                             dy_row_stride, x_row_stride, dx_row_stride, n_rows, n_cols, rows_per_program,
                             BLOCK_N: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """Program p handles rows [p * rows_per_program, (p + 1) * rows_per_program): it writes their dx,
    and one row of partial_dw, the sum over those rows of dy * x_hat."""
    program = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    # The running sum of this program's rows, in registers: no M x N tensor of products.
    partial_dw = tl.zeros((BLOCK_N,), dtype=COMPUTE_DTYPE)
    # 64-bit rows: row * row stride passes 2^31 in large tensors
    row_start = program.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    for row in range(row_start, row_end):
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        rstd = tl.load(rstd_ptr + row)
        # TODO: recompute the normalized row and the gradient that reaches it
        # HINT: the forward saved rstd, so x_hat = x * rstd costs one multiply: no second reduction.
        # HINT: y = x_hat * weight, so the gradient with respect to x_hat is weight * dy.
        x_hat = x * rstd
        grad_x_hat = weight * dy
        # STUB: x_hat = ...
        # STUB: grad_x_hat = ...
        # END TODO
        # TODO: compute dx for this row and store it in dx's dtype
        # HINT: rstd depends on every element of the row, so dx is not just grad_x_hat * rstd: the
        # HINT: chain rule through mean(x^2) gives dx = rstd * (grad_x_hat - x_hat * mean(grad_x_hat * x_hat)).
        # HINT: the mean is over the n_cols real columns: the masked lanes hold zeros, so tl.sum / n_cols.
        correction = tl.sum(grad_x_hat * x_hat, axis=0) / n_cols
        dx = (grad_x_hat - x_hat * correction) * rstd
        tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        # END TODO
        # TODO: add this row's contribution to the weight gradient
        # HINT: dweight is the sum over rows of dy * x_hat; this program adds up its own rows only.
        partial_dw += dy * x_hat
        # END TODO
    # TODO: write this program's partial sum as row `program` of partial_dw
    # HINT: partial_dw_ptr is a contiguous (programs, n_cols) tensor; mask the padding lanes.
    tl.store(partial_dw_ptr + program * n_cols + cols, partial_dw, mask=mask)
    # END TODO


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        x_rows = as_rows(x)
        n_rows, n_cols = x_rows.shape
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        rstd = torch.empty(n_rows, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32,
                           device=x.device)
        weight = weight.contiguous()
        if n_rows:
            block_n, num_warps = row_block(n_cols)
            rms_norm_forward_kernel[(n_rows,)](x_rows, weight, y, rstd, x_rows.stride(0), y.stride(0),
                                               n_cols, eps, BLOCK_N=block_n, COMPUTE_DTYPE=compute_dtype(x),
                                               num_warps=num_warps)
        ctx.save_for_backward(x_rows, weight, rstd)
        ctx.x_shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x_rows, weight, rstd = ctx.saved_tensors
        n_rows, n_cols = x_rows.shape
        dy_rows = as_rows(dy)
        dx = torch.empty((n_rows, n_cols), dtype=x_rows.dtype, device=x_rows.device)
        programs, rows_per_program = backward_programs(n_rows, n_cols, x_rows.device)
        # TODO: allocate the partial sums of dweight: one row per program, in the compute dtype
        # HINT: the rstd saved by the forward already has the compute dtype (float32, or float64).
        partial_dw = torch.empty((programs, n_cols), dtype=rstd.dtype, device=x_rows.device)
        # STUB: partial_dw = ...
        # END TODO
        if n_rows:
            block_n, num_warps = row_block(n_cols)
            rms_norm_backward_kernel[(programs,)](
                dy_rows, x_rows, weight, rstd, dx, partial_dw,
                dy_rows.stride(0), x_rows.stride(0), dx.stride(0), n_rows, n_cols, rows_per_program,
                BLOCK_N=block_n, COMPUTE_DTYPE=compute_dtype(x_rows), num_warps=num_warps)
        # TODO: add up the partial rows into dweight, in weight's dtype
        # HINT: sum_partials runs the second, tiny kernel over the (programs, n_cols) partial sums.
        dweight = sum_partials(partial_dw, weight)
        # STUB: dweight = ...
        # END TODO
        return dx.view(ctx.x_shape), dweight, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMS normalization over the last dimension, differentiable with respect to x and weight:
    y = x / sqrt(mean(x^2) + eps) * weight. weight has shape (N,) and x's dtype."""
    check_norm_inputs(x, (("weight", weight),), eps)
    return RMSNormFunction.apply(x, weight, eps)


# ----------------------------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------------------------

@triton.jit
def layer_norm_forward_kernel(x_ptr, weight_ptr, bias_ptr, y_ptr, mean_ptr, rstd_ptr,
                              x_row_stride, y_row_stride, n_cols, eps,
                              BLOCK_N: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """One program per row, as in missing-elements/04-layer-norm: the row shifted by its first
    element (so that a constant row gives x - mean = 0 exactly), two passes on chip, and mean and
    rstd saved for the backward."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x_row_ptr = x_ptr + row * x_row_stride
    x = tl.load(x_row_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    x0 = tl.load(x_row_ptr).to(COMPUTE_DTYPE)
    x_shifted = tl.where(mask, x - x0, 0.0)
    shifted_mean = tl.sum(x_shifted, axis=0) / n_cols
    x_centred = tl.where(mask, x_shifted - shifted_mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(x_centred * x_centred, axis=0) / n_cols + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    bias = tl.load(bias_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    y = x_centred * rstd * weight + bias
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, x0 + shifted_mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layer_norm_backward_kernel(dy_ptr, x_ptr, weight_ptr, mean_ptr, rstd_ptr, dx_ptr, partial_ptr,
                               dy_row_stride, x_row_stride, dx_row_stride, n_rows, n_cols, rows_per_program,
                               BLOCK_N: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """As rms_norm_backward_kernel, with the mean: dx per row, and per program one partial row of
    dweight followed by one of dbias, in a (programs, 2 * n_cols) buffer, so that a single launch
    of the summing kernel adds up both."""
    program = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    partial_dw = tl.zeros((BLOCK_N,), dtype=COMPUTE_DTYPE)
    partial_db = tl.zeros((BLOCK_N,), dtype=COMPUTE_DTYPE)
    # 64-bit rows: row * row stride passes 2^31 in large tensors
    row_start = program.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    for row in range(row_start, row_end):
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        # TODO: recompute x_hat (zero in the masked lanes) and the gradient that reaches it
        # HINT: x_hat = (x - mean) * rstd from the saved statistics; the padding lanes would hold
        # HINT: -mean * rstd, so put them back to 0 with tl.where before any sum.
        x_hat = tl.where(mask, (x - mean) * rstd, 0.0)
        grad_x_hat = weight * dy
        # STUB: x_hat = ...
        # STUB: grad_x_hat = ...
        # END TODO
        # TODO: compute dx for this row and store it in dx's dtype
        # HINT: as in RMSNorm, plus one term: the mean was subtracted, so the mean of grad_x_hat
        # HINT: is subtracted too: dx = rstd * (grad_x_hat - mean(grad_x_hat) - x_hat * mean(grad_x_hat * x_hat)).
        mean_grad = tl.sum(grad_x_hat, axis=0) / n_cols
        mean_grad_x_hat = tl.sum(grad_x_hat * x_hat, axis=0) / n_cols
        dx = (grad_x_hat - mean_grad - x_hat * mean_grad_x_hat) * rstd
        tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        # END TODO
        # TODO: add this row's contributions to the weight and bias gradients
        # HINT: dweight sums dy * x_hat over the rows, dbias sums dy.
        partial_dw += dy * x_hat
        partial_db += dy
        # END TODO
    partial_row_ptr = partial_ptr + program * 2 * n_cols
    tl.store(partial_row_ptr + cols, partial_dw, mask=mask)
    tl.store(partial_row_ptr + n_cols + cols, partial_db, mask=mask)


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x_rows = as_rows(x)
        n_rows, n_cols = x_rows.shape
        stats_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        mean = torch.empty(n_rows, dtype=stats_dtype, device=x.device)
        rstd = torch.empty(n_rows, dtype=stats_dtype, device=x.device)
        weight, bias = weight.contiguous(), bias.contiguous()
        if n_rows:
            block_n, num_warps = row_block(n_cols)
            layer_norm_forward_kernel[(n_rows,)](x_rows, weight, bias, y, mean, rstd, x_rows.stride(0),
                                                 y.stride(0), n_cols, eps, BLOCK_N=block_n,
                                                 COMPUTE_DTYPE=compute_dtype(x), num_warps=num_warps)
        ctx.save_for_backward(x_rows, weight, mean, rstd)
        ctx.x_shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x_rows, weight, mean, rstd = ctx.saved_tensors
        n_rows, n_cols = x_rows.shape
        dy_rows = as_rows(dy)
        dx = torch.empty((n_rows, n_cols), dtype=x_rows.dtype, device=x_rows.device)
        programs, rows_per_program = backward_programs(n_rows, n_cols, x_rows.device)
        partial = torch.empty((programs, 2 * n_cols), dtype=rstd.dtype, device=x_rows.device)
        if n_rows:
            block_n, num_warps = row_block(n_cols)
            layer_norm_backward_kernel[(programs,)](
                dy_rows, x_rows, weight, mean, rstd, dx, partial,
                dy_rows.stride(0), x_rows.stride(0), dx.stride(0), n_rows, n_cols, rows_per_program,
                BLOCK_N=block_n, COMPUTE_DTYPE=compute_dtype(x_rows), num_warps=num_warps)
        dweight_dbias = sum_partials(partial, weight)
        return dx.view(ctx.x_shape), dweight_dbias[:n_cols], dweight_dbias[n_cols:], None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalization over the last dimension, differentiable with respect to x, weight and
    bias: y = (x - mean) / sqrt(var + eps) * weight + bias. weight and bias have shape (N,)."""
    check_norm_inputs(x, (("weight", weight), ("bias", bias)), eps)
    return LayerNormFunction.apply(x, weight, bias, eps)


# ----------------------------------------------------------------------------------------------
# SwiGLU: silu(gate) * up, and the same on the two halves of one tensor
# ----------------------------------------------------------------------------------------------

@triton.jit
def silu_mul(gate, up):
    """silu(gate) * up = gate * sigmoid(gate) * up, in the dtype of gate and up."""
    return gate / (1.0 + tl.exp(-gate)) * up


@triton.jit
def silu_mul_backward(gate, up, dy):
    """(dgate, dup) for y = silu(gate) * up, recomputing sigmoid(gate) from the saved gate."""
    # TODO: compute the gradients with respect to gate and up
    # HINT: nothing of the forward was saved but gate and up: recompute sigmoid(gate) = 1 / (1 + exp(-gate)).
    # HINT: dup = dy * silu(gate); d silu(g) / dg = sigmoid(g) * (1 + g * (1 - sigmoid(g))), times dy * up.
    sigmoid = 1.0 / (1.0 + tl.exp(-gate))
    dgate = dy * up * sigmoid * (1.0 + gate * (1.0 - sigmoid))
    dup = dy * gate * sigmoid
    # STUB: dgate = ...
    # STUB: dup = ...
    # END TODO
    return dgate, dup


@triton.jit
def swiglu_forward_kernel(gate_ptr, up_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    gate = tl.load(gate_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    up = tl.load(up_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    tl.store(y_ptr + offsets, silu_mul(gate, up).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_backward_kernel(dy_ptr, gate_ptr, up_ptr, dgate_ptr, dup_ptr, n_elements,
                           BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    gate = tl.load(gate_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    up = tl.load(up_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    dgate, dup = silu_mul_backward(gate, up, dy)
    tl.store(dgate_ptr + offsets, dgate.to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offsets, dup.to(dup_ptr.dtype.element_ty), mask=mask)


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        gate, up = gate.contiguous(), up.contiguous()
        y = torch.empty_like(gate)
        n = gate.numel()
        if n:
            swiglu_forward_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](
                gate, up, y, n, BLOCK=ELEMENTWISE_BLOCK, COMPUTE_DTYPE=compute_dtype(gate), num_warps=4)
        ctx.save_for_backward(gate, up)  # the inputs, not silu(gate): the backward recomputes it
        return y

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        dy = dy.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        n = gate.numel()
        if n:
            swiglu_backward_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](
                dy, gate, up, dgate, dup, n, BLOCK=ELEMENTWISE_BLOCK, COMPUTE_DTYPE=compute_dtype(gate),
                num_warps=4)
        return dgate, dup


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up element-wise, differentiable with respect to both (same shape and dtype)."""
    check_tensors(("gate", gate), ("up", up), dtypes=DTYPES)
    if gate.shape != up.shape:
        raise ValueError(f"gate has shape {tuple(gate.shape)} but up has {tuple(up.shape)}; swiglu "
                         "multiplies them element by element, so they must have one shape.")
    return SwiGLUFunction.apply(gate, up)


@triton.jit
def silu_and_mul_forward_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, half,
                                BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """Grid (rows, column blocks): gate is x[row, :half], up is x[row, half:]."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.program_id(axis=1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < half
    x_row_ptr = x_ptr + row * x_row_stride
    gate = tl.load(x_row_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    up = tl.load(x_row_ptr + half + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    tl.store(y_ptr + row * y_row_stride + cols, silu_mul(gate, up).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def silu_and_mul_backward_kernel(dy_ptr, x_ptr, dx_ptr, dy_row_stride, x_row_stride, dx_row_stride, half,
                                 BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """dx[row, :half] = dgate, dx[row, half:] = dup: one gradient tensor shaped like x."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.program_id(axis=1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < half
    x_row_ptr = x_ptr + row * x_row_stride
    dx_row_ptr = dx_ptr + row * dx_row_stride
    gate = tl.load(x_row_ptr + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    up = tl.load(x_row_ptr + half + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    dgate, dup = silu_mul_backward(gate, up, dy)
    tl.store(dx_row_ptr + cols, dgate.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dx_row_ptr + half + cols, dup.to(dx_ptr.dtype.element_ty), mask=mask)


def silu_and_mul_grid(n_rows: int, half: int) -> tuple[int, int]:
    # rows on axis 0, which may hold 2^31 - 1 programs (axis 1 holds 65535 on a GPU)
    return n_rows, triton.cdiv(half, ELEMENTWISE_BLOCK)


class SiluAndMulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x_rows = as_rows(x)
        n_rows, half = x_rows.shape[0], x_rows.shape[1] // 2
        y = torch.empty((n_rows, half), dtype=x.dtype, device=x.device)
        if y.numel():
            silu_and_mul_forward_kernel[silu_and_mul_grid(n_rows, half)](
                x_rows, y, x_rows.stride(0), y.stride(0), half, BLOCK=ELEMENTWISE_BLOCK,
                COMPUTE_DTYPE=compute_dtype(x), num_warps=4)
        ctx.save_for_backward(x_rows)
        ctx.x_shape = x.shape
        return y.view(*x.shape[:-1], half)

    @staticmethod
    def backward(ctx, dy):
        (x_rows,) = ctx.saved_tensors
        n_rows, half = x_rows.shape[0], x_rows.shape[1] // 2
        dy_rows = as_rows(dy)
        dx = torch.empty((n_rows, 2 * half), dtype=x_rows.dtype, device=x_rows.device)
        if dx.numel():
            silu_and_mul_backward_kernel[silu_and_mul_grid(n_rows, half)](
                dy_rows, x_rows, dx, dy_rows.stride(0), x_rows.stride(0), dx.stride(0), half,
                BLOCK=ELEMENTWISE_BLOCK, COMPUTE_DTYPE=compute_dtype(x_rows), num_warps=4)
        return dx.view(ctx.x_shape)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :H]) * x[..., H:] for x of last dimension 2H (one tensor from a fused gate and up
    projection), differentiable with respect to x. The result has last dimension H."""
    check_tensors(("x", x), dtypes=DTYPES)
    if x.dim() == 0 or x.shape[-1] == 0 or x.shape[-1] % 2:
        raise ValueError(f"x has shape {tuple(x.shape)}; silu_and_mul splits the last dimension into "
                         "two halves (gate, up), so it must have an even length of at least 2.")
    return SiluAndMulFunction.apply(x)


# ----------------------------------------------------------------------------------------------
# ReLU: the smallest complete example of a forward kernel, a backward kernel and their Function
# ----------------------------------------------------------------------------------------------

@triton.jit
def relu_forward_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    # x <= 0 (not x > 0) lets NaN through, as torch.relu does
    tl.store(y_ptr + offsets, tl.where(x <= 0, 0.0, x).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def relu_backward_kernel(dy_ptr, y_ptr, dx_ptr, n_elements, BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """dx = dy where the forward let x through (y > 0), else 0: the mask comes from the saved y."""
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    tl.store(dx_ptr + offsets, tl.where(y <= 0, 0.0, dy).to(dx_ptr.dtype.element_ty), mask=mask)


class ReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n:
            relu_forward_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](x, y, n, BLOCK=ELEMENTWISE_BLOCK,
                                                                  COMPUTE_DTYPE=compute_dtype(x))
        # y, not x: y > 0 exactly where x > 0, and y is what the next layer keeps alive anyway
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.empty_like(y)
        n = y.numel()
        if n:
            relu_backward_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](dy, y, dx, n, BLOCK=ELEMENTWISE_BLOCK,
                                                                       COMPUTE_DTYPE=compute_dtype(y))
        return dx


def relu(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) element-wise, differentiable (the gradient at 0 is 0, as in PyTorch)."""
    check_tensors(("x", x), dtypes=DTYPES)
    return ReLUFunction.apply(x)


# ----------------------------------------------------------------------------------------------
# Dropout: the mask from a seed, recomputed in the backward, or saved
# ----------------------------------------------------------------------------------------------

@triton.jit
def dropout_keep(seed, block_start, p, BLOCK: tl.constexpr):
    """The keep decisions of elements block_start .. block_start + BLOCK - 1 (block_start a multiple
    of 4): element e is kept when number e % 4 of Philox counter e // 4 is >= p. A pure function of
    (seed, element index), whichever program asks: the backward gets the very same mask again."""
    # One Philox call yields four independent uniform numbers: one call per four elements costs a
    # quarter of tl.rand's arithmetic, which would otherwise make dropout compute-bound on a GPU.
    counters = block_start // 4 + tl.arange(0, BLOCK // 4)
    # TODO: draw one uniform number per element and keep the element with probability 1 - p
    # HINT: tl.rand4x(seed, counters) returns four blocks r0..r3 of uniform numbers in [0, 1), the
    # HINT: same for the same (seed, counter). Element 4c + s takes number s of counter c: nest two
    # HINT: tl.join calls (r0 with r1, r2 with r3, then the two pairs) and reshape to (BLOCK,).
    # HINT: keep where the number is >= p: with p = 0 every element is kept (0.0 can be drawn).
    r0, r1, r2, r3 = tl.rand4x(seed, counters)
    uniform = tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (BLOCK,))
    return uniform >= p
    # STUB: return ...
    # END TODO


@triton.jit
def dropout_kernel(x_ptr, y_ptr, mask_ptr, n_elements, p, scale, seed,
                   BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr, WRITE_MASK: tl.constexpr):
    """y = x * scale where kept, else 0. With WRITE_MASK the mask is stored too (mask_ptr is not
    touched otherwise)."""
    block_start = tl.program_id(axis=0).to(tl.int64) * BLOCK
    offsets = block_start + tl.arange(0, BLOCK)
    in_bounds = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=in_bounds, other=0.0).to(COMPUTE_DTYPE)
    keep = dropout_keep(seed, block_start, p, BLOCK)
    tl.store(y_ptr + offsets, tl.where(keep, x * scale, 0.0).to(y_ptr.dtype.element_ty), mask=in_bounds)
    if WRITE_MASK:
        tl.store(mask_ptr + offsets, keep, mask=in_bounds)


@triton.jit
def dropout_masked_backward_kernel(dy_ptr, mask_ptr, dx_ptr, n_elements, scale,
                                   BLOCK: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """dx = dy * scale where the saved mask kept the element, else 0."""
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < n_elements
    keep = tl.load(mask_ptr + offsets, mask=in_bounds, other=0) != 0
    dy = tl.load(dy_ptr + offsets, mask=in_bounds, other=0.0).to(COMPUTE_DTYPE)
    tl.store(dx_ptr + offsets, tl.where(keep, dy * scale, 0.0).to(dx_ptr.dtype.element_ty), mask=in_bounds)


def dropout_scale(p: float) -> float:
    # kept elements are divided by 1 - p, so that the expectation of y is x; p = 1 keeps nothing
    return 0.0 if p == 1.0 else 1.0 / (1.0 - p)


def launch_dropout(x: torch.Tensor, p: float, seed: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """y = dropout of a contiguous x; writes the keep mask into ``mask`` when one is given."""
    y = torch.empty_like(x)
    n = x.numel()
    if n:
        dropout_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](
            x, y, y if mask is None else mask, n, p, dropout_scale(p), seed, BLOCK=ELEMENTWISE_BLOCK,
            COMPUTE_DTYPE=compute_dtype(x), WRITE_MASK=mask is not None)
    return y


class DropoutFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p, seed):
        ctx.p, ctx.seed = p, seed  # two numbers instead of a mask of x's size
        return launch_dropout(x.contiguous(), p, seed)

    @staticmethod
    def backward(ctx, dy):
        # TODO: compute dx from dy with the very mask the forward drew, without having saved it
        # HINT: y = keep * x * scale is linear in x, so dx = keep * dy * scale: the same kernel, on dy.
        # HINT: the same seed and the same element indices (dy contiguous, like x was) give the same mask.
        dx = launch_dropout(dy.contiguous(), ctx.p, ctx.seed)
        # STUB: dx = ...
        # END TODO
        return dx, None, None


class DropoutWithMaskFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p, seed):
        x = x.contiguous()
        mask = torch.empty(x.shape, dtype=torch.bool, device=x.device)
        y = launch_dropout(x, p, seed, mask)
        ctx.save_for_backward(mask)
        ctx.p = p
        ctx.mark_non_differentiable(mask)
        return y, mask

    @staticmethod
    def backward(ctx, dy, _dmask):
        (mask,) = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.empty_like(dy)
        n = dy.numel()
        if n:
            dropout_masked_backward_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](
                dy, mask, dx, n, dropout_scale(ctx.p), BLOCK=ELEMENTWISE_BLOCK, COMPUTE_DTYPE=compute_dtype(dy))
        return dx, None, None


def check_dropout_inputs(x, p, seed):
    check_tensors(("x", x), dtypes=DTYPES)
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ValueError(f"p is the probability of dropping an element: a number in [0, 1], got {p!r}.")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}; the same seed gives the "
                         "same mask.")


def dropout(x: torch.Tensor, p: float = 0.5, seed: int = 0) -> torch.Tensor:
    """Zero each element of x with probability p and scale the others by 1 / (1 - p); the mask is a
    function of (seed, element index), so the backward regenerates it and nothing is saved."""
    check_dropout_inputs(x, p, seed)
    return DropoutFunction.apply(x, float(p), seed)


def dropout_with_mask(x: torch.Tensor, p: float = 0.5, seed: int = 0):
    """dropout(x, p, seed) that also returns the mask (bool, True where kept) and saves it for the
    backward: one byte per element kept alive, instead of a recomputation."""
    check_dropout_inputs(x, p, seed)
    return DropoutWithMaskFunction.apply(x, float(p), seed)


# =================================================================================================
# PART 2: the optimizer step
#
# adamw(params, grads, exp_avgs, exp_avg_sqs, *, step, lr, beta1, beta2, eps, weight_decay)
# sgd(params, grads, momentum_buffers, *, lr, momentum, dampening, nesterov, weight_decay, step)
#     update lists of tensors in place, as torch.optim.AdamW and torch.optim.SGD do, in one launch
#     per parameter dtype over every tensor of the list.
# unscale_grads(grads, inv_scale) -> found_inf
#     what torch.amp.GradScaler.unscale_ does: multiply every gradient by inv_scale in place and
#     report (1.0) whether any of them holds inf or NaN.
# LoopLinear: a Triton matmul with its backward, for the training loop of training_loop.py.
#
# Check this part alone:  make check M=mastery/04-training-kernels K=optimizer
# =================================================================================================

# -------------------------------------------------------------------------------------------------
# One launch over a list of tensors
#
# A model's parameters are a list of tensors of very different sizes: a 4096 x 4096 weight next to
# a bias of 4096 values. One launch per tensor pays a launch (several microseconds) for every small
# tensor, which is why torch.optim.AdamW(fused=True) updates them all in one. The launcher cuts
# every tensor into chunks of MULTI_TENSOR_CHUNK elements and writes a table with one row per
# chunk: which tensor, which of its chunks. Program c reads row c, turns the tensor's address (an
# int64 in a second table) into a pointer, and updates that chunk:
#
#   tensors    p0: 40000 elements     p1: 3 elements     p2: 20000 elements    (chunk: 16384)
#   chunk_tensor   0      0      0      1      2      2
#   chunk_index    0      1      2      0      0      1          -> programs 0 1 2 3 4 5
#
# The table depends only on the tensors' addresses and sizes, which stay the same from one training
# step to the next, so it is built once and kept (a host-to-device copy per step would cost more
# than updating the small tensors).
# -------------------------------------------------------------------------------------------------

MULTI_TENSOR_BLOCK = 2048  # elements per iteration of a program's loop
MULTI_TENSOR_CHUNK = 16384  # elements per program: a multiple of the block
MULTI_TENSOR_WARPS = 8
_multi_tensor_tables: dict = {}


def _multi_tensor_table(tensor_lists):
    """The launch table of tensors updated together, one list per role (params, grads, ...), with
    the same sizes in every list: (addresses, numels, chunk_tensor, chunk_index, aligned).

    addresses[r][i] holds the address of tensor i of role r (one int64 tensor per role); program c
    updates chunk chunk_index[c] of tensor chunk_tensor[c]; aligned says that every address is a
    multiple of 16 bytes, which lets the compiler use 16-byte loads and stores."""
    first = tensor_lists[0]
    addresses = [[t.data_ptr() for t in tensors] for tensors in tensor_lists]
    numels = [t.numel() for t in first]
    key = (str(first[0].device), tuple(map(tuple, addresses)), tuple(numels))
    table = _multi_tensor_tables.get(key)
    if table is None:
        chunk_tensor, chunk_index = [], []
        for i, n in enumerate(numels):
            chunks = triton.cdiv(n, MULTI_TENSOR_CHUNK)
            chunk_tensor += [i] * chunks
            chunk_index += range(chunks)
        flat = [a for role in addresses for a in role] + numels + chunk_tensor + chunk_index
        packed = torch.tensor(flat, dtype=torch.int64).to(first[0].device)  # one copy to the GPU
        n_tensors, n_chunks = len(first), len(chunk_tensor)
        roles = [packed[r * n_tensors:(r + 1) * n_tensors] for r in range(len(tensor_lists))]
        rest = packed[len(tensor_lists) * n_tensors:]
        table = (roles, rest[:n_tensors], rest[n_tensors:n_tensors + n_chunks],
                 rest[n_tensors + n_chunks:], all(a % 16 == 0 for role in addresses for a in role))
        if len(_multi_tensor_tables) >= 64:
            _multi_tensor_tables.clear()
        _multi_tensor_tables[key] = table
    return table


def _by_dtype(*tensor_lists):
    """The lists split by the dtype of the first list's tensors, without empty tensors: each
    group is one launch (a kernel's pointers have one element type)."""
    groups: dict = {}
    for i, t in enumerate(tensor_lists[0]):
        if t.numel():
            groups.setdefault(t.dtype, []).append(i)
    return [(dtype, [[tensors[i] for i in indices] for tensors in tensor_lists])
            for dtype, indices in groups.items()]


def _check_tensor_lists(api, named_lists, state_names=()):
    """Validate lists of tensors that an optimizer updates together: one length, every tensor a
    float tensor on the kernels' device, contiguous (an update in place cannot work on a copy),
    with the shape of its parameter; states (``state_names``) float32, gradients in the
    parameter's dtype. A model has hundreds of parameters and this runs at every step, so a quick
    pass over plain attributes comes first; only a tensor that fails it gets the full check,
    which says what is wrong."""
    (first_name, first), *others = named_lists
    for name, tensors in named_lists:
        if not isinstance(tensors, (list, tuple)):
            raise TypeError(f"{api}() takes {name} as a list of tensors, one per parameter, not a "
                            f"{'single tensor' if isinstance(tensors, torch.Tensor) else type(tensors)}.")
        if len(tensors) != len(first):
            raise ValueError(f"{name} has {len(tensors)} tensors but {first_name} has {len(first)}: "
                             "pass one per parameter, in the same order.")
    if not first:
        return
    check_tensors((f"{first_name}[0]", first[0]))  # on the kernels' device: the others must match it
    where = first[0].device
    for i, param in enumerate(first):
        row = [(name, tensors[i], torch.float32 if name in state_names else param.dtype)
               for name, tensors in others]
        quick = isinstance(param, torch.Tensor) and param.dtype in _TL_DTYPES and param.dtype != torch.float64 \
            and param.device == where and param.is_contiguous() and all(
                isinstance(t, torch.Tensor) and t.dtype == dtype and t.device == where and t.shape == param.shape
                and t.is_contiguous() for _, t, dtype in row)
        if quick:
            continue
        check_tensors((f"{first_name}[{i}]", param))
        for name, tensor, dtype in row:
            check_tensors((f"{name}[{i}]", tensor), dtypes=(dtype,))
            if tensor.shape != param.shape:
                raise ValueError(f"{name}[{i}] has shape {tuple(tensor.shape)} but {first_name}[{i}] has "
                                 f"shape {tuple(param.shape)}: they must match.")
        for name, tensor in [(first_name, param)] + [(name, t) for name, t, _ in row]:
            if tensor.device != where:
                raise ValueError(f"{name}[{i}] is on {tensor.device} but {first_name}[0] is on {where}: "
                                 "keep every tensor on one device.")
            if not tensor.is_contiguous():
                raise ValueError(f"{name}[{i}] is not contiguous. The update is made in place, so it "
                                 "cannot work on a contiguous copy: pass contiguous tensors (parameters "
                                 "and their states normally are).")


def _check_hyperparameters(api, **values):
    for name, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise TypeError(f"{api}(): {name} must be a finite Python number, got {value!r}.")
        if value < 0:
            raise ValueError(f"{api}(): {name} must be >= 0, got {value}.")


def _check_step(api, step):
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"{api}(): step must be a Python int >= 1 (the number of this update, "
                         f"counting from 1), got {step!r}.")


# -------------------------------------------------------------------------------------------------
# AdamW
#
# For every element, with g the gradient, at step t = 1, 2, ...:
#     p   = p * (1 - lr * weight_decay)             decoupled weight decay: on p, not on g
#     m   = beta1 * m + (1 - beta1) * g             exp_avg: running mean of g
#     v   = beta2 * v + (1 - beta2) * g * g         exp_avg_sq: running mean of g^2
#     p   = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
# m and v start at 0, so early on they are too small by a factor (1 - beta^t): the bias
# corrections divide that out. They depend on t only, so the launcher computes them once.
# Memory-bound: read p, g, m, v and write p, m, v (28 bytes per fp32 parameter). The math is in
# float32 whatever the parameter's dtype, and a bf16 parameter is rounded once, when stored.
# -------------------------------------------------------------------------------------------------


@triton.jit
def adamw_block(param_ptr, grad_ptr, exp_avg_ptr, exp_avg_sq_ptr, offsets, limit,
                lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt,
                PARAM_DTYPE: tl.constexpr):
    """Update the elements at ``offsets`` below ``limit`` of one tensor and its two states."""
    mask = offsets < limit
    param = tl.load(param_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    grad = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    exp_avg = tl.load(exp_avg_ptr + offsets, mask=mask, other=0.0)
    exp_avg_sq = tl.load(exp_avg_sq_ptr + offsets, mask=mask, other=0.0)

    # TODO: apply the decoupled weight decay to the parameter
    # HINT: AdamW shrinks the parameter itself by a fraction lr * weight_decay; the gradient and the moments never see weight_decay (that would be Adam with an L2 penalty).
    param = param * (1.0 - lr * weight_decay)
    # STUB: param = ...
    # END TODO
    # TODO: update the two moments, exp_avg (of the gradient) and exp_avg_sq (of its square)
    # HINT: each is a running average: keep beta of the old value and add (1 - beta) of the new one.
    exp_avg = beta1 * exp_avg + (1.0 - beta1) * grad
    exp_avg_sq = beta2 * exp_avg_sq + (1.0 - beta2) * grad * grad
    # STUB: exp_avg = ...
    # STUB: exp_avg_sq = ...
    # END TODO
    # TODO: take the step: the bias-corrected exp_avg over the bias-corrected root of exp_avg_sq
    # HINT: the launcher passes step_size = lr / bias_correction1 and bias_correction2_sqrt.
    # HINT: torch.optim.AdamW adds eps after the square root and the correction, not inside.
    denom = tl.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
    param = param - step_size * exp_avg / denom
    # STUB: denom = ...
    # STUB: param = ...
    # END TODO

    tl.store(param_ptr + offsets, param.to(PARAM_DTYPE), mask=mask)
    tl.store(exp_avg_ptr + offsets, exp_avg, mask=mask)
    tl.store(exp_avg_sq_ptr + offsets, exp_avg_sq, mask=mask)


@triton.jit
def adamw_kernel(param_addresses, grad_addresses, exp_avg_addresses, exp_avg_sq_addresses,
                 numels, chunk_tensor, chunk_index,
                 lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt,
                 PARAM_DTYPE: tl.constexpr, ALIGNED: tl.constexpr,
                 CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    program = tl.program_id(axis=0)
    tensor = tl.load(chunk_tensor + program)
    n = tl.load(numels + tensor)
    # The tables hold addresses as int64: .to(tl.pointer_type(...)) makes them pointers again.
    param_ptr = tl.load(param_addresses + tensor).to(tl.pointer_type(PARAM_DTYPE))
    grad_ptr = tl.load(grad_addresses + tensor).to(tl.pointer_type(PARAM_DTYPE))
    exp_avg_ptr = tl.load(exp_avg_addresses + tensor).to(tl.pointer_type(tl.float32))
    exp_avg_sq_ptr = tl.load(exp_avg_sq_addresses + tensor).to(tl.pointer_type(tl.float32))
    if ALIGNED:  # the compiler cannot see that loaded addresses are aligned: tell it
        param_ptr = tl.multiple_of(param_ptr, 16)
        grad_ptr = tl.multiple_of(grad_ptr, 16)
        exp_avg_ptr = tl.multiple_of(exp_avg_ptr, 16)
        exp_avg_sq_ptr = tl.multiple_of(exp_avg_sq_ptr, 16)
    chunk_start = tl.load(chunk_index + program) * CHUNK
    chunk_length = tl.minimum(n - chunk_start, CHUNK)
    # Whole blocks first, masked at full_end, a multiple of BLOCK: the compiler can then see that
    # the mask is the same for each group of neighbouring lanes and load them 16 bytes at a time.
    # A mask at n (a number it knows nothing about) would make it load one element at a time.
    full_end = chunk_start + (chunk_length // BLOCK) * BLOCK
    for block in range(0, chunk_length // BLOCK):
        adamw_block(param_ptr, grad_ptr, exp_avg_ptr, exp_avg_sq_ptr,
                    chunk_start + block * BLOCK + tl.arange(0, BLOCK), full_end,
                    lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt, PARAM_DTYPE)
    if full_end < chunk_start + chunk_length:  # the tensor's last, partial block
        adamw_block(param_ptr, grad_ptr, exp_avg_ptr, exp_avg_sq_ptr, full_end + tl.arange(0, BLOCK), n,
                    lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt, PARAM_DTYPE)


def adamw(params, grads, exp_avgs, exp_avg_sqs, *, step, lr=1e-3, beta1=0.9, beta2=0.999,
          eps=1e-8, weight_decay=1e-2):
    """One AdamW update of every tensor in ``params``, in place, as torch.optim.AdamW's step.

    ``params``: float32, float16 or bfloat16 tensors of any shapes; ``grads``: one per parameter,
    same shape and dtype; ``exp_avgs``, ``exp_avg_sqs``: the optimizer's state, float32, same
    shapes, updated in place too (zeros before the first step). ``step`` counts the updates from
    1. One launch per parameter dtype covers every tensor. Returns None.
    """
    _check_tensor_lists("adamw", [("params", params), ("grads", grads), ("exp_avgs", exp_avgs),
                                  ("exp_avg_sqs", exp_avg_sqs)], state_names=("exp_avgs", "exp_avg_sqs"))
    _check_step("adamw", step)
    _check_hyperparameters("adamw", lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
    if not (beta1 < 1 and beta2 < 1):
        raise ValueError(f"adamw(): beta1 and beta2 must be in [0, 1), got {beta1} and {beta2}.")

    # TODO: compute the two bias corrections of this step
    # HINT: m and v start at 0; after `step` updates their weights sum to 1 - beta ** step, not 1.
    bias_correction1 = 1.0 - beta1 ** step
    bias_correction2 = 1.0 - beta2 ** step
    # STUB: bias_correction1 = ...
    # STUB: bias_correction2 = ...
    # END TODO
    step_size = lr / bias_correction1
    bias_correction2_sqrt = math.sqrt(bias_correction2)
    for dtype, lists in _by_dtype(params, grads, exp_avgs, exp_avg_sqs):
        addresses, numels, chunk_tensor, chunk_index, aligned = _multi_tensor_table(lists)
        adamw_kernel[(chunk_tensor.numel(),)](
            *addresses, numels, chunk_tensor, chunk_index,
            lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt,
            PARAM_DTYPE=_TL_DTYPES[dtype], ALIGNED=aligned,
            CHUNK=MULTI_TENSOR_CHUNK, BLOCK=MULTI_TENSOR_BLOCK, num_warps=MULTI_TENSOR_WARPS)


# -------------------------------------------------------------------------------------------------
# SGD with momentum, as torch.optim.SGD
#
#     g   = g + weight_decay * p                    (an L2 penalty: SGD adds it to the gradient)
#     buf = g                                       at the first step
#     buf = momentum * buf + (1 - dampening) * g    afterwards
#     g   = g + momentum * buf   if nesterov, else   g = buf
#     p   = p - lr * g
# Without momentum (momentum = 0) the buffers are neither read nor written.
# -------------------------------------------------------------------------------------------------


@triton.jit
def sgd_block(param_ptr, grad_ptr, buffer_ptr, offsets, limit, lr, momentum, dampening, weight_decay,
              HAS_MOMENTUM: tl.constexpr, NESTEROV: tl.constexpr, FIRST_STEP: tl.constexpr,
              PARAM_DTYPE: tl.constexpr):
    mask = offsets < limit
    param = tl.load(param_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    grad = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    grad = grad + weight_decay * param
    if HAS_MOMENTUM:
        # TODO: update the momentum buffer
        # HINT: at the first step PyTorch sets the buffer to the gradient itself, whatever it held and without dampening.
        # HINT: FIRST_STEP is a tl.constexpr, so a plain `if FIRST_STEP:` picks the code at compile time.
        if FIRST_STEP:
            buffer = grad
        else:
            buffer = tl.load(buffer_ptr + offsets, mask=mask, other=0.0)
            buffer = momentum * buffer + (1.0 - dampening) * grad
        # STUB: buffer = ...
        # END TODO
        tl.store(buffer_ptr + offsets, buffer, mask=mask)
        # TODO: the direction of the step, with Nesterov momentum or without
        # HINT: without Nesterov the step follows the buffer; Nesterov looks ahead: the gradient plus momentum times the buffer.
        if NESTEROV:
            grad = grad + momentum * buffer
        else:
            grad = buffer
        # STUB: grad = ...
        # END TODO
    param = param - lr * grad
    tl.store(param_ptr + offsets, param.to(PARAM_DTYPE), mask=mask)


@triton.jit
def sgd_kernel(param_addresses, grad_addresses, buffer_addresses, numels, chunk_tensor, chunk_index,
               lr, momentum, dampening, weight_decay,
               HAS_MOMENTUM: tl.constexpr, NESTEROV: tl.constexpr, FIRST_STEP: tl.constexpr,
               PARAM_DTYPE: tl.constexpr, ALIGNED: tl.constexpr,
               CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    program = tl.program_id(axis=0)
    tensor = tl.load(chunk_tensor + program)
    n = tl.load(numels + tensor)
    param_ptr = tl.load(param_addresses + tensor).to(tl.pointer_type(PARAM_DTYPE))
    grad_ptr = tl.load(grad_addresses + tensor).to(tl.pointer_type(PARAM_DTYPE))
    buffer_ptr = tl.load(buffer_addresses + tensor).to(tl.pointer_type(tl.float32))
    if ALIGNED:
        param_ptr = tl.multiple_of(param_ptr, 16)
        grad_ptr = tl.multiple_of(grad_ptr, 16)
        buffer_ptr = tl.multiple_of(buffer_ptr, 16)
    chunk_start = tl.load(chunk_index + program) * CHUNK
    chunk_length = tl.minimum(n - chunk_start, CHUNK)
    full_end = chunk_start + (chunk_length // BLOCK) * BLOCK  # whole blocks, then the rest (see adamw_kernel)
    for block in range(0, chunk_length // BLOCK):
        sgd_block(param_ptr, grad_ptr, buffer_ptr, chunk_start + block * BLOCK + tl.arange(0, BLOCK), full_end,
                  lr, momentum, dampening, weight_decay, HAS_MOMENTUM, NESTEROV, FIRST_STEP, PARAM_DTYPE)
    if full_end < chunk_start + chunk_length:
        sgd_block(param_ptr, grad_ptr, buffer_ptr, full_end + tl.arange(0, BLOCK), n,
                  lr, momentum, dampening, weight_decay, HAS_MOMENTUM, NESTEROV, FIRST_STEP, PARAM_DTYPE)


def sgd(params, grads, momentum_buffers, *, lr, momentum=0.0, dampening=0.0, nesterov=False,
        weight_decay=0.0, step=1):
    """One SGD update of every tensor in ``params``, in place, as torch.optim.SGD's step.

    ``momentum_buffers``: float32, one per parameter, updated in place; what they hold before the
    first step (``step == 1``) is ignored, as PyTorch starts the buffer from the gradient. With
    ``momentum == 0`` they are left alone. Returns None.
    """
    _check_tensor_lists("sgd", [("params", params), ("grads", grads),
                                ("momentum_buffers", momentum_buffers)], state_names=("momentum_buffers",))
    _check_step("sgd", step)
    _check_hyperparameters("sgd", lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)
    if nesterov and (momentum == 0 or dampening != 0):
        raise ValueError("sgd(): Nesterov momentum needs momentum > 0 and dampening = 0, as in "
                         "torch.optim.SGD.")
    for dtype, lists in _by_dtype(params, grads, momentum_buffers):
        addresses, numels, chunk_tensor, chunk_index, aligned = _multi_tensor_table(lists)
        sgd_kernel[(chunk_tensor.numel(),)](
            *addresses, numels, chunk_tensor, chunk_index, lr, momentum, dampening, weight_decay,
            HAS_MOMENTUM=momentum != 0, NESTEROV=bool(nesterov), FIRST_STEP=step == 1,
            PARAM_DTYPE=_TL_DTYPES[dtype], ALIGNED=aligned,
            CHUNK=MULTI_TENSOR_CHUNK, BLOCK=MULTI_TENSOR_BLOCK, num_warps=MULTI_TENSOR_WARPS)


# -------------------------------------------------------------------------------------------------
# Unscaling gradients: what torch.amp.GradScaler.unscale_ does
#
# fp16 training multiplies the loss by a large scale so that small gradients do not flush to 0,
# then divides the gradients by it before the optimizer step. If the scale was too large some
# gradient overflowed to inf (or became NaN): the step must then be skipped and the scale lowered.
# One launch multiplies every gradient by inv_scale and raises found_inf if any element is not
# finite. Every program that sees one writes 1.0: the writes race, but they all write the same value.
# -------------------------------------------------------------------------------------------------


@triton.jit
def unscale_grads_block(grad_ptr, offsets, limit, inv_scale, GRAD_DTYPE: tl.constexpr):
    """Unscale the elements at ``offsets`` below ``limit``; returns 1 if any was inf or NaN, else 0."""
    mask = offsets < limit
    grad = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    # TODO: flag the elements that are inf or NaN, and tell whether this block had any
    # HINT: NaN is not equal to itself, and no comparison with NaN is True: |grad| < inf is False for inf and for NaN.
    # HINT: tl.max of an int32 block of 0s and 1s is 1 when any element is 1; the masked lanes hold 0.0, which is finite.
    not_finite = ~(tl.abs(grad) < float("inf"))
    any_bad = tl.max(not_finite.to(tl.int32), axis=0)
    # STUB: not_finite = ...
    # STUB: any_bad = ...
    # END TODO
    tl.store(grad_ptr + offsets, (grad * inv_scale).to(GRAD_DTYPE), mask=mask)
    return any_bad


@triton.jit
def unscale_grads_kernel(grad_addresses, numels, chunk_tensor, chunk_index, inv_scale_ptr, found_inf_ptr,
                         GRAD_DTYPE: tl.constexpr, ALIGNED: tl.constexpr,
                         CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    program = tl.program_id(axis=0)
    tensor = tl.load(chunk_tensor + program)
    n = tl.load(numels + tensor)
    grad_ptr = tl.load(grad_addresses + tensor).to(tl.pointer_type(GRAD_DTYPE))
    if ALIGNED:
        grad_ptr = tl.multiple_of(grad_ptr, 16)
    inv_scale = tl.load(inv_scale_ptr)
    chunk_start = tl.load(chunk_index + program) * CHUNK
    chunk_length = tl.minimum(n - chunk_start, CHUNK)
    full_end = chunk_start + (chunk_length // BLOCK) * BLOCK  # whole blocks, then the rest (see adamw_kernel)
    any_bad = 0
    for block in range(0, chunk_length // BLOCK):
        offsets = chunk_start + block * BLOCK + tl.arange(0, BLOCK)
        any_bad = tl.maximum(any_bad, unscale_grads_block(grad_ptr, offsets, full_end, inv_scale, GRAD_DTYPE))
    if full_end < chunk_start + chunk_length:
        any_bad = tl.maximum(any_bad, unscale_grads_block(grad_ptr, full_end + tl.arange(0, BLOCK), n,
                                                          inv_scale, GRAD_DTYPE))
    tl.store(found_inf_ptr, 1.0, mask=any_bad > 0)


def unscale_grads(grads, inv_scale):
    """Multiply every gradient in ``grads`` by ``inv_scale`` in place; return ``found_inf``, a
    float32 tensor of one element: 1.0 if any gradient held inf or NaN (before the multiply), else
    0.0. ``inv_scale``: a float32 tensor of one element (GradScaler keeps 1 / scale on the GPU),
    or a Python float. Gradients may mix float32, float16 and bfloat16 tensors; they are all
    multiplied, found_inf or not, as torch._amp_foreach_non_finite_check_and_unscale_ does."""
    _check_tensor_lists("unscale_grads", [("grads", grads)])
    if isinstance(inv_scale, (int, float)) and not isinstance(inv_scale, bool):
        where = grads[0].device if len(grads) else ("cuda" if torch.cuda.is_available() else "cpu")
        inv_scale = torch.full((1,), float(inv_scale), dtype=torch.float32, device=where)
    check_tensors(("inv_scale", inv_scale), dtypes=(torch.float32,))
    if inv_scale.numel() != 1:
        raise ValueError(f"inv_scale must hold one value, got shape {tuple(inv_scale.shape)}.")
    found_inf = torch.zeros(1, dtype=torch.float32, device=inv_scale.device)
    for dtype, (group,) in _by_dtype(grads):
        addresses, numels, chunk_tensor, chunk_index, aligned = _multi_tensor_table([group])
        unscale_grads_kernel[(chunk_tensor.numel(),)](
            addresses[0], numels, chunk_tensor, chunk_index, inv_scale, found_inf,
            GRAD_DTYPE=_TL_DTYPES[dtype], ALIGNED=aligned,
            CHUNK=MULTI_TENSOR_CHUNK, BLOCK=MULTI_TENSOR_BLOCK, num_warps=MULTI_TENSOR_WARPS)
    return found_inf


# -------------------------------------------------------------------------------------------------
# The matrix product of the training loop (given code, nothing to do)
#
# training_loop.py trains a small model with this module's kernels: bf16 compute, fp32 master
# weights, unscale_grads and adamw. Its two linear layers use this plain tiled matmul and its
# backward (the matmul itself is the subject of missing-elements/02-matrix-mul).
# -------------------------------------------------------------------------------------------------


@triton.jit
def loop_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                       stride_cm, stride_cn, DOT_IN_FP32: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        if DOT_IN_FP32:  # Triton's interpreter gets bf16 tl.dot wrong: upcast there
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def loop_matmul(a, b):
    """a @ b for 2-D tensors of one dtype (any strides), float32 accumulation, a's dtype out."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if a.is_cuda:
        block_m, block_n, block_k = 64, 64, 32
    else:  # the interpreter pays per operation, not per element: few, large blocks
        block_m, block_n, block_k = (min(max(triton.next_power_of_2(s), 16), 128) for s in (M, N, K))
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    loop_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                             c.stride(0), c.stride(1), DOT_IN_FP32=not a.is_cuda,
                             BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return c


class LoopLinear(torch.autograd.Function):
    """y = x @ w, and its backward: dx = dy @ w^T, dw = x^T @ dy (transposes are free: strides)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return loop_matmul(x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return loop_matmul(dy, w.t()), loop_matmul(x.t(), dy)


# =================================================================================================
# PART 3: the selective scan
#
# selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False) -> out
#     Mamba's selective state-space scan, forward and backward (a torch.autograd.Function).
#
# Check this part alone:  make check M=mastery/04-training-kernels K=scan
# =================================================================================================

# -------------------------------------------------------------------------------------------------
# The selective scan (Mamba)
#
# For each batch b and channel d, a state h of dstate values runs along the sequence, t = 0..L-1:
#
#     dt     = softplus(delta[b, d, t] + delta_bias[d])       (softplus only if delta_softplus)
#     h      = exp(dt * A[d, :]) * h  +  dt * u[b, d, t] * B[b, :, t]        h: (dstate,)
#     y      = sum(h * C[b, :, t])
#     out    = (y + D[d] * u[b, d, t]) * silu(z[b, d, t])                      (D, z optional)
#
# Each step needs the previous state, so time is sequential; batches and channels are not. One
# program owns a block of BLOCK_D channels of one batch and keeps their states, a (BLOCK_D, dstate)
# tile, in registers while it walks along t:
#
#          t ->  0    1    2   ...  L-1
#   program 0  [ h -> h -> h -> ... -> h ]   channels 0..BLOCK_D-1 of batch 0
#   program 1  [ h -> h -> h -> ... -> h ]   channels BLOCK_D..2*BLOCK_D-1 of batch 0
#   ...                                      (grid: channel blocks x batches)
#
# The backward pass runs the same walk in reverse, t = L-1..0, carrying dh = dloss/dh: every step
# adds what y_t contributes (dy * C) and passes dh * exp(dt * A) on to the step before. It needs
# the state h before each step, which the forward pass cannot keep for every t (dstate times the
# size of u). The forward pass saves it every `chunk` steps, about sqrt(L) of them; the backward
# pass replays each chunk forwards from its saved state into a small scratch buffer, then walks it
# in reverse: one more forward pass in all, and sqrt(L) saved states instead of L.
# -------------------------------------------------------------------------------------------------

SCAN_MAX_CHUNK = 64  # the most steps between two saved states
SCAN_BLOCK_D = 8  # channels per program: small blocks make many programs, which hide each other's latency
SCAN_MAX_STATE = 256
SCAN_WARPS = 1


@triton.jit
def selective_scan_dt(delta_ptr, offsets, d_mask, delta_bias, HAS_DELTA_BIAS: tl.constexpr,
                      DELTA_SOFTPLUS: tl.constexpr, COMPUTE: tl.constexpr):
    """(dt, the value softplus was applied to) for one step of a block of channels."""
    raw = tl.load(delta_ptr + offsets, mask=d_mask, other=0.0).to(COMPUTE)
    if HAS_DELTA_BIAS:
        raw += delta_bias
    dt = raw
    if DELTA_SOFTPLUS:
        # log(1 + exp(x)) written so that exp never overflows
        dt = tl.maximum(raw, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(raw)))
    return dt, raw


@triton.jit
def selective_scan_fwd_kernel(u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, delta_bias_ptr,
                              out_ptr, states_ptr, dim, L, n_state, n_chunks,
                              HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DELTA_BIAS: tl.constexpr,
                              DELTA_SOFTPLUS: tl.constexpr, SAVE_STATES: tl.constexpr,
                              COMPUTE: tl.constexpr, CHUNK: tl.constexpr,
                              BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    d_block = tl.program_id(axis=0)
    batch = tl.program_id(axis=1).to(tl.int64)
    d = d_block * BLOCK_D + tl.arange(0, BLOCK_D)
    n = tl.arange(0, BLOCK_N)
    d_mask = d < dim
    n_mask = n < n_state
    dn_mask = d_mask[:, None] & n_mask[None, :]
    # Padding lanes load A = 0 and B = C = 0: their state stays 0 and adds nothing to y.
    A = tl.load(A_ptr + d[:, None] * n_state + n[None, :], mask=dn_mask, other=0.0).to(COMPUTE)
    D = tl.load(D_ptr + d, mask=d_mask, other=0.0).to(COMPUTE) if HAS_D else 0.0
    delta_bias = tl.load(delta_bias_ptr + d, mask=d_mask, other=0.0).to(COMPUTE) if HAS_DELTA_BIAS else 0.0
    row = (batch * dim + d) * L  # where (batch, d, 0) is in u, delta, z and out
    bc_row = (batch * n_state + n) * L  # where (batch, n, 0) is in B and C
    state_row = ((batch * dim + d[:, None]) * n_chunks) * n_state + n[None, :]

    h = tl.zeros((BLOCK_D, BLOCK_N), dtype=COMPUTE)
    for chunk in range(0, n_chunks):
        if SAVE_STATES:  # the state before the chunk's first step, for the backward pass
            tl.store(states_ptr + state_row + chunk * n_state, h, mask=dn_mask)
        for t in range(chunk * CHUNK, tl.minimum(chunk * CHUNK + CHUNK, L)):
            u = tl.load(u_ptr + row + t, mask=d_mask, other=0.0).to(COMPUTE)
            dt, _ = selective_scan_dt(delta_ptr, row + t, d_mask, delta_bias, HAS_DELTA_BIAS,
                                      DELTA_SOFTPLUS, COMPUTE)
            B = tl.load(B_ptr + bc_row + t, mask=n_mask, other=0.0).to(COMPUTE)
            C = tl.load(C_ptr + bc_row + t, mask=n_mask, other=0.0).to(COMPUTE)
            # TODO: advance the states by one step, then read y out of them
            # HINT: dt, u and y hold one value per channel (BLOCK_D,); B and C one per state (BLOCK_N,); A and h are (BLOCK_D, BLOCK_N): broadcast with [:, None] and [None, :].
            # HINT: the new state decays the old one by exp(dt * A) and adds dt * u * B; y sums h * C over the state axis (axis=1).
            h = tl.exp(dt[:, None] * A) * h + (dt * u)[:, None] * B[None, :]
            y = tl.sum(h * C[None, :], axis=1)
            # STUB: h = ...
            # STUB: y = ...
            # END TODO
            if HAS_D:
                y += D * u
            if HAS_Z:
                z = tl.load(z_ptr + row + t, mask=d_mask, other=0.0).to(COMPUTE)
                y = y * z * tl.sigmoid(z)
            tl.store(out_ptr + row + t, y.to(out_ptr.dtype.element_ty), mask=d_mask)


@triton.jit
def selective_scan_bwd_kernel(u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, delta_bias_ptr,
                              states_ptr, scratch_ptr, dout_ptr,
                              du_ptr, ddelta_ptr, dA_ptr, dB_ptr, dC_ptr, dD_ptr, dz_ptr, ddelta_bias_ptr,
                              dim, L, n_state, n_chunks,
                              HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DELTA_BIAS: tl.constexpr,
                              DELTA_SOFTPLUS: tl.constexpr, COMPUTE: tl.constexpr, CHUNK: tl.constexpr,
                              BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr):
    d_block = tl.program_id(axis=0)
    batch = tl.program_id(axis=1).to(tl.int64)
    d = d_block * BLOCK_D + tl.arange(0, BLOCK_D)
    n = tl.arange(0, BLOCK_N)
    d_mask = d < dim
    n_mask = n < n_state
    dn_mask = d_mask[:, None] & n_mask[None, :]
    A = tl.load(A_ptr + d[:, None] * n_state + n[None, :], mask=dn_mask, other=0.0).to(COMPUTE)
    D = tl.load(D_ptr + d, mask=d_mask, other=0.0).to(COMPUTE) if HAS_D else 0.0
    delta_bias = tl.load(delta_bias_ptr + d, mask=d_mask, other=0.0).to(COMPUTE) if HAS_DELTA_BIAS else 0.0
    row = (batch * dim + d) * L
    bc_row = (batch * n_state + n) * L
    state_row = ((batch * dim + d[:, None]) * n_chunks) * n_state + n[None, :]
    # This program's scratch: CHUNK tiles of (BLOCK_D, BLOCK_N), the state before each step.
    tile = BLOCK_D * BLOCK_N
    scratch = scratch_ptr + (batch * tl.num_programs(0) + d_block) * (CHUNK * tile) \
        + tl.arange(0, BLOCK_D)[:, None] * BLOCK_N + n[None, :]

    dh = tl.zeros((BLOCK_D, BLOCK_N), dtype=COMPUTE)  # dloss/dh, carried backwards in time
    dA_sum = tl.zeros((BLOCK_D, BLOCK_N), dtype=COMPUTE)
    dD_sum = tl.zeros((BLOCK_D,), dtype=COMPUTE)
    ddelta_bias_sum = tl.zeros((BLOCK_D,), dtype=COMPUTE)
    for chunk_from_end in range(0, n_chunks):
        chunk = n_chunks - 1 - chunk_from_end
        t_start = chunk * CHUNK
        t_end = tl.minimum(t_start + CHUNK, L)
        # Replay the chunk forwards from its saved state, keeping the state before every step.
        h = tl.load(states_ptr + state_row + chunk * n_state, mask=dn_mask, other=0.0)
        for t in range(t_start, t_end):
            tl.store(scratch + (t - t_start) * tile, h)
            u = tl.load(u_ptr + row + t, mask=d_mask, other=0.0).to(COMPUTE)
            dt, _ = selective_scan_dt(delta_ptr, row + t, d_mask, delta_bias, HAS_DELTA_BIAS,
                                      DELTA_SOFTPLUS, COMPUTE)
            B = tl.load(B_ptr + bc_row + t, mask=n_mask, other=0.0).to(COMPUTE)
            h = tl.exp(dt[:, None] * A) * h + (dt * u)[:, None] * B[None, :]
        tl.debug_barrier()  # the scratch tiles are written; read them back below
        # Walk the chunk in reverse.
        for step_from_end in range(0, t_end - t_start):
            t = t_end - 1 - step_from_end
            h_prev = tl.load(scratch + (t - t_start) * tile)
            u = tl.load(u_ptr + row + t, mask=d_mask, other=0.0).to(COMPUTE)
            dt, raw = selective_scan_dt(delta_ptr, row + t, d_mask, delta_bias, HAS_DELTA_BIAS,
                                        DELTA_SOFTPLUS, COMPUTE)
            B = tl.load(B_ptr + bc_row + t, mask=n_mask, other=0.0).to(COMPUTE)
            C = tl.load(C_ptr + bc_row + t, mask=n_mask, other=0.0).to(COMPUTE)
            dout = tl.load(dout_ptr + row + t, mask=d_mask, other=0.0).to(COMPUTE)
            decay = tl.exp(dt[:, None] * A)
            h = decay * h_prev + (dt * u)[:, None] * B[None, :]
            dy = dout
            if HAS_Z:  # out = y_skip * silu(z), with y_skip = y + D * u
                z = tl.load(z_ptr + row + t, mask=d_mask, other=0.0).to(COMPUTE)
                z_sigmoid = tl.sigmoid(z)
                y_skip = tl.sum(h * C[None, :], axis=1)
                if HAS_D:
                    y_skip += D * u
                dz = dout * y_skip * z_sigmoid * (1.0 + z * (1.0 - z_sigmoid))
                tl.store(dz_ptr + row + t, dz.to(dz_ptr.dtype.element_ty), mask=d_mask)
                dy = dout * z * z_sigmoid
            # TODO: one step of the reverse scan: dh becomes dloss/dh_t, then the gradients of this step's inputs, then dh moves to the step before
            # HINT: y_t = tl.sum(h_t * C_t[None, :], axis=1) adds dy * C to dh, and gives C the gradient sum over channels of dy * h_t (axis=0).
            # HINT: h_t = decay * h_prev + (dt * u) * B with decay = exp(dt * A): the gradient of dt * A is dh * h_prev * decay; it reaches A (times dt) and dt (times A, summed over the states).
            # HINT: the input term gives dt and u the factor tl.sum(dh * B[None, :], axis=1) (times u, and times dt), and B the sum over channels of dh * dt * u.
            # HINT: what flows on to h_prev is dh * decay.
            dh += dy[:, None] * C[None, :]
            dC = tl.sum(dy[:, None] * h, axis=0)
            d_decay = dh * h_prev * decay
            dA_sum += d_decay * dt[:, None]
            dh_B = tl.sum(dh * B[None, :], axis=1)
            ddt = tl.sum(d_decay * A, axis=1) + dh_B * u
            du = dh_B * dt
            dB = tl.sum(dh * (dt * u)[:, None], axis=0)
            dh = dh * decay
            # STUB: dh = ...
            # STUB: dC = ...
            # STUB: d_decay = ...
            # STUB: dA_sum += ...
            # STUB: ddt = ...
            # STUB: du = ...
            # STUB: dB = ...
            # STUB: dh = ...
            # END TODO
            if HAS_D:
                du += dy * D
                dD_sum += dy * u
            if DELTA_SOFTPLUS:  # softplus'(x) = sigmoid(x)
                ddt = ddt * tl.sigmoid(raw)
            ddelta_bias_sum += tl.where(d_mask, ddt, 0.0)
            tl.store(du_ptr + row + t, du.to(du_ptr.dtype.element_ty), mask=d_mask)
            tl.store(ddelta_ptr + row + t, ddt.to(ddelta_ptr.dtype.element_ty), mask=d_mask)
            # B and C are shared by every channel: the channel blocks of this batch add up.
            tl.atomic_add(dB_ptr + bc_row + t, dB, mask=n_mask)
            tl.atomic_add(dC_ptr + bc_row + t, dC, mask=n_mask)
        tl.debug_barrier()  # done reading the scratch before the next chunk overwrites it
    # A, D and delta_bias are shared by every batch and step: add this program's sums.
    tl.atomic_add(dA_ptr + d[:, None] * n_state + n[None, :], dA_sum, mask=dn_mask)
    if HAS_D:
        tl.atomic_add(dD_ptr + d, dD_sum, mask=d_mask)
    if HAS_DELTA_BIAS:
        tl.atomic_add(ddelta_bias_ptr + d, ddelta_bias_sum, mask=d_mask)


SCAN_INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _selective_scan_check(u, delta, A, B, C, D, z, delta_bias):
    check_tensors(("u", u), ("delta", delta), *([("z", z)] if z is not None else []),
                  dtypes=SCAN_INPUT_DTYPES, ndim=3)
    for name, tensor in (("delta", delta), ("z", z)):
        if tensor is not None and tensor.shape != u.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but u has shape {tuple(u.shape)}: "
                             "both are (batch, dim, L).")
    batch, dim, length = u.shape
    weight_dtypes = (torch.float64,) if u.dtype == torch.float64 else (torch.float32,)
    params = [("A", A)] + [(name, t) for name, t in (("D", D), ("delta_bias", delta_bias)) if t is not None]
    check_tensors(*params, dtypes=weight_dtypes)
    if A.dim() != 2 or A.shape[0] != dim:
        raise ValueError(f"A must have shape (dim, dstate) = ({dim}, dstate), got {tuple(A.shape)}.")
    n_state = A.shape[1]
    if not 1 <= n_state <= SCAN_MAX_STATE:
        raise ValueError(f"A has dstate = {n_state}; this kernel keeps the states in registers and "
                         f"supports 1 to {SCAN_MAX_STATE}.")
    for name, tensor in params[1:]:
        if tuple(tensor.shape) != (dim,):
            raise ValueError(f"{name} must have shape ({dim},), one value per channel, got {tuple(tensor.shape)}.")
    for name, tensor in (("B", B), ("C", C)):
        check_tensors((name, tensor), dtypes=(u.dtype,) + weight_dtypes, ndim=3)
        if tuple(tensor.shape) != (batch, n_state, length):
            raise ValueError(f"{name} must have shape (batch, dstate, L) = ({batch}, {n_state}, {length}), "
                             f"got {tuple(tensor.shape)}.")


def _selective_scan_launch_shape(u, A):
    """(grid, chunk, number of chunks, BLOCK_N). A state is saved every `chunk` steps, about
    sqrt(L): sqrt(L) saved states per channel, and sqrt(L) scratch tiles per program."""
    batch, dim, length = u.shape
    chunk = min(SCAN_MAX_CHUNK, triton.next_power_of_2(math.isqrt(max(length - 1, 0)) + 1))
    return (triton.cdiv(dim, SCAN_BLOCK_D), batch), chunk, triton.cdiv(length, chunk), \
        triton.next_power_of_2(A.shape[1])


class SelectiveScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, z, delta_bias, delta_softplus):
        u, delta, A, B, C = (t.contiguous() for t in (u, delta, A, B, C))
        D, z, delta_bias = (t.contiguous() if t is not None else None for t in (D, z, delta_bias))
        batch, dim, length = u.shape
        n_state = A.shape[1]
        compute = torch.float64 if u.dtype == torch.float64 else torch.float32
        grid, chunk, n_chunks, block_n = _selective_scan_launch_shape(u, A)
        save_states = any(ctx.needs_input_grad)
        states = torch.empty((batch, dim, n_chunks, n_state) if save_states else (0,), dtype=compute,
                             device=u.device)
        out = torch.empty_like(u)
        if u.numel():
            selective_scan_fwd_kernel[grid](
                u, delta, A, B, C, D if D is not None else u, z if z is not None else u,
                delta_bias if delta_bias is not None else u, out, states, dim, length, n_state, n_chunks,
                HAS_D=D is not None, HAS_Z=z is not None, HAS_DELTA_BIAS=delta_bias is not None,
                DELTA_SOFTPLUS=delta_softplus, SAVE_STATES=save_states, COMPUTE=_TL_DTYPES[compute],
                CHUNK=chunk, BLOCK_D=SCAN_BLOCK_D, BLOCK_N=block_n, num_warps=SCAN_WARPS)
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, states)
        ctx.delta_softplus = delta_softplus
        return out

    @staticmethod
    def backward(ctx, dout):
        u, delta, A, B, C, D, z, delta_bias, states = ctx.saved_tensors
        dout = dout.contiguous()
        batch, dim, length = u.shape
        n_state = A.shape[1]
        compute = states.dtype
        grid, chunk, n_chunks, block_n = _selective_scan_launch_shape(u, A)
        du, ddelta = torch.empty_like(u), torch.empty_like(delta)
        dz = torch.empty_like(z) if z is not None else None
        # Sums over channel blocks, batches or steps are accumulated with atomics: start at 0.
        dA = torch.zeros(A.shape, dtype=compute, device=u.device)
        dB = torch.zeros(B.shape, dtype=compute, device=u.device)
        dC = torch.zeros(C.shape, dtype=compute, device=u.device)
        dD = torch.zeros(dim, dtype=compute, device=u.device)
        ddelta_bias = torch.zeros(dim, dtype=compute, device=u.device)
        if u.numel():
            scratch = torch.empty(grid[0] * grid[1] * chunk * SCAN_BLOCK_D * block_n,
                                  dtype=compute, device=u.device)
            selective_scan_bwd_kernel[grid](
                u, delta, A, B, C, D if D is not None else u, z if z is not None else u,
                delta_bias if delta_bias is not None else u, states, scratch, dout,
                du, ddelta, dA, dB, dC, dD, dz if dz is not None else du, ddelta_bias,
                dim, length, n_state, n_chunks,
                HAS_D=D is not None, HAS_Z=z is not None, HAS_DELTA_BIAS=delta_bias is not None,
                DELTA_SOFTPLUS=ctx.delta_softplus, COMPUTE=_TL_DTYPES[compute], CHUNK=chunk,
                BLOCK_D=SCAN_BLOCK_D, BLOCK_N=block_n, num_warps=SCAN_WARPS)
        return (du, ddelta, dA.to(A.dtype), dB.to(B.dtype), dC.to(C.dtype),
                dD.to(D.dtype) if D is not None else None, dz,
                ddelta_bias.to(delta_bias.dtype) if delta_bias is not None else None, None)


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """Mamba's selective scan (``selective_scan_ref`` with B and C varying over time): ``out``
    of shape (batch, dim, L) in u's dtype. Differentiable: the backward pass is a reverse scan.

    u, delta, z: (batch, dim, L), float32, float16, bfloat16 (or float64); A: (dim, dstate) and
    D, delta_bias: (dim,), float32 (float64 with float64 inputs); B, C: (batch, dstate, L), in
    u's dtype or float32. Real A only.
    """
    _selective_scan_check(u, delta, A, B, C, D, z, delta_bias)
    return SelectiveScan.apply(u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus))


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
