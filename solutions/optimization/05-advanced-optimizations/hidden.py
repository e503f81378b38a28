"""Hidden grading cases for 05-advanced-optimizations: shapes and layouts the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"mnk": (1, 7, 300)}, label="one row, long K"),
    Case({"mnk": (129, 1, 33)}, torch.float16, label="one column"),
    Case({"mnk": (17, 19, 1)}, label="K of 1"),
    Case({"mnk": (1030, 300, 20), "layouts": ("transposed", "sliced")}, label="two groups and a bit, strided"),
    Case({"mnk": (45, 23, 77), "layouts": ("padded", "padded")}, torch.float16, label="NaN past the edges"),
    Case({"mnk": (128, 256, 64)}, torch.float16, label="exactly one large tile", cuda_only=True),
    Case({"mnk": (129, 264, 72)}, torch.float16, label="the descriptor path, one past a tile"),
    Case({"mnk": (200, 272, 136), "layouts": ("padded", "padded")}, torch.float16,
         label="the descriptor path, NaN past the edges"),
    Case({"mnk": (8192 + 1, 1024, 2048 - 1)}, torch.float16, label="tall, odd", cuda_only=True),
    Case({"mnk": (64, 8192, 4096)}, torch.bfloat16, label="few rows, long K", cuda_only=True),
]
