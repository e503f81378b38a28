"""The memory checker under the interpreter: each kind of bug is found with its line, program,
lane and tensor, and correct kernels (stores of equal values, atomics, pointer tables, tensors
filled before they are read) give no finding."""

import pytest
import torch
import triton
import triton.language as tl

from grader.core import checks, device, memcheck
from grader.core.memcheck import MemoryChecker, MemoryFault

pytestmark = pytest.mark.skipif(
    device.is_cuda(), reason="the memory checker watches the interpreter; on a GPU compute-sanitizer does its job"
)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EXTRA: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x, mask=offs < n + EXTRA)  # EXTRA > 0: one store too many


@triton.jit
def shifted_load_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs - SHIFT, mask=offs < n)
    tl.store(out_ptr + offs, x, mask=offs < n)


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ATOMIC: tl.constexpr, SAME: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    total = tl.sum(x, axis=0)
    if SAME:
        total = total * 0.0 + 1.0  # every program stores 1.0: harmless
    if ATOMIC:
        tl.atomic_add(out_ptr, total)
    else:
        tl.store(out_ptr, total)


@triton.jit
def bytes_as_floats_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load((x_ptr.to(tl.pointer_type(tl.int8)) + offs * 2 + 1).to(tl.pointer_type(tl.float32)))
    tl.store(out_ptr + offs, x)


@triton.jit
def table_kernel(addresses, out_ptr, BLOCK: tl.constexpr):
    which = tl.program_id(0)
    ptr = tl.load(addresses + which).to(tl.pointer_type(tl.float32))
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + which * BLOCK + offs, tl.load(ptr + offs))


def _fault(call) -> memcheck.Finding:
    with pytest.raises(MemoryFault) as fault:
        with MemoryChecker():
            call()
    return fault.value.finding


def test_a_store_past_the_end_is_refused_with_line_program_lane_and_tensor():
    x, out = torch.randn(1000), torch.zeros(1000)
    finding = _fault(lambda: copy_kernel[(8,)](x, out, 1000, BLOCK=128, EXTRA=1))
    assert (finding.kind, finding.program, finding.lane, finding.tensor) == ("out-of-bounds", (7,), (104,), "out_ptr")
    assert finding.line == copy_kernel.fn.__code__.co_firstlineno + 4
    assert "4 bytes past the end of `out_ptr` (1000 elements of 4 bytes)" in str(finding)
    assert f"store at line {finding.line} of test_memcheck.py" in str(finding)


@triton.jit
def unmasked_copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def test_a_program_wholly_outside_points_at_its_start_or_the_grid_not_at_the_mask():
    x, out = torch.randn(256), torch.zeros(256)
    finding = _fault(lambda: unmasked_copy_kernel[(3,)](x, out, BLOCK=128))  # one program too many
    assert finding.program == (2,) and "every lane of this program's access is outside" in str(finding)
    assert "a grid larger than the data" in str(finding) and "check the mask" not in str(finding)
    tail = _fault(lambda: copy_kernel[(8,)](torch.randn(1000), torch.zeros(1000), 1000, BLOCK=128, EXTRA=1))
    assert "check the mask of this access" in str(tail)  # some lanes inside: the mask


def test_a_load_before_the_start_is_refused():
    x, out = torch.randn(64), torch.zeros(64)
    finding = _fault(lambda: shifted_load_kernel[(1,)](x, out, 64, SHIFT=3, BLOCK=64))
    assert finding.kind == "out-of-bounds" and finding.lane == (0,)
    assert "12 bytes before the start of `x_ptr`" in str(finding)


def test_a_view_is_bounded_by_its_own_elements_not_its_storage():
    base = torch.randn(200)
    x, out = base[50:100], torch.zeros(51)
    finding = _fault(lambda: copy_kernel[(1,)](out, x, 50, BLOCK=64, EXTRA=1))  # stores 51 into a 50-view
    assert "past the end of `out_ptr` (50 elements" in str(finding) and "someone else's data" in str(finding)


def test_a_misaligned_access_is_refused():
    x, out = torch.randn(64), torch.zeros(16)
    finding = _fault(lambda: bytes_as_floats_kernel[(1,)](x, out, BLOCK=16))
    assert finding.kind == "misaligned" and "not a multiple of the element size (4 bytes)" in str(finding)


