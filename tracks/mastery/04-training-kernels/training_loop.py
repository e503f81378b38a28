"""A short mixed-precision training loop built from this module's kernels (given code).

Meant to live beside kernel.py as tracks/mastery/04-training-kernels/training_loop.py: the
public tests and the notebook run it. It is not a kernel file (it computes a loss, draws data and
calls PyTorch's optimizer for comparison), so it is not part of what a learner submits.

    x -> rms_norm -> linear (d -> 2h) -> silu_and_mul -> linear (h -> d) -> y,  loss = mse(y, target)

bf16 compute, fp32 master weights. Every step casts the fp32 master weights to bf16, runs the
forward and backward passes in bf16 (float32 accumulation inside each kernel), turns the bf16
gradients into float32, unscales them (the loss was multiplied by a loss scale, as
torch.amp.GradScaler does) and updates the fp32 master weights with AdamW. A bf16 weight could
not take the update itself: the bf16 numbers next to 1.0 are 1/256 below and 1/128 above it, so
a step of 1e-3 rounds away; the fp32 master copy keeps it.

``train_tiny_mlp(kernels)`` runs the loop with the Triton kernels of ``kernels`` (a loaded
kernel.py: its rms_norm, silu_and_mul, LoopLinear, unscale_grads and adamw); ``train_tiny_mlp(None)``
runs the very same loop in plain PyTorch (torch.matmul, torch.optim.AdamW), from the same weights
and batches, to compare the loss curves with.
"""

import math

import torch
import torch.nn.functional as F

HYPERPARAMETERS = dict(lr=3e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2)


def rms_norm(kernels, x, weight, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) * weight, in x's dtype: kernels.rms_norm (this module's kernel,
    with its backward) when ``kernels`` has it, else PyTorch (float32 inside)."""
    if getattr(kernels, "rms_norm", None) is not None:
        return kernels.rms_norm(x, weight, eps)
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def silu_and_mul(kernels, gate_up):
    """silu(gate) * up for gate_up = [gate | up] along the last dimension, in its dtype:
    kernels.silu_and_mul when ``kernels`` has it, else PyTorch (float32 inside)."""
    if getattr(kernels, "silu_and_mul", None) is not None:
        return kernels.silu_and_mul(gate_up)
    gate, up = gate_up.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(gate_up.dtype)


def problem(seed=0, d_model=32, hidden=64, batch=16, steps=30, where="cpu"):
    """Initial fp32 weights [norm scale, w_in, w_out] and one batch (x, target) per step of a
    regression task: fit a fixed random two-layer tanh network."""
    generator = torch.Generator().manual_seed(seed)
    weights = [torch.ones(d_model),
               torch.randn(d_model, 2 * hidden, generator=generator) / math.sqrt(d_model),
               torch.randn(hidden, d_model, generator=generator) / math.sqrt(hidden)]
    teacher_1 = torch.randn(d_model, d_model, generator=generator) / math.sqrt(d_model)
    teacher_2 = torch.randn(d_model, d_model, generator=generator) / math.sqrt(d_model)
    batches = []
    for _ in range(steps):
        x = torch.randn(batch, d_model, generator=generator)
        batches.append((x.to(where), (torch.tanh(2 * x @ teacher_1) @ teacher_2).to(where)))
    return [w.to(where) for w in weights], batches


def train_tiny_mlp(kernels=None, steps=30, seed=0, loss_scale=1024.0, where=None, **sizes):
    """Train the model for ``steps`` steps and return the loss of every step (Python floats).

    ``kernels``: the loaded kernel.py whose kernels run the loop; None runs it in PyTorch.
    ``sizes``: d_model, hidden, batch (see ``problem``)."""
    where = torch.device(where or ("cuda" if torch.cuda.is_available() else "cpu"))
    if where.type == "cpu":  # tensors this small run faster on one CPU thread than on several
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _train(kernels, steps, seed, loss_scale, where, sizes)
        finally:
            torch.set_num_threads(threads)
    return _train(kernels, steps, seed, loss_scale, where, sizes)


def _train(kernels, steps, seed, loss_scale, where, sizes):
    master, batches = problem(seed, steps=steps, where=where, **sizes)
    if kernels is None:
        matmul = torch.matmul
        optimizer = torch.optim.AdamW(master, lr=HYPERPARAMETERS["lr"],
                                      betas=(HYPERPARAMETERS["beta1"], HYPERPARAMETERS["beta2"]),
                                      eps=HYPERPARAMETERS["eps"], weight_decay=HYPERPARAMETERS["weight_decay"])
    else:
        matmul = kernels.LoopLinear.apply
        exp_avgs = [torch.zeros_like(w) for w in master]
        exp_avg_sqs = [torch.zeros_like(w) for w in master]
    inv_scale = torch.full((1,), 1.0 / loss_scale, device=where)
    losses, updates = [], 0
    for x, target in batches:
        norm_w, w_in, w_out = [w.detach().to(torch.bfloat16).requires_grad_(True) for w in master]
        h = rms_norm(kernels, x.to(torch.bfloat16), norm_w)
        y = matmul(silu_and_mul(kernels, matmul(h, w_in)), w_out)
        loss = F.mse_loss(y.float(), target)
        (loss * loss_scale).backward()
        grads = [w.grad.float() for w in (norm_w, w_in, w_out)]
        if kernels is None:
            found_inf = torch.zeros(1, device=where)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        else:
            found_inf = kernels.unscale_grads(grads, inv_scale)
        if found_inf.item() == 0.0:  # else skip the step, as GradScaler does (never, in bf16)
            updates += 1
            if kernels is None:
                for w, g in zip(master, grads):
                    w.grad = g
                optimizer.step()
            else:
                kernels.adamw(master, grads, exp_avgs, exp_avg_sqs, step=updates, **HYPERPARAMETERS)
        losses.append(loss.item())
    return losses


def relative_gap(losses, reference_losses):
    """The largest |loss - reference| / reference over the steps."""
    return max(abs(a - b) / b for a, b in zip(losses, reference_losses))
