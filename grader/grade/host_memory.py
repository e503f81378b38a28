"""How much of the grader's own host memory the judging of big calls may take at once.

Judging a call reads what the child saved (its outputs, and the caller's tensors as the call left
them) into the grader's memory before comparing it on the GPU. On a GPU the timed cases are large
(a 16384 x 8192 bf16 layer norm hands back ~0.75 GiB), and with eight gradings judging side by side
the grader's process peaked above 10 GiB. So each judging's reads are reserved against one budget
for the process: a judging whose reads do not fit beside the others' waits. The first read of a
judging never waits while nothing else is held, so a file larger than the budget is still judged.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

GIB = 1 << 30


def default_budget() -> int:
    """A quarter of the machine's memory, between 1 and 4 GiB: the children need the rest."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 * GIB
    return max(GIB, min(4 * GIB, total // 4))


@dataclass
class Waited:
    seconds: float = 0.0


class HostBudget:
    """Bytes of the grader's memory held by the judgings in progress, against a fixed budget."""

    def __init__(self, budget: int):
        self.budget = budget
        self.used = 0
        self.peak = 0
        self._lock = threading.Condition()
        self._local = threading.local()

    @contextmanager
    def judging(self):
        """A judging: what ``need`` reserves inside the block is given back when it ends. Yields
        its ``Waited``: the seconds its reservation waited for others' to end (``--profile``)."""
        if getattr(self._local, "held", None) is not None:  # inside another judging: part of it
            yield self._local.waited
            return
        self._local.held, self._local.waited = 0, Waited()
        try:
            yield self._local.waited
        finally:
            held, self._local.held = self._local.held, None
            if held:
                with self._lock:
                    self.used -= held
                    self._lock.notify_all()

    def need(self, nbytes: int) -> None:
        """Reserve ``nbytes`` for the judging in progress on this thread, waiting while they do not
        fit; only its first reservation waits (a judging that waits while holding memory could wait
        for another that does the same). Outside a judging, nothing is reserved."""
        held = getattr(self._local, "held", None)
        if held is None or nbytes <= 0:
            return
        with self._lock:
            if not held:
                started = time.monotonic()
                self._lock.wait_for(lambda: self.used == 0 or self.used + nbytes <= self.budget)
                self._local.waited.seconds += time.monotonic() - started
            self.used += nbytes
            self.peak = max(self.peak, self.used)
        self._local.held = held + nbytes


JUDGING = HostBudget(default_budget())
