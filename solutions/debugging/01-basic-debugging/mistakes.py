"""Typical mistakes in row reductions and a tiled transpose, planted into the reference by the
course's suite. (The kernel's five BUG regions are planted too, each on its own.)"""

from grader.authoring.mistakes import MASKED_LANES_READ_ZERO, Mistake, NAMED_BY_THE_MEMORY_CHECKER

MISTAKES = [
    Mistake("running maximum starts at 0 instead of -inf",
            'running_max = tl.full([BLOCK_N], float("-inf"), dtype=tl.float32)',
            "running_max = tl.zeros([BLOCK_N], dtype=tl.float32)",
            cause=r"exactly 0, above every value"),
    Mistake("mean divided by the block size instead of the row length",
            "mean = tl.sum(acc, axis=0) / N", "mean = tl.sum(acc, axis=0) / BLOCK_N",
            cause=r"right value times|scale factor"),
    Mistake("transpose's grid rounds down",
            "grid = (triton.cdiv(M, TILE), triton.cdiv(N, TILE))", "grid = (M // TILE, N // TILE)",
            cause=r"never written|nothing was written"),
    Mistake("row_mean's masked lanes loaded without other=0",
            "x = tl.load(x_row_ptr + cols, mask=mask, other=0.0)", "x = tl.load(x_row_ptr + cols, mask=mask)",
            cause=r"without `other=`", interpreter_only=MASKED_LANES_READ_ZERO),
    Mistake("transpose stores through y's two strides swapped",
            "offs_n[:, None] * stride_ym + offs_m[None, :] * stride_yn",
            "offs_n[:, None] * stride_yn + offs_m[None, :] * stride_ym",
            cause=r"past the end of `y_ptr`", interpreter_only=NAMED_BY_THE_MEMORY_CHECKER),
    Mistake("the final reduction uses tl.max, which drops NaN",
            "row_max = tl.reduce(running_max, 0, max_keeping_nan)", "row_max = tl.max(running_max, axis=0)",
            cause=r"dropped the NaN|gives NaN for a row"),
]
