"""Whether a GPU is running a kernel, as its driver says (NVML), so that a timing starts only once
nothing queued earlier still runs (``grader.grade.leases``).

Children of other gradings are frozen (SIGSTOP) while a kernel is timed, but the kernels a frozen
child had already queued run on; that child's own synchronize before it stepped aside is a claim of
a process that ran learner code. The driver's utilization reading is not: its ``gpu`` figure is
the percent of a sample period (1/6 s to 1 s, by product; 0.2 s on an H100 and an H200) in which a
kernel ran. That figure is the last period the driver has published, which may have ended before
the wait began: a 0 read at once can predate a kernel queued just before the freeze. So a 0 counts
only once a whole period after the wait began must lie behind it (``settle_seconds``).

NVML is reached through ctypes (``libnvidia-ml.so.1`` comes with the driver), not a pip package.
``python -m grader.grade.gpu_idle`` shows the readings, the period and the waits on a GPU machine.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import threading
import time
from dataclasses import dataclass

_LIBRARY = "libnvidia-ml.so.1"
_SUCCESS = 0
_GPU_UTILIZATION_SAMPLES = 1  # nvmlSamplingType_t
LONGEST_PERIOD_S = 1.0  # the longest sample period NVML documents: assumed where the driver does not say
# A reading describes the last period the driver has published: a kernel shows in it up to a period
# and a short delay after it starts (at most 0.21 s on an H100 and an H200, whose period is 0.2 s).
# A 0 read this many periods after the wait began describes a period that began after it, in which
# a kernel queued before the wait would have run.
SETTLE_PERIODS = 3

_lock = threading.Lock()
_nvml: ctypes.CDLL | bool | None = None  # None: not tried yet; False: NVML cannot answer here
_handles: dict[int, ctypes.c_void_p | None] = {}  # torch device index -> NVML handle (None: none)
_periods: dict[int, float] = {}  # torch device index -> the driver's sample period, in seconds


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Value(ctypes.Union):
    _fields_ = [
        ("d", ctypes.c_double),
        ("ui", ctypes.c_uint),
        ("ul", ctypes.c_ulong),
        ("ull", ctypes.c_ulonglong),
        ("sll", ctypes.c_longlong),
    ]


class _Sample(ctypes.Structure):
    _fields_ = [("timestamp", ctypes.c_ulonglong), ("value", _Value)]


@dataclass(frozen=True)
class Idle:
    """How a wait for an idle GPU ended: ``idle`` True (the driver read 0 %), False (still busy
    at the limit) or None (NVML could not answer: not checked); ``waited_s``: seconds it took;
    ``last_percent``: the last reading (None where there was none)."""

    idle: bool | None
    waited_s: float
    last_percent: int | None


def _library():
    global _nvml
    if _nvml is None:
        try:
            library = ctypes.CDLL(_LIBRARY)
            library.nvmlDeviceGetHandleByUUID.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
            library.nvmlDeviceGetMigMode.argtypes = [
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_uint),
                ctypes.POINTER(ctypes.c_uint),
            ]
            library.nvmlDeviceGetUtilizationRates.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Utilization)]
            library.nvmlDeviceGetSamples.argtypes = [
                ctypes.c_void_p,
                ctypes.c_int,
                ctypes.c_ulonglong,
                ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.c_uint),
                ctypes.POINTER(_Sample),
            ]
            _nvml = library if library.nvmlInit_v2() == _SUCCESS else False
        except (OSError, AttributeError):  # no driver library, or one without these functions
            _nvml = False
    return _nvml or None


def _uuid(index: int) -> bytes:
    import torch

    # By UUID, not by index: NVML numbers every GPU of the machine, torch only those that
    # CUDA_VISIBLE_DEVICES shows, in its order.
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    return (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}").encode()


def _handle(library, index: int):
    if index not in _handles:
        handle = ctypes.c_void_p()
        if library.nvmlDeviceGetHandleByUUID(_uuid(index), ctypes.byref(handle)) != _SUCCESS:
            handle = None  # a MIG instance's UUID, among others: not a whole GPU
        else:
            current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
            # Under MIG the whole GPU's figure is not this device's (NVML refuses it anyway).
            if (
                library.nvmlDeviceGetMigMode(handle, ctypes.byref(current), ctypes.byref(pending)) == _SUCCESS
                and current.value
            ):
                handle = None
        _handles[index] = handle
    return _handles[index]


def _device(index: int):
    """NVML and the handle of GPU ``index``, or (None, None)."""
    with _lock:
        library = _library()
        return (library, _handle(library, index)) if library is not None else (None, None)


def busy_percent(index: int) -> int | None:
    """The percent of the driver's last sample period in which GPU ``index`` (torch's numbering)
    ran a kernel; None where NVML cannot answer (no driver library, no such GPU, a MIG device,
    an NVML error). Never raises."""
    try:
        library, handle = _device(index)
        if handle is None:
            return None
        rates = _Utilization()
        if library.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) != _SUCCESS:
            return None
        return int(rates.gpu)
    except Exception:  # torch without CUDA, a driver that misbehaves: not an answer, never a crash
        return None


def sample_period_s(index: int) -> float | None:
    """The driver's utilization sample period for GPU ``index``, in seconds (the median spacing of
    the samples it keeps); None where NVML cannot say, or has kept too few samples yet."""
    if index in _periods:
        return _periods[index]
    try:
        library, handle = _device(index)
        if handle is None:
            return None
        kind, count = ctypes.c_int(), ctypes.c_uint(0)
        if (
            library.nvmlDeviceGetSamples(
                handle, _GPU_UTILIZATION_SAMPLES, 0, ctypes.byref(kind), ctypes.byref(count), None
            )
            != _SUCCESS
        ):
            return None
        samples = (_Sample * count.value)()
        if (
            library.nvmlDeviceGetSamples(
                handle, _GPU_UTILIZATION_SAMPLES, 0, ctypes.byref(kind), ctypes.byref(count), samples
            )
            != _SUCCESS
        ):
            return None
        stamps = sorted(samples[i].timestamp for i in range(min(count.value, len(samples))))
        spacing = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
        if len(spacing) < 2:
            return None
        period = statistics.median(spacing) / 1e6  # microseconds
        if not 0 < period <= 10 * LONGEST_PERIOD_S:
            return None
        _periods[index] = period
        return period
    except Exception:
        return None


def settle_seconds(index: int) -> float:
    """How long after a wait begins a 0 reading of GPU ``index`` can be trusted (module docstring)."""
    return SETTLE_PERIODS * (sample_period_s(index) or LONGEST_PERIOD_S)


def wait_until_idle(
    index: int,
    limit_s: float,
    poll_s: float = 0.01,
    read=busy_percent,
    clock=time.monotonic,
    sleep=time.sleep,
    settle_s: float | None = None,
) -> Idle:
    """Read GPU ``index`` every ``poll_s`` until the driver reports no kernel running (idle=True)
    in a reading taken at least ``settle_s`` after the wait began (default ``settle_seconds``:
    an earlier 0 may predate the wait), for at most ``limit_s`` (idle=False: still busy then);
    idle=None at once where NVML cannot answer. ``read``, ``clock`` and ``sleep`` are the reader
    and the time (tests pass fakes)."""
    started = clock()
    while True:
        percent = read(index)
        waited = clock() - started
        if percent is None:
            return Idle(None, waited, None)
        if settle_s is None:
            settle_s = settle_seconds(index)  # asked only once NVML has answered
        if percent == 0 and waited >= settle_s:
            return Idle(True, waited, 0)
        if waited >= max(limit_s, settle_s):
            return Idle(False, waited, percent)
        sleep(poll_s)  # whole polls: a sleep cut to the time left can be too short to move the clock


def _self_check() -> int:
    """On a GPU machine: the driver's readings while cuda:0 works and after, and how long a wait
    for idle takes right after work ends, so that the sample period and the delay can be seen."""
    import random

    import torch

    if not torch.cuda.is_available():
        print("No CUDA GPU here: run this on the grading machine.")
        return 1
    if busy_percent(0) is None:
        print(
            "NVML cannot report cuda:0's utilization (no libnvidia-ml.so.1, a MIG device, or an NVML error): "
            "timings on this machine start without waiting for an idle GPU."
        )
        return 1
    matrix = torch.randn(4096, 4096, device="cuda:0")

    def work(seconds: float) -> float:
        """Matrix products on cuda:0 for ``seconds``; the moment the last one had ended."""
        begun = time.monotonic()
        while time.monotonic() - begun < seconds:
            matrix @ matrix
            torch.cuda.synchronize(0)
        return time.monotonic()

    readings: list[tuple[float, int | None]] = []
    stop = threading.Event()

    def sample(every: float):
        while not stop.is_set():
            readings.append((time.monotonic(), busy_percent(0)))
            stop.wait(every)

    work(0.3)  # cuBLAS's start-up, before anything is measured
    time.sleep(1.0)
    print(f"{torch.cuda.get_device_name(0)}: readings of cuda:0 every 20 ms (seconds since the first):")
    sampler = threading.Thread(target=sample, args=(0.02,), daemon=True)
    origin = time.monotonic()
    sampler.start()
    time.sleep(0.5)
    began = time.monotonic()
    ended = work(2.0)
    time.sleep(2.0)
    stop.set()
    sampler.join()
    for at, percent in readings:
        phase = "before" if at < began else "working" if at < ended else "after"
        print(f"  {at - origin:6.3f} s  {phase:<8}{percent:>4} %")
    busy = [p for at, p in readings if began + 0.5 <= at < ended and p is not None]
    first_zero = next((at - ended for at, p in readings if at >= ended and p == 0), None)

    # Bursts at random moments: from a burst's start to the first non-zero reading (at least the
    # driver's delay in publishing a period), from its end to the first 0 (a period and that delay).
    readings.clear()
    stop.clear()
    sampler = threading.Thread(target=sample, args=(0.005,), daemon=True)
    sampler.start()
    to_busy, to_zero = [], []
    for _ in range(8):
        time.sleep(random.uniform(0.7, 1.0))
        began = time.monotonic()
        ended = work(0.25)
        to_zero.append(wait_until_idle(0, 5.0, poll_s=0.005, settle_s=0.0).waited_s)
        to_busy.append(next((at - began for at, p in list(readings) if at >= began and p), float("nan")))
    stop.set()
    sampler.join()
    settle = settle_seconds(0)
    waits = []
    for _ in range(4):
        time.sleep(random.uniform(0.7, 1.0))
        work(0.25)
        waits.append(wait_until_idle(0, 30.0))
    period = sample_period_s(0)

    def span(values):
        return f"{min(values):.3f} to {max(values):.3f} s" if values else "none"

    delay = min(to_busy)
    print("\nSummary:")
    rows = [
        ("the driver's sample period (its samples' spacing)", f"{period:.3f} s" if period else "unknown"),
        (
            "readings during 2 s of matrix products",
            f"{min(busy)} to {max(busy)} %, mean {statistics.mean(busy):.0f} %" if busy else "none",
        ),
        ("from the end of that work to the first 0", f"{first_zero:.3f} s" if first_zero is not None else "none"),
        ("8 bursts: from start to the first non-zero reading", span(to_busy)),
        ("8 bursts: from end to the first 0 (no settling)", span(to_zero)),
        (
            "4 bursts: wait_until_idle as a timing waits",
            span([idle.waited_s for idle in waits]) + f", idle={sorted({idle.idle for idle in waits}, key=str)}",
        ),
        ("settle (a 0 counts only after)", f"{settle:.3f} s = {SETTLE_PERIODS} x period"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    needed = 2 * (period or LONGEST_PERIOD_S) + delay
    verdict = "enough" if settle >= needed else "TOO SHORT: raise SETTLE_PERIODS in grader/grade/gpu_idle.py"
    print(
        f"A 0 describes a period wholly after the wait began once 2 periods and the driver's delay have passed "
        f"({needed:.3f} s here, the delay taken as the shortest start-to-non-zero time): settle is {verdict}."
    )
    return 0 if settle >= needed else 1


if __name__ == "__main__":
    sys.exit(_self_check())
