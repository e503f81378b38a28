"""Typical mistakes in a grouped, fused matmul + bias + GELU, planted into the reference by the
course's suite."""

from grader.authoring.mistakes import TF32_ROUNDING, Mistake

# The interpreter's memory checker stops a read past the end of an input and names it; a GPU
# reads whatever lies there, so what it shows (and whether) depends on the neighbouring memory.
READ_PAST_END = "a read past the end of an input is named only by the interpreter's memory checker"

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
    # The GELU epilogue, the bias, the program order and the k-loop.
    Mistake("cubic term of GELU written as x^2",
            "0.044715 * x * x * x", "0.044715 * x * x", cause=r"0\.044715 x\^3"),
    Mistake("GELU returns the sigmoid without the factor x",
            "y = x / (1.0 + tl.exp2(", "y = 1.0 / (1.0 + tl.exp2(", cause=r"0\.044715 x\^3"),
    Mistake("exp used where the base-2 constant needs exp2",
            "y = x / (1.0 + tl.exp2(", "y = x / (1.0 + tl.exp(", cause=r"0\.044715 x\^3"),
    Mistake("bias added after the GELU",
            "return gelu_tanh(acc + bias[None, :], FAST_TANH)", "return gelu_tanh(acc, FAST_TANH) + bias[None, :]", cause=r"bias goes in before the GELU"),
    Mistake("bias loaded without a mask",
            "offs_n * stride_bias, mask=offs_n < N, other=0.0)", "offs_n * stride_bias)", cause=r"`bias_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("group's first row not added to the tile row",
            "pid_m = first_row + (tile % tiles_per_group) % rows_in_group", "pid_m = (tile % tiles_per_group) % rows_in_group", cause=r"group"),
    Mistake("a's k mask compares with K, not with what is left of it",
            "(offs_k[None, :] < K - k)", "(offs_k[None, :] < K)", cause=r"past the end of `a_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("accumulator overwritten by each k-step instead of added to",
            "acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b)", cause=r"adds its tl.dot to the\s+accumulator|acc \+= tl\.dot"),
]
