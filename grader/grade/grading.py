"""Grading one submission of one module: its trials, the sandboxed children that run them, and
the verdicts, under the module's CPU-time budget.

For each trial the parent (this process, which never imports learner code) builds the inputs
from a secret seed chosen per run, hands them to a child (``grader.sandbox.child``, started by
``grader.sandbox.isolation``) one call at a time, and judges what it saved
(``grader.grade.judging``). A case that times out or crashes costs its child, and the cases after
it run in a fresh one. A crash is blamed only on a case that crashes in a child that ran no other
case (an unmasked store may crash the process cases later, or at exit), and a child's verdicts
count only once it has exited cleanly (see ``Grading.run``). All the children of one submission
and module share a CPU-time budget (``Options.module_seconds``); what it cannot pay for is
marked not run.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grader.core import cases, crashes, device
from grader.core.cases import Case, Spec
from grader.core.catalog import REPO_ROOT, Module
from grader.core.checks import build_inputs
from grader.core.evidence import triton_kernel_names
from grader.grade import leases, results, timing
from grader.grade.judging import Trial, Verdict, fetch, judge
from grader.grade.profile import Profile
from grader.grade.store import cases_hash, sha256
from grader.sandbox import wire
from grader.sandbox.child import input_name, output_name
from grader.sandbox.child import command as child_command
from grader.sandbox.isolation import ChildEnded, Limits, Sandbox, SandboxError
from grader.sandbox.policy import check_source, explain, policy_for

PERFORMANCE_NOT_GRADED = {"graded": False, "reason": "not graded: needs a CUDA GPU"}


@dataclass
class Options:
    """How the run phase grades; the defaults suit a course run on one machine."""
    workers: int | None = None  # default: one per GPU on CUDA, else min(4, CPUs)
    limits: Limits = field(default_factory=Limits)
    hide: tuple = ()  # more paths the child must not see (the nbgrader course folder, ...)
    expose: tuple = ()  # more read-only paths the child needs (a CUDA toolkit outside /usr, ...)
    allow_unsafe: bool = False  # grade even where fork bombs cannot be contained
    # CPU seconds for all the processes that grade one submission of one module (time-outs and
    # crashes each cost a process); default: startup_seconds + 4 x case_seconds. Correct code
    # uses a small fraction of it.
    module_seconds: float | None = None
    policy_gate: bool = True  # refuse what no exercise needs before running (off: tests of the layers behind it)
    gpu_memory_fraction: float = 0.9  # of the GPU's memory, for a timed child; shared by the others
    # Gradings that check correctness side by side on one GPU (timing has the GPU alone).
    children_per_gpu: int = 4
    # Grade on a Ray cluster (grader.grade.cluster): its address, or "" for this machine's; None: locally.
    ray: str | None = None



class Cancelled(Exception):
    """The run is being stopped (Ctrl-C): leave without writing a record."""



@dataclass
class Plan:
    spec: Spec
    cases: list[tuple[Case, str]]  # (case, "public"/"hidden")
    trials: list[Trial]


def plan(module: Module, secret: int) -> Plan:
    spec, public = cases.public(module)
    cuda = device.is_cuda()
    planned = [(c, "public") for c in cases.for_mode(public, cuda)] + \
              [(c, "hidden") for c in cases.for_mode(cases.hidden(module), cuda)]
    trials: list[Trial] = []
    for index in range(len(planned)):
        trials.append(Trial(len(trials), index, secret))
        if index == 0:  # right after the first case, before any hidden case has been seen
            trials.append(Trial(len(trials), index, secret + 1, repeat=True))
    return Plan(spec, planned, trials)




class Grading:
    """The state of one (module, submission) grading across its child processes."""

    def __init__(self, module: Module, source: bytes, sandbox: Sandbox, slot, secret: int,
                 options: Options, stop: threading.Event, profile: Profile | None = None):
        self.module, self.source, self.sandbox, self.slot = module, source, sandbox, slot
        self.profile = profile or Profile()
        self.lease = leases.for_gpu(slot.gpu)
        # On a GPU the children of this grading share Triton's cache: each kernel compiles once.
        self.shared = sandbox.new_shared(slot) if device.is_cuda() else None
        self.step_started = 0.0  # when the child's current step (start, import) began
        self.exiting_since: float | None = None  # when the child was told its orders are done
        self.options, self.stop, self.limits = options, stop, options.limits
        self.plan = plan(module, secret)
        self.on = torch.device(f"cuda:{slot.gpu or 0}") if device.is_cuda() else torch.device("cpu")
        with self.profile.step("inputs"):
            self.inputs = {t.id: build_inputs(self.plan.spec, self.plan.cases[t.case_index][0], t.secret, on=self.on)
                           for t in self.plan.trials}
        self.verdicts: dict[int, Verdict] = {}
        self.load_error: str | None = None
        self.protections: dict = {}
        self.children = 0
        # Verdicts of cases that ran in a child that crashed afterwards: the crash may be theirs,
        # or an earlier case's damage may have decided them; each runs again alone (see run()).
        self.unconfirmed: dict[int, Verdict] = {}
        self.crashes: list[tuple[ChildEnded, set[int]]] = []  # crashes of children that ran several trials
        self.batch = len(self.plan.trials)  # trials per child: halved after a crash, doubled after a clean exit
        self.budget = options.module_seconds or self.limits.startup_seconds + 4 * self.limits.case_seconds
        self.cpu_spent = 0.0  # CPU seconds of this grading's finished children
        self.child_cpu = 0.0  # and of the running one, as last seen
        self.import_cpu = 0.0  # what a child has taken to import the submission (at most)
        self.wall_end = math.inf
        self.log: list[str] = []
        self.performance = PERFORMANCE_NOT_GRADED
        # The static gate, before anything of the submission runs (Options.policy_gate turns it
        # off only to test the layers behind it on their own).
        violations = check_source(source.decode(errors="replace"), policy_for(self.plan.spec)) \
            if options.policy_gate else []
        self.refusal = explain(violations) if violations else None
        self.own_kernels = triton_kernel_names(source.decode(errors="replace"))
        self.traced = False  # set once a child's report carries a CUDA kernel trace

    @property
    def api(self) -> str:
        return self.plan.spec.api

    def pending(self, visibility: str) -> list[Trial]:
        for trial in self.plan.trials:  # a case that already failed needs no repeat
            if trial.repeat and trial.id not in self.verdicts:
                first = self.verdicts.get(trial.id - 1)
                if first is not None and not first.passed:
                    self.verdicts[trial.id] = Verdict(False, first.kind, first.message, crash=first.crash)
        for trial_id in self.verdicts:
            self.unconfirmed.pop(trial_id, None)
        return [t for t in self.plan.trials if t.id not in self.verdicts and self._visibility(t) == visibility]

    def _visibility(self, trial: Trial) -> str:
        return self.plan.cases[trial.case_index][1]

    def run(self) -> None:
        """Public cases first, then hidden ones, never in the same child: a child that runs
        public cases (whose messages the learner reads) never holds a hidden case's inputs.

        A child runs the pending cases one after another. After a time-out the rest go on in a
        fresh child. A crash may surface cases after the call that caused it (an out-of-bounds
        store corrupts the heap and the allocator aborts later), and that damage may also decide
        earlier results, so a child's verdicts count only if it then exits cleanly: every case a
        crashed child ran runs again alone in a fresh child, and a case is blamed for a crash
        only when it crashes alone. Everything shares the module's CPU-time budget; public cases
        may spend only their share of it, so that hidden cases always get theirs; what the
        budget cannot pay for is marked not run, naming it."""
        if self.refusal is not None:
            for trial in self.plan.trials:
                self.verdicts[trial.id] = Verdict(False, "policy", "Not run: the grader refused kernel.py "
                                                  "before running it.")
            return
        self.wall_end = time.monotonic() + self.budget * self.limits.wall_factor
        public = sum(self._visibility(t) == "public" for t in self.plan.trials)
        share = self.budget * public / max(1, len(self.plan.trials))
        for visibility, until in (("public", share), ("hidden", self.budget)):
            while (waiting := self.pending(visibility)) and self.load_error is None:
                if self.stop.is_set():
                    raise Cancelled()
                if self.cpu_spent + self.import_cpu >= until or time.monotonic() >= self.wall_end:
                    for trial in waiting:
                        self.verdicts[trial.id] = Verdict(False, "not_run", self._budget_spent(
                            visibility, until, trial.id in self.unconfirmed))
                    break
                suspects = [t for t in waiting if t.id in self.unconfirmed]
                self._run_child(suspects[:1] or waiting[:self.batch], until)

    def _budget_spent(self, visibility: str, until: float, unconfirmed: bool) -> str:
        spent = f"the module's time budget ({self.budget:g} s of CPU time for all its processes) was spent"
        if unconfirmed:
            return (f"Not run to a verdict: this case ran in a process that crashed afterwards, and {spent} "
                    "before it could run again alone.")
        share = f" (public cases may use {until:.0f} s of it, so that hidden cases get theirs)" \
            if visibility == "public" else ""
        return (f"Not run: {spent}{share}, on cases that timed out or crashed and the fresh processes they "
                "needed. Fix those first.")

    def _run_child(self, trials: list[Trial], until: float) -> None:
        """One child: import the submission, then run ``trials`` one by one, handing each its
        inputs only when it starts."""
        waiting = time.monotonic()
        with self.lease.shared():
            waited = time.monotonic() - waiting
            self.profile.add("waiting", waited)
            self.wall_end += waited  # a busy GPU is no reason to stop a submission's cases
            self.step_started, self.exiting_since = time.monotonic(), None
            child = self.start_child(len(trials))
            self.children += 1
            self.child_cpu = 0.0
            alone = " alone, after a crash" if trials[0].id in self.unconfirmed else ""
            try:
                protections = self.sandbox.wait_sandbox(child)
                self.protections = self.protections or protections
                self._drive(child, list(trials), until)
            finally:
                if self.exiting_since is not None:
                    self.profile.add("exits", time.monotonic() - self.exiting_since)
                self.cpu_spent += self.child_cpu
                self.log.append(f"--- child {self.children} ({len(trials)} trial(s){alone}, {self.child_cpu:.1f} "
                                f"CPU s): output ---\n{child.log_tail()}"
                                + (f"\n--- {child.ignored_lines} line(s) on the grader's channel ignored "
                                   "(forged or garbled)" if child.ignored_lines else ""))
                child.close()

    def _cpu(self, child) -> float:
        """The running child's CPU seconds, kept as last seen: a dead process has no /proc entry."""
        self.child_cpu = max(self.child_cpu, child.cpu_seconds())
        return self.child_cpu

    def _limit(self, child, seconds: float, until: float) -> "Budget":
        """``seconds`` of CPU time for the child's next step, or what is left of the budget."""
        return Budget(lambda: self._cpu(child), seconds, self.limits.wall_factor,
                       until - self.cpu_spent - self._cpu(child), self.wall_end)

    def start_child(self, n_calls: int, timed: bool = False):
        """A sandboxed child holding only the submission; inputs come later, one call at a time.
        Only a ``timed`` child autotunes, and it has the GPU to itself (``grader.grade.leases``);
        the others share the GPU's memory."""
        share = 1 if timed else self.options.children_per_gpu
        request = {"module": self.module.id, "api": self.api, "kernel": "kernel.py",
                   "gpu_memory_fraction": self.options.gpu_memory_fraction / max(1, share),
                   "autotune": timed, "allowed_ops": sorted(self.plan.spec.allowed_ops)}
        return self.sandbox.start(self.slot, {"kernel.py": self.source}, child_command(REPO_ROOT),
                                  request, n_calls, secrets.token_hex(16), shared=self.shared)

    def _drive(self, child, queue: list[Trial], until: float) -> None:
        """Follow the child's events: hand over the next trial each time it is ready, judge each
        call, stop it at the time limits, and once its orders are done, see it exit: its
        verdicts count only if no crash follows them."""
        judged: dict[int, Verdict] = {}
        phase, current, started_at = "starting", None, 0.0
        # The import has its own limit whatever the budget: run() starts a child only where the
        # budget pays for one, and an import that cannot finish is the file's fault.
        budget = Budget(lambda: self._cpu(child), self.limits.startup_seconds, self.limits.wall_factor)
        while True:
            if self.stop.is_set():
                raise Cancelled()
            try:
                event = child.next_event(time.monotonic() + 1.0)
            except ChildEnded as ended:
                self._ended(child, phase, current, ended, judged)
                return
            if event is None:
                if not budget.spent():
                    continue
                child.kill()
                self._timed_out(child, phase, current, budget, judged)
                return
            kind = event.get("event")
            if kind == "sandbox_error":  # the boot step could not start Python: our problem
                raise SandboxError(f"{event.get('message')}\n{child.log_tail()}")
            if kind == "started" and phase == "starting":
                phase = "importing"
                self._profile_started(event)
            elif kind == "load_error":
                self.load_error = self._with_limits_hint(str(event.get("message", "")))
                return
            elif (kind == "loaded" and phase == "importing") or \
                    (kind == "done" and current is not None and event.get("trial") == current.id):
                if kind == "done":
                    self.profile.add("cases", time.monotonic() - started_at)
                    self.profile.add("compiling", _number(event.get("compile_seconds")))
                    self.profile.add("autotuning", _number(event.get("autotune_seconds")))
                    with self.profile.step("judging"):
                        judged[current.id] = self._judge(child, current, event, time.monotonic() - started_at, judged)
                else:
                    self.import_cpu = max(self.import_cpu, self._cpu(child))
                    self.profile.add("learner import", time.monotonic() - self.step_started)
                budget = self._limit(child, self.limits.case_seconds, until)
                if not queue:
                    self.exiting_since = time.monotonic()
                    child.end_orders()
                    phase, current = "finishing", None
                    continue
                current = queue.pop(0)
                phase, started_at = "calling", time.monotonic()
                try:
                    args, kwargs = self.inputs[current.id]
                    child.give(input_name(current.id), wire.dump({"args": list(args), "kwargs": kwargs}))
                    child.order({"trial": current.id}, time.monotonic() + 30)
                except ChildEnded as ended:
                    self._ended(child, phase, current, ended, judged)
                    return
                except OSError as error:  # e.g. a file the learner's code left under that name
                    self.verdicts.update(judged)
                    self.verdicts[current.id] = Verdict(False, "error", (
                        f"The grader could not hand {self.api}() its inputs ({os.strerror(error.errno or 0)}): "
                        "kernel.py must not create files in its working folder."))
                    return
            elif kind == "fatal":  # the harness's own report (a lost CUDA context): judged already
                self.log.append(f"child restarted: {event.get('reason')}")
                self.verdicts.update(judged)
                return
            elif kind == "finished":
                # An exit that takes longer is stopped, and counts as clean: no crash was seen.
                phase, budget = "exiting", Budget(lambda: self._cpu(child), _EXIT_SECONDS, 1.0)

    def _profile_started(self, event: dict) -> None:
        """The child is up: its own imports (as it reports them) and the sandbox's start before."""
        now = time.monotonic()
        imports = min(_number(event.get("imports_seconds")), now - self.step_started)
        self.profile.add("imports", imports)
        self.profile.add("sandbox", now - self.step_started - imports)
        self.step_started = now

    def _judge(self, child, trial: Trial, done: dict, wall_seconds: float, judged: dict[int, Verdict]) -> Verdict:
        case = self.plan.cases[trial.case_index][0]
        args, kwargs = self.inputs[trial.id]
        earlier = ()
        if trial.repeat:  # the first call's outputs, from this child or an earlier one
            first = next(t for t in self.plan.trials if t.case_index == trial.case_index and not t.repeat)
            found = judged.get(first.id) or self.verdicts.get(first.id) or self.unconfirmed.get(first.id)
            earlier = found.outputs if found else ()
        verdict = judge(self.plan.spec, case, args, kwargs, done,
                        lambda references: fetch(child, output_name(trial.id), args, kwargs, references),
                        self.on, earlier, self.own_kernels)
        child.discard(output_name(trial.id))
        if not verdict.seconds:  # the child's own clock, taken before the learner's import
            verdict.seconds = wall_seconds
        self.traced = self.traced or isinstance(done.get("kernels"), list)
        return verdict

    def _ended(self, child, phase: str, current: Trial | None, ended: ChildEnded,
               judged: dict[int, Verdict]) -> None:
        """The child is gone: a crash, unless it exited cleanly (or was stopped by the grader)
        after its last case."""
        if phase == "starting":
            raise SandboxError(f"The grader's child process died before importing the submission ({ended.how}):\n"
                               f"{child.log_tail()}")
        if phase == "importing":
            self.load_error = (f"kernel.py stopped the grading process while being imported ({ended.how}). "
                               "Importing must only define functions: remove calls like sys.exit(), "
                               "os._exit() or os.fork() at the top level of the file. "
                               f"{crashes.explain(ended.returncode)}").rstrip()
            return
        if phase in ("finishing", "exiting") and not ended.returncode:
            self.verdicts.update(judged)
            self.batch *= 2
            return
        ran = [*judged, *([current.id] if current is not None else [])]
        self.log.append(f"child {self.children} {ended.how} after trial(s) {ran}")
        # A kernel that crashed is likely to crash again: fewer trials per child mean fewer
        # verdicts to confirm alone afterwards (one per child when every case crashes).
        self.batch = max(1, len(ran) // 2)
        if len(ran) == 1:  # a fresh process that ran this case alone: the crash is this case's
            self.verdicts[ran[0]] = self._crash(ended, judged.get(ran[0]))
        elif ran:  # any of them may have caused it: each runs again alone
            self.crashes.append((ended, set(ran)))
            for trial_id in ran:
                self.unconfirmed[trial_id] = judged.get(trial_id) or self._crash(ended, None)

    def _crash(self, ended: ChildEnded, returned: Verdict | None) -> Verdict:
        """The verdict on a case that crashed alone; ``returned``: its verdict, if the call
        returned before the process crashed (damage that surfaced later)."""
        text = (f"{self.api}() returned, but then the process running it {ended.how}" if returned else
                f"The process running {self.api}() {ended.how} during this case")
        text = f"{text}, in a fresh process that ran no other case. {crashes.explain(ended.returncode)}".rstrip()
        if returned is not None and not returned.passed:  # keep what it got wrong (or the integrity finding)
            return Verdict(False, returned.kind, f"{returned.message}\n{text}", returned.seconds, crash=ended)
        return Verdict(False, "crash", text, returned.seconds if returned else 0.0, crash=ended)

    def _timed_out(self, child, phase: str, current: Trial | None, budget: "Budget",
                   judged: dict[int, Verdict]) -> None:
        processes = (f" It had started {child.processes_seen} processes." if child.processes_seen > 3 else "")
        self.verdicts.update(judged)  # stopped by the grader: no crash followed them
        if phase in ("finishing", "exiting"):
            self.log.append(f"child {self.children} did not exit after its last case; stopped")
        elif phase in ("starting", "importing"):
            self.load_error = (f"kernel.py did not finish importing within {self.limits.startup_seconds:g} s of "
                               "computing "
                               f"(an endless loop at the top level of the file?).{processes}")
        elif current is not None and budget.by_module:  # run() marks what is left not run
            self.verdicts[current.id] = Verdict(False, "not_run", (
                f"Stopped: the module's time budget ({self.budget:g} s of CPU time for all its processes) "
                "ran out during this case, spent on cases that timed out or crashed and the fresh processes "
                "they needed."), self.limits.case_seconds)
        elif current is not None:
            self.verdicts[current.id] = Verdict(False, "timeout", (
                f"{self.api}() did not return within {self.limits.case_seconds:g} s of computing: an endless loop, in "
                f"Python or in the kernel? The case was stopped.{processes}"), self.limits.case_seconds)

    def _with_limits_hint(self, message: str) -> str:
        if "MemoryError" in message or "out of memory" in message.lower():
            message += (f"\nThe grader allows {self.sandbox.memory_bytes(self.limits) / (1 << 30):g} GiB of "
                        "host memory per submission.")
        if "BlockingIOError" in message or "Resource temporarily unavailable" in message:
            message += f"\nThe grader allows {self.limits.processes} processes and threads per submission."
        return message



class Budget:
    """A time limit judged on the child's CPU time (``cpu``: seconds so far), which a busy
    machine hardly changes, with wall time as a backstop (``wall_factor`` times longer) for a
    child that waits without computing. Correct code therefore never fails for want of a free
    core. ``left`` and ``wall_end``: what remains of the module's budget, which may end the step
    sooner (``by_module``)."""

    def __init__(self, cpu, seconds: float, wall_factor: float, left: float = math.inf,
                 wall_end: float = math.inf):
        now = time.monotonic()
        self.cpu, self.cpu_end = cpu, cpu() + min(seconds, max(left, 0.0))
        self.wall_end = min(now + seconds * wall_factor, wall_end)
        self.by_module = left < seconds or wall_end < now + seconds * wall_factor

    def spent(self) -> bool:
        return time.monotonic() >= self.wall_end or self.cpu() >= self.cpu_end


_EXIT_SECONDS = 30.0  # for a child to exit after its last case


def _number(value) -> float:
    """A duration a child reported, or 0 for anything that is not a plain non-negative number."""
    return float(value) if type(value) in (int, float) and 0 <= value < 1e6 else 0.0


@dataclass
class Graded:
    """What grading one file of one module produced; ``grader.grade.store.keep`` writes it."""
    record: dict
    log: str  # what the children printed, for instructors only
    children: int  # sandboxed processes started
    profile: Profile
    record_path: Path | None = None  # where it was kept


def grade_one(module: Module, source: bytes, sandbox: Sandbox, secret: int, options: Options,
              stop: threading.Event) -> Graded:
    """Grade one submitted file of one module: its record and log, not yet written anywhere."""
    started = time.monotonic()
    profile = Profile()
    with sandbox.slot() as slot:
        profile.add("waiting", time.monotonic() - started)
        grading = Grading(module, source, sandbox, slot, secret, options, stop, profile)
        try:
            grading.run()
            if device.is_cuda():
                grading.performance = timing.measure(grading, secret)
        finally:
            if grading.shared is not None:
                sandbox.remove_shared(grading.shared)
    record = results.build(grading, sha256(source), cases_hash(module))
    profile.close(time.monotonic() - started)
    return Graded(record, "\n".join(grading.log) + "\n", grading.children, profile)
