"""What it means when kernel.py crashes the process that runs it, in words for a learner.

`make check` (``grader.learn.check``) and the grader's feedback (``grader.grade.runphase``) both explain a
crash with these functions, so a learner reads the same diagnosis in both.
"""

from __future__ import annotations

import re
import signal

# How a process dies of its own invalid memory access. Under Triton's interpreter a load or store
# outside a tensor reads or writes the Python process's own heap: it faults at once (SIGSEGV,
# SIGBUS), or corrupts the heap so that the allocator aborts later (SIGABRT, "free(): invalid
# next size"), often while a later case runs. (The grader's sandboxed child is the first process
# of its PID namespace, which ignores a SIGABRT it sends itself: there abort() ends in SIGSEGV.)
MEMORY_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGABRT"})

# Most learners have no GPU: the interpreter's memory checker, which `make check` switches on, is
# the tool that names the faulty line for them; compute-sanitizer needs a CUDA GPU.
_MASKS = (
    "Under the interpreter this almost always means a load or store outside a tensor: check every "
    "mask. On a CPU, `make check M={module}` finds it: its memory checker (on unless MEMCHECK=0) stops "
    "at the first access out of bounds and names its line. On a GPU, `python -m grader sanitize "
    "kernel.py` runs compute-sanitizer, which does the same."
)

# An exception as checks.call_api reports it: "add() raised TypeError: ...".
_RAISED = re.compile(r"\(\) raised (?P<error>\w+)")


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


def explain(returncode: int | None, module: str = "<track>/<module>") -> str:
    """What a learner should check after the process running their kernel ended with
    ``returncode`` ("" when the way it ended says nothing about their code's memory accesses).
    ``module`` ("missing-elements/01-vector-add") completes the command it suggests."""
    return _MASKS.format(module=module) if signal_name(returncode) in MEMORY_SIGNALS else ""


def follow_on(message: str, returncode: int | None) -> str:
    """``message``, a failure reported by a call in a process that then ended with ``returncode``,
    with a note when the failure is an exception and the process died of a memory error: a store
    outside a tensor overwrites memory that Python and PyTorch use, so the next call into them
    (``x.new_empty(...)`` raising TypeError, say) fails for no fault of its own."""
    raised = _RAISED.search(message)
    if raised is None or signal_name(returncode) not in MEMORY_SIGNALS:
        return message
    return (
        f"{message}\nThis {raised['error']} is probably a consequence of the memory error that crashed the "
        "process (an access outside a tensor overwrote memory that Python or PyTorch was using), not a "
        "separate mistake: fix the memory access first."
    )


def check_message(returncode: int, module: str = "<track>/<module>") -> str:
    """`make check`'s report of a test process that ``returncode`` says was killed by a signal."""
    text = f"kernel.py crashed the Python process ({signal_name(returncode)}) while the tests ran. "
    if signal_name(returncode) in MEMORY_SIGNALS:
        text += (
            f"{explain(returncode, module)} An error that a test reported just before the crash (a "
            "TypeError from new_empty, say) is probably a consequence of the same memory error, not a "
            "separate mistake."
        )
    return text.rstrip()
