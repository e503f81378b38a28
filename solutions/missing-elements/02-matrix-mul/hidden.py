"""Hidden grading cases for 02-matrix-mul: shapes and layouts the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"mnk": (1, 7, 300)}, label="one row, long K"),
    Case({"mnk": (129, 1, 33)}, torch.float16, label="one column"),
    Case({"mnk": (17, 19, 1)}, label="K of 1"),
    Case({"mnk": (128, 256, 64)}, torch.float16, label="exactly one large tile"),
    Case({"mnk": (130, 258, 66)}, label="one past a large tile"),
    Case({"mnk": (45, 23, 77), "layouts": ("transposed", "transposed")}, label="both transposed"),
    Case({"mnk": (26, 61, 34), "layouts": ("row-major", "sliced")}, torch.float16, label="sliced b"),
    Case({"mnk": (200, 3, 5), "layouts": ("sliced", "row-major")}, label="tall, sliced a"),
    Case({"mnk": (9, 70, 33), "layouts": ("padded", "transposed")}, label="NaN past a's edges"),
    Case({"mnk": (50, 18, 97), "layouts": ("row-major", "padded")}, torch.float16,
         label="NaN past b's edges"),
    Case({"mnk": (127, 255, 63)}, torch.bfloat16, label="one short of a large tile", cuda_only=True),
    Case({"mnk": (3000, 17, 2500), "layouts": ("transposed", "row-major")}, torch.float16,
         label="large, tall, a transposed", cuda_only=True),
    Case({"mnk": (4096 + 1, 4096 - 1, 512 + 3)}, torch.float16, label="large, odd", cuda_only=True),
]
