"""The checks catch the ways a kernel can look right and be wrong."""

import torch

from grader.cases import Case, Spec
from grader.checks import run_case

SPEC = Spec(api="double", make_inputs=lambda case, rand: ((rand.randn(case.params["n"]),), {}),
            reference=lambda x: 2 * x)
CASE = Case({"n": 100})


def test_correct_function_passes():
    assert run_case(lambda x: 2 * x, SPEC, CASE).passed


def test_unwritten_output_is_caught_by_poisoning():
    def half_written(x):
        out = torch.empty_like(x)
        out[:50] = 2 * x[:50]
        return out

    result = run_case(half_written, SPEC, CASE)
    assert not result.passed and "never written" in result.message


def test_input_mutation_is_caught():
    def in_place(x):
        x.mul_(2)
        return x.clone()

    result = run_case(in_place, SPEC, CASE)
    assert not result.passed and "changed its input" in result.message


def test_returning_an_input_is_caught():
    spec = Spec(api="same", make_inputs=SPEC.make_inputs, reference=lambda x: x)
    result = run_case(lambda x: x, spec, CASE)
    assert not result.passed and "returned one of its inputs" in result.message


def test_exceptions_become_messages():
    def broken(x):
        raise RuntimeError("boom")

    result = run_case(broken, SPEC, CASE)
    assert not result.passed and "double() raised RuntimeError: boom" in result.message


def test_wrong_dtype_and_count_of_outputs():
    assert "dtype torch.float64" in run_case(lambda x: 2 * x.double(), SPEC, CASE).message
    assert "returned 2 value(s)" in run_case(lambda x: (2 * x, x.clone()), SPEC, CASE).message


def test_inputs_are_reproducible_and_secret_dependent():
    from grader.checks import build_inputs

    (a,), _ = build_inputs(SPEC, CASE)
    (b,), _ = build_inputs(SPEC, CASE)
    (c,), _ = build_inputs(SPEC, CASE, secret=1234)
    assert torch.equal(a, b) and not torch.equal(a, c)
