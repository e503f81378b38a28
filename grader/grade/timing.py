"""Performance grading for the run phase (CUDA only): the learner's kernel and the reference
solution each timed in a sandboxed child, by the same method.

Both are timed on the same inputs (the module's first benchmark case, drawn from the run's secret
seed), on the same GPU, in the same run, with the GPU alone; the reference once per run and GPU.
The grade uses the parent's own wall clock around the child's timed loop (the fastest of a few
windows), so a submission that patches timers, ``do_bench`` or ``torch.cuda.Event`` changes
nothing; the child's event timing is only recorded beside it as a cross-check. What is timed is
what was judged: the last outputs of every input set are checked against the reference (lazy or
side-stream work cannot pass), and the timed calls are held to the kernel trace of a judged call
on fresh inputs made right after them (``grader.grade.timed_work``). Correctness must be perfect
before speed is graded at all.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import torch

from grader.core import device
from grader.core.cases import Case, Spec
from grader.core.checks import build_inputs, compare, reference_outputs
from grader.core.loading import kernel_path
from grader.core.protocols import order_of, tensors_in
from grader.grade import gpu_memory
from grader.grade.host_memory import JUDGING
from grader.grade.judging import INTEGRITY, fetch, judge
from grader.grade.profile import claimed_seconds
from grader.grade.scoring import credit
from grader.grade.timed_work import own_gpu_us, windows_work_problem
from grader.sandbox import wire
from grader.sandbox.child import TIMED_OUTPUTS, TIMING_INPUTS, input_name, output_name
from grader.sandbox.isolation import ChildEnded

TARGET_WINDOW_SECONDS = 0.2  # long enough that launch jitter and pipe latency do not matter
_reference_lock = threading.Lock()


@dataclass
class TimingInputs:
    case: Case
    input_sets: list  # [(args, kwargs)], rotated so that repeated calls do not hit in the L2 cache
    audit: tuple | None = None  # (args, kwargs) the timed child first sees after its timed calls


# The trial number of the audit call, out of the range of the cases' trials.
AUDIT_TRIAL = 1 << 30


@dataclass
class TimingPlan(TimingInputs):
    reps: int = 0
    reference_ms: float = 0.0


def rotated_inputs(spec: Spec, case: Case, secret: int, on: torch.device) -> list:
    first = build_inputs(spec, case, secret, on=on)
    size = sum(t.numel() * t.element_size() for t in first[0] if isinstance(t, torch.Tensor))
    l2 = torch.cuda.get_device_properties(on).L2_cache_size
    count = max(1, min(8, math.ceil(2 * l2 / max(size, 1))))
    return [first] + [build_inputs(spec, case, secret + k, on=on) for k in range(1, count)]


def loop_ms(fn, input_sets: list, reps: int) -> float:
    """Wall-clock milliseconds per call of ``reps`` calls, rotating over the input sets."""
    for args, kwargs in input_sets:  # compile and warm up outside the timed region
        fn(*args, **kwargs)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(reps):
        args, kwargs = input_sets[i % len(input_sets)]
        fn(*args, **kwargs)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3 / reps


def reps_for(probe_ms: float) -> int:
    """Calls in a timed window of about ``TARGET_WINDOW_SECONDS``, from one call's time."""
    return max(10, min(2000, math.ceil(TARGET_WINDOW_SECONDS * 1e3 / max(probe_ms, 1e-3))))


def time_reference(inputs: TimingInputs, reference_fn, on: torch.device) -> TimingPlan:
    """The repetitions for ``inputs`` and the reference's time on them, in this process (the GPU
    must be idle). The run phase times the reference in a child instead (``measure``)."""
    with _reference_lock, torch.cuda.device(on):
        reps = reps_for(loop_ms(reference_fn, inputs.input_sets, 3))
        reference_ms = loop_ms(reference_fn, inputs.input_sets, reps)
    return TimingPlan(inputs.case, inputs.input_sets, inputs.audit, reps=reps, reference_ms=reference_ms)


