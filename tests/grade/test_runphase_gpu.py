"""The run phase on a GPU: a kernel's illegal memory access, endless loop or memory exhaustion fails
one case and leaves the GPU usable for the rest; work on a side stream is judged after a
device-wide sync; performance is graded against the reference in the same run; the kernel trace
names a PyTorch kernel. The tests that time GPU work, or that take all of its memory, are marked
``timed`` (make verify-gpu runs them with the GPU to themselves); the others run beside the rest
of the suite.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from grader.authoring import example_submissions
from grader.core.catalog import find_module
from grader.grade import runphase
from grader.sandbox.isolation import Limits

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.cuda,
]

VECTOR_ADD = find_module("missing-elements/01-vector-add")


def _grade(tmp_path_factory, examples: set[str]) -> runphase.RunSummary:
    root = tmp_path_factory.mktemp("gpu-submissions")
    example_submissions.assemble(root, modules=[VECTOR_ADD], handwritten=False, gpu=True)
    for folder in root.iterdir():
        if folder.name not in examples:
            shutil.rmtree(folder)
    options = runphase.Options(limits=Limits(case_seconds=20, startup_seconds=180))
    return runphase.run(root, tmp_path_factory.mktemp("gpu-results"), [VECTOR_ADD], options, progress=False)


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> runphase.RunSummary:
    """Kernels that fault, graded beside whatever else uses the GPU (their outcome is no timing)."""
    return _grade(tmp_path_factory, {"complete", "illegal-memory-access", "gpu-endless-loop"})


@pytest.fixture(scope="module")
def timed_gpu(tmp_path_factory) -> runphase.RunSummary:
    """Gradings whose outcome rests on timing, or on having all of the GPU's memory to take."""
    return _grade(
        tmp_path_factory, {"complete", "twice-the-work", "side-stream", "gpu-memory-hog", "gpu-work-at-import"}
    )


TIMED_MODULES = [find_module("optimization/02-pipelining"), find_module("optimization/05-advanced-optimizations")]


@pytest.fixture(scope="module")
def timed_around(tmp_path_factory) -> runphase.RunSummary:
    """Slow starting kernels that only look fast: remembered results, or cuBLAS in the timed calls."""
    root = tmp_path_factory.mktemp("timed-around")
    example_submissions.assemble(root, modules=TIMED_MODULES, handwritten=False, gpu=True)
    for folder in root.iterdir():
        if folder.name not in {"complete", "remembers-timed-calls", "swaps-in-cublas"}:
            shutil.rmtree(folder)
    options = runphase.Options(limits=Limits(case_seconds=20, startup_seconds=180))
    return runphase.run(root, tmp_path_factory.mktemp("timed-around-results"), TIMED_MODULES, options, progress=False)


def _record(summary, student: str, module) -> dict:
    assert not summary.errors, "\n".join(str(o.error) for o in summary.errors)
    found = summary.record_for(student, module.id)
    assert found is not None, f"{student} was not graded in {module.id}"
    return found


def _only_case_failing(record: dict, name_prefix: str) -> dict:
    failing = [row for row in record["cases"] if not row["passed"]]
    assert len(failing) == 1 and failing[0]["name"].startswith(name_prefix), failing
    return failing[0]


def test_gpu_illegal_memory_access_fails_one_case_and_the_rest_run_fresh(faults, graded_record):
    record = graded_record(faults, "illegal-memory-access")
    row = _only_case_failing(record, "smaller than a block")
    assert "illegal memory access" in row["message"].lower() or "ended" in row["message"]
    assert record["child_processes"] >= 2
    assert record["performance"]["credit"] == 0.0 and "must pass every case first" in record["performance"]["reason"]


def test_gpu_endless_loop_is_killed_and_the_gpu_stays_usable(faults, graded_record):
    record = graded_record(faults, "gpu-endless-loop")
    row = _only_case_failing(record, "size 1")
    assert "did not return within" in row["message"]
    assert graded_record(faults, "complete")["totals"]["passed"] == record["totals"]["total"]


@pytest.mark.timed
def test_gpu_memory_exhaustion_fails_one_case_and_the_rest_run_fresh(timed_gpu, graded_record):
    record = graded_record(timed_gpu, "gpu-memory-hog")
    row = _only_case_failing(record, "smaller than a block")
    assert "out of memory" in row["message"].lower() or "OutOfMemoryError" in row["message"]


