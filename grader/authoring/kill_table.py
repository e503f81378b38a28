"""The kill table: every typical mistake of a module planted into its reference, and which cases
catch it (``python -m grader mutants``, ``make mutants``).

The suite proves that each listed mistake is caught and named (``tests/course/test_mistakes.py``); this
shows the whole picture a maintainer needs when cases change or a new mistake is tried: for each
mutant, how many public and hidden cases fail, whether the first failures a learner reads name
its cause, and a score per module: the share killed by the public cases alone. Mutants from
another file (``--extra``, a file with ``MISTAKES`` like a module's ``mistakes.py``) are tried the
same way, so a bug seen in a learner's file can be checked against the cases before it is listed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from grader.authoring import mistakes
from grader.core import cases, device
from grader.core.catalog import REPO_ROOT, Module
from grader.core.checks import across, run_case
from grader.core.loading import load_kernel

FAILURES_READ = 3  # the first failures a learner reads, where the cause must be named


@dataclass
class Kill:
    mistake: mistakes.Mistake
    public_failing: int
    public_total: int
    hidden_failing: int
    hidden_total: int
    named: bool  # the first public failures (or, where no case fails, the failing test functions) name the cause
    skipped: str = ""  # why this device cannot show it
    # The public test functions outside the cases that fail (pytest-only checks: input validation,
    # warnings, properties), asked only where no public case fails.
    functions_failing: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "not on this device"
        if self.public_failing:
            return "killed" if self.named else "killed, cause not named"
        if self.functions_failing:
            named = "" if self.named else ", cause not named"
            return f"killed by {', '.join(self.functions_failing)}{named}"
        return "hidden cases only" if self.hidden_failing else "SURVIVED"

    @property
    def killed_in_public(self) -> bool:
        return bool(self.public_failing or self.functions_failing)


def extra_mistakes(path: Path) -> list[mistakes.Mistake]:
    """The ``MISTAKES`` of a file written like a module's mistakes.py."""
    return list(cases._import_file(Path(path), f"_extra_mistakes_{abs(hash(str(path)))}").MISTAKES)


def plant(module: Module, mistake: mistakes.Mistake, folder: Path, hidden: bool = True, functions: bool = True) -> Kill:
    """Plant ``mistake`` into the module's reference (a file in ``folder``) and run every case this
    device runs in this process: how many fail, and whether what a learner reads names it. Where
    no public case fails and ``functions`` is on, the public test functions outside the cases run
    too (``failing_functions``): a learner's `make check` runs them."""
    if mistake.gpu_only and not device.is_cuda():
        return Kill(mistake, 0, 0, 0, 0, False, mistake.gpu_only)
    if mistake.interpreter_only and device.is_cuda():
        return Kill(mistake, 0, 0, 0, 0, False, mistake.interpreter_only)
    planted = Path(folder) / "kernel.py"
    planted.write_text(mistake.apply((module.solution_dir / "kernel.py").read_text()))
    spec, public = cases.public(module)
    kernel = load_kernel(module, planted)

    def results(chosen: list) -> list:
        with warnings.catch_warnings():  # a mutant's overflows are its failures, not noise for the table
            warnings.simplefilter("ignore", RuntimeWarning)
            return [run_case(kernel.api(cases.spec_for(c, spec).api), spec, c) for c in chosen]

    public_cases = cases.for_mode(public, device.is_cuda())
    hidden_cases = cases.for_mode(cases.hidden(module), device.is_cuda()) if hidden else []
    public_results = results(public_cases)
    public_failed = [r for r in public_results if not r.passed]
    hidden_failed = [r for r in results(hidden_cases) if not r.passed]
    # What the learner reads first: the summary across cases, then the first failures.
    summary = across(spec, [(r.case, r.passed) for r in public_results]) or ""
    read = "\n".join([summary] + [r.message for r in public_failed[:FAILURES_READ]])
    functions_failing, said = failing_functions(module, planted.parent) if functions and not public_failed else ([], "")
    return Kill(
        mistake,
        len(public_failed),
        len(public_cases),
        len(hidden_failed),
        len(hidden_cases),
        mistake.named_by(read) if public_failed else bool(functions_failing) and mistake.named_by(said),
        functions_failing=tuple(functions_failing),
    )


def failing_functions(module: Module, folder: Path, only: str = "") -> tuple[list[str], str]:
    """The module's public test functions, other than its cases and memory-traffic bars (or only
    the one named ``only``), that fail for the kernel.py in ``folder`` (pytest in a process of its
    own, as `make check` runs them), and what their failures say."""
    chosen = only or "not test_matches_reference and not test_memory_traffic"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short", "-rf",
        "--impl", str(folder), str(module.learner_dir / "test_kernel.py"), "-k", chosen,
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=1800, check=False)
    names = sorted({name.split("[")[0] for name in re.findall(r"^FAILED \S+?::(\S+)", run.stdout, re.M)})
    return names, run.stdout


def table(module: Module, kills: list[Kill]) -> str:
    """The module's kill table and its score, as Markdown."""
    lines = [
        f"### {module.id}",
        "",
        "| mistake | public cases failing | hidden cases failing | verdict |",
        "|---|---|---|---|",
    ]
    for kill in kills:
        lines.append(
            f"| {kill.mistake.name} | {kill.public_failing} of {kill.public_total} | "
            f"{kill.hidden_failing} of {kill.hidden_total} | {kill.verdict} |"
        )
    lines += ["", score_line(kills)]
    return "\n".join(lines)


def score_line(kills: list[Kill]) -> str:
    tried = [kill for kill in kills if not kill.skipped]
    public = sum(kill.killed_in_public for kill in tried)
    either = sum(kill.killed_in_public or kill.hidden_failing > 0 for kill in tried)
    named = sum(kill.named for kill in tried)
    if not tried:
        return "No mutant could be tried on this device."
    return (
        f"Mutation score: {public} of {len(tried)} killed by the public tests ({public / len(tried):.0%}), "
        f"{either} by public or hidden; the cause named for {named}."
    )
