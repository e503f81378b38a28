"""GPU example "illegal-memory-access": on the size-7 case only, the kernel stores far outside
any allocation. The CUDA context dies; that case fails and the other cases run in a fresh process."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    wild = tl.where(n == 7, 1 << 40, 0)  # 1 TiB past the output when n == 7
    tl.store(out_ptr + offsets + wild, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def launch(x, y, out):
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)


def add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    launch(x, y, out)
    return out
