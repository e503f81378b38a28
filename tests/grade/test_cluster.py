"""The run phase on a Ray cluster (grader/grade/cluster.py), with a real local cluster of 2 CPUs:
the same records as the local pool, a worker that dies is replaced and its task tried once more,
what a worker sends back is checked by the driver, and without Ray the local pool grades.

About a minute and a half on 2 CPU cores. Nothing here depends on how long anything takes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
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
        "total": 2.0,
    }
    graded = cluster.accept(json.loads(json.dumps(answer)), VECTOR_ADD, source)
    assert graded.children == 2 and graded.profile.seconds == {"cases": 1.5} and graded.profile.total == 2.0
    spoil(answer)
    with pytest.raises(ValueError, match=words):
        cluster.accept(answer, VECTOR_ADD, source)


def test_without_ray_the_local_pool_grades_and_says_how_to_enable_it(local):
    assert not local.summary.errors and local.summary.children_started > 0
    assert "pip install -e '.[cluster]'" in local.said and "grades on this machine" in local.said.replace("\n", " ")
    assert len(_records(local.results)) == 2