def verdict(
    spec: Spec, timing: TimingPlan, window_ms: float, child_event_ms: float | None, outputs_ok: bool, problem: str = ""
) -> dict:
    """The record's performance entry from the parent's measurement of the child's loop."""
    learner_ms = window_ms / timing.reps
    base = {
        "case": timing.case.name,
        "device": device.describe(),
        "reps": timing.reps,
        "reference_ms": round(timing.reference_ms, 4),
        "threshold": spec.learner_threshold,
        "floor": round(spec.floor, 4),
    }
    if not outputs_ok:
        return {
            **base,
            "graded": True,
            "credit": 0.0,
            "ratio": 0.0,
            "reason": problem or "the outputs of the timed calls were wrong",
        }
    ratio = timing.reference_ms / learner_ms
    entry = {
        **base,
        "graded": True,
        "learner_ms": round(learner_ms, 4),
        "ratio": round(ratio, 4),
        "credit": credit(ratio, spec.learner_threshold, spec.floor),
        "reason": f"{ratio:.2f} x the reference's speed (full credit from {spec.learner_threshold:.2f} x)",
    }
    if child_event_ms is not None:
        entry["child_reported_ms"] = round(child_event_ms / timing.reps, 4)
        if child_event_ms / timing.reps > 1.2 * learner_ms:  # device time cannot exceed wall time
            entry["warning"] = "the child's own timers disagree with the grader's clock"
    return entry


# ----------------------------------------------------------------------------------------------
# Timing a submission in its child
# ----------------------------------------------------------------------------------------------


def measure_parts(grading, secret: int) -> dict:
    """The performance entry of ``grading``'s record: ``measure`` for a module of one part; for a
    module of several (``cases.Part``), each part timed on its own function and the entries
    combined (``combined``)."""
    parts = grading.plan.parts
    if len(parts) <= 1:
        return measure(grading, secret)
    return combined(parts, {part.name: measure(grading, secret, part) for part in parts})


def combined(parts, entries: dict) -> dict:
    """One performance entry for a module of several parts, each part's entry kept under
    ``parts``: its credit the parts' credits weighted as their points, its ratio their geometric
    mean. Graded only when every part was (what was left out is not counted as failed); an
    integrity finding of any part is the module's."""
    weights = {part.name: part.weight for part in parts}
    entry = {"parts": entries, "weights": weights}
    found = next((e["integrity"] for e in entries.values() if e.get("integrity")), None)
    if found:
        entry["integrity"] = found
    notes = [f"{name}: {e['warning']}" for name, e in entries.items() if e.get("warning")]
    if notes:
        entry["warning"] = "; ".join(notes)
    ungraded = [name for name, part_entry in entries.items() if not part_entry.get("graded")]
    if ungraded:
        first = entries[ungraded[0]]
        return {**entry, "graded": False, "reason": first.get("reason") or "not graded"}
    total = sum(weights.values())
    credit_share = sum(weights[name] * float(e.get("credit") or 0.0) for name, e in entries.items()) / total
    ratios = [float(e.get("ratio") or 0.0) for e in entries.values()]
    ratio = 0.0 if min(ratios) <= 0 else math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    reason = "; ".join(f"{name}: {e.get('reason') or 'timed'}" for name, e in entries.items())
    return {**entry, "graded": True, "credit": round(credit_share, 4), "ratio": round(ratio, 4), "reason": reason}


