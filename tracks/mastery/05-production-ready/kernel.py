"""Production-ready operators: Triton kernels that PyTorch treats as its own operators.

A kernel that passes its tests is not yet something a model can use. A model is trained with
autograd, compiled with torch.compile, exported, traced, run on meta tensors to plan memory, and
called with inputs its author never thought of. ``torch.library`` is how a kernel takes part in
all of that. Four pieces turn a launcher into an operator:

    registration    torch.library.triton_op gives the launcher a name and a schema
                    (torch.ops.<namespace>.layer_norm_gelu, "(Tensor x, Tensor? weight, ...)
                    -> Tensor") and, through wrap_triton, shows its kernel to torch.compile
    fake            the output's shape, dtype and strides, from the inputs' metadata alone: what
                    torch.compile, meta tensors and FakeTensorMode run instead of the kernel
    autograd        register_autograd(backward, setup_context=...): what the forward saves, and
                    the gradients the backward returns, one per input, in the inputs' order
    validation      every way the inputs can be wrong raises a ValueError or TypeError that says
                    what to do, before a kernel runs

Two operators are built here, each a forward kernel, a backward kernel and the four pieces:

    bias_gelu_residual(x, bias, residual)              residual + gelu(x + bias)
    layer_norm_gelu(x, weight=None, bias=None, eps)    gelu(layer_norm(x) * weight + bias)

bias_gelu_residual comes first and is complete: read it as the worked example. layer_norm_gelu
is yours: its kernels are written, its operator is not. gelu is the exact GELU,
z * Phi(z) = 0.5 z (1 + erf(z / sqrt(2))), torch.nn.functional.gelu's default. Arithmetic is
float32 for fp32, fp16 and bf16 data; float64 data stays float64, so that
torch.autograd.gradcheck can check the hand-written derivatives.

A third operator, attention(q, k, v, causal, sm_scale), wraps the FlashAttention kernels of
mastery/03 the same way; it is complete, and lives in attention_op.py beside this file: read it
after your own. Adding an operator repeats the same steps: kernels; a launcher that validates,
allocates and launches through wrap_triton; triton_op; a fake; a backward operator with its own
fake; setup_context and backward; register_autograd; the public function with its docstring; and
in the tests an opcheck sample, cases and a property. The section headers below follow those steps.

Check your work:  make check M=mastery/05-production-ready
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# fp32/fp16/bf16 for models, float64 for torch.autograd.gradcheck.
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# layer_norm_gelu keeps a whole row in registers: up to 65536 values (the longest spill to local
# memory, still correct). Longer rows raise a ValueError that says what to use instead.
MAX_ROW = 65536
# Elements per program of bias_gelu_residual's tiles: 4 warps of 32 threads, 8 elements each.
TILE_ELEMENTS = 1024

# Operator names are global to a process: torch.ops.<namespace>.<name>. A library registers its
# operators once, under its own name (PyTorch's are "aten", FBGEMM's "fbgemm"). The course imports
# this file several times in one process under different module names (your copy, the reference,
# the tests' variants of it), so each copy registers under a namespace of its own, made from the
# name Python imported it under: otherwise the last copy imported would replace the others' ops.
NAMESPACE = "course_" + __name__.replace(".", "_").strip("_")


# ---- kernels: shared helpers ---------------------------------------------------------------------

@triton.jit
def compute_type(x):
    """float32 for fp16, bf16 and fp32 values; float64 stays float64 (decided at compile time)."""
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return x


@triton.jit
def gelu(z):
    """The exact GELU, z * Phi(z), with Phi the standard normal distribution function."""
    return 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))


@triton.jit
def gelu_derivative(z):
    """d/dz [z Phi(z)] = Phi(z) + z phi(z), with phi(z) = exp(-z^2 / 2) / sqrt(2 pi) the normal
    density. For large |z| exp underflows to 0 and the derivative is 1 or 0, with no NaN."""
    cdf = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476))
    density = 0.3989422804014327 * tl.exp(-0.5 * z * z)
    return cdf + z * density


@triton.jit
def column_sum_kernel(partial_ptr, out_ptr, n_partials, N, BLOCK: tl.constexpr):
    """out[c] = sum over p of partial[p, c], for a (n_partials, N) row-major buffer: the second
    step of a weight or bias gradient, once every program has stored its partial sums."""
    cols = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    total = tl.zeros((BLOCK,), dtype=partial_ptr.dtype.element_ty)
    ptrs = partial_ptr + cols  # pointer steps are 64-bit: no overflow at n_partials * N >= 2^31
    for _ in range(0, n_partials):
        total += tl.load(ptrs, mask=mask, other=0.0)
        ptrs += N
    tl.store(out_ptr + cols, total.to(out_ptr.dtype.element_ty), mask=mask)


# ---- kernels: bias + GELU + residual -------------------------------------------------------------

@triton.jit
def bias_gelu_residual_kernel(x_ptr, bias_ptr, residual_ptr, out_ptr, M, N,
                              x_row_stride, residual_row_stride, out_row_stride,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = residual + gelu(x + bias) on one BLOCK_M x BLOCK_N tile: one read of x and of the
    residual, one write of out. bias is one row, loaded once per tile."""
    rows = tl.program_id(axis=0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (rows[:, None] < M) & col_mask[None, :]
    x = compute_type(tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0))
    residual = compute_type(tl.load(residual_ptr + rows[:, None] * residual_row_stride + cols[None, :],
                                    mask=mask, other=0.0))
    bias = compute_type(tl.load(bias_ptr + cols, mask=col_mask, other=0.0))
    out = residual + gelu(x + bias[None, :])
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], out.to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def bias_gelu_residual_backward_kernel(dy_ptr, x_ptr, bias_ptr, dx_ptr, dbias_partial_ptr, M, N,
                                       dy_row_stride, x_row_stride, dx_row_stride,
                                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """dx = dy * gelu'(x + bias) tile by tile, and this program's partial sum of dx over its
    rows (dbias is the sum over all rows). Program (p, c) takes column block c of row tiles
    p, p + P, p + 2P, ... (P programs along axis 0) and stores its partial sums in row p of a
    (P, N) buffer; column_sum_kernel adds the P rows up."""
    pid = tl.program_id(axis=0)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    bias = compute_type(tl.load(bias_ptr + cols, mask=col_mask, other=0.0))
    dbias = tl.zeros((BLOCK_N,), dtype=dbias_partial_ptr.dtype.element_ty)
    first_row = pid.to(tl.int64) * BLOCK_M  # 64-bit: rows * stride passes 2^31 on large inputs
    for _ in range(pid, tl.cdiv(M, BLOCK_M), tl.num_programs(axis=0)):
        rows = first_row + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & col_mask[None, :]
        x = compute_type(tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0))
        dy = compute_type(tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0))
        dx = dy * gelu_derivative(x + bias[None, :])  # 0 in the masked lanes, where dy is 0
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=mask)
        dbias += tl.sum(dx, axis=0)
        first_row += tl.num_programs(axis=0) * BLOCK_M
    tl.store(dbias_partial_ptr + pid.to(tl.int64) * N + cols, dbias, mask=col_mask)


