"""Who may use a GPU when: several gradings' children share a GPU while they check correctness,
and a timed run has it to itself.

Correctness is mostly CPU work (importing, compiling) with short kernels, so several children per
GPU keep it busy; a timing must not share it, or another child's kernels would slow the timed
ones. Each GPU has a lease that many correctness children hold at once (``shared``) and one
timing holds alone (``exclusive``); a waiting timing keeps new children from starting, and the
running ones step aside at their next call (frozen, see ``step_aside``), so it waits at most for
the calls in progress. A call that stops to compile (CPU work) lets go of the GPU meanwhile
(``leave``/``rejoin``): a timing does not wait for its compiling, and freezes it instead while it
has the GPU. A child holds its lease for as long as it can run, so
that no process of another grading runs, idle or busy, while a kernel is timed: the only other
children that may exist then are timed children waiting their turn, frozen
(``grader.grade.timing``). A frozen child's kernels already queued on the GPU run on, whatever it
claimed, so once the others are frozen a timing also waits for the driver to report the GPU idle
(``grader.grade.gpu_idle``).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

from grader.grade import gpu_idle

# The longest a timing waits for the driver to report no kernel running. Past it the timing starts
# anyway, on a GPU still busy (counted in ``Usage``, and in the record by ``grader.grade.timing``):
# something that no freezing stops (another program on the GPU, a child's endless kernel) is at work.
IDLE_LIMIT_SECONDS = 30.0

# The driver's answers about a GPU, by index (tests swap them for fakes).
read_busy = gpu_idle.busy_percent
settle_seconds = gpu_idle.settle_seconds


@dataclass
class Usage:
    """How a GPU's lease was held (``--profile``): the timings that had it alone, how long waiting
    timings stalled the children sharing it until the calls in progress ended, how much of the
    time alone went to waiting for the driver to report the GPU idle, and how many timings began
    on a GPU still busy after ``IDLE_LIMIT_SECONDS``."""

    timings: int = 0
    alone_seconds: float = 0.0
    draining_seconds: float = 0.0
    idle_wait_seconds: float = 0.0
    busy_starts: int = 0

    def since(self, earlier: Usage) -> Usage:
        return Usage(
            self.timings - earlier.timings,
            self.alone_seconds - earlier.alone_seconds,
            self.draining_seconds - earlier.draining_seconds,
            self.idle_wait_seconds - earlier.idle_wait_seconds,
            self.busy_starts - earlier.busy_starts,
        )


@dataclass
class _Left:
    """A child that left the lease mid-call (``GpuLease.leave``)."""

    pause: object
    resume: object
    frozen_since: float | None = None  # frozen now, by a timing, since then
    frozen: float = 0.0  # seconds frozen before


class GpuLease:
    def __init__(self, index: int | None = None):
        self.index = index  # the GPU, in torch's numbering; None: no GPU
        self._lock = threading.Condition()
        self._sharing = 0  # children holding the lease together
        self._exclusive = False
        self._waiting = 0  # timings waiting for the GPU
        self._draining_since: float | None = None  # a timing waits for the sharing children
        self._off: dict = {}  # children that left mid-call (key -> _Left)
        self.usage = Usage()

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

    def leave(self, key, pause, resume) -> None:
        """A sharing child stops using the GPU in the middle of a call (it compiles, CPU work):
        timings stop waiting for it, and freeze it (``pause``, later ``resume``) while one has
        the GPU. It must ``rejoin`` before it launches anything again."""
        with self._lock:
            if key in self._off:
                return
            self._off[key] = _Left(pause, resume)
            self._sharing -= 1
            if self._exclusive:
                self._pause_off()
            self._lock.notify_all()

    def rejoin(self, key) -> float:
        """Undo ``leave``: wait until no timing has or waits for the GPU, then share it again.
        The seconds the child was frozen or kept waiting since it left (0 if it had not)."""
        started = time.monotonic()
        with self._lock:
            if key not in self._off:
                return 0.0
            self._lock.wait_for(lambda: not self._exclusive and not self._waiting)
            left = self._off.pop(key)
            self._sharing += 1
        return left.frozen + time.monotonic() - started

    def forget(self, key) -> None:
        """A child that left has ended (it crashed, or was stopped): it counts as sharing again,
        so that its ``shared`` block ends as it began."""
        with self._lock:
            if self._off.pop(key, None) is not None:
                self._sharing += 1
                self._lock.notify_all()

    def _pause_off(self) -> None:
        for left in self._off.values():
            if left.frozen_since is None:
                left.pause()
                left.frozen_since = time.monotonic()

    def _resume_off(self) -> None:
        for left in self._off.values():
            if left.frozen_since is not None:
                left.resume()
                left.frozen += time.monotonic() - left.frozen_since
                left.frozen_since = None

    @contextmanager
    def exclusive(self):
        """Have the GPU alone: wait for the calls in progress, freeze the children that left it,
        then wait (at most ``IDLE_LIMIT_SECONDS``) for the driver to report no kernel running.
        Yields that wait's ``gpu_idle.Idle`` (idle None: no GPU, or NVML cannot say)."""
        with self._lock:
            self._waiting += 1
            if self._sharing and not self._exclusive and self._draining_since is None:
                self._draining_since = time.monotonic()
            self._lock.wait_for(lambda: not self._exclusive and not self._sharing)
            self._waiting -= 1
            self._exclusive = True
            self._pause_off()
            started = time.monotonic()
            if self._draining_since is not None:
                self.usage.draining_seconds += started - self._draining_since
                self._draining_since = None
        idle = gpu_idle.Idle(None, 0.0, None)
        try:
            # Outside the lock: what takes it meanwhile (a rejoin, a forget) must not wait for the driver.
            if self.index is not None:
                idle = gpu_idle.wait_until_idle(
                    self.index, IDLE_LIMIT_SECONDS, read=read_busy, settle_s=settle_seconds(self.index)
                )
            yield idle
        finally:
            with self._lock:
                self._exclusive = False
                self._resume_off()
                self.usage.timings += 1
                self.usage.alone_seconds += time.monotonic() - started
                self.usage.idle_wait_seconds += idle.waited_s
                if idle.idle is False:
                    self.usage.busy_starts += 1
                self._lock.notify_all()


_leases: dict[int | None, GpuLease] = {}
_leases_lock = threading.Lock()


def usage() -> dict[int | None, Usage]:
    """A copy of every lease's usage so far in this process, by GPU."""
    with _leases_lock:
        leases = dict(_leases)
    copies = {}
    for index, lease in leases.items():
        with lease._lock:
            copies[index] = replace(lease.usage)
    return copies


def for_gpu(index: int | None) -> GpuLease:
    """The lease of GPU ``index`` in this process (None: no GPU, where leases change nothing)."""
    with _leases_lock:
        if index not in _leases:
            _leases[index] = GpuLease(index)
        return _leases[index]
