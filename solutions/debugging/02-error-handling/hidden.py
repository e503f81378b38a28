"""Hidden grading cases for 02-error-handling: shapes, dims and layouts the public tests do not show."""

import torch

from grader.cases import Case, public_spec

MATMUL = public_spec("debugging/02-error-handling", "matmul")

CASES = [
    Case({"shape": (5, 0, 3), "dim": 0}, label="empty, softmax over a non-empty dim"),
    Case({"shape": (0, 0)}, torch.float16, label="no rows, no columns"),
    Case({"shape": (1, 4097)}, torch.float16, label="one row just past a power of two"),
    Case({"shape": (2, 3, 9, 5), "dim": 2}, label="4-D, dim 2"),
    Case({"shape": (17, 11), "dim": 0, "layout": "row-strided"}, label="dim 0 of strided rows"),
    Case({"shape": (4, 5, 6), "layout": "transposed", "dim": 1}, label="3-D transpose, the middle dim"),
    Case({"shape": (3, 500), "scale": 100.0, "minus_inf": True}, torch.float16,
         label="large values and -inf entries"),
    Case({"shape": (8, 1, 9), "dim": 1}, label="a dim of size 1: every result is 1"),
    Case({"shape": (2, 16384), "layout": "sliced"}, label="long rows, every other column"),
    Case({"shape": (5, 48), "layout": "broadcast"}, torch.bfloat16, label="one row repeated (row stride 0)"),
    Case({"shape": (32, 2048)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (100, 8192), "dim": 0}, label="dim 0, large", cuda_only=True),
    Case({"mnk": (3, 700, 17)}, spec=MATMUL, label="one row of C, many tile columns"),
    Case({"mnk": (257, 33, 129)}, torch.float16, spec=MATMUL, label="tails in every dimension"),
    Case({"mnk": (30, 140, 20), "layouts": ("sliced", "transposed")}, torch.float16, spec=MATMUL,
         label="non-contiguous a and b"),
    Case({"mnk": (0, 0, 7)}, spec=MATMUL, label="empty C"),
    Case({"mnk": (384, 640, 256)}, torch.bfloat16, spec=MATMUL, label="aligned bf16", cuda_only=True),
    Case({"mnk": (4096, 4096, 4096)}, torch.float16, spec=MATMUL, label="aligned, large", cuda_only=True),
]
