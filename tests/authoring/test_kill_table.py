"""The kill table (grader.authoring.kill_table, `python -m grader mutants`): a planted mistake the
cases catch is killed, one they cannot see survives and fails the command."""

import subprocess
import sys

from grader.authoring import kill_table, mistakes
from grader.core.catalog import REPO_ROOT, find_module

VECTOR_ADD = find_module("missing-elements/01-vector-add")
SAME = mistakes.Mistake("spacing changed (behaves the same)", "def add(", "def add(  ", cause=r"nothing")


def test_a_caught_mistake_is_killed_and_an_invisible_one_survives(tmp_path):
    listed = mistakes.for_module(VECTOR_ADD)[0]
    killed = kill_table.plant(VECTOR_ADD, listed, tmp_path)
    assert killed.public_failing > 0 and killed.verdict == "killed" and killed.named
    assert killed.hidden_total > 0, "an instructor's checkout: the hidden cases run too"
    same = kill_table.plant(VECTOR_ADD, SAME, tmp_path, hidden=False, functions=False)
    assert (same.public_failing, same.hidden_total, same.verdict) == (0, 0, "SURVIVED")
    text = kill_table.table(VECTOR_ADD, [killed, same])
    assert f"| {SAME.name} | 0 of {same.public_total} | 0 of 0 | SURVIVED |" in text
    assert "Mutation score: 1 of 2 killed by the public tests (50%)" in text


def test_a_mistake_only_a_test_function_catches_is_killed_by_it(tmp_path):
    """The cases pass, but `make check` fails: a pytest-only check (the shape validation) catches it."""
    unchecked = mistakes.Mistake(
        "shapes not compared", "    if x.shape != y.shape:", "    if False and x.shape != y.shape:", cause=r"shape"
    )
    kill = kill_table.plant(VECTOR_ADD, unchecked, tmp_path, hidden=False)
    assert kill.public_failing == 0 and kill.functions_failing == ("test_rejects_mismatched_shapes",)
    assert kill.verdict == "killed by test_rejects_mismatched_shapes" and kill.killed_in_public
    assert "1 of 1 killed by the public tests" in kill_table.score_line([kill])


def test_the_command_fails_while_a_mutant_survives(tmp_path):
    extra = tmp_path / "extra.py"
    extra.write_text(
        "from grader.authoring.mistakes import Mistake\n"
        f"MISTAKES = [Mistake({SAME.name!r}, {SAME.before!r}, {SAME.after!r}, cause='nothing')]\n"
    )
    command = [sys.executable, "-m", "grader", "mutants", "--no-hidden", "--extra", str(extra)]
    run = subprocess.run(
        [*command, "--module", VECTOR_ADD.id], capture_output=True, text=True, cwd=REPO_ROOT, check=False
    )
    assert run.returncode == 1 and "SURVIVED" in run.stdout and "grid rounds down" in run.stdout
    both = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    assert both.returncode == 2 and "name it with --module" in both.stdout
