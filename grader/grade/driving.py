"""One sandboxed child of a grading, from start to exit: it holds the GPU's shared lease, imports
the submission, gets its trials one at a time, each judged as it returns, and is stopped at its
time limits; ``grader.grade.endings`` says what its ending means for the verdicts."""

from __future__ import annotations

import os
import time

from grader.core import device
from grader.grade.budget import Budget, with_limits_hint
from grader.grade.endings import after_exit, after_timeout
from grader.grade.host_memory import JUDGING
from grader.grade.judging import Trial, Verdict, fetch, judge
from grader.grade.profile import claimed_seconds
from grader.sandbox import wire
from grader.sandbox.child import input_name, output_name
from grader.sandbox.isolation import ChildEnded, SandboxError

_EXIT_SECONDS = 30.0  # for a child to exit after its last case


class Cancelled(Exception):
    """The run is being stopped (Ctrl-C): leave without writing a record."""


class ChildRun:
    """One child of ``grading`` (a ``grader.grade.grading.Grading``) running ``trials``, while the
    grading's CPU seconds spent against ``visibility`` stay below ``until``; its verdicts go to
    ``grading``."""

    def __init__(self, grading, trials: list[Trial], visibility: str, until: float):
        self.grading, self.trials, self.visibility, self.until = grading, trials, visibility, until
        self.step_started = 0.0  # when the child's current step (start, import) began
        self.exiting_since: float | None = None  # when the child was told its orders are done
        self.child_cpu = 0.0  # the child's CPU seconds, as last seen
        self.aside = 0.0  # seconds the current step spent off the GPU, frozen or waiting for it

    def run(self) -> None:
        """Import the submission, then run the trials one by one, handing each its inputs only
        when it starts."""
        grading, trials = self.grading, self.trials
        waiting = time.monotonic()
        with grading.lease.shared():
            waited = time.monotonic() - waiting
            grading.profile.add("waiting", waited)
            grading.ledger.wall_end += waited  # a busy GPU is no reason to stop a submission's cases
            self.step_started, self.exiting_since = time.monotonic(), None
            child = grading.start_child(len(trials))
            grading.ledger.child_started()
            alone = " alone, after a crash" if trials[0].id in grading.ledger.unconfirmed else ""
            try:
                protections = grading.sandbox.wait_sandbox(child)
                grading.ledger.protections = grading.ledger.protections or protections
                self._drive(child, list(trials))
            finally:
                grading.lease.forget(child)
                if self.exiting_since is not None:
                    grading.profile.add("exits", time.monotonic() - self.exiting_since)
                grading.ledger.child_ended(self.child_cpu, self.visibility)
                grading.ledger.log.append(
                    f"--- child {grading.ledger.children} ({len(trials)} trial(s){alone}, "
                    f"{self.child_cpu:.1f} CPU s): output ---\n{child.log_tail()}"
                    + (
                        f"\n--- {child.ignored_lines} line(s) on the grader's channel ignored (forged or garbled)"
                        if child.ignored_lines
                        else ""
                    )
                )
                with grading.profile.step("closing"):
                    child.close()

    def _cpu(self, child) -> float:
        """The running child's CPU seconds, kept as last seen: a dead process has no /proc entry."""
        self.child_cpu = max(self.child_cpu, child.cpu_seconds())
        return self.child_cpu

    def _limit(self, child, seconds: float) -> Budget:
        """``seconds`` of CPU time for the child's next step, or what is left of the budget."""
        grading = self.grading
        return Budget(
            lambda: self._cpu(child),
            seconds,
            grading.plan.limits.wall_factor,
            self.until - grading.ledger.spent(self.visibility) - self._cpu(child),
            grading.ledger.wall_end,
        )

    def _drive(self, child, queue: list[Trial]) -> None:
        """Follow the child's events: hand over the next trial each time it is ready, judge each
        call, stop it at the time limits, and once its orders are done, see it exit: its
        verdicts count only if no crash follows them."""
        grading, limits = self.grading, self.grading.plan.limits
        judged: dict[int, Verdict] = {}
        phase, current, started_at = "starting", None, 0.0
        # The import has its own limit whatever the budget: Grading.run starts a child only where
        # the budget pays for one, and an import that cannot finish is the file's fault.
        budget = Budget(lambda: self._cpu(child), limits.startup_seconds, limits.wall_factor)
        while True:
            if grading.stop.is_set():
                raise Cancelled()
            try:
                event = child.next_event(time.monotonic() + 1.0)
            except ChildEnded as ended:
                self._stopped(phase, started_at)
                after_exit(grading, child, phase, current, ended, judged)
                return
            if event is None:
                if not budget.spent():
                    continue
                child.kill()
                self._stopped(phase, started_at)
                after_timeout(grading, child, phase, current, budget, judged)
                return
            kind = event.get("event")
            if kind == "sandbox_error":  # the boot step could not start Python: our problem
                raise SandboxError(f"{event.get('message')}\n{child.log_tail()}")
            if kind in ("compiling", "compiled") and phase in ("finishing", "exiting"):
                continue  # off the GPU until it exits; its orders are closed, so it waits for no go
            if (kind == "started" and phase == "starting") or kind == "compiled":
                # Off the GPU until now (importing, or compiling: grader.sandbox.child.CompileGate).
                if kind == "started":
                    phase = "importing"
                    self._profile_started(event)
                    _same_device(event)
                try:
                    self._count_aside(grading.let_in(child), budget)
                except ChildEnded as ended:
                    after_exit(grading, child, phase, current, ended, judged)
                    return
            elif kind == "load_error":
                grading.ledger.load_error = with_limits_hint(str(event.get("message", "")), grading.sandbox, limits)
                return
            elif kind == "compiling":
                grading.lease.leave(child, child.pause, child.resume)
            elif (kind == "loaded" and phase == "importing") or (
                kind == "done" and current is not None and event.get("trial") == current.id
            ):
                self._rejoin(child, budget)  # a compile that failed never reported "compiled"
                off_gpu, self.aside = self.aside, 0.0
                call_seconds = time.monotonic() - started_at - off_gpu
                if kind == "done":
                    grading.profile.add("cases", call_seconds)
                    grading.profile.add("compiling", claimed_seconds(event.get("compile_seconds")))
                    grading.profile.add("autotuning", claimed_seconds(event.get("autotune_seconds")))
                else:
                    grading.ledger.import_cpu = max(grading.ledger.import_cpu, self._cpu(child))
                    grading.profile.add("learner import", time.monotonic() - self.step_started - off_gpu)
                # A timing waiting for the GPU goes first, this child frozen meanwhile; before
                # judging, which uses the GPU in the grader and would keep the timing waiting.
                aside = grading.lease.step_aside(child.pause, child.resume)
                grading.profile.add("waiting", aside)
                grading.ledger.wall_end += aside
                if kind == "done":
                    with grading.profile.step("judging"):
                        judged[current.id] = _judge(grading, child, current, event, call_seconds, judged)
                budget = self._limit(child, limits.case_seconds)
                if not queue:
                    self.exiting_since = time.monotonic()
                    # Exiting launches nothing: a timing need not wait for it (frozen meanwhile).
                    grading.lease.leave(child, child.pause, child.resume)
                    child.end_orders()
                    phase, current = "finishing", None
                    continue
                current = queue.pop(0)
                phase, started_at = "calling", time.monotonic()
                try:
                    args, kwargs = grading.inputs[current.id]
                    child.give(
                        input_name(current.id),
                        lambda handle, args=args, kwargs=kwargs: wire.write(
                            {"args": list(args), "kwargs": kwargs}, handle
                        ),
                    )
                    child.order(
                        {
                            "trial": current.id,
                            "api": grading.plan.api_of(current.id),
                            "call": grading.plan.call_of(current.id),
                        },
                        time.monotonic() + 30,
                    )
                except ChildEnded as ended:
                    after_exit(grading, child, phase, current, ended, judged)
                    return
                except OSError as error:  # e.g. a file the learner's code left under that name
                    grading.ledger.verdicts.update(judged)
                    grading.ledger.verdicts[current.id] = Verdict(
                        False,
                        "error",
                        (
                            f"The grader could not hand {grading.plan.api_of(current.id)}() its inputs "
                            f"({os.strerror(error.errno or 0)}): kernel.py must not create files in its working folder."
                        ),
                    )
                    return
            elif kind == "fatal":  # the harness's own report (a lost CUDA context): judged already
                grading.ledger.log.append(f"child restarted: {event.get('reason')}")
                grading.ledger.verdicts.update(judged)
                return
            elif kind == "finished":
                # An exit that takes longer is stopped, and counts as clean: no crash was seen.
                phase, budget = "exiting", Budget(lambda: self._cpu(child), _EXIT_SECONDS, 1.0)

    def _stopped(self, phase: str, started_at: float) -> None:
        """A call that a crash or a time limit ended: its time is the file's own cost."""
        if phase == "calling":
            self.grading.profile.add("stopped calls", time.monotonic() - started_at)

    def _rejoin(self, child, budget: Budget) -> None:
        """Share the GPU again after a compile."""
        self._count_aside(self.grading.lease.rejoin(child), budget)

    def _count_aside(self, aside: float, budget: Budget) -> None:
        """Seconds the child spent off the GPU, frozen or waiting for it: they extend the step's
        and the grading's wall-time limits, and count as waiting."""
        if aside:
            self.aside += aside
            self.grading.profile.add("waiting", aside)
            self.grading.ledger.wall_end += aside
            budget.wall_end += aside

    def _profile_started(self, event: dict) -> None:
        """The child is up: its own imports (as it reports them) and the sandbox's start before."""
        now = time.monotonic()
        imports = min(claimed_seconds(event.get("imports_seconds")), now - self.step_started)
        self.grading.profile.add("imports", imports)
        self.grading.profile.add("sandbox", now - self.step_started - imports)
        self.step_started = now


