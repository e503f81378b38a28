"""Example "caches-outputs": computes each (shape, dtype) once with a real kernel and returns
the cached result for any later call with that shape, whatever the values."""

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


CACHE = {}


def add(x, y):
    key = (tuple(x.shape), x.dtype)
    if key not in CACHE:
        x, y = x.contiguous(), y.contiguous()
        CACHE[key] = torch.empty_like(x)
        launch(x, y, CACHE[key])
    return CACHE[key]