def test_a_race_between_programs_is_reported_once_and_equal_values_or_atomics_are_not():
    x = torch.randn(1000)
    with MemoryChecker() as checker:
        sum_kernel[(8,)](x, torch.zeros(1), 1000, BLOCK=128, ATOMIC=False, SAME=False)
    (race,) = checker.findings
    assert race.kind == "race" and race.program == (1,) and "program (0,) already stored" in str(race)
    for atomic, same in [(True, False), (False, True)]:
        with MemoryChecker() as checker:
            sum_kernel[(8,)](x, torch.zeros(1), 1000, BLOCK=128, ATOMIC=atomic, SAME=same)
        assert checker.findings == []


def test_reading_a_tensor_from_torch_empty_before_anything_writes_it_is_reported():
    x = torch.randn(1000)
    with MemoryChecker() as checker:
        sum_kernel[(8,)](x, torch.empty(1), 1000, BLOCK=128, ATOMIC=True, SAME=False)
    (finding,) = checker.findings
    assert finding.kind == "uninitialised-read" and "torch.empty" in str(finding)
    for fill in (lambda t: t.zero_(), lambda t: t.copy_(torch.ones(1))):
        with MemoryChecker() as checker:
            out = torch.empty(1)
            fill(out)
            sum_kernel[(8,)](x, out, 1000, BLOCK=128, ATOMIC=True, SAME=False)
        assert checker.findings == []


def test_elements_of_an_output_nothing_wrote_are_named():
    x = torch.randn(1000)
    with MemoryChecker() as checker:
        out = torch.empty(1000)
        copy_kernel[(7,)](x, out, 1000, BLOCK=128, EXTRA=0)  # one program short
    finding = checker.unwritten(out, "`out`")
    assert finding.kind == "unwritten-output" and "104 of the 1000 elements of `out`" in str(finding)
    assert "896..999" in str(finding)
    with MemoryChecker() as checker:
        out = torch.empty(1000)
        copy_kernel[(8,)](x, out, 1000, BLOCK=128, EXTRA=0)
    assert checker.unwritten(out, "`out`") is None and checker.findings == []


def test_tensors_reached_through_a_pointer_table_are_allowed_when_known():
    tensors = [torch.randn(16), torch.randn(16)]
    table = torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)
    out = torch.zeros(32)
    with MemoryChecker(known={"a": tensors[0], "b": tensors[1]}) as checker:
        table_kernel[(2,)](table, out, BLOCK=16)
    assert checker.findings == [] and torch.equal(out, torch.cat(tensors))
    assert _fault(lambda: table_kernel[(2,)](table, out, BLOCK=16)).kind == "out-of-bounds"


def total(x):
    out = torch.empty(1)  # never filled: the atomic adds land on garbage
    sum_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64, ATOMIC=True, SAME=False)
    return out


def test_the_harness_reports_what_the_checker_finds_only_when_switched_on(monkeypatch):
    x = torch.randn(100)
    monkeypatch.setenv(memcheck.ENV_SWITCH, "1")
    with pytest.raises(
        checks.KernelCallError,
        match=r"found a problem in total\(\): atomic at line \d+ .* reads "
        r"element 0 of `out_ptr`, which was allocated with torch.empty",
    ):
        checks.call_api(total, (x,), {}, "total")
    monkeypatch.setenv(memcheck.ENV_SWITCH, "0")
    assert len(checks.call_api(total, (x,), {}, "total")) == 1  # the comparison has to catch it


@triton.jit
def tile_fill_kernel(out_ptr, M, N, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[:, None]
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)[None, :]
    tl.store(out_ptr + rows * N + cols, 1.0, mask=cols < N)  # no mask on the rows


def test_a_two_dimensional_grid_names_both_program_ids_and_the_lane_in_the_block():
    out = torch.zeros(20, 24)
    with MemoryChecker():  # a smaller launch first: the grid must not be carried over
        tile_fill_kernel[(2, 2)](torch.zeros(32, 32), 32, 32, BLOCK=16)
    finding = _fault(lambda: tile_fill_kernel[(2, 2)](out, 20, 24, BLOCK=16))
    assert finding.program == (1, 0) and finding.lane == (4, 0)  # row 20 is the first past the end
    assert "program (1, 0), lane (4, 0)" in str(finding)


