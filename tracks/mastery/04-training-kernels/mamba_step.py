"""One training step of a Mamba block built from the course's kernels (given code).

Beside kernel.py as transformer_step.py is, and like it not part of what a learner submits: it
trains one Mamba (selective state-space) block, the layer that a Mamba model stacks,

    u, z  = split(rms_norm(x) @ w_in)                          (batch, inner, L) each
    u     = silu(causal depthwise conv1d of u over time)       kept in PyTorch (F.conv1d, groups)
    dt_low, B, C = split(u @ w_x)                              rank, state, state per position
    y     = selective_scan(u, dt_low @ w_dt, -exp(A_log), B, C, D, z, dt_bias, delta_softplus=True)
    out   = x + y @ w_out
    loss  = mse(out, target)

with transformer_step.py's target (a fixed random function of each token and of the one before
it) and its mixed-precision step, imported from there: every weight is cast from its fp32 master
to bf16 for the forward and backward passes, the gradients are unscaled with the non-finite check
of torch.amp.GradScaler and AdamW updates the fp32 masters. A_log, D and dt_bias are cast back to
float32 where the scan takes them (the scan's A, D and delta_bias are float32), so the scan sees
their bf16-rounded values; weight decay reaches every weight, A_log and D included, where Mamba
exempts them (neither changes what is timed). The same step runs two ways, from the same weights
and batches:

    kernels=<a loaded kernel.py>   the course's kernels: this module's rms_norm and selective_scan,
                                   each with its backward, and its unscale_grads and adamw
    kernels=None                   eager PyTorch with the sequential scan: mamba's own reference,
                                   selective_scan_ref, one Python step per position in float32,
                                   with autograd's backward through the loop; F.rms_norm,
                                   torch._amp_foreach_non_finite_check_and_unscale_ and
                                   torch.optim.AdamW

Both ways do the matrix products with torch.matmul and the convolution with F.conv1d (cuBLAS and
cuDNN on a GPU); only the norm, the scan and the optimizer differ. No chunked or parallel scan in
PyTorch is compared: a numerically safe one needs a (L/chunk) x chunk x chunk tensor per state,
gigabytes at the default size.

``train(kernels, steps, ...)`` returns the loss curve; ``time_step(...)`` the milliseconds of one
full step. Run from the repository root, on a machine with an NVIDIA GPU:

    python tracks/mastery/04-training-kernels/mamba_step.py --impl solutions   # the reference
    python tracks/mastery/04-training-kernels/mamba_step.py                    # your kernel.py

It prints, for the sequential scan and for the course's kernels: the milliseconds per step and
their split into forward, backward and optimizer, the ratio to the sequential scan's step, and the
largest relative gap of the loss to the sequential scan's over the first steps. The default size
is a 1024-wide model with an inner width of 2048, 16 states, 2 sequences of 2048 tokens. ``--tiny``
runs a block small enough for Triton's interpreter on a CPU: the loss gaps mean something there,
the times do not.
"""

import importlib.util
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent


def _transformer_step():
    """transformer_step.py, beside this file, loaded once per process: this file runs as a script,
    not from a package, so it is loaded by its path."""
    name = "training_kernels_transformer_step"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "transformer_step.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


transformer_step = _transformer_step()
MODULE_ID = transformer_step.MODULE_ID
WEIGHT_NAMES = ("norm", "w_in", "conv_weight", "conv_bias", "w_x", "w_dt", "dt_bias", "A_log", "D", "w_out")
# The kernels a step runs, and the parts of kernel.py that hold them.
STEP_KERNELS = {"rms_norm": 1, "unscale_grads": 2, "adamw": 2, "selective_scan": 3}
STEP_PARTS = (1, 2, 3)
PART_CHECKS = {1: "backward", 2: "optimizer", 3: "scan"}  # make check's K= for each part
DT_RANGE = (1e-3, 1e-1)  # the range of the initial softplus(dt_bias), as Mamba's


