"""Hidden grading cases for 02-error-handling: shapes, dims and layouts the public tests do not show."""

import torch

from grader.cases import Case, public_spec, refusal

MATMUL = public_spec("debugging/02-error-handling", "matmul")
SOFTMAX = public_spec("debugging/02-error-handling", "softmax")
CONVERT = r"\.float\(\)|\.to\("

CASES = [
    Case({"shape": (5, 0, 3), "dim": 0}, label="empty, softmax over a non-empty dim"),
    Case({"shape": (0, 0)}, torch.float16, label="no rows, no columns"),
    Case({"shape": (1, 4097)}, torch.float16, label="one row just past a power of two"),
    Case({"shape": (2, 3, 9, 5), "dim": 2}, label="4-D, dim 2"),
    Case({"shape": (17, 11), "dim": 0, "layout": "row-strided"}, label="dim 0 of strided rows"),
    Case({"shape": (4, 5, 6), "layout": "transposed", "dim": 1}, label="3-D transpose, the middle dim"),
    Case({"shape": (3, 500), "scale": 100.0, "minus_inf": True}, torch.float16,
         label="large values and -inf entries"),
    Case({"shape": (8, 1, 9), "dim": 1}, label="a dim of size 1: every result is 1"),
    Case({"shape": (2, 16384), "layout": "sliced"}, label="long rows, every other column"),
    Case({"shape": (5, 48), "layout": "broadcast"}, torch.bfloat16, label="one row repeated (row stride 0)"),
    Case({"shape": (32, 2048)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (100, 8192), "dim": 0}, label="dim 0, large", cuda_only=True),
    Case({"mnk": (3, 700, 17)}, spec=MATMUL, label="one row of C, many tile columns"),
    Case({"mnk": (257, 33, 129)}, torch.float16, spec=MATMUL, label="tails in every dimension"),
    Case({"mnk": (30, 140, 20), "layouts": ("sliced", "transposed")}, torch.float16, spec=MATMUL,
         label="non-contiguous a and b"),
    Case({"mnk": (0, 0, 7)}, spec=MATMUL, label="empty C"),
    Case({"mnk": (384, 640, 256)}, torch.bfloat16, spec=MATMUL, label="aligned bf16", cuda_only=True),
    Case({"mnk": (4096, 4096, 4096)}, torch.float16, spec=MATMUL, label="aligned, large", cuda_only=True),
    # The module's lesson is the validation as much as the fixed kernels: other bad inputs than the
    # public ones, refused with a message that says what to do.
    refusal(SOFTMAX, lambda rand: (((1.0, 2.0),), {}), (TypeError,), r"tensor", r"tuple",
            why="say that softmax() takes a tensor and what it was given instead", label="refuses a tuple"),
    refusal(SOFTMAX, lambda rand: ((torch.ones(2, 3, dtype=torch.int32, device=rand.device),), {}), (TypeError,),
            r"int32", r"float32", CONVERT, why="name the dtype it got, the dtypes it supports, and how to convert",
            label="refuses int32"),
    refusal(SOFTMAX, lambda rand: ((torch.tensor(2.0, dtype=torch.float16, device=rand.device),), {}),
            (ValueError,), r"dimension", why="say that a 0-dimensional tensor has no dimension to normalise over",
            label="refuses a 0-d float16 tensor"),
    *(refusal(SOFTMAX, lambda rand, dim=dim: ((rand.randn(2, 3, 4),), {"dim": dim}), (IndexError,), rf"{dim}",
              r"-3", r"\b2\b", why="name the dim it got and the dims a 3-D x can take (-3 to 2)",
              label=f"refuses dim={dim} of a 3-D x") for dim in (3, -4)),
]