# ---- kernels: LayerNorm + GELU -------------------------------------------------------------------

@triton.jit
def normalize_row(x, x0, mask, N, eps):
    """(x_hat, rstd) of one row held in registers: x the row with 0 in the masked lanes, x0 its
    first element. Two passes over the registers, both on the row shifted by x0: the mean, then
    the variance of the centred values (track 1's layer norm explains why). x_hat is 0 in the
    masked lanes."""
    shifted = tl.where(mask, x - x0, 0.0)
    shifted_mean = tl.sum(shifted, axis=0) / N
    centred = tl.where(mask, shifted - shifted_mean, 0.0)
    # eps in x's type: Inductor may pass a Python float as a float64 scalar, which would turn
    # rstd, and every sum that uses it, into float64.
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + tl.cast(eps, x.dtype))
    return centred * rstd, rstd


@triton.jit
def layer_norm_gelu_kernel(x_ptr, y_ptr, weight_ptr, bias_ptr, x_row_stride, y_row_stride, N, eps,
                           BLOCK_N: tl.constexpr):
    """y = gelu(x_hat * weight + bias), one program per row: one read of x, one write of y."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x_row_ptr = x_ptr + row * x_row_stride
    x = compute_type(tl.load(x_row_ptr + cols, mask=mask, other=0.0))
    x_hat, _ = normalize_row(x, compute_type(tl.load(x_row_ptr)), mask, N, eps)
    weight = compute_type(tl.load(weight_ptr + cols, mask=mask, other=0.0))
    bias = compute_type(tl.load(bias_ptr + cols, mask=mask, other=0.0))
    y = gelu(x_hat * weight + bias)
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_gelu_backward_kernel(dy_ptr, x_ptr, weight_ptr, bias_ptr, dx_ptr,
                                    dweight_partial_ptr, dbias_partial_ptr, M, N,
                                    dy_row_stride, x_row_stride, dx_row_stride, eps,
                                    BLOCK_N: tl.constexpr):
    """dx for rows pid, pid + P, pid + 2P, ... (P programs), and this program's partial sums of
    dweight and dbias over those rows, stored in row pid of two (P, N) buffers.

    The forward saves nothing but its inputs: the mean and rstd of a row are recomputed here from
    x, which the backward reads anyway, so the forward writes y alone. With z = x_hat * w + b:
        dz      = dy * gelu'(z)
        dweight = sum over rows of dz * x_hat        dbias = sum over rows of dz
        g       = dz * w                             (the gradient of x_hat)
        dx      = rstd * (g - mean(g) - x_hat * mean(g * x_hat))
    """
    pid = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    weight = compute_type(tl.load(weight_ptr + cols, mask=mask, other=0.0))
    bias = compute_type(tl.load(bias_ptr + cols, mask=mask, other=0.0))
    dweight = tl.zeros((BLOCK_N,), dtype=dweight_partial_ptr.dtype.element_ty)
    dbias = tl.zeros((BLOCK_N,), dtype=dbias_partial_ptr.dtype.element_ty)
    row = pid.to(tl.int64)  # 64-bit: row * stride passes 2^31 on large inputs
    for _ in range(pid, M, tl.num_programs(axis=0)):
        x_row_ptr = x_ptr + row * x_row_stride
        x = compute_type(tl.load(x_row_ptr + cols, mask=mask, other=0.0))
        x_hat, rstd = normalize_row(x, compute_type(tl.load(x_row_ptr)), mask, N, eps)
        dy = compute_type(tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0))
        dz = dy * gelu_derivative(x_hat * weight + bias)  # 0 in the masked lanes, where dy is 0
        dweight += dz * x_hat
        dbias += dz
        g = dz * weight
        dx = rstd * (g - tl.sum(g, axis=0) / N - x_hat * (tl.sum(g * x_hat, axis=0) / N))
        tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        row += tl.num_programs(axis=0)
    tl.store(dweight_partial_ptr + pid.to(tl.int64) * N + cols, dweight, mask=mask)
    tl.store(dbias_partial_ptr + pid.to(tl.int64) * N + cols, dbias, mask=mask)


# ---- launchers: layouts and launch settings ------------------------------------------------------

def as_rows(t: torch.Tensor) -> torch.Tensor:
    """t as a 2-D (rows, last dimension) tensor whose rows are unit-stride: a view wherever one
    exists (rows may be any distance apart, even 0 for a broadcast), a copy only otherwise."""
    rows = t.reshape(t.shape[:-1].numel(), t.shape[-1])
    return rows if rows.stride(-1) == 1 or rows.numel() == 0 else rows.contiguous()


def row_config(n_cols: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) of the row kernels: the whole row in one power-of-two block, about 16
    values per thread, between 1 and 16 warps. (The backward holds five rows' worth of values per
    row in registers: more warps would leave each thread too few registers.) int(): block sizes are
    compile-time constants, so a traced row length becomes a fixed one here."""
    block_n = triton.next_power_of_2(int(n_cols))
    return block_n, min(max(block_n // 512, 1), 16)


def tile_config(n_cols: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of bias_gelu_residual's tiles: up to 1024 columns, then rows up to
    TILE_ELEMENTS elements per tile (short rows share a tile, long rows span several)."""
    block_n = min(triton.next_power_of_2(max(int(n_cols), 1)), TILE_ELEMENTS)
    return TILE_ELEMENTS // block_n, block_n


def backward_programs(device: torch.device, row_blocks: int, column_blocks: int = 1) -> int:
    """How many programs share the rows of a backward pass (at least 1, so that a gradient over
    zero rows is still written, as zeros): two per multiprocessor on a GPU, 4 under the
    interpreter. Each program writes one row of partial sums, so more programs would grow the
    partial-sum buffers (and the second pass that adds them up) with no gain once the GPU is full."""
    target = 2 * torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    return max(1, min(row_blocks, target // max(column_blocks, 1)))


def column_sums(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The sum of a (P, N) buffer of partial sums over its P rows, in ``dtype``, by a kernel."""
    n_cols = partial.shape[1]
    out = torch.empty(n_cols, dtype=dtype, device=partial.device)
    if n_cols:
        block = min(triton.next_power_of_2(n_cols), 1024)
        torch.library.wrap_triton(column_sum_kernel)[(triton.cdiv(n_cols, block),)](
            partial, out, partial.shape[0], n_cols, BLOCK=block)
    return out


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 data (gradcheck), float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ==================================================================================================
# Operator 1, the worked example: bias_gelu_residual(x, bias, residual) = residual + gelu(x + bias)
# ==================================================================================================

# ---- validation ----------------------------------------------------------------------------------

def check_bias_gelu_residual_inputs(x, bias, residual) -> None:
    """Raise a TypeError or ValueError that says what to do, unless the kernel can run on these
    inputs. Only metadata is read (never values), so the check costs no GPU work."""
    check_tensors(("x", x), ("bias", bias), ("residual", residual), dtypes=DTYPES)
    if x.dim() == 0:
        raise ValueError("x is a 0-dimensional tensor; bias_gelu_residual adds one bias value per "
                         "element of x's last dimension, so x needs at least one dimension "
                         "(x.reshape(1) for a single value).")
    if tuple(bias.shape) != (x.shape[-1],):
        raise ValueError(f"bias must have shape ({x.shape[-1]},), one value per element of x's last "
                         f"dimension, got {tuple(bias.shape)}.")
    if residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)} but x has {tuple(x.shape)}: the "
                         "residual is added element by element, so the shapes must be equal (no "
                         "broadcasting: expand it yourself if you mean to).")