# ---- the scan: the course's kernel, or the sequential reference -----------------------------------


def sequential_scan(u, delta, A, B, C, D, z, delta_bias):
    """Mamba's selective_scan_ref with delta_softplus=True and B, C of shape (batch, state, L): the
    decays and inputs of every step first, then one Python step per position, in float32; the
    output in u's dtype. Autograd keeps every step's state for the backward pass."""
    out_dtype = u.dtype
    u, delta, B, C, z = (t.float() for t in (u, delta, B, C, z))
    delta = F.softplus(delta + delta_bias[:, None])
    decay = torch.exp(delta[..., None] * A[:, None, :])  # (batch, inner, L, state)
    drive = (delta * u)[..., None] * B.transpose(1, 2)[:, None]  # (batch, inner, L, state)
    # unbind, not decay[:, :, t]: the backward of one index per step would build a zero tensor of
    # the whole (batch, inner, L, state) at every step, L^2 work that would slow the reference.
    steps = zip(decay.unbind(2), drive.unbind(2), C.unbind(2))
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for decay_t, drive_t, C_t in steps:
        h = decay_t * h + drive_t
        ys.append(torch.einsum("bdn,bn->bd", h, C_t))
    y = torch.stack(ys, dim=2) + u * D[:, None]
    return (y * F.silu(z)).to(out_dtype)


def scan(kernels, u, delta, A, B, C, D, z, delta_bias):
    if kernels is not None:
        return kernels.selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
    return sequential_scan(u, delta, A, B, C, D, z, delta_bias)


def block(kernels, weights, x, size):
    """The Mamba block on x (batch, L, hidden), in x's dtype; ``weights`` in the order of
    WEIGHT_NAMES."""
    norm, w_in, conv_weight, conv_bias, w_x, w_dt, dt_bias, A_log, D, w_out = weights
    inner, state, seq = size["inner"], size["state"], x.shape[1]
    # The scan wants (batch, inner, L): channels first, time last, as Mamba lays them out.
    u, z = (transformer_step.rms_norm(kernels, x, norm) @ w_in).transpose(1, 2).split(inner, dim=1)
    # Causal: pad conv - 1 steps on both sides and keep the first L outputs, so that position t
    # sees positions t - conv + 1 .. t only.
    u = F.silu(F.conv1d(u, conv_weight, conv_bias, padding=size["conv"] - 1, groups=inner)[..., :seq])
    dt_low, B, C = (u.transpose(1, 2) @ w_x).split([size["rank"], state, state], dim=-1)
    delta = (dt_low @ w_dt).transpose(1, 2)  # its bias is added inside the scan, before softplus
    A = -torch.exp(A_log.float())  # negative: every state decays
    y = scan(kernels, u, delta, A, B.transpose(1, 2), C.transpose(1, 2), D.float(), z, dt_bias.float())
    return x + y.transpose(1, 2) @ w_out


def block_loss(kernels, weights, x, target, size):
    """mse(block(x), target), in float32."""
    return F.mse_loss(block(kernels, weights, x, size).float(), target)


# ---- the problem: weights and batches ----------------------------------------------------------------


def sizes(hidden, state=16, tokens=(2, 2048), expand=2, conv=4):
    """The block's sizes as a dict, checked: tokens is (batch, sequence), or one sequence's length.
    The inner width is ``expand`` times hidden and dt's rank hidden / 16, rounded up, as Mamba's."""
    batch, seq = (1, tokens) if isinstance(tokens, int) else tokens
    if min(hidden, state, batch, seq, expand, conv) < 1:
        raise ValueError(
            f"every size must be at least 1, got hidden {hidden}, state {state}, {batch} x {seq} tokens, "
            f"expand {expand}, conv {conv}."
        )
    return {
        "hidden": hidden,
        "inner": expand * hidden,
        "state": state,
        "rank": math.ceil(hidden / 16),
        "conv": conv,
        "batch": batch,
        "seq": seq,
    }


