"""Typical mistakes in fused kernels, planted into the reference by the course's suite."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("eps added outside the square root",
            "rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + eps)",
            "rstd = 1.0 / (tl.sqrt(tl.sum(centred * centred, axis=0) / N) + eps)",
            cause=r"matches what eps added outside the square root"),
    Mistake("gelu computed with the tanh approximation",
            "x = x * gaussian_cdf(x)",
            "x = x * sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))",
            cause=r"matches what the other GELU .* gives"),
    Mistake("gelu_tanh computed with the exact erf form",
            "x = x * sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))",
            "x = x * gaussian_cdf(x)",
            cause=r"matches what the other GELU .* gives"),
    Mistake("activation applied before the weight and bias",
            "y = activate(x_hat * weight + bias, ACTIVATION)",
            "y = activate(x_hat, ACTIVATION) * weight + bias",
            cause=r"after the weight and bias|act\(bias\)"),
    Mistake("padding lanes not zeroed after centring",
            "centred = tl.where(mask, shifted - shifted_mean, 0.0)",
            "centred = shifted - shifted_mean",
            cause=r"padding lanes|power of two"),
    Mistake("epilogue adds the bias after the activation",
            "acc = activate(acc + bias[None, :], ACTIVATION)",
            "acc = activate(acc, ACTIVATION) + bias[None, :]",
            cause=r"adds the bias to the accumulator, then"),
    Mistake("prologue does not subtract the row's mean",
            "a_hat = (a.to(tl.float32) - mean[:, None]) * rstd[:, None]",
            "a_hat = a.to(tl.float32) * rstd[:, None]",
            cause=r"x - mean"),
    Mistake("prologue leaves out ln_weight",
            "a = a_hat * gamma[None, :] + beta[None, :]",
            "a = a_hat + beta[None, :]",
            cause=r"scaled by ln_weight"),
    Mistake("linear's bias read as if contiguous: the wrapper's .contiguous() left out",
            "    bias = bias.contiguous()\n", "",
            cause=r"stride 2"),
    Mistake("ln_weight and ln_bias read as if contiguous",
            "        ln_weight, ln_bias = ln_weight.contiguous(), ln_bias.contiguous()\n",
            "        pass\n",
            cause=r"stride 2"),
    Mistake("layer_norm_act's weight and bias read as if contiguous",
            "    weight = _or_constant(weight, n_cols, 1.0, x).contiguous()\n"
            "    bias = _or_constant(bias, n_cols, 0.0, x).contiguous()\n",
            "    weight = _or_constant(weight, n_cols, 1.0, x)\n"
            "    bias = _or_constant(bias, n_cols, 0.0, x)\n",
            cause=r"stride 2"),
    Mistake("K mask off by one in the matmul loop (<=): one lane past K is read",
            "k_mask = offs_k < K - k", "k_mask = offs_k <= K - k",
            cause=r"lanes past the end: mask them|past the end of `(x|w)t?_ptr`.*check the mask",
            interpreter_only="the extra lane reads past the end of x or the weight: on a GPU whatever memory lies "
                             "there decides the symptom, so only the interpreter shows it the same way each run"),
    # A narrow kill under the interpreter (one element per long-K case is past the fp16 tolerance);
    # a GPU's fp16 MMA rounds after every 16-wide step, more often than the interpreter does.
    Mistake("matmul accumulator kept in the inputs' 16-bit dtype",
            "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    for k in",
            "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=w_ptr.dtype.element_ty)\n    for k in",
            # on a GPU the compiler refuses the loop, whose accumulator turns fp32 after a tl.dot
            cause=r"accumulator must be float32|must keep one dtype"),
]
