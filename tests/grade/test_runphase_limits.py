"""The run phase's limits: a case's time limit, a module's CPU-time budget, a kernel that crashes on
every call, and a run stopped by SIGKILL or Ctrl-C.

These are the only tests of the run phase whose outcome depends on time limits: each grades its
own small set of submissions with a short limit and a small budget, far from what a correct call
needs. A file of its own (as are the crashes that surface late, test_runphase_crashes.py), so
that these gradings run beside test_runphase.py's.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from grader.authoring import example_submissions
from grader.core import device
from grader.core.catalog import REPO_ROOT, find_module
from grader.grade import judging, runphase
from grader.sandbox.isolation import GiB, Limits, offers

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.heavy,
]

VECTOR_ADD = find_module("missing-elements/01-vector-add")
# The endless loop's limit: above the 1.5-2 CPU-seconds that a process's first call takes under
# the interpreter, which is as far as the kernel that crashes on every call gets.
ENDLESS_LIMITS = Limits(case_seconds=20 if device.is_cuda() else 5, startup_seconds=120, memory_bytes=1 * GiB)
# The module's CPU-time budget for the endless loop and the kernel that crashes on every call: a
# few processes' worth (a child spends about 3 CPU-seconds importing torch and Triton).
SMALL_BUDGET = 120 if device.is_cuda() else 40


# A kernel that stores far outside its tensor: under the interpreter every call dies of SIGSEGV.
# The interpreter's bounds guard refuses a stray store before it happens, so the crash comes from
# reading address 0 through ctypes (graded behind the policy gate, which refuses `import ctypes`;
# a signal sent to itself would not do: the child is the first process of its PID namespace).
CRASHES_EVERY_CALL = """
import ctypes

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
    ctypes.string_at(0)
    return out