def measure(grading, secret: int, part=None) -> dict:
    """The performance entry of ``grading``'s record (or of one of its module's parts, ``part``):
    its kernel timed in a fresh child against the reference (CUDA only, after every case of the
    part has passed).

    The child starts and imports the submission while sharing the GPU like a correctness child,
    then is frozen (``Child.pause``) until the GPU is this grading's alone: its start-up costs
    no exclusive GPU time, and nothing of it runs while another grading is timed. The reference
    solution is timed the same way, in a child of its own, once per run and GPU: in the grader's
    process it would run beside the threads of other gradings (judging, building inputs) and
    share their interpreter lock, and its time would depend on how busy they were."""
    target = _Target(grading, part.timed if part is not None else grading.plan.spec, part.name if part else "")
    if grading.ledger.load_error is not None or not _every_case_passed(grading, part):
        where = f"of the {part.name} part " if part is not None else ""
        return _failed(f"not timed: the kernel must pass every case {where}first")
    if not target.spec.bench_cases:
        return NOT_TIMED
    waiting = time.monotonic()
    with grading.lease.shared():
        grading.profile.add("waiting", time.monotonic() - waiting)
        with grading.profile.step("timing start"):
            inputs = _inputs_for(target, secret, grading.on)
    # The GPU memory of both timed children (the reference's only while this GPU still needs its
    # time), reserved before the lease is waited for (grader.grade.gpu_memory).
    children = 2 if _plan_wanted(target) else 1
    with grading.reserving(_timed_cap(grading, inputs), children):
        return _measure(target, inputs)


@dataclass(frozen=True)
class _Target:
    """What one timing is of: a grading, the Spec whose first benchmark case it times (the
    module's, or a part's), and the part's name ("" for the whole module), which keys the timing
    inputs and the reference's time."""

    grading: object  # a grader.grade.grading.Grading
    spec: Spec
    part: str

    @property
    def key(self) -> tuple:
        return (self.grading.plan.module.id, self.part, str(self.grading.on))


def _every_case_passed(grading, part) -> bool:
    """Whether every case (of ``part``, when given) has a verdict and passed."""
    trials = [t for t in grading.plan.trials if part is None or grading.plan.part_of(t.id).name == part.name]
    return all(t.id in grading.ledger.verdicts and grading.ledger.verdicts[t.id].passed for t in trials)


def _timed_cap(grading, inputs: TimingInputs) -> int:
    """The GPU memory a timed child of ``grading`` may allocate for ``inputs`` (0 on a CPU)."""
    if grading.memory is None:
        return 0
    return gpu_memory.timed_cap(grading.memory, _bytes_of(inputs.input_sets, inputs.audit), grading.correctness_cap())


def _bytes_of(*values) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors_in(values))


def _measure(target: _Target, inputs: TimingInputs) -> dict:
    """``_timed``, and a note in the entry when the timing began on a GPU that the driver still
    reported busy after the lease's wait (``leases.IDLE_LIMIT_SECONDS``): other work may have
    slowed it. Such a timing still counts (making the GPU busy must not buy a way out of the speed
    bar); the note tells the instructor to regrade once the GPU is free."""
    busy: list = []
    entry = _timed(target, inputs, busy)
    if busy and entry.get("graded"):
        entry = {
            **entry,
            "gpu_busy_at_start": busy[0].last_percent,
            "warning": f"the GPU was still {busy[0].last_percent}% busy with other work when this timing began "
            "(another program on it?); regrade once it is free",
        }
    return entry


