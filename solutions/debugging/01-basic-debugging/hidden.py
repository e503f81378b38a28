"""Hidden grading cases for 01-basic-debugging: the sweep around other blocks, and layouts, dtypes
and grid shapes the public tests do not show."""

import torch

from grader.cases import Case, public_spec

ROW_MEAN = public_spec("debugging/01-basic-debugging", "row_mean")
TRANSPOSE = public_spec("debugging/01-basic-debugging", "transpose")

CASES = [
    # row_max: around a block of 128, and past two chunks of the largest block
    Case({"shape": (3, 113), "values": "negative"}, label="largest prime below 127"),
    Case({"shape": (4, 129), "values": "negative"}, torch.float16, label="one lane into the next block"),
    Case({"shape": (5, 127), "layout": "padded", "values": "negative"}, label="padded rows"),
    Case({"shape": (1, 8195), "values": "negative"}, label="two chunks and three lanes"),
    Case({"shape": (3, 2, 131), "nan_rows": True}, label="a NaN in every other row, 3-D"),
    Case({"shape": (257,), "values": "negative"}, label="1-D: a single row of negatives"),
    Case({"shape": (20_000, 257), "values": "negative"}, torch.float16, label="large", cuda_only=True),
    # row_mean
    Case({"shape": (3, 113)}, spec=ROW_MEAN, label="largest prime below 127"),
    Case({"shape": (4, 131), "layout": "padded"}, torch.float16, spec=ROW_MEAN, label="padded rows"),
    Case({"shape": (2, 8191), "offset": 30.0}, torch.float16, spec=ROW_MEAN,
         label="large fp16 sums, two chunks"),
    Case({"shape": (5, 2, 1)}, spec=ROW_MEAN, label="rows of one element, 3-D"),
    Case({"shape": (9, 127), "layout": "transposed", "offset": -20.0}, torch.float16, spec=ROW_MEAN,
         label="x a transpose, negative mean"),
    Case({"shape": (8192, 3000), "offset": 40.0}, torch.float16, spec=ROW_MEAN, label="large",
         cuda_only=True),
    # transpose: wide and tall grids
    Case({"shape": (1, 200)}, spec=TRANSPOSE, label="one row, grid 1 x 4"),
    Case({"shape": (200, 1)}, torch.float16, spec=TRANSPOSE, label="one column, grid 4 x 1"),
    Case({"shape": (129, 127), "layout": "padded"}, spec=TRANSPOSE, label="padded, grid 3 x 2"),
    Case({"shape": (5, 0)}, spec=TRANSPOSE, label="no columns"),
    Case({"shape": (3000, 70_000)}, torch.float16, spec=TRANSPOSE, label="large, wide", cuda_only=True),
]
