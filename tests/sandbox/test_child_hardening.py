"""The grader's child against code that reaches beneath the evidence: interpreted kernels that
touch host memory outside their tensors, a monitor switched off for good, PyTorch compute hidden
inside an allowed custom operator, the child's own memory file, and outputs moved into place by
PyTorch where moving data is the exercise. Each is graded through the run phase behind the
policy gate (``Options(policy_gate=False)``), so that the layer under test holds by itself;
the functions beneath are tested in process. A file of its own, so that its grading runs beside
the others.
"""

from __future__ import annotations

import sys
import time

import pytest
import torch
import triton
import triton.language as tl

from grader.authoring import example_submissions
from grader.core import device
from grader.core.catalog import find_module
from grader.core.evidence import ALLOWED_OPS, Monitor, canary, foreign_kernels, judge_evidence
from grader.core.memcheck import BoundsGuard
from grader.grade import runphase
from grader.sandbox.isolation import ChildEnded, GiB, Limits, Sandbox, offers

VECTOR_ADD = find_module("missing-elements/01-vector-add")
TILING = find_module("optimization/01-tiling")
PRODUCTION = find_module("mastery/05-production-ready")
LIMITS = (
    Limits(case_seconds=60, startup_seconds=120)
    if device.is_cuda()
    else Limits(case_seconds=30, startup_seconds=120, memory_bytes=2 * GiB)
)

interpreter_only = pytest.mark.skipif(
    device.is_cuda(), reason="the interpreter's evidence (on a GPU the kernel trace holds these)"
)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

# Pokes at an address from id() while being imported, and swallows the error: the import fails all the same.
POKES_AT_IMPORT = """
import torch
import triton
import triton.language as tl


@triton.jit
def poke_kernel(scratch_ptr, at):
    tl.store(scratch_ptr + at, 0)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


_target = bytearray(64)
_scratch = torch.zeros(1, dtype=torch.int64)
try:
    poke_kernel[(1,)](_scratch, (id(_target) - _scratch.data_ptr()) // 8 + 2)  # the bytearray's size
except Exception:
    pass


def add(x, y):
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
    return out
"""

# A correct add() that first tries to open its own process's memory (and environment): it raises if
# one opens, unless what opens is the /dev/null the sandbox put over it.
OPENS_OWN_MEMORY = """
import os

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def add(x, y):
    for path in ("/proc/self/mem", "/proc/thread-self/mem", f"/proc/self/task/{os.getpid()}/mem",
                 f"/proc/{os.getpid()}/mem", "/proc/self/environ"):
        try:
            fd = os.open(path, os.O_RDWR if path.endswith("mem") else os.O_RDONLY)
        except OSError:
            continue  # refused
        if os.fstat(fd).st_rdev != os.makedev(1, 3):  # anything but /dev/null over it
            raise RuntimeError(f"opened {path}: {os.fstat(fd)}")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
    return out
"""

EXAMPLES = {
    "pokes-host-memory": VECTOR_ADD,
    "patches-monitor": VECTOR_ADD,
    "custom-op-compute": PRODUCTION,
    "transpose-by-view": TILING,
}
INLINE = {"pokes-at-import": POKES_AT_IMPORT, "opens-own-memory": OPENS_OWN_MEMORY}


@pytest.fixture(scope="module")
def hardened(tmp_path_factory, platform_protections) -> runphase.RunSummary:
    tmp = tmp_path_factory.mktemp("hardening")
    root, results = tmp / "submissions", tmp / "results"
    for name, module in EXAMPLES.items():
        folder = root / name / module.track / module.slug
        folder.mkdir(parents=True)
        (folder / "kernel.py").write_text(
            example_submissions.kernel_source(example_submissions.HANDWRITTEN / name / module.track / module.slug)
        )
    for name, source in INLINE.items():
        folder = root / name / VECTOR_ADD.track / VECTOR_ADD.slug
        folder.mkdir(parents=True)
        (folder / "kernel.py").write_text(source)
    options = runphase.Options(
        limits=LIMITS, policy_gate=False, allow_unsafe=not offers(platform_protections, "processes")
    )
    summary = runphase.run(root, results, [VECTOR_ADD, TILING, PRODUCTION], options, progress=False)
    assert not summary.errors, "\n".join(str(o.error) for o in summary.errors)
    return summary


def _record(summary, student: str, module) -> dict:
    record = summary.record_for(student, module.id)
    assert record is not None, f"{student} was not graded"
    return record


def _messages(record: dict) -> list[str]:
    return [row["message"] for row in record["cases"] if row["visibility"] == "public"]


# --- 1. interpreted kernels stay inside their launch's tensors -------------------------------


@linux_only
@interpreter_only
def test_a_kernel_that_pokes_host_memory_during_a_call_is_stopped_with_its_line(hardened):
    record = _record(hardened, "pokes-host-memory", VECTOR_ADD)
    assert record["totals"]["passed"] == 0 and record["totals"]["score"] == 0.0
    for message in _messages(record):
        assert message.startswith("The grader stopped add(): load at line 31 of kernel.py (kernel forget_kernel)"), (
            message
        )
        assert "A kernel may touch only the tensors passed to its launch" in message


