"""Assemble the example submissions that `make grade` and the tests grade.

Two kinds of student are generated from the course itself, so that they never go stale:
``complete`` (the reference solutions, as ``<track>/<slug>/kernel.py``) and ``stub`` (the learner
files as the generator writes them, in nbgrader's ``<track>-<slug>/kernel.py`` layout: never the
working tree's ``tracks/`` copy, which may hold someone's work). The others are small,
hand-written files under ``grader/examples/submissions/``: a partial solution and one per row of
the grader's threat model (GPU-only rows under ``submissions-gpu/``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from grader.core.catalog import REPO_ROOT, Module
from grader.core.markers import modules_with_solutions, stub_for

HANDWRITTEN = REPO_ROOT / "grader" / "examples" / "submissions"
HANDWRITTEN_GPU = REPO_ROOT / "grader" / "examples" / "submissions-gpu"
# Examples that the static policy gate stops on a CPU, and the run phase's tests grade with it
# only: the evidence gathered in the child's own process can be switched off by the very code that
# the gate refuses (computing in a thread, in a heuristic or in numpy, forging the child's channel).
# Patching the monitor is also caught behind the gate now, by the canary after each call
# (tests/test_child_hardening.py grades it so).
REFUSED_BY_THE_GATE_ALONE = frozenset({"patches-monitor", "disables-dispatch", "computes-in-thread",
                                       "computes-in-heuristics", "computes-in-kernel-body", "numpy-interop",
                                       "forges-channel"})


def assemble(dest: Path, modules: list[Module] | None = None, handwritten: bool = True,
             gpu: bool = False) -> list[str]:
    """Write the example students into ``dest``; return their names."""
    modules = modules if modules is not None else modules_with_solutions()
    dest.mkdir(parents=True, exist_ok=True)
    for module in modules:
        complete = dest / "complete" / module.track / module.slug
        complete.mkdir(parents=True, exist_ok=True)
        shutil.copy(module.solution_dir / "kernel.py", complete / "kernel.py")
        stub = dest / "stub" / f"{module.track}-{module.slug}"
        stub.mkdir(parents=True, exist_ok=True)
        (stub / "kernel.py").write_text(stub_for(module))
    folders = []
    if handwritten:
        folders += sorted(p for p in HANDWRITTEN.iterdir() if p.is_dir())
    if gpu:
        folders += sorted(p for p in HANDWRITTEN_GPU.iterdir() if p.is_dir())
    for folder in folders:
        shutil.copytree(folder, dest / folder.name, dirs_exist_ok=True)
    return sorted(p.name for p in dest.iterdir() if p.is_dir())
