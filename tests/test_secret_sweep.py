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