def test_tests_outside_a_case_run_under_the_checker_too(monkeypatch):
    """gradcheck, opcheck and property tests run their kernels inside ``checks.explained``: a bad
    store there fails that test with its line, instead of corrupting memory a later test or
    Python itself trips over; with the checker off it runs as before."""
    from types import SimpleNamespace

    kernel = SimpleNamespace(todos=[])
    x, out = torch.randn(10), torch.empty(16)
    monkeypatch.setenv(memcheck.ENV_SWITCH, "1")
    with pytest.raises(AssertionError, match=r"The memory checker stopped gradcheck of copy\(\): store at line \d+"):
        with checks.explained(kernel, "gradcheck of copy()"):
            copy_kernel[(1,)](x, out[:10], 10, BLOCK=16, EXTRA=1)
    with checks.explained(kernel, "torch.compile(copy)", memory_checked=False):
        copy_kernel[(1,)](x, out[:10], 10, BLOCK=16, EXTRA=1)  # unchecked: the view's storage has room
    monkeypatch.setenv(memcheck.ENV_SWITCH, "0")
    with checks.explained(kernel, "gradcheck of copy()"):
        copy_kernel[(1,)](x, out[:10], 10, BLOCK=16, EXTRA=1)


@triton.jit
def neighbour_partial_kernel(x_ptr, partial_ptr, out_ptr, BLOCK: tl.constexpr, MODE: tl.constexpr):
    pid = tl.program_id(0)
    total = tl.sum(tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK)), axis=0)
    if MODE == 2:
        tl.atomic_add(out_ptr + pid, 0.0)  # a program that made an atomic may be ordered by it
    tl.store(partial_ptr + pid, total)
    if MODE == 1:
        before = tl.load(partial_ptr + pid)  # its own partial: no race
    else:
        before = tl.load(partial_ptr + pid - 1, mask=pid > 0, other=0.0)  # the previous program's
    tl.store(out_ptr + pid, before + total)


def test_a_load_of_what_another_program_of_the_launch_stored_is_a_race():
    x = torch.randn(64)
    with MemoryChecker() as checker:
        neighbour_partial_kernel[(4,)](x, torch.zeros(4), torch.zeros(4), BLOCK=16, MODE=0)
    (race,) = checker.findings
    assert (
        race.kind == "race"
        and race.program == (1,)
        and race.line == neighbour_partial_kernel.fn.__code__.co_firstlineno + 10
    )
    assert "reads element 0 of `partial_ptr`, which program (0,) stored in this same launch" in str(race)
    for mode in (1, 2):
        with MemoryChecker() as checker:
            neighbour_partial_kernel[(4,)](x, torch.zeros(4), torch.zeros(4), BLOCK=16, MODE=mode)
        assert checker.findings == []


@triton.jit
def read_modify_write_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    total = tl.load(out_ptr)
    tl.store(out_ptr, total + tl.sum(tl.load(x_ptr + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)), axis=0))


def test_a_read_modify_write_without_an_atomic_is_named_at_its_store_only():
    with MemoryChecker() as checker:
        read_modify_write_kernel[(4,)](torch.randn(64), torch.zeros(1), BLOCK=16)
    (race,) = checker.findings
    assert race.kind == "race" and "already stored a different value" in str(race)


@triton.jit
def shift_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    following = tl.load(x_ptr + offs + 1, mask=offs + 1 < n, other=0.0)
    tl.store(out_ptr + offs, following, mask=offs < n)


def test_a_store_over_what_another_program_of_the_launch_loaded_is_a_race():
    x = torch.randn(64)
    with MemoryChecker() as checker:
        shift_kernel[(4,)](x, x, 64, BLOCK=16)  # in place: program 1 overwrites what program 0 read
    (race,) = checker.findings
    assert race.kind == "race" and race.program == (1,) and race.line == shift_kernel.fn.__code__.co_firstlineno + 4
    assert "overwrites element 16 of `x_ptr`, which program (0,) loaded earlier in this same launch" in str(race)
    with MemoryChecker() as checker:
        shift_kernel[(4,)](x, torch.zeros(64), 64, BLOCK=16)  # into another tensor
        shift_kernel[(4,)](torch.zeros(64), torch.zeros(64), 64, BLOCK=16)  # in place, but nothing changes
    assert checker.findings == []