"""


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory, platform_protections) -> runphase.RunSummary:
    """An endless loop and a kernel that crashes on every call, under the whole grader, with a
    short case limit and a module budget of a few processes."""
    tmp = tmp_path_factory.mktemp("budgeted")
    example_submissions.assemble(tmp / "examples", modules=[VECTOR_ADD])
    shutil.copytree(tmp / "examples" / "endless-loop", tmp / "submissions" / "endless-loop")
    crasher = tmp / "submissions" / "crashes-every-call" / VECTOR_ADD.track / VECTOR_ADD.slug
    crasher.mkdir(parents=True)
    (crasher / "kernel.py").write_text(CRASHES_EVERY_CALL)
    # Public and hidden children side by side, as on a GPU: together they must stay in the budget.
    options = runphase.Options(
        workers=2,
        limits=ENDLESS_LIMITS,
        module_seconds=SMALL_BUDGET,
        side_by_side=True,
        allow_unsafe=not offers(platform_protections, "processes"),
        policy_gate=False,
    )
    started = time.monotonic()
    summary = runphase.run(tmp / "submissions", tmp / "results", [VECTOR_ADD], options, progress=False)
    summary.seconds = time.monotonic() - started
    assert not summary.errors, "\n".join(str(o.error) for o in summary.errors)
    return summary


def _budget_named(row: dict) -> bool:
    return f"time budget ({SMALL_BUDGET:g} s of CPU time" in row["message"]


def _within_budget(record: dict) -> None:
    # A step is stopped where the budget runs out; a dead child's last second may go unseen.
    assert record["cpu_seconds"] == {"budget": SMALL_BUDGET, "spent": record["cpu_seconds"]["spent"]}
    assert record["cpu_seconds"]["spent"] <= SMALL_BUDGET + 2


def test_an_endless_loop_is_stopped_at_the_time_limit_until_the_budget_is_spent(budgeted):
    record = budgeted.record_for("endless-loop", VECTOR_ADD.id)
    public = [row for row in record["cases"] if row["visibility"] == "public"]
    hidden = [row for row in record["cases"] if row["visibility"] == "hidden"]
    first, second, *rest = public
    assert not first["passed"] and f"did not return within {ENDLESS_LIMITS.case_seconds:g} s" in first["message"]
    assert record["totals"]["passed"] == 0 and record["integrity"] is None
    assert second["message"].startswith(f"{VECTOR_ADD.api[0]}() did not return within")
    # Each case gets a fresh process until the budget is spent; hidden cases get their share.
    for row in rest + hidden:
        assert row["kind"] == "timeout" or (row["kind"] == "not_run" and _budget_named(row)), row
    assert rest[-1]["kind"] == "not_run" and hidden[0]["kind"] == "timeout", record["cases"]
    assert hidden[-1]["message"].startswith("Hidden case not run: the module's time budget")
    _within_budget(record)
    # The profile says where the wall time went: into calls that their time limit ended.
    outcome = next(o for o in budgeted.outcomes if o.submissions[0].student == "endless-loop")
    assert outcome.profile.seconds.get("stopped calls", 0.0) >= 2 * ENDLESS_LIMITS.case_seconds


def test_a_kernel_that_crashes_on_every_call_is_graded_within_the_budget(budgeted):
    if device.is_cuda():
        pytest.skip("on a GPU the store is an illegal memory access, reported by the child itself")
    record = budgeted.record_for("crashes-every-call", VECTOR_ADD.id)
    rows = record["cases"]
    assert record["totals"]["passed"] == 0 and record["integrity"] is None and record["load_error"] is None
    for row in rows:  # each case that ran crashed alone, in a process of its own
        assert row["kind"] == "crash" or (row["kind"] == "not_run" and _budget_named(row)), row
    crashed = [row for row in rows if row["kind"] == "crash"]
    assert crashed[0] is rows[0] and "ended by SIGSEGV" in rows[0]["message"]
    assert "check every mask" in rows[0]["message"]
    assert [row for row in crashed if row["visibility"] == "hidden"], "the hidden cases got no share"
    for row in crashed:
        if row["visibility"] == "hidden":
            # the crash is the submission's doing: a hidden case says only that it failed
            assert row["message"] == judging.HIDDEN_FAILED.format(api="add")
    # One process per case (the first case's repeat needs none), and perhaps one per visibility
    # that the budget stopped while importing.
    assert len(crashed) <= record["child_processes"] <= len(crashed) + 2
    _within_budget(record)
    assert budgeted.seconds < 10 * SMALL_BUDGET


def test_an_interrupted_run_keeps_its_records(tmp_path, platform_protections):
    root, results = tmp_path / "submissions", tmp_path / "results"
    examples = tmp_path / "examples"
    example_submissions.assemble(examples, modules=[VECTOR_ADD])
    shutil.copytree(examples / "complete", root / "a-complete")
    shutil.copytree(examples / "endless-loop", root / "b-endless-loop")
    command = [
        sys.executable,
        "-m",
        "grader",
        "run",
        str(root),
        "--results",
        str(results),
        "--module",
        VECTOR_ADD.id,
        "--workers",
        "1",
        "--case-timeout",
        "30" if device.is_cuda() else "3",
        "--quiet",
    ]
    if not offers(platform_protections, "processes"):
        command.append("--allow-unsafe")
    grader = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    folder = results / "records" / VECTOR_ADD.track / VECTOR_ADD.slug
    deadline = time.monotonic() + 120
    while not list(folder.glob("*.json")) and time.monotonic() < deadline and grader.poll() is None:
        time.sleep(0.1)
    grader.send_signal(signal.SIGKILL)  # the harshest interruption, while b-endless-loop runs
    grader.wait()
    written = list(folder.glob("*.json"))
    assert len(written) == 1, grader.stdout.read().decode()
    assert json.loads(written[0].read_text())["totals"]["passed"] > 0  # a-complete's, complete

    # The re-run grades b-endless-loop anew, whatever its record then says: a budget of a few
    # CPU-seconds ends it during its first child's start or first case (only the reuse is tested).
    options = runphase.Options(
        workers=1,
        limits=Limits(case_seconds=3, startup_seconds=60),
        module_seconds=4,
        allow_unsafe=not offers(platform_protections, "processes"),
    )
    summary = runphase.run(root, results, [VECTOR_ADD], options, progress=False)
    assert [o.reused for o in sorted(summary.outcomes, key=lambda o: o.submissions[0].student)] == [True, False]
    assert summary.record_for("a-complete", VECTOR_ADD.id)["totals"]["passed"] > 0
    assert summary.record_for("b-endless-loop", VECTOR_ADD.id)["totals"]["passed"] == 0


# The grader, made to wait an hour for its workers after Ctrl-C: a stop that sits out that wait
# (a worker that does not end, or a queued file taken for a busy one) fails the test's own wait.
PATIENT = """
import runpy
from grader.grade import runphase
runphase.STOP_SECONDS = 3600
"""
RUN_GRADER = 'runpy.run_module("grader", run_name="__main__")\n'

# Ctrl-C as the kernel may deliver it: to any thread of the process, here a grading worker's.
CTRL_C_TO_A_WORKER = """
import signal, sys, threading, time
from pathlib import Path
from grader.cli import main

