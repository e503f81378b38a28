"""Typical memory mistakes, planted into the reference by the course's suite (the planted bugs of
kernel.py's BUG regions are tested the same way)."""

from grader.authoring.mistakes import Mistake

# The course's memory checker watches the interpreter. On a GPU an access past the end or a
# misaligned one is undefined: it may pass unnoticed or leave the process's CUDA context unusable,
# so there compute-sanitizer finds these bugs (tests/learn/test_sanitizer.py), in a process of its own.
ON_A_GPU_THE_SANITIZER_FINDS_IT = ("an out-of-bounds or misaligned access on a GPU is undefined behaviour, "
                                   "found there by compute-sanitizer (tests/learn/test_sanitizer.py)")
PLANTED_BUGS_INTERPRETER_ONLY = ON_A_GPU_THE_SANITIZER_FINDS_IT

MISTAKES = [
    Mistake("column mask off by one in add_bias (<= N)",
            "col_mask = cols < N\n    # The tiles", "col_mask = cols <= N\n    # The tiles",
            cause=r"past the end of `(x|bias)_ptr`",
            interpreter_only=ON_A_GPU_THE_SANITIZER_FINDS_IT),
    Mistake("atomic add without its mask in column_sum",
            "tl.atomic_add(total_ptr + cols, partial, mask=col_mask)",
            "tl.atomic_add(total_ptr + cols, partial)",
            cause=r"past the end of `total_ptr`",
            interpreter_only=ON_A_GPU_THE_SANITIZER_FINDS_IT),
    Mistake("load without a mask in dot",
            "x = tl.load(x_ptr + offsets.to(tl.int64) * x_stride, mask=mask, other=0.0)",
            "x = tl.load(x_ptr + offsets.to(tl.int64) * x_stride)",
            cause=r"past the end of `x_ptr`",
            interpreter_only=ON_A_GPU_THE_SANITIZER_FINDS_IT),
    Mistake("grid rounded down in scale (n // BLOCK_SIZE)",
            "grid = (triton.cdiv(n, BLOCK_SIZE),)\n        scale_kernel",
            "grid = (n // BLOCK_SIZE,)\n        scale_kernel",
            cause=r"never written"),
    Mistake("column_sum's rows start at 0 in every program (row_start left out)",
            "rows = row_start + offset + tl.arange(0, BLOCK_M)", "rows = offset + tl.arange(0, BLOCK_M)",
            cause=r"takes several, so look at what happens from the second on"),
    Mistake("dot's grid-stride loop steps one block instead of one block per program",
            "step = tl.num_programs(axis=0) * BLOCK", "step = BLOCK",
            cause=r"takes several, so look at what happens from the second on"),
    Mistake("add_bias ignores x's column stride",
            "x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :] * stride_xn,",
            "x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :],",
            cause=r"layout='transposed'.*both of its strides"),
    Mistake("dot multiplies in float16, then converts the product to float32",
            "partial += x.to(tl.float32) * y.to(tl.float32)", "partial += (x * y).to(tl.float32)",
            cause=r"past float16's largest value \(65504\)"),
]
