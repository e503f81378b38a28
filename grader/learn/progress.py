"""Where a learner stands in each module, remembered between runs of ``check``.

The last result of ``check`` per module is kept in ``.progress.json`` (ignored by git) together
with a hash of the kernel.py it was run on, so that editing the file invalidates it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from grader.core.catalog import MODULES, REPO_ROOT, Module
from grader.core.markers import open_todos

STORE = REPO_ROOT / ".progress.json"


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load() -> dict:
    try:
        return json.loads(STORE.read_text())
    except (OSError, ValueError):
        return {}


def record(module: Module, path: Path, passed: int, total: int, slow: bool = False, not_compiled: bool = False) -> None:
    """The last check of ``path``: tests passed of total, and whether a GPU found it below the
    speed bar or a GPU would not compile it (then it is not done, though every test passes)."""
    data = _load()
    data[module.id] = {
        "hash": file_hash(path),
        "passed": passed,
        "total": total,
        "slow": slow,
        "not_compiled": not_compiled,
    }
    STORE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


@dataclass
class State:
    module: Module
    done: bool
    text: str


def state(module: Module) -> State:
    path = module.learner_dir / "kernel.py"
    if not module.available:
        return State(module, False, "not yet available")
    last = _load().get(module.id)
    if last and last["hash"] == file_hash(path):
        if last["passed"] == last["total"] and last.get("slow"):
            return State(module, False, f"all {last['total']} tests pass; below the speed bar on a GPU")
        if last["passed"] == last["total"] and last.get("not_compiled"):
            return State(module, False, f"all {last['total']} tests pass; a GPU would not compile it")
        if last["passed"] == last["total"]:
            return State(module, True, f"done: all {last['total']} tests pass")
        return State(module, False, f"{last['passed']} of {last['total']} tests pass")
    todos = len(open_todos(path.read_text()))
    if todos:
        return State(module, False, f"{todos} TODOs left")
    return State(module, False, "edited since the last check: run make check")


def next_unfinished() -> Module | None:
    for module in MODULES:
        if module.available and not state(module).done:
            return module
    return None


def table() -> str:
    lines, track = [], None
    for module in MODULES:
        if module.track != track:
            track = module.track
            lines.append(f"\n{track}")
        current = state(module)
        mark = "x" if current.done else (" " if module.available else "-")
        lines.append(f"  [{mark}] {module.slug:<28} {module.title:<40} {current.text}")
    done = sum(state(m).done for m in MODULES)
    available = sum(m.available for m in MODULES)
    planned = f" ({len(MODULES) - available} more planned)" if available < len(MODULES) else ""
    lines.append(f"\n{done} of {available} modules done{planned}.")
    return "\n".join(lines).lstrip("\n")
