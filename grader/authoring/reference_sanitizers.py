"""The references under the GPU's own tools: the clean controls of the memory comparison.

``python -m grader.authoring.reference_sanitizers --sanitizers OUT_DIR [--cases K] [--jobs N]``,
on a GPU: every module's reference runs the first ``K`` public cases of each of its functions (and
the first case too large for the interpreter, where a function has one: the Hopper paths live
there) natively, once under each of compute-sanitizer's memcheck, racecheck and initcheck, and
under GSan where Triton has it (``grader.authoring.sanitizers`` runs them and reads their output).
The references are correct, so anything a tool reports is a false alarm of that tool, or a bug of
the reference to look into. The interpreter's checker has no column here: the CPU suite runs every
public case of every reference under it.

``--plain NAME`` is one such run without a tool (what each tool wraps); it prints a line per case
and exits 1 if a case failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grader.authoring import sanitizers
from grader.core import cases, checks, device
from grader.core.catalog import MODULES, Module
from grader.core.loading import load_kernel
from grader.core.sanitizer_report import gsan_command

SCRIPT = Path(__file__).resolve()
CHECKED_IN_THE_SUITE = "the CPU suite"  # the checker's verdict, for the table


def entry_name(module: Module) -> str:
    """A module as one path component (the tools' logs go to OUT_DIR/<name>/)."""
    return f"{module.track}-{module.slug}"


def module_named(name: str) -> Module:
    for module in MODULES:
        if name in (entry_name(module), module.id):
            return module
    raise LookupError(f"no module is named {name!r}: use a module id such as missing-elements/01-vector-add.")


def picked_cases(module: Module, per_function: int) -> list[tuple[cases.Spec, cases.Case]]:
    """The first ``per_function`` public cases of each function (each Spec) that the interpreter
    can run, and on a GPU also the first of its cases that only a GPU runs."""
    module_spec, found = cases.public(module)
    picked = []
    for spec in cases.specs_of(module_spec, found):
        own = [case for case in found if cases.spec_for(case, module_spec) is spec]
        chosen = [case for case in own if not case.cuda_only][:per_function]
        if device.is_cuda():  # the interpreter cannot run these (too large, or dtypes it gets wrong)
            chosen += [case for case in own if case.cuda_only][:1]
        picked += [(spec, case) for case in chosen]
    return picked


def heaviest_first(modules: list[Module], per_function: int) -> list[Module]:
    """The modules with the most cases first: started last, they would hold up the end of a run."""
    return sorted(modules, key=lambda m: len(picked_cases(m, per_function)), reverse=True)


def plain(name: str, per_function: int) -> int:
    """Run the reference's picked cases in this process; 1 if any failed."""
    module = module_named(name)
    kernel = load_kernel(module, "solutions")
    failed = 0
    for spec, case in picked_cases(module, per_function):
        result = checks.run_case(kernel.api(spec.api), spec, case)
        failed += not result.passed
        print(f"{spec.api} {case.name}: {'passed' if result.passed else 'FAILED ' + result.message[:300]}", flush=True)
    return 1 if failed else 0


def command_for(per_function: int):
    """The command line of one run of ``tool`` on the reference ``name``."""

    def command(tool: str, name: str) -> list[str]:
        plain_run = [str(SCRIPT), "--plain", name, "--cases", str(per_function)]
        if tool == "gsan":
            return gsan_command(plain_run)
        error_exit = ["--error-exitcode", str(sanitizers.ERROR_EXIT)]
        return ["compute-sanitizer", "--tool", tool, *error_exit, sys.executable, *plain_run]

    return command


def sanitize(modules: list[Module], out_dir: Path, per_function: int, jobs: int, timeout: float) -> int:
    if not device.is_cuda():
        print(
            "--sanitizers runs the references natively under the GPU's tools and there is no CUDA GPU here; "
            "on a CPU the checker already runs every public case of every reference in the suite (make test).",
            file=sys.stderr,
        )
        return 2
    problem = sanitizers.unavailable(True)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = [sanitizers.Entry(entry_name(m), "", 0, ()) for m in heaviest_first(modules, per_function)]
    for entry in entries:
        entry.checker = sanitizers.Verdict(verdict=CHECKED_IN_THE_SUITE)
    gsan_note = sanitizers.run(
        entries, out_dir, jobs=jobs, timeout=timeout, command_for=command_for(per_function), with_checker=False
    )
    failed = [f"{e.name} ({t})" for e in entries for t, r in e.tools.items() if r.returncode not in (0, None)]
    notes = (
        [f"runs that exited with an error (a failed case, or a tool's finding): {', '.join(failed)}"] if failed else []
    )
    sanitizers.publish(entries, out_dir, gsan_note, {"cases_per_function": str(per_function)}, notes)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.authoring.reference_sanitizers",
        description="The references under compute-sanitizer and GSan (clean controls).",
    )
    parser.add_argument(
        "--sanitizers", metavar="OUT_DIR", type=Path, help="on a GPU: run every reference under the tools"
    )
    parser.add_argument("--plain", metavar="NAME", help="run one reference's cases without a tool")
    parser.add_argument("--only", help="module ids, comma-separated (default: all)")
    parser.add_argument("--cases", type=int, default=2, help="public cases of each function (default 2)")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 8, help="processes at a time (default: one a core)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    args = parser.parse_args(argv)
    if args.plain:
        return plain(args.plain, args.cases)
    if not args.sanitizers:
        parser.error("give --sanitizers OUT_DIR (or --plain NAME)")
    modules = [module_named(n.strip()) for n in args.only.split(",")] if args.only else [m for m in MODULES if m.api]
    return sanitize(modules, args.sanitizers, max(args.cases, 1), args.jobs, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
