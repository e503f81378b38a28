"""The supported versions: one table (grader.core.versions), held to the package's pins, and an
installed version outside it named at start-up with what to do."""

import re

import pytest

from grader.core import versions
from grader.core.catalog import REPO_ROOT


def _bounds(requirement: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(oldest, newest) major.minor from a ">=a.b,<c.d" requirement."""
    low = re.search(r">=\s*(\d+)\.(\d+)", requirement)
    high = re.search(r"<\s*(\d+)\.(\d+)", requirement)
    oldest = (int(low[1]), int(low[2]))
    newest = (int(high[1]), int(high[2]) - 1)
    return oldest, newest


def test_the_package_pins_are_the_supported_ranges():
    """A new minor release is one line in versions.SUPPORTED and one pin: this test keeps them together."""
    project = (REPO_ROOT / "pyproject.toml").read_text()  # read as text: tomllib needs Python 3.11
    for name, supported in versions.SUPPORTED.items():
        pin = re.search(rf'"{name}(>=[^"]*)"', project)[1]
        assert _bounds(pin) == supported, (name, pin, supported)
    assert _bounds(re.search(r'requires-python = "([^"]*)"', project)[1]) == versions.PYTHON
    makefile = (REPO_ROOT / "Makefile").read_text()
    oldest, newest = versions.SUPPORTED["torch"]
    assert f'"torch>={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}"' in makefile, (
        "the Makefile's CUDA install of PyTorch names the same range"
    )


def test_an_older_triton_is_named_with_what_to_do():
    errors, _ = versions.findings({"triton": "3.5.1", "torch": "2.13.0+cpu"})
    assert len(errors) == 1 and errors[0].startswith("triton 3.5.1 is older than this course supports (3.6-3.9)")
    assert "make clean-env" in errors[0]


def test_a_newer_release_is_a_note_not_a_refusal():
    errors, warnings = versions.findings({"triton": "3.10.0", "torch": "2.16.0.dev20261201+cu130"})
    assert errors == [] and len(warnings) == 2 and "newer than this course was tested with" in warnings[0]


def test_numpy_that_breaks_the_interpreter_is_named_only_where_the_interpreter_runs():
    installed = {"triton": "3.6.0", "torch": "2.11.0"}
    assert "numpy 2.5.0 breaks Triton 3.6's interpreter" in versions.findings(installed, "2.5.0")[1][0]
    assert versions.findings(installed, "2.5.0", interpreter=False) == ([], [])
    assert versions.findings({"triton": "3.9.0", "torch": "2.13.0"}, "2.5.0") == ([], [])


def test_check_raises_with_the_message(monkeypatch):
    monkeypatch.setattr(versions, "installed_versions", lambda: ({"triton": "3.4.0", "torch": "2.13.0"}, "2.3.0"))
    with pytest.raises(versions.UnsupportedVersion, match="older than this course supports"):
        versions.check(interpreter=True)


def test_the_grading_python_is_the_same_in_the_pin_the_makefile_and_the_table():
    """nbgrader's own floor, stated three times: the extra's marker, the Makefile's early check,
    and the message of the instructors' commands."""
    floor = "{}.{}".format(*versions.GRADING_PYTHON)
    project = (REPO_ROOT / "pyproject.toml").read_text()
    assert re.search(r'"nbgrader==[^;"]*; python_version >= \'(\d+\.\d+)\'"', project)[1] == floor
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert f"sys.version_info[:2] >= ({versions.GRADING_PYTHON[0]}, {versions.GRADING_PYTHON[1]})" in makefile
    assert f"needs Python {floor} or newer" in makefile


def test_the_instructors_commands_say_what_to_do_without_nbgrader(monkeypatch, capsys):
    import builtins
    import sys

    from grader.grade import commands

    real_import = builtins.__import__

    def no_nbgrader(name, *args, **kwargs):
        if name == "nbgrader" or name.startswith("nbgrader."):
            raise ImportError("No module named 'nbgrader'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_nbgrader)
    monkeypatch.delitem(sys.modules, "nbgrader", raising=False)
    ran = []
    assert commands._guarded(lambda args: ran.append(args) or 0)(None) == 2
    assert not ran
    message = capsys.readouterr().out
    assert "Grading needs nbgrader" in message
    monkeypatch.setattr(versions.sys, "version_info", (3, 10, 14))
    assert "needs Python 3.11 or newer, and this is Python 3.10" in versions.grading_problem()


def test_the_conda_environments_take_their_versions_from_the_package():
    """environment.yml installs the package (its pins are pyproject's); the CPU variant pins only
    PyTorch's CPU build, the same version the Makefile installs, inside the supported range."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    torch_version = re.search(r"TORCH_VERSION \?= (\S+)", makefile)[1]
    cpu = (REPO_ROOT / "environment-cpu.yml").read_text()
    assert f"- torch=={torch_version}+cpu" in cpu and "download.pytorch.org/whl/cpu" in cpu
    oldest, newest = versions.SUPPORTED["torch"]
    assert oldest <= versions.major_minor(torch_version) <= newest
    for name in ("environment.yml", "environment-cpu.yml"):
        text = (REPO_ROOT / name).read_text()
        assert "- -e .[notebooks]" in text, name
        python = tuple(int(n) for n in re.search(r"- python=(\d+\.\d+)", text)[1].split("."))
        assert versions.PYTHON[0] <= python <= versions.PYTHON[1], name


def test_the_version_matrix_rows_are_the_ends_of_the_supported_ranges():
    from grader.authoring import version_matrix as matrix

    oldest, newest = matrix.ROWS["oldest"], matrix.ROWS["newest"]
    assert (oldest.python, oldest.torch, oldest.triton) == ("3.10", "2.11", "3.6")
    ends = (versions.PYTHON[1], versions.SUPPORTED["torch"][1], versions.SUPPORTED["triton"][1])
    assert (newest.python, newest.torch, newest.triton) == tuple("{}.{}".format(*v) for v in ends)
    assert matrix.parse_row("3.12:2.14:3.8").torch == "2.14"
    with pytest.raises(Exception, match="python:torch:triton"):
        matrix.parse_row("3.12-2.14")


def test_the_version_matrix_reads_pytest_s_closing_line():
    from grader.authoring.version_matrix import pytest_counts

    closing = "....\n1 failed, 120 passed, 3 skipped in 5.0s\n"
    assert pytest_counts(closing) == {"failed": 1, "passed": 120, "skipped": 3}
    assert pytest_counts("2 errors in 1.0s") == {"errors": 2}
    assert pytest_counts("nothing ran") == {}
