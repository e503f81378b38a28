"""The grader's run phase: grade every submission of every module in sandboxed child processes.

For each submitted ``kernel.py`` and module the parent (this process, which never imports learner
code) builds the inputs of the public and hidden cases from a secret seed chosen per run, starts a
child (``grader.sandbox.child``, through ``grader.sandbox.isolation``) that imports the submission and calls its API,
reads the outputs the child saved (``grader.sandbox.wire``: size-checked, never unpickled), computes the
reference, compares, and writes one JSON record per (module, sha256 of the file, hash of the
course's cases). Records are written atomically and reused when they exist, so a re-run costs
almost nothing and an interrupted run loses only the submissions in progress.

A case that times out or crashes costs its child, and the cases after it run in a fresh one.
A crash is blamed only on a case that crashes in a child that ran no other case (an unmasked
store may crash the process cases later, or at exit), and a child's verdicts count only once it
has exited cleanly (see ``_Grading.run``). All the children of one submission and module share
a CPU-time budget (``Options.module_seconds``); what it cannot pay for is marked not run.

Submissions are found as ``<root>/<student>/<track>/<slug>/kernel.py`` or, as nbgrader collects
them, ``<root>/<student>/<track>-<slug>/kernel.py``. Records live in
``<results>/records/<track>/<slug>/<sha256>-<cases>.json``; ``<results>/students.json`` maps each
student to their records, and ``<results>/logs`` keeps what each child printed (for instructors
only: it may contain anything the learner's code chose to print).
"""

from __future__ import annotations

import builtins
import datetime
import hashlib
import json
import math
import os
import re
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grader.core import cases, crashes, device
from grader.grade import timing
from grader.core.cases import Case, Spec
from grader.core.catalog import REPO_ROOT, Module, available_modules
from grader.core.checks import (aliased_output, build_inputs, changed_input, compare, reference_outputs,
                           same_values, tensors_in)
from grader.sandbox import wire
from grader.sandbox.child import TIMED_OUTPUTS, TIMING_INPUTS, input_name, output_name
from grader.sandbox.child import command as child_command
from grader.core.evidence import EVIDENCE, judge_evidence, triton_kernel_names
from grader.core.loading import LoadError, load_kernel, todo_summary
from grader.sandbox.policy import check_source, explain, policy_for
from grader.sandbox.isolation import ChildEnded, Limits, Sandbox, SandboxError, UnsafeSandbox
from grader.core.markers import open_todos

RECORD_VERSION = 4
MAX_SOURCE_BYTES = 1 << 20
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
    gpu_memory_fraction: float = 0.9


@dataclass
class Submission:
    student: str
    module: Module
    path: Path


@dataclass
class Outcome:
    submissions: list[Submission]
    record: dict | None = None
    record_path: Path | None = None
    reused: bool = False
    children: int = 0
    error: str | None = None


@dataclass
class RunSummary:
    outcomes: list[Outcome]
    results_dir: Path
    protections: dict

    @property
    def children_started(self) -> int:
        return sum(o.children for o in self.outcomes)

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error]

    def record_for(self, student: str, module_id: str) -> dict | None:
        for outcome in self.outcomes:
            if any(s.student == student and s.module.id == module_id for s in outcome.submissions):
                return outcome.record
        return None


class Cancelled(Exception):
    """The run is being stopped (Ctrl-C): leave without writing a record."""


# ----------------------------------------------------------------------------------------------
# Finding submissions, hashing, and where records live
# ----------------------------------------------------------------------------------------------


def find_submissions(root: Path, modules: list[Module]) -> list[Submission]:
    """Every ``kernel.py`` under ``root`` in either layout, sorted by student and module."""
    found = []
    for student_dir in sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.name.startswith(".")):
        for module in modules:
            for candidate in (student_dir / module.track / module.slug / "kernel.py",
                              student_dir / f"{module.track}-{module.slug}" / "kernel.py"):
                if candidate.exists() or candidate.is_symlink():
                    found.append(Submission(student_dir.name, module, candidate))
                    break
    return found


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cases_hash(module: Module) -> str:
    """What decides a module's grade besides the submission: its public and hidden cases, the
    device mode (which cases run), and the record format."""
    hidden = module.solution_dir / "hidden.py"
    parts = {"record_version": RECORD_VERSION, "mode": device.mode(),
             "public": _sha256((module.learner_dir / "test_kernel.py").read_bytes()),
             "hidden": _sha256(hidden.read_bytes()) if hidden.is_file() else ""}
    return _sha256(json.dumps(parts, sort_keys=True).encode())[:16]


