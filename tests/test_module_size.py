"""Every module an exercise for one sitting: its README read in about twenty minutes, its
learner file short enough to hold in mind. A module that grows past either fails here; the
modules already past them are named with the reason, and the test fails once they fit again, so
that the list only shrinks."""

import re

from grader.core.catalog import MODULES

README_WORDS = 4500  # about 20 minutes of reading
STUB_LINES = 750
OVER_BUDGET = {
    "mastery/04-training-kernels": "three exercises in one file (backward passes, the optimizer step, the selective "
                                   "scan), each to become a part of its own",
    "mastery/05-production-ready": "a custom operator's whole life (registration, fake, autograd, compile) in one file",
}


def _size(module) -> tuple[int, int]:
    words = len(re.findall(r"\S+", (module.learner_dir / "README.md").read_text()))
    lines = len((module.learner_dir / "kernel.py").read_text().splitlines())
    return words, lines


def test_every_module_fits_one_sitting_or_is_named_with_its_reason():
    over = {}
    for module in MODULES:
        if module.available:
            words, lines = _size(module)
            if words > README_WORDS or lines > STUB_LINES:
                over[module.id] = (words, lines)
    unexplained = sorted(set(over) - set(OVER_BUDGET))
    assert not unexplained, f"past {README_WORDS} README words or {STUB_LINES} stub lines: " + \
        ", ".join(f"{m} {over[m]}" for m in unexplained)
    fitting = sorted(set(OVER_BUDGET) - set(over))
    assert not fitting, f"these fit one sitting now: take them off OVER_BUDGET: {fitting}"
