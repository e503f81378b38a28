"""One training step of a transformer block built from the course's kernels (given code).

Beside kernel.py as training_loop.py is, and like it not part of what a learner submits: it
trains one pre-norm transformer block, the layer that a language model stacks dozens of times,

    h = x + attention(rms_norm(x) @ w_qkv) @ w_o                     causal, grouped-query heads
    y = h + silu_and_mul(rms_norm(h) @ w_gate_up) @ w_down           the SwiGLU MLP
    loss = mse(y, target)

in the mixed precision of training_loop.py: bf16 compute, fp32 master weights, a loss scale,
the gradients unscaled (with the non-finite check of torch.amp.GradScaler) and AdamW on the fp32
masters. The target of a token is a fixed random function of the token and of the one before it,
target = x + tanh(x @ t1 + x_previous @ t2) / 2, so that the block needs both its attention and
its MLP to fit it. The same step runs three ways, from the same weights and batches:

    kernels=<a loaded kernel.py>   the course's kernels: this module's rms_norm, silu_and_mul,
                                   unscale_grads and adamw (each with its backward where it has
                                   one), and mastery/05's attention operator, attention_op.py
                                   (mastery/03's FlashAttention forward and backward, given code)
    kernels=None                   the same block in eager PyTorch: F.rms_norm,
                                   F.scaled_dot_product_attention, F.silu(gate) * up,
                                   torch._amp_foreach_non_finite_check_and_unscale_ and
                                   torch.optim.AdamW (foreach on a GPU, never fused)
    kernels=None, compiled=True    the eager forward and loss under torch.compile (AOTAutograd
                                   compiles its backward too); unscaling and AdamW stay as in eager

Every path does its matrix products with torch.matmul (cuBLAS on a GPU): they are most of the
work at realistic sizes, and no kernel of this module computes them (LoopLinear is a teaching
matmul). A step ends by reading the non-finite flag on the host (``found_inf.item()``, which
waits for the GPU), as training_loop.py and GradScaler do; every path pays it.

``train(kernels, steps, hidden, heads, tokens, seed)`` returns the loss curve; ``time_step(...)``
the milliseconds of one full step (forward, backward, unscale, AdamW) on a GPU. Run from the
repository root, on a machine with an NVIDIA GPU:

    python tracks/mastery/04-training-kernels/transformer_step.py --impl solutions   # the reference
    python tracks/mastery/04-training-kernels/transformer_step.py                    # your kernel.py

It prints, for eager PyTorch, torch.compile and the course's kernels: the milliseconds per step,
the ratio to eager, and the largest relative gap of the loss to eager's over the first steps. The
default size is hidden 4096, 32 heads of 128, 4 sequences of 2048 tokens. ``--tiny`` runs a block
small enough for Triton's interpreter on a CPU: the loss gaps mean something there, the times do
not (and torch.compile is left out). There the course's loss sits about 1 % from eager's, most of
it from the interpreter's float32 -> bfloat16 stores, which truncate where a GPU rounds to nearest.
"""

import argparse
import importlib.util
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

MODULE_ID = "mastery/04-training-kernels"
HYPERPARAMETERS = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2}
LOSS_SCALE = 1024.0
NORM_EPS = 1e-6
# The attention operator is given code of mastery/05, loaded from there.
ATTENTION_OP = Path(__file__).resolve().parent.parent / "05-production-ready" / "attention_op.py"
WEIGHT_NAMES = ("attention_norm", "w_qkv", "w_o", "mlp_norm", "w_gate_up", "w_down")


def given_attention():
    """mastery/05's attention_op.py, loaded once per process under the name its test_kernel.py and
    benchmark.py use (its operators register under a namespace made from that name, once)."""
    name = "production_ready_attention_op"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ATTENTION_OP)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


# ---- the block's ops: the course's kernels, or PyTorch when kernels is None ------------------------


def rms_norm(kernels, x, weight):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension, in x's dtype."""
    if kernels is not None:
        return kernels.rms_norm(x, weight, NORM_EPS)
    return F.rms_norm(x, (x.shape[-1],), weight, NORM_EPS)


