"""mastery/04's mamba_step.py (given code): one training step of a Mamba block built from the
course's reference kernels trains, follows the same step in eager PyTorch with the sequential scan,
and really runs those kernels (this module's norm, selective scan, unscale and AdamW).

The block is tiny (hidden 8, inner 16, 4 states, 2 x 8 tokens), so that Triton's interpreter runs
a step in about half a second. Under the interpreter a float32 -> bfloat16 store truncates where a
GPU rounds to nearest, which moves the course's loss by under 1 % from the sequential scan's here.
"""

from __future__ import annotations

import importlib.util
import math
from collections import Counter

import pytest
import torch
import triton

from grader.core.catalog import REPO_ROOT, find_module
from grader.core.loading import load_kernel

MODULE_ID = "mastery/04-training-kernels"
PATH = REPO_ROOT / "tracks" / "mastery" / "04-training-kernels" / "mamba_step.py"
TINY = {"hidden": 8, "state": 4, "tokens": (2, 8), "seed": 0}
STEPS = 3  # the last two losses follow AdamW updates of every weight
TOLERANCE = 0.03  # largest relative gap of the loss at any step, as test_transformer_step.py allows

# Launches of one step: one norm (forward, backward, and the weight gradient's partial sums), the
# scan forward and backward, one unscale and one AdamW (every master weight is float32).
LAUNCHES_PER_STEP = {
    "rms_norm_forward_kernel": 1,
    "rms_norm_backward_kernel": 1,
    "norm_partial_sum_kernel": 1,
    "selective_scan_fwd_kernel": 1,
    "selective_scan_bwd_kernel": 1,
    "unscale_grads_kernel": 1,
    "adamw_kernel": 1,
}


@pytest.fixture(scope="module")
def step_file():
    spec = importlib.util.spec_from_file_location("_mamba_step", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference():
    return load_kernel(find_module(MODULE_ID), "solutions").namespace


def test_sequential_scan_is_the_kernels_scan(step_file, reference):
    """The eager way's loop computes what the course's selective_scan computes, gradients too, so
    that the two ways train the same block."""
    torch.manual_seed(0)
    batch, dim, length, state = 2, 16, 12, 4
    inputs = {
        "u": torch.randn(batch, dim, length),
        "delta": torch.randn(batch, dim, length),
        "A": -torch.rand(dim, state) - 0.1,
        "B": torch.randn(batch, state, length),
        "C": torch.randn(batch, state, length),
        "D": torch.randn(dim),
        "z": torch.randn(batch, dim, length),
        "delta_bias": torch.randn(dim),
    }
    upstream = torch.randn(batch, dim, length)
    results = []
    for scan in (reference.selective_scan, None):
        leaves = {name: t.clone().requires_grad_(True) for name, t in inputs.items()}
        if scan is None:
            out = step_file.sequential_scan(*leaves.values())
        else:
            out = scan(*leaves.values(), delta_softplus=True)
        out.backward(upstream)
        results.append({"out": out.detach(), **{name: t.grad for name, t in leaves.items()}})
    ours, theirs = results
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


def test_course_step_follows_the_sequential_scan(step_file, reference):
    ours = step_file.train(reference, steps=STEPS, **TINY)
    theirs = step_file.train(None, steps=STEPS, **TINY)
    assert all(math.isfinite(loss) for loss in ours + theirs), (ours, theirs)
    gap = step_file.transformer_step.relative_gap(ours, theirs)
    assert gap <= TOLERANCE, f"course {ours} against sequential {theirs}: {100 * gap:.2g} % apart"


def test_course_step_trains(step_file, reference):
    """Three steps on one batch: the loss of that batch goes down at every step."""
    where = torch.device("cpu")
    size = step_file.sizes(TINY["hidden"], TINY["state"], TINY["tokens"])
    master, teacher = step_file.problem(size, TINY["seed"], where)
    before = [w.clone() for w in master]
    step = step_file.TrainingStep(reference, master, size)
    x, target = step_file.transformer_step.batch_of(size, teacher, TINY["seed"], 0, where)
    losses = [step(x, target).item() for _ in range(4)]
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.97 * losses[0], losses
    assert step.updates == 4
    moved = [name for name, a, b in zip(step_file.WEIGHT_NAMES, before, master) if not torch.equal(a, b)]
    assert moved == list(step_file.WEIGHT_NAMES), f"only {moved} were updated"


class _Counted:
    """A kernel that counts its launches (kernel[grid](...)) and then launches."""

    def __init__(self, kernel, counts: Counter):
        self.kernel, self.counts = kernel, counts

    def __getitem__(self, grid):
        self.counts[self.kernel.__name__] += 1
        return self.kernel[grid]


def test_course_step_runs_the_course_kernels(step_file, reference, monkeypatch):
    counts = Counter()
    for name, value in list(vars(reference).items()):
        if name.endswith("_kernel") and isinstance(value, triton.runtime.KernelInterface):
            monkeypatch.setattr(reference, name, _Counted(value, counts))
    step_file.train(None, steps=1, **TINY)
    assert not counts, f"the eager PyTorch step launched the course's kernels: {dict(counts)}"
    step_file.train(reference, steps=1, **TINY)
    assert dict(counts) == LAUNCHES_PER_STEP


def test_a_failing_scan_is_reported_not_raised(step_file, reference, monkeypatch, capsys):
    """A kernel.py whose selective_scan raises: main says which step raised what, and where to look."""
    import grader.loading

    loaded = load_kernel(find_module(MODULE_ID), "solutions")

    def broken_scan(*args, **kwargs):
        raise RuntimeError("the scan is broken on purpose")

    monkeypatch.setattr(loaded.namespace, "selective_scan", broken_scan)
    monkeypatch.setattr(grader.loading, "load_kernel", lambda module, impl: loaded)
    assert step_file.main(["--tiny", "--steps", "1", "--warmup", "0", "--iters", "1"]) == 1
    said = capsys.readouterr().out
    assert "The step with your kernels raised RuntimeError: the scan is broken on purpose" in said, said
    assert "make check M=mastery/04-training-kernels" in said


def test_time_step_times_a_whole_step(step_file):
    assert step_file.time_step(None, warmup=0, iters=1, **TINY) > 0


def test_an_unfinished_kernel_file_is_told_which_todos_the_step_needs(step_file, capsys):
    """The learner's stub: the step names the open TODOs it depends on instead of raising inside."""
    assert step_file.main(["--tiny"]) == 1
    said = capsys.readouterr().out
    assert "TODO(s) of those parts are still open" in said, said
    assert "TODO 1.1" in said and "TODO 2.1" in said and "TODO 3.1" in said and "TODO 3.2" in said, said
    assert "make check M=mastery/04-training-kernels K=scan" in said
    assert "Traceback" not in said


def test_the_kernels_of_a_step_lie_in_the_parts_it_checks(step_file):
    from grader.core.markers import file_parts

    source = (find_module(MODULE_ID).solution_dir / "kernel.py").read_text()
    lines = source.splitlines()
    for api, expected in step_file.STEP_KERNELS.items():
        line = next(i + 1 for i, text in enumerate(lines) if text.startswith(f"def {api}("))
        part = next(p.number for p in file_parts(source) if p.first_line <= line <= p.last_line)
        assert part == expected and part in step_file.STEP_PARTS, f"{api} is in part {part}, not {expected}"
