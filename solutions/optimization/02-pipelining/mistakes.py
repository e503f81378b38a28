"""Typical mistakes in a pipelined matmul's kernel and launcher, planted into the reference by the
course's suite. (Too few stages or a small tile are slow, not wrong: the configuration tests and
the speed bar catch those.)"""

from grader.authoring.mistakes import MASKED_LANES_READ_ZERO, Mistake, TF32_ROUNDING

# The interpreter's memory checker stops a read past the end of an input and names it; a GPU
# reads whatever lies there, so what it shows (and whether) depends on the neighbouring memory.
READ_PAST_END = "a read past the end of an input is named only by the interpreter's memory checker"

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
    # The k-loop: masks, the accumulator, the pointer steps (the two "several k-steps" cases with
    # transposed inputs make a's k stride and b's column stride matter on three cases each).
    Mistake("a's k mask compares with K, not with what is left of it",
            "(offs_k[None, :] < K - k)", "(offs_k[None, :] < K)", cause=r"past the end of `a_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("b's k mask compares with K, not with what is left of it",
            "(offs_k[:, None] < K - k)", "(offs_k[:, None] < K)", cause=r"past the end of `b_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("accumulator overwritten by each k-step instead of added to",
            "acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b)", cause=r"acc \+= tl\.dot\(a, b\)"),
    Mistake("a advanced by BLOCK_K elements, ignoring its k stride",
            "a_ptrs += BLOCK_K * stride_ak", "a_ptrs += BLOCK_K", cause=r"k stride"),
    Mistake("b loaded without other=",
            "(offs_n[None, :] < N), other=0.0)", "(offs_n[None, :] < N))", cause=r"\(other=\)", interpreter_only=MASKED_LANES_READ_ZERO),
    Mistake("b's column stride assumed to be 1",
            "offs_n[None, :] * stride_bn", "offs_n[None, :]", cause=r"not contiguous"),
]
