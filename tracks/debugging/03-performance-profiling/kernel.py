"""Measuring and profiling: time a kernel honestly, turn the time into GB/s and TFLOP/s, place the
kernel on a roofline, and find out why a slow kernel is slow.

A GPU runs kernels asynchronously: a launch returns to Python long before the work is done, the
first call of a Triton kernel also compiles it, and the L2 cache may still hold the data the last
call read. A timing that ignores any of this measures something else than the kernel. This file
holds the tools that get it right, and one kernel to use them on:

- ``bench(fn, warmup, rep)`` times ``fn()`` the way ``triton.testing.do_bench`` does: warm-up
  calls first (compilation and the first-call costs stay out), the L2 cache flushed before every
  repetition, a stopwatch that waits for the device, and the median (plus quantiles) of many
  repetitions, in milliseconds;
- ``achieved_gbps`` / ``achieved_tflops`` turn bytes or FLOPs and a time into a rate, and
  ``roofline`` says whether a kernel is memory- or compute-bound and which fraction of its roof it
  reaches;
- ``bias_act(x, bias, activation)`` computes ``activation(x + bias)`` for a bias per column. It
  is correct, and slow: the tests say why, in the words of the memory-traffic report on a CPU and
  with the measured bandwidth on a GPU. Find the causes and fix them.

Check your work:  make check M=debugging/03-performance-profiling
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import math
from typing import Callable, NamedTuple

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# ----------------------------------------------------------------------------------------------
# Part 1: timing
# ----------------------------------------------------------------------------------------------

# Bytes written between two repetitions to push the previous repetition's data out of the L2
# cache: more than the L2 of any NVIDIA GPU so far (H100 and H200: 50 MiB; B200: 126 MiB).
L2_FLUSH_BYTES = 256 * 1024 * 1024


class Timing(NamedTuple):
    """What ``bench`` measured, in milliseconds."""
    median_ms: float
    quantiles_ms: tuple  # one value per requested quantile, in the order asked
    times_ms: tuple  # every timed repetition, in the order they ran


class CudaEvents:
    """A stopwatch for GPU work made of CUDA events.

    An event is a timestamp that the GPU itself writes when it reaches the event in its stream,
    after all the work queued before it. ``start`` queues one before the kernels to time and
    ``stop`` one after them, then waits for the second (``synchronize``): only then is the
    interval known. The clock is the GPU's, so Python's own delays do not count.
    """

    def start(self):
        began = torch.cuda.Event(enable_timing=True)
        began.record()
        return began

    def stop(self, began) -> float:
        ended = torch.cuda.Event(enable_timing=True)
        ended.record()
        ended.synchronize()
        return began.elapsed_time(ended)


def synchronize_device() -> None:
    """Wait until the GPU has finished everything queued (nothing to wait for without one)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class WallClock(NamedTuple):
    """A stopwatch made of a host clock: ``clock()`` returns seconds (``time.perf_counter``).

    A kernel launch returns before the GPU has run the kernel, so a host clock only means
    something once the device has caught up: ``sync()`` waits for it (``torch.cuda.synchronize``
    on a GPU). Tests pass a fake clock and a fake sync to watch the order of the calls.
    """
    clock: Callable[[], float]
    sync: Callable[[], None] = synchronize_device

    def start(self) -> float:
        # TODO 1: start the stopwatch: return the time at which the timed work begins
        #   Hint: the device may still be busy with work queued earlier (a flush, the last call):
        #   Hint: wait for it first, or that work lands inside the interval you are about to time.
        return ...

    def stop(self, began: float) -> float:
        # TODO 2: stop the stopwatch and return the milliseconds since `began` (what start() returned)
        #   Hint: the timed call has probably only been queued: wait for the device, then read the clock.
        #   Hint: clock() counts seconds; bench() and the rest of the course count milliseconds.
        return ...


