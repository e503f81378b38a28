"""NVIDIA compute-sanitizer for the course's kernels: run Python code under it in a child process
and turn its report into one plain sentence per finding, like the interpreter's memory checker
(``grader.core.memcheck``) does on a CPU.

compute-sanitizer ships with the CUDA toolkit (``/usr/local/cuda/bin``) and instruments every
kernel the process launches. Its tools, and what each one sees:

- ``memcheck``: accesses out of bounds of any allocation, and misaligned accesses, to global,
  shared and local memory; hardware exceptions (an illegal address stops the kernel).
- ``initcheck``: reads of global memory that nothing has written since it was allocated.
- ``racecheck``: hazards on **shared** memory between the threads of one block. It does not look
  at global memory: two programs (blocks) that overwrite each other's results in global memory
  are not reported; on a GPU they show as results that change from run to run.
- ``synccheck``: barriers used wrongly.

``--tool gsan`` runs Triton's own GSan instead (Triton 3.9 and later): races on global memory
between the programs of a launch, the kind racecheck cannot see; it needs PyTorch's caching
allocator, which is left on for it.

Two settings make its reports about PyTorch tensors precise, and ``run_python`` sets both:

- ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``. PyTorch's caching allocator carves tensors out of large
  cudaMalloc blocks, so a store a little past a tensor's end usually lands inside such a block,
  in another tensor or in spare room, and memcheck sees nothing wrong; a fresh tensor's memory
  is often recycled, so initcheck counts it as written. Without the cache every tensor is its
  own allocation (slower, but exact).
- Line information: Triton compiles kernels with it unless ``TRITON_DISABLE_LINE_INFO=1``, so a
  report names the kernel's file and line. The variable is removed for the child.

``grader.core.sanitizer_report`` reads the text compute-sanitizer prints into findings and their
sentences.

Usage from a shell, on a machine with a GPU::

    python -m grader sanitize --tool memcheck my_script.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grader.core.catalog import REPO_ROOT
from grader.core.sanitizer_report import (
    SanitizerFinding,
    gsan_available,
    gsan_command,
    parse_gsan,
    parse_report,
    reported_errors,
)

__all__ = ["TOOLS", "SanitizerRun", "find_tool", "command", "run", "run_python", "run_function", "main"]

TOOLS = ("memcheck", "initcheck", "racecheck", "synccheck", "gsan")
GSAN = "gsan"  # Triton's own sanitizer for races on global memory (Triton 3.9 and later), not compute-sanitizer's


@dataclass
class SanitizerRun:
    """What one run under compute-sanitizer gave: its command, exit code, output and findings."""

    tool: str
    command: list[str]
    returncode: int
    output: str
    findings: list[SanitizerFinding] = field(default_factory=list)
    errors: int | None = None  # the summary's count

    @property
    def clean(self) -> bool:
        return not self.findings and not self.errors and self.returncode == 0

    def in_kernel(self, name: str) -> list[SanitizerFinding]:
        """The findings in kernels whose name contains ``name``."""
        return [f for f in self.findings if name in f.kernel]

    @property
    def name(self) -> str:
        return "GSan" if self.tool == GSAN else f"compute-sanitizer --tool {self.tool}"

    def report(self) -> str:
        if self.clean:
            return f"{self.name}: nothing to report."
        if not self.findings and self.returncode:
            return (
                f"{self.name} found no problem, but the program exited with code {self.returncode}; its "
                "output ends with:\n" + "\n".join(self.output.splitlines()[-15:])
            )
        lines = [
            f"{self.name} found {len(self.findings)} problem(s)"
            + (f" ({self.errors} error(s) in its summary)" if self.errors else "")
            + ":"
        ]
        lines += [f"  - {finding}" for finding in self.findings]
        return "\n".join(lines)


def find_tool() -> str | None:
    """The compute-sanitizer executable: on PATH, else in the CUDA toolkit; None if absent."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    homes = [os.environ.get(name) for name in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for home in filter(None, homes):
        for candidate in (
            Path(home) / "bin" / "compute-sanitizer",
            Path(home) / "compute-sanitizer" / "compute-sanitizer",
        ):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def command(
    program: list[str], tool: str = "memcheck", print_limit: int = 20, sanitizer: str | None = None
) -> list[str]:
    """The command line that runs ``program`` (an argv: Python and a script) under compute-sanitizer's
    ``tool``, or under GSan (``gsan``), which runs the script in a Python of its own."""
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}; the tools are {', '.join(TOOLS)}")
    if tool == GSAN:
        if not torch.cuda.is_available():
            raise FileNotFoundError(
                "GSan instruments kernels compiled for a GPU, and there is no CUDA GPU here. On a CPU, "
                "make check runs every case under the memory checker, which finds races between programs too."
            )
        if not gsan_available():
            import triton

            raise FileNotFoundError(
                f"GSan ships with Triton 3.9 and later, and this environment has Triton {triton.__version__}: "
                "install a newer Triton, or check for races by running the kernel several times against a "
                "reference (on a GPU) and with the memory checker (make check, on a CPU)."
            )
        return gsan_command(program[1:])
    tool_path = sanitizer or find_tool()
    if tool_path is None:
        raise FileNotFoundError(
            "compute-sanitizer was not found: it ships with the CUDA toolkit (e.g. "
            "/usr/local/cuda/bin); add that folder to PATH or set CUDA_HOME."
        )
    return [tool_path, "--tool", tool, "--print-limit", str(print_limit), *program]


