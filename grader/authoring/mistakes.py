"""Typical mistakes: small source mutations of a reference solution that learners really make.

Each module lists its own in ``solutions/<track>/<module>/mistakes.py`` as ``MISTAKES``. The
course's suite plants every one into the reference and proves two things: the public tests catch
it (several cases fail, so one loosened tolerance cannot let it through), and the diagnosis the
learner reads names its cause. A module that gains a test or a diagnosis adds its mistakes here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.cases import _import_file
from grader.core.catalog import Module
from grader.core.markers import planted_bugs

# Why 16-bit rounding around tl.dot shows only in the interpreter: the GPU's fp32 tolerance is
# looser because tl.dot computes fp32 in TF32 there.
TF32_ROUNDING = (
    "On a GPU, tl.dot rounds fp32 operands to TF32 (10-bit mantissa, like fp16), so the GPU "
    "tolerance (5e-3) admits 16-bit rounding; the interpreter computes in fp32 and checks at 1e-4."
)
# Seen on an H200 (Triton 3.6): without other=, every case gave the results of other=0.0.
MASKED_LANES_READ_ZERO = (
    "On a GPU a load without other= gave every case the results of other=0.0 (seen on an H200, where "
    "the masked-off lanes come back as 0); the interpreter fills them with NaN, and its cases catch it."
)
# An access far outside a tensor faults on a GPU, and the process's CUDA context is lost with it:
# every later test in the process fails too. compute-sanitizer names it there (debugging/04).
FAULTS_ON_A_GPU = (
    "On a GPU this access is an illegal address: the process's CUDA context is lost and every later "
    "test in it fails; the interpreter's memory checker names it, and compute-sanitizer does on a GPU."
)
# Caught on both, but only the interpreter's memory checker says which store and which tensor.
NAMED_BY_THE_MEMORY_CHECKER = (
    "On a GPU the cases fail too, with the pattern of the wrong elements; only the interpreter's "
    "memory checker names the store that went past the end of the output."
)


@dataclass(frozen=True)
class Mistake:
    name: str  # what the learner did, in a few words
    before: str  # text of the reference, found exactly once
    after: str  # what the learner wrote instead
    cause: str  # regular expression the diagnosis must match (case-insensitive)
    # Why the interpreter cannot show this mistake, when only a GPU can (then only a GPU tests it).
    gpu_only: str = ""
    # Why a GPU cannot show it, when only the interpreter can (then only the interpreter tests it).
    interpreter_only: str = ""
    # The public test function that catches it, where its values are right and no case can fail
    # (a config pruned wrongly, work repeated): that function must fail and name the cause.
    caught_by: str = ""

    def apply(self, source: str) -> str:
        count = source.count(self.before)
        if count != 1:
            raise ValueError(
                f"mistake {self.name!r}: its text occurs {count} times in the reference; "
                "make `before` match exactly once."
            )
        return source.replace(self.before, self.after)

    def named_by(self, diagnosis: str) -> bool:
        return re.search(self.cause, diagnosis, re.IGNORECASE | re.DOTALL) is not None


def for_module(module: Module) -> list[Mistake]:
    """The module's typical mistakes, then its planted bugs (the debugging track's BUG regions,
    each planted alone); empty where the checkout has no solutions/.

    A module whose planted bugs only the interpreter can show (a memory fault, traffic that the
    interpreter records) says why in its mistakes.py as ``PLANTED_BUGS_INTERPRETER_ONLY``."""
    path = module.solution_dir / "mistakes.py"
    if not path.is_file():
        return []
    name = f"_mistakes_{module.track}_{module.slug}".replace("-", "_")
    listing = _import_file(path, name)
    interpreter_only = getattr(listing, "PLANTED_BUGS_INTERPRETER_ONLY", "")
    solution = module.solution_dir / "kernel.py"
    bugs = planted_bugs(solution.read_text(), str(solution))
    return list(listing.MISTAKES) + [
        Mistake(
            f"planted bug (line {bug.line}): {bug.text}",
            bug.correct,
            bug.buggy,
            cause=bug.symptom,
            interpreter_only=interpreter_only,
        )
        for bug in bugs
    ]
