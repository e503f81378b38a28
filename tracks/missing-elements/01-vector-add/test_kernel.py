"""Public tests for 01-vector-add.  Run:  pytest tracks/missing-elements/01-vector-add

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. Sizes cover 1, non-powers-of-two, exact multiples of the block and tails.
"""

import pytest
import torch

from grader.cases import Case, Spec
from grader.checks import check_case, expect_error
from grader import device

GIVEN_CHECKS = ("vector add's input checks are given in the starting file, not part of the exercise (its TODOs "
                "are the kernel's offsets, mask and launch): graded, they would count nothing for a file that "
                "keeps them, and would mark down the grader's hand-written example submissions, which test the "
                "sandbox with kernels that skip them.")
PYTEST_ONLY = {name: GIVEN_CHECKS for name in
               ("test_rejects_mismatched_shapes", "test_rejects_mixed_dtypes", "test_rejects_integer_tensors")}
PYTEST_ONLY["test_offsets_past_two_to_the_31"] = (
    "Vectors of more than 2**31 elements take about 13 GB of GPU memory, more than the grader gives one "
    "correctness process beside the others; make check runs it on a GPU with the memory free.")


def make_inputs(case, rand):
    shape = case.params["shape"]
    if case.params.get("layout") == "strided":
        # every other element of a buffer twice as long: a non-contiguous view
        x = rand.randn(*shape[:-1], 2 * shape[-1], dtype=case.dtype)[..., ::2]
        y = rand.randn(*shape[:-1], 2 * shape[-1], dtype=case.dtype)[..., ::2]
    else:
        x, y = rand.randn(*shape, dtype=case.dtype), rand.randn(*shape, dtype=case.dtype)
    return (x, y), {}


def n_elements(case):
    return torch.Size(case.params["shape"]).numel()


SPEC = Spec(
    api="add",
    make_inputs=make_inputs,
    reference=lambda x, y: x + y,
    bytes_moved=lambda case: 3 * n_elements(case) * case.dtype.itemsize,
    torch_baseline=torch.add,
    bench_cases=tuple(Case({"shape": (1 << 26,)}, dtype) for dtype in
                      (torch.float32, torch.float16, torch.bfloat16)),
    ceiling="copy",
    target=0.90,
)

CASES = [
    Case({"shape": (1,)}, label="size 1"),
    Case({"shape": (7,)}, label="smaller than a block"),
    Case({"shape": (1024,)}, label="exactly one block"),
    Case({"shape": (1025,)}, label="one element past a block"),
    Case({"shape": (98_432,)}, label="many blocks"),
    Case({"shape": (100_003,)}, label="tail"),
    Case({"shape": (4097,)}, torch.float16, label="tail"),
    Case({"shape": (33, 65)}, label="2-D"),
    Case({"shape": (3, 5, 67)}, torch.float16, label="3-D"),
    Case({"shape": (129, 31), "layout": "strided"}, label="non-contiguous"),
    Case({"shape": (4099,), "layout": "strided"}, torch.float16, label="non-contiguous"),
    Case({"shape": (3, 40, 9), "layout": "strided"}, label="non-contiguous, 3-D"),
    Case({"shape": (4097,)}, torch.bfloat16, label="tail", cuda_only=True),
    Case({"shape": ((1 << 24) + 3,)}, label="large", cuda_only=True),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


def test_rejects_mismatched_shapes(kernel):
    where = device.torch_device()
    expect_error(kernel.api("add"), torch.ones(4, device=where), torch.ones(5, device=where), match="shape")


def test_rejects_mixed_dtypes(kernel):
    where = device.torch_device()
    expect_error(kernel.api("add"), torch.ones(4, device=where),
                 torch.ones(4, device=where, dtype=torch.float16), match="dtype")


def test_rejects_integer_tensors(kernel):
    where = device.torch_device()
    expect_error(kernel.api("add"), torch.ones(4, dtype=torch.int32, device=where),
                 torch.ones(4, dtype=torch.int32, device=where), match="dtype")


def test_offsets_past_two_to_the_31(kernel):
    """Vectors of more than 2**31 elements: a block start pid * BLOCK_SIZE computed in int32 wraps
    around there, to an index before the vector (an illegal access, or wrong values)."""
    from grader import large_offsets

    if (why := large_offsets.why_not_here()) is not None:
        pytest.skip(why)
    large_offsets.check_vector_add(kernel.api("add"))
