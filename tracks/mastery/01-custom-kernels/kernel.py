"""Custom element-wise kernels that PyTorch can differentiate: SiLU, a polynomial activation, GLU
and complex multiplication, each a forward kernel, a backward kernel and the autograd glue.

Each operation follows the same pattern, the one of production kernel libraries:

    forward kernel      reads the inputs once, writes the output once
    backward kernel     reads what forward saved and the upstream gradient, writes the input
                        gradients once (the derivative is written out by hand: no autograd inside)
    autograd.Function   forward() launches the forward kernel and saves what backward needs;
                        backward() launches the backward kernel with the upstream gradient
    public function     validates the inputs, then calls Function.apply (never forward directly)

Every kernel is memory-bound: a few multiplications per element against 4 to 12 bytes moved. So
each one reads every input exactly once and the backward pass *recomputes* cheap values such as
sigmoid(x) instead of saving them (saving would cost one more write and one more read).

    silu(x)              y = x * sigmoid(x)
    poly_act(x, coeffs)  y = c0 + c1 x + c2 x^2 + c3 x^3, evaluated by Horner's rule
    glu(x, dim=-1)       split x along dim into halves a, b:  y = a * sigmoid(b)
    complex_mul(x, y)    x and y hold complex numbers as interleaved (real, imag) pairs along
                         their last dimension: z = x * y in the same layout

Arithmetic is float32 for fp32, fp16 and bf16 data; float64 data stays float64, so that
torch.autograd.gradcheck (which needs float64) can check the hand-written derivatives.

Check your work:  make check M=mastery/01-custom-kernels
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import math

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# fp32/fp16/bf16 for training, float64 for torch.autograd.gradcheck.
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# Elements per program of the flat kernels: 4 warps of 32 threads, 8 elements per thread (two
# 16-byte loads each for fp32, one for fp16). Big enough that the launch is all memory traffic.
BLOCK_SIZE = 1024
NUM_WARPS = 4


@triton.jit
def to_compute_type(x):
    """float32 for fp16, bf16 and fp32 values; float64 stays float64.

    x.dtype is known when the kernel is compiled, so this `if` is decided then: each compiled
    kernel keeps one branch and costs nothing at run time.
    """
    if x.dtype != tl.float64:
        x = x.to(tl.float32)
    return x


@triton.jit
def sigmoid(x):
    # TODO 1: return the logistic sigmoid of x, element by element
    #   Hint: sigmoid(x) = 1 / (1 + exp(-x)); tl.exp works on a whole block at once.
    #   Hint: for very negative x, exp(-x) overflows to inf and 1 / inf = 0: the right limit, no NaN.
    return ...


def _elementwise(kernel, inputs, scalars=()):
    """Launch a flat element-wise ``kernel(*inputs, out, n_elements, *scalars, BLOCK_SIZE)`` over
    contiguous tensors of one shape; returns ``out``, shaped and typed like ``inputs[0]``."""
    out = torch.empty_like(inputs[0])
    n_elements = out.numel()
    if n_elements:  # a grid of 0 programs is an error; an empty tensor needs no launch
        grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
        kernel[grid](*inputs, out, n_elements, *scalars, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
    return out


def _check_float(*named):
    check_tensors(*named, dtypes=DTYPES)


# --- SiLU (Swish) ---------------------------------------------------------------------------------


@triton.jit
def silu_forward_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # 64-bit offsets: pid * BLOCK_SIZE passes 2^31 once a tensor holds 2^31 elements.
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = to_compute_type(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    # TODO 2: compute silu(x) = x * sigmoid(x)
    #   Hint: call the sigmoid you wrote above: @triton.jit functions can call each other.
    y = ...
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def silu_backward_kernel(x_ptr, grad_y_ptr, grad_x_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = to_compute_type(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    grad_y = to_compute_type(tl.load(grad_y_ptr + offsets, mask=mask, other=0.0))
    # Recompute sigmoid(x) here rather than save it in forward: an exp per element is free in a
    # memory-bound kernel, and a saved tensor costs a write and a read of n values.
    s = sigmoid(x)
    # TODO 3: chain rule: grad_x = grad_y * d/dx [x * sigmoid(x)]
    #   Hint: the product rule: d/dx [x * s(x)] = s + x * s', and the sigmoid's derivative is s' = s * (1 - s).
    grad_x = ...
    tl.store(grad_x_ptr + offsets, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)


class SiLUFunction(torch.autograd.Function):
    """y = x * sigmoid(x), with a hand-written backward."""

    @staticmethod
    def forward(ctx, x):
        # Autograd runs forward() with gradients off: tensors made here are plain outputs.
        x = x.contiguous()  # the kernel walks memory in order; copies only if x is strided
        y = _elementwise(silu_forward_kernel, (x,))
        # TODO 4: save what backward() needs
        #   Hint: backward recomputes sigmoid(x) from x, so x alone is enough: ctx.save_for_backward(...).
        return y

    @staticmethod
    def backward(ctx, grad_y):
        # TODO 5: launch the backward kernel and return the gradient of forward()'s input
        #   Hint: ctx.saved_tensors gives back, as a tuple, what forward saved.
        #   Hint: grad_y is whatever the next operation produced: it may be a transpose, a slice or the
        #   Hint: stride-0 expansion that a sum's backward gives. The kernel walks memory in order: make it contiguous.
        return ...


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU (Swish), x * sigmoid(x), element-wise: same shape and dtype as x; differentiable."""
    _check_float(("x", x))
    # TODO 6: run the operation through autograd
    #   Hint: call SiLUFunction.apply(...), never SiLUFunction.forward(...): only apply() records the
    #   Hint: operation in autograd's graph, so that backward() runs when a gradient flows back.
    return ...


