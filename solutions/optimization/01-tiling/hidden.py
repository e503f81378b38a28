"""Hidden grading cases for 01-tiling: shapes and layouts the public tests do not show."""

import torch

from grader.cases import Case, public_spec

MATMUL = public_spec("optimization/01-tiling", "matmul")

CASES = [
    Case({"shape": (2, 3)}, label="tiny"),
    Case({"shape": (1, 1025)}, torch.float16, label="one long row"),
    Case({"shape": (130, 66)}, label="two tiles and a sliver"),
    Case({"shape": (64, 200), "layout": "transposed"}, torch.float16, label="x a transpose"),
    Case({"shape": (17, 129), "layout": "sliced"}, label="sliced x"),
    Case({"shape": (8192 + 1, 511)}, torch.float16, label="very tall", cuda_only=True),
    Case({"mnk": (1, 17, 33)}, spec=MATMUL, label="one row"),
    Case({"mnk": (17, 1, 9)}, torch.float16, spec=MATMUL, label="one column"),
    Case({"mnk": (11, 13, 1)}, spec=MATMUL, label="K of 1"),
    Case({"mnk": (15, 18, 50), "layouts": ("sliced", "transposed")}, spec=MATMUL, label="sliced a, transposed b"),
    Case({"mnk": (128, 128, 64)}, torch.float16, spec=MATMUL, label="exactly one large tile", cuda_only=True),
    Case({"mnk": (1000, 3, 700)}, spec=MATMUL, label="tall and thin", cuda_only=True),
    Case({"mnk": (4096 - 1, 4096 + 1, 1024 + 3)}, torch.float16, spec=MATMUL, label="large, odd", cuda_only=True),
]
