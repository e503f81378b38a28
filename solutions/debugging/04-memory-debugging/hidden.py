"""Hidden grading cases for 04-memory-debugging: lengths, shapes and layouts the public tests do
not show, for each of the four functions."""

import torch

from grader.cases import Case, public_spec

ADD_BIAS = public_spec("debugging/04-memory-debugging", "add_bias")
COLUMN_SUM = public_spec("debugging/04-memory-debugging", "column_sum")
SCALE = public_spec("debugging/04-memory-debugging", "scale")

CASES = [
    Case({"n": 2}, label="two elements"),
    Case({"n": 4097}, torch.float16, label="one past a block"),
    Case({"n": 140_007}, label="several rounds of the grid-stride loop, a partial last block"),
    Case({"n": 777, "layout": "strided"}, torch.bfloat16, label="every other element"),
    Case({"n": 4097, "past fp16": "end"}, torch.float16, label="products past float16's range, one in each block"),
    Case({"n": (1 << 25) - 1}, torch.float16, label="large", cuda_only=True),

    Case({"shape": (1, 513)}, spec=ADD_BIAS, label="one row, a column past two tiles"),
    Case({"shape": (17, 1)}, torch.float16, spec=ADD_BIAS, label="one column"),
    Case({"shape": (33, 129), "layout": "row-strided"}, torch.bfloat16, spec=ADD_BIAS, label="strided rows"),
    Case({"shape": (40, 24), "layout": "transposed"}, spec=ADD_BIAS, label="x a transpose"),
    Case({"shape": (2048, 777)}, torch.bfloat16, spec=ADD_BIAS, label="large", cuda_only=True),

    Case({"shape": (1, 300)}, spec=COLUMN_SUM, label="one row"),
    Case({"shape": (33, 1)}, spec=COLUMN_SUM, label="one column, two programs"),
    Case({"shape": (129, 129)}, torch.float16, spec=COLUMN_SUM, label="one past a power of two"),
    Case({"shape": (50, 40), "layout": "transposed"}, torch.bfloat16, spec=COLUMN_SUM, label="x a transpose"),
    Case({"shape": (3, 0)}, spec=COLUMN_SUM, label="no columns"),
    # Totals near 300 (100000 values of size 1), built from about a hundred atomic adds that each
    # round by up to 2e-5: the error grows with the number of adds, past the spec's 2e-4.
    Case({"shape": (100_000, 64)}, spec=COLUMN_SUM, label="many rows", cuda_only=True,
         tolerances={torch.float32: (1e-3, 1e-4)}),

    Case({"shape": (1,)}, torch.float16, spec=SCALE, label="one fp16 element"),
    Case({"shape": (1025,)}, spec=SCALE, label="one past a block"),
    Case({"shape": (3, 5, 7), "alpha": 0.0}, torch.bfloat16, spec=SCALE, label="3-D, alpha 0"),
    Case({"shape": (999,), "layout": "offset", "alpha": 2}, torch.bfloat16, spec=SCALE,
         label="starting at an odd element, an integer alpha"),
    Case({"shape": ((1 << 26) + 1,)}, torch.bfloat16, spec=SCALE, label="large", cuda_only=True),
]
