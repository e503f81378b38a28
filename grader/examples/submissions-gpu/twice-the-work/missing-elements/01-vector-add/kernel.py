"""GPU example "twice-the-work": correct, but launches its kernel twice per call, so it runs at
about half the reference's speed: every case passes and performance gets partial credit."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    for _ in range(2):  # the needless second pass
        add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
    return out
