"""Hidden grading cases for 04-layer-norm: shapes, layouts and values the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"shape": (3, 1)}, torch.float16, label="N = 1"),
    Case({"shape": (6, 129)}, label="one past a power of two"),
    # Variance 0, so rstd = 1/sqrt(eps) ~ 316 multiplies any error of the mean: a kernel that
    # shifts the row by its first element gets x - mean = 0 exactly, on any GPU.
    Case({"shape": (10, 33), "layout": "constant"}, label="constant rows, variance 0"),
    Case({"shape": (9, 1000), "layout": "constant", "value": (98765.43, -54321.9, 777.7)},
         label="constant rows of large magnitude"),
    Case({"shape": (5, 4097), "layout": "constant", "value": (1e6 + 0.3, -54321.9)},
         label="constant rows, one past a power of two"),
    Case({"shape": (6, 700), "layout": "constant", "value": (3.7, -0.37, 1e-3)},
         label="constant rows of small magnitude"),
    Case({"shape": (3, 12289), "layout": "constant", "value": -5555.5}, torch.float16,
         label="constant rows of large magnitude"),
    # A bf16 row of up to 65536 values sums exactly in float32 (8 significant bits), so only a
    # GPU's inexact float32 division moves an unshifted mean, and only for some N (300 is one).
    Case({"shape": (2, 3, 300), "layout": "constant", "value": (-5555.5, 12345.6, -2718.28)},
         torch.bfloat16, label="constant rows, 3-D"),
    Case({"shape": (2048, 1000), "layout": "constant", "value": (12345.6, -2718.28, 98765.43, -6e4)},
         torch.bfloat16, label="constant rows", cuda_only=True),
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
