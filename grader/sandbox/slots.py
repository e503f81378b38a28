"""Worker slots: the identity each concurrent child runs under, a dedicated uid and a GPU.

The uid (taken only when the grader runs as root) is what makes RLIMIT_NPROC bite and what lets
the parent kill every process a child left behind, so it must be nobody else's on the machine: it
is chosen among uids that no user, group or process has, and held by an flock on a lock file in
/tmp/grader-sandbox-uids, a folder that every grader on the machine shares. ``visible_gpu`` turns
a slot's GPU into the ``CUDA_VISIBLE_DEVICES`` entry its child gets.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox.errors import SandboxError

DEFAULT_UID_BASE = 59000


@dataclass
class Slot:
    """One worker's identity: its sandbox uid (when the grader is root) and its GPU."""

    uid: int | None = None
    gpu: int | None = None
    lock_fd: int | None = None


def _uid_in_use(uid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as status:
                    for line in status:
                        if line.startswith("Uid:"):
                            if str(uid) in line.split()[1:]:
                                return True
                            break
            except OSError:
                pass
    return False


def _acquire_uid(base: int) -> tuple[int, int]:
    """A uid that no user, group or process has, locked for this process (flock)."""
    lock_dir = Path("/tmp/grader-sandbox-uids")  # fixed: every grader on the machine must share it
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    if lock_dir.is_symlink() or lock_dir.stat().st_uid != os.getuid():
        raise SandboxError(f"{lock_dir} is not owned by the grader's user; remove it.")
    for uid in range(base, base + 2000):
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(uid)
            continue
        except KeyError:
            pass
        fd = os.open(lock_dir / f"{uid}.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if _uid_in_use(uid):
            os.close(fd)
            continue
        return uid, fd
    raise SandboxError(f"No free uid in {base}..{base + 1999} for the sandbox.")


def _kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (ours alone: no user owns it and we hold its lock).

    ``kill -9 -1`` run as that uid signals exactly the processes the uid owns."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    if kill:
        subprocess.run(
            [kill, "-9", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            env={},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
        return
    pid = os.fork()
    if pid == 0:  # only system calls from here on: safe even in a threaded parent
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def visible_gpu(index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry that makes a child see this process's GPU ``index``:
    where this process itself sees only some GPUs (a Ray worker, or a grader started with
    ``CUDA_VISIBLE_DEVICES=2,3``), its index 0 is the first GPU of that list, not the machine's."""
    mine = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return mine[index] if "CUDA_VISIBLE_DEVICES" in os.environ and index < len(mine) else str(index)