def record_path(results_dir: Path, module: Module, submission_sha: str, cases_sha: str) -> Path:
    return Path(results_dir) / "records" / module.track / module.slug / f"{submission_sha}-{cases_sha}.json"


def read_record(path: Path) -> dict | None:
    """A complete record from an earlier run, or None."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("record_version") == RECORD_VERSION else None


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _remove_stale_temporaries(results_dir: Path) -> None:
    """Half-written files of a writer that was killed (``write_atomically``'s temporaries)."""
    for path in results_dir.rglob(".*.tmp"):
        pid = path.name.rsplit(".", 3)[-3]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            path.unlink(missing_ok=True)


def _source(path: Path) -> bytes:
    """The submitted file, refusing what is not a plain file of reasonable size."""
    if path.is_symlink() or not path.is_file():
        raise ValueError("kernel.py must be a regular file (not a link or a folder).")
    if path.stat().st_size > MAX_SOURCE_BYTES:
        raise ValueError(f"kernel.py is larger than {MAX_SOURCE_BYTES // 1024} KiB.")
    return path.read_bytes()


# ----------------------------------------------------------------------------------------------
# Judging one trial (in the parent, from what the child saved)
# ----------------------------------------------------------------------------------------------


@dataclass
class Trial:
    id: int
    case_index: int
    secret: int
    repeat: bool = False  # a second call on fresh inputs of the same shape: catches caching


@dataclass
class Verdict:
    passed: bool
    kind: str = ""  # what went wrong, for the hidden cases' generic messages
    message: str = ""
    seconds: float = 0.0
    outputs: tuple = ()
    crash: ChildEnded | None = None  # how the process crashed, when it did


def _placeholder(type_name: str):
    """Something whose type is called ``type_name``, so that compare() names what was returned."""
    return type(type_name, (), {})()


def _fetch(child, name: str, args: tuple, kwargs: dict, references: tuple) -> dict:
    """What the child saved under ``name``, read within limits set by what a right answer needs:
    the inputs as they are after the call plus the outputs (the references, in float64, bound
    any dtype), with room for one wrong-sized output. Raises on anything else."""
    inputs = tensors_in((args, kwargs))
    expected = [t for t in (*references, *inputs) if isinstance(t, torch.Tensor)]
    max_elements = 2 * max([t.numel() for t in expected] + [1]) + 1024
    max_bytes = 2 * sum(t.untyped_storage().nbytes() for t in inputs) + \
        4 * sum(t.numel() * 8 for t in references if isinstance(t, torch.Tensor)) + (1 << 20)
    saved = wire.parse(child.take(name, max_bytes), max_elements)
    if not isinstance(saved, dict) or not isinstance(saved.get("outputs"), list):
        raise wire.WireError("the file does not hold the expected fields")
    return saved


def judge(spec: Spec, case: Case, args: tuple, kwargs: dict, done: dict, fetch, on: torch.device,
          earlier: tuple = (), own_kernels: set[str] | None = None) -> Verdict:
    """The verdict on one call, from the child's report ``done`` and what it saved (``fetch``:
    the references -> the saved outputs and inputs). ``own_kernels``: the submission's
    @triton.jit names, read against the child's CUDA kernel trace."""
    api = spec.api
    seconds = float(done.get("seconds") or 0.0)
    if done.get("error"):
        # call_api's own messages start with these; a learner's exception starts "add() raised".
        error = str(done["error"])
        kind = "mutation" if error.startswith(f"{api}() changed its input") else \
            "alias" if error.startswith(f"{api}() returned one of its inputs") else "error"
        return Verdict(False, kind, error, seconds)
    references = reference_outputs(spec, args, kwargs)
    try:
        saved = fetch(references)
        kept, args_after, kwargs_after = saved["outputs"], saved["args"], saved["kwargs"]
    except FileNotFoundError:
        return Verdict(False, "unreadable", f"{api}() returned, but nothing it returned was saved.", seconds)
    except Exception as error:
        return Verdict(False, "unreadable", f"The grader could not read what {api}() returned ({error}). "
                       "Return plain torch.Tensor objects of the expected shape.", seconds)
    returned = done.get("returned") or []
    if not isinstance(returned, list) or len(returned) != len(kept):
        return Verdict(False, "unreadable", f"The grader could not read what {api}() returned.", seconds)
    outputs = tuple(out if out is not None else _placeholder(str(name)) for out, name in zip(kept, returned))

    expected_device = on.type
    for name, where in zip(spec.output_names, done.get("devices") or []):
        if where is not None and where != expected_device:
            return Verdict(False, "device", f"{name} is on {where}, but the inputs are on {expected_device}: "
                           "allocate the output on the inputs' device.", seconds)
    # The child checked these too, but code that patched torch could have fooled it.
    inputs_before, inputs_after = tensors_in((args, kwargs)), tensors_in((args_after, kwargs_after))
    if len(inputs_before) != len(inputs_after):
        return Verdict(False, "unreadable", f"The grader could not read the inputs after {api}().", seconds)
    problem = changed_input(inputs_before, inputs_after, api)
    if problem:
        return Verdict(False, "mutation", problem, seconds)
    problem = aliased_output(outputs, inputs_after, api)
    if problem:
        return Verdict(False, "alias", problem, seconds)

    try:
        problems = compare(spec, case, outputs, references, (args, kwargs))
    except Exception as error:  # a malformed output (meta tensor, odd layout) must not stop grading
        problems = [f"The grader could not compare what {api}() returned ({type(error).__name__})."]
    if problems:
        message = "\n".join(problems)
        if earlier and all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_values(a, b)
                           for a, b in zip(outputs, earlier)):
            return Verdict(False, "cache", f"{api}() returned the same values for two different inputs "
                           "of the same shape: it reuses an earlier result. Compute the output on every call.",
                           seconds, outputs)
        return Verdict(False, "wrong", message, seconds, outputs)

    found = judge_evidence(api, done, any(isinstance(o, torch.Tensor) and o.numel() for o in outputs),
                           own_kernels)
    if found:
        return Verdict(False, found[0], found[1], seconds, outputs)
    return Verdict(True, seconds=seconds, outputs=outputs)


