"""Every public and hidden case of a module, under many secrets: a reference must pass them all.

A hidden case's inputs come from the run's secret, so a grading draws inputs that no test of the
suite has seen. A tolerance that a correct float32 kernel meets with the suite's inputs may still
be too tight for some draw (a sum whose rounding grows with its length, a cancellation), and a
student would then lose a case by luck. This runs each case in this process, natively or under
the interpreter, with ``count`` random secrets, and lists every failure with the secret that
reproduces it (``python -m grader sweep-secrets``, ``make verify-secrets``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from grader.core import cases, device
from grader.core.catalog import Module
from grader.core.checks import run_case
from grader.core.loading import load_kernel


@dataclass
class Failure:
    secret: int
    case: str
    message: str


@dataclass
class Sweep:
    module: Module
    secrets: int
    cases: int
    failures: list[Failure] = field(default_factory=list)


def sweep(module: Module, count: int, seed: int = 0, impl: str | Path = "solutions") -> Sweep:
    """Run every case of ``module`` that this device runs, once per secret, ``count`` secrets
    drawn from ``seed``; the kernel is ``impl`` (the reference by default)."""
    spec, public = cases.public(module)
    cuda = device.is_cuda()
    planned = cases.for_mode(public, cuda) + cases.for_mode(cases.hidden(module), cuda)
    draw = random.Random(seed)
    result = Sweep(module, count, len(planned))
    for _ in range(count):
        secret = draw.getrandbits(63)
        # A fresh copy of the file for each secret, as each grading's child loads it afresh: what
        # the file remembers across calls (a warning given once) starts over.
        kernel = load_kernel(module, impl)
        for case in planned:
            outcome = run_case(kernel.api(cases.spec_for(case, spec).api), spec, case, secret)
            if not outcome.passed:
                result.failures.append(Failure(secret, case.name, outcome.message))
    return result


def report(result: Sweep, shown: int = 5) -> str:
    """A line for the module, then the first ``shown`` failures, each with its secret."""
    outcome = f"{len(result.failures)} failed" if result.failures else "all passed"
    secrets = f"{result.secrets} secret" + ("s" if result.secrets != 1 else "")
    lines = [f"{result.module.id}: {result.cases} cases x {secrets}, {outcome}"]
    for failure in result.failures[:shown]:
        said = " ".join(failure.message.splitlines()[:2])
        lines.append(f"  secret {failure.secret}: {failure.case}: {said[:300]}")
    if len(result.failures) > shown:
        lines.append(f"  ... and {len(result.failures) - shown} more")
    return "\n".join(lines)
