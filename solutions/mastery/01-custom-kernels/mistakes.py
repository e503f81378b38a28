"""Typical mistakes in hand-written element-wise kernels and their derivatives, planted into the
reference by the course's suite."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("SiLU derivative without the product rule (only sigmoid(x))",
            "grad_x = grad_y * s * (1.0 + x * (1.0 - s))", "grad_x = grad_y * s",
            cause=r"product rule"),
    Mistake("polynomial derivative without the power rule's factors",
            "slope = c1 + x * (2.0 * c2 + x * (3.0 * c3))", "slope = c1 + x * (c2 + x * c3)",
            cause=r"power rule"),
    Mistake("GLU halves taken size // 2 apart whatever the dimension",
            "half_len = x.shape[dim] // 2 * math.prod(x.shape[dim + 1:])", "half_len = x.shape[dim] // 2",
            cause=r"later sizes"),
    Mistake("complex gradient without the conjugate",
            "gx_re, gx_im = complex_times(g_re, g_im, y_re, -y_im)",
            "gx_re, gx_im = complex_times(g_re, g_im, y_re, y_im)",
            cause=r"conjugate"),
    Mistake("upstream gradient passed to the kernel as it came (not contiguous)",
            "silu_backward_kernel, (x, grad_y.contiguous())", "silu_backward_kernel, (x, grad_y)",
            cause=r"contiguous"),
    Mistake("sigmoid written as exp(x) / (1 + exp(x)), which is inf / inf for large x",
            "return 1.0 / (1.0 + tl.exp(-x))", "return tl.exp(x) / (1.0 + tl.exp(x))",
            cause=r"overflowed.*inf / inf"),
    Mistake("GLU's halves swapped: the first half gates the second",
            "    y = a * sigmoid(b)\n", "    y = b * sigmoid(a)\n",
            cause=r"which tensor each pointer points to"),
    Mistake("GLU's gate gradient without the factor a",
            "grad_b = grad_y * a * s * (1.0 - s)", "grad_b = grad_y * s * (1.0 - s)",
            cause=r"grad_b = grad_y \* a \* s"),
    Mistake("complex_mul's grid rounded down (pairs // BLOCK_PAIRS)",
            "return (triton.cdiv(n_elements // 2, BLOCK_PAIRS),)", "return (n_elements // 2 // BLOCK_PAIRS,)",
            cause=r"use triton\.cdiv"),
    Mistake("SiLU computed in the input's 16-bit dtype: no upcast before tl.exp",
            "    x = to_compute_type(tl.load(x_ptr + offsets, mask=mask, other=0.0))\n    # TODO: compute silu(x)",
            "    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)\n    # TODO: compute silu(x)",
            cause=r"Expected dtype \[.*fp32.*fp64.*\] but got (fp16|bf16)"),
]