_GENERIC = {
    "wrong": "the output is wrong.",
    "mutation": "the function changed one of its inputs.",
    "alias": "the function returned one of its inputs instead of a new tensor.",
    "device": "the output is on the wrong device.",
    "unreadable": "the function returned something other than tensors.",
    "cache": "the function returned an earlier result for new inputs of the same shape.",
    "torch": "the function computed with PyTorch (or NumPy) instead of a Triton kernel.",
    "no_launch": "the function did not launch a Triton kernel.",
    "timeout": "the function did not return within the time limit (an endless loop?).",
    "policy": "not run: the grader refused kernel.py before running it.",
}


# Failures that are not mistakes but ways around the exercise: any one of them withholds every
# point of the module, with this reason.
_INTEGRITY = {
    "torch": "a case was computed with PyTorch (or NumPy) instead of a Triton kernel.",
    "no_launch": "a case returned a result without launching a Triton kernel.",
    "cache": "a call returned an earlier result for new inputs (outputs cached across calls).",
    "alias": "a call returned one of its inputs instead of a new tensor.",
    "mutation": "a call changed its inputs.",
    "policy": "the grader refused kernel.py before running it.",
}


def hidden_message(verdict: Verdict, api: str) -> str:
    """What a learner may read about a failed hidden case: what kind of failure, and the pattern
    of wrong elements, with every number (a size, an index, a value) left out."""
    text = f"Hidden case failed: {_GENERIC.get(verdict.kind, 'it did not pass.')}"
    if verdict.kind == "error":
        # Only a built-in exception's name: a class of the learner's could be named after a shape.
        match = re.search(r"raised (\w+)", verdict.message)
        found = getattr(builtins, match.group(1), None) if match else None
        name = found.__name__ if isinstance(found, type) and issubclass(found, BaseException) else "an exception"
        text = (f"Hidden case failed: {api}() raised {name}. Hidden cases do not show error messages; "
                "the public cases with similar shapes usually raise the same error.")
    elif verdict.kind == "wrong":
        kept = [line for line in verdict.message.splitlines() if line.startswith("Pattern:") or "NaN" in line]
        kept = [re.sub(r"^\d+ element\(s\) are NaN", "Some elements are NaN", line) for line in kept]
        text += "".join(" " + re.sub(r"\d+", "N", line) for line in kept)
    elif verdict.kind == "not_run":  # the grader's own words (the time budget), never the learner's
        text = f"Hidden case {verdict.message[0].lower()}{verdict.message[1:]}"
    if verdict.crash is not None:  # the signal and make check's diagnosis: nothing of the case
        name = crashes.signal_name(verdict.crash.returncode)
        crashed = (f"the process running {api}() crashed{f' ({name})' if name else ''} on this case, in a fresh "
                   f"process that ran no other case. {crashes.explain(verdict.crash.returncode)}").rstrip()
        text = f"Hidden case failed: {crashed}" if verdict.kind == "crash" else f"{text} Then {crashed}"
    return text


