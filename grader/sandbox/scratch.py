"""Scratch folders (/tmp/grader-sandbox-*), where a ``Sandbox`` keeps its children, and their cleanup.

Each ``Sandbox`` holds one: the children's working folders, file-system views and logs, and the
copy of the grader package's .py files that children import (the package folder itself may hold
more: examples, an nbgrader course with its gradebook). A grader killed by SIGKILL cannot remove
its own, so each folder names its owner (pid, start time and PID namespace, since a pid alone
may be reused) and the next grader to start removes the folders whose owner is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from grader.sandbox.files import remove_tree


def _process_identity(pid: int) -> str:
    """pid, start time and PID namespace: a pid alone may be reused, or mean another process in
    another namespace that shares /tmp."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            started = stat.read().rsplit(")", 1)[1].split()[19]
        return f"{pid} {started} {os.readlink(f'/proc/{pid}/ns/pid')}"
    except (OSError, IndexError):
        return ""


def _remove_stale_scratch() -> None:
    """Delete scratch folders of graders that were killed (SIGKILL leaves them behind)."""
    namespace = os.readlink("/proc/self/ns/pid")
    for folder in Path(tempfile.gettempdir()).glob("grader-sandbox-*"):
        try:
            if folder.stat().st_uid != os.getuid():
                continue
            parts = (folder / "owner").read_text().split()
        except OSError:
            continue
        if (
            len(parts) == 3
            and parts[0].isdigit()
            and parts[2] == namespace
            and _process_identity(int(parts[0])) != " ".join(parts)
        ):
            remove_tree(folder, time_limit=60)


def _copy_package(source: Path, target: Path) -> Path:
    """The .py files of a package and of its subpackages, readable by every uid."""
    target.mkdir(mode=0o755)
    for path in source.glob("*.py"):
        shutil.copyfile(path, target / path.name)
        (target / path.name).chmod(0o644)
    for sub in source.iterdir():
        if sub.is_dir() and (sub / "__init__.py").is_file():
            _copy_package(sub, target / sub.name)
    return target
