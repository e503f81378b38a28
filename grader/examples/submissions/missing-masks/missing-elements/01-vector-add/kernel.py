"""Example submission "missing-masks": the reference solution with its masks removed.

Every program loads and stores a whole block, so a size that is not a multiple of 1024 reads and
writes past the end of its tensors. Under the interpreter the stray store lands in the child's
heap: it may crash the process at once, or corrupt it so that a later case crashes, or pass
unnoticed. The grader re-runs a crashed case alone in a fresh process before blaming it, so the
feedback names a size that is not a multiple of the block and says to check the masks, never
the "exactly one block" case, which needs no mask.
"""

import torch
import triton
import triton.language as tl

BLOCK_SIZE = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)  # the bug: no mask=offsets < n_elements, here and below
    y = tl.load(y_ptr + offsets)
    tl.store(out_ptr + offsets, x + y)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out
