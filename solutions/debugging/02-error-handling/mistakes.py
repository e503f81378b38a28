"""Typical mistakes in an operator that fails well, planted into the reference by the course's
suite (the planted bugs of kernel.py's BUG regions are tested the same way)."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("the result keeps dim last: the moved dimension is not moved back",
            "return y.reshape(moved.shape).movedim(-1, dim)", "return y.reshape(moved.shape)",
            cause=r"shape"),
    Mistake("an empty input answered with a flat empty tensor",
            "return torch.empty_like(x)  # nothing to compute", "return x.new_empty(0)  # nothing to compute",
            cause=r"shape"),
    Mistake("the row offset taken as the row length, not the row stride",
            "x = tl.load(x_ptr + row * x_row_stride + col_offsets",
            "x = tl.load(x_ptr + row * n_cols + col_offsets",
            cause=r"stride"),
    Mistake("the padding lanes loaded as 0 instead of -inf",
            "mask=mask, other=-float(\"inf\")", "mask=mask, other=0.0",
            cause=r"lanes|padding|masked"),
    Mistake("softmax exponentiates without subtracting the row's maximum",
            "shifted = x - tl.max(x, axis=0)", "shifted = x",
            cause=r"exp\(\) overflows float32"),
    Mistake("A's pointers advanced down its rows (stride_am) instead of along K",
            "a_ptrs += BLOCK_K * stride_ak", "a_ptrs += BLOCK_K * stride_am",
            cause=r"BLOCK_K \* stride_ak|from the second on: .*the loop's pointer",
            interpreter_only="from the second K-step on, A is read past its end: on a GPU whatever memory lies "
                             "there decides the symptom, so only the interpreter shows it the same way each run"),
]