# ---- the forward operator: validate, allocate, launch through wrap_triton ------------------------

def bias_gelu_residual_forward(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The forward operator's implementation (registered below): out = residual + gelu(x + bias)."""
    check_bias_gelu_residual_inputs(x, bias, residual)
    x_rows, residual_rows = as_rows(x), as_rows(residual)
    out = torch.empty(x_rows.shape, dtype=x.dtype, device=x.device)
    if out.numel():
        M, N = x_rows.shape
        block_m, block_n = tile_config(N)
        # wrap_triton: in eager mode the kernel just runs; under torch.compile it becomes a node
        # of the graph that Inductor can see, schedule and compile along with the rest.
        torch.library.wrap_triton(bias_gelu_residual_kernel)[(triton.cdiv(M, block_m), triton.cdiv(N, block_n))](
            x_rows, bias.contiguous(), residual_rows, out, M, N,
            x_rows.stride(0), residual_rows.stride(0), out.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
    return out.view(x.shape)


def bias_gelu_residual_fake(x, bias, residual):
    """What the operator returns, from the inputs' metadata alone: a tensor of x's shape and dtype,
    contiguous (the launcher allocates out contiguous whatever x's layout). Never launches."""
    return x.new_empty(x.shape)


# ---- the backward operator -----------------------------------------------------------------------

def bias_gelu_residual_grads(grad_out: torch.Tensor, x: torch.Tensor,
                             bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_bias) for an upstream gradient grad_out: dy * gelu'(x + bias) and its sum
    over the rows. An operator of its own, so that torch.compile sees the backward's kernels too."""
    dy_rows, x_rows = as_rows(grad_out), as_rows(x)
    M, N = x_rows.shape
    grad_x = torch.empty(x_rows.shape, dtype=x.dtype, device=x.device)
    if N == 0:
        return grad_x.view(x.shape), torch.empty(0, dtype=bias.dtype, device=x.device)
    block_m, block_n = tile_config(N)
    column_blocks = triton.cdiv(N, block_n)
    programs = backward_programs(x.device, triton.cdiv(M, block_m), column_blocks)
    partial = torch.empty((programs, N), dtype=accumulator_dtype(x.dtype), device=x.device)
    torch.library.wrap_triton(bias_gelu_residual_backward_kernel)[(programs, column_blocks)](
        dy_rows, x_rows, bias.contiguous(), grad_x, partial, M, N,
        dy_rows.stride(0), x_rows.stride(0), grad_x.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
    return grad_x.view(x.shape), column_sums(partial, bias.dtype)


def bias_gelu_residual_backward_fake(grad_out, x, bias):
    return x.new_empty(x.shape), bias.new_empty(bias.shape)


# ---- registration --------------------------------------------------------------------------------

# triton_op infers the schema from the type annotations: (Tensor x, Tensor bias, Tensor residual)
# -> Tensor. mutates_args=() promises that no input is written to (functional: torch.compile may
# reorder, repeat or drop calls). It registers the function itself as the fake; register_fake
# replaces that with one that only reads metadata, which any tensor can answer (meta tensors,
# fake tensors, and under Triton's interpreter, where wrap_triton cannot trace the kernel).
bias_gelu_residual_op = torch.library.triton_op(f"{NAMESPACE}::bias_gelu_residual", bias_gelu_residual_forward,
                                                mutates_args=())
bias_gelu_residual_op.register_fake(bias_gelu_residual_fake)
bias_gelu_residual_backward_op = torch.library.triton_op(
    f"{NAMESPACE}::bias_gelu_residual_backward", bias_gelu_residual_grads, mutates_args=())
bias_gelu_residual_backward_op.register_fake(bias_gelu_residual_backward_fake)


# ---- autograd ------------------------------------------------------------------------------------

def bias_gelu_residual_setup_context(ctx, inputs, output):
    """Runs after the forward: keep what the backward needs. gelu'(x + bias) is recomputed from x
    and bias (an exp and an erf per element are free in a memory-bound kernel; saving x + bias
    would cost a write and a read). The residual's gradient needs nothing."""
    x, bias, residual = inputs
    ctx.save_for_backward(x, bias)


def bias_gelu_residual_backward(ctx, grad_out):
    """One gradient per input of the operator, in its order (x, bias, residual)."""
    x, bias = ctx.saved_tensors
    grad_x, grad_bias = bias_gelu_residual_backward_op(grad_out, x, bias)
    # out = residual + ...: the residual's gradient is the upstream gradient itself (no kernel).
    return grad_x, grad_bias, grad_out


bias_gelu_residual_op.register_autograd(bias_gelu_residual_backward, setup_context=bias_gelu_residual_setup_context)


# ---- the public function -------------------------------------------------------------------------

def bias_gelu_residual(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual + gelu(x + bias): a linear layer's bias, its activation and the residual
    connection of a transformer block in one pass over memory.

    Args:
        x: (..., N), float32, float16, bfloat16 or float64, any layout.
        bias: (N,), x's dtype.
        residual: x's shape and dtype, any layout.

    Returns a new tensor of x's shape and dtype, contiguous. Differentiable in all three inputs;
    works under torch.compile(fullgraph=True). gelu is the exact GELU (F.gelu's default).
    Raises TypeError (dtypes, devices) or ValueError (shapes) with what to change.
    """
    return bias_gelu_residual_op(x, bias, residual)


# ==================================================================================================
# Operator 2, yours: layer_norm_gelu(x, weight, bias, eps) = gelu(layer_norm(x) * weight + bias)
# ==================================================================================================

# ---- validation ----------------------------------------------------------------------------------

def check_layer_norm_gelu_inputs(x, weight, bias, eps) -> None:
    """Raise a TypeError or ValueError that says what to do, unless the kernel can run on these
    inputs. Only metadata is read (never values)."""
    # TODO 1: check x: a tensor of a supported dtype, on the kernels' device, with rows of 1 to MAX_ROW values
    #   Hint: check_tensors(("x", x), dtypes=DTYPES) checks the type, the dtype and the device, with
    #   Hint: messages that say what to do. Then the shape: a 0-dimensional x, or an empty last dimension,
    #   Hint: has no row to normalise (ValueError); rows longer than MAX_ROW do not fit one block
    #   Hint: (ValueError naming the limit, and PyTorch's own layer_norm then gelu as the way out).
    # TODO 2: check weight and bias (each may be None) and eps
    #   Hint: a given weight or bias shares x's dtype and device (check_tensors with x first says so) and has
    #   Hint: shape (N,), N = x.shape[-1]. eps is added to the variance under a square root: a negative
    #   Hint: eps gives NaN for constant rows, so refuse it (ValueError).


# ---- the forward operator ------------------------------------------------------------------------

def affine_or_identity(weight, bias, x):
    """weight and bias, with None replaced by ones and zeros: N values cost nothing next to x, and
    keep one kernel for every case."""
    n_cols = x.shape[-1]
    weight = torch.ones(n_cols, dtype=x.dtype, device=x.device) if weight is None else weight.contiguous()
    bias = torch.zeros(n_cols, dtype=x.dtype, device=x.device) if bias is None else bias.contiguous()
    return weight, bias


def layer_norm_gelu_forward(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                            eps: float) -> torch.Tensor:
    """The forward operator's implementation: validate, allocate y, launch one program per row."""
    check_layer_norm_gelu_inputs(x, weight, bias, eps)
    x_rows = as_rows(x)
    weight, bias = affine_or_identity(weight, bias, x)
    y = torch.empty(x_rows.shape, dtype=x.dtype, device=x.device)
    if y.numel():
        block_n, num_warps = row_config(x_rows.shape[1])
        torch.library.wrap_triton(layer_norm_gelu_kernel)[(x_rows.shape[0],)](
            x_rows, y, weight, bias, x_rows.stride(0), y.stride(0), x_rows.shape[1], eps,
            BLOCK_N=block_n, num_warps=num_warps)
    return y.view(x.shape)


def layer_norm_gelu_fake(x, weight, bias, eps):
    """What layer_norm_gelu returns, from the inputs' metadata alone. Never launches."""
    # TODO 3: return an empty tensor with the shape, dtype, device and strides of the real output
    #   Hint: look at what layer_norm_gelu_forward returns: which shape, which dtype, and is it contiguous
    #   Hint: whatever x's layout? torch.empty_like(x) keeps x's strides (a transposed x gives a transposed
    #   Hint: result), so it is not the same; x.new_empty(shape) is contiguous. opcheck compares all four.
    return ...


# ---- the backward operator -----------------------------------------------------------------------

def layer_norm_gelu_grads(grad_y: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor],
                          bias: Optional[torch.Tensor], eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_x, grad_weight, grad_bias) for an upstream gradient grad_y. For a weight or bias that
    was None, the gradient of the ones or zeros that stood in for it (the caller drops it)."""
    dy_rows, x_rows = as_rows(grad_y), as_rows(x)
    weight, bias = affine_or_identity(weight, bias, x)
    M, N = x_rows.shape
    grad_x = torch.empty(x_rows.shape, dtype=x.dtype, device=x.device)
    block_n, num_warps = row_config(N)
    programs = backward_programs(x.device, M)
    partial_dtype = accumulator_dtype(x.dtype)
    dweight_partial = torch.empty((programs, N), dtype=partial_dtype, device=x.device)
    dbias_partial = torch.empty((programs, N), dtype=partial_dtype, device=x.device)
    torch.library.wrap_triton(layer_norm_gelu_backward_kernel)[(programs,)](
        dy_rows, x_rows, weight, bias, grad_x, dweight_partial, dbias_partial, M, N,
        dy_rows.stride(0), x_rows.stride(0), grad_x.stride(0), eps, BLOCK_N=block_n, num_warps=num_warps)
    return grad_x.view(x.shape), column_sums(dweight_partial, x.dtype), column_sums(dbias_partial, x.dtype)


def layer_norm_gelu_backward_fake(grad_y, x, weight, bias, eps):
    n_cols = x.shape[-1]
    return x.new_empty(x.shape), x.new_empty(n_cols), x.new_empty(n_cols)


# ---- registration --------------------------------------------------------------------------------

# TODO 4: register layer_norm_gelu_forward as the operator f"{NAMESPACE}::layer_norm_gelu", with its fake
#   Hint: follow bias_gelu_residual_op above: torch.library.triton_op(name, function, mutates_args=()),
#   Hint: then .register_fake(...) on the operator it returns. The schema comes from the annotations of
#   Hint: layer_norm_gelu_forward: Optional[torch.Tensor] becomes "Tensor?", float becomes "float".
layer_norm_gelu_op = ...
layer_norm_gelu_backward_op = torch.library.triton_op(
    f"{NAMESPACE}::layer_norm_gelu_backward", layer_norm_gelu_grads, mutates_args=())
layer_norm_gelu_backward_op.register_fake(layer_norm_gelu_backward_fake)


# ---- autograd ------------------------------------------------------------------------------------

def layer_norm_gelu_setup_context(ctx, inputs, output):
    """Runs after the forward: keep what the backward needs."""
    # TODO 5: save what the backward needs: the tensors with ctx.save_for_backward, and eps
    #   Hint: inputs is the tuple of the operator's inputs (x, weight, bias, eps). The backward kernel
    #   Hint: recomputes each row's mean and rstd from x, so it needs x itself, not the output. Tensors
    #   Hint: (None included) go through ctx.save_for_backward; a Python float can be an attribute of ctx.


def layer_norm_gelu_backward(ctx, grad_y):
    """One gradient per input of the operator, in its order (x, weight, bias, eps)."""
    # TODO 6: run the backward operator and return the four gradients
    #   Hint: ctx.saved_tensors gives back what setup_context saved, and ctx.eps the forward's eps.
    #   Hint: layer_norm_gelu_backward_op(grad_y, x, weight, bias, eps) returns (grad_x, grad_weight, grad_bias).
    #   Hint: An input that was None (weight or bias left out) and eps (a float) get None as their gradient.
    return ...


# TODO 7: register the autograd formula of layer_norm_gelu_op
#   Hint: as bias_gelu_residual_op does: op.register_autograd(backward, setup_context=...).


# ---- the public function -------------------------------------------------------------------------

def layer_norm_gelu(x: torch.Tensor, weight: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                    eps: float = 1e-5) -> torch.Tensor:
    """gelu(layer_norm(x) * weight + bias) over x's last dimension, in one pass over memory:
    F.gelu(F.layer_norm(x, (N,), weight, bias, eps)) without the normalised x ever stored.

    Args:
        x: (..., N) with 1 <= N <= 65536, float32, float16, bfloat16 or float64, any layout.
        weight, bias: (N,) of x's dtype, or None (no scale, no shift).
        eps: >= 0, added to the variance.

    Returns a new tensor of x's shape and dtype, contiguous. Differentiable in x, weight and bias;
    works under torch.compile(fullgraph=True). gelu is the exact GELU (F.gelu's default).
    Raises TypeError (dtypes, devices) or ValueError (shapes, eps) with what to change.
    """
    return layer_norm_gelu_op(x, weight, bias, eps)


# ---- the contract, for the property tests --------------------------------------------------------

def layer_norm_gelu_input_space(st):
    """Every input layer_norm_gelu promises to handle, as a Hypothesis strategy of dicts; the
    property tests draw from it. ``st`` is the module hypothesis.strategies, which the tests pass in
    (kernel.py imports only torch and triton). A dict has the keys:

        leading   tuple of the leading dimensions of x (() for a 1-D x; a 0 means no rows)
        n         the length of the rows, N
        dtype     "float32", "float16" or "bfloat16"
        layout    "contiguous", "transposed" (the transpose of an (N, rows) tensor; needs a 2-D x)
                  or "row-strided" (the first N columns of a wider tensor)
        offset    added to every value of x (its mean); x's spread is about 1
        affine    "both", "weight", "bias" or "none": which of weight and bias are given
        eps       the eps to pass
    """
    # TODO 8: describe the whole input space, edge cases included, as one strategy
    #   Hint: st.fixed_dictionaries({"n": st.integers(1, 300), ...}) draws one value per key. Reach what
    #   Hint: the validation accepts, not only the easy part: N = 1 and N not a power of two, zero rows
    #   Hint: and 3-D inputs (st.lists(...).map(tuple)), every dtype, strided layouts, means far from 0
    #   Hint: (1000, where a careless variance cancels), weight or bias left out, a large eps. Keep
    #   Hint: shapes small (a few hundred values): the interpreter runs every example.
    #   Hint: A layout that needs a 2-D x must come with one: draw the dict, then .filter(...) it.
    return ...


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
