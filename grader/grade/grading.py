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

``Grading`` keeps the state and decides which child runs which trials; ``grader.grade.driving``
runs one child, ``grader.grade.endings`` reads its ending, ``grader.grade.budget`` holds the limits.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from grader.core import device
from grader.core.cases import specs_of
from grader.core.catalog import REPO_ROOT, Module
from grader.core.checks import build_inputs
from grader.grade import gpu_memory, leases, results, timing
from grader.grade.budget import budget_spent
from grader.grade.driving import Cancelled, ChildRun
from grader.grade.judging import Verdict
from grader.grade.ledger import Ledger
from grader.grade.plan import Options, plan
from grader.grade.profile import Profile
from grader.grade.store import cases_hash, sha256
from grader.sandbox.child import command as child_command
from grader.sandbox.isolation import Sandbox


class Grading:
    """One (module, submission) grading across its child processes: its ``plan`` (read-only),
    its ``ledger`` (what happened), and what it runs on (the sandbox's slot, the GPU's lease and
    memory, the inputs built for its trials)."""

    def __init__(
        self,
        module: Module,
        source: bytes,
        sandbox: Sandbox,
        slot,
        secret: int,
        options: Options,
        stop: threading.Event,
        profile: Profile | None = None,
    ):
        self.profile = profile or Profile()
        with self.profile.step("planning"):
            self.plan = plan(module, source, secret, options)
        self.ledger = Ledger(self.plan)
        self.sandbox, self.slot, self.options, self.stop = sandbox, slot, options, stop
        self.lease = leases.for_gpu(slot.gpu)
        # On a GPU every child's memory cap is reserved in the GPU's ledger first (grader.grade.gpu_memory).
        self.memory = gpu_memory.for_gpu(slot.gpu or 0, options.gpu_memory_fraction) if device.is_cuda() else None
        self.child_cap: int | None = None  # bytes of GPU memory each child may allocate, while reserved
        # On a GPU the children of this grading share Triton's cache: each kernel compiles once.
        self.shared = sandbox.new_shared(slot) if device.is_cuda() else None
        self.on = torch.device(f"cuda:{slot.gpu or 0}") if device.is_cuda() else torch.device("cpu")
        # Where a wrong output is analysed: on the GPU, in a part of the grader's own share of it.
        self.room = gpu_memory.diagnosis_room(slot.gpu or 0, options.gpu_memory_fraction) if device.is_cuda() else None
        # On a GPU, input building waits while a kernel is timed (the GPU is the timing's alone).
        with self.lease.shared(), self.profile.step("inputs"):
            self.inputs = {
                t.id: build_inputs(self.plan.spec, self.plan.cases[t.case_index][0], t.secret, on=self.on)
                for t in self.plan.trials
            }

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
        if self.plan.refusal is not None:
            for trial in self.plan.trials:
                self.ledger.verdicts[trial.id] = Verdict(
                    False, "policy", "Not run: the grader refused kernel.py before running it."
                )
            return
        with self.reserving(self.correctness_cap(), 2 if self._side_by_side() else 1):
            self._run_cases()

    def correctness_cap(self) -> int:
        """The GPU memory each correctness child may allocate (0 without a GPU)."""
        if self.memory is None:
            return 0
        return gpu_memory.correctness_cap(
            self.memory, self.sandbox.slots_on(self.slot.gpu), 2 if self._side_by_side() else 1
        )

    def reserving(self, per_child: int, children: int):
        """Reserve GPU memory for ``children`` children of ``per_child`` bytes each, the cap of
        every child started meanwhile (nothing to reserve without a GPU)."""
        if self.memory is None:
            return contextlib.nullcontext()
        return self._reserved(per_child, children)

    @contextlib.contextmanager
    def _reserved(self, per_child: int, children: int):
        waiting = time.monotonic()
        with self.memory.reserve(per_child * children):
            waited = time.monotonic() - waiting
            self.profile.add("waiting", waited)
            self.profile.add("memory wait", waited)
            self.child_cap = per_child
            try:
                yield
            finally:
                self.child_cap = None

    def _run_cases(self) -> None:
        plan, ledger = self.plan, self.ledger
        ledger.wall_end = time.monotonic() + plan.budget * plan.limits.wall_factor
        public = sum(plan.visibility(t) == "public" for t in plan.trials)
        share = ledger.public_share = plan.budget * public / max(1, len(plan.trials))
        if not self._side_by_side():
            self._run_public(share)
            self._run_visibility("hidden", plan.budget)
            return
        # The hidden children run beside the public ones; the public ones still spend at most
        # their share, so the hidden cases keep theirs.
        failure: list[BaseException] = []

        def hidden() -> None:
            try:
                self._run_visibility("hidden", plan.budget)
            except BaseException as error:  # Cancelled, SandboxError: raised again below
                failure.append(error)

        beside = threading.Thread(target=hidden, name=f"hidden cases of {plan.module.id}", daemon=True)
        beside.start()
        try:
            self._run_public(share)
        finally:
            beside.join()
        if failure:
            raise failure[0]

    def _run_public(self, share: float) -> None:
        try:
            self._run_visibility("public", share)
        finally:
            self.ledger.public_ended()

    def _side_by_side(self) -> bool:
        """Whether the public and hidden children run at the same time (``Options.side_by_side``;
        by default on a GPU, where most of a child's time is compiling, one kernel at a time).
        Both run under the grading's uid, so only where each has its own PID namespace: killing
        one must not touch the other."""
        wanted = self.options.side_by_side
        if wanted is None:
            wanted = device.is_cuda()
        return bool(wanted) and bool(self.sandbox.probe().get("pid_namespace"))

    def _run_visibility(self, visibility: str, until: float) -> None:
        """Run the pending trials of one visibility, child after child, while the budget lasts."""
        ledger = self.ledger
        while (waiting := ledger.pending(visibility)) and ledger.load_error is None:
            if self.stop.is_set():
                raise Cancelled()
            if ledger.spent(visibility) + ledger.import_cpu >= until or time.monotonic() >= ledger.wall_end:
                for trial in waiting:
                    ledger.verdicts[trial.id] = Verdict(
                        False,
                        "not_run",
                        budget_spent(self.plan.budget, visibility, until, trial.id in ledger.unconfirmed),
                    )
                break
            suspects = [t for t in waiting if t.id in ledger.unconfirmed]
            ChildRun(self, suspects[:1] or waiting[: ledger.batch], visibility, until).run()

    def start_child(
        self,
        n_calls: int,
        timed: bool = False,
        source: bytes | None = None,
        file_bytes: int | None = None,
        api: str | None = None,
        disk_bytes: int | None = None,
        held_bytes: int = 0,
    ):
        """A sandboxed child holding only the submission; inputs come later, one call at a time.
        Only a ``timed`` child autotunes, and it has the GPU to itself (``grader.grade.leases``).
        On a GPU it may allocate what the grading has reserved per child (``reserving``).
        ``source``: another file to run instead (the reference solution, timed the way the
        submission is), with a Triton cache of its own. ``file_bytes``: a larger file-size limit
        than the run's (a timed child saves benchmark-sized calls), and ``disk_bytes`` a larger
        working folder (the timing inputs handed to it and what it saves); ``held_bytes`` of host
        memory beyond the usual limit (it reads its inputs from a file before they go to the GPU).
        ``api``: the function a timed
        child times (default: the module's main one; a module's part times its own).

        On a GPU the child counts as off the GPU (``leases.GpuLease.leave``) until it has
        imported torch and Triton, and waits for ``let_in`` before it touches the GPU: a timing
        does not wait for a child that is only starting."""
        specs = specs_of(self.plan.spec, [case for case, _ in self.plan.cases])
        request = {
            "module": self.plan.module.id,
            "api": api or self.plan.api,
            "apis": [spec.api for spec in specs],
            "kernel": "kernel.py",
            "gpu_memory_fraction": self._memory_fraction(),
            "autotune": timed,
            "allowed_ops": sorted(set().union(*(spec.allowed_ops for spec in specs))),
            # A timed child's compiling happens before it has the GPU alone; the others'
            # lets timings go ahead (grader.grade.leases).
            "gate_compiles": not timed,
            "gate_start": self.on.type == "cuda",
        }
        limits = replace(
            self.plan.limits,
            file_bytes=max(self.plan.limits.file_bytes, file_bytes or 0),
            disk_bytes=max(self.plan.limits.disk_bytes, disk_bytes or 0),
        )
        if held_bytes:
            limits = replace(limits, memory_bytes=self.sandbox.memory_bytes(limits) + held_bytes)
        child = self.sandbox.start(
            self.slot,
            {"kernel.py": source or self.plan.source},
            child_command(REPO_ROOT),
            request,
            n_calls,
            secrets.token_hex(16),
            limits=limits,
            shared=self.shared if source is None else None,
        )
        if self.on.type == "cuda":
            self.lease.leave(child, child.pause, child.resume)
        return child

    def _memory_fraction(self) -> float | None:
        if self.memory is None:
            return None
        if self.child_cap is None:
            raise RuntimeError("a child was started on a GPU without GPU memory reserved for it")
        return gpu_memory.fraction_of(self.child_cap, self.slot.gpu or 0)

    def let_in(self, child) -> float:
        """A child off the GPU (started by ``start_child`` and done importing, or done compiling)
        waits for its go: once no timing has or waits for the GPU, it shares the GPU again and is
        told to go on. The seconds it waited."""
        if self.on.type != "cuda":
            return 0.0
        waited = self.lease.rejoin(child)
        child.order({"go": True}, time.monotonic() + 30)
        return waited