def _timed(target: _Target, inputs: TimingInputs, busy: list) -> dict:
    grading = target.grading
    child = reference = None
    try:
        waiting = time.monotonic()
        with grading.lease.shared():
            grading.profile.add("waiting", time.monotonic() - waiting)
            with grading.profile.step("timing start"):
                child = _started(target, inputs)
                if isinstance(child, dict):
                    return child
                if _plan_wanted(target):
                    reference = _reference_child(target, inputs)
            child.pause()
            if reference is not None:
                reference.pause()
        waiting = time.monotonic()
        with grading.lease.exclusive() as alone:
            if alone.idle is False:
                busy.append(alone)
            waited = time.monotonic() - waiting
            grading.profile.add("waiting", waited)
            grading.profile.add("alone wait", waited)
            with grading.profile.step("reference timing"):
                plan = _plan_for(target, inputs, reference)
            if plan is None:
                return NOT_TIMED
            child.resume()
            with grading.profile.step("learner timing"):
                window = _timed_window(target, child, plan.reps, retune=True, save=True)
                # The saved outputs and the audit call, with the GPU still alone: the audit's GPU
                # time is compared with the timed calls', and nothing of this child may still run
                # on the GPU once another grading has it.
                failure = window if isinstance(window, dict) else _saved(grading, child)
                audit = failure or _audit_call(target, child, inputs)
            child.pause()
        if failure is not None:
            return failure
        if "graded" in audit:
            return audit
        # Checking needs no GPU alone (the child, frozen, is not resumed): another grading may
        # be timed meanwhile.
        waiting = time.monotonic()
        with grading.lease.shared():
            grading.profile.add("waiting", time.monotonic() - waiting)
            with grading.profile.step("timed check"):
                return _checked(target, child, plan, window, audit, inputs)
    finally:
        with grading.profile.step("closing"):
            for process, whose in ((child, "timing child"), (reference, "reference's timing child")):
                if process is not None and not isinstance(process, dict):
                    grading.ledger.log.append(f"--- {whose}: output ---\n{process.log_tail()}")
                    grading.lease.forget(process)
                    process.close()


def _started(target: _Target, inputs: TimingInputs, source: bytes | None = None):
    """A timed child of ``source`` (default: the submission), its file imported and the timing
    inputs on the GPU; else the record's performance entry saying why not."""
    grading = target.grading
    # Its file of timing inputs is read whole and parsed into tensors before they go to the GPU:
    # for an optimizer's step over a model (4 GB of state per set) more than the usual host limit.
    child = grading.start_child(
        3,
        timed=True,
        source=source,
        file_bytes=saved_file_bytes(inputs),
        disk_bytes=working_folder_bytes(inputs),
        api=target.spec.api,
        held_bytes=3 * _bytes_of(inputs.input_sets, inputs.audit),
    )
    grading.ledger.child_started()
    grading.sandbox.wait_sandbox(child)
    failure = _until_loaded(grading, child) or _hand_inputs(grading, child, inputs) or _warm_up(target, child)
    if failure is not None:
        grading.ledger.log.append(f"--- timed child that could not start: output ---\n{child.log_tail()}")
        grading.lease.forget(child)
        child.close()
        return failure
    return child


def saved_file_bytes(inputs: TimingInputs) -> int:
    """A file-size limit for a timed child that fits what it saves: the audit call's inputs after
    the call and its outputs (each at most a few times the inputs' size), and the last outputs of
    every input set."""
    return 4 * _bytes_of(inputs.audit) + 2 * _bytes_of(inputs.input_sets) + (64 << 20)


def working_folder_bytes(inputs: TimingInputs) -> int:
    """What a timed child's working folder must hold: the timing inputs and the audit call's
    inputs handed to it as files, and everything it saves (``saved_file_bytes``). An optimizer's
    step over a model's parameters passes the default 4 GiB."""
    return saved_file_bytes(inputs) + _bytes_of(inputs.input_sets, inputs.audit)


def _reference_child(target: _Target, inputs: TimingInputs):
    """The reference solution in a timed child, ready like the submission's; None without a
    reference solution in this checkout. A reference that cannot be timed is the course's fault:
    an error of the grader, not a student's zero."""
    try:
        source = kernel_path(target.grading.plan.module, "solutions").read_bytes()
    except OSError:
        return None
    child = _started(target, inputs, source)
    if isinstance(child, dict):
        raise RuntimeError(
            f"the reference solution of {target.grading.plan.module.id} could not be timed: {child['reason']}"
        )
    return child


NOT_TIMED = {"graded": False, "reason": "not graded: no benchmark case or no reference solution in this checkout"}


def _failed(reason: str) -> dict:
    """A performance entry with no credit, saying why."""
    return {"graded": True, "credit": 0.0, "ratio": 0.0, "reason": reason}


