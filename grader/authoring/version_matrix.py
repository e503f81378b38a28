"""The version matrix (``make verify-versions``): every reference's public tests and a
representative part of the course's own suite, in fresh environments built for the oldest and the
newest supported Python, PyTorch and Triton (``grader.core.versions``).

Each row gets its own virtual environment under ``build/versions/<row>`` (kept, so that a second
run only tests), with PyTorch's CPU build where its index can be reached, else PyTorch from the
general index (a CUDA build, several GB, which runs on a CPU too). The table at the end names the
versions each row really installed.

    python -m grader.authoring.version_matrix [--row oldest] [--row 3.12:2.14:3.8] [--fresh]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from grader.core import versions
from grader.core.catalog import REPO_ROOT

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MATRIX_DIR = REPO_ROOT / "build" / "versions"
# What else the rows run beside every module's public tests: the parts that lean on Triton's and
# PyTorch's internals (the interpreter hooks, the launch counter, the sandboxed child, the wire format).
SUITE = (
    "tests/core/test_versions.py",
    "tests/core/test_memcheck.py",
    "tests/core/test_traffic.py",
    "tests/sandbox/test_wire.py",
    "tests/policy/test_policy.py",
    "tests/core/test_diagnosis.py",
    "tests/sandbox/test_child_hardening.py",
)


@dataclass
class Row:
    name: str
    python: str  # major.minor
    torch: str  # major.minor
    triton: str  # major.minor


def _shown(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


ROWS = {
    "oldest": Row(
        "oldest",
        _shown(versions.PYTHON[0]),
        _shown(versions.SUPPORTED["torch"][0]),
        _shown(versions.SUPPORTED["triton"][0]),
    ),
    "newest": Row(
        "newest",
        _shown(versions.PYTHON[1]),
        _shown(versions.SUPPORTED["torch"][1]),
        _shown(versions.SUPPORTED["triton"][1]),
    ),
}


@dataclass
class RowOutcome:
    row: Row
    installed: dict = field(default_factory=dict)  # package -> version
    build: str = ""  # "CPU" or "CUDA" (PyTorch's)
    install_seconds: float = 0.0
    size_gb: float = 0.0
    tests: dict = field(default_factory=dict)  # passed/failed/skipped/errors -> count
    test_seconds: float = 0.0
    problem: str = ""  # why the row could not be built or run


def parse_row(text: str) -> Row:
    """A row named in ``ROWS``, or ``python:torch:triton`` as major.minor numbers."""
    if text in ROWS:
        return ROWS[text]
    parts = text.split(":")
    if len(parts) != 3 or not all(re.fullmatch(r"\d+\.\d+", p) for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: name a row ({', '.join(ROWS)}) or give python:torch:triton, e.g. 3.12:2.14:3.8"
        )
    return Row(text.replace(":", "-"), *parts)


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` (major.minor) that runs: one pyenv installed, else on PATH
    (pyenv's own shims on PATH run only the versions pyenv has selected)."""
    candidates = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    found = shutil.which(f"python{version}")
    for python in [*reversed(candidates), *([found] if found else [])]:
        if subprocess.run([python, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return python
    return None


def _cpu_index_reachable() -> bool:
    try:
        urllib.request.urlopen(f"{TORCH_CPU_INDEX}/", timeout=5)
        return True
    except OSError:
        return False


def _run(command: list[str], log, **kwargs) -> int:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False, **kwargs).returncode


def build(row: Row, folder: Path, log, fresh: bool) -> str:
    """Build ``row``'s environment in ``folder`` (kept from an earlier run unless ``fresh``);
    "" when it is ready, else why not."""
    python = find_python(row.python)
    if python is None:
        return f"no Python {row.python} on this machine (install it, e.g. with pyenv)"
    if fresh:
        shutil.rmtree(folder, ignore_errors=True)
    ready = folder / ".ready"
    if ready.exists():
        return ""
    shutil.rmtree(folder, ignore_errors=True)
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q"]
    index = ["--extra-index-url", TORCH_CPU_INDEX] if _cpu_index_reachable() else []
    steps = [
        [python, "-m", "venv", str(folder)],
        pip + ["--upgrade", "pip"],
        pip + [f"torch=={row.torch}.*", f"triton=={row.triton}.*", *index],
        # The course itself, its pins checked against the row's versions, and the test runner.
        pip + ["-e", str(REPO_ROOT), f"torch=={row.torch}.*", f"triton=={row.triton}.*", "pytest-xdist>=3", *index],
    ]
    for step in steps:
        if _run(step, log) != 0:
            return f"`{' '.join(step[-4:])}` failed (see the log)"
    ready.touch()
    return ""


def installed(folder: Path) -> tuple[dict, str]:
    probe = (
        "import sys, platform, torch, triton, numpy; "
        "print(platform.python_version(), torch.__version__, triton.__version__, numpy.__version__, "
        "'CUDA' if torch.version.cuda else 'CPU')"
    )
    out = subprocess.run(
        [str(folder / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=False
    ).stdout.split()
    if len(out) != 5:
        return {}, ""
    return dict(zip(("python", "torch", "triton", "numpy"), out[:4])), out[4]


def size_gb(folder: Path) -> float:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total / 1e9


def pytest_counts(output: str) -> dict:
    """passed/failed/skipped/errors from pytest's closing line."""
    last = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    counts = {}
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", last[-1] if last else ""):
        counts["errors" if word.startswith("error") else word] = int(number)
    return counts


def run_row(row: Row, fresh: bool = False, workers: int = 2) -> RowOutcome:
    folder = MATRIX_DIR / row.name
    MATRIX_DIR.mkdir(parents=True, exist_ok=True)
    outcome = RowOutcome(row)
    with open(MATRIX_DIR / f"{row.name}.log", "w") as log:
        started = time.monotonic()
        outcome.problem = build(row, folder, log, fresh)
        outcome.install_seconds = time.monotonic() - started
        if outcome.problem:
            return outcome
        outcome.installed, outcome.build = installed(folder)
        outcome.size_gb = size_gb(folder)
        started = time.monotonic()
        command = [
            str(folder / "bin" / "python"),
            "-m",
            "pytest",
            "-q",
            "--impl=solutions",
            "-n",
            str(workers),
            "--dist",
            "loadfile",
            "tracks",
            *SUITE,
        ]
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        result = subprocess.run(
            command,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "GRADER_DEVICE": os.environ.get("GRADER_DEVICE", "cpu")},
        )
        log.write(result.stdout + result.stderr)
        outcome.test_seconds = time.monotonic() - started
        outcome.tests = pytest_counts(result.stdout)
        if result.returncode != 0:
            outcome.problem = f"pytest exited {result.returncode} (see build/versions/{row.name}.log)"
    return outcome


def table(outcomes: list[RowOutcome]) -> str:
    lines = [
        "| row | Python | PyTorch | Triton | NumPy | install (s, GB) | references and suite | test time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        v = o.installed
        tests = ", ".join(f"{n} {k}" for k, n in o.tests.items()) or "-"
        cells = [
            o.row.name,
            v.get("python", o.row.python),
            f"{v.get('torch', o.row.torch)} {o.build}",
            v.get("triton", o.row.triton),
            v.get("numpy", "-"),
            f"{o.install_seconds:.0f}, {o.size_gb:.1f}",
            tests + (f"; {o.problem}" if o.problem else ""),
            f"{o.test_seconds:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.authoring.version_matrix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--row",
        action="append",
        type=parse_row,
        help="a row to run: oldest, newest, or python:torch:triton (default: oldest and newest)",
    )
    parser.add_argument("--fresh", action="store_true", help="rebuild the rows' environments")
    parser.add_argument("--workers", type=int, default=2, help="pytest workers per row (default 2)")
    args = parser.parse_args(argv)
    outcomes = []
    for row in args.row or list(ROWS.values()):
        print(f"{row.name}: Python {row.python}, PyTorch {row.torch}, Triton {row.triton} ...", flush=True)
        outcomes.append(run_row(row, args.fresh, args.workers))
    print(table(outcomes))
    return 0 if all(not o.problem for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
