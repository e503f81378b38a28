"""Typical mistakes in tiling a transpose and a matmul, planted into the reference by the course's suite.

Mistakes that make the transpose store outside y (swapped masks or strides on a non-square
matrix) are left out: under the interpreter such a store corrupts the test process's own memory.
"""

from grader.authoring.mistakes import MASKED_LANES_READ_ZERO, Mistake, TF32_ROUNDING

# The interpreter's memory checker stops a read past the end of an input and names it; a GPU
# reads whatever lies there, so what it shows (and whether) depends on the neighbouring memory.
READ_PAST_END = "a read past the end of an input is named only by the interpreter's memory checker"

MISTAKES = [
    Mistake("matmul grid rounds down",
            'grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))',
            'grid = (M // config["BLOCK_M"], N // config["BLOCK_N"])',
            cause=r"triton\.cdiv"),
    Mistake("a's row stride assumed to be K",
            "offs_m[:, None] * stride_am", "offs_m[:, None] * K",
            cause=r"not contiguous"),
    Mistake("x's row stride assumed to be N",
            "rows[:, None] * stride_xm", "rows[:, None] * N",
            cause=r"not contiguous"),
    Mistake("transpose grid rounds down",
            "grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))", "grid = (M // BLOCK_M, N // BLOCK_N)",
            cause=r"triton\.cdiv"),
    Mistake("matmul result rounded to fp16 before the store",
            "acc.to(c_ptr.dtype.element_ty)", "acc.to(tl.float16)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
    # The k-loop of the matmul (the case "several k-steps, b transposed" makes three cases see it).
    Mistake("a's k mask compares with K, not with what is left of it",
            "(offs_k[None, :] < k_left)", "(offs_k[None, :] < K)", cause=r"past the end of `a_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("b's k mask compares with K, not with what is left of it",
            "(offs_k[:, None] < k_left)", "(offs_k[:, None] < K)", cause=r"past the end of `b_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("accumulator overwritten by each k-step instead of added to",
            "acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b)",
            cause=r"acc \+= tl\.dot\(a, b\)|each step adds to the accumulator"),
    Mistake("a loaded without other=",
            "(offs_k[None, :] < k_left), other=0.0)", "(offs_k[None, :] < k_left))", cause=r"\(other=\)", interpreter_only=MASKED_LANES_READ_ZERO),
    Mistake("b's column stride assumed to be 1",
            "offs_n[None, :] * stride_bn", "offs_n[None, :]", cause=r"not contiguous"),
    # On a GPU the compiler refuses the loop, whose accumulator turns float32 after a tl.dot.
    Mistake("matmul accumulator in the output's 16-bit dtype",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)",
            cause=r"accumulator must be float32|must keep one dtype"),
    # The transpose.
    Mistake("transpose loads without a mask",
            "cols[None, :] * stride_xn, mask=mask)", "cols[None, :] * stride_xn)", cause=r"`x_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("x's column stride assumed to be 1",
            "cols[None, :] * stride_xn", "cols[None, :]", cause=r"not contiguous"),
    Mistake("x's strides ignored: the tile loaded as if x were row-major",
            "tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)",
            "tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask)",
            cause=r"ignores x's strides"),
]