# ----------------------------------------------------------------------------------------------
# Grading one submission of one module
# ----------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    spec: Spec
    cases: list[tuple[Case, str]]  # (case, "public"/"hidden")
    trials: list[Trial]


def _plan(module: Module, secret: int) -> _Plan:
    spec, public = cases.public(module)
    cuda = device.is_cuda()
    planned = [(c, "public") for c in cases.for_mode(public, cuda)] + \
              [(c, "hidden") for c in cases.for_mode(cases.hidden(module), cuda)]
    trials: list[Trial] = []
    for index in range(len(planned)):
        trials.append(Trial(len(trials), index, secret))
        if index == 0:  # right after the first case, before any hidden case has been seen
            trials.append(Trial(len(trials), index, secret + 1, repeat=True))
    return _Plan(spec, planned, trials)


class _Grading:
    """The state of one (module, submission) grading across its child processes."""

    def __init__(self, module: Module, source: bytes, sandbox: Sandbox, slot, secret: int,
                 options: Options, stop: threading.Event):
        self.module, self.source, self.sandbox, self.slot = module, source, sandbox, slot
        self.options, self.stop, self.limits = options, stop, options.limits
        self.plan = _plan(module, secret)
        self.on = torch.device(f"cuda:{slot.gpu or 0}") if device.is_cuda() else torch.device("cpu")
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
        child = self._start_child(len(trials))
        self.children += 1
        self.child_cpu = 0.0
        alone = " alone, after a crash" if trials[0].id in self.unconfirmed else ""
        try:
            protections = self.sandbox.wait_sandbox(child)
            self.protections = self.protections or protections
            self._drive(child, list(trials), until)
        finally:
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

    def _limit(self, child, seconds: float, until: float) -> "_Budget":
        """``seconds`` of CPU time for the child's next step, or what is left of the budget."""
        return _Budget(lambda: self._cpu(child), seconds, self.limits.wall_factor,
                       until - self.cpu_spent - self._cpu(child), self.wall_end)

    def _start_child(self, n_calls: int):
        """A sandboxed child holding only the submission; inputs come later, one call at a time."""
        request = {"module": self.module.id, "api": self.api, "kernel": "kernel.py",
                   "gpu_memory_fraction": self.options.gpu_memory_fraction,
                   "allowed_ops": sorted(self.plan.spec.allowed_ops)}
        return self.sandbox.start(self.slot, {"kernel.py": self.source}, child_command(REPO_ROOT),
                                  request, n_calls, secrets.token_hex(16))

    def measure_performance(self, secret: int) -> None:
        """Time the kernel against the reference (CUDA only, after every case has passed)."""
        base = {"graded": True, "credit": 0.0, "ratio": 0.0}
        if self.load_error is not None or len(self.verdicts) < len(self.plan.trials) or \
                not all(v.passed for v in self.verdicts.values()):
            self.performance = {**base, "reason": "not timed: the kernel must pass every case first"}
            return
        plan = _timing_plan(self.module, self.plan.spec, secret, self.on)
        if plan is None:
            self.performance = {"graded": False, "reason": "not graded: no benchmark case or no "
                                "reference solution in this checkout"}
            return
        child = self._start_child(3)
        self.children += 1
        try:
            self.sandbox.wait_sandbox(child)
            self.performance = self._drive_timing(child, plan)
        finally:
            self.log.append(f"--- timing child: output ---\n{child.log_tail()}")
            child.close()

    def _drive_timing(self, child, plan: timing.TimingPlan) -> dict:
        spec, started, window_ms, event_ms = self.plan.spec, None, None, None
        failed = {"graded": True, "credit": 0.0, "ratio": 0.0}
        deadline = time.monotonic() + self.limits.startup_seconds
        while True:
            try:
                event = child.next_event(deadline)
                kind = (event or {}).get("event")
                if kind == "loaded":
                    child.give(TIMING_INPUTS, wire.dump([{"args": list(args), "kwargs": kwargs}
                                                         for args, kwargs in plan.input_sets]))
                    child.order({"timing": plan.reps}, time.monotonic() + 10)
                    deadline = time.monotonic() + 3 * self.limits.case_seconds
            except ChildEnded as ended:
                return {**failed, "reason": f"the process {ended.how} while being timed"}
            except OSError:
                return {**failed, "reason": "the grader could not hand the timing inputs to the process"}
            if event is None:
                child.kill()
                return {**failed, "reason": f"the timed calls did not finish within {3 * self.limits.case_seconds:g} s"}
            if kind == "timing_start":
                started = event["received_at"]
            elif kind == "timing_error":
                return {**failed, "reason": f"a timed call failed: {event.get('error')}"}
            elif kind == "timing_end" and started is not None:
                window_ms, event_ms = (event["received_at"] - started) * 1e3, event.get("event_ms")
            elif kind == "timing_saved" and window_ms is not None:
                problem = self._timed_outputs_problem(child, plan)
                return timing.verdict(spec, plan, window_ms, event_ms, not problem, problem)
            elif kind in ("load_error", "finished"):
                return {**failed, "reason": "the kernel was not timed (it did not load, or ended early)"}

    def _timed_outputs_problem(self, child, plan: timing.TimingPlan) -> str:
        """Why the last timed call's outputs are unacceptable ("" when they are right)."""
        # The set the last timed call used: the parent knows the loop, the child need not say.
        args, kwargs = plan.input_sets[(plan.reps - 1) % len(plan.input_sets)]
        references = reference_outputs(self.plan.spec, args, kwargs)
        try:
            saved = _fetch(child, TIMED_OUTPUTS, args, kwargs, references)
            outputs = tuple(saved["outputs"])
        except Exception as error:
            return f"the timed outputs could not be read ({type(error).__name__}: {error})"
        problems = compare(self.plan.spec, plan.case, outputs, references)
        return "the outputs of the timed calls were wrong (lazy or side-stream work?)" if problems else ""

    def _drive(self, child, queue: list[Trial], until: float) -> None:
        """Follow the child's events: hand over the next trial each time it is ready, judge each
        call, stop it at the time limits, and once its orders are done, see it exit: its
        verdicts count only if no crash follows them."""
        judged: dict[int, Verdict] = {}
        phase, current, started_at = "starting", None, 0.0
        # The import has its own limit whatever the budget: run() starts a child only where the
        # budget pays for one, and an import that cannot finish is the file's fault.
        budget = _Budget(lambda: self._cpu(child), self.limits.startup_seconds, self.limits.wall_factor)
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
            elif kind == "load_error":
                self.load_error = self._with_limits_hint(str(event.get("message", "")))
                return
            elif (kind == "loaded" and phase == "importing") or \
                    (kind == "done" and current is not None and event.get("trial") == current.id):
                if kind == "done":
                    judged[current.id] = self._judge(child, current, event, time.monotonic() - started_at, judged)
                else:
                    self.import_cpu = max(self.import_cpu, self._cpu(child))
                budget = self._limit(child, self.limits.case_seconds, until)
                if not queue:
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
                phase, budget = "exiting", _Budget(lambda: self._cpu(child), _EXIT_SECONDS, 1.0)

    def _judge(self, child, trial: Trial, done: dict, wall_seconds: float, judged: dict[int, Verdict]) -> Verdict:
        case = self.plan.cases[trial.case_index][0]
        args, kwargs = self.inputs[trial.id]
        earlier = ()
        if trial.repeat:  # the first call's outputs, from this child or an earlier one
            first = next(t for t in self.plan.trials if t.case_index == trial.case_index and not t.repeat)
            found = judged.get(first.id) or self.verdicts.get(first.id) or self.unconfirmed.get(first.id)
            earlier = found.outputs if found else ()
        verdict = judge(self.plan.spec, case, args, kwargs, done,
                        lambda references: _fetch(child, output_name(trial.id), args, kwargs, references),
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

    def _timed_out(self, child, phase: str, current: Trial | None, budget: "_Budget",
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

    def record(self, submission_sha: str, cases_sha: str) -> dict:
        todos = open_todos(self.source.decode(errors="replace"))
        hint = todo_summary(todos)
        rows, counts = [], {"public": [0, 0], "hidden": [0, 0]}
        hidden_number = 0
        for index, (case, visibility) in enumerate(self.plan.cases):
            verdicts = [self.verdicts.get(t.id) for t in self.plan.trials if t.case_index == index]
            if any(v is None for v in verdicts):
                verdict = Verdict(False, "load", "Not run: kernel.py could not be imported (see the message above).")
            else:
                failed = [v for v in verdicts if not v.passed]
                verdict = failed[0] if failed else verdicts[0]
                verdict = Verdict(not failed, verdict.kind, verdict.message, sum(v.seconds for v in verdicts),
                                  crash=verdict.crash)
            if visibility == "hidden":
                hidden_number += 1
                name = f"hidden case {hidden_number}"
                message = hidden_message(verdict, self.api) if not verdict.passed and verdict.kind != "load" \
                    else verdict.message
                if not verdict.passed and todos and verdict.kind != "load":
                    message += " (TODOs are still open in kernel.py.)"
            else:
                name = case.name
                message = verdict.message
                if not verdict.passed and hint and verdict.kind != "load":
                    message += f"\n{hint}"
            counts[visibility][0] += verdict.passed
            counts[visibility][1] += 1
            rows.append({"name": name, "visibility": visibility, "passed": verdict.passed,
                         "kind": "" if verdict.passed else verdict.kind,
                         "message": "" if verdict.passed else message, "seconds": round(verdict.seconds, 3)})
        passed = counts["public"][0] + counts["hidden"][0]
        total = counts["public"][1] + counts["hidden"][1]
        integrity = next(({"violation": row["kind"], "message": _INTEGRITY[row["kind"]]}
                          for row in rows if row["kind"] in _INTEGRITY), None)
        if self.refusal is not None:  # the reasons themselves, for feedback and the tables
            integrity = {"violation": "policy", "message": self.refusal}
            summary = f"No points for this module: {self.refusal}"
        elif integrity is not None:
            summary = f"No points for this module: {integrity['message']}"
        elif self.load_error is not None:
            ran = "no case ran" if not self.verdicts else f"only {len(self.verdicts)} trial(s) ran"
            summary = f"kernel.py could not be imported, so {ran}.\n{self.load_error}"
        elif passed == total:
            summary = f"All {total} cases pass."
        else:
            summary = (f"{passed} of {total} cases pass ({counts['public'][0]}/{counts['public'][1]} public, "
                       f"{counts['hidden'][0]}/{counts['hidden'][1]} hidden).") + (f"\n{hint}" if hint else "")
        note = self._crash_note()
        if note and integrity is None and self.load_error is None:
            summary += f"\n{note}"
        return {
            "record_version": RECORD_VERSION,
            "module": self.module.id,
            "submission_sha256": submission_sha,
            "cases_sha256": cases_sha,
            "device": device.describe(),
            "graded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "summary": summary,
            "load_error": self.load_error,
            "todos": [str(t) for t in todos],
            "cases": rows,
            "totals": {"public": {"passed": counts["public"][0], "total": counts["public"][1]},
                       "hidden": {"passed": counts["hidden"][0], "total": counts["hidden"][1]},
                       "passed": passed, "total": total,
                       "score": round(passed / total, 4) if total and integrity is None else 0.0},
            "integrity": integrity,
            "refusal": self.refusal,
            "performance": self.performance if integrity is None or not self.performance.get("graded") else
            {**self.performance, "credit": 0.0, "reason": "withheld: " + integrity["message"]},
            "note": note,
            "cpu_seconds": {"budget": self.budget, "spent": round(self.cpu_spent, 1)},
            "protections": self.protections,
            "evidence": EVIDENCE["interpreter"] if not device.is_cuda() else
            EVIDENCE["cuda" if self.traced else "cuda-no-trace"],
            "child_processes": self.children,
        }


    def _crash_note(self) -> str | None:
        """What to say of crashes that no case caused alone (each of the cases a crashed child
        ran got its verdict in a fresh process, and none crashed there)."""
        for ended, ran in self.crashes:
            verdicts = [self.verdicts.get(t) for t in ran]
            if all(v is not None and v.kind != "not_run" and v.crash is None for v in verdicts):
                return (f"Note: a process that ran several cases in a row {ended.how}, but each of those cases "
                        "ran again alone in a fresh process without crashing, so none is blamed for it. "
                        f"{crashes.explain(ended.returncode)}").rstrip()
        return None


class _Budget:
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


_timing_plans: dict = {}
_timing_plans_lock = threading.Lock()


def _timing_plan(module: Module, spec: Spec, secret: int, on: torch.device) -> timing.TimingPlan | None:
    """The module's timing inputs and the reference's time, measured once per run and GPU."""
    key = (module.id, str(on))
    with _timing_plans_lock:
        if key not in _timing_plans:
            try:
                reference = load_kernel(module, "solutions").api(spec.api)
            except LoadError:
                _timing_plans[key] = None
            else:
                _timing_plans[key] = timing.plan(spec, reference, secret + 7919, on)
        return _timing_plans[key]


def existing_record(module: Module, source: bytes, results_dir: Path) -> tuple[dict | None, Path]:
    """The record of an earlier run for this file and the course's current cases, if any."""
    submission_sha = _sha256(source)
    path = record_path(results_dir, module, submission_sha, cases_hash(module))
    record = read_record(path)
    return (record if record and record.get("submission_sha256") == submission_sha else None), path


def _grade(module: Module, source: bytes, results_dir: Path, sandbox: Sandbox, secret: int,
           options: Options, stop: threading.Event) -> tuple[dict, Path, int]:
    """Grade one submitted file of one module: (record, its path, child processes started)."""
    submission_sha, cases_sha = _sha256(source), cases_hash(module)
    path = record_path(results_dir, module, submission_sha, cases_sha)
    with sandbox.slot() as slot:
        grading = _Grading(module, source, sandbox, slot, secret, options, stop)
        grading.run()
        if device.is_cuda():
            grading.measure_performance(secret)
    record = grading.record(submission_sha, cases_sha)
    log = results_dir / "logs" / module.track / module.slug / f"{submission_sha}.log"
    write_atomically(log, "\n".join(grading.log) + "\n")
    write_atomically(path, json.dumps(record, indent=1) + "\n")
    return record, path, grading.children


# ----------------------------------------------------------------------------------------------
# The whole run
# ----------------------------------------------------------------------------------------------


def default_workers() -> int:
    if device.is_cuda():
        return max(1, torch.cuda.device_count())
    return max(1, min(4, os.cpu_count() or 1))


def make_sandbox(options: Options, results_dir: Path, extra_hide: tuple = ()) -> Sandbox:
    workers = options.workers or default_workers()
    gpus = list(range(torch.cuda.device_count())) if device.is_cuda() else None
    return Sandbox(limits=options.limits, workers=workers, gpus=gpus, cuda=device.is_cuda(),
                   hide=[results_dir, *extra_hide, *options.hide], expose=list(options.expose),
                   allow_unsafe=options.allow_unsafe)


def grade_submission(module: Module, kernel_file: Path, results_dir: Path, options: Options | None = None,
                     sandbox: Sandbox | None = None) -> Outcome:
    """Read, or if missing produce, the record of one submitted kernel.py (for the record phase)."""
    options = options or Options(workers=1)
    results_dir, kernel_file = Path(results_dir).resolve(), Path(kernel_file)
    outcome = Outcome([Submission(kernel_file.parent.name, module, kernel_file)])
    source = _source(kernel_file)
    outcome.record, outcome.record_path = existing_record(module, source, results_dir)
    if outcome.record is not None:
        outcome.reused = True
        return outcome
    own = sandbox is None
    sandbox = sandbox or make_sandbox(options, results_dir, (kernel_file.resolve().parent,))
    try:
        sandbox.probe()
        outcome.record, outcome.record_path, outcome.children = _grade(
            module, source, results_dir, sandbox, secrets.randbits(48), options, threading.Event())
        return outcome
    finally:
        if own:
            sandbox.close()


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.total, self.done, self.enabled = total, 0, enabled
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="submission", file=sys.stderr)
            except ImportError:
                pass

    def step(self, text: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(text[:60], refresh=False)
            self.bar.update(1)
        elif self.enabled:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _update_index(results_dir: Path, outcomes: list[Outcome]) -> None:
    path = results_dir / "students.json"
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError):
        index = {}
    for outcome in outcomes:
        for submission in outcome.submissions:
            entry = index.setdefault(submission.student, {})
            if outcome.record is None:
                entry[submission.module.id] = {"error": outcome.error}
                continue
            totals = outcome.record["totals"]
            entry[submission.module.id] = {"record": str(outcome.record_path.relative_to(results_dir)),
                                           "passed": totals["passed"], "total": totals["total"]}
    write_atomically(path, json.dumps(index, indent=1, sort_keys=True) + "\n")


def run(submissions_root: Path, results_dir: Path, modules: list[Module] | None = None,
        options: Options | None = None, progress: bool = True) -> RunSummary:
    """Grade every submission under ``submissions_root``; records go to ``results_dir``."""
    options = options or Options()
    submissions_root, results_dir = Path(submissions_root).resolve(), Path(results_dir).resolve()
    modules = [m for m in (modules or available_modules()) if m.api]
    found = find_submissions(submissions_root, modules)

    # One job per distinct (module, file): identical submissions are graded once.
    jobs: dict[tuple[str, str], Outcome] = {}
    sources: dict[tuple[str, str], bytes] = {}
    outcomes: list[Outcome] = []
    for submission in found:
        try:
            source = _source(submission.path)
        except (OSError, ValueError) as error:
            outcomes.append(Outcome([submission], error=str(error)))
            continue
        key = (submission.module.id, _sha256(source))
        if key not in jobs:
            jobs[key] = Outcome([])
            sources[key] = source
        jobs[key].submissions.append(submission)
    outcomes += jobs.values()

    results_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(results_dir)
    progress_bar = _Progress(len(jobs), progress)
    pending = []
    for key, outcome in jobs.items():  # records of earlier runs: no process needed
        outcome.record, outcome.record_path = existing_record(outcome.submissions[0].module, sources[key], results_dir)
        if outcome.record is not None:
            outcome.reused = True
            progress_bar.step(_status(outcome))
        else:
            pending.append(key)

    protections: dict = {}
    try:
        if pending:
            protections = _grade_pending(pending, jobs, sources, results_dir, submissions_root, options, progress_bar)
    finally:
        progress_bar.close()
        _update_index(results_dir, [o for o in outcomes if o.record is not None or o.error])
    return RunSummary(outcomes, results_dir, protections)


def _status(outcome: Outcome) -> str:
    who = ", ".join(s.student for s in outcome.submissions)
    module_id = outcome.submissions[0].module.id
    if outcome.error:
        return f"{who} {module_id}: ERROR {outcome.error.splitlines()[0]}"
    totals, integrity = outcome.record["totals"], outcome.record.get("integrity")
    cheated = f", no points: {integrity['violation']}" if integrity else ""
    return f"{who} {module_id}: {totals['passed']}/{totals['total']}{cheated}" + (" (reused)" if outcome.reused else "")


def _grade_pending(pending: list, jobs: dict, sources: dict, results_dir: Path, submissions_root: Path,
                   options: Options, progress_bar: _Progress) -> dict:
    """Grade the jobs without a record, in parallel; return the sandbox's protections."""
    secret = secrets.randbits(48)
    stop = threading.Event()
    sandbox = make_sandbox(options, results_dir, (submissions_root,))
    try:
        protections = sandbox.probe()

        def work(key):
            outcome = jobs[key]
            try:
                outcome.record, outcome.record_path, outcome.children = _grade(
                    outcome.submissions[0].module, sources[key], results_dir, sandbox, secret, options, stop)
            except (Cancelled, UnsafeSandbox):
                raise
            except Exception as error:  # the grader's own failure: report it, write no record
                outcome.error = f"{type(error).__name__}: {error}"
            return outcome

        with ThreadPoolExecutor(max_workers=options.workers or default_workers()) as pool:
            futures = [pool.submit(work, key) for key in pending]
            try:
                for future in as_completed(futures):
                    progress_bar.step(_status(future.result()))
            except BaseException:
                stop.set()  # workers stop their children within a second and write nothing
                for future in futures:
                    future.cancel()
                raise
        return protections
    finally:
        sandbox.close()
