"""The run phase fanned out over a Ray cluster (``python -m grader run|grade --ray [ADDRESS]``).

Every (module, submitted file) that has no record yet becomes one Ray task. The tasks run on
*grading workers*: Ray actors, one per GPU of the cluster (each holds its GPU: ``num_gpus=1``)
or, without CUDA, one per CPU slot. A worker keeps a sandbox, the reference's timings and its
imports for all its tasks, and grades up to ``Options.children_per_gpu`` of them side by side on
its GPU exactly as the local pool does (a timing has the GPU alone: ``grader.grade.leases``).

The driver (this process) trusts a worker no more than it must: the sandbox runs on the worker
as it does locally, but only the driver checks what comes back (the record belongs to the file
and the cases the driver asked about, and has the record's shape) and writes records, logs and
the index. A worker that dies takes its tasks with it: each is handed to a new worker once, and
if it is lost again it becomes a grader error for the instructor (no record, so no grade and
never a zero for the student), and the run goes on.

A GPU that breaks mid-run does not kill its worker: every child the worker starts fails, and
its gradings look like files that crash. So a grading that might be the device's doing (see
``doubtful``) is believed only after a check of the device in a fresh process
(``GradingWorker.device_fault``); where the check fails, the worker answers ``DeviceFault``
instead of the record. The driver then *retires* the worker (no more tasks; the tasks it still
runs come back too) and hands its tasks to the others without counting an attempt against the
file, and says so once. Where every worker is retired, what is left becomes grader errors.

Ray is optional (``pip install -e '.[cluster]'``); the driver and every node need the same
checkout of the course with the grader installed (the records' case hash tells when one differs).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.core import device
from grader.core.catalog import find_module
from grader.grade import leases
from grader.grade.grading import Graded, Options, grade_one, make_sandbox
from grader.grade.profile import Profile
from grader.grade.record_format import RECORD_VERSION, problems
from grader.grade.store import cases_hash, keep, sha256
from grader.sandbox.isolation import UnsafeSandbox, visible_gpu

FALLBACK_NOTE = (
    "Ray is not installed in this Python environment, so this run grades on this machine "
    "alone. To grade on a Ray cluster, install the cluster extra (`pip install -e '.[cluster]'`) "
    "here and on every node."
)
ATTEMPTS = 2  # a task whose worker died is handed to a new worker once

# The check of a worker's GPU: allocate, compute, synchronize and read the result back, in a fresh
# process that sees the GPU as the worker's children do. The sum is exact in float32.
PROBE = (
    "import torch\n"
    "x = torch.arange(1024, device='cuda', dtype=torch.float32)\n"
    "total = (x * 2).sum()\n"
    "torch.cuda.synchronize()\n"
    "assert total.item() == 1047552.0, f'2 * (0 + 1 + ... + 1023) came out as {total.item()}'\n"
)
PROBE_SECONDS = 120  # importing torch and starting CUDA take seconds; a hung GPU never answers

# Failed cases that are the file's own mistakes, whatever the device: a wrong answer, or one of
# the ways around the exercise that judge only values. Any other failure may be a broken GPU's.
MISTAKES = {"wrong", "alias", "mutation", "replaced", "cache"}


class ClusterError(Exception):
    """The cluster cannot be reached, or has nothing to grade with."""


class DeviceFault(Exception):
    """A worker's device failed its check: the worker's grading says nothing about the file."""


def doubtful(record: dict) -> bool:
    """Whether ``record`` might be a failing device's doing rather than the file's: no case
    passed, a case failed otherwise than by a wrong answer (a crash, an error, a time-out, a
    case not run, an import that failed), a crash no single case caused, an integrity finding,
    or a timing that earned nothing. A refused file ran nothing, and a record of passed cases and
    credited timing is believed as it is: healthy gradings never pay for a check of the device."""
    if record.get("refusal") is not None:
        return False
    totals = record.get("totals") or {}
    failed = [row for row in record.get("cases") or [] if not row.get("passed")]
    performance = record.get("performance") or {}
    return bool(
        not totals.get("passed")
        or any(row.get("kind") not in MISTAKES for row in failed)
        or record.get("note")
        or record.get("load_error")
        or record.get("integrity")
        or (performance.get("graded") and not performance.get("credit"))
    )


def probe(code: str, env: dict, seconds: float) -> str | None:
    """Run ``python -c code`` in a fresh process (and session) with ``env``: None if it ends well
    within ``seconds``, else what went wrong, in a line."""
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _, err = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:  # a process stuck in the GPU's driver may not die at once: not waited for long
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return f"the check of the device did not end within {seconds:g} s"
    if process.returncode == 0:
        return None
    lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
    return f"the check of the device failed (exit status {process.returncode}): {lines[-1] if lines else 'no message'}"


def available() -> bool:
    return importlib.util.find_spec("ray") is not None


def _ray():
    import ray

    return ray


class GradingWorker:
    """One process on a node of the cluster that grades tasks with its own sandbox (a Ray actor;
    see ``_worker_class``). Its methods run in Ray's threads, ``slots`` at a time."""

    def __init__(self, options: Options, secret: int, slots: int, results_dir: Path):
        self.options, self.secret = options, secret
        # Children never see the driver's results, where the driver and worker share a machine.
        self.sandbox = make_sandbox(
            replace(options, workers=slots), results_dir, gpus=[0] if device.is_cuda() else None
        )
        self.stop = threading.Event()
        # Where this worker grades, for the instructor: its node and the GPU Ray gave it.
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") if device.is_cuda() else ""
        self.where = f"GPU {gpu} of node {os.uname().nodename}" if gpu else f"node {os.uname().nodename}"
        self.fault: str | None = None  # once the device has failed its check, for good
        self.checking = threading.Lock()
        if device.is_cuda():
            import torch

            torch.set_num_threads(worker_threads(_node_gpus()))

    def ready(self) -> dict:
        """The sandbox's protections on this node (raises UnsafeSandbox as the local pool would)."""
        return {**self.sandbox.probe(), "node": os.uname().nodename}

    def device_fault(self) -> str | None:
        """What is wrong with this worker's GPU, or None: ``PROBE`` in a fresh process with the
        worker's environment and the GPU its children get, within ``PROBE_SECONDS``, never while
        another grading times a kernel on it (the GPU's shared lease, as a correctness child).
        Without CUDA there is nothing to check (None)."""
        if not device.is_cuda():
            return None
        with leases.for_gpu(0).shared():
            return probe(PROBE, {**os.environ, "CUDA_VISIBLE_DEVICES": visible_gpu(0)}, PROBE_SECONDS)

    def _check_device(self) -> None:
        """Raise DeviceFault if the device fails its check (or failed it before). The first
        fault also stops this worker's other gradings: nothing they find would be believed."""
        with self.checking:  # one check at a time: side-by-side gradings that crash share it
            if self.fault is None:
                found = self.device_fault()
                if found is not None:
                    self.fault = f"{self.where}: {found}"
                    self.stop.set()
        if self.fault is not None:
            raise DeviceFault(self.fault)

    def grade(self, module_id: str, source: bytes) -> dict:
        if self.fault is not None:
            raise DeviceFault(self.fault)
        try:
            self.sandbox.probe()  # a no-op after the first; a replacement worker starts here
            graded = grade_one(find_module(module_id), source, self.sandbox, self.secret, self.options, self.stop)
        except UnsafeSandbox:
            raise
        except Exception:
            self._check_device()  # the device's fault, not the grader's, where it fails its check
            raise
        if self.fault is not None or doubtful(graded.record):
            self._check_device()
        return {
            "record": graded.record,
            "log": graded.log,
            "children": graded.children,
            "profile": dict(graded.profile.seconds),
            "uncovered": dict(graded.profile.gaps),
            "total": graded.profile.total,
        }


