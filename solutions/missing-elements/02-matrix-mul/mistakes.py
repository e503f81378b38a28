"""Typical mistakes in matrix multiplication, planted into the reference by the course's suite."""

from grader.authoring.mistakes import MASKED_LANES_READ_ZERO, Mistake, TF32_ROUNDING

# The interpreter's memory checker stops a read past the end of an input and names it; a GPU
# reads whatever lies there, so what it shows (and whether) depends on the neighbouring memory.
READ_PAST_END = "a read past the end of an input is named only by the interpreter's memory checker"

MISTAKES = [
    Mistake("fp32 operands rounded to fp16 before tl.dot",
            "acc = tl.dot(a, b, acc)", "acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
    Mistake("result rounded to fp16 before the store",
            "c = acc.to(c_ptr.dtype.element_ty)", "c = acc.to(tl.float16)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
    Mistake("both tile indices read from program-id axis 0",
            "pid_n = tl.program_id(axis=1)", "pid_n = tl.program_id(axis=0)",
            cause=r"program_id|grid"),
    Mistake("a's row stride assumed to be K",
            "offs_m[:, None] * stride_am", "offs_m[:, None] * K",
            cause=r"not contiguous"),
    # Right while K fits one k-step, wrong past it: the diagnosis must say where the cases split.
    Mistake("accumulator overwritten by each k-step instead of added to",
            "acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b)",
            cause=r"K is larger than \d+.*acc \+= tl\.dot\(a, b\)"),
    Mistake("grid rounds down",
            'grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))',
            'grid = (M // config["BLOCK_M"], N // config["BLOCK_N"])',
            cause=r"triton\.cdiv"),
    # Masks and the k-loop's bounds.
    Mistake("a's k mask compares with K, not with what is left of it",
            "(offs_k[None, :] < k_remaining)", "(offs_k[None, :] < K)",
            cause=r"past the end of `a_ptr`|missing its mask reads outside an input",
            interpreter_only=READ_PAST_END),
    Mistake("b's row stride assumed to be N",
            "offs_k[:, None] * stride_bk", "offs_k[:, None] * N", cause=r"b is not contiguous"),
    Mistake("a loaded without other=",
            "mask=mask_m & (offs_k[None, :] < k_remaining), other=0.0)",
            "mask=mask_m & (offs_k[None, :] < k_remaining))", cause=r"\(other=\)", interpreter_only=MASKED_LANES_READ_ZERO),
    Mistake("number of k-steps rounded down",
            "num_k_steps = tl.cdiv(K, BLOCK_K)", "num_k_steps = K // BLOCK_K", cause=r"partial block"),
]
