"""Typical mistakes of each part of 04-training-kernels (the backward passes, the optimizer step, the
selective scan), planted into the reference by the course's suite; each part lists at least five."""

from grader.authoring.mistakes import Mistake

# Part 1, the backward passes
MISTAKES = [
    Mistake("RMSNorm dx without the correction term (rstd treated as a constant)",
            "dx = (grad_x_hat - x_hat * correction) * rstd", "dx = grad_x_hat * rstd",
            cause=r"correction term"),
    Mistake("RMSNorm correction averaged over the block instead of the row",
            "correction = tl.sum(grad_x_hat * x_hat, axis=0) / n_cols",
            "correction = tl.sum(grad_x_hat * x_hat, axis=0) / BLOCK_N",
            cause=r"power of two|correction term"),
    Mistake("partial dweight overwritten by each row instead of accumulated",
            "        partial_dw += dy * x_hat\n        # END TODO\n    # TODO: write",
            "        partial_dw = dy * x_hat\n        # END TODO\n    # TODO: write",
            cause=r"partial sums|several rows"),
    Mistake("LayerNorm dx without the mean of grad_x_hat",
            "dx = (grad_x_hat - mean_grad - x_hat * mean_grad_x_hat) * rstd",
            "dx = (grad_x_hat - x_hat * mean_grad_x_hat) * rstd",
            cause=r"through the mean"),
    Mistake("LayerNorm dbias summed from dy * x_hat",
            "        partial_db += dy\n", "        partial_db += dy * x_hat\n",
            cause=r"sums of dy over"),
    Mistake("SwiGLU dgate with the sigmoid's derivative left out",
            "dgate = dy * up * sigmoid * (1.0 + gate * (1.0 - sigmoid))", "dgate = dy * up * sigmoid",
            cause=r"d silu\(g\) / dg"),
    Mistake("dropout backward draws a new mask",
            "dx = launch_dropout(dy.contiguous(), ctx.p, ctx.seed)",
            "dx = launch_dropout(dy.contiguous(), ctx.p, ctx.seed + 1)",
            cause=r"backward dropped other elements"),
    Mistake("dropout keeps an element with probability p",
            "return uniform >= p", "return uniform < p",
            cause=r"keep rate"),
    Mistake("dropout's random numbers drawn from the lane, not the element",
            "keep = dropout_keep(seed, block_start, p, BLOCK)", "keep = dropout_keep(seed, 0, p, BLOCK)",
            cause=r"repeats every"),
    Mistake("kept elements not scaled by 1 / (1 - p)",
            "tl.where(keep, x * scale, 0.0)", "tl.where(keep, x, 0.0)",
            cause=r"neither 0 nor"),
    Mistake("ReLU as tl.maximum(x, 0.0), which turns NaN into 0",
            "tl.where(x <= 0, 0.0, x).to(y_ptr.dtype.element_ty)", "tl.maximum(x, 0.0).to(y_ptr.dtype.element_ty)",
            cause=r"torch\.relu keeps it"),
]