def _ended(ended: ChildEnded) -> dict:
    return _failed(f"the process {ended.how} while being timed")


def _hand_inputs(grading, child, inputs: TimingInputs) -> dict | None:
    """Give the timed child its inputs, and wait until it holds them on the GPU."""
    try:
        # Streamed into the file: several sets beyond the L2 cache, for each timed child at once.
        sets = [{"args": list(args), "kwargs": kwargs} for args, kwargs in inputs.input_sets]
        child.give(TIMING_INPUTS, lambda handle: wire.write(sets, handle))
        child.order({"timing_inputs": True}, time.monotonic() + 10)
    except ChildEnded as ended:
        return _ended(ended)
    except OSError:
        return _failed("the grader could not hand the timing inputs to the process")
    return _until_loaded(grading, child, "timing_inputs_loaded")


def _until_loaded(grading, child, awaited: str = "loaded") -> dict | None:
    """Wait for the timed child's ``awaited`` event (the submission imported, the inputs held):
    None once it came, else the record's performance entry saying why it could not be timed."""
    deadline = time.monotonic() + grading.plan.limits.startup_seconds
    step = "import kernel.py" if awaited == "loaded" else "load its timing inputs"
    late = (
        f"the timed process did not {step} within {grading.plan.limits.startup_seconds:g} s "
        "(time spent at import, in kernel.py's top-level code, counts here)"
    )
    while True:
        event, failure = _next_event(child, deadline, late)
        if failure is not None:
            return failure
        kind = event.get("event")
        if kind == awaited:
            return None
        if kind == "started":  # imported torch and Triton, off the GPU: it may use it from now on
            try:
                grading.let_in(child)
            except ChildEnded as ended:
                return _ended(ended)
        if kind in ("load_error", "finished"):
            return _failed("the kernel was not timed (it did not load, or ended early)")


def _warm_up(target: _Target, child) -> dict | None:
    """Have the timed child call the kernel once on the timing inputs while it still shares the
    GPU: its compiling (and a first, untrusted tuning) then costs no exclusive time. What the call
    returns is not judged; a call that fails fails again when timed, which says why."""
    grading, spec = target.grading, target.spec
    failure = _order(child, {"warm_up": True, "call": order_of(spec.protocol, spec.mutates)})
    if failure is not None:
        return failure
    seconds = 3 * grading.plan.limits.case_seconds
    event, failure = _until(
        child,
        seconds,
        "warmed_up",
        ("finished",),
        lambda _: _failed("the kernel was not timed (it ended early)"),
        f"the first call on the benchmark inputs did not finish "
        f"within {seconds:g} s; time your kernel on the module's benchmark case with `make bench` on a GPU",
    )
    if failure is None and event.get("error"):
        grading.ledger.log.append(f"warm-up before timing failed: {str(event['error'])[:300]}")
    return failure


def _order(child, order: dict) -> dict | None:
    """Give the timed child ``order``: None, or the performance entry saying why it could not."""
    try:
        child.order(order, time.monotonic() + 10)
    except ChildEnded as ended:
        return _ended(ended)
    return None


