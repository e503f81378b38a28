"""Keep the committed learner stubs (``tracks/**/kernel.py``) in sync with the reference
solutions: find the stale ones and rewrite them, never over a learner's own work. The stub text
itself comes from ``grader.core.markers``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from grader.core.catalog import REPO_ROOT, Module
from grader.core.markers import modules_with_solutions, stub_for


def out_of_date() -> list[Path]:
    """Committed stubs that differ from what the generator writes now."""
    stale = []
    for module in modules_with_solutions():
        target = module.learner_dir / "kernel.py"
        if not target.is_file() or target.read_text() != stub_for(module):
            stale.append(target)
    return stale


def committed_text(path: Path) -> str | None:
    """The file as the checkout's last commit holds it (None without git or outside a commit)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "show", f"HEAD:{path.relative_to(REPO_ROOT)}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def hand_edited(target: Path, new_text: str, committed: str | None) -> bool:
    """Whether ``target`` holds work no generator wrote: it differs from the stub about to be
    written and from the committed one (a learner's kernel, half done or finished)."""
    current = target.read_text()
    return current != new_text and current != committed


def write_all(modules: list[Module] | None = None, force: bool = False) -> tuple[list[Path], list[Path]]:
    """Regenerate the stubs (of ``modules``, default all): (files written, files left alone
    because they hold hand edits; ``force`` overwrites those too)."""
    changed, kept = [], []
    for module in modules or modules_with_solutions():
        target = module.learner_dir / "kernel.py"
        text = stub_for(module)
        if target.is_file() and target.read_text() == text:
            continue
        if target.is_file() and not force and hand_edited(target, text, committed_text(target)):
            kept.append(target)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        changed.append(target)
    return changed, kept
