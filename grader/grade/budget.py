"""The time limits of a grading's children: a step's CPU-time limit with a wall-time backstop
(``Budget``), and the words that tell the learner which limit a case or an import ran into."""

from __future__ import annotations

import math
import time

from grader.sandbox.isolation import Limits, Sandbox


class Budget:
    """A time limit judged on the child's CPU time (``cpu``: seconds so far), which a busy
    machine hardly changes, with wall time as a backstop (``wall_factor`` times longer) for a
    child that waits without computing. Correct code therefore never fails for want of a free
    core. ``left`` and ``wall_end``: what remains of the module's budget, which may end the step
    sooner (``by_module``)."""

    def __init__(self, cpu, seconds: float, wall_factor: float, left: float = math.inf, wall_end: float = math.inf):
        now = time.monotonic()
        self.cpu, self.cpu_end = cpu, cpu() + min(seconds, max(left, 0.0))
        self.wall_end = min(now + seconds * wall_factor, wall_end)
        self.by_module = left < seconds or wall_end < now + seconds * wall_factor

    def spent(self) -> bool:
        return time.monotonic() >= self.wall_end or self.cpu() >= self.cpu_end


def budget_spent(budget: float, visibility: str, until: float, unconfirmed: bool) -> str:
    """Why a case was not run: the module's ``budget`` (CPU seconds) was spent, or the share of
    it (``until``) that public cases may use."""
    spent = f"the module's time budget ({budget:g} s of CPU time for all its processes) was spent"
    if unconfirmed:
        return (
            f"Not run to a verdict: this case ran in a process that crashed afterwards, and {spent} "
            "before it could run again alone."
        )
    share = (
        f" (public cases may use {until:.0f} s of it, so that hidden cases get theirs)"
        if visibility == "public"
        else ""
    )
    return (
        f"Not run: {spent}{share}, on cases that timed out or crashed and the fresh processes they "
        "needed. Fix those first."
    )


def with_limits_hint(message: str, sandbox: Sandbox, limits: Limits) -> str:
    """A child's error ``message``, with the sandbox's limit it may have run into."""
    if "MemoryError" in message or "out of memory" in message.lower():
        message += (
            f"\nThe grader allows {sandbox.memory_bytes(limits) / (1 << 30):g} GiB of host memory per submission."
        )
    if "BlockingIOError" in message or "Resource temporarily unavailable" in message:
        message += f"\nThe grader allows {limits.processes} processes and threads per submission."
    return message