def problem(size, seed, where):
    """The initial fp32 master weights (WEIGHT_NAMES, initialised as Mamba's are) and the two
    teacher matrices of the target."""
    generator = torch.Generator(device=where).manual_seed(seed)

    def randn(*shape):
        return torch.randn(shape, generator=generator, device=where)

    def uniform(bound, *shape):  # in [-bound, bound), as nn.Conv1d and Mamba's dt_proj start
        return (2 * torch.rand(shape, generator=generator, device=where) - 1) * bound

    hidden, inner, state, rank, conv = (size[k] for k in ("hidden", "inner", "state", "rank", "conv"))
    low, high = (math.log(v) for v in DT_RANGE)
    dt = torch.exp(low + (high - low) * torch.rand(inner, generator=generator, device=where))
    master = [
        torch.ones(hidden, device=where),
        randn(hidden, 2 * inner) / math.sqrt(hidden),
        uniform(1 / math.sqrt(conv), inner, 1, conv),
        uniform(1 / math.sqrt(conv), inner),
        randn(inner, rank + 2 * state) / math.sqrt(inner),
        uniform(1 / math.sqrt(rank), rank, inner),
        dt + torch.log(-torch.expm1(-dt)),  # softplus of it is dt
        torch.log(torch.arange(1, state + 1, device=where, dtype=torch.float32)).repeat(inner, 1),  # A = -1..-state
        torch.ones(inner, device=where),
        randn(inner, hidden) / math.sqrt(inner),
    ]
    teacher = (randn(hidden, hidden) / math.sqrt(hidden), randn(hidden, hidden) / math.sqrt(hidden))
    return master, teacher


# ---- the step -----------------------------------------------------------------------------------------


class TrainingStep(transformer_step.TrainingStep):
    """transformer_step.py's mixed-precision step (bf16 passes, fp32 masters, unscale, finite check,
    AdamW: the course's or PyTorch's) around the Mamba block's loss."""

    def __init__(self, kernels, master, size):
        super().__init__(kernels, master, heads=None, kv_heads=None)
        self.loss = lambda kernels, weights, x, target, *_heads: block_loss(kernels, weights, x, target, size)


def train(kernels=None, steps=10, hidden=8, state=4, tokens=(2, 8), seed=0, where=None):
    """Train the block for ``steps`` steps from the weights of ``seed``, one new batch per step, and
    return the loss of every step (Python floats). ``kernels``: the loaded kernel.py whose kernels
    run the step; None runs it in eager PyTorch with the sequential scan."""
    where = torch.device(where or transformer_step.default_device())
    size = sizes(hidden, state, tokens)
    master, teacher = problem(size, seed, where)
    step = TrainingStep(kernels, master, size)
    return [step(*transformer_step.batch_of(size, teacher, seed, i, where)).item() for i in range(steps)]


def time_step(
    kernels=None, hidden=1024, state=16, tokens=(2, 2048), warmup=3, iters=10, seed=0, where=None, phases=None
):
    """Milliseconds per training step, the mean of ``iters`` steps on one batch after ``warmup``
    steps (Triton compiles there), timed with CUDA events on a GPU and with the host's clock
    elsewhere. On a GPU, a dict passed as ``phases`` receives the mean milliseconds of "forward",
    "backward" and "optimizer", from events recorded between them in a second timed pass."""
    where = torch.device(where or transformer_step.default_device())
    size = sizes(hidden, state, tokens)
    master, teacher = problem(size, seed, where)
    step = TrainingStep(kernels, master, size)
    x, target = transformer_step.batch_of(size, teacher, seed, 0, where)
    return transformer_step.timed_steps(step, x, target, warmup, iters, phases)