def _until(child, seconds: float, wanted: str, ends: tuple, ended, late: str) -> tuple[dict | None, dict | None]:
    """(the timed child's ``wanted`` event, None), or (None, the performance entry saying why
    not: ``ended(event)`` for an event in ``ends`` that came first, or ``late`` after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        event, failure = _next_event(child, deadline, late)
        if failure is not None:
            return None, failure
        if event.get("event") == wanted:
            return event, None
        if event.get("event") in ends:
            return None, ended(event)


def _next_event(child, deadline: float, late: str) -> tuple[dict | None, dict | None]:
    """(the timed child's next event, None), or (None, the performance entry saying why there is
    none: the child ended, or ``late``, what it did not finish by ``deadline``, and is killed)."""
    try:
        event = child.next_event(deadline)
    except ChildEnded as ended:
        return None, _ended(ended)
    if event is None:
        child.kill()
        return None, _failed(late)
    return event, None


def _saved(grading, child) -> dict | None:
    """None once the child has saved the timed outputs; else the performance entry saying why not."""

    def unsaved(event: dict) -> dict:
        why = f": {event['error']}" if event.get("error") else " (the process ended)"
        return _failed(
            f"the timed outputs could not be saved{why}. Return plain torch.Tensor outputs; "
            "`make bench` on a GPU runs the same calls"
        )

    late = (
        f"the timed outputs were not saved within {grading.plan.limits.case_seconds:g} s of the timed "
        "calls' end; check with `make bench` on a GPU that your function returns promptly"
    )
    _, failure = _until(
        child, grading.plan.limits.case_seconds, "timing_saved", ("timing_error", "finished"), unsaved, late
    )
    return failure


def _audit_call(target: _Target, child, inputs: TimingInputs) -> dict:
    """One more call, on inputs the child receives only now, made like a graded case (watched,
    traced, its inputs checked afterwards): the child's report of it, else the performance entry
    saying why there is none."""
    grading, spec = target.grading, target.spec
    args, kwargs = inputs.audit
    try:
        child.give(input_name(AUDIT_TRIAL), lambda handle: wire.write({"args": list(args), "kwargs": kwargs}, handle))
    except OSError:
        return _failed("the grader could not hand the process the inputs of a call after the timed ones")
    failure = _order(child, {"trial": AUDIT_TRIAL, "api": spec.api, "call": order_of(spec.protocol, spec.mutates)})
    if failure is not None:
        return failure
    seconds = 3 * grading.plan.limits.case_seconds
    event, failure = _until(
        child,
        seconds,
        "done",
        ("finished", "fatal"),
        lambda _: _failed("a call on fresh inputs after the timed calls ended the process"),
        f"a call on fresh inputs after the timed calls did not finish within {seconds:g} s",
    )
    return failure if failure is not None else event


def _checked(target: _Target, child, plan: TimingPlan, window: Timed, audit: dict, inputs: TimingInputs) -> dict:
    """The performance entry of the timed windows: the audit call judged like a case, every
    window's calls held to its kernel trace, every input set's last outputs checked; only then
    does the time count."""
    grading, spec = target.grading, target.spec
    args, kwargs = inputs.audit
    with JUDGING.judging():
        judged = judge(
            spec,
            plan.case,
            args,
            kwargs,
            audit,
            lambda references: fetch(child, output_name(AUDIT_TRIAL), args, kwargs, references),
            grading.on,
            own_kernels=grading.plan.own_kernels,
            room=grading.room,
        )
    if not judged.passed:
        entry = _failed(f"a call on fresh inputs right after the timed calls failed: {judged.message}")
        if judged.kind in INTEGRITY:
            entry["integrity"] = {"violation": judged.kind, "message": INTEGRITY[judged.kind]}
        return entry
    found = windows_work_problem(plan.reps, window.traces, audit, grading.plan.own_kernels, spec.kernel_writes_outputs)
    if found is not None:
        kind, message, traced = found
        if kind == "untraced":
            return {"graded": False, "reason": f"not graded: {message}"}
        return {
            **_failed(f"the timed calls were not the judged work: {message}"),
            "integrity": {"violation": kind, "message": TIMED_INTEGRITY[kind]},
            "kernels": {"timed": traced.get("counts"), "judged": audit.get("kernel_counts")},
            "own_kernels_us": own_gpu_us(plan.reps, traced, audit, grading.plan.own_kernels),
        }
    with JUDGING.judging():
        problem = _timed_outputs_problem(target, child, plan)
    entry = verdict(spec, plan, window.ms, window.event_ms[window.best], not problem, problem)
    entry["own_kernels_us"] = own_gpu_us(plan.reps, window.traces[window.best], audit, grading.plan.own_kernels)
    entry["windows_ms"] = [round(ms / plan.reps, 4) for ms in window.window_ms]
    return entry


# Performance findings that are ways around the exercise: they withhold every point of the module.
TIMED_INTEGRITY = {
    "timed_foreign": "the timed calls ran GPU kernels that are not the submission's Triton kernels.",
    "timed_skipped": "the timed calls did less work than a judged call (work remembered or skipped).",
}


@dataclass
class Timed:
    """A timed loop of ``reps`` calls in each of several windows, measured by the grader."""

    window_ms: list  # the grader's wall clock over each window, in ms
    event_ms: list  # the child's own event time of each window (a cross-check only)
    traces: list  # each window's kernel trace: counts and times_us per kernel name

    @property
    def best(self) -> int:
        """The fastest window: what the grade uses. Taking the fastest of several keeps a moment
        of interference (another process waking, a clock ramp) out of a host-bound timing; every
        window is held to the judged call's work (``_checked``), so none can be made cheap alone."""
        return min(range(len(self.window_ms)), key=self.window_ms.__getitem__)

    @property
    def ms(self) -> float:
        return self.window_ms[self.best]


