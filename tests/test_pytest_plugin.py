"""The course's pytest plugin (grader/pytest_plugin.py), where a suite's own run can show it: a
failure named as it happens with --failures-at-once, so that a run stopped at a time limit (the
GPU's correctness pass) still says which tests failed."""

from __future__ import annotations

import pytest

TESTS = """
def test_breaks():
    assert 1 == 2

def test_holds():
    pass
"""


def _run(folder, capsys, *extra: str) -> str:
    """pytest in this process on ``folder``'s tests, with the course's plugin: what it printed."""
    arguments = ["-p", "grader.pytest_plugin", "-p", "no:cacheprovider", "-q", f"--rootdir={folder}"]
    code = pytest.main([*arguments, *extra, str(folder)])
    assert code == pytest.ExitCode.TESTS_FAILED, capsys.readouterr()
    return capsys.readouterr().out


def test_failures_at_once_names_each_failure_before_the_summary(tmp_path, capsys):
    (tmp_path / "test_sample.py").write_text(TESTS)
    said = _run(tmp_path, capsys, "--failures-at-once")
    before_summary = said.split("= FAILURES =")[0]
    assert "FAILED test_sample.py::test_breaks - assert 1 == 2" in before_summary, said
    assert "test_holds" not in before_summary
    assert "FAILED test_sample.py::test_breaks" not in _run(tmp_path, capsys).split("= FAILURES =")[0]


def test_the_plugin_loads_without_xdist(tmp_path, capsys):
    """Its xdist hook is optional: `-p no:xdist` must not stop the run with an unknown hook."""
    (tmp_path / "test_other_sample.py").write_text(TESTS)  # a module name this process has not imported
    said = _run(tmp_path, capsys, "-p", "no:xdist", "--failures-at-once")
    assert "1 failed, 1 passed" in said, said


def test_a_test_that_breaks_the_cuda_context_is_named_at_its_teardown(tmp_path, capsys, monkeypatch):
    import torch

    from grader.core import device

    def lost():
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    monkeypatch.setattr(device, "is_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lost)
    (tmp_path / "test_third_sample.py").write_text(TESTS)
    try:
        said = _run(tmp_path, capsys, "-p", "no:xdist")
    finally:
        monkeypatch.undo()  # before this test's own teardown, which runs the same check
    assert "ERROR at teardown of test_breaks" in said or "ERROR test_third_sample.py::test_breaks" in said, said
    assert "left the process's CUDA context unusable (CUDA error: an illegal memory access" in said, said


PATCHING = """
import torch

def test_patches_cuda(monkeypatch):
    def lost():
        raise RuntimeError("invalid argument to exchangeDevice")

    monkeypatch.setattr(torch.cuda, "synchronize", lost)

def test_after():
    pass
"""


def test_a_test_that_patches_torch_cuda_is_not_blamed_and_the_tests_after_it_run(tmp_path, capsys, monkeypatch):
    """The check runs once the test's own fixtures are undone: a test that patches torch.cuda (to
    act as if there were no GPU) leaves the context as it found it, and nothing after it errors."""
    import torch

    from grader.core import device

    monkeypatch.setattr(device, "is_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    (tmp_path / "test_patching_sample.py").write_text(PATCHING)
    arguments = [
        "-p",
        "grader.pytest_plugin",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-q",
        f"--rootdir={tmp_path}",
    ]
    try:
        code = pytest.main([*arguments, str(tmp_path)])
    finally:
        monkeypatch.undo()
    said = capsys.readouterr().out
    assert code == pytest.ExitCode.OK and "2 passed" in said, said
    assert "unusable" not in said and "not torn down" not in said, said
