"""mastery/04's transformer_step.py (given code): one training step of a transformer block built
from the course's reference kernels follows the same step in eager PyTorch, and really runs those
kernels (this module's norm, gate, unscale and AdamW, and mastery/05's attention operator).

The block is tiny (hidden 32, two heads of 16, 2 x 8 tokens), so that Triton's interpreter runs a
step in about a second. Under the interpreter a float32 -> bfloat16 store truncates where a GPU
rounds to nearest, which moves the course's loss by about 1 % from eager's at this size.
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
PATH = REPO_ROOT / "tracks" / "mastery" / "04-training-kernels" / "transformer_step.py"
TINY = {"hidden": 32, "heads": 2, "tokens": (2, 8), "seed": 0}
STEPS = 2  # the second loss already follows one AdamW update of every weight
TOLERANCE = 0.03  # largest relative gap of the loss at any step, as training_loop.py's test allows

# Launches of one step: two norms (forward, backward and the weight gradient's partial sums each),
# the gate forward and backward, one unscale and one AdamW (every weight is float32), and the
# attention operator's forward, then delta, dK/dV and dQ in its backward.
LAUNCHES_PER_STEP = {
    "rms_norm_forward_kernel": 2,
    "rms_norm_backward_kernel": 2,
    "norm_partial_sum_kernel": 2,
    "silu_and_mul_forward_kernel": 1,
    "silu_and_mul_backward_kernel": 1,
    "unscale_grads_kernel": 1,
    "adamw_kernel": 1,
    "attention_forward_kernel": 1,
    "attention_delta_kernel": 1,
    "attention_dkdv_kernel": 1,
    "attention_dq_kernel": 1,
}


@pytest.fixture(scope="module")
def step_file():
    spec = importlib.util.spec_from_file_location("_transformer_step", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference():
    return load_kernel(find_module(MODULE_ID), "solutions").namespace


@pytest.mark.parametrize("kv_heads", [1], ids=["grouped"])  # two query heads share one k/v head
def test_course_step_follows_eager(step_file, reference, kv_heads):
    ours = step_file.train(reference, steps=STEPS, kv_heads=kv_heads, **TINY)
    theirs = step_file.train(None, steps=STEPS, kv_heads=kv_heads, **TINY)
    assert all(math.isfinite(loss) for loss in ours + theirs), (ours, theirs)
    gap = step_file.relative_gap(ours, theirs)
    assert gap <= TOLERANCE, f"course {ours} against eager {theirs}: {100 * gap:.2g} % apart"


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
    wrap_triton = torch.library.wrap_triton  # how attention_op.py launches its kernels

    def counted_wrap_triton(kernel):
        counts[kernel.__name__] += 1
        return wrap_triton(kernel)

    monkeypatch.setattr(torch.library, "wrap_triton", counted_wrap_triton)
    step_file.train(None, steps=1, **TINY)
    assert not counts, f"the eager PyTorch step launched the course's kernels: {dict(counts)}"
    step_file.train(reference, steps=1, **TINY)
    assert dict(counts) == LAUNCHES_PER_STEP


@pytest.mark.cuda
def test_compiled_step_follows_eager(step_file):
    compiled = step_file.train(None, steps=STEPS, compiled=True, **TINY)
    eager = step_file.train(None, steps=STEPS, **TINY)
    assert step_file.relative_gap(compiled, eager) <= TOLERANCE, (compiled, eager)


def test_time_step_times_a_whole_step(step_file):
    assert step_file.time_step(None, warmup=0, iters=1, **TINY) > 0


def test_an_unfinished_kernel_file_is_told_which_todos_the_step_needs(step_file, capsys):
    """The learner's stub: the step says which open TODOs it depends on instead of raising inside."""
    assert step_file.main(["--tiny"]) == 1
    said = capsys.readouterr().out
    assert "TODO(s) of those parts are still open" in said and "TODO 1.1" in said, said
    assert "make check M=mastery/04-training-kernels" in said


def test_the_kernels_of_a_step_lie_in_the_parts_it_checks(step_file):
    from grader.core.markers import file_parts

    source = (find_module(MODULE_ID).solution_dir / "kernel.py").read_text()
    lines = source.splitlines()
    for api in step_file.STEP_KERNELS:
        line = next(i + 1 for i, text in enumerate(lines) if text.startswith(f"def {api}("))
        part = next(p.number for p in file_parts(source) if p.first_line <= line <= p.last_line)
        assert part in step_file.STEP_PARTS, f"{api} is in part {part}"
