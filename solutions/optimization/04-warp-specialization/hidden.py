"""Hidden grading cases for 04-warp-specialization: shapes and layouts the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"mnk": (1, 300, 7)}, label="one row"),
    Case({"mnk": (129, 1, 33)}, torch.float16, label="one column"),
    Case({"mnk": (17, 19, 1)}, label="K of 1"),
    Case({"mnk": (1030, 70, 20), "layouts": ("sliced", "transposed")}, label="two groups and a bit, strided"),
    Case({"mnk": (45, 23, 77), "layouts": ("padded", "padded"), "strided_bias": True}, torch.float16,
         label="NaN past the edges, strided bias"),
    Case({"mnk": (128 * 9 + 1, 256 * 3 - 1, 64)}, torch.float16, label="a partial last group", cuda_only=True),
    Case({"mnk": (4096, 4096 + 8, 1024)}, torch.bfloat16, label="large", cuda_only=True),
]