def quantile(values, q: float) -> float:
    """The q-quantile (0 <= q <= 1) of ``values``, interpolating linearly between the two nearest
    ranks, as ``numpy.quantile`` and ``torch.quantile`` do by default: q = 0.5 is the median."""
    if not values:
        raise ValueError("quantile() needs at least one value.")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie between 0 and 1, got {q}.")
    ordered = sorted(values)
    # TODO 3: interpolate between the two sorted values around rank q * (n - 1)
    #   Hint: with n values, rank 0 is the smallest and rank n - 1 the largest; q = 0.5 of 4 values
    #   Hint: is rank 1.5, halfway between the second and the third. math.floor finds the rank below.
    return ...


def cache_flusher(nbytes: int = L2_FLUSH_BYTES, device=None) -> Callable[[], None]:
    """A function that evicts the L2 cache by writing ``nbytes`` of memory each time it is called.

    A kernel timed twice on the same inputs finds them in L2 the second time (if they fit) and
    looks faster than it will be in a real program, where other work has used the cache since.
    ``device`` defaults to the GPU when there is one.
    """
    if nbytes <= 0:
        raise ValueError(f"nbytes must be positive, got {nbytes}.")
    where = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    # TODO 4: allocate a buffer of nbytes bytes on `where`, and return a function that overwrites it all
    #   Hint: one byte per element (torch.int8); allocate it once, here, not at every call.
    #   Hint: writing it is enough (a device-side fill such as .zero_()): the cache lines it takes
    #   Hint: evict whatever the timed kernel left there.
    return ...