WINDOWS = 3  # timed windows per timing, each of about TARGET_WINDOW_SECONDS


def _timed_window(target: _Target, child, reps: int, retune: bool = False, save: bool = False, windows: int = WINDOWS):
    """Order ``reps`` timed calls in each of ``windows`` windows and wait until they end, each
    with its kernel trace: a ``Timed``; else the record's performance entry saying why not.
    ``retune``: the child's first timing with the GPU alone, whose autotuners must forget what the
    warm-up chose beside other processes. ``save``: the child saves the last window's last outputs
    afterwards, for ``_checked``."""
    grading, spec = target.grading, target.spec
    failure = _order(
        child,
        {
            "timing": reps,
            "windows": windows,
            "call": order_of(spec.protocol, spec.mutates),
            "retune": retune,
            "save": save,
        },
    )
    if failure is not None:
        return failure
    timed, started, ordered = Timed([], [], []), None, time.monotonic()
    seconds = 3 * grading.plan.limits.case_seconds
    deadline = ordered + seconds
    while len(timed.traces) < windows:
        event, failure = _next_event(child, deadline, f"the timed calls did not finish within {seconds:g} s")
        if failure is not None:
            return failure
        kind = event.get("event")
        if kind == "timing_start":
            started = event["received_at"]
            if not timed.window_ms:
                grading.profile.add("warm-up", started - ordered)
            grading.profile.add("tuning alone", claimed_seconds(event.get("autotune_seconds")))
            grading.profile.add("compiling alone", claimed_seconds(event.get("compile_seconds")))
        elif kind == "timing_error":
            return _failed(f"a timed call failed: {event.get('error')}")
        elif kind == "timing_end" and started is not None:
            timed.window_ms.append((event["received_at"] - started) * 1e3)
            timed.event_ms.append(event.get("event_ms"))
            started, deadline = None, event["received_at"] + seconds
        elif kind == "timing_kernels" and len(timed.traces) < len(timed.window_ms):
            timed.traces.append({"counts": event.get("counts"), "times_us": event.get("times_us")})
        elif kind == "finished":
            return _failed("the kernel was not timed (it ended early)")
    return timed


def _timed_outputs_problem(target: _Target, child, plan: TimingPlan) -> str:
    """Why the outputs of the timed calls are unacceptable ("" when they are right): the last
    call on each input set, every one checked against the reference."""
    spec = target.spec
    references = {index: reference_outputs(spec, *plan.input_sets[index]) for index in last_sets(plan)}
    try:
        saved = fetch_timed(child, references)
    except Exception as error:
        return f"the timed outputs could not be read ({type(error).__name__}: {error})"
    if spec.mutates:
        # Repeated in-place updates (an optimizer's steps) drift from a one-call reference: the
        # values were checked by the graded cases and the audit call; here they need only be readable.
        return ""
    for index, outputs in saved.items():
        args, kwargs = plan.input_sets[index]
        if compare(spec, plan.case, tuple(outputs), references[index], (args, kwargs)):
            return "the outputs of the timed calls were wrong (lazy or side-stream work?)"
    return ""


