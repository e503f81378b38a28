"""GPU example "gpu-endless-loop": for a single-element input the kernel spins forever on the GPU.
The case is killed at its time limit and the GPU stays usable for the next cases."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, spin_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    total = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    if n == 1:
        # An atomic counter that only grows: a loop with a side effect, which no compiler removes.
        while tl.atomic_add(spin_ptr, 1) >= 0:
            total += 0.0
    tl.store(out_ptr + offsets, total, mask=mask)


def add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    spin = torch.zeros(1, dtype=torch.int64, device=x.device)
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, spin, out.numel(), BLOCK=1024)
    return out
