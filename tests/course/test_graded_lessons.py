"""Every module's lesson is graded: what its public tests check is a graded case (in CASES, which
the grader runs in its sandbox), unless the test file says why not.

A module's test_kernel.py declares ``PYTEST_ONLY = {"test_name": "why the grader cannot or need
not grade this"}`` for each test that is not ``test_matches_reference`` (the graded cases, run by
pytest too). A test missing from it, or a reason that names no test, fails here, so a new test is
either a graded case or a decision written down.
"""

from __future__ import annotations

import ast
import runpy

import pytest

from grader.core.catalog import available_modules

MIN_REASON = 40  # characters: a reason, not a placeholder


def _tests_and_reasons(module) -> tuple[list[str], dict]:
    path = module.learner_dir / "test_kernel.py"
    tree = ast.parse(path.read_text())
    tests = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    namespace = runpy.run_path(str(path)) if "PYTEST_ONLY" in path.read_text() else {}
    return tests, dict(namespace.get("PYTEST_ONLY", {}))


@pytest.mark.parametrize("module", available_modules(), ids=lambda m: m.id)
def test_every_public_test_is_graded_or_says_why_not(module):
    tests, reasons = _tests_and_reasons(module)
    unexplained = [name for name in tests if name != "test_matches_reference" and name not in reasons]
    assert not unexplained, (
        f"{module.id}: these tests are not graded cases and PYTEST_ONLY gives no reason: "
        f"{unexplained}. Make each a case of CASES (cases.refusal for input validation) "
        "or say in PYTEST_ONLY why the grader cannot or need not grade it."
    )
    stale = sorted(set(reasons) - set(tests))
    assert not stale, f"{module.id}: PYTEST_ONLY names tests that do not exist: {stale}"
    short = [name for name, why in reasons.items() if len(str(why).strip()) < MIN_REASON]
    assert not short, f"{module.id}: PYTEST_ONLY's reasons for {short} are too short to say why"
    assert "test_matches_reference" in tests, f"{module.id} has no graded cases"


def test_the_audit_reads_a_reason_and_finds_a_missing_one(tmp_path):
    from types import SimpleNamespace

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "test_kernel.py").write_text(
        'PYTEST_ONLY = {"test_b": "' + "x" * MIN_REASON + '"}\n'
        "def test_matches_reference(kernel, case): pass\ndef test_a(): pass\ndef test_b(): pass\n"
    )
    tests, reasons = _tests_and_reasons(SimpleNamespace(learner_dir=folder))
    assert tests == ["test_matches_reference", "test_a", "test_b"] and set(reasons) == {"test_b"}
