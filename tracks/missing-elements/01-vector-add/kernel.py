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
# TODO 1: import Triton's language module under its usual short name
#   Hint: every Triton kernel file imports the language module as `tl`.

from grader.validation import check_tensors

# Elements per program. A power of two (tl.arange needs one); 1024 keeps every load wide and
# gives the GPU thousands of programs to spread over its multiprocessors at large sizes.
BLOCK_SIZE = 1024


# TODO 2: turn this Python function into a Triton kernel
#   Hint: a decorator from the `triton` package compiles the function for the GPU (or the interpreter).
# TODO 3: make BLOCK_SIZE a compile-time constant
#   Hint: tl.arange needs a size known when the kernel is compiled; annotate the parameter.
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE):
    # TODO 4: find which block this program handles
    #   Hint: the grid is one-dimensional, so ask for the program's id along axis 0.
    pid = ...
    # TODO 5: compute the index of the first element of this block
    #   Hint: program 0 starts at element 0, program 1 right after program 0's block, and so on.
    #   Hint: in 64 bits (pid.to(tl.int64)): past 2**31 elements, pid * BLOCK_SIZE no longer fits an int32.
    block_start = ...
    # TODO 6: compute the indices of all BLOCK_SIZE elements of the block
    #   Hint: tl.arange(0, N) is the vector 0, 1, ..., N-1; shift it by the block's start.
    offsets = ...
    # TODO 7: build a mask that is True only for indices inside the vectors
    #   Hint: the last block usually runs past n_elements; those lanes must not load or store.
    mask = ...
    # TODO 8: load this block of x
    #   Hint: tl.load takes a block of pointers (base pointer + offsets) and the mask.
    x = ...
    # TODO 9: load this block of y
    #   Hint: the same way as x, from y's pointer.
    y = ...
    # TODO 10: add the two blocks
    #   Hint: arithmetic on blocks works element by element, as in NumPy.
    output = ...
    # TODO 11: write the sums to the output
    #   Hint: tl.store(pointers, values, mask=...) mirrors tl.load.


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return x + y for two tensors of the same shape, dtype and device."""
    check_tensors(("x", x), ("y", y))
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}; this kernel does not broadcast.")
    # The kernel walks memory linearly, so strided inputs are made contiguous first.
    x, y = x.contiguous(), y.contiguous()
    # TODO 12: allocate the output
    #   Hint: it has x's shape, dtype and device; its values are overwritten, so no need to zero it.
    out = ...
    # TODO 13: count the elements the kernel must process
    #   Hint: a tensor method gives the total number of elements, whatever the shape.
    n_elements = ...
    # TODO 14: choose the grid: how many programs to launch
    #   Hint: one program per block, rounding up so the last partial block is covered.
    #   Hint: the grid is a tuple; triton.cdiv(a, b) is the ceiling of a / b.
    grid = ...
    # TODO 15: launch the kernel on the grid
    #   Hint: kernel[grid](arguments...): tensors are passed as pointers; pass BLOCK_SIZE by keyword.
    return out


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
