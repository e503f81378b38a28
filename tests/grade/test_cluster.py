"""The run phase on a Ray cluster (grader/grade/cluster.py), with a real local cluster of 2 CPUs:
the same records as the local pool, a worker that dies is replaced and its task tried once more,
a worker whose device fails is retired and its tasks go to the others, what a worker sends back
is checked by the driver, and without Ray the local pool grades.

About two and a half minutes on 2 CPU cores. Nothing here depends on how long anything takes.

A GPU that breaks mid-run cannot be had on the CPU: ``simulate_failing_gpu`` below makes one on a
machine (or cluster) of several GPUs, for a person to watch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path
from unittest import mock

import pytest

from grader.authoring import example_submissions
from grader.core import device
from grader.core.catalog import REPO_ROOT, find_module
from grader.grade import cluster, runphase
from grader.grade.grading import Options
from grader.grade.runphase import FileOutcome
from grader.grade.store import Submission, cases_hash, read_source, sha256
from grader.sandbox.isolation import GiB, Limits

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.heavy,
    pytest.mark.skipif(
        device.is_cuda(),
        reason="the CPU suite's cluster has no GPU; docs/measurements.md has the GPU cluster's measurements",
    ),
]

VECTOR_ADD = find_module("missing-elements/01-vector-add")
LIMITS = Limits(case_seconds=30, startup_seconds=120, memory_bytes=1 * GiB)


@pytest.fixture(scope="module")
def address():
    """A local Ray cluster of 2 CPUs, started by this process; its address, for other drivers."""
    ray = pytest.importorskip("ray", reason="Ray is the cluster extra (`pip install -e '.[cluster]'`)")
    ray.init(
        num_cpus=2,
        num_gpus=0,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        object_store_memory=200 * 1024 * 1024,
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> Path:
    """A complete submission and the stub of module 01."""
    root = tmp_path_factory.mktemp("cluster") / "examples"
    example_submissions.assemble(root, modules=[VECTOR_ADD], handwritten=False)
    return root


def _records(results: Path) -> dict:
    """What decides a grade in every record under ``results``, by submission."""
    records = {}
    for path in (results / "records").rglob("*.json"):
        record = json.loads(path.read_text())
        records[record["submission_sha256"]] = {
            "totals": record["totals"],
            "integrity": record.get("integrity"),
            "summary": record["summary"],
            "cases": [(row["name"], row["passed"], row["kind"], row["message"]) for row in record["cases"]],
        }
    return records


@dataclasses.dataclass
class Local:
    results: Path
    summary: runphase.RunSummary
    said: str  # what the run printed on stderr


@pytest.fixture(scope="module")
def local(examples, tmp_path_factory) -> Local:
    """The same submissions graded by the local pool, what the cluster must agree with: asked
    for Ray where Ray is missing."""
    results = tmp_path_factory.mktemp("local") / "results"
    said = io.StringIO()
    with mock.patch.object(cluster, "available", lambda: False), contextlib.redirect_stderr(said):
        summary = runphase.run(
            examples, results, [VECTOR_ADD], Options(workers=2, limits=LIMITS, ray=""), progress=False
        )
    return Local(results, summary, said.getvalue())


def _jobs(examples: Path) -> tuple[list, dict, dict]:
    """The run phase's jobs for ``examples``, as ``runphase.run`` makes them."""
    jobs, sources = {}, {}
    for kernel in sorted(examples.rglob("kernel.py")):
        student = kernel.relative_to(examples).parts[0]
        source = read_source(kernel)
        key = (VECTOR_ADD.id, sha256(source))
        jobs[key], sources[key] = FileOutcome([Submission(student, VECTOR_ADD, kernel)]), source
    return list(jobs), jobs, sources


def _stub(examples: Path) -> bytes:
    return read_source(next(examples.glob("stub/*/kernel.py")))


def _grade_with(worker, examples: Path, results: Path, address: str) -> dict:
    pending, jobs, sources = _jobs(examples)
    finished = []
    options = Options(limits=LIMITS, ray=address, hide=(results, examples))
    cluster.grade_pending(pending, jobs, sources, results, options, 1234, finished.append, worker=worker)
    assert sorted(map(id, finished)) == sorted(map(id, jobs.values()))  # each reported once
    return {jobs[key].submissions[0].student: jobs[key] for key in pending}


