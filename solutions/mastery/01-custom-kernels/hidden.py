"""Hidden grading cases for 01-custom-kernels: sizes, dtypes, layouts and coefficients the public
tests do not show, forward and backward."""

import torch

from grader.cases import Case, public_spec

MODULE = "mastery/01-custom-kernels"
SILU_BACKWARD = public_spec(MODULE, "SILU_BACKWARD")
POLY_ACT, POLY_ACT_BACKWARD = public_spec(MODULE, "POLY_ACT"), public_spec(MODULE, "POLY_ACT_BACKWARD")
GLU, GLU_BACKWARD = public_spec(MODULE, "GLU"), public_spec(MODULE, "GLU_BACKWARD")
COMPLEX_MUL, COMPLEX_MUL_BACKWARD = public_spec(MODULE, "COMPLEX_MUL"), public_spec(MODULE, "COMPLEX_MUL_BACKWARD")
CUBIC = (0.5, -1.0, 0.25, 0.1)

CASES = [
    Case({"shape": (1025,)}, torch.float16, label="one past a block"),
    Case({"shape": (3, 7, 11)}, torch.bfloat16, label="3-D"),
    Case({"shape": (40, 30), "scale": 50.0}, torch.float16, label="saturated sigmoid"),
    Case({"shape": (11, 70), "layout": "row-strided"}, label="rows not packed"),
    Case({"shape": (6, 9)}, torch.float64, label="float64"),
    Case({"shape": (1 << 20, 3)}, torch.float16, label="large", cuda_only=True),
    Case({"shape": (1023,)}, spec=SILU_BACKWARD, label="backward, one short of a block"),
    Case({"shape": (5, 7), "upstream": "sliced"}, torch.bfloat16, spec=SILU_BACKWARD,
         label="backward, grad_y every other element"),
    Case({"shape": (12, 25), "layout": "sliced", "upstream": "transposed"}, spec=SILU_BACKWARD,
         label="backward, x and grad_y strided"),
    Case({"shape": (0, 3)}, spec=SILU_BACKWARD, label="backward, no elements"),
    Case({"shape": (3, 1000, 777), "upstream": "transposed"}, torch.float16, spec=SILU_BACKWARD,
         label="backward, large, grad_y a transpose", cuda_only=True),
    Case({"shape": (257,), "coeffs": (0.0, 0.0, 0.0, 1.0)}, spec=POLY_ACT, label="x^3 alone"),
    Case({"shape": (6, 13), "coeffs": (1, -2, 3)}, torch.float16, spec=POLY_ACT, label="integer coefficients"),
    Case({"shape": (30, 8), "coeffs": CUBIC, "layout": "sliced"},
         torch.bfloat16, spec=POLY_ACT, label="x every other element"),
    Case({"shape": (999,), "coeffs": (0.0, 0.0, 0.0, 2.0), "scale": 4.0}, torch.float16, spec=POLY_ACT_BACKWARD,
         label="backward, large cubic"),
    Case({"shape": (9, 10), "coeffs": (0.3, 0.7), "upstream": "sliced"}, spec=POLY_ACT_BACKWARD,
         label="backward, linear: the gradient is c1 * grad_y"),
    Case({"shape": (4, 5), "coeffs": (1.0, -1.0, 0.5, -0.1)}, torch.float64, spec=POLY_ACT_BACKWARD,
         label="backward, float64"),
    Case({"shape": (8,), "dim": 0}, spec=GLU, label="1-D"),
    Case({"shape": (2, 3, 4, 5), "dim": 2}, torch.bfloat16, spec=GLU, label="dim 2 of 4"),
    Case({"shape": (2, 4096)}, torch.float16, spec=GLU, label="whole blocks"),
    Case({"shape": (5, 18), "layout": "sliced"}, spec=GLU, label="x every other element"),
    Case({"shape": (0, 6)}, spec=GLU, label="no rows"),
    Case({"shape": (8,), "dim": -1}, spec=GLU_BACKWARD, label="backward, 1-D"),
    Case({"shape": (2, 3, 4, 5), "dim": 2}, torch.bfloat16, spec=GLU_BACKWARD, label="backward, dim 2 of 4"),
    Case({"shape": (6, 20), "dim": 0, "upstream": "sliced"}, spec=GLU_BACKWARD, label="backward, dim 0, grad_y strided"),
    Case({"shape": (16, 1024, 1024), "dim": 1}, torch.bfloat16, spec=GLU_BACKWARD, label="backward, large, dim 1",
         cuda_only=True),
    Case({"shape": (7, 2), "layout": "pairs apart"}, torch.float16, spec=COMPLEX_MUL,
         label="real and imaginary parts not adjacent"),
    Case({"shape": (1, 1026)}, spec=COMPLEX_MUL, label="one past a block of pairs"),
    Case({"shape": (0, 4)}, spec=COMPLEX_MUL, label="no elements"),
    Case({"shape": (2, 3, 4, 2)}, torch.bfloat16, spec=COMPLEX_MUL, label="4-D, (..., N, 2)"),
    Case({"shape": (9, 2), "layout": "pairs apart"}, spec=COMPLEX_MUL_BACKWARD,
         label="backward, real and imaginary parts not adjacent"),
    Case({"shape": (3, 22), "upstream": "sliced"}, torch.float16, spec=COMPLEX_MUL_BACKWARD,
         label="backward, grad_z every other element"),
    Case({"shape": (1, 2)}, torch.bfloat16, spec=COMPLEX_MUL_BACKWARD, label="backward, one complex number"),
    Case({"shape": (4096, 4096, 2)}, torch.float16, spec=COMPLEX_MUL_BACKWARD, label="backward, large", cuda_only=True),
]
