"""Typical mistakes in row reductions and a tiled transpose, planted into the reference by the
course's suite. (The kernel's five BUG regions are planted too, each on its own.)"""

from grader.authoring.mistakes import Mistake

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
]