def test_the_command_grades_on_the_cluster_as_the_local_pool_does(address, examples, local, tmp_path):
    results = tmp_path / "results"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "run",
            str(examples),
            "--results",
            str(results),
            "--module",
            VECTOR_ADD.id,
            "--ray",
            address,
            "--case-timeout",
            "30",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 submission(s) graded" in done.stdout and "NOT GRADED" not in done.stdout
    mine, theirs = _records(results), _records(local.results)
    assert len(mine) == 2 and mine == theirs
    passed = sorted(
        record["totals"]["public"]["passed"] + record["totals"]["hidden"]["passed"] for record in mine.values()
    )
    assert passed[0] == 0 and passed[1] > 0  # the stub and the complete submission
    assert (results / "students.json").is_file() and list((results / "logs").rglob("*.log"))


def test_a_stopped_run_on_the_cluster_ends_like_ctrl_c(address, examples, tmp_path):
    """SIGTERM (a scheduler's stop) ends the driver cleanly even though Ray handles signals too."""
    results = tmp_path / "results"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grader",
            "run",
            str(examples),
            "--results",
            str(results),
            "--module",
            VECTOR_ADD.id,
            "--ray",
            address,
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "run phase" in process.stderr.readline()  # the run has started
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=300)
    finally:
        process.kill()
    assert process.returncode == 130, stdout + stderr
    assert "Stopped. Records written so far are kept" in stdout and "SIGTERM received" not in stderr


def test_a_dead_workers_task_is_tried_once_more_then_is_a_grader_error(address, examples, tmp_path):
    """The complete submission's worker dies on its first try only: graded on the second. The
    stub's worker dies every time: a grader error after two tries, and the run goes on."""
    marker, stub = tmp_path / "died-once", _stub(examples)

    class Dies(cluster.GradingWorker):
        def grade(self, module_id, source):
            if source == stub or not marker.exists():
                if source != stub:
                    marker.touch()
                os._exit(1)
            return super().grade(module_id, source)

    results = tmp_path / "results"
    outcomes = _grade_with(Dies, examples, results, address)
    stub, complete = outcomes["stub"], outcomes["complete"]
    assert marker.exists()
    assert complete.error is None and complete.record["totals"]["public"]["passed"] > 0
    assert complete.record_path.is_file()
    assert stub.record is None and "died 2 times" in stub.error and "no grade" in stub.error
    assert len(list((results / "records").rglob("*.json"))) == 1  # nothing written for the stub


def test_stopping_the_pool_ends_a_grading_that_is_running(address, tmp_path):
    """What Ctrl-C does once gradings are running: every worker ends, and the task it was
    running answers that its worker died (Ray refuses a forced cancel of an actor's task)."""
    ray = cluster._ray()
    started = tmp_path / "started"

    class Endless(cluster.GradingWorker):
        def grade(self, module_id, source):
            started.touch()
            threading.Event().wait()

    options = Options(limits=LIMITS, ray=address)
    pool = cluster.Pool(ray, cluster._worker_class(ray, Endless, 1), options, 1234, 1, tmp_path)
    pool.start(1)
    pool.submit(cluster.Task(("key",), VECTOR_ADD.id, b""))
    [running] = list(pool.running)
    for _ in range(600):  # until the grading has begun
        if started.exists():
            break
        ray.wait([running], timeout=0.5)
    assert started.exists()
    pool.stop()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(running, timeout=300)


def test_the_driver_refuses_a_record_that_is_not_for_the_file_it_sent(address, examples, tmp_path):
    stub = _stub(examples)

    class Forger(cluster.GradingWorker):
        def grade(self, module_id, source):
            answer = super().grade(module_id, source)
            if source == stub:  # the stub's grading, passed off as full marks
                answer["record"]["submission_sha256"] = "0" * 64
            return answer

    results = tmp_path / "results"
    outcomes = _grade_with(Forger, examples, results, address)
    assert outcomes["stub"].record is None and "refused" in outcomes["stub"].error
    assert "submission_sha256" in outcomes["stub"].error
    assert outcomes["complete"].record is not None
    assert len(list((results / "records").rglob("*.json"))) == 1


