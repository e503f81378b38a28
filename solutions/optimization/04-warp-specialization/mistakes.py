"""Typical mistakes in a grouped, fused matmul + bias + GELU, planted into the reference by the
course's suite."""

from grader.authoring.mistakes import TF32_ROUNDING, Mistake

MISTAKES = [
    Mistake("last group assumed full: rows past the last group are computed twice, others never",
            "rows_in_group = tl.minimum(tiles_m - first_row, GROUP_M)", "rows_in_group = GROUP_M",
            cause=r"last group"),
    Mistake("a's row stride assumed to be K",
            "offs_m[:, None] * stride_am", "offs_m[:, None] * K",
            cause=r"not contiguous"),
    Mistake("grid rounds down",
            'tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])',
            'tiles = (M // config["BLOCK_M"]) * (N // config["BLOCK_N"])',
            cause=r"triton\.cdiv"),
    Mistake("bias assumed contiguous",
            "bias_ptr + offs_n * stride_bias", "bias_ptr + offs_n",
            cause=r"not contiguous"),
    Mistake("result rounded to fp16 before the store",
            "acc.to(c_ptr.dtype.element_ty)", "acc.to(tl.float16)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
]
