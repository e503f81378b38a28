"""Hidden grading cases for 02-pipelining: shapes and layouts the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"mnk": (1, 7, 300)}, label="one row, long K"),
    Case({"mnk": (129, 1, 33)}, torch.float16, label="one column"),
    Case({"mnk": (17, 19, 1)}, label="K of 1"),
    Case({"mnk": (128, 256, 64)}, torch.float16, label="exactly one large tile"),
    Case({"mnk": (45, 23, 77), "layouts": ("transposed", "transposed")}, label="both transposed"),
    Case({"mnk": (9, 70, 33), "layouts": ("padded", "sliced")}, label="NaN past a's edges, sliced b"),
    Case({"mnk": (130, 258, 500)}, torch.float16, label="one past a large tile, many k-steps", cuda_only=True),
    Case({"mnk": (4096 + 1, 4096 - 1, 512 + 3)}, torch.float16, label="large, odd", cuda_only=True),
    Case({"mnk": (2048, 8192, 1024)}, torch.bfloat16, label="wide", cuda_only=True),
]
