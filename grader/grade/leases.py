"""Who may use a GPU when: several gradings' children share a GPU while they check correctness,
and a timed run has it to itself.

Correctness is mostly CPU work (importing, compiling) with short kernels, so several children per
GPU keep it busy; a timing must not share it, or another child's kernels would slow the timed
ones. Each GPU has a lease that many correctness children hold at once (``shared``) and one
timing holds alone (``exclusive``); a waiting timing keeps new children from starting, and the
running ones step aside at their next call (frozen, see ``step_aside``), so it waits at most for
the calls in progress. A child holds its lease for as long as it can run, so
that no process of another grading runs, idle or busy, while a kernel is timed: the only other
children that may exist then are timed children waiting their turn, frozen
(``grader.grade.timing``).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager


class GpuLease:
    def __init__(self):
        self._lock = threading.Condition()
        self._sharing = 0  # children holding the lease together
        self._exclusive = False
        self._waiting = 0  # timings waiting for the GPU

    @contextmanager
    def shared(self):
        with self._lock:
            self._lock.wait_for(lambda: not self._exclusive and not self._waiting)
            self._sharing += 1
        try:
            yield
        finally:
            with self._lock:
                self._sharing -= 1
                self._lock.notify_all()

    def step_aside(self, pause, resume) -> float:
        """Between two calls of a child that holds the shared lease: if a timing is waiting,
        freeze the child (``pause``), let the timings go first, then take the lease back and
        ``resume`` it. The seconds spent aside (0 when no timing was waiting)."""
        with self._lock:
            if not self._waiting:
                return 0.0
            pause()
            started = time.monotonic()
            self._sharing -= 1
            self._lock.notify_all()
            self._lock.wait_for(lambda: not self._exclusive and not self._waiting)
            self._sharing += 1
        resume()
        return time.monotonic() - started

    @contextmanager
    def exclusive(self):
        with self._lock:
            self._waiting += 1
            self._lock.wait_for(lambda: not self._exclusive and not self._sharing)
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._lock:
                self._exclusive = False
                self._lock.notify_all()


_leases: dict[int | None, GpuLease] = {}
_leases_lock = threading.Lock()


def for_gpu(index: int | None) -> GpuLease:
    """The lease of GPU ``index`` in this process (None: no GPU, where leases change nothing)."""
    with _leases_lock:
        return _leases.setdefault(index, GpuLease())