def last_sets(plan: TimingPlan) -> list[int]:
    """The input sets the last timed calls used, one call each: those whose outputs are saved."""
    sets = len(plan.input_sets)
    return sorted({(plan.reps - 1 - k) % sets for k in range(min(sets, plan.reps))})


def fetch_timed(child, references: dict) -> dict:
    """{input set: the outputs of its last timed call}, read within the limits that right outputs
    of every set need (the references, in float64, bound any dtype, with room for one wrong-sized
    output). Raises on anything else, or when the sets saved are not those expected."""
    expected = [t for outputs in references.values() for t in outputs if isinstance(t, torch.Tensor)]
    max_elements = 2 * max([t.numel() for t in expected] + [1]) + 1024
    max_bytes = 4 * sum(t.numel() * 8 for t in expected) + (1 << 20)
    JUDGING.need(min(child.size(TIMED_OUTPUTS), max_bytes))
    saved = wire.parse(child.take(TIMED_OUTPUTS, max_bytes), max_elements)
    if (
        not isinstance(saved, dict)
        or saved.get("sets") != sorted(references)
        or not isinstance(saved.get("outputs"), list)
        or len(saved["outputs"]) != len(references)
    ):
        raise wire.WireError("the file does not hold the outputs of the last call on every input set")
    return {index: list(outputs) for index, outputs in zip(saved["sets"], saved["outputs"])}


_timing_inputs: dict = {}
_timing_plans: dict = {}
_timing_plans_lock = threading.Lock()


def _inputs_for(target: _Target, secret: int, on: torch.device) -> TimingInputs:
    """The timing inputs of ``timed`` (a module, or one of its parts) for this run and GPU, built once."""
    key, spec = target.key, target.spec
    with _timing_plans_lock:
        if key not in _timing_inputs:
            case = spec.bench_cases[0]
            # The audit call's inputs come from a seed no rotated set uses.
            _timing_inputs[key] = TimingInputs(
                case, rotated_inputs(spec, case, secret + 7919, on), build_inputs(spec, case, secret + 104729, on=on)
            )
        return _timing_inputs[key]


def _plan_wanted(target: _Target) -> bool:
    """Whether the reference still has to be timed for ``timed`` on this GPU in this run."""
    with _timing_plans_lock:
        return target.key not in _timing_plans


def _plan_for(target: _Target, inputs: TimingInputs, reference) -> TimingPlan | None:
    """The reference's time on ``inputs``, measured once per run and GPU (with the GPU alone) in
    its timed child ``reference`` (None: measured already, or no reference solution here). Two
    gradings of one module may both have started a reference child; the first to get the GPU
    times it."""
    grading, key = target.grading, target.key
    with _timing_plans_lock:
        if key in _timing_plans:
            return _timing_plans[key]
    if reference is None:
        plan = None
    else:
        reference.resume()
        probe = _timed_window(target, reference, 3, retune=True, windows=1)
        reps = 0 if isinstance(probe, dict) else reps_for(probe.ms / 3)
        window = probe if isinstance(probe, dict) else _timed_window(target, reference, reps)
        if isinstance(window, dict):
            raise RuntimeError(
                f"the reference solution of {grading.plan.module.id} could not be timed: {window['reason']}"
            )
        plan = TimingPlan(inputs.case, inputs.input_sets, inputs.audit, reps=reps, reference_ms=window.ms / reps)
        reference.kill()  # idle from now on, and holding GPU memory the submission's timing may need
    with _timing_plans_lock:
        return _timing_plans.setdefault(key, plan)
