"""Example submission "partial": a correct kernel launched on a grid that rounds down.

`n_elements // BLOCK_SIZE` drops the last, partial block (the mask inside the kernel is right),
so only the cases whose size is a multiple of 1024 pass: of module 01's CPU cases, "exactly one
block". (A mask off by one does not give a partial score here: `< n - 1` fails every case and
`<= n` passes every case while writing one element out of bounds.)
"""

import torch
import triton
import triton.language as tl

BLOCK_SIZE = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    grid = (n_elements // BLOCK_SIZE,)  # the bug: should be triton.cdiv(n_elements, BLOCK_SIZE)
    add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out