def silu_and_mul(kernels, gate_up):
    """silu(gate) * up for gate_up = [gate | up] along the last dimension, in its dtype."""
    if kernels is not None:
        return kernels.silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def causal_attention(kernels, q, k, v):
    """softmax(q k^T / sqrt(D), causal) v for q (B, H, S, D) and k, v (B, Hkv, S, D)."""
    if kernels is not None:
        return given_attention().attention(q, k, v, causal=True)
    if k.shape[1] != q.shape[1]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def block(kernels, weights, x, heads, kv_heads):
    """The pre-norm transformer block on x (B, S, hidden), in x's dtype; ``weights`` in the order
    of WEIGHT_NAMES."""
    attention_norm, w_qkv, w_o, mlp_norm, w_gate_up, w_down = weights
    batch, seq, hidden = x.shape
    head_dim = hidden // heads
    qkv = rms_norm(kernels, x, attention_norm) @ w_qkv
    q, k, v = qkv.split([hidden, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q = q.view(batch, seq, heads, head_dim).transpose(1, 2)  # (B, H, S, D), strided views of qkv
    k = k.view(batch, seq, kv_heads, head_dim).transpose(1, 2)
    v = v.view(batch, seq, kv_heads, head_dim).transpose(1, 2)
    o = causal_attention(kernels, q, k, v).transpose(1, 2).reshape(batch, seq, hidden)
    h = x + o @ w_o
    return h + silu_and_mul(kernels, rms_norm(kernels, h, mlp_norm) @ w_gate_up) @ w_down


def block_loss(kernels, weights, x, target, heads, kv_heads):
    """mse(block(x), target), in float32."""
    return F.mse_loss(block(kernels, weights, x, heads, kv_heads).float(), target)


# ---- the problem: weights and batches ----------------------------------------------------------------


def mlp_width(hidden):
    """The MLP's hidden width: 8/3 of the model's, rounded up to a multiple of 256 (or of hidden
    when smaller), as Llama's (11008 for 4096)."""
    multiple = min(256, hidden)
    return multiple * math.ceil(8 * hidden / 3 / multiple)


def sizes(hidden, heads, tokens, kv_heads=None, ffn=None):
    """The block's sizes as a dict, checked: tokens is (batch, sequence), or one sequence's length."""
    batch, seq = (1, tokens) if isinstance(tokens, int) else tokens
    kv_heads = heads if kv_heads is None else kv_heads
    if hidden % heads or heads % kv_heads:
        raise ValueError(f"hidden {hidden} must be a multiple of heads {heads}, and heads of kv_heads {kv_heads}.")
    ffn = ffn or mlp_width(hidden)
    return {"hidden": hidden, "heads": heads, "kv_heads": kv_heads, "ffn": ffn, "batch": batch, "seq": seq}


def problem(size, seed, where):
    """The initial fp32 master weights (WEIGHT_NAMES) and the two teacher matrices of the target."""
    generator = torch.Generator(device=where).manual_seed(seed)

    def randn(*shape):
        return torch.randn(shape, generator=generator, device=where)

    hidden, ffn = size["hidden"], size["ffn"]
    qkv_width = hidden + 2 * size["kv_heads"] * (hidden // size["heads"])
    master = [
        torch.ones(hidden, device=where),
        randn(hidden, qkv_width) / math.sqrt(hidden),
        randn(hidden, hidden) / math.sqrt(hidden),
        torch.ones(hidden, device=where),
        randn(hidden, 2 * ffn) / math.sqrt(hidden),
        randn(ffn, hidden) / math.sqrt(ffn),
    ]
    teacher = (randn(hidden, hidden) / math.sqrt(hidden), randn(hidden, hidden) / math.sqrt(hidden))
    return master, teacher


def batch_of(size, teacher, seed, step, where):
    """The batch of step ``step``: x (B, S, hidden) in float32 and its target."""
    generator = torch.Generator(device=where).manual_seed(1_000_003 * (seed + 1) + step)
    x = torch.randn((size["batch"], size["seq"], size["hidden"]), generator=generator, device=where)
    previous = F.pad(x[:, :-1], (0, 0, 1, 0))  # the token before, zeros before the first
    return x, x + torch.tanh(x @ teacher[0] + previous @ teacher[1]) / 2


# ---- the step -----------------------------------------------------------------------------------------


class TrainingStep:
    """One mixed-precision training step of the block, as training_loop.py's: ``step(x, target)``
    casts the fp32 masters to bf16, runs the forward and backward passes in bf16, unscales the
    gradients in float32, skips the update if one of them is not finite, else runs AdamW on the
    masters, and returns the loss (a float32 tensor of no dimensions)."""

    def __init__(self, kernels, master, heads, kv_heads, compiled=False, loss_scale=LOSS_SCALE):
        if compiled and kernels is not None:
            raise ValueError("compiled=True compiles the eager PyTorch block: pass kernels=None with it.")
        self.kernels, self.master, self.loss_scale = kernels, master, loss_scale
        self.heads, self.kv_heads = heads, kv_heads
        self.loss = torch.compile(block_loss) if compiled else block_loss
        where = master[0].device
        self.inv_scale = torch.full((1,), 1.0 / loss_scale, device=where)
        self.updates = 0
        self.marks = None  # a list to collect (phase, CUDA event) at each phase's end, for time_step
        if kernels is None:
            self.optimizer = torch.optim.AdamW(
                master,
                lr=HYPERPARAMETERS["lr"],
                betas=(HYPERPARAMETERS["beta1"], HYPERPARAMETERS["beta2"]),
                eps=HYPERPARAMETERS["eps"],
                weight_decay=HYPERPARAMETERS["weight_decay"],
                foreach=where.type == "cuda",
                fused=False,
            )
        else:
            self.exp_avgs = [torch.zeros_like(w) for w in master]
            self.exp_avg_sqs = [torch.zeros_like(w) for w in master]

    def _mark(self, phase):
        if self.marks is not None:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((phase, event))

    def __call__(self, x, target):
        self._mark("start")
        weights = [w.detach().to(torch.bfloat16).requires_grad_(True) for w in self.master]
        loss = self.loss(self.kernels, weights, x.to(torch.bfloat16), target, self.heads, self.kv_heads)
        self._mark("forward")
        (loss * self.loss_scale).backward()
        grads = [w.grad.float() for w in weights]
        self._mark("backward")
        if self.kernels is None:
            found_inf = torch.zeros(1, device=self.inv_scale.device)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, self.inv_scale)
        else:
            found_inf = self.kernels.unscale_grads(grads, self.inv_scale)
        if found_inf.item() == 0.0:  # else skip the step, as GradScaler does (never, in bf16)
            self.updates += 1
            if self.kernels is None:
                for w, g in zip(self.master, grads):
                    w.grad = g
                self.optimizer.step()
            else:
                self.kernels.adamw(
                    self.master, grads, self.exp_avgs, self.exp_avg_sqs, step=self.updates, **HYPERPARAMETERS
                )
        self._mark("optimizer")
        return loss.detach()


STEP_KERNELS = ("rms_norm", "silu_and_mul", "unscale_grads", "adamw")  # this module's, in a step
STEP_PARTS = (1, 2)  # the parts of kernel.py that hold them (part 3, the selective scan, is not used)
PHASE_WIDTHS = (("forward", 9), ("backward", 9), ("optimizer", 10))


def default_device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train(
    kernels=None,
    steps=10,
    hidden=64,
    heads=4,
    tokens=(2, 16),
    seed=0,
    kv_heads=None,
    ffn=None,
    compiled=False,
    where=None,
):
    """Train the block for ``steps`` steps from the weights of ``seed``, one new batch per step, and
    return the loss of every step (Python floats).

    ``kernels``: the loaded kernel.py whose kernels run the step; None runs it in eager PyTorch,
    and with ``compiled`` under torch.compile. ``tokens``: (batch, sequence) or one sequence's
    length; ``kv_heads``: fewer key/value heads than ``heads`` for grouped-query attention;
    ``ffn``: the MLP's width (``mlp_width(hidden)`` by default)."""
    where = torch.device(where or default_device())
    size = sizes(hidden, heads, tokens, kv_heads, ffn)
    master, teacher = problem(size, seed, where)
    step = TrainingStep(kernels, master, heads, size["kv_heads"], compiled)
    return [step(*batch_of(size, teacher, seed, i, where)).item() for i in range(steps)]


def time_step(
    kernels=None,
    hidden=4096,
    heads=32,
    tokens=(4, 2048),
    warmup=3,
    iters=10,
    seed=0,
    kv_heads=None,
    ffn=None,
    compiled=False,
    where=None,
    phases=None,
):
    """Milliseconds per training step (forward, backward, unscale, AdamW), the mean of ``iters``
    steps on one batch after ``warmup`` steps (compilation and autotuning happen there), timed
    with CUDA events on a GPU and with the host's clock elsewhere. On a GPU, a dict passed as
    ``phases`` receives the mean milliseconds of each part of the step: "forward" (the bf16 copies
    of the weights and the loss), "backward" (the gradients and their float32 copies) and
    "optimizer" (unscaling, the finite check on the host, AdamW)."""
    where = torch.device(where or default_device())
    size = sizes(hidden, heads, tokens, kv_heads, ffn)
    master, teacher = problem(size, seed, where)
    step = TrainingStep(kernels, master, heads, size["kv_heads"], compiled)
    x, target = batch_of(size, teacher, seed, 0, where)
    return timed_steps(step, x, target, warmup, iters, phases)


def timed_steps(step, x, target, warmup: int, iters: int, phases: dict | None = None) -> float:
    """Milliseconds per ``step(x, target)``, the mean of ``iters`` calls after ``warmup`` untimed
    ones: CUDA events on a GPU, the host's clock elsewhere. ``phases`` (on a GPU) receives the mean
    milliseconds between the marks the step records in a second timed run."""
    where = x.device
    for _ in range(warmup):  # compilation and autotuning happen here
        step(x, target)
    if where.type != "cuda":
        start = time.perf_counter()
        for _ in range(iters):
            step(x, target)
        return (time.perf_counter() - start) * 1000 / iters
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step(x, target)
    end.record()
    end.synchronize()
    total = start.elapsed_time(end) / iters
    if phases is not None:  # a second timed run, with an event at each phase's end
        step.marks = []
        for _ in range(iters):
            step(x, target)
        torch.cuda.synchronize()
        marks, step.marks = step.marks, None
        for (_, begin), (phase, finish) in zip(marks, marks[1:]):
            if phase != "start":
                phases[phase] = phases.get(phase, 0.0) + begin.elapsed_time(finish) / iters
    return total


def relative_gap(losses, reference_losses):
    """The largest |loss - reference| / reference over the steps."""
    return max(abs(a - b) / b for a, b in zip(losses, reference_losses))


# ---- the table ----------------------------------------------------------------------------------------


def step_arguments(argv, description: str, sizes: dict, gpu: dict, tiny: dict):
    """A step script's options: --impl, --tiny, its own ``sizes`` ({option: what it is}), the batch,
    and how long to compare and time. An option left unset takes its value from ``gpu``, or from
    ``tiny`` with --tiny (an option in neither stays None)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--impl", default="learner", help="learner (default), solutions, or a folder")
    parser.add_argument("--tiny", action="store_true", help="a block small enough for the interpreter on a CPU")
    common = {
        "batch": "sequences per batch",
        "seq": "tokens per sequence",
        "steps": "steps of the loss comparison",
        "warmup": "untimed steps first",
        "iters": "timed steps",
    }
    for name, what in {**sizes, **common}.items():
        default = f" ({gpu[name]}; {tiny[name]} with --tiny)" if name in gpu else ""
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None, help=what + default)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name, value in (tiny if args.tiny else gpu).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def needs_a_gpu(size_text: str) -> str:
    """Why the default size is not run here, and what to do instead."""
    return (
        f"The default size ({size_text}) needs a CUDA GPU: here kernels run in Triton's interpreter on the "
        "CPU. Run on a GPU machine, or pass --tiny for a block the interpreter can train (its loss gaps are "
        "meaningful, its times are not)."
    )


def raised_message(error: BaseException) -> str:
    """What to print when a step with the learner's kernels raised: its first line, and where to look."""
    said = str(error).strip().splitlines()
    return (
        f"The step with your kernels raised {type(error).__name__}: {said[0] if said else ''}\n"
        f"`make check M={MODULE_ID}` runs each kernel on its own cases and says which one fails and why."
    )


def print_split_and_losses(rows: dict, parts: dict, steps: int, cuda: bool) -> None:
    """Where each way's step time goes (on a GPU), then every way's loss, step by step."""
    if cuda:
        print("\nwhere a step's time goes, ms (timed again with an event between the parts):")
        print(f"{'':<16} {'forward':>9} {'backward':>9} {'optimizer':>10}   (unscale, finite check, AdamW)")
        for name, part in parts.items():
            print(f"{name:<16} " + " ".join(f"{part.get(p, 0.0):{w}.2f}" for p, w in PHASE_WIDTHS))
    print("\nlosses, step by step:")
    print(f"{'step':>5} " + " ".join(f"{name:>16}" for name in rows))
    for i in range(steps):
        print(f"{i + 1:>5} " + " ".join(f"{losses[i]:16.6f}" for _, losses in rows.values()))


def main(argv=None) -> int:
    args = step_arguments(
        argv,
        __doc__.splitlines()[0],
        {"hidden": "model width", "heads": "query heads", "kv_heads": "key/value heads (as many as query heads)"},
        gpu={"hidden": 4096, "heads": 32, "batch": 4, "seq": 2048, "steps": 20, "warmup": 3, "iters": 10},
        tiny={"hidden": 32, "heads": 2, "batch": 2, "seq": 8, "steps": 3, "warmup": 1, "iters": 2},
    )

    from grader import device
    from grader.catalog import find_module
    from grader.loading import LoadError, load_kernel

    cuda = device.is_cuda()
    if not cuda and not args.tiny:
        print(needs_a_gpu("hidden 4096, 8192 tokens"))
        return 0
    try:
        loaded = load_kernel(find_module(MODULE_ID), args.impl)
    except LoadError as error:
        print(error)
        return 1
    behind = [todo for todo in loaded.todos if todo.part in STEP_PARTS]
    if behind:  # an unfinished kernel only raises somewhere inside the step
        print(
            f"The step runs {', '.join(STEP_KERNELS)} (parts 1 and 2), and {len(behind)} TODO(s) of "
            f"those parts are still open in {loaded.path} (the first: {behind[0]}). Finish them, with "
            f"`make check M={MODULE_ID}` telling you when a part passes, then run this again (or pass "
            "--impl solutions to see the reference's step)."
        )
        return 1
    kernels = loaded.namespace
    size = {
        "hidden": args.hidden,
        "heads": args.heads,
        "tokens": (args.batch, args.seq),
        "kv_heads": args.kv_heads,
        "seed": args.seed,
    }
    ways = [("PyTorch eager", None, False)]
    if cuda:
        ways.append(("torch.compile", None, True))
    ways.append(("course kernels", kernels, False))

    rows, parts = {}, {}
    for name, ks, compiled in ways:
        try:
            losses = train(ks, steps=args.steps, compiled=compiled, **size)
        except Exception as error:
            if ks is None:
                raise
            print(raised_message(error))
            return 1
        parts[name] = {}
        ms = time_step(ks, warmup=args.warmup, iters=args.iters, compiled=compiled, phases=parts[name], **size)
        rows[name] = (ms, losses)
        if cuda:
            torch.cuda.empty_cache()
    eager_ms, eager_losses = rows["PyTorch eager"]
    size_text = (
        f"hidden {args.hidden}, {args.heads} heads"
        + (f" ({args.kv_heads} key/value)" if args.kv_heads else "")
        + f", {args.batch} x {args.seq} tokens, ffn {mlp_width(args.hidden)}, bf16 with fp32 masters"
    )
    print(f"{device.describe()}, torch {torch.__version__}")
    print(f"one training step of a pre-norm transformer block: {size_text}")
    if not cuda:
        print("(Triton's interpreter on the CPU: the times say nothing about a GPU; torch.compile left out)")
    print(
        f"\n{'':<16} {'ms / step':>10} {'/ eager':>8} {'loss gap':>9}   (largest relative gap to eager's loss "
        f"over {args.steps} steps)"
    )
    for name, (ms, losses) in rows.items():
        print(f"{name:<16} {ms:10.2f} {ms / eager_ms:8.2f} {relative_gap(losses, eager_losses):9.2e}")
    print_split_and_losses(rows, parts, args.steps, cuda)
    return 0


if __name__ == "__main__":
    sys.exit(main())
