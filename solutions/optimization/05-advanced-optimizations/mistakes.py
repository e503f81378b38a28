"""Typical mistakes in a persistent, autotuned matmul, planted into the reference by the course's
suite. (A key that misses a dimension, or an unpruned space, is slow or fails on some GPUs, not
wrong here: the autotuning tests catch those, as they catch the last two listed.)"""

from grader.authoring.mistakes import TF32_ROUNDING, Mistake

# The interpreter's memory checker stops a read past the end of an input and names it; a GPU
# reads whatever lies there, so what it shows (and whether) depends on the neighbouring memory.
READ_PAST_END = "a read past the end of an input is named only by the interpreter's memory checker"
# Stores are counted by the interpreter's hooks; on a GPU the repeated tiles are only slower.
STORES_COUNTED = "the interpreter counts each element's stores; on a GPU the repeated tiles are only slower"

MISTAKES = [
    Mistake("persistent loop stops after one round of programs",
            "for tile in tl.range(tl.program_id(axis=0), tiles, NUM_SMS):",
            "for tile in tl.range(tl.program_id(axis=0), NUM_SMS, NUM_SMS):",
            cause=r"every NUM_SMS-th tile"),
    Mistake("descriptor loop stops after one round of programs",
            "tl.range(tl.program_id(axis=0), tiles_m * tiles_n, NUM_SMS, flatten=True)",
            "tl.range(tl.program_id(axis=0), NUM_SMS, NUM_SMS, flatten=True)",
            cause=r"every NUM_SMS-th tile"),
    Mistake("last group assumed full",
            "rows_in_group = tl.minimum(tiles_m - first_row, GROUP_M)", "rows_in_group = GROUP_M",
            cause=r"last group"),
    Mistake("tile count rounds down in the launcher",
            'tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])',
            'tiles = (M // meta["BLOCK_M"]) * (N // meta["BLOCK_N"])',
            cause=r"triton\.cdiv"),
    Mistake("a's row stride assumed to be K",
            "offs_m[:, None] * stride_am", "offs_m[:, None] * K",
            cause=r"not contiguous"),
    Mistake("result rounded to fp16 before the store",
            "acc.to(c_ptr.dtype.element_ty)", "acc.to(tl.float16)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
    # The k-loop, the strides, the descriptors and the grouped order.
    Mistake("a's k mask compares with K, not with what is left of it",
            "(offs_k[None, :] < K - k)", "(offs_k[None, :] < K)", cause=r"past the end of `a_ptr`",
            interpreter_only=READ_PAST_END),
    Mistake("accumulator overwritten by each k-step instead of added to",
            "acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b)", cause=r"acc \+= tl\.dot"),
    Mistake("b's column stride assumed to be 1",
            "offs_n[None, :] * stride_bn", "offs_n[None, :]", cause=r"b is not contiguous"),
    Mistake("descriptor load of b with its coordinates swapped",
            "b_desc.load([k, pid_n * BLOCK_N])", "b_desc.load([pid_n * BLOCK_N, k])",
            cause=r"matmul_tma_kernel runs"),
    Mistake("tile column divides by GROUP_M, not by the rows in this group",
            "in_group // rows_in_group", "in_group // GROUP_M", cause=r"last group"),
    # Right values, wrong cost: the public test functions catch these, not the cases.
    Mistake("shared memory counted for one pipeline stage, not num_stages",
            'return config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * itemsize',
            'return (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * itemsize',
            cause=r"num_stages slabs", caught_by="test_pruning_keeps_only_the_configs_that_fit"),
    Mistake("persistent loop steps by 1, not by NUM_SMS",
            "for tile in tl.range(tl.program_id(axis=0), tiles, NUM_SMS):",
            "for tile in tl.range(tl.program_id(axis=0), tiles, 1):",
            cause=r"step the tile loop by NUM_SMS", interpreter_only=STORES_COUNTED,
            caught_by="test_traffic_stores_each_output_element_once"),
]
