"""What it means when kernel.py crashes the process that runs it, in words for a learner.

`make check` (``grader.learn.check``) and the grader's feedback (``grader.grade.runphase``) both explain a
crash with these functions, so a learner reads the same diagnosis in both.
"""

from __future__ import annotations

import signal

# How a process dies of its own invalid memory access. Under Triton's interpreter a load or store
# outside a tensor reads or writes the Python process's own heap: it faults at once (SIGSEGV,
# SIGBUS), or corrupts the heap so that the allocator aborts later (SIGABRT, "free(): invalid
# next size"), often while a later case runs. (The grader's sandboxed child is the first process
# of its PID namespace, which ignores a SIGABRT it sends itself: there abort() ends in SIGSEGV.)
MEMORY_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGABRT"})

_MASKS = ("Under the interpreter this almost always means a load or store outside a tensor: check every "
          "mask. On a GPU, `compute-sanitizer python kernel.py` points at the faulty access.")


def signal_name(returncode: int | None) -> str | None:
    """The signal that ended a process, from its return code: -N from Python's subprocess, or
    128+N where a shell reported it (134 is SIGABRT, 139 SIGSEGV). None for an ordinary exit."""
    if returncode is None:
        return None
    number = -returncode if returncode < 0 else returncode - 128 if returncode in (134, 135, 139) else 0
    if not number:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def explain(returncode: int | None) -> str:
    """What a learner should check after the process running their kernel ended with
    ``returncode`` ("" when the way it ended says nothing about their code's memory accesses)."""
    return _MASKS if signal_name(returncode) in MEMORY_SIGNALS else ""


def check_message(returncode: int) -> str:
    """`make check`'s report of a test process that ``returncode`` says was killed by a signal."""
    return (f"kernel.py crashed the Python process ({signal_name(returncode)}) while the tests ran. "
            f"{explain(returncode)}").rstrip()