@dataclass
class Graded:
    """What grading one file of one module produced; ``grader.grade.store.keep`` writes it."""

    record: dict
    log: str  # what the children printed, for instructors only
    children: int  # sandboxed processes started
    profile: Profile
    record_path: Path | None = None  # where it was kept


def grade_one(
    module: Module, source: bytes, sandbox: Sandbox, secret: int, options: Options, stop: threading.Event
) -> Graded:
    """Grade one submitted file of one module: its record and log, not yet written anywhere."""
    started = time.monotonic()
    profile = Profile()
    with sandbox.slot() as slot:
        profile.add("waiting", time.monotonic() - started)
        grading = Grading(module, source, sandbox, slot, secret, options, stop, profile)
        try:
            grading.run()
            if device.is_cuda():
                grading.ledger.performance = timing.measure_parts(grading, secret)
        finally:
            if grading.shared is not None:
                with profile.step("closing"):
                    sandbox.remove_shared(grading.shared)
    with profile.step("record"):
        record = results.build(grading.plan, grading.ledger, sha256(source), cases_hash(module))
    profile.close(time.monotonic() - started)
    return Graded(record, "\n".join(grading.ledger.log) + "\n", grading.ledger.children, profile)


def default_workers(options: Options | None = None) -> int:
    """Gradings at a time: ``children_per_gpu`` per GPU on CUDA, else one per CPU core (at most 4)."""
    if device.is_cuda():
        return max(1, torch.cuda.device_count()) * max(1, (options or Options()).children_per_gpu)
    return max(1, min(4, os.cpu_count() or 1))


def make_sandbox(options: Options, results_dir: Path, extra_hide: tuple = (), gpus: list[int] | None = None) -> Sandbox:
    """The sandbox for ``options``, its children blind to ``results_dir`` and ``extra_hide``;
    its slots spread over ``gpus`` (default: every GPU this process sees, on CUDA)."""
    workers = options.workers or default_workers(options)
    if gpus is None and device.is_cuda():
        gpus = list(range(torch.cuda.device_count()))
    return Sandbox(
        limits=options.limits,
        workers=workers,
        gpus=gpus,
        cuda=device.is_cuda(),
        hide=[results_dir, *extra_hide, *options.hide],
        expose=list(options.expose),
        allow_unsafe=options.allow_unsafe,
    )
