"""The versions of Triton, PyTorch and NumPy the course supports, checked when the grader starts.

A version outside the range is named at once, with what to do, instead of surfacing later as a
misleading diagnosis of a correct kernel (Triton 3.5's launcher lacks what the launch counter
wraps, so every kernel would read as "never launched"). Older than supported is an error; newer
than tested is a warning, since a new release usually works. A new minor release is supported by
moving one bound here; ``tests/core/test_versions.py`` holds ``pyproject.toml``'s pins to these ranges.
"""

from __future__ import annotations

import sys

# (oldest, newest) major.minor of each, both included.
SUPPORTED = {"triton": ((3, 6), (3, 9)), "torch": ((2, 11), (2, 15))}
PYTHON = ((3, 10), (3, 13))
GRADING_PYTHON = (3, 11)  # nbgrader 0.9.6, which grading and releasing use, needs it


def grading_problem() -> str | None:
    """Why the instructors' commands cannot run here (nbgrader missing), with what to do; None if they can."""
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        pass
    else:
        return None
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if sys.version_info[:2] < GRADING_PYTHON:
        return (
            f"Grading needs nbgrader, which needs Python {_shown(GRADING_PYTHON)} or newer, and this is Python "
            f"{here}. Rebuild the environment with a newer Python: `make clean-env`, then `make grade "
            "BOOTSTRAP_PYTHON=python3.12` (or any of 3.11 to 3.13)."
        )
    return (
        "Grading needs nbgrader, which is not installed here: `make grade` installs it, or "
        "`pip install -e '.[grading]'` in your own environment."
    )


class UnsupportedVersion(RuntimeError):
    """An installed version this course cannot run with; the message says what to do."""


def major_minor(version: str) -> tuple[int, int]:
    """(3, 6) for "3.6.0", "3.6.0+cu130" or "3.6.0.dev1"."""
    parts = version.split("+")[0].split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def _shown(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def findings(
    installed: dict[str, str], numpy: str | None = None, interpreter: bool = True
) -> tuple[list[str], list[str]]:
    """(errors, warnings) for the ``installed`` versions of the packages in ``SUPPORTED``, and of
    NumPy where kernels run in Triton's ``interpreter``."""
    errors, warnings = [], []
    for name, (oldest, newest) in SUPPORTED.items():
        if name not in installed:
            continue
        found = major_minor(installed[name])
        supported = f"{_shown(oldest)}-{_shown(newest)}"
        if found < oldest:
            errors.append(
                f"{name} {installed[name]} is older than this course supports ({supported}). Rebuild the "
                "course's environment with `make clean-env`, then `make check`; with your own environment, "
                f"`pip install '{name}>={_shown(oldest)}'`."
            )
        elif found > newest:
            warnings.append(
                f"{name} {installed[name]} is newer than this course was tested with ({supported}); "
                "if something fails that should not, try the newest tested version."
            )
    if (
        interpreter
        and numpy is not None
        and "triton" in installed
        and major_minor(installed["triton"]) == (3, 6)
        and major_minor(numpy) >= (2, 4)
    ):
        warnings.append(
            f"numpy {numpy} breaks Triton 3.6's interpreter for kernels whose loops run to a length "
            "passed at run time (NumPy refuses the one-element bound): `pip install 'numpy<2.4'`, or "
            "a newer Triton."
        )
    return errors, warnings


def installed_versions() -> tuple[dict[str, str], str | None]:
    import numpy
    import torch
    import triton

    return {"triton": triton.__version__, "torch": torch.__version__}, numpy.__version__


def check(interpreter: bool) -> None:
    """Raise ``UnsupportedVersion`` for a version the course cannot run with; warn on stderr
    about one newer than tested, or a NumPy that the ``interpreter`` cannot use."""
    errors, warnings = findings(*installed_versions(), interpreter=interpreter)
    if errors:
        raise UnsupportedVersion("\n".join(errors))
    for warning in warnings:
        print(f"Note: {warning}", file=sys.stderr)
