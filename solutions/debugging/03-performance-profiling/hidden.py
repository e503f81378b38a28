"""Hidden grading cases for 03-performance-profiling: shapes, dtypes and layouts of bias_act() that
the public tests do not show. The larger ones have their memory traffic checked on a CPU too."""

import torch

from grader.cases import Case

TRAFFIC_HINT = "large enough to judge the memory traffic too."

CASES = [
    Case({"shape": (128, 513)}, torch.float16, label="memory traffic checked, one past a power of two",
         hint=TRAFFIC_HINT),
    Case({"shape": (257, 64), "activation": "relu"}, label="memory traffic checked, narrow rows", hint=TRAFFIC_HINT),
    Case({"shape": (70, 90), "layout": "transposed", "bias": False}, torch.float16,
         label="memory traffic checked, x a transpose, no bias", hint=TRAFFIC_HINT),
    Case({"shape": (3, 5, 7)}, label="3-D, short rows"),
    Case({"shape": (1000,), "activation": None}, label="1-D, bias only"),
    Case({"shape": (2, 1)}, torch.float16, label="one column"),
    Case({"shape": (16, 0)}, label="no columns"),
    Case({"shape": (31, 33), "layout": "sliced", "activation": "relu"}, torch.float16,
         label="every other column of a wider x"),
    Case({"shape": (17, 100), "bias": "strided", "activation": "relu"}, torch.float16, label="a strided bias, relu"),
    Case({"shape": (8192, 3000)}, torch.bfloat16, label="large bf16", cuda_only=True),
    Case({"shape": (1 << 20, 48), "bias": False}, label="many narrow rows", cuda_only=True),
]
