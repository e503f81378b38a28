"""The run phase's crash bookkeeping: a crash that surfaces a case or two after the call that caused
it (or only when the process exits) is blamed on that call, or on none, with a note; missing masks
are blamed on a partial block. A file of its own, so that this grading runs beside the others.
"""

from __future__ import annotations

import math
import re
import shutil
import sys

import pytest

from grader.authoring import example_submissions
from grader.core import cases, device
from grader.core.catalog import find_module
from grader.grade import record as feedback
from grader.grade import runphase
from grader.policy import check_source, policy_for
from grader.sandbox.isolation import GiB, Limits, offers

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.heavy,
]

VECTOR_ADD = find_module("missing-elements/01-vector-add")
# Far beyond what a correct call needs, for the kernels that crash after a correct result.
LIMITS = (
    Limits(case_seconds=60, startup_seconds=120)
    if device.is_cuda()
    else Limits(case_seconds=30, startup_seconds=120, memory_bytes=1 * GiB)
)


def _by_name(record: dict) -> dict[str, dict]:
    return {row["name"]: row for row in record["cases"]}


# Correct results, but the call on 7 elements "damages" the process the way an unmasked store
# corrupts the heap: it aborts a call or two later, or when it exits. (Behind the gate: atexit,
# os.) The sandboxed child is its PID namespace's first process, which ignores a SIGABRT it sends
# itself: abort() then ends in a fault, so the record says SIGSEGV.
CRASHES_LATER = """
import atexit
import os

import torch
import triton
import triton.language as tl

damage = []


@atexit.register
def surface():
    if damage and SURFACES_AT_EXIT:
        os.abort()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def add(x, y):
    if damage:
        damage.append(x.numel())
        if len(damage) > LATER:
            os.abort()
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
    if x.numel() == 7:
        damage.append(7)
    return out
"""


@pytest.fixture(scope="module")
def crashing(tmp_path_factory, platform_protections) -> runphase.RunSummary:
    """Kernels whose crashes surface after the case that caused them, behind the gate (the
    deterministic ones need os.abort) with the usual limits and budget."""
    tmp = tmp_path_factory.mktemp("crashing")
    root, results = tmp / "submissions", tmp / "results"
    example_submissions.assemble(tmp / "examples", modules=[VECTOR_ADD])
    shutil.copytree(tmp / "examples" / "missing-masks", root / "missing-masks")
    # "smaller than a block" damages; the crash surfaces two cases later, and at exit.
    # "-alone-never": it surfaces one case later and never alone, at exit.
    for name, later, at_exit in (("crashes-later", 2, True), ("crashes-later-alone-never", 1, False)):
        folder = root / name / VECTOR_ADD.track / VECTOR_ADD.slug
        folder.mkdir(parents=True)
        (folder / "kernel.py").write_text(f"LATER = {later}\nSURFACES_AT_EXIT = {at_exit}\n{CRASHES_LATER}")
    # The public and hidden children side by side, as on a GPU (where PID namespaces allow it):
    # the crash bookkeeping must come out the same when both run at once.
    options = runphase.Options(
        limits=LIMITS, policy_gate=False, side_by_side=True, allow_unsafe=not offers(platform_protections, "processes")
    )
    summary = runphase.run(root, results, [VECTOR_ADD], options, progress=False)
    assert not summary.errors, "\n".join(str(o.error) for o in summary.errors)
    return summary


def _size(case_name: str) -> int:
    return eval(re.search(r"shape=(\([^)]*\))", case_name).group(1), {}, {})


@pytest.mark.skipif(device.is_cuda(), reason="on a GPU an unmasked access is reported by the child, not refused")
def test_missing_masks_are_refused_at_the_access_on_a_partial_block_and_every_hidden_case_runs(crashing, graded_record):
    # Under the interpreter the child's bounds guard (grader.core.memcheck.BoundsGuard) refuses a
    # load or store past the end before it happens: the case fails at once, the line and the mask
    # named, where the stray access used to crash the process a case or more later.
    record = graded_record(crashing, "missing-masks")
    example = example_submissions.HANDWRITTEN / "missing-masks" / VECTOR_ADD.track / VECTOR_ADD.slug
    source = (example / "kernel.py").read_text()
    assert not check_source(source, policy_for(cases.public(VECTOR_ADD)[0]))  # an honest bug
    rows = _by_name(record)
    public = [row for row in record["cases"] if not row["passed"] and row["visibility"] == "public"]
    assert public and not any(row["kind"] == "crash" for row in record["cases"]), record["cases"]
    for row in public:
        assert math.prod(_size(row["name"])) % 1024, row["name"]
        assert row["message"].startswith("The grader stopped add(): load at line "), row["message"]
        assert "bytes past the end of `" in row["message"] and "check the mask of this access" in row["message"]
    one_block = next(name for name in rows if name.startswith("exactly one block"))
    assert rows[one_block]["passed"], rows[one_block]
    assert all(row["kind"] not in ("not_run", "load") for row in record["cases"]), record["cases"]
    text, _ = feedback.part_report(record, "public", 4)
    assert "check the mask of this access" in text and "FAIL  exactly one block" not in text


def test_a_crash_that_surfaces_later_is_blamed_on_the_case_that_caused_it(crashing, graded_record):
    record = graded_record(crashing, "crashes-later")
    [failed] = [row for row in record["cases"] if not row["passed"]]
    assert failed["name"].startswith("smaller than a block") and failed["kind"] == "crash"
    assert re.match(r"add\(\) returned, but then the process running it ended by SIG(ABRT|SEGV)", failed["message"])
    assert "check every mask" in failed["message"] and record["note"] is None
    assert record["totals"]["hidden"]["passed"] == record["totals"]["hidden"]["total"]
    assert "alone, after a crash" in crashing.log_for("crashes-later", VECTOR_ADD.id)


def test_a_crash_that_no_case_causes_alone_blames_none_and_is_noted(crashing, graded_record):
    record = graded_record(crashing, "crashes-later-alone-never")
    assert record["totals"]["passed"] == record["totals"]["total"], record["cases"]
    assert re.match(r"Note: a process that ran several cases in a row ended by SIG(ABRT|SEGV)", record["note"])
    assert "check every mask" in record["note"] and record["note"] in record["summary"]
    assert record["note"] in feedback.part_report(record, "public", 4)[0]


def test_an_error_before_a_memory_crash_is_called_its_probable_consequence():
    from grader.grade.endings import crash_verdict
    from grader.grade.judging import Verdict
    from grader.sandbox.process import ChildEnded

    raised = Verdict(False, "error", "add() raised TypeError: new_empty(): argument 'size' must be tuple of ints")
    verdict = crash_verdict("add", ChildEnded("was killed by SIGSEGV", -11), raised)
    assert "probably a consequence of the memory error" in verdict.message and "make check" in verdict.message
    ended_cleanly = crash_verdict("add", ChildEnded("exited with code 3", 3), raised)
    assert "consequence" not in ended_cleanly.message
