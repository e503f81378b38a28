"""Hidden grading cases for 05-production-ready: shapes, dtypes, layouts and values the public
tests do not show, forward and backward, for the operator the learner registers (layer_norm_gelu).
bias_gelu_residual is given complete, so it is tested in public and not graded."""

import torch

from grader.cases import Case, public_spec

X_ONLY = public_spec("mastery/05-production-ready", "LAYER_NORM_GELU_X_ONLY")

CASES = [
    Case({"shape": (1, 1)}, label="a single element", tolerances={torch.float32: (1e-4, 1e-4)}),
    Case({"shape": (3, 129)}, torch.float16, label="one past a power of two"),
    Case({"shape": (2, 2, 2, 24)}, label="4-D, rows shared"),
    Case({"shape": (5, 17)}, torch.float64, label="float64 (gradcheck's dtype)"),
    Case({"shape": (7, 64), "offset": -300.0, "scale": 2.0}, label="rows far below 0"),
    Case({"shape": (4, 3, 0, 12)}, torch.bfloat16, label="no rows, 4-D"),
    Case({"shape": (6, 45), "eps": 0.5, "scale": 0.1, "dy": "broadcast"}, label="eps larger than the variance"),
    Case({"shape": (10, 24), "layout": "row-strided", "dy": "row-strided"}, torch.bfloat16,
         label="x and dy row-strided"),
    Case({"shape": (4, 2, 1000)}, torch.float16, label="3-D, long rows"),
    Case({"shape": (5, 33), "eps": 0.0, "scale": 3.0}, label="eps = 0"),
    Case({"shape": (8192, 1536)}, torch.bfloat16, label="bf16, many rows", cuda_only=True),
    Case({"shape": (256, 32768), "dy": "broadcast"}, torch.float16, label="long rows, dy broadcast", cuda_only=True),
    Case({"shape": (20000, 777), "layout": "row-strided"}, label="many rows, strided", cuda_only=True),

    Case({"shape": (14, 9), "affine": "bias", "layout": "transposed"}, torch.float16, spec=X_ONLY,
         label="bias only, x a transpose"),
    Case({"shape": (5, 1), "affine": "none"}, spec=X_ONLY, label="N = 1, no weight, no bias",
         tolerances={torch.float32: (1e-4, 1e-4)}),
    Case({"shape": (0, 10), "affine": "weight"}, spec=X_ONLY, label="no rows, weight only"),
    Case({"shape": (3, 40), "affine": "none", "offset": 1000.0}, spec=X_ONLY, label="no affine, rows near 1000",
         tolerances={torch.float32: (1e-4, 1e-4)}),
    Case({"shape": (4096, 1000), "affine": "weight"}, torch.bfloat16, spec=X_ONLY, label="weight only, large",
         cuda_only=True),
]
