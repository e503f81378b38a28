"""The interpreter instrumentation (grader.core.instrument) and the memory-traffic report built on
it (grader.core.traffic). They run under the interpreter only; on a GPU machine run this file
with GRADER_DEVICE=cpu."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from grader.core import device, traffic
from grader.core.instrument import Access, AccessRecorder

pytestmark = pytest.mark.skipif(
    device.is_cuda(),
    reason="the instrumentation watches the interpreter: "
    "run this file with GRADER_DEVICE=cpu to test it on a GPU machine",
)


@triton.jit
def _masked_load(ptr, offsets, n):
    return tl.load(ptr + offsets, mask=offsets < n, other=0.0)


@triton.jit
def _copy_then_count(x_ptr, y_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = _masked_load(x_ptr, offsets, n)
    tl.store(y_ptr + offsets, values, mask=offsets < n)
    tl.atomic_add(counts_ptr + tl.program_id(0), 1)


def _line_of(text: str) -> int:
    source = open(__file__).read().splitlines()
    return next(number for number, line in enumerate(source, start=1) if text in line and "def " not in line)


def test_recorder_sees_every_access_with_program_lane_kernel_and_line():
    x = torch.arange(100, dtype=torch.float32)
    y, counts = torch.empty_like(x), torch.zeros(2, dtype=torch.int32)
    with AccessRecorder() as recorder:
        _copy_then_count[(2,)](x, y, counts, 100, BLOCK=64)
    assert torch.equal(y, x) and counts.tolist() == [1, 1]  # recording changes nothing
    kinds = [(a.kind, a.program[0]) for a in recorder.accesses]
    assert kinds == [("load", 0), ("store", 0), ("atomic", 0), ("load", 1), ("store", 1), ("atomic", 1)]
    load = recorder.accesses[3]
    assert load.kernel == "_copy_then_count"
    assert (load.file, load.line) == (__file__, _line_of("return tl.load(ptr + offsets"))  # in the helper
    assert recorder.accesses[4].line == _line_of("tl.store(y_ptr + offsets")
    assert load.itemsize == 4 and load.addresses.shape == (64,)
    assert int(load.active.sum()) == 36  # program 1 covers elements 64..127 of 100
    assert (load.touched - x.data_ptr()).tolist() == [4 * i for i in range(64, 100)]


def test_recorders_nest_and_leave_the_interpreter_as_they_found_it():
    from triton.runtime import interpreter

    original = interpreter._interpreter
    x = torch.ones(8)
    y, counts = torch.empty_like(x), torch.zeros(1, dtype=torch.int32)
    with AccessRecorder() as outer:
        with pytest.raises(RuntimeError):
            with AccessRecorder() as inner:
                _copy_then_count[(1,)](x, y, counts, 8, BLOCK=8)
                raise RuntimeError("a failing check inside the recorder")
        _copy_then_count[(1,)](x, y, counts, 8, BLOCK=8)
    assert len(inner.accesses) == 3 and len(outer.accesses) == 6
    assert interpreter._interpreter is original


def _access(offsets, itemsize=4, active=None, base=1 << 20) -> Access:
    addresses = np.asarray(offsets, dtype=np.uint64) * itemsize + base
    mask = np.ones(addresses.shape, dtype=bool) if active is None else np.asarray(active)
    return Access("load", (0, 0, 0), addresses, mask, itemsize, "k", "kernel.py", 1)


@pytest.mark.parametrize(
    "offsets, itemsize, expected",
    [
        (np.arange(32), 4, (1, 4, 4, 32)),  # 32 neighbouring floats: 128 bytes, 4 sectors
        (np.arange(32), 2, (1, 2, 2, 32)),  # halves: 64 bytes
        (np.arange(32) * 64, 4, (1, 32, 4, 32)),  # one float from each of 32 rows
        (np.arange(64) * 2, 4, (2, 16, 8, 64)),  # every other float: half of each sector wasted
        (np.arange(32).reshape(4, 8), 4, (1, 4, 4, 32)),  # a 2-D block read row by row
        (np.arange(32).reshape(8, 4).T, 4, (1, 4, 4, 32)),  # contiguous down axis 0: lanes follow it
    ],
    ids=["fp32 contiguous", "fp16 contiguous", "strided rows", "stride 2", "2-D", "2-D transposed"],
)
def test_sectors_per_warp_follow_the_contiguous_axis(offsets, itemsize, expected):
    assert traffic.warp_sectors(_access(offsets, itemsize)) == expected


def test_masked_lanes_cost_nothing_and_an_all_masked_access_is_no_access():
    half = np.arange(64) < 40
    assert traffic.warp_sectors(_access(np.arange(64), active=half)) == (2, 5, 5, 40)
    assert traffic.warp_sectors(_access(np.arange(32), active=np.zeros(32, bool))) == (0, 0, 0, 0)


def test_a_misaligned_element_touches_two_sectors():
    assert traffic.warp_sectors(_access([0], itemsize=4, base=(1 << 20) + 30)) == (1, 2, 1, 1)


@triton.jit
def _transpose_flat(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # into y, which is N x M
    mask = offsets < M * N
    row, col = offsets // M, offsets % M
    tl.store(y_ptr + offsets, tl.load(x_ptr + col * N + row, mask=mask), mask=mask)


@triton.jit
def _transpose_tiled(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask)
    tl.store(y_ptr + cols[None, :] * M + rows[:, None], tile, mask=mask)


def test_report_tells_a_strided_transpose_from_a_tiled_one():
    M, N = 64, 48
    x = torch.randn(M, N)
    y = torch.empty(N, M)
    flat = traffic.measure(
        lambda: _transpose_flat[(triton.cdiv(M * N, 128),)](x, y, M, N, BLOCK=128), minimum_bytes=2 * x.nbytes
    )
    assert torch.equal(y, x.t())
    tiled = traffic.measure(
        lambda: _transpose_tiled[(M // 16, N // 16)](x, y, M, N, BLOCK=16), minimum_bytes=2 * x.nbytes
    )
    assert torch.equal(y, x.t())
    assert flat.sectors_per_access("load") == 32.0 and flat.excess("store") == 1.0
    assert tiled.excess("load") == 1.0 and tiled.excess("store") == 1.0
    assert flat.bytes_over_minimum == tiled.bytes_over_minimum == 1.0  # the same bytes, worse sectors
    worst = flat.worst_line("load")
    assert worst.line == _line_of("tl.store(y_ptr + offsets, tl.load(x_ptr + col * N + row")
    report = traffic.describe(flat)
    assert "sectors per warp-wide load: 32.0 (coalesced: 4.0)" in report
    assert f"test_traffic.py:{worst.line}" in report
    assert "most wasteful" not in traffic.describe(tiled)


@triton.jit
def _matmul_one_output(a_ptr, b_ptr, c_ptr, N, K, BLOCK_K: tl.constexpr):
    row, col = tl.program_id(0), tl.program_id(1)
    ks = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + row * K + ks, mask=ks < K, other=0.0)
    b = tl.load(b_ptr + ks * N + col, mask=ks < K, other=0.0)
    tl.store(c_ptr + row * N + col, tl.sum(a * b))


def test_loads_per_output_measure_reuse():
    M = N = K = 16
    a, b, c = torch.randn(M, K), torch.randn(K, N), torch.empty(M, N)
    naive = traffic.measure(lambda: _matmul_one_output[(M, N)](a, b, c, N, K, BLOCK_K=16))
    torch.testing.assert_close(c, a @ b)
    assert naive.loads_per_output == 2 * K
    assert naive.elements_stored == M * N


@triton.jit
def _rows_in_order(x_ptr, out_ptr, ROW: tl.constexpr, GROUPED: tl.constexpr):
    """Program p reads one 32-float row of a 4 x 8 grid of rows; in grouped order the first 4
    programs read rows of one column, in row-major order four different columns."""
    pid = tl.program_id(0)
    row = (pid % 4) * 8 + pid // 4 if GROUPED else pid
    values = tl.load(x_ptr + (row % 8) * ROW + tl.arange(0, ROW))  # only the column picks the data
    tl.store(out_ptr + pid * ROW + tl.arange(0, ROW), values)


def test_wave_bytes_count_what_consecutive_programs_load_together():
    x, out = torch.randn(8 * 32), torch.empty(32 * 32)
    row_major = traffic.measure(lambda: _rows_in_order[(32,)](x, out, ROW=32, GROUPED=False), footprints=True)
    grouped = traffic.measure(lambda: _rows_in_order[(32,)](x, out, ROW=32, GROUPED=True), footprints=True)
    assert row_major.busiest_launch == grouped.busiest_launch == 32
    assert row_major.wave_bytes(4) == 4 * 128  # four programs, four different 128-byte rows
    assert grouped.wave_bytes(4) == 128  # four programs, one row between them
    assert traffic.measure(lambda: _rows_in_order[(32,)](x, out, ROW=32, GROUPED=True)).wave_bytes(4) == 0.0
