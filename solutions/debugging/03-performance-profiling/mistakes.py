"""Typical mistakes in bias_act(), planted into the reference by the course's suite. (The planted
slowness of the exercise lives in kernel.py's BUG regions, which the suite plants one at a time.)"""

from grader.authoring.mistakes import FAULTS_ON_A_GPU, Mistake

# The public tests judge the planted slowness by the traffic the interpreter records; on a GPU the
# same kernel is correct and merely slower, which `make bench` shows.
PLANTED_BUGS_INTERPRETER_ONLY = "the traffic that reveals it is recorded by the interpreter; on a GPU it is only slower"

ACTIVATION = ('    if ACTIVATION == "silu":\n        x = x / (1.0 + tl.exp(-x))  # x * sigmoid(x)\n'
              '    elif ACTIVATION == "relu":\n        x = tl.where(x < 0.0, 0.0, x)  # NaN goes through, as in torch.relu '
              '(tl.maximum would drop it)\n')

MISTAKES = [
    Mistake("y addressed with x's strides",
            "tl.store(y_ptr + row_offsets * stride_ym + col_offsets * stride_yn,",
            "tl.store(y_ptr + row_offsets * stride_xm + col_offsets * stride_xn,",
            cause=r"non-contiguous|stride|transpose"),
    Mistake("columns past the end of the row not masked",
            "mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)",
            "mask = rows[:, None] < n_rows",
            cause=r"past the end|out of bounds|outside",
            interpreter_only="a read past the row is undefined on a GPU and may go unnoticed; the memory checker finds it under the interpreter"),
    Mistake("bias added after the activation",
            "        x += bias[None, :]\n" + ACTIVATION,
            "        pass\n" + ACTIVATION + "    if HAS_BIAS:\n        x += bias[None, :]\n",
            cause=r"\(x\) \+ bias, not"),
    Mistake("output allocated in float32 whatever x's dtype",
            "y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)",
            "y = torch.empty((n_rows, n_cols), dtype=torch.float32, device=x.device)",
            cause=r"dtype"),
    Mistake("a strided bias read as if contiguous: the wrapper's .contiguous() left out",
            "bias = bias.contiguous() if has_bias else x2d", "bias = bias if has_bias else x2d",
            cause=r"stride 2"),
    Mistake("grid rounded down (n // BLOCK) along both axes",
            'grid = (triton.cdiv(n_rows, config["BLOCK_M"]) * triton.cdiv(n_cols, config["BLOCK_N"]),)',
            'grid = ((n_rows // config["BLOCK_M"]) * (n_cols // config["BLOCK_N"]),)',
            cause=r"use triton\.cdiv"),
    Mistake("tiles per row rounded down, so the programs map to the wrong tiles",
            "tiles_per_row = (n_cols + BLOCK_N - 1) // BLOCK_N", "tiles_per_row = n_cols // BLOCK_N",
            cause=r"grid launches too few programs, or the programs are mapped to the wrong rows", interpreter_only=FAULTS_ON_A_GPU),
    Mistake("ReLU written with tl.maximum, which drops NaN",
            "x = tl.where(x < 0.0, 0.0, x)", "x = tl.maximum(x, 0.0)",
            cause=r"dropped the NaN"),
    Mistake("SiLU written with exp(x), which is inf / inf for large x",
            "x = x / (1.0 + tl.exp(-x))", "x = x * tl.exp(x) / (1.0 + tl.exp(x))",
            cause=r"overflowed.*inf / inf"),
    Mistake("x not converted to float32 before the arithmetic",
            "    x = x.to(tl.float32)\n    if HAS_BIAS:", "    if HAS_BIAS:",
            cause=r"Expected dtype \[.*fp32.*fp64.*\] but got (fp16|bf16)"),
]
