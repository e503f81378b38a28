"""The grader's run phase: grade every submission of every module in sandboxed child processes.

This module schedules: it finds the submissions (``grader.grade.store``), grades each distinct
(module, file) once, reusing the records of earlier runs, and spreads the gradings over workers.
How one submission of one module is graded (its children, budget and verdicts) is
``grader.grade.grading``; ``<results>/logs`` keeps what each child printed (for instructors
only: it may contain anything the learner's code chose to print).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.core import device
from grader.core.catalog import Module, available_modules, find_module
from grader.grade import gpu_memory, leases, profile, store
from grader.grade.grading import Cancelled, Graded, Options, default_workers, grade_one, make_sandbox
from grader.grade.phases import Bar, Phases
from grader.grade.profile import Profile
from grader.grade.store import (
    Submission,
    existing_record,
    find_submissions,
    keep,
    read_source,
    remove_stale_temporaries,
    sha256,
    starting_source,
    update_index,
)
from grader.sandbox.isolation import Sandbox, UnsafeSandbox

__all__ = ["Options", "FileOutcome", "RunSummary", "run", "grade_submission", "exit_if_workers_linger"]

# After Ctrl-C, how long the workers have to end their children (each does within a second or two).
STOP_SECONDS = 60
_WORKER_PREFIX = "grading-worker"


@dataclass
class FileOutcome:
    submissions: list[Submission]
    record: dict | None = None
    record_path: Path | None = None
    reused: bool = False
    children: int = 0
    error: str | None = None
    profile: Profile | None = None  # where the time went, for a file graded in this run

    def take(self, graded: Graded) -> None:
        self.record, self.record_path = graded.record, graded.record_path
        self.children, self.profile = graded.children, graded.profile


@dataclass
class RunSummary:
    outcomes: list[FileOutcome]
    results_dir: Path
    protections: dict
    # GPU index (None: no GPU) -> leases.Usage during this run, GPUs in order
    gpu_usage: dict = field(default_factory=dict)

    @property
    def children_started(self) -> int:
        return sum(o.children for o in self.outcomes)

    @property
    def errors(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.error]

    def profile_table(self) -> str:
        table = profile.table([(o.submissions[0].module.id, o.profile) for o in self.outcomes if o.profile])
        return "\n".join(
            [table]
            + [profile.lease_line(gpu, usage) for gpu, usage in self.gpu_usage.items() if usage.timings]
            + [profile.memory_line()]
        )

    def record_for(self, student: str, module_id: str) -> dict | None:
        for outcome in self.outcomes:
            if any(s.student == student and s.module.id == module_id for s in outcome.submissions):
                return outcome.record
        return None

    def log_for(self, student: str, module_id: str) -> str | None:
        """The grading log of a student's file (what its children printed, the grader's notes)."""
        record = self.record_for(student, module_id)
        if record is None:
            return None
        path = store.log_path(self.results_dir, find_module(module_id), record["submission_sha256"])
        return path.read_text() if path.is_file() else None


def grade_submission(
    module: Module, kernel_file: Path, results_dir: Path, options: Options | None = None, sandbox: Sandbox | None = None
) -> FileOutcome:
    """Read, or if missing produce, the record of one submitted kernel.py (for the record phase)."""
    options = options or Options(workers=1)
    results_dir, kernel_file = Path(results_dir).resolve(), Path(kernel_file)
    outcome = FileOutcome([Submission(kernel_file.parent.name, module, kernel_file)])
    source = read_source(kernel_file)
    outcome.record, outcome.record_path = existing_record(module, source, results_dir)
    if outcome.record is not None:
        outcome.reused = True
        return outcome
    secret = store.run_secret(results_dir)  # the class's: this file meets the inputs everyone met
    own = sandbox is None
    sandbox = sandbox or make_sandbox(options, results_dir, (kernel_file.resolve().parent,))
    try:
        sandbox.probe()
        outcome.take(_keep(results_dir, module, grade_one(module, source, sandbox, secret, options, threading.Event())))
        return outcome
    finally:
        if own:
            sandbox.close()


def run(
    submissions_root: Path,
    results_dir: Path,
    modules: list[Module] | None = None,
    options: Options | None = None,
    progress: bool | Phases = True,
) -> RunSummary:
    """Grade every submission under ``submissions_root``; records go to ``results_dir``.

    ``progress``: show the run phase's bar (one grading per distinct file), or add it to these
    ``Phases`` (``python -m grader grade`` shows them all)."""
    phases = progress if isinstance(progress, Phases) else Phases(enabled=progress)
    with phases.phase("run phase", unit="gradings") as bar:
        return _run(submissions_root, results_dir, modules, options or Options(), bar)


def _run(
    submissions_root: Path, results_dir: Path, modules: list[Module] | None, options: Options, progress_bar: Bar
) -> RunSummary:
    submissions_root, results_dir = Path(submissions_root).resolve(), Path(results_dir).resolve()
    gpu_memory.graders_sharing()  # a malformed GRADER_GPU_SHARED_BY stops the run before any grading
    modules = [m for m in (modules or available_modules()) if m.api]
    found = find_submissions(submissions_root, modules)

    # One job per distinct (module, file): identical submissions are graded once.
    jobs: dict[tuple[str, str], FileOutcome] = {}
    sources: dict[tuple[str, str], bytes] = {}
    outcomes: list[FileOutcome] = []
    for submission in found:
        try:
            source = read_source(submission.path)
        except (OSError, ValueError) as error:
            outcomes.append(FileOutcome([submission], error=str(error)))
            continue
        key = (submission.module.id, sha256(source))
        if key not in jobs:
            jobs[key] = FileOutcome([])
            sources[key] = source
        jobs[key].submissions.append(submission)
    outcomes += jobs.values()
    _add_starting_kernels(jobs, sources, found)

    results_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(results_dir)
    progress_bar.total = len(jobs)
    pending = []
    for key, outcome in jobs.items():  # records of earlier runs: no process needed
        outcome.record, outcome.record_path = existing_record(outcome.submissions[0].module, sources[key], results_dir)
        if outcome.record is not None:
            outcome.reused = True
            progress_bar.advance(note=_status(outcome), tag="reused")
        else:
            pending.append(key)

    pending.sort(key=_longest_first(results_dir))
    protections: dict = {}
    used_before = leases.usage()
    try:
        if pending:
            protections = _grade_pending(pending, jobs, sources, results_dir, submissions_root, options, progress_bar)
    finally:
        update_index(results_dir, [o for o in outcomes if o.record is not None or o.error])
    used = {gpu: usage.since(used_before.get(gpu, leases.Usage())) for gpu, usage in leases.usage().items()}
    used = dict(sorted(used.items(), key=lambda item: (item[0] is None, item[0] or 0)))  # None beside 0 does not sort
    return RunSummary(outcomes, results_dir, protections, used)


STARTING = "(starting kernel)"  # the student name of the starting kernels' gradings, in no output


def _add_starting_kernels(jobs: dict, sources: dict, found: list[Submission]) -> None:
    """A grading of each module's starting kernel beside the class's (reused once made): the cases
    it passes show no work, and scoring counts them so (``scoring.work_share``). Not in the run's
    outcomes, so no table, index or gradebook lists it."""
    for module in {submission.module.id: submission.module for submission in found}.values():
        source = starting_source(module)
        key = (module.id, sha256(source)) if source is not None else None
        if key is not None and key not in jobs:
            jobs[key] = FileOutcome([Submission(STARTING, module, module.learner_dir / "kernel.py")])
            sources[key] = source


def exit_if_workers_linger(code: int) -> None:
    """After a stopped run: if a worker thread is still busy, say where every thread is and end
    the process now, with ``code``, instead of waiting for it at exit. Its children die with the
    process (the sandbox's boot step asks the kernel for that), and records are written whole or
    not at all, so nothing is lost that a re-run would not redo."""
    lingering = [t for t in threading.enumerate() if t.name.startswith(_WORKER_PREFIX) and t.is_alive()]
    if not lingering:
        return
    print(
        f"{len(lingering)} worker(s) did not stop within {STOP_SECONDS} s; leaving without them. "
        "Where each thread was, for a bug report:",
        file=sys.stderr,
        flush=True,
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stdout.flush()
    os._exit(code)


def _longest_first(results_dir: Path):
    """A sort key that puts the modules that take longest first, so that none starts last and
    keeps the run waiting: their mean time in earlier runs on this device, else their place in
    the course (later modules are usually the larger ones)."""
    measured = profile.measured_seconds(results_dir, device.describe())
    places = {m.id: index for index, m in enumerate(available_modules())}

    def key(job: tuple[str, str]) -> tuple:  # (module id, sha256 of the file)
        return (-measured.get(job[0], 0.0), -places.get(job[0], 0))

    return key


def _keep(results_dir: Path, module: Module, graded: Graded) -> Graded:
    graded.record_path = keep(results_dir, module, graded.record, graded.log)
    return graded


def _log_profile(results_dir: Path, outcome: FileOutcome) -> None:
    """Append the grading's profile to ``<results>/profile.jsonl`` as soon as it ends, so that an
    interrupted run keeps the measurements of what it finished (the tables of docs/measurements.md
    come from these lines)."""
    if outcome.profile is None:
        return
    line = {
        "module": outcome.submissions[0].module.id,
        "device": device.describe(),
        "children": outcome.children,
        **outcome.profile.as_dict(),
    }
    with open(results_dir / profile.LOG_NAME, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def _status(outcome: FileOutcome) -> str:
    who = ", ".join(s.student for s in outcome.submissions)
    module_id = outcome.submissions[0].module.id
    if outcome.error:
        return f"{who} {module_id}: ERROR {outcome.error.splitlines()[0]}"
    totals, integrity = outcome.record["totals"], outcome.record.get("integrity")
    cheated = f", no points: {integrity['violation']}" if integrity else ""
    return f"{who} {module_id}: {totals['passed']}/{totals['total']}{cheated}" + (" (reused)" if outcome.reused else "")


def _grade_pending(
    pending: list,
    jobs: dict,
    sources: dict,
    results_dir: Path,
    submissions_root: Path,
    options: Options,
    progress_bar: Bar,
) -> dict:
    """Grade the jobs without a record, in parallel; return the sandbox's protections. Every
    grading, local or on Ray, uses the results folder's secret (``store.run_secret``)."""
    secret = store.run_secret(results_dir)

    def done(outcome: FileOutcome) -> None:
        progress_bar.advance(note=_status(outcome))
        _log_profile(results_dir, outcome)

    if options.ray is not None:
        from grader.grade import cluster

        if not cluster.available():  # the local pool instead, and how to have Ray next time
            print(cluster.FALLBACK_NOTE, file=sys.stderr, flush=True)
            return _grade_pending(
                pending, jobs, sources, results_dir, submissions_root, replace(options, ray=None), progress_bar
            )
        hidden = replace(options, hide=(*options.hide, submissions_root))
        return cluster.grade_pending(pending, jobs, sources, results_dir, hidden, secret, done)
    stop = threading.Event()
    sandbox = make_sandbox(options, results_dir, (submissions_root,))
    try:
        protections = sandbox.probe()

        def work(key):
            outcome = jobs[key]
            try:
                module = outcome.submissions[0].module
                graded = grade_one(module, sources[key], sandbox, secret, options, stop)
                outcome.take(_keep(results_dir, module, graded))
            except (Cancelled, UnsafeSandbox):
                raise
            except Exception as error:  # the grader's own failure: report it, write no record
                outcome.error = f"{type(error).__name__}: {error}"
            return outcome

        pool = ThreadPoolExecutor(
            max_workers=options.workers or default_workers(options), thread_name_prefix=_WORKER_PREFIX
        )
        futures = [pool.submit(work, key) for key in pending]
        try:
            waiting = set(futures)
            while waiting:
                # Never an endless wait: Ctrl-C may reach a worker thread instead of this one, and
                # Python raises it here only once this thread runs again.
                finished, waiting = wait(waiting, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in finished:
                    done(future.result())
        except BaseException:
            stop.set()  # workers stop their children within a second and write nothing
            pool.shutdown(wait=False, cancel_futures=True)
            # Only the started ones: a future cancelled while queued never counts as done for
            # wait(), which would then sit out the whole timeout.
            started = [future for future in futures if not future.cancelled()]
            wait(started, timeout=STOP_SECONDS)  # a worker still busy then: exit_if_workers_linger
            raise
        pool.shutdown()
        return protections
    finally:
        sandbox.close()
