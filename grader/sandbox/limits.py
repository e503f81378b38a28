"""What one child may use: CPU and wall time, host memory, processes, files, disk, tmpfs.

``Limits`` holds them with their defaults (host memory's depends on CUDA:
``Sandbox.memory_bytes``); the parent passes most to the boot step, which turns them into
rlimits, and watches the rest itself (wall time, disk use). Kept apart because callers that only
configure a grading (the command line, the record phase, tests) need these numbers and nothing of
the machinery that enforces them.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
MiB = 1 << 20


@dataclass
class Limits:
    """Resource limits for one child process."""

    # Time limits count the child's CPU time, which a busy machine hardly changes; wall time
    # only backs them up (``wall_factor`` times longer), for a child that waits without
    # computing (a GPU kernel that never ends, a sleep).
    case_seconds: float = 60.0  # one call of the API
    startup_seconds: float = 90.0  # importing torch, Triton and the learner's file
    wall_factor: float = 10.0
    memory_bytes: int | None = None  # host memory (RLIMIT_DATA); default 4 GiB, 16 GiB on CUDA
    processes: int = 64  # processes and threads (RLIMIT_NPROC)
    file_bytes: int = 2 * GiB  # largest file the child may write (RLIMIT_FSIZE)
    disk_bytes: int = 4 * GiB  # everything in its working folder together (parent watches)
    tmp_bytes: int = 64 * MiB  # each private tmpfs (/tmp, /var/tmp, /dev/shm)
    open_files: int = 1024
    cleanup_seconds: float = 30.0  # removing what the child left in its folder

    def cpu_seconds(self, n_cases: int) -> int:
        return int(self.startup_seconds + self.case_seconds * max(n_cases, 1)) + 10
