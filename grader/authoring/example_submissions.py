"""Assemble the example submissions that `make grade` and the tests grade.

Two kinds of student are generated from the course itself, so that they never go stale:
``complete`` (the reference solutions, as ``<track>/<slug>/kernel.py``) and ``stub`` (the learner
files as the generator writes them, in nbgrader's ``<track>-<slug>/kernel.py`` layout: never the
working tree's ``tracks/`` copy, which may hold someone's work). The others live under
``grader/examples/submissions/``: a partial solution and one per row of the grader's threat
model (GPU-only rows under ``submissions-gpu/``). Those of vector add are small, hand-written
files; those of larger modules are a ``kernel.patch`` on the module's reference solution or stub
(a unified diff whose ``---`` line names it), applied when the examples are assembled, so that
they follow the reference and a patch that no longer applies fails loudly. ``make_patch`` writes
one from an edited copy.
"""

from __future__ import annotations

import difflib
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
# (tests/sandbox/test_child_hardening.py grades it so).
REFUSED_BY_THE_GATE_ALONE = frozenset(
    {
        "patches-monitor",
        "disables-dispatch",
        "computes-in-thread",
        "computes-in-heuristics",
        "computes-in-kernel-body",
        "numpy-interop",
        "forges-channel",
    }
)


def assemble(dest: Path, modules: list[Module] | None = None, handwritten: bool = True, gpu: bool = False) -> list[str]:
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
        shutil.copytree(folder, dest / folder.name, dirs_exist_ok=True, ignore=shutil.ignore_patterns(PATCH))
        for patch in folder.rglob(PATCH):
            (dest / folder.name / patch.parent.relative_to(folder) / "kernel.py").write_text(derived(patch))
    return sorted(p.name for p in dest.iterdir() if p.is_dir())


PATCH = "kernel.patch"
STUB_OF = "stub of "  # a patch's base named "stub of <track>/<slug>": the generated learner file


class PatchError(ValueError):
    """An example's patch no longer applies to the file it was made from."""


def kernel_source(folder: Path) -> str:
    """The kernel.py of an example's module folder: the file, or its patch applied."""
    written = folder / "kernel.py"
    return written.read_text() if written.is_file() else derived(folder / PATCH)


def make_patch(base_label: str, edited: str) -> str:
    """The patch that turns ``base_label`` (``solutions/<track>/<slug>/kernel.py``, or ``stub of
    <track>/<slug>``) into ``edited``."""
    base, edited = (text if text.endswith("\n") else text + "\n" for text in (_base(base_label), edited))
    lines = difflib.unified_diff(
        base.splitlines(keepends=True), edited.splitlines(keepends=True), fromfile=base_label, tofile="kernel.py", n=2
    )
    return "".join(lines)


def derived(patch: Path) -> str:
    """The file ``patch`` makes of its base. Each hunk's old lines (context and removals) must
    appear in the base after the previous hunk's; line numbers are only hints."""
    text = patch.read_text()
    header = next((line for line in text.splitlines() if line.startswith("--- ")), None)
    if header is None:
        raise PatchError(f"{patch} names no base file (no '--- ' line)")
    base_label = header[4:].strip()
    base, result, cursor = _base(base_label).splitlines(keepends=True), [], 0
    for old, new in _hunks(text):
        at = next((i for i in range(cursor, len(base) - len(old) + 1) if base[i : i + len(old)] == old), None)
        if at is None:
            raise PatchError(
                f"{patch} no longer applies to {base_label} (near: {''.join(old)[:120]!r}); "
                "edit a copy of the new base and write the patch again with make_patch"
            )
        result += base[cursor:at] + new
        cursor = at + len(old)
    return "".join(result + base[cursor:])


def _base(label: str) -> str:
    from grader.core.catalog import find_module

    if label.startswith(STUB_OF):
        return stub_for(find_module(label[len(STUB_OF) :]))
    return (REPO_ROOT / label).read_text()


def _hunks(text: str) -> list[tuple[list[str], list[str]]]:
    hunks, old, new = [], None, None
    for line in text.splitlines(keepends=True):
        if line.startswith("@@"):
            if old is not None:
                hunks.append((old, new))
            old, new = [], []
        elif old is not None and line[:1] in (" ", "-", "+"):
            if line[0] != "+":
                old.append(line[1:])
            if line[0] != "-":
                new.append(line[1:])
    if old is not None:
        hunks.append((old, new))
    return hunks