def _same_device(started: dict) -> None:
    """A child that cannot reach the grader's GPU would grade the file on another device, or fail
    every case through no fault of the file: a grader error (no record), never the file's grade.
    Sent before the learner's file is imported, so the file cannot forge it."""
    found, mine = started.get("mode"), device.mode()
    if found is not None and found != mine:
        raise SandboxError(
            f"a grading child started on {found!r}, but this grader grades on {mine!r}: the GPU is not "
            "usable from the sandbox (check the driver, CUDA_VISIBLE_DEVICES and nvidia-smi). The file "
            "was given no grade; grade it again once the GPU works."
        )


def _judge(grading, child, trial: Trial, done: dict, wall_seconds: float, judged: dict[int, Verdict]) -> Verdict:
    """The verdict on ``trial``'s call, which the child reported ``done``; ``judged``: the
    verdicts of this child's earlier calls."""
    case = grading.plan.cases[trial.case_index][0]
    args, kwargs = grading.inputs[trial.id]
    earlier = ()
    if trial.repeat:  # the first call's outputs, from this child or an earlier one
        first = next(t for t in grading.plan.trials if t.case_index == trial.case_index and not t.repeat)
        found = (
            judged.get(first.id) or grading.ledger.verdicts.get(first.id) or grading.ledger.unconfirmed.get(first.id)
        )
        earlier = found.outputs if found else ()
    with JUDGING.judging() as waited:
        verdict = judge(
            grading.plan.spec,
            case,
            args,
            kwargs,
            done,
            lambda references: _read(grading, child, output_name(trial.id), args, kwargs, references),
            grading.on,
            earlier,
            grading.plan.own_kernels,
            hidden=grading.plan.cases[trial.case_index][1] == "hidden",
            room=grading.room,
            step=grading.profile.step,
        )
    grading.profile.add("judging memory wait", waited.seconds)
    child.discard(output_name(trial.id))
    if trial.repeat or not any(t.repeat and t.case_index == trial.case_index for t in grading.plan.trials):
        # Only a call that a repeat is compared with keeps its outputs: the verdicts of a grading
        # live until it ends, and big cases' outputs would hold gigabytes of the grader's memory.
        verdict.outputs = ()
    if not verdict.seconds:  # the child's own clock, taken before the learner's import
        verdict.seconds = wall_seconds
    grading.ledger.traced = grading.ledger.traced or isinstance(done.get("kernels"), list)
    return verdict


def _read(grading, child, name: str, args: tuple, kwargs: dict, references: tuple) -> dict:
    with grading.profile.step("judging reads"):
        return fetch(child, name, args, kwargs, references)
