"""Typical mistakes in turning a kernel into an operator (validation, autograd registration),
planted into the reference by the course's suite. A mistake that makes the call raise is named by
the error itself (PyTorch's, or the planted validation's); the others by the output notes and the
case hints. Mistakes in the fake and in the registration itself show in the pytest functions
(opcheck, meta tensors, the schema), which this suite does not run: the README's "Common errors"
lists them."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("weight and bias gradients returned in the wrong order",
            "return (grad_x, grad_weight if weight is not None else None, grad_bias if bias is not None else None,",
            "return (grad_x, grad_bias if bias is not None else None, grad_weight if weight is not None else None,",
            cause=r"in the order of the op's inputs"),
    Mistake("the backward uses a default eps instead of the forward's",
            "layer_norm_gelu_backward_op(grad_y, x, weight, bias, ctx.eps)",
            "layer_norm_gelu_backward_op(grad_y, x, weight, bias, 1e-5)",
            cause=r"the forward's eps"),
    Mistake("setup_context saves the output instead of the input x",
            "ctx.save_for_backward(x, weight, bias)", "ctx.save_for_backward(output, weight, bias)",
            cause=r"the input x, not the output"),
    # The same two mistakes written elsewhere: the outputs' values name them (the test's suspects).
    Mistake("the backward's three results unpacked with grad_weight and grad_bias swapped",
            "grad_x, grad_weight, grad_bias = layer_norm_gelu_backward_op(",
            "grad_x, grad_bias, grad_weight = layer_norm_gelu_backward_op(",
            cause=r"returns grad_bias in grad_weight's place"),
    Mistake("setup_context keeps the default eps instead of the forward's",
            "    ctx.eps = eps\n", "    ctx.eps = 1e-5\n",
            cause=r"eps = 1e-5 \(the default\) instead of the forward's eps"),
    Mistake("validation refuses non-contiguous x, which the operator handles",
            "    n_cols = x.shape[-1]\n    if n_cols > MAX_ROW:",
            "    if not x.is_contiguous():\n"
            "        raise ValueError(\"x must be contiguous: call x.contiguous() first.\")\n"
            "    n_cols = x.shape[-1]\n    if n_cols > MAX_ROW:",
            cause=r"x must be contiguous"),
    Mistake("a gradient for a weight or bias that was None",
            "return (grad_x, grad_weight if weight is not None else None, grad_bias if bias is not None else None,",
            "return (grad_x, grad_weight, grad_bias,",
            cause=r"gradient different than None"),
    # The next four are named by where the diagnosis sends the learner: the output that is right
    # (y, or the gradients) rules out one kernel and points at the other.
    Mistake("GELU's erf argument multiplied by sqrt(2) instead of divided by it",
            "return 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))",
            "return 0.5 * z * (1.0 + tl.erf(z * 1.4142135623730951))",
            cause=r"only y depends on: the forward"),
    Mistake("GELU's derivative without the product rule's z * phi(z) term",
            "return cdf + z * density", "return cdf",
            cause=r"y is right, so look at what only grad_x and grad_weight and grad_bias depend on"),
    Mistake("the padding lanes left in the centred row, so the variance sums them",
            "centred = tl.where(mask, shifted - shifted_mean, 0.0)", "centred = shifted - shifted_mean",
            cause=r"not a power of two long.*lanes past the end"),
    Mistake("layer norm's dx without the x_hat * mean(g * x_hat) term",
            "dx = rstd * (g - tl.sum(g, axis=0) / N - x_hat * (tl.sum(g * x_hat, axis=0) / N))",
            "dx = rstd * (g - tl.sum(g, axis=0) / N)",
            cause=r"only grad_x depends on: the backward"),
    Mistake("the variance without eps: 1 / sqrt(0) on a constant row",
            "rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + tl.cast(eps, x.dtype))",
            "rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N)",
            cause=r"eps is as large as the variance"),
]
