"""GPU example "gpu-work-at-import": a correct vector add whose file, when imported, queues a kernel
that keeps the GPU busy for about two seconds and returns without waiting for it. If the grader
froze this process, or counted it off the GPU, with that kernel still running, the kernel would
run inside another grading's timed window and slow it down.
Expected: every case passes; the busy kernel ends before the process reports its import done, so
the other gradings' performance is undisturbed."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


@triton.jit
def busy_kernel(out_ptr, steps):
    value = tl.program_id(0).to(tl.float32)
    for _ in range(steps):
        value = value * 0.999999 + 1.0
    tl.store(out_ptr + tl.program_id(0), value)


def add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
    return out


if torch.cuda.is_available():
    BUSY = torch.empty(1024, device="cuda")
    busy_kernel[(1024,)](BUSY, 20_000_000)
