"""What a child's ending means for the trials it ran: a clean exit confirms their verdicts, a
crash is blamed on a case only where the child ran that case alone (the others run again
alone), and a time-out decides the case or the import it stopped. Each function records its
finding in the grading's ledger (``grader.grade.ledger``)."""

from __future__ import annotations

from grader.core import crashes
from grader.grade.budget import Budget
from grader.grade.judging import Trial, Verdict
from grader.sandbox.isolation import ChildEnded, SandboxError


def after_exit(
    grading, child, phase: str, current: Trial | None, ended: ChildEnded, judged: dict[int, Verdict]
) -> None:
    """The child is gone: a crash, unless it exited cleanly (or was stopped by the grader)
    after its last case."""
    if phase == "starting":
        raise SandboxError(
            f"The grader's child process died before importing the submission ({ended.how}):\n{child.log_tail()}"
        )
    if phase == "importing":
        grading.ledger.load_error = (
            f"kernel.py stopped the grading process while being imported ({ended.how}). "
            "Importing must only define functions: remove calls like sys.exit(), "
            "os._exit() or os.fork() at the top level of the file. "
            f"{crashes.explain(ended.returncode)}"
        ).rstrip()
        return
    if phase in ("finishing", "exiting") and not ended.returncode:
        grading.ledger.verdicts.update(judged)
        grading.ledger.batch *= 2
        return
    ran = [*judged, *([current.id] if current is not None else [])]
    grading.ledger.log.append(f"child {grading.ledger.children} {ended.how} after trial(s) {ran}")
    # A kernel that crashed is likely to crash again: fewer trials per child mean fewer
    # verdicts to confirm alone afterwards (one per child when every case crashes).
    grading.ledger.batch = max(1, len(ran) // 2)
    if len(ran) == 1:  # a fresh process that ran this case alone: the crash is this case's
        grading.ledger.verdicts[ran[0]] = crash_verdict(grading.plan.api_of(ran[0]), ended, judged.get(ran[0]))
    elif ran:  # any of them may have caused it: each runs again alone
        grading.ledger.crashes.append((ended, set(ran)))
        for trial_id in ran:
            grading.ledger.unconfirmed[trial_id] = judged.get(trial_id) or crash_verdict(
                grading.plan.api_of(trial_id), ended, None
            )


def crash_verdict(api: str, ended: ChildEnded, returned: Verdict | None) -> Verdict:
    """The verdict on a case that crashed alone; ``returned``: its verdict, if the call
    returned before the process crashed (damage that surfaced later)."""
    text = (
        f"{api}() returned, but then the process running it {ended.how}"
        if returned
        else f"The process running {api}() {ended.how} during this case"
    )
    text = f"{text}, in a fresh process that ran no other case. {crashes.explain(ended.returncode)}".rstrip()
    if returned is not None and not returned.passed:  # keep what it got wrong (or the integrity finding)
        message = crashes.follow_on(returned.message, ended.returncode)
        return Verdict(False, returned.kind, f"{message}\n{text}", returned.seconds, crash=ended)
    return Verdict(False, "crash", text, returned.seconds if returned else 0.0, crash=ended)


def after_timeout(
    grading, child, phase: str, current: Trial | None, budget: Budget, judged: dict[int, Verdict]
) -> None:
    """The grader stopped the child at a time limit (``budget``) during ``phase``."""
    limits = grading.plan.limits
    processes = f" It had started {child.processes_seen} processes." if child.processes_seen > 3 else ""
    grading.ledger.verdicts.update(judged)  # stopped by the grader: no crash followed them
    if phase in ("finishing", "exiting"):
        grading.ledger.log.append(f"child {grading.ledger.children} did not exit after its last case; stopped")
    elif phase in ("starting", "importing"):
        grading.ledger.load_error = (
            f"kernel.py did not finish importing within {limits.startup_seconds:g} s of "
            "computing "
            f"(an endless loop at the top level of the file?).{processes}"
        )
    elif current is not None and budget.by_module:  # Grading.run marks what is left not run
        grading.ledger.verdicts[current.id] = Verdict(
            False,
            "not_run",
            (
                f"Stopped: the module's time budget ({grading.plan.budget:g} s of CPU time for all its processes) "
                "ran out during this case, spent on cases that timed out or crashed and the fresh processes "
                "they needed."
            ),
            limits.case_seconds,
        )
    elif current is not None:
        grading.ledger.verdicts[current.id] = Verdict(
            False,
            "timeout",
            (
                f"{grading.plan.api_of(current.id)}() did not return within {limits.case_seconds:g} s of computing: an "
                f"endless loop, in Python or in the kernel? The case was stopped.{processes}"
            ),
            limits.case_seconds,
        )