def _record(**fields) -> dict:
    """A record of the grader's format with no case, for answers of a worker."""
    from grader.grade.record_format import Count, Record, Totals

    return Record(
        **{
            "module": "",
            "submission_sha256": "",
            "cases_sha256": "",
            "device": "cpu",
            "graded_at": "",
            "summary": "",
            "load_error": None,
            "todos": [],
            "starting_kernel": False,
            "cases": [],
            "parts": [],
            "totals": Totals(Count(0, 0), Count(0, 0), 0, 0, 0.0),
            "integrity": None,
            "refusal": None,
            "performance": {},
            "note": "",
            "cpu_seconds": {},
            "protections": {},
            "evidence": "",
            "child_processes": 0,
            **fields,
        }
    ).to_json()


@pytest.mark.parametrize(
    "spoil, words",
    [
        (lambda answer: answer.pop("record"), "shape"),
        (lambda answer: answer.update(children="3"), "shape"),
        (lambda answer: answer["record"].update(module="missing-elements/02-matrix-mul"), "module"),
        (lambda answer: answer["record"].update(cases_sha256="x"), "cases_sha256"),
        (lambda answer: answer["record"].pop("cases"), "cases is missing"),
        (lambda answer: answer["record"]["totals"].update(passed="3"), "totals.passed has the wrong type"),
    ],
)
def test_accept_checks_every_part_of_an_answer(spoil, words):
    source = b"print('hello')\n"
    answer = {
        "record": _record(module=VECTOR_ADD.id, submission_sha256=sha256(source), cases_sha256=cases_hash(VECTOR_ADD)),
        "log": "",
        "children": 2,
        "profile": {"cases": 1.5, 3: "x"},
        "uncovered": {"cases": 0.5, "x": "y"},
        "total": 2.0,
    }
    graded = cluster.accept(json.loads(json.dumps(answer)), VECTOR_ADD, source)
    assert graded.children == 2 and graded.profile.seconds == {"cases": 1.5} and graded.profile.total == 2.0
    assert graded.profile.gaps == {"cases": 0.5}
    spoil(answer)
    with pytest.raises(ValueError, match=words):
        cluster.accept(answer, VECTOR_ADD, source)


def test_without_ray_the_local_pool_grades_and_says_how_to_enable_it(local):
    assert not local.summary.errors and local.summary.children_started > 0
    assert "pip install -e '.[cluster]'" in local.said and "grades on this machine" in local.said.replace("\n", " ")
    assert len(_records(local.results)) == 2


@pytest.mark.parametrize(
    "change, checked",
    [
        ({}, False),  # every case passed
        ({"cases": [("wrong", False)]}, False),  # a wrong answer is the file's
        ({"cases": [("crash", False)]}, True),
        ({"cases": [("error", False)]}, True),
        ({"cases": [("timeout", False)]}, True),
        ({"cases": [("not_run", False)]}, True),
        ({"passed": 0}, True),  # nothing passed
        ({"passed": 0, "refusal": "the policy gate refused it"}, False),  # nothing ran
        ({"note": "a child crashed"}, True),
        ({"integrity": {"violation": "no_launch", "message": ""}}, True),
        ({"performance": {"graded": True, "credit": 0.0}}, True),
        ({"performance": {"graded": True, "credit": 0.5}}, False),
        ({"performance": {"graded": False}}, False),
    ],
)
def test_a_grading_is_checked_against_its_device_only_where_the_device_could_have_failed_it(change, checked):
    from grader.grade.record_format import Count, Totals

    cases = [{"name": "a", "passed": True, "kind": ""}] + [
        {"name": "b", "passed": passed, "kind": kind} for kind, passed in change.get("cases", [])
    ]
    passed = change.get("passed", 1)
    record = _record(
        cases=[],
        totals=Totals(Count(passed, 2), Count(0, 0), passed, 2, passed / 2),
        **{k: v for k, v in change.items() if k in ("refusal", "note", "performance")},
    )
    record["cases"], record["integrity"] = cases, change.get("integrity")
    assert cluster.doubtful(record) is checked