@linux_only
@interpreter_only
def test_a_kernel_that_pokes_host_memory_at_import_fails_the_import_even_if_the_error_is_caught(hardened):
    record = _record(hardened, "pokes-at-import", VECTOR_ADD)
    assert record["totals"]["score"] == 0.0
    assert record["load_error"].startswith(
        "kernel.py launched a kernel while being imported, and the grader "
        "stopped it: store at line 9 of kernel.py (kernel poke_kernel)"
    )


@interpreter_only
def test_the_guard_refuses_an_access_outside_the_launch_and_lets_the_calls_tensors_through():
    guard = BoundsGuard().install()
    try:
        target, scratch = bytearray(64), torch.zeros(1, dtype=torch.int64)
        with pytest.raises(Exception):  # noqa: B017 (whatever the interpreter raises for a refused access)
            _poke[(1,)](scratch, (id(target) - scratch.data_ptr()) // 8 + 2)
        assert guard.take_fault().kind == "out-of-bounds" and len(target) == 64
        # A pointer table may reach the call's own tensors, and only while the call runs.
        x = torch.arange(8.0)
        table, out = torch.tensor([x.data_ptr()], dtype=torch.int64), torch.empty(8)
        guard.call(lambda: _gather[(1,)](table, out, BLOCK=8), (x,), {})()
        assert torch.equal(out, x) and guard.take_fault() is None
        with pytest.raises(Exception):  # noqa: B017 (as above)
            _gather[(1,)](table, out, BLOCK=8)
        assert guard.take_fault() is not None
    finally:
        guard.uninstall()


@triton.jit
def _poke(scratch_ptr, at):
    tl.store(scratch_ptr + at, 0)


@triton.jit
def _gather(table_ptr, out_ptr, BLOCK: tl.constexpr):
    source = tl.load(table_ptr).to(tl.pointer_type(tl.float32))
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(source + offsets))


@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


# --- 2. a monitor left switched off -----------------------------------------------------------


@linux_only
@interpreter_only
def test_a_monitor_whose_report_was_replaced_fails_the_canary(hardened):
    record = _record(hardened, "patches-monitor", VECTOR_ADD)
    assert record["integrity"]["violation"] == "tampered" and record["totals"]["score"] == 0.0
    for message in _messages(record):
        assert message.startswith("the grader's monitor was tampered with"), message


def test_the_canary_sees_a_working_monitor_and_not_a_blinded_one():
    monitor = Monitor()
    seen = canary(monitor)
    assert seen() and seen() and seen()
    monitor.report = lambda: {"launches": 1, "ops": {}, "escapes": []}  # a forged report
    assert not seen()
    del monitor.report
    assert seen()
    monitor.watching = lambda fn, allowed_ops=ALLOWED_OPS: fn  # never starts afresh, never logs
    assert not seen() and not seen()


def test_a_report_without_its_canary_is_judged_as_tampering():
    clean = {"launches": 1, "ops": {}, "escapes": []}
    assert judge_evidence("add", {**clean, "canary": True}, True) is None
    kind, message = judge_evidence("add", {**clean, "canary": False}, True)
    assert kind == "tampered" and message.startswith("the grader's monitor was tampered with")
    assert judge_evidence("add", clean, True) is None  # make check's own monitor has no canary


# --- 3. operators inside allowed custom operators ---------------------------------------------


@linux_only
@interpreter_only
def test_pytorch_compute_inside_an_allowed_custom_operator_is_logged(hardened):
    record = _record(hardened, "custom-op-compute", PRODUCTION)
    assert record["integrity"]["violation"] == "torch" and record["totals"]["score"] == 0.0
    forward = [m for m in _messages(record) if m.startswith("layer_norm_gelu() computed with PyTorch")]
    assert forward and all("aten.native_layer_norm" in m or "aten.gelu" in m for m in forward), _messages(record)