@pytest.mark.timed
def test_gpu_side_stream_work_is_judged_after_a_device_wide_sync(timed_gpu, graded_record):
    record = graded_record(timed_gpu, "side-stream")
    assert record["totals"]["passed"] == record["totals"]["total"]
    assert record["performance"]["graded"] and record["performance"]["credit"] == 0.0


@pytest.mark.timed
def test_gpu_performance_is_graded_against_the_reference_in_the_same_run(timed_gpu, graded_record):
    complete = graded_record(timed_gpu, "complete")["performance"]
    assert complete["graded"] and complete["credit"] == 1.0 and 0.8 < complete["ratio"] < 1.25
    assert "kernel trace" in graded_record(timed_gpu, "complete")["evidence"]
    assert complete["reference_ms"] > 0 and complete["learner_ms"] > 0
    twice = graded_record(timed_gpu, "twice-the-work")["performance"]
    assert 0.35 < twice["ratio"] < 0.65 and 0.0 < twice["credit"] < 1.0, twice


@pytest.mark.timed
def test_gpu_kernels_compile_before_the_gpu_is_held_alone(timed_gpu):
    """The timed children (the submission's, the reference's) call the kernel once while sharing
    the GPU, so that nothing compiles in the exclusive time."""
    profile = next(o.profile for o in timed_gpu.outcomes if o.submissions[0].student == "complete")
    assert profile.seconds.get("compiling", 0) > 0, "Triton's compile listener reported nothing"
    assert profile.seconds.get("compiling alone", 0) == 0, profile.seconds
    assert profile.seconds.get("warm-up", 0) > 0 and profile.seconds.get("timing start", 0) > 0


def test_gpu_kernel_trace_names_the_pytorch_kernel(tmp_path, graded_record):
    root = tmp_path / "submissions"
    example_submissions.assemble(tmp_path / "examples", modules=[VECTOR_ADD])
    shutil.copytree(tmp_path / "examples" / "torch-compute", root / "torch-compute")
    summary = runphase.run(
        root,
        tmp_path / "results",
        [VECTOR_ADD],
        runphase.Options(limits=Limits(case_seconds=20, startup_seconds=180)),
        progress=False,
    )
    record = graded_record(summary, "torch-compute")
    assert "kernel trace" in record["evidence"] and record["integrity"]["violation"] == "torch"
    assert any(
        "not your Triton kernels" in row["message"] and "CUDAFunctor_add" in row["message"]
        for row in record["cases"]
        if row["visibility"] == "public"
    )


@pytest.mark.timed
def test_gpu_work_queued_at_import_does_not_slow_another_grading(timed_gpu, graded_record):
    record = graded_record(timed_gpu, "gpu-work-at-import")
    assert record["totals"]["passed"] == record["totals"]["total"]
    complete = graded_record(timed_gpu, "complete")["performance"]
    assert complete["credit"] == 1.0 and complete["ratio"] > 0.9, complete


@pytest.mark.timed
def test_gpu_timed_calls_are_held_to_the_work_of_a_judged_call(timed_around):
    """A slow kernel cannot buy the speed bar: remembered results and a library kernel in the
    timed calls both withhold the module's points, while the references get full credit."""
    for module in TIMED_MODULES:
        complete = _record(timed_around, "complete", module)
        assert complete["integrity"] is None and complete["performance"]["credit"] == 1.0, complete["performance"]
    remembers = _record(timed_around, "remembers-timed-calls", TIMED_MODULES[0])
    assert remembers["totals"]["passed"] == remembers["totals"]["total"], "every graded case passes"
    assert remembers["integrity"]["violation"] == "timed_skipped" and remembers["totals"]["score"] == 0.0
    assert remembers["performance"]["credit"] == 0.0
    swaps = _record(timed_around, "swaps-in-cublas", TIMED_MODULES[1])
    assert swaps["totals"]["passed"] == swaps["totals"]["total"], "every graded case passes"
    assert swaps["integrity"]["violation"] == "timed_foreign" and swaps["totals"]["score"] == 0.0
    assert "not your Triton kernels" in swaps["performance"]["reason"]
