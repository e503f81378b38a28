"""GPU example "side-stream": launches on a side stream after a long busy kernel (a Triton loop,
so that every kernel it runs is its own) and returns at once, without waiting (lazy work). The grader judges outputs after a device-wide sync, so the
result is right and counts; the timed loop ends with a device-wide sync too, so the hidden work
is paid for in the performance grade."""

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
def busy_kernel(scratch_ptr, n_iterations):
    acc = 0.0
    for _ in range(n_iterations):  # a few milliseconds of dependent arithmetic
        acc = acc * 0.999 + 1.0
    tl.store(scratch_ptr, acc)


def launch(x, y, out):
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)


SIDE = None


def add(x, y):
    global SIDE
    SIDE = SIDE or torch.cuda.Stream()
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    SIDE.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(SIDE):
        busy_kernel[(1,)](torch.empty(1, device=x.device), 5_000_000)  # keep the side stream busy
        launch(x, y, out)
    return out  # still being written when the caller gets it
