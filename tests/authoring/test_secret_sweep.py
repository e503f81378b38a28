"""The sweep of every case under many secrets: the reference passes, a wrong kernel is caught with
the secret that reproduces each failure."""

from grader.authoring import secret_sweep
from grader.core.catalog import find_module
from grader.core.loading import kernel_path

VECTOR_ADD = find_module("missing-elements/01-vector-add")


def test_the_reference_passes_every_case_under_every_secret():
    result = secret_sweep.sweep(VECTOR_ADD, count=2, seed=5)
    assert result.cases > 10 and result.failures == []
    assert secret_sweep.report(result).endswith("2 secrets, all passed")


def test_each_secret_meets_a_fresh_copy_of_the_file():
    """debugging/02's fallback warns once per process, as a grading's child loads the file once:
    a sweep that kept one copy saw no warning after the first secret and blamed the reference."""
    module = find_module("debugging/02-error-handling")
    result = secret_sweep.sweep(module, count=2, seed=5)
    assert result.failures == [], secret_sweep.report(result)


def test_a_wrong_kernel_fails_with_the_secret_of_each_failure(tmp_path):
    source = kernel_path(VECTOR_ADD, "solutions").read_text()
    assert "    output = x + y\n" in source
    wrong = tmp_path / "kernel.py"
    wrong.write_text(source.replace("    output = x + y\n", "    output = x - y\n"))

    result = secret_sweep.sweep(VECTOR_ADD, count=2, seed=5, impl=wrong)

    secrets = {failure.secret for failure in result.failures}
    assert len(secrets) == 2, "each secret draws inputs of its own"
    assert all("wrong" in failure.message for failure in result.failures)
    text = secret_sweep.report(result, shown=1)
    first = result.failures[0]
    assert f"{len(result.failures)} failed" in text and f"secret {first.secret}: {first.case}" in text
    assert f"and {len(result.failures) - 1} more" in text


def test_bf16_optimizer_steps_allow_for_the_interpreters_truncation():
    """Triton's interpreter truncates float32 -> bfloat16 where a GPU rounds to nearest, so three
    bf16 AdamW steps can lose three ulps. Under these secrets (found by a sweep of the hidden
    cases) the reference failed before the optimizers' tolerances allowed for it."""
    from grader.core import cases
    from grader.core.checks import run_case
    from grader.core.loading import load_kernel

    module = find_module("mastery/04-training-kernels")
    spec, _ = cases.public(module)
    case = next(c for c in cases.hidden(module) if c.label == "bf16, resumed state, strong decay")
    adamw = load_kernel(module, "solutions").api("adamw")
    for secret in (16636231633446, 177503367213145, 37485866686155):
        outcome = run_case(adamw, spec, case, secret)
        assert outcome.passed, f"secret {secret}: {outcome.message}"