def aim():
    records = Path(sys.argv[sys.argv.index("--results") + 1]) / "records"
    while not list(records.rglob("*.json")):
        time.sleep(0.2)
    time.sleep(2)
    worker = next(t for t in threading.enumerate() if t.name.startswith("grading-worker"))
    signal.pthread_kill(worker.ident, signal.SIGINT)

threading.Thread(target=aim, daemon=True).start()
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "to_a_worker, ignored_at_start",
    [(False, False), (True, False), (False, True)],
    ids=["to-the-process", "to-a-worker-thread", "ignored-when-started"],
)
def test_ctrl_c_stops_a_run_promptly_and_keeps_its_records(
    tmp_path, platform_protections, to_a_worker, ignored_at_start
):
    """Ctrl-C stops a run within seconds, keeping its records: whichever thread the signal
    reaches, and even when the grader was started with SIGINT ignored (as a script's background
    job is)."""
    root, results = tmp_path / "submissions", tmp_path / "results"
    example_submissions.assemble(tmp_path / "examples", modules=[VECTOR_ADD])
    shutil.copytree(tmp_path / "examples" / "complete", root / "a-complete")
    shutil.copytree(tmp_path / "examples" / "endless-loop", root / "b-endless-loop")
    arguments = [
        "run",
        str(root),
        "--results",
        str(results),
        "--module",
        VECTOR_ADD.id,
        "--workers",
        "1",
        "--case-timeout",
        "600",
        "--quiet",
    ]
    if not offers(platform_protections, "processes"):
        arguments.append("--allow-unsafe")
    launcher = [sys.executable, "-c", PATIENT + (CTRL_C_TO_A_WORKER if to_a_worker else RUN_GRADER)]
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored_at_start else None
    grader = subprocess.Popen(
        launcher + arguments,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=ignore,
    )
    folder = results / "records" / VECTOR_ADD.track / VECTOR_ADD.slug
    if not to_a_worker:
        deadline = time.monotonic() + 300
        while not list(folder.glob("*.json")) and time.monotonic() < deadline and grader.poll() is None:
            time.sleep(0.2)
        time.sleep(2)  # b-endless-loop is running now, with 600 s to go
        grader.send_signal(signal.SIGINT)
    try:  # a stop takes a second or two; the limit is far from that, and far from the case's 600 s
        output, _ = grader.communicate(timeout=runphase.STOP_SECONDS + (480 if to_a_worker else 180))
    except subprocess.TimeoutExpired:
        grader.send_signal(signal.SIGUSR1)  # where each thread is (python -m grader registers it)
        time.sleep(2)
        grader.kill()
        pytest.fail("the run did not end after Ctrl-C:\n" + grader.communicate()[0])
    assert grader.returncode == 130 and "Records written so far are kept" in output, output
    assert "did not stop" not in output  # every worker ended its child (see exit_if_workers_linger)
    assert len(list(folder.glob("*.json"))) == 1


LINGERING_WORKER = """
import threading, time
from grader.grade import runphase
threading.Thread(target=time.sleep, args=(600,), name="grading-worker_0").start()
runphase.exit_if_workers_linger(7)
"""


def test_a_stopped_run_does_not_wait_for_a_lingering_worker():
    """After Ctrl-C, a worker still busy when the process would exit is not waited for: the process
    ends at once with the code given, and says where each thread was."""
    done = subprocess.run(
        [sys.executable, "-c", LINGERING_WORKER], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 7, done.stderr
    assert "1 worker(s) did not stop" in done.stderr
    assert "Thread 0x" in done.stderr  # faulthandler's dump of the threads
