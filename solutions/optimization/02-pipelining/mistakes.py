"""Typical mistakes in a pipelined matmul's kernel and launcher, planted into the reference by the
course's suite. (Too few stages or a small tile are slow, not wrong: the configuration tests and
the speed bar catch those.)"""

from grader.authoring.mistakes import TF32_ROUNDING, Mistake

MISTAKES = [
    Mistake("grid rounds down",
            'grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))',
            'grid = (M // config["BLOCK_M"], N // config["BLOCK_N"])',
            cause=r"triton\.cdiv"),
    Mistake("both tile indices read from program-id axis 0",
            "offs_n = tl.program_id(axis=1)", "offs_n = tl.program_id(axis=0)",
            cause=r"program_id|grid"),
    Mistake("a's row stride assumed to be K",
            "offs_m[:, None] * stride_am", "offs_m[:, None] * K",
            cause=r"not contiguous"),
    Mistake("b's row stride assumed to be N",
            "offs_k[:, None] * stride_bk", "offs_k[:, None] * N",
            cause=r"not contiguous"),
    Mistake("result rounded to fp16 before the store",
            "acc.to(c_ptr.dtype.element_ty)", "acc.to(tl.float16)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
]
