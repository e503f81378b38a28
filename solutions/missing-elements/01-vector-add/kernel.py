"""Vector addition: out = x + y, one Triton program per block of elements.

The smallest complete Triton kernel, and the shape of every element-wise kernel after it:
each program finds its block from its program id, guards the last, partial block with a mask,
loads, computes, and stores. The launcher below allocates the output and picks the grid.

Check your work:  make check M=missing-elements/01-vector-add
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import torch
import triton
# TODO: import Triton's language module under its usual short name
# HINT: every Triton kernel file imports the language module as `tl`.
import triton.language as tl
# END TODO

from grader.validation import check_tensors

# Elements per program. A power of two (tl.arange needs one); 1024 keeps every load wide and
# gives the GPU thousands of programs to spread over its multiprocessors at large sizes.
BLOCK_SIZE = 1024


# TODO: turn this Python function into a Triton kernel
# HINT: a decorator from the `triton` package compiles the function for the GPU (or the interpreter).
@triton.jit
# END TODO
# TODO: make BLOCK_SIZE a compile-time constant
# HINT: tl.arange needs a size known when the kernel is compiled; annotate the parameter.
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
# STUB: def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE):
# END TODO
    # TODO: find which block this program handles
    # HINT: the grid is one-dimensional, so ask for the program's id along axis 0.
    pid = tl.program_id(axis=0)
    # STUB: pid = ...
    # END TODO
    # TODO: compute the index of the first element of this block
    # HINT: program 0 starts at element 0, program 1 right after program 0's block, and so on.
    # HINT: in 64 bits (pid.to(tl.int64)): past 2**31 elements, pid * BLOCK_SIZE no longer fits an int32.
    block_start = pid.to(tl.int64) * BLOCK_SIZE
    # STUB: block_start = ...
    # END TODO
    # TODO: compute the indices of all BLOCK_SIZE elements of the block
    # HINT: tl.arange(0, N) is the vector 0, 1, ..., N-1; shift it by the block's start.
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    # STUB: offsets = ...
    # END TODO
    # TODO: build a mask that is True only for indices inside the vectors
    # HINT: the last block usually runs past n_elements; those lanes must not load or store.
    mask = offsets < n_elements
    # STUB: mask = ...
    # END TODO
    # TODO: load this block of x
    # HINT: tl.load takes a block of pointers (base pointer + offsets) and the mask.
    x = tl.load(x_ptr + offsets, mask=mask)
    # STUB: x = ...
    # END TODO
    # TODO: load this block of y
    # HINT: the same way as x, from y's pointer.
    y = tl.load(y_ptr + offsets, mask=mask)
    # STUB: y = ...
    # END TODO
    # TODO: add the two blocks
    # HINT: arithmetic on blocks works element by element, as in NumPy.
    output = x + y
    # STUB: output = ...
    # END TODO
    # TODO: write the sums to the output
    # HINT: tl.store(pointers, values, mask=...) mirrors tl.load.
    tl.store(out_ptr + offsets, output, mask=mask)
    # END TODO


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return x + y for two tensors of the same shape, dtype and device."""
    check_tensors(("x", x), ("y", y))
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}; this kernel does not broadcast.")
    # The kernel walks memory linearly, so strided inputs are made contiguous first.
    x, y = x.contiguous(), y.contiguous()
    # TODO: allocate the output
    # HINT: it has x's shape, dtype and device; its values are overwritten, so no need to zero it.
    out = torch.empty_like(x)
    # STUB: out = ...
    # END TODO
    # TODO: count the elements the kernel must process
    # HINT: a tensor method gives the total number of elements, whatever the shape.
    n_elements = out.numel()
    # STUB: n_elements = ...
    # END TODO
    # TODO: choose the grid: how many programs to launch
    # HINT: one program per block, rounding up so the last partial block is covered.
    # HINT: the grid is a tuple; triton.cdiv(a, b) is the ceiling of a / b.
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    # STUB: grid = ...
    # END TODO
    # TODO: launch the kernel on the grid
    # HINT: kernel[grid](arguments...): tensors are passed as pointers; pass BLOCK_SIZE by keyword.
    add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    # END TODO
    return out


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