def unfinished_message(loaded) -> str:
    """What to do when kernel.py still has open TODOs in a part the step runs, or ''. The step
    would otherwise stop on a stub's first missing line, deep inside a kernel."""
    open_todos = [todo for todo in loaded.todos if todo.part in STEP_PARTS]
    if not open_todos:
        return ""
    kernels = "; ".join(
        f"part {part}: {' and '.join(name for name, p in STEP_KERNELS.items() if p == part)}" for part in STEP_PARTS
    )
    parts = sorted({todo.part for todo in open_todos})
    checks = ", ".join(f"`make check M={MODULE_ID} K={PART_CHECKS[p]}`" for p in parts)
    return (
        f"The Mamba step runs kernels of {len(STEP_PARTS)} parts of kernel.py ({kernels}), and "
        f"{len(open_todos)} TODO(s) of those parts are still open in {loaded.path}:\n"
        f"  {', '.join('TODO ' + todo.label for todo in open_todos)}\n"
        f"The first: {open_todos[0]}.\nFinish them, with {checks} telling you when a part passes, then "
        "run this again (or pass --impl solutions to see the reference's step)."
    )


# ---- the table ----------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = transformer_step.step_arguments(
        argv,
        __doc__.splitlines()[0],
        {"hidden": "model width, twice it inside", "state": "states per channel"},
        gpu={"hidden": 1024, "state": 16, "batch": 2, "seq": 2048, "steps": 10, "warmup": 3, "iters": 10},
        tiny={"hidden": 8, "state": 4, "batch": 2, "seq": 8, "steps": 3, "warmup": 1, "iters": 2},
    )

    from grader import device
    from grader.catalog import find_module
    from grader.loading import LoadError, load_kernel

    cuda = device.is_cuda()
    if not cuda and not args.tiny:
        print(transformer_step.needs_a_gpu("hidden 1024, 2 x 2048 tokens"))
        return 0
    try:
        size = sizes(args.hidden, args.state, (args.batch, args.seq))
        loaded = load_kernel(find_module(MODULE_ID), args.impl)
    except (ValueError, LoadError) as error:
        print(error)
        return 1
    message = unfinished_message(loaded)
    if message:
        print(message)
        return 1
    shape = {"hidden": args.hidden, "state": args.state, "tokens": (args.batch, args.seq), "seed": args.seed}
    ways = [("sequential scan", None), ("course kernels", loaded.namespace)]

    rows, parts = {}, {}
    for name, kernels in ways:
        try:
            losses = train(kernels, steps=args.steps, **shape)
            parts[name] = {}
            ms = time_step(kernels, warmup=args.warmup, iters=args.iters, phases=parts[name], **shape)
        except torch.OutOfMemoryError:
            print(
                f"The {name} step ran out of GPU memory at this size (the sequential scan keeps every step's "
                "state for autograd). Pass a smaller --seq or --batch."
            )
            return 1
        except Exception as error:
            if kernels is None:
                raise
            print(transformer_step.raised_message(error))
            return 1
        rows[name] = (ms, losses)
        if cuda:
            torch.cuda.empty_cache()
    reference_ms, reference_losses = rows["sequential scan"]
    print(f"{device.describe()}, torch {torch.__version__}")
    print(
        f"one training step of a Mamba block: hidden {size['hidden']}, inner {size['inner']}, {size['state']} "
        f"states, dt rank {size['rank']}, conv {size['conv']}, {args.batch} x {args.seq} tokens, "
        "bf16 with fp32 masters"
    )
    if not cuda:
        print("(Triton's interpreter on the CPU: the times say nothing about a GPU)")
    print(
        f"\n{'':<16} {'ms / step':>10} {'/ sequential':>13} {'loss gap':>9}   (largest relative gap to the "
        f"sequential scan's loss over {args.steps} steps)"
    )
    for name, (ms, losses) in rows.items():
        gap = transformer_step.relative_gap(losses, reference_losses)
        print(f"{name:<16} {ms:10.2f} {ms / reference_ms:13.3f} {gap:9.2e}")
    transformer_step.print_split_and_losses(rows, parts, args.steps, cuda)
    return 0


if __name__ == "__main__":
    sys.exit(main())
