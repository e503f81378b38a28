"""Hidden grading cases for 01-vector-add: sizes and layouts the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"shape": (2,)}, label="two elements"),
    Case({"shape": (1023,)}, torch.float16, label="one short of a block"),
    Case({"shape": (2049,)}, label="two blocks and one"),
    Case({"shape": (65_537,)}, torch.float16, label="tail"),
    Case({"shape": (2, 3, 4, 5)}, label="4-D"),
    Case({"shape": (257, 3), "layout": "strided"}, torch.float16, label="non-contiguous"),
    Case({"shape": (12_289,)}, torch.bfloat16, label="tail", cuda_only=True),
    Case({"shape": ((1 << 26) + 17,)}, torch.float16, label="large", cuda_only=True),
]
