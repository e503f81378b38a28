"""Hidden grading cases for 04-layer-norm: shapes, layouts and values the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"shape": (3, 1)}, torch.float16, label="N = 1"),
    Case({"shape": (6, 129)}, label="one past a power of two"),
    # y = (x - mean) * rstd with rstd = 1/sqrt(eps) ~ 316: the float32 rounding of the mean
    # (~1e-7 relative) is multiplied by 316, so a correct GPU kernel is ~3e-5 off here.
    Case({"shape": (10, 33), "layout": "constant"}, label="constant rows, variance 0",
         tolerances={torch.float32: (5e-4, 1e-4)}),
    Case({"shape": (2, 3, 4, 33)}, label="4-D"),
    Case({"shape": (8, 250), "offset": -500.0, "scale": 2.0}, torch.float16, label="large negative mean"),
    Case({"shape": (12, 640), "offset": -300.0, "affine": "none"}, label="large negative mean",
         tolerances={torch.float32: (5e-4, 1e-4)}),  # see LARGE_MEAN_FP32 in test_kernel.py
    Case({"shape": (10, 120), "affine": "bias"}, torch.float16, label="bias only"),
    Case({"shape": (3, 7, 45), "layout": "row-strided"}, label="strided rows, 3-D"),
    Case({"shape": (1, 1000), "eps": 1e-3}, label="one long row"),
    Case({"shape": (0, 16)}, label="no rows"),
    Case({"shape": (100, 24), "layout": "transposed"}, label="non-contiguous"),
    Case({"shape": (8192, 1536)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (512, 32768)}, torch.float16, label="long fp16 rows", cuda_only=True),
    Case({"shape": (20_000, 777), "layout": "row-strided"}, label="large", cuda_only=True),
]