def test_the_check_of_a_device_runs_in_a_fresh_process_within_a_time_limit():
    env = dict(os.environ)
    assert cluster.probe("import os; assert os.environ['X'] == 'y'", {**env, "X": "y"}, 60) is None
    failed = cluster.probe("raise SystemExit('CUDA error: no kernel image')", env, 60)
    assert "exit status 1" in failed and "CUDA error: no kernel image" in failed
    assert "did not end within 1 s" in cluster.probe("import time; time.sleep(60)", env, 1)
    # The check itself: its arithmetic holds on the CPU, and without a GPU it fails, saying why.
    on_the_cpu = cluster.PROBE.replace("'cuda'", "'cpu'").replace("torch.cuda.synchronize()\n", "")
    assert "'cpu'" in on_the_cpu and cluster.probe(on_the_cpu, env, 120) is None
    with mock.patch.object(device, "is_cuda", lambda: True):
        fault = cluster.GradingWorker.device_fault(None)
    assert fault is not None and "the check of the device failed" in fault


def test_a_worker_whose_device_fails_is_retired_and_the_other_grades_its_tasks(
    address, examples, local, tmp_path, capsys
):
    """The first worker whose device is checked (after a grading that passed nothing or
    crashed) fails the check: it is retired and its task goes to the other worker, which dies
    on it once (a new worker takes its place): graded on that try, since the device's failure
    was not the file's attempt. Every grade is the local pool's."""
    broken, died = tmp_path / "broken-device", tmp_path / "died"

    class Breaks(cluster.GradingWorker):
        def device_fault(self):
            try:
                os.close(os.open(broken, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return None  # another worker's device is the broken one
            return "CUDA error: unspecified launch failure (a test's)"

        def grade(self, module_id, source):
            if broken.exists() and not died.exists():  # the first grading after the fault
                died.touch()
                os._exit(1)
            return super().grade(module_id, source)

    results = tmp_path / "results"
    outcomes = _grade_with(Breaks, examples, results, address)
    said = capsys.readouterr().err
    assert "Ray: joined a running cluster" in said and "grading worker(s) ready" in said, said
    assert broken.exists() and died.exists()
    assert all(outcome.error is None for outcome in outcomes.values()), outcomes
    assert _records(results) == _records(local.results)
    retired = [line for line in said.splitlines() if line.startswith("Grading worker retired")]
    assert len(retired) == 1, said
    assert f"node {os.uname().nodename}" in retired[0] and "(a test's)" in retired[0]
    assert "move to the other workers (1 left)" in retired[0]


def test_where_every_device_fails_the_files_are_grader_errors_not_zeros(address, examples, tmp_path, capsys):
    class Gone(cluster.GradingWorker):
        def __init__(self, *args):
            super().__init__(*args)
            self.stop.set()  # every grading ends at once, as where the GPU has gone

        def device_fault(self):
            return "no CUDA-capable device is detected (a test's)"

    results = tmp_path / "results"
    outcomes = _grade_with(Gone, examples, results, address)
    said = capsys.readouterr().err
    for outcome in outcomes.values():
        assert outcome.record is None and "no usable GPU left" in outcome.error and "no grade" in outcome.error
    assert not list(results.rglob("*.json"))
    assert said.count("Grading worker retired") == 2 and "(0 left)" in said


def failing_gpu_worker(gpu: str, after: int = 1) -> type:
    """A grading worker that, where Ray gave it physical GPU ``gpu`` (its CUDA_VISIBLE_DEVICES),
    breaks that GPU for its children after its first ``after`` gradings: from then on the
    children it starts, and the check of its device, see only a GPU that does not exist (the
    sandbox gives each child the worker's own CUDA_VISIBLE_DEVICES: ``Sandbox._env``,
    ``visible_gpu``). Its gradings fail, the real check (``GradingWorker.device_fault``) fails,
    and the run must retire it. Made in a function, so that Ray sends the class itself to its
    workers (they need not import this file)."""

    class FailingAfter(cluster.GradingWorker):
        def __init__(self, *args):
            super().__init__(*args)
            self.breaks = os.environ.get("CUDA_VISIBLE_DEVICES") == gpu
            self.started = itertools.count()

        def grade(self, module_id, source):
            if self.breaks and next(self.started) >= after:
                os.environ["CUDA_VISIBLE_DEVICES"] = "99"  # no machine has a GPU 99
            return super().grade(module_id, source)

    return FailingAfter


def simulate_failing_gpu(
    submissions: str | Path, results: str | Path, gpu: str = "1", after: int = 1, address: str = "", modules=None
) -> runphase.RunSummary:
    """``python -m grader run SUBMISSIONS --results RESULTS --ray ADDRESS``, but the worker on GPU
    ``gpu`` breaks after ``after`` gradings (``failing_gpu_worker``): for a machine or cluster of
    several GPUs. The run must say that it retired that worker, grade every file on the others,
    and agree with a run without a failing GPU. From the repository's root, with
    ``import sys; sys.path.insert(0, "tests/grade"); import test_cluster`` first:

        test_cluster.simulate_failing_gpu("SUBMISSIONS", "RESULTS", gpu="1", after=1)
    """
    worker = failing_gpu_worker(gpu, after)
    with mock.patch.object(cluster, "grade_pending", functools.partial(cluster.grade_pending, worker=worker)):
        summary = runphase.run(Path(submissions), Path(results), modules, Options(ray=address))
    graded = sum(outcome.record is not None for outcome in summary.outcomes)
    print(f"{graded} file(s) graded, {len(summary.errors)} grader error(s):", file=sys.stderr)
    for outcome in summary.errors:
        first = outcome.submissions[0]
        print(f"  {first.student} {first.module.id}: {outcome.error}", file=sys.stderr)
    return summary


def test_a_private_cluster_offers_a_cpu_per_worker_it_can_start(monkeypatch):
    # cluster's own view of the device only: the rest of the process stays as it is
    monkeypatch.setattr(cluster, "device", types.SimpleNamespace(is_cuda=lambda: False))
    monkeypatch.setattr(cluster.os, "sched_getaffinity", lambda pid: {4, 5, 6})
    assert cluster.private_cpus() == 3  # the cores this process may run on, not the machine's
    import torch

    monkeypatch.setattr(cluster, "device", types.SimpleNamespace(is_cuda=lambda: True))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cluster.private_cpus() == 2  # a worker per GPU

    started = []

    class FakeRay:
        def is_initialized(self):
            return False

        def init(self, address=None, **options):
            if address == "auto":
                raise ConnectionError("no cluster here")
            started.append(options)

    monkeypatch.setattr(cluster, "_ray", lambda: FakeRay())
    assert cluster.connect("") is True
    assert started[0]["num_cpus"] == 2

    class RunningHere(FakeRay):  # a cluster is running on this machine: "auto" would join it
        def init(self, address=None, **options):
            started.append({"address": address, **options})

    monkeypatch.setattr(cluster, "_ray", lambda: RunningHere())
    started.clear()
    assert cluster.connect("") is False and started[0]["address"] == "auto"
    started.clear()
    assert cluster.connect("local") is True  # started its own, without asking for one to join
    assert len(started) == 1 and started[0]["address"] == "local" and started[0]["num_cpus"] == 2


def test_a_gpu_worker_judges_on_its_share_of_the_cores_not_on_the_one_thread_ray_gives_it(monkeypatch):
    """Ray starts an actor of one CPU with OMP_NUM_THREADS=1; the worker of a GPU takes the cores
    it may run on over the GPUs of its node, as the local pool's process has them."""
    monkeypatch.setattr(cluster.os, "sched_getaffinity", lambda pid: set(range(32)))
    assert cluster.worker_threads(2) == 16 and cluster.worker_threads(4) == 8
    assert cluster.worker_threads(0) == 32  # a node Ray counts no GPU on: never a division by zero
    monkeypatch.setattr(cluster.os, "sched_getaffinity", lambda pid: {3})
    assert cluster.worker_threads(8) == 1  # never fewer than one

    class FakeRay:
        def get_runtime_context(self):
            return types.SimpleNamespace(get_node_id=lambda: "b")

        def nodes(self):
            return [{"NodeID": "a", "Resources": {"GPU": 8.0}}, {"NodeID": "b", "Resources": {"GPU": 2.0, "CPU": 2.0}}]

    monkeypatch.setattr(cluster, "_ray", lambda: FakeRay())
    assert cluster._node_gpus() == 2