@torch.library.custom_op("hardening_test::adds_inside", mutates_args=())
def _adds_inside(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.add(x, y)


@_adds_inside.register_fake
def _(x, y):
    return torch.empty_like(x)


def test_the_log_sees_the_operators_a_custom_operator_runs_inside():
    monitor = Monitor()
    x = torch.ones(4)
    watched = monitor.watching(lambda: _adds_inside(x, x), ALLOWED_OPS | {"adds_inside"})
    assert torch.equal(watched(), torch.full((4,), 2.0))
    assert monitor.report()["ops"] == {"add": 1}
    leaf = torch.ones(4, requires_grad=True)  # through the custom op's autograd too
    monitor.watching(lambda: _adds_inside(leaf, leaf), ALLOWED_OPS | {"adds_inside"})()
    assert monitor.report()["ops"] == {"add": 1}


# --- 4. the child's own memory file -----------------------------------------------------------


@linux_only
def test_the_child_cannot_open_its_own_memory(hardened):
    record = _record(hardened, "opens-own-memory", VECTOR_ADD)
    protections = record["protections"]
    assert "own_memory" in protections
    if not protections["own_memory"].startswith("/dev/null over") and "non-dumpable" not in protections["own_memory"]:
        pytest.skip(f"nothing keeps the child out of its own memory here: {protections['own_memory']}")
    if "runs as root" in protections["own_memory"] and not protections["own_memory"].startswith("/dev/null"):
        pytest.skip("the child runs as root without a private view")
    assert record["totals"]["passed"] == record["totals"]["total"], _messages(record)


@linux_only
def test_the_memory_file_is_covered_even_for_a_process_that_stays_dumpable(platform_protections):
    if not offers(platform_protections, "view"):
        pytest.skip("no private view on this platform: nothing to cover the file with")
    script = (
        "import ctypes, os; x = ctypes.c_long(12345); fd = os.open('/proc/self/mem', os.O_RDWR); "
        "print('read', os.pread(fd, 8, ctypes.addressof(x)), os.major(os.fstat(fd).st_rdev))"
    )
    with Sandbox(allow_unsafe=True) as sandbox, sandbox.slot() as slot:
        child = sandbox.start(slot, {}, ["-S", "-c", script], {}, 1, "token")
        try:
            protections = sandbox.wait_sandbox(child)
            with pytest.raises(ChildEnded):
                child.next_event(time.monotonic() + 30)
            output = child.log_tail()
        finally:
            child.close()
    assert protections["own_memory"].startswith("/dev/null over /proc/1/mem"), protections
    assert "read b'' 1" in output, output  # /dev/null (major 1): nothing of the process


# --- 5. outputs moved into place by PyTorch ---------------------------------------------------


@linux_only
@interpreter_only
def test_a_transpose_moved_by_pytorch_gets_no_points(hardened):
    record = _record(hardened, "transpose-by-view", TILING)
    assert record["integrity"]["violation"] == "moved" and record["totals"]["score"] == 0.0
    rows = [row for row in record["cases"] if row["visibility"] == "public"]
    # Its input checks are the reference's: the refusals pass, and count nothing (the stub passes them too).
    transposes = [row for row in rows if not row["name"].startswith("matmul: ") and ": refuses " not in row["name"]]
    assert transposes and not any(row["passed"] for row in transposes)
    for row in transposes:
        assert row["message"].startswith(
            "transpose() returned values that no Triton kernel of yours stored "
            "(output): the output must be written by your kernel's tl.store"
        ), row
    assert all(row["passed"] for row in rows if row["name"].startswith("matmul: "))


@interpreter_only
def test_the_guard_names_outputs_no_store_wrote_and_lets_zeros_be():
    guard = BoundsGuard().install()
    try:
        x = torch.arange(1.0, 11.0)

        def stored(x):
            out = torch.empty_like(x)
            _copy[(1,)](x, out, 10, BLOCK=16)
            return out

        def copied(x):
            stored(x)
            return x.clone()

        def partly_zero(x):  # the kernel writes the first half; the rest stays as torch.zeros made it
            out = torch.zeros(20)
            _copy[(1,)](x, out, 10, BLOCK=16)
            return out, out.view(4, 5).t()

        for fn, expected in ((stored, []), (copied, [0]), (partly_zero, [])):
            result = guard.call(fn, (x,), {})(x)
            assert guard.unwritten(result if isinstance(result, tuple) else (result,)) == expected, fn.__name__
    finally:
        guard.uninstall()


class _Spec:
    output_names = ("output",)

    def __init__(self, moves_data: bool):
        self.kernel_writes_outputs = moves_data


def test_a_spec_that_moves_data_counts_a_copy_kernel_as_not_the_submissions_work():
    trace = ["transpose_kernel", "void at::native::direct_copy_kernel_cuda(...)", "Memset (Device)"]
    assert foreign_kernels(trace, {"transpose_kernel"}) == []
    assert foreign_kernels(trace, {"transpose_kernel"}, moves_data=True) == [trace[1]]
    report = {"launches": 1, "ops": {}, "escapes": [], "kernels": trace}
    assert judge_evidence("transpose", report, True, {"transpose_kernel"}, _Spec(False)) is None
    kind, message = judge_evidence("transpose", report, True, {"transpose_kernel"}, _Spec(True))
    assert kind == "moved" and "copy kernels" in message and "tl.store" in message
    interpreted = {"launches": 1, "ops": {}, "escapes": [], "unwritten_by_kernel": [0]}
    assert judge_evidence("transpose", interpreted, True, None, _Spec(False)) is None
    kind, message = judge_evidence("transpose", interpreted, True, None, _Spec(True))
    assert kind == "moved" and message.startswith(
        "transpose() returned values that no Triton kernel of yours stored (output)"
    )
