"""Hidden grading cases for 02-fused-operations: shapes, layouts and values the public tests do not show."""

import torch

from grader.cases import Case, public_spec

LINEAR = public_spec("mastery/02-fused-operations", "linear_bias_act")
LN_LINEAR = public_spec("mastery/02-fused-operations", "layer_norm_linear")

CASES = [
    # layer_norm_act
    Case({"shape": (3, 1), "activation": "silu"}, torch.float16, label="N = 1"),
    Case({"shape": (6, 129), "activation": "gelu"}, label="one past a power of two"),
    Case({"shape": (0, 16), "activation": "gelu"}, label="no rows"),
    Case({"shape": (5, 33), "affine": "bias", "activation": "gelu_tanh"}, torch.bfloat16, label="bias only"),
    Case({"shape": (9, 1000), "layout": "constant", "value": (98765.43, -54321.9, 777.7), "activation": "gelu"},
         label="constant rows of large magnitude"),
    Case({"shape": (8, 250), "offset": -500.0, "scale": 2.0, "activation": "silu"}, torch.float16,
         label="large negative mean"),
    Case({"shape": (3, 7, 45), "activation": "gelu"}, label="3-D, odd rows"),
    Case({"shape": (100, 24), "layout": "transposed", "activation": "silu"}, label="non-contiguous"),
    Case({"shape": (4, 500), "weight_scale": 80.0, "activation": "gelu"}, label="large activation inputs"),
    Case({"shape": (7, 129), "vectors": "strided", "activation": "silu"}, torch.bfloat16,
         label="weight and bias strided, one past a power of two"),
    Case({"shape": (8192, 1536), "activation": "gelu"}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (20_000, 777), "layout": "row-strided", "activation": "gelu_tanh"}, label="large",
         cuda_only=True),
    # linear_bias_act
    Case({"mnk": (5, 7, 0), "activation": "gelu"}, spec=LINEAR, label="K = 0: y = act(bias)"),
    Case({"mnk": (0, 7, 9), "activation": "silu"}, spec=LINEAR, label="no rows"),
    Case({"mnk": (1, 300, 33), "activation": "gelu_tanh"}, torch.float16, spec=LINEAR, label="one row"),
    Case({"mnk": (70, 1, 45), "activation": "gelu"}, spec=LINEAR, label="one output feature"),
    Case({"mnk": (37, 29, 45), "layouts": ("transposed", "row-strided"), "bias": False, "activation": "silu"},
         torch.float16, spec=LINEAR, label="strided x and weight, no bias"),
    Case({"mnk": (130, 70, 129), "activation": "gelu"}, spec=LINEAR, label="several tiles and k-steps"),
    Case({"mnk": (40, 70, 33), "layouts": ("transposed", "row-major"), "vectors": "strided", "activation": "gelu"},
         torch.float16, spec=LINEAR, label="x a transpose, bias strided"),
    Case({"mnk": (4096, 4096, 4096), "activation": "gelu"}, torch.bfloat16, spec=LINEAR, label="large bf16",
         cuda_only=True),
    # layer_norm_linear
    Case({"mnk": (0, 8, 16)}, spec=LN_LINEAR, label="no rows"),
    Case({"mnk": (9, 1, 33), "bias": False}, spec=LN_LINEAR, label="one output feature, no bias"),
    Case({"mnk": (40, 17, 129), "offset": -300.0, "scale": 0.5}, torch.float16, spec=LN_LINEAR,
         label="large negative mean"),
    Case({"mnk": (30, 20, 70), "layouts": ("row-strided", "transposed"), "eps": 1e-3}, spec=LN_LINEAR,
         label="strided x, transposed weight, eps"),
    Case({"mnk": (21, 40, 65), "offset": 50.0, "vectors": "strided"}, spec=LN_LINEAR,
         label="ln_weight, ln_bias and bias strided, mean far from 0"),
    Case({"mnk": (4096, 4096, 4096)}, torch.bfloat16, spec=LN_LINEAR, label="large bf16", cuda_only=True),
]