# Part 2, the optimizer step. adamw_block's body, from the weight decay to the step:
_ADAMW_BLOCK = """\
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
"""
MISTAKES += [
    Mistake("AdamW without bias correction",
            "bias_correction1 = 1.0 - beta1 ** step\n    bias_correction2 = 1.0 - beta2 ** step",
            "bias_correction1 = 1.0\n    bias_correction2 = 1.0",
            cause=r"bias correction"),
    Mistake("weight decay as an L2 penalty on the gradient (Adam, not AdamW)",
            "param = param * (1.0 - lr * weight_decay)",
            "grad = grad + weight_decay * param",
            cause=r"decoupled"),
    Mistake("Nesterov momentum ignored",
            "        if NESTEROV:\n            grad = grad + momentum * buffer\n        else:\n"
            "            grad = buffer",
            "        grad = buffer",
            cause=r"nesterov"),
    Mistake("NaN not detected: only inf compared",
            'not_finite = ~(tl.abs(grad) < float("inf"))',
            'not_finite = tl.abs(grad) == float("inf")',
            cause=r"\bNaN\b"),
    Mistake("AdamW bias corrections of the first step at every step (step left out of the power)",
            "bias_correction1 = 1.0 - beta1 ** step\n    bias_correction2 = 1.0 - beta2 ** step",
            "bias_correction1 = 1.0 - beta1\n    bias_correction2 = 1.0 - beta2",
            cause=r"bias correction"),
    Mistake("AdamW eps inside the square root",
            "denom = tl.sqrt(exp_avg_sq) / bias_correction2_sqrt + eps",
            "denom = tl.sqrt(exp_avg_sq + eps) / bias_correction2_sqrt",
            cause=r"sqrt\(v\) / sqrt\(1 - beta2 \*\* step\)"),
    Mistake("AdamW weight decay applied after the update instead of before it",
            _ADAMW_BLOCK, _ADAMW_BLOCK.replace("    param = param * (1.0 - lr * weight_decay)\n", "").replace(
                "param = param - step_size * exp_avg / denom",
                "param = (param - step_size * exp_avg / denom) * (1.0 - lr * weight_decay)"),
            cause=r"decoupled"),
    Mistake("SGD reads the momentum buffer at the first step instead of starting it from the gradient",
            "        if FIRST_STEP:\n            buffer = grad\n        else:\n"
            "            buffer = tl.load(buffer_ptr + offsets, mask=mask, other=0.0)\n"
            "            buffer = momentum * buffer + (1.0 - dampening) * grad\n",
            "        buffer = tl.load(buffer_ptr + offsets, mask=mask, other=0.0)\n"
            "        buffer = momentum * buffer + (1.0 - dampening) * grad\n",
            cause=r"first step"),
    Mistake("gradients divided by inv_scale instead of multiplied",
            "(grad * inv_scale).to(GRAD_DTYPE)", "(grad / inv_scale).to(GRAD_DTYPE)",
            cause=r"scale factor is off"),
    Mistake("SGD dampens the gradient at the first step too",
            "        if FIRST_STEP:\n            buffer = grad\n",
            "        if FIRST_STEP:\n            buffer = (1.0 - dampening) * grad\n",
            cause=r"first step|buffer = grad"),
    Mistake("found_inf written by every program, 0.0 where its chunk was finite",
            "    tl.store(found_inf_ptr, 1.0, mask=any_bad > 0)",
            "    tl.store(found_inf_ptr, (any_bad > 0).to(tl.float32))",
            cause=r"never write 0\.0|any tensor"),
    Mistake("found_inf started afresh for each dtype's launch",
            "    for dtype, (group,) in _by_dtype(grads):\n        addresses",
            "    for dtype, (group,) in _by_dtype(grads):\n"
            "        found_inf = torch.zeros(1, dtype=torch.float32, device=inv_scale.device)\n        addresses",
            cause=r"never write 0\.0|any tensor"),
]

# Part 3, the selective scan
MISTAKES += [
    Mistake("reverse scan does not pass dh back through the decay",
            "dh = dh * decay", "dh = dh",
            cause=r"exp\(dt \* A\)"),
    Mistake("softplus computed as log(1 + exp(x)), which overflows above 88",
            "dt = tl.maximum(raw, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(raw)))", "dt = tl.log(1.0 + tl.exp(raw))",
            cause=r"overflow"),
    Mistake("backward replays each chunk from a zero state instead of the state saved before it",
            "h = tl.load(states_ptr + state_row + chunk * n_state, mask=dn_mask, other=0.0)",
            "h = tl.zeros((BLOCK_D, BLOCK_N), dtype=COMPUTE)",
            # L is the last axis of (batch, dim, L): the columns from the second chunk on are wrong
            cause=r"only columns [1-9][0-9]*\.\.[0-9]+ are wrong"),
    Mistake("the skip term D * u left out of the forward output",
            "            if HAS_D:\n                y += D * u\n            if HAS_Z:\n",
            "            if HAS_Z:\n",
            cause=r"only out depends on: the forward"),
    Mistake("the gate z applied as sigmoid(z) instead of silu(z)",
            "y = y * z * tl.sigmoid(z)", "y = y * tl.sigmoid(z)",
            cause=r"only out depends on: the forward"),
    Mistake("the reverse scan walks each chunk forwards",
            "t = t_end - 1 - step_from_end", "t = t_start + step_from_end",
            cause=r"on to step t - 1"),
]
