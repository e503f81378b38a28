"""Public tests for 03-softmax.  Run:  pytest tracks/missing-elements/03-softmax

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. Rows cover 1 column, powers of two and the lengths just past them, values large
enough to overflow exp() without the max subtraction, -inf entries, and rows that are not packed.
"""

import math

import torch

from grader.cases import Case, Spec, Suspect, refusal
from grader.checks import check_case


def make_inputs(case, rand):
    shape = case.params["shape"]
    *lead, n_cols = shape
    layout = case.params.get("layout", "contiguous")
    scale = case.params.get("scale", 1.0)
    if layout == "row-strided":
        # rows that are not packed: the first n_cols columns of a wider buffer (last dim contiguous)
        x = rand.randn(*lead, n_cols + 13, dtype=case.dtype, scale=scale)[..., :n_cols]
    elif layout == "column-strided":
        # the transpose of a contiguous tensor: neighbouring columns are far apart in memory
        x = rand.randn(n_cols, *lead, dtype=case.dtype, scale=scale).movedim(0, -1)
    elif layout == "every-other-row":
        # every other entry along the first dim: in 3-D and up the leading dims no longer merge
        # into one row stride, so flattening them has to copy
        first, *rest = lead
        x = rand.randn(2 * first - 1, *rest, n_cols, dtype=case.dtype, scale=scale)[::2]
    elif layout == "broadcast-row":
        # one row seen many times: a row stride of 0
        x = rand.randn(n_cols, dtype=case.dtype, scale=scale).expand(*shape)
    else:
        x = rand.randn(*shape, dtype=case.dtype, scale=scale)
    if case.params.get("minus_inf"):
        # every third column from column 1 on is -inf; column 0 stays finite, so no row is all -inf
        x = x.clone()
        x[..., 1::3] = float("-inf")
    if case.params.get("minus_inf_cols"):
        # these columns of every row are -inf: the row's other entries take all the weight
        x = x.clone()
        x[..., list(case.params["minus_inf_cols"])] = float("-inf")
    return (x,), {}


def reference(x):
    return torch.softmax(x, dim=-1)


def _softmax_base_2(x):
    """exp2 where exp is meant: 2^(x - max) / sum 2^(x - max), the softmax of x * ln(2)."""
    return torch.softmax(x * math.log(2.0), dim=-1)


SUSPECTS = (
    Suspect("exp2 in place of exp", _softmax_base_2,
            "exp2(t) is exp(t * ln 2): use tl.exp, or multiply by log2(e) = 1.4426950408889634 before tl.exp2."),
)


def torch_softmax(x):
    return torch.softmax(x, dim=-1)


def n_elements(case):
    return torch.Size(case.params["shape"]).numel()


LARGE_VALUES = ("values reach about 150, and exp() overflows float32 above 88: it stays finite "
                "only if the row's maximum is subtracted first.")
FP16_ROUNDING = ("float16 values a few units apart: x - max and exp() each round when computed in "
                 "float16, which the tolerance (about one rounding of the output) does not allow; "
                 "compute in float32 and round once, when storing.")
MINUS_INF_WEIGHT = ("an entry of -inf must get weight 0 and the finite one all of it. NaN usually "
                    "means the row maximum is -inf; a weight below 1.0 means the padded lanes of "
                    "the block (3 columns fill a block of 4) are not -inf.")

SPEC = Spec(
    api="softmax",
    make_inputs=make_inputs,
    row_wise=True,
    reference=reference,
    suspects=SUSPECTS,
    # Softmax outputs are probabilities, often far below 1 (about 1/n_cols on average), so the
    # absolute tolerances are tighter than the defaults, which suit values of order one.
    # float16: one rounding of the output (at most 2^-11 relative) and a little more, so that a
    # row computed in float16 (several roundings) fails.
    tolerances={torch.float32: (1e-6, 1e-4), torch.float16: (1e-6, 6e-4),
                torch.bfloat16: (1e-3, 1.6e-2)},
    bytes_moved=lambda case: 2 * n_elements(case) * case.dtype.itemsize,
    torch_baseline=torch_softmax,
    bench_cases=tuple(Case({"shape": (32768, 4096)}, dtype) for dtype in
                      (torch.float32, torch.float16, torch.bfloat16)),
    ceiling="copy",
    target=0.85,
)

CASES = [
    Case({"shape": (13, 100)}, label="non-power-of-two columns"),
    Case({"shape": (1, 1)}, label="one row, one column"),
    Case({"shape": (37, 1)}, label="one column"),
    Case({"shape": (1, 700)}, label="one row"),
    Case({"shape": (17,)}, label="1-D"),
    Case({"shape": (8, 128)}, label="power of two"),
    Case({"shape": (5, 1025)}, label="one column past a power of two"),
    Case({"shape": (24, 781)}, torch.float16, label="non-power-of-two columns"),
    Case({"shape": (3, 4, 50)}, torch.float16, label="3-D"),
    Case({"shape": (9, 200), "scale": 50.0}, label="large values", hint=LARGE_VALUES),
    Case({"shape": (9, 200), "scale": 50.0}, torch.float16, label="large values", hint=LARGE_VALUES),
    Case({"shape": (3, 4, 64), "scale": 30.0}, label="large values, 3-D", hint=LARGE_VALUES),
    Case({"shape": (16, 64), "scale": 2.0}, torch.float16, label="float16, wide spread", hint=FP16_ROUNDING),
    Case({"shape": (6, 300), "minus_inf": True}, label="-inf entries"),
    Case({"shape": (1, 2), "minus_inf_cols": (0,)}, label="first entry -inf", hint=MINUS_INF_WEIGHT),
    Case({"shape": (1, 3), "minus_inf_cols": (0, 2)}, label="one finite entry between -infs",
         hint=MINUS_INF_WEIGHT),
    Case({"shape": (0, 5)}, label="no rows: nothing to launch"),
    Case({"shape": (20, 96), "layout": "row-strided"}, label="strided rows"),
    Case({"shape": (2, 5, 33), "layout": "row-strided"}, torch.float16, label="strided rows, 3-D"),
    Case({"shape": (7, 300), "layout": "row-strided"}, torch.float16, label="strided rows"),
    Case({"shape": (16, 40), "layout": "column-strided"}, label="transposed"),
    Case({"shape": (2, 16384)}, label="long rows"),
    Case({"shape": (6, 7)}, label="small"),
    Case({"shape": (33, 515)}, torch.bfloat16, label="non-power-of-two columns", cuda_only=True),
    Case({"shape": (4096, 4096), "scale": 20.0}, torch.bfloat16, label="large", cuda_only=True),
    Case({"shape": (8192, 3000)}, label="large", cuda_only=True),
    Case({"shape": (512, 65536)}, torch.float16, label="longest rows", cuda_only=True),
]

# Refusals: bad inputs must raise a clear error before any kernel runs (graded like the results).
CASES += [
    refusal(SPEC, lambda rand: ((torch.ones(4, 8, dtype=torch.int32, device=rand.device),), {}),
            (ValueError, TypeError), r"dtype", why="say that the dtype (int32) is not one the kernel supports",
            label="refuses integer tensors"),
    refusal(SPEC, lambda rand: ((torch.tensor(1.0, device=rand.device),), {}), (ValueError, TypeError),
            r"dimension", why="say that a 0-dimensional tensor has no dimension to normalise over",
            label="refuses a 0-d tensor"),
    refusal(SPEC, lambda rand: ((torch.ones(1, 65537, device=rand.device),), {}), (ValueError, TypeError),
            r"columns", why="say that the rows have more columns than one block holds (at most 65536)",
            label="refuses rows longer than supported"),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)