def bench(fn: Callable[[], object], warmup: int = 10, rep: int = 50, *, quantiles=(0.2, 0.5, 0.8),
          flush=True, stopwatch=None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``rep`` timed ones. Returns a ``Timing``.

    ``flush``: True (write ``L2_FLUSH_BYTES`` before every timed call), False (do not), or a
    function to call instead. ``stopwatch``: ``start()`` returns a token and ``stop(token)`` the
    milliseconds since; by default CUDA events on a GPU. Without a GPU there is nothing they would
    measure: pass a stopwatch (``WallClock(time.perf_counter)``) to time interpreter runs anyway.
    """
    if warmup < 0 or rep < 1:
        raise ValueError(f"bench() needs warmup >= 0 and rep >= 1, got warmup={warmup}, rep={rep}.")
    if any(not 0.0 <= q <= 1.0 for q in quantiles):
        raise ValueError(f"quantiles must lie between 0 and 1, got {tuple(quantiles)}.")
    if stopwatch is None:
        if not torch.cuda.is_available():
            raise ValueError("bench() times GPU work and there is no GPU here: pass a stopwatch, e.g. "
                             "stopwatch=WallClock(time.perf_counter), to time the interpreter anyway "
                             "(its times say nothing about a GPU's).")
        stopwatch = CudaEvents()
    if flush is True:
        flush = cache_flusher()
    # TODO 5: warm up: call fn `warmup` times without timing them
    #   Hint: the first call of a Triton kernel compiles it (hundreds of milliseconds), and the first
    #   Hint: calls also allocate and fill caches; none of that belongs in the kernel's time.
    times = []
    # TODO 6: time `rep` calls, one at a time: flush the cache, then start, call fn, stop
    #   Hint: `flush` is a function or False. The flush must not be inside the timed interval.
    #   Hint: keep every stopwatch.stop(...) result in `times`, in order.
    # TODO 7: return the Timing: the median, the requested quantiles and every time
    #   Hint: a few repetitions are slowed by things outside the kernel (another process, a clock
    #   Hint: change): the median ignores them, a mean does not. quantile(times, 0.5) is the median.
    return Timing(median_ms=..., quantiles_ms=..., times_ms=...)


# ----------------------------------------------------------------------------------------------
# Part 2: from a time to a rate, and to a roofline
# ----------------------------------------------------------------------------------------------

# The vendor's datasheet figures for an NVIDIA H100 SXM5 (80 GB): HBM3 bandwidth, and dense
# BF16/FP16 tensor-core throughput (the datasheet's 1979 TFLOP/s assume 2:4 sparsity; halved here).
H100_SXM_HBM_GBPS = 3350.0
H100_SXM_BF16_DENSE_TFLOPS = 989.4


def _positive(name: str, value: float) -> None:
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a positive, finite number, got {value}.")


def _non_negative(name: str, value: float) -> None:
    if not value >= 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be zero or more, got {value}.")


def achieved_gbps(nbytes: float, ms: float) -> float:
    """Bandwidth in GB/s (10^9 bytes per second, as datasheets count) of moving ``nbytes`` in ``ms``."""
    _non_negative("nbytes", nbytes)
    _positive("ms", ms)
    # TODO 8: convert bytes and milliseconds into GB/s
    #   Hint: bytes per second is nbytes / seconds, and ms is thousandths of a second; a GB is 1e9 bytes.
    return ...


def achieved_tflops(flops: float, ms: float) -> float:
    """Throughput in TFLOP/s (10^12 floating-point operations per second) of ``flops`` in ``ms``."""
    _non_negative("flops", flops)
    _positive("ms", ms)
    # TODO 9: convert FLOPs and milliseconds into TFLOP/s
    #   Hint: the same as achieved_gbps, with 1e12 for the tera.
    return ...


class Roofline(NamedTuple):
    """Where one timed kernel sits under a GPU's two roofs."""
    intensity: float  # arithmetic intensity: FLOPs per byte moved
    ridge: float  # the intensity at which the two roofs meet (FLOPs per byte)
    bound: str  # "memory" below the ridge, "compute" at or above it
    roof_tflops: float  # the most a kernel of this intensity can reach on this GPU
    achieved_tflops: float
    achieved_gbps: float
    fraction: float  # of the roof that bounds the kernel: bandwidth if memory-, FLOP/s if compute-bound


def roofline(nbytes: float, flops: float, ms: float, peak_gbps: float, peak_tflops: float) -> Roofline:
    """Place a kernel that moved ``nbytes`` and did ``flops`` in ``ms`` under the roofs of a GPU
    with ``peak_gbps`` of memory bandwidth and ``peak_tflops`` of arithmetic throughput.

    A kernel can go no faster than its bytes allow (bandwidth x intensity) nor than the arithmetic
    units allow (peak FLOP/s): its roof is the lower of the two. Below the ridge point the memory
    roof is the lower one (memory-bound), above it the compute roof (compute-bound).
    """
    _non_negative("nbytes", nbytes)
    _non_negative("flops", flops)
    if nbytes == 0 and flops == 0:
        raise ValueError("roofline() needs a kernel that moves bytes or does FLOPs (both are 0).")
    _positive("ms", ms)
    _positive("peak_gbps", peak_gbps)
    _positive("peak_tflops", peak_tflops)
    gbps, tflops = achieved_gbps(nbytes, ms), achieved_tflops(flops, ms)
    # TODO 10: the arithmetic intensity, the ridge point, and which roof bounds the kernel
    #   Hint: intensity is FLOPs per byte (a kernel that moves no byte has an infinite one: math.inf).
    #   Hint: the ridge is the intensity at which peak FLOP/s equals peak bytes/s times intensity:
    #   Hint: mind the units (tera = 1e12, giga = 1e9). Below the ridge the kernel is memory-bound.
    intensity = ...
    ridge = ...
    bound = ...
    # TODO 11: the roof at this intensity, and the fraction of it the kernel reaches
    #   Hint: the roof is the lower of peak_tflops and what peak bandwidth feeds at this intensity.
    #   Hint: a memory-bound kernel is judged by its bandwidth (it may do no FLOP at all: a copy),
    #   Hint: a compute-bound one by its FLOP/s.
    roof = ...
    fraction = ...
    return Roofline(intensity, ridge, bound, roof, tflops, gbps, fraction)


# ----------------------------------------------------------------------------------------------
# Part 3: a correct kernel that is slower than it should be
# ----------------------------------------------------------------------------------------------

ACTIVATIONS = ("silu", "relu", None)


@triton.jit
def bias_act_kernel(x_ptr, bias_ptr, y_ptr, n_rows, n_cols,
                    stride_xm, stride_xn, stride_ym, stride_yn,
                    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Program pid computes one BLOCK_M x BLOCK_N tile of y = activation(x + bias). The tiles are
    # numbered along each band of rows first, so neighbouring programs touch neighbouring memory.
    pid = tl.program_id(axis=0)
    tiles_per_row = (n_cols + BLOCK_N - 1) // BLOCK_N
    rows = (pid // tiles_per_row) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_per_row) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    # 64-bit offsets: row * stride passes 2^31 as soon as the tensor holds 2^31 elements.
    row_offsets = rows.to(tl.int64)[:, None]
    col_offsets = cols.to(tl.int64)[None, :]
    x = tl.load(x_ptr + row_offsets * stride_xm + col_offsets * stride_xn, mask=mask, other=0.0)
    x = x.to(tl.float32)
    if HAS_BIAS:
        # One bias value per column: BLOCK_N of them serve all BLOCK_M rows of the tile.
        bias = tl.load(bias_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        x += bias[None, :]
    if ACTIVATION == "silu":
        x = x / (1.0 + tl.exp(-x))  # x * sigmoid(x)
    elif ACTIVATION == "relu":
        x = tl.where(x < 0.0, 0.0, x)  # NaN goes through, as in torch.relu (tl.maximum would drop it)
    tl.store(y_ptr + row_offsets * stride_ym + col_offsets * stride_yn, x.to(y_ptr.dtype.element_ty),
             mask=mask)


def bias_act_blocks(n_rows: int, n_cols: int) -> dict:
    """The tile each program computes (BLOCK_M rows of BLOCK_N columns) and its number of warps."""
    block_n = 1  # one column per program: it then needs a single bias value
    tile_elements = 64
    block_m = min(max(1, tile_elements // block_n), triton.next_power_of_2(n_rows))
    # About 16 elements per thread: 8 warps for a full tile, fewer for a small one.
    num_warps = min(8, max(1, block_m * block_n // 512))
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)


def _check_inputs(x, bias, activation):
    check_tensors(("x", x))
    if x.dim() == 0:
        raise ValueError("x is a scalar (shape ()); bias_act() needs at least one dimension, the last "
                         "one being the columns that the bias runs along.")
    if bias is not None:
        check_tensors(("x", x), ("bias", bias))
        if tuple(bias.shape) != (x.shape[-1],):
            raise ValueError(f"bias must have shape ({x.shape[-1]},), one value per element of x's last "
                             f"dimension, got {tuple(bias.shape)}.")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}.")


def bias_act(x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = "silu") -> torch.Tensor:
    """activation(x + bias), with ``bias`` of shape (N,) added to every row of the last dimension.

    ``activation`` is "silu" (x * sigmoid(x)), "relu" or None; ``bias`` None adds nothing. The
    result has x's shape and dtype; x may have any strides.
    """
    _check_inputs(x, bias, activation)
    n_cols = x.shape[-1]
    # Leading dimensions become rows; reshape copies only when no view can do it (the kernel takes
    # both strides, so a 2-D x of any layout is used as it is).
    x2d = x if x.dim() == 2 else x.reshape(-1, n_cols)
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.view(x.shape)
    has_bias = bias is not None
    bias = bias.contiguous() if has_bias else x2d  # never read without HAS_BIAS
    config = bias_act_blocks(n_rows, n_cols)
    grid = (triton.cdiv(n_rows, config["BLOCK_M"]) * triton.cdiv(n_cols, config["BLOCK_N"]),)
    act = activation or "none"
    # Step 1: y = x + bias.
    bias_act_kernel[grid](x2d, bias, y, n_rows, n_cols, x2d.stride(0), x2d.stride(1), y.stride(0), y.stride(1),
                          HAS_BIAS=has_bias, ACTIVATION="none", **config)
    # Step 2: y = activation(y).
    bias_act_kernel[grid](y, bias, y, n_rows, n_cols, y.stride(0), y.stride(1), y.stride(0), y.stride(1),
                          HAS_BIAS=False, ACTIVATION=act, **config)
    return y.view(x.shape)


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