def _worker_class(ray, worker: type, slots: int):
    """``worker`` as a Ray actor: it holds one GPU (or one CPU) and runs ``slots`` tasks at once."""
    resources = {"num_gpus": 1, "num_cpus": 1} if device.is_cuda() else {"num_cpus": 1}
    return ray.remote(max_restarts=0, max_task_retries=0, max_concurrency=slots, **resources)(worker)


def worker_threads(node_gpus: int) -> int:
    """Threads for a GPU worker's own torch work (reading its children's outputs, comparing them
    with the references): its share of the cores it may run on, those of one GPU of its node. Ray
    starts an actor that holds one CPU with OMP_NUM_THREADS=1, where the local pool's process
    uses every core it may run on; judging on one thread made a Ray worker slower than the
    local pool on the same GPU and cores."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, node_gpus))


def _node_gpus() -> int:
    """The GPUs Ray manages on the node this actor runs on (1 where that cannot be read)."""
    ray = _ray()
    try:
        here = ray.get_runtime_context().get_node_id()
        return int(next(n["Resources"].get("GPU", 1) for n in ray.nodes() if n["NodeID"] == here))
    except Exception:  # a count for a thread pool's size, never worth a failed worker
        return 1


def private_cpus() -> int:
    """The CPUs a private cluster offers: as many as grading workers it can start (one per GPU; on
    a CPU one per core this process may run on). Ray would count every core of the machine,
    whatever the process's CPU affinity, and start an idle Python process for each (two, for the
    first driver): 128 of them on a 64-core host, on the cores a pinned run has."""
    if device.is_cuda():
        import torch

        return max(1, torch.cuda.device_count())
    return max(1, len(os.sched_getaffinity(0)))


def connect(address: str) -> bool:
    """Connect to the cluster at ``address``; with "" to one already running on this machine
    (``ray start --head``), else start a private one for this run; with "local" start a private
    one even where a cluster is running (Ray itself would join any cluster it finds here). Return
    whether this process started it (and so should stop it)."""
    ray = _ray()
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    # Ray's core installs its own handler of SIGTERM, which dumps a stack trace and kills the
    # process: a scheduler's stop must still end the run as Ctrl-C does (records kept).
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            if address != "local":
                ray.init(address=address or "auto", **quiet)
                return False
        except ConnectionError as error:
            if address:
                raise ClusterError(
                    f"No Ray cluster answers at {address} ({error}). Start one (`ray start "
                    "--head` on its head node) or check the address, and try again."
                ) from None
        # "local": Ray itself would otherwise join a cluster it finds running on this machine
        ray.init(address="local", num_cpus=private_cpus(), **quiet)
        return True
    finally:
        for sig, handler in handlers.items():
            if handler is not None and threading.current_thread() is threading.main_thread():
                signal.signal(sig, handler)


@dataclass
class Task:
    key: tuple
    module_id: str
    source: bytes
    attempts: int = 0
    worker: object = None


@dataclass
class Pool:
    """The grading workers and which task each is running."""

    ray: object
    actor: object
    options: Options
    secret: int
    slots: int
    results_dir: Path
    workers: list = field(default_factory=list)  # those given tasks
    retired: list = field(default_factory=list)  # those whose device failed: given nothing more
    running: dict = field(default_factory=dict)  # Ray reference -> Task

    def _new(self):
        return self.actor.remote(self.options, self.secret, self.slots, self.results_dir)

    def start(self, count: int) -> dict:
        self.workers = [self._new() for _ in range(count)]
        try:
            protections = self.ray.get([w.ready.remote() for w in self.workers])
        except self.ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, UnsafeSandbox):
                raise error.cause from None
            raise
        return protections[0]

    def replace(self, dead) -> None:
        if self.is_active(dead):
            self.workers = [w for w in self.workers if w is not dead]
            self.ray.kill(dead, no_restart=True)
            self.workers.append(self._new())

    def retire(self, worker) -> list | None:
        """Give ``worker`` no more tasks (its device failed), and take back the tasks it is still
        running, as not attempted (what they answer is never read): those tasks; None if it was
        retired already. It is not killed: while it lives it holds its GPU, so Ray cannot give the
        broken GPU to a new worker (as it would to a replacement of a dead one); it ends with the
        run, and its gradings end soon (it stopped them when its device failed)."""
        if not self.is_active(worker):
            return None
        self.workers = [w for w in self.workers if w is not worker]
        self.retired.append(worker)
        back = [reference for reference, task in self.running.items() if task.worker is worker]
        tasks = [self.running.pop(reference) for reference in back]
        for task in tasks:
            task.attempts -= 1
        return tasks

    def is_active(self, worker) -> bool:
        return any(w is worker for w in self.workers)

    def submit(self, task: Task) -> None:
        busy = {id(w): 0 for w in self.workers}
        for running in self.running.values():
            busy[id(running.worker)] = busy.get(id(running.worker), 0) + 1
        task.worker = min(self.workers, key=lambda w: busy[id(w)])
        task.attempts += 1
        self.running[task.worker.grade.remote(task.module_id, task.source)] = task

    def has_room(self) -> bool:
        active = sum(self.is_active(task.worker) for task in self.running.values())
        return active < len(self.workers) * self.slots

    def stop(self) -> None:
        """End every worker, and with it the gradings it runs and has queued (its sandboxed
        children die with it). Ray refuses a forced cancel of an actor's task, and a plain one
        does not stop a running grading: killing the worker does both."""
        for worker in self.workers + self.retired:
            self.ray.kill(worker, no_restart=True)


def accept(result, module, source: bytes) -> Graded:
    """A worker's answer as a ``Graded``, if it is one for this file and these cases; else
    ValueError saying what is wrong with it."""
    if (
        not isinstance(result, dict)
        or not isinstance(result.get("record"), dict)
        or not isinstance(result.get("log"), str)
        or type(result.get("children")) is not int
    ):
        raise ValueError("the worker's answer does not have the shape of a grading")
    record = result["record"]
    expected = {
        "record_version": RECORD_VERSION,
        "module": module.id,
        "submission_sha256": sha256(source),
        "cases_sha256": cases_hash(module),
    }
    for name, value in expected.items():
        if record.get(name) != value:
            raise ValueError(
                f"its record's {name} is {record.get(name)!r}, not {value!r} (does the node have "
                "another checkout of the course, or another device mode?)"
            )
    found = problems(record)
    if found:
        raise ValueError(f"its record is not of the grader's format: {'; '.join(found[:3])}")
    profile = Profile()
    for step, seconds in (result.get("profile") or {}).items():
        if isinstance(step, str) and type(seconds) in (int, float):
            profile.add(step, seconds)
    profile.spans.clear()  # the worker's, not this process's
    gaps = result.get("uncovered")
    if isinstance(gaps, dict):
        profile.gaps = {k: float(v) for k, v in gaps.items() if isinstance(k, str) and type(v) in (int, float)}
    total = result.get("total")
    profile.total = float(total) if type(total) in (int, float) else 0.0
    return Graded(record, result["log"], result["children"], profile)


def grade_pending(
    pending: list,
    jobs: dict,
    sources: dict,
    results_dir: Path,
    options: Options,
    secret: int,
    done,
    worker: type = GradingWorker,
) -> dict:
    """Grade the jobs ``pending`` (keys of ``jobs`` and ``sources``) on the cluster that
    ``options.ray`` names; ``done(outcome)`` is called as each ends. Return the protections of
    the first worker's sandbox. ``worker`` is the actor's class (tests replace it)."""
    ray = _ray()
    began = time.monotonic()
    started_here = connect(options.ray or "")
    # Said as it happens: a start that hangs (a cluster that does not answer, workers that do not
    # come up) shows where it stands.
    joined = "started a private cluster on this machine" if started_here else "joined a running cluster"
    print(f"Ray: {joined} in {time.monotonic() - began:.0f} s.", file=sys.stderr, flush=True)
    pool = None
    try:
        resources = ray.cluster_resources()
        if device.is_cuda():
            count, slots = int(resources.get("GPU", 0)), max(1, options.children_per_gpu)
            if count == 0:
                raise ClusterError(
                    "This Ray cluster has no GPU, and this machine grades with CUDA. Add GPU "
                    "nodes, or grade on this machine without --ray."
                )
        else:
            count, slots = int(resources.get("CPU", 0)), 1
            if count == 0:
                raise ClusterError(
                    "This Ray cluster has no CPU to grade with. Add nodes, or grade on this machine without --ray."
                )
        if options.workers:
            count = max(1, min(count, options.workers))
        pool = Pool(ray, _worker_class(ray, worker, slots), options, secret, slots, results_dir)
        began = time.monotonic()
        protections = pool.start(min(count, len(pending)))
        print(
            f"Ray: {len(pool.workers)} grading worker(s) ready, {slots} grading(s) at a time each, "
            f"in {time.monotonic() - began:.0f} s.",
            file=sys.stderr,
            flush=True,
        )
        waiting = [Task(key, jobs[key].submissions[0].module.id, sources[key]) for key in pending]
        waiting.reverse()  # pop() from the end: in the order given
        while waiting or pool.running:
            while waiting and pool.has_room():
                pool.submit(waiting.pop())
            # A bounded wait, so that Ctrl-C or a scheduler's stop is handled within a second.
            ready, _ = ray.wait(list(pool.running), num_returns=1, timeout=1.0)
            if not ready:
                continue
            finished = ready[0]
            task = pool.running.pop(finished)
            outcome, module = jobs[task.key], jobs[task.key].submissions[0].module
            try:
                graded = accept(ray.get(finished), module, task.source)
            except ray.exceptions.RayActorError as error:  # the worker died, and with it its tasks
                pool.replace(task.worker)
                if task.attempts < ATTEMPTS:
                    waiting.append(task)
                    continue
                outcome.error = (
                    f"Grader error: the grading worker died {task.attempts} times while grading this "
                    f"file ({type(error).__name__}); it has no grade. See the Ray logs of the node."
                )
            except ray.exceptions.RayTaskError as error:
                if isinstance(error.cause, UnsafeSandbox):
                    raise error.cause from None
                if isinstance(error.cause, DeviceFault):  # not the file's attempt: graded elsewhere
                    task.attempts -= 1
                    waiting.append(task)
                    taken_back = pool.retire(task.worker)
                    if taken_back is not None:  # said once per worker
                        waiting += taken_back
                        print(
                            f"Grading worker retired, its device failed: {error.cause}. Its tasks move to "
                            f"the other workers ({len(pool.workers)} left).",
                            file=sys.stderr,
                            flush=True,
                        )
                    if not pool.workers:
                        _give_up(waiting + list(pool.running.values()), jobs, done)
                        break
                    continue
                cause = error.cause if error.cause is not None else error
                outcome.error = f"{type(cause).__name__}: {cause}"
            except ValueError as error:
                outcome.error = f"Grader error: a worker's result was refused: {error}"
            else:
                graded.record_path = keep(results_dir, module, graded.record, graded.log)
                outcome.take(graded)
            done(outcome)
        return protections
    finally:
        if pool is not None:
            pool.stop()
        if started_here:
            ray.shutdown()


def _give_up(tasks: list, jobs: dict, done) -> None:
    """Every worker is retired: ``tasks`` (waiting or still on a retired worker) are grader
    errors, with no record (never a zero for the student)."""
    for task in tasks:
        outcome = jobs[task.key]
        outcome.error = (
            "Grader error: no usable GPU left: the device of every grading worker failed its check "
            "(see the lines above), so this file was not graded; it has no grade. Grade again once "
            "the GPUs work."
        )
        done(outcome)
