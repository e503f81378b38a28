"""Typical memory mistakes, planted into the reference by the course's suite (the planted bugs of
kernel.py's BUG regions are tested the same way)."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("column mask off by one in add_bias (<= N)",
            "col_mask = cols < N\n    # The tiles", "col_mask = cols <= N\n    # The tiles",
            cause=r"past the end of `(x|bias)_ptr`"),
    Mistake("atomic add without its mask in column_sum",
            "tl.atomic_add(total_ptr + cols, partial, mask=col_mask)",
            "tl.atomic_add(total_ptr + cols, partial)",
            cause=r"past the end of `total_ptr`"),
    Mistake("load without a mask in dot",
            "x = tl.load(x_ptr + offsets.to(tl.int64) * x_stride, mask=mask, other=0.0)",
            "x = tl.load(x_ptr + offsets.to(tl.int64) * x_stride)",
            cause=r"past the end of `x_ptr`"),
    Mistake("grid rounded down in scale (n // BLOCK_SIZE)",
            "grid = (triton.cdiv(n, BLOCK_SIZE),)\n        scale_kernel",
            "grid = (n // BLOCK_SIZE,)\n        scale_kernel",
            cause=r"never written"),
]
