"""Example "leaks-hidden-cases": reads every trial's inputs and shows them in a public case.

Attack: the student read grader/grade/runphase.py and grader/sandbox/child.py and saw that one child runs the
public and the hidden cases, and that the inputs of all its trials arrive together in one file,
``inputs.pt``, in its working folder. On its first call (the first public case) this file loads
that file and raises an exception whose message lists the shape, dtype and strides of every trial,
hidden cases included; a public case's error text is shown to the learner verbatim. Against the
hardened grader, where no such file exists, it lists every tensor in its process instead (through
``gc``) and every file in its folder. Every later call is the reference solution (a correct
Triton kernel), so the cost is one public case.

Mechanism abused: hidden inputs are present in a process that runs public cases, and a public
case's error message is learner-visible feedback.

Expected under the hardened grader: 0 for the module, refused by the policy gate before anything
runs (reading files: ``os``, ``torch.load``); past the gate, hidden inputs are never in a child
that runs public cases, so the message can hold public shapes only.
"""

import os

import torch
import triton
import triton.language as tl

BLOCK_SIZE = 1024
CALLS = []


def _describe_every_trial():
    if os.path.exists("inputs.pt"):
        trials = torch.load("inputs.pt", weights_only=True)
        return "; ".join(f"#{number} {tuple(trial['args'][0].shape)} {str(trial['args'][0].dtype)[6:]} "
                         f"stride {trial['args'][0].stride()}"
                         for number, trial in sorted(trials.items(), key=lambda item: int(item[0])))
    import gc

    tensors = [t for t in gc.get_objects() if isinstance(t, torch.Tensor)]
    return "; ".join([f"{tuple(t.shape)} stride {t.stride()}" for t in tensors] + sorted(os.listdir(".")))


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    CALLS.append(1)
    if len(CALLS) == 1:
        raise ValueError("every trial: " + _describe_every_trial())
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    add_kernel[(triton.cdiv(n_elements, BLOCK_SIZE),)](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out
