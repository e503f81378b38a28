"""GPU example "gpu-memory-hog": on the size-7 case, allocates GPU memory in 1 GiB blocks until
it runs out, and keeps it. The case fails with an out-of-memory error; the rest run in a fresh
process."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def launch(x, y, out):
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)


HOG = []


def add(x, y):
    if x.numel() == 7:
        while True:
            HOG.append(torch.empty(1 << 30, dtype=torch.uint8, device=x.device))
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    launch(x, y, out)
    return out