def child_environment(caching: bool = False, extra: dict | None = None) -> dict[str, str]:
    """The environment of the sanitized child: the course on PYTHONPATH, native kernels with line
    information, and (unless ``caching``) one cudaMalloc per PyTorch tensor."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    for name in ("TRITON_INTERPRET", "TRITON_DISABLE_LINE_INFO"):
        env.pop(name, None)
    if not caching:
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    env.update(extra or {})
    return env


def run(
    program: list[str],
    tool: str = "memcheck",
    print_limit: int = 20,
    timeout: float = 600,
    caching: bool = False,
    env: dict | None = None,
    cwd: str | Path | None = None,
    sanitizer: str | None = None,
) -> SanitizerRun:
    """Run ``program`` (an argv) under compute-sanitizer (or GSan) and read its report."""
    if tool == GSAN:
        # GSan's memory sits behind PyTorch's caching allocator, which must stay on.
        return _run_gsan(
            program, timeout, cwd, child_environment(True, {**(env or {}), "PYTORCH_NO_CUDA_MEMORY_CACHING": "0"})
        )
    argv = command(program, tool, print_limit, sanitizer)
    child = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=child_environment(caching, env)
    )
    output = child.stdout + child.stderr
    return SanitizerRun(tool, argv, child.returncode, output, parse_report(output, tool), reported_errors(output))


def _run_gsan(program: list[str], timeout: float, cwd, env: dict[str, str]) -> SanitizerRun:
    """GSan runs a script by its path: code given with ``-c`` goes to a file of its own first."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        if program[1:2] == ["-c"]:
            script = Path(folder) / "sanitized.py"
            script.write_text(program[2])
            program = [program[0], str(script), *program[3:]]
        argv = command(program, GSAN)
        child = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    output = child.stdout + child.stderr
    findings = parse_gsan(output)
    return SanitizerRun(GSAN, argv, child.returncode, output, findings, sum(f.count for f in findings) or None)


def run_python(code: str, **options) -> SanitizerRun:
    """Run Python source ``code`` in a child interpreter under compute-sanitizer (see ``run``)."""
    return run([sys.executable, "-c", code], **options)


def run_function(path: str | Path, function: str, **options) -> SanitizerRun:
    """Import the Python file ``path`` in a child interpreter and call its ``function()`` (no
    arguments) under compute-sanitizer (see ``run``)."""
    if not function.isidentifier():
        raise ValueError(f"{function!r} is not a function name")
    path = Path(path).resolve()
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('sanitized_module', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['sanitized_module'] = module\n"
        "spec.loader.exec_module(module)\n"
        f"module.{function}()\n"
        "import torch\n"
        "torch.cuda.synchronize()\n"
    )
    return run_python(code, **options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader sanitize",
        description="Run a Python script under compute-sanitizer (or GSan: --tool gsan) and explain its findings "
        "in plain sentences.",
    )
    parser.add_argument("--tool", choices=TOOLS, default="memcheck")
    parser.add_argument("--print-limit", type=int, default=20, help="reports the tool prints at most")
    parser.add_argument(
        "--caching", action="store_true", help="keep PyTorch's caching allocator (overruns inside its blocks go unseen)"
    )
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    try:
        result = run(
            [sys.executable, options.script, *options.args],
            tool=options.tool,
            print_limit=options.print_limit,
            caching=options.caching,
        )
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 2
    print(result.report())
    return 0 if result.clean else 1


if __name__ == "__main__":
    sys.exit(main())
