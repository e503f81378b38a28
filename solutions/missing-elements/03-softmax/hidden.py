"""Hidden grading cases for 03-softmax: shapes and layouts the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"shape": (2, 2)}, label="two columns"),
    Case({"shape": (3, 2047)}, torch.float16, label="one short of a power of two"),
    Case({"shape": (2, 3, 2, 33)}, label="4-D"),
    Case({"shape": (4, 3, 70), "layout": "every-other-row"}, label="leading dims that do not merge"),
    Case({"shape": (9, 65), "layout": "every-other-row"}, torch.float16, label="every other row"),
    Case({"shape": (5, 129), "layout": "broadcast-row"}, label="row stride 0"),
    Case({"shape": (11, 257), "scale": 50.0, "minus_inf": True}, torch.float16,
         label="large values and -inf"),
    Case({"shape": (1, 12289)}, label="long row"),
    Case({"shape": (6, 3), "layout": "column-strided"}, torch.float16, label="transposed"),
    Case({"shape": (300, 1000), "minus_inf": True}, torch.bfloat16, label="-inf entries",
         cuda_only=True),
    Case({"shape": (8192, 8192), "scale": 30.0}, torch.float16, label="large", cuda_only=True),
    Case({"shape": (100, 65536)}, torch.bfloat16, label="longest rows", cuda_only=True),
    Case({"shape": (20000, 513), "layout": "row-strided"}, label="large, strided rows",
         cuda_only=True),
]