# --- Polynomial activation ------------------------------------------------------------------------


@triton.jit
def poly_act_forward_kernel(x_ptr, y_ptr, n_elements, c0, c1, c2, c3, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = to_compute_type(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    # TODO 7: evaluate c0 + c1 x + c2 x^2 + c3 x^3 by Horner's rule
    #   Hint: nest it from the highest power: c0 + x * (c1 + x * (...)). Three multiplications and three
    #   Hint: additions, no powers, and less rounding than adding up c_k * x^k term by term.
    y = ...
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def poly_act_backward_kernel(x_ptr, grad_y_ptr, grad_x_ptr, n_elements, c0, c1, c2, c3,
                             BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = to_compute_type(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    grad_y = to_compute_type(tl.load(grad_y_ptr + offsets, mask=mask, other=0.0))
    # TODO 8: chain rule: grad_x = grad_y * the polynomial's derivative, by Horner's rule again
    #   Hint: the power rule: d/dx c_k x^k = k c_k x^(k-1), so the derivative is c1 + 2 c2 x + 3 c3 x^2 (c0 drops out).
    grad_x = ...
    tl.store(grad_x_ptr + offsets, grad_x.to(grad_x_ptr.dtype.element_ty), mask=mask)


class PolyActFunction(torch.autograd.Function):
    """y = c0 + c1 x + c2 x^2 + c3 x^3 for four Python floats (constants: no gradient for them)."""

    @staticmethod
    def forward(ctx, x, coeffs):
        x = x.contiguous()
        y = _elementwise(poly_act_forward_kernel, (x,), coeffs)
        # TODO 9: keep what backward() needs: the input tensor, and the coefficients
        #   Hint: tensors go through ctx.save_for_backward; plain Python values can be stored as
        #   Hint: attributes of ctx (ctx.coeffs = ...).
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        grad_x = _elementwise(poly_act_backward_kernel, (x, grad_y.contiguous()), ctx.coeffs)
        # TODO 10: return one gradient per input of forward() (after ctx)
        #   Hint: forward took x and coeffs; coeffs are Python floats, not tensors: their gradient is None.
        return ...


def _four_coefficients(coeffs) -> tuple[float, float, float, float]:
    """(c0, c1, c2, c3) from 1 to 4 Python numbers (missing high powers are 0), as floats."""
    if not isinstance(coeffs, (tuple, list)) or not 1 <= len(coeffs) <= 4:
        raise ValueError(f"coeffs must be a tuple of 1 to 4 numbers (c0, c1, c2, c3) for "
                         f"c0 + c1 x + c2 x^2 + c3 x^3, got {coeffs!r}.")
    values = []
    for k, c in enumerate(coeffs):
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
            raise ValueError(f"coeffs[{k}] is {c!r}; each coefficient must be a finite Python float "
                             "(a tensor's value would have to leave the GPU: pass float(c)).")
        values.append(float(c))
    # Always four floats, so that one compiled kernel serves every degree: Triton compiles a kernel
    # again for an argument that changes type (int vs float) or equals 1.
    return tuple(values + [0.0] * (4 - len(values)))


def poly_act(x: torch.Tensor, coeffs) -> torch.Tensor:
    """c0 + c1 x + c2 x^2 + c3 x^3 element-wise, coeffs = (c0, c1, c2, c3) Python floats (1 to 4 of
    them: missing high powers are 0). Same shape and dtype as x; differentiable in x."""
    _check_float(("x", x))
    return PolyActFunction.apply(x, _four_coefficients(coeffs))


# --- GLU (gated linear unit) -----------------------------------------------------------------------
#
# x, made contiguous, is viewed as rows of 2 * half_len elements: everything before `dim` counts
# rows, and one row holds the two halves of dim with everything after dim inside each half:
#
#     row r of x:   [ a: half_len elements | b: half_len elements ]
#     row r of y:   [ a * sigmoid(b): half_len elements          ]
#
# half_len = (x.shape[dim] // 2) * (product of the sizes after dim); for dim = -1 it is the last
# size // 2. A program handles BLOCK_SIZE columns of one row, so the row is one division per
# program, not one per element.


@triton.jit
def glu_forward_kernel(x_ptr, y_ptr, half_len, BLOCK_SIZE: tl.constexpr):
    blocks_per_row = tl.cdiv(half_len, BLOCK_SIZE)
    pid = tl.program_id(axis=0).to(tl.int64)
    row = pid // blocks_per_row
    cols = (pid % blocks_per_row) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < half_len
    # TODO 11: point at this row's first half (a) and second half (b) in x
    #   Hint: rows of x are 2 * half_len elements apart; b starts half_len elements after a.
    a_ptrs = ...
    b_ptrs = ...
    a = to_compute_type(tl.load(a_ptrs, mask=mask, other=0.0))
    b = to_compute_type(tl.load(b_ptrs, mask=mask, other=0.0))
    # TODO 12: compute the gated output
    #   Hint: the first half carries the values, the second half gates them through a sigmoid.
    y = ...
    tl.store(y_ptr + row * half_len + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def glu_backward_kernel(x_ptr, grad_y_ptr, grad_x_ptr, half_len, BLOCK_SIZE: tl.constexpr):
    blocks_per_row = tl.cdiv(half_len, BLOCK_SIZE)
    pid = tl.program_id(axis=0).to(tl.int64)
    row = pid // blocks_per_row
    cols = (pid % blocks_per_row) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < half_len
    a_offsets = row * 2 * half_len + cols
    b_offsets = a_offsets + half_len
    a = to_compute_type(tl.load(x_ptr + a_offsets, mask=mask, other=0.0))
    b = to_compute_type(tl.load(x_ptr + b_offsets, mask=mask, other=0.0))
    grad_y = to_compute_type(tl.load(grad_y_ptr + row * half_len + cols, mask=mask, other=0.0))
    s = sigmoid(b)
    # TODO 13: the gradients of y = a * sigmoid(b) with respect to a and to b
    #   Hint: d/da = sigmoid(b); d/db = a * sigmoid'(b) = a * s * (1 - s). Multiply each by grad_y.
    grad_a = ...
    grad_b = ...
    # TODO 14: store both halves of grad_x, each where its half of x came from
    #   Hint: grad_x has x's layout: grad_a goes to a's offsets and grad_b to b's, in grad_x's dtype.


def _glu_launch(kernel, x, dim, out, *inputs):
    """Launch a GLU kernel on contiguous x split along dim (the other operands as given)."""
    # TODO 15: the distance between the two halves of a row, in elements
    #   Hint: a row holds x.shape[dim] slices of size (product of the sizes after dim), so each half of a
    #   Hint: row is x.shape[dim] // 2 of them. math.prod(x.shape[dim + 1:]) is that product (1 for the last dim).
    half_len = ...
    if out.numel() == 0:
        return out
    n_rows = x.numel() // (2 * half_len)
    block = min(BLOCK_SIZE, triton.next_power_of_2(half_len))
    grid = (n_rows * triton.cdiv(half_len, block),)
    kernel[grid](x, *inputs, out, half_len, BLOCK_SIZE=block, num_warps=max(1, min(NUM_WARPS, block // 256)))
    return out


class GLUFunction(torch.autograd.Function):
    """y = a * sigmoid(b) for the halves a, b of x along dim."""

    @staticmethod
    def forward(ctx, x, dim):
        x = x.contiguous()
        out_shape = list(x.shape)
        out_shape[dim] //= 2
        y = _glu_launch(glu_forward_kernel, x, dim, torch.empty(out_shape, dtype=x.dtype, device=x.device))
        # TODO 16: save what backward() needs
        #   Hint: both halves of x (that is, x itself) as a tensor, and dim as a plain attribute of ctx.
        return y

    @staticmethod
    def backward(ctx, grad_y):
        # TODO 17: launch the backward kernel; return the gradient of x, and None for dim
        #   Hint: grad_x has x's shape and dtype (torch.empty_like(x)); its kernel writes both halves.
        #   Hint: pass grad_y.contiguous(): the kernel assumes y's packed layout.
        return ...


def glu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Gated linear unit: split x along dim into halves a, b and return a * sigmoid(b), as
    torch.nn.functional.glu does. dim must have an even size; differentiable in x."""
    _check_float(("x", x))
    if x.dim() == 0:
        raise ValueError("x is a 0-dimensional tensor; glu splits a dimension in two halves, so x "
                         "needs at least one dimension.")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for a tensor of {x.dim()} dimensions "
                         f"(use -{x.dim()} to {x.dim() - 1}).")
    dim %= x.dim()
    if x.shape[dim] % 2:
        raise ValueError(f"glu splits dim {dim} of x (shape {tuple(x.shape)}) in two equal halves, but "
                         f"its size {x.shape[dim]} is odd: give it an even size.")
    return GLUFunction.apply(x, dim)


# --- Complex multiplication on interleaved (real, imag) pairs --------------------------------------
#
# Memory holds  re0 im0 re1 im1 re2 im2 ...  A program loads BLOCK_PAIRS pairs as one contiguous
# (BLOCK_PAIRS, 2) block (every byte of the cache lines it touches is used), then tl.split takes
# the block apart into its real and imaginary columns, and tl.join puts two columns back together.


@triton.jit
def complex_times(ar, ai, br, bi):
    """(ar + i ai) * (br + i bi), as its real and imaginary parts."""
    # TODO 18: multiply the two complex numbers
    #   Hint: expand (ar + i ai)(br + i bi) with i^2 = -1 and group the real and the imaginary terms.
    return ..., ...


@triton.jit
def complex_mul_forward_kernel(x_ptr, y_ptr, z_ptr, n_elements, BLOCK_PAIRS: tl.constexpr):
    pairs = tl.program_id(axis=0).to(tl.int64) * BLOCK_PAIRS + tl.arange(0, BLOCK_PAIRS)
    # Element offsets of a (BLOCK_PAIRS, 2) block: row p holds pair p's real and imaginary parts.
    offsets = 2 * pairs[:, None] + tl.arange(0, 2)[None, :]
    mask = offsets < n_elements
    x = to_compute_type(tl.load(x_ptr + offsets, mask=mask, other=0.0))
    y = to_compute_type(tl.load(y_ptr + offsets, mask=mask, other=0.0))
    # TODO 19: take the blocks apart into real and imaginary parts, multiply, and put the result together
    #   Hint: tl.split(block) splits a last dimension of size 2 into two blocks: (real, imag).
    #   Hint: tl.join(real, imag) is its inverse, a (BLOCK_PAIRS, 2) block again, ready to store.
    z = ...
    tl.store(z_ptr + offsets, z.to(z_ptr.dtype.element_ty), mask=mask)


@triton.jit
def complex_mul_backward_kernel(x_ptr, y_ptr, grad_z_ptr, grad_x_ptr, grad_y_ptr, n_elements,
                                BLOCK_PAIRS: tl.constexpr):
    pairs = tl.program_id(axis=0).to(tl.int64) * BLOCK_PAIRS + tl.arange(0, BLOCK_PAIRS)
    offsets = 2 * pairs[:, None] + tl.arange(0, 2)[None, :]
    mask = offsets < n_elements
    x_re, x_im = tl.split(to_compute_type(tl.load(x_ptr + offsets, mask=mask, other=0.0)))
    y_re, y_im = tl.split(to_compute_type(tl.load(y_ptr + offsets, mask=mask, other=0.0)))
    g_re, g_im = tl.split(to_compute_type(tl.load(grad_z_ptr + offsets, mask=mask, other=0.0)))
    # z_re = x_re y_re - x_im y_im and z_im = x_re y_im + x_im y_re, so for instance
    # dL/dx_re = g_re * dz_re/dx_re + g_im * dz_im/dx_re = g_re y_re + g_im y_im: the real part of
    # g * conj(y). Each input's gradient is the upstream gradient times the *conjugate* of the other.
    # TODO 20: the gradients of z = x * y with respect to x and to y, each as (real, imag)
    #   Hint: grad_x = g * conj(y) and grad_y = g * conj(x); conj(a + i b) = a - i b. complex_times helps.
    gx_re, gx_im = ..., ...
    gy_re, gy_im = ..., ...
    tl.store(grad_x_ptr + offsets, tl.join(gx_re, gx_im).to(grad_x_ptr.dtype.element_ty), mask=mask)
    tl.store(grad_y_ptr + offsets, tl.join(gy_re, gy_im).to(grad_y_ptr.dtype.element_ty), mask=mask)


# Pairs per program: BLOCK_SIZE elements, as in the flat kernels.
BLOCK_PAIRS = BLOCK_SIZE // 2


def _pairs_grid(n_elements):
    return (triton.cdiv(n_elements // 2, BLOCK_PAIRS),)


class ComplexMulFunction(torch.autograd.Function):
    """z = x * y on interleaved complex data."""

    @staticmethod
    def forward(ctx, x, y):
        x, y = x.contiguous(), y.contiguous()
        z = torch.empty_like(x)
        if z.numel():
            complex_mul_forward_kernel[_pairs_grid(z.numel())](x, y, z, z.numel(), BLOCK_PAIRS=BLOCK_PAIRS,
                                                              num_warps=NUM_WARPS)
        ctx.save_for_backward(x, y)
        return z

    @staticmethod
    def backward(ctx, grad_z):
        x, y = ctx.saved_tensors
        grad_x, grad_y = torch.empty_like(x), torch.empty_like(y)
        n_elements = x.numel()
        # TODO 21: launch the backward kernel and return both gradients
        #   Hint: launch it like the forward kernel (grid _pairs_grid(n_elements), BLOCK_PAIRS=BLOCK_PAIRS), with
        #   Hint: grad_z.contiguous(); it writes grad_x and grad_y. forward() took two tensors: return two gradients.
        return ...


def complex_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Element-wise complex product of x and y, which hold complex numbers as interleaved
    (real, imag) pairs along their last dimension: shape (..., 2 * N), which includes (..., N, 2)
    (torch.view_as_real's layout). Returns z in the same layout, shape and dtype; differentiable
    in x and in y."""
    _check_float(("x", x), ("y", y))
    if x.shape != y.shape:
        raise ValueError(f"x has shape {tuple(x.shape)} but y has {tuple(y.shape)}: complex_mul "
                         "multiplies pairs element by element, so give both the same shape.")
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"x and y have shape {tuple(x.shape)}, but interleaved complex data needs "
                         "an even last dimension: (real, imag) pairs, as in (..., 2 * N) or (..., N, 2).")
    return ComplexMulFunction.apply(x, y)


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
