"""Honest GPU timing: medians from ``triton.testing.do_bench``, with warm-up outside the timed
region, and every speed expressed against ceilings measured in the same run.

``do_bench`` flushes the L2 cache before each timed call, so even inputs that would fit in the
cache are read from device memory. Nothing here decides a grade with an absolute time: results
are ratios to the copy bandwidth, to PyTorch, or to the reference solution, all timed together.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from grader.core import device, protocols
from grader.core.cases import Case, Spec
from grader.core.checks import build_inputs, compare, reference_outputs, returned_values, with_mutated


def time_ms(fn: Callable[[], object]) -> float:
    """Median milliseconds of ``fn()`` on the GPU (compile and warm-up happen first, untimed)."""
    import triton.testing

    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s, counting the bytes read and the bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return 2 * nbytes / time_ms(lambda: dst.copy_(src)) / 1e6


@dataclass(frozen=True)
class HostAndDevice:
    """Where one call's time goes: ``host_ms`` of Python and launching on the CPU, ``device_ms``
    of GPU work, each per call. ``synchronizes``: the call waited for the GPU itself (a
    ``.item()``, a copy to the CPU), so its device time could not be separated."""

    host_ms: float
    device_ms: float | None
    synchronizes: bool = False

    @property
    def host_bound(self) -> bool:
        """The GPU waits for the CPU: a call costs more to issue than to run."""
        return self.device_ms is not None and self.host_ms >= self.device_ms

    @property
    def loop_ms(self) -> float | None:
        """What a call costs back to back in a loop, as in training: the longer of issuing it and
        running it (the GPU runs one call while the host issues the next)."""
        return None if self.device_ms is None else max(self.host_ms, self.device_ms)


def host_and_device_ms(fn: Callable[[], object], calls: int = 10, repeats: int = 5) -> HostAndDevice:
    """Separate a call's host time from its GPU time: the GPU is first kept busy (a sleep kernel),
    so that ``calls`` calls only queue their work while the CPU clock times issuing them; the GPU
    then runs the queued work back to back, timed by CUDA events around it. Medians of
    ``repeats``. Unlike ``time_ms`` the caches stay warm between calls, as in a training loop."""
    fn()
    torch.cuda.synchronize()
    # Calibrate: the sleep must outlast issuing every call, with room to spare.
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    issue_s = time.perf_counter() - started
    torch.cuda.synchronize()
    cycles_per_s = _sleep_cycles_per_second()
    repeated = []
    for _ in range(repeats):
        sleep_s = max(0.02, 4 * issue_s)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(sleep_s * cycles_per_s))
        begin.record()
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        host_s = time.perf_counter() - started
        end.record()
        torch.cuda.synchronize()
        repeated.append(Repeat(host_s / calls * 1e3, begin.elapsed_time(end) / calls, waited=host_s >= 0.8 * sleep_s))
    return split_of(repeated)


@dataclass(frozen=True)
class Repeat:
    """One timed batch of calls behind a sleep: host and GPU milliseconds per call, and whether
    issuing them outlasted most of the sleep (the calls waited for the GPU)."""

    host_ms: float
    device_ms: float
    waited: bool


def split_of(repeats: list[Repeat]) -> HostAndDevice:
    """The medians of the repeats. A call that synchronizes waits in every repeat; one repeat that
    waited among others that did not (a collection of Python's garbage, a new block of memory
    from the driver) is left out instead of calling the call synchronizing."""
    waited = [r for r in repeats if r.waited]
    if 2 * len(waited) > len(repeats):
        return HostAndDevice(statistics.median(r.host_ms for r in repeats), None, synchronizes=True)
    clean = [r for r in repeats if not r.waited]
    return HostAndDevice(statistics.median(r.host_ms for r in clean), statistics.median(r.device_ms for r in clean))


def graph_ms(fn: Callable[[], object]) -> tuple[float | None, str | None]:
    """The call captured once in a CUDA graph and then replayed: its GPU work without the host's
    part (the driver issues the captured launches at once: no Python, no autograd, no per-launch
    cost), which is what a training step captured whole pays. (ms, None), or (None, why) where
    the call cannot be captured (it waits for the GPU, or allocates outside PyTorch's allocator)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):  # warm-up off the default stream, as capturing needs
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return time_ms(graph.replay), None
    except Exception as error:  # whatever stops the capture is reported, not raised
        with contextlib.suppress(Exception):  # a failed capture can leave an error for the next call
            torch.cuda.synchronize()
        first = (str(error).splitlines() or [""])[0]
        return None, f"{type(error).__name__}: {first[:200]}"


@functools.cache
def _sleep_cycles_per_second() -> float:
    """How many cycles of ``torch.cuda._sleep`` make a second on this GPU (its clock varies)."""
    cycles = 10_000_000
    torch.cuda._sleep(cycles)  # warm-up
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / (begin.elapsed_time(end) / 1e3)


# The implementations a benchmark table is about; every other row is a baseline to compare with.
COURSE_IMPLS = ("reference", "yours", "learner")


@dataclass
class Measurement:
    case: Case
    impl: str  # "reference", "learner", "pytorch"
    ms: float
    gbs: float | None
    tflops: float | None
    note: str | None = None  # a baseline timed although its result is off; a call no CUDA graph captures
    split: HostAndDevice | None = None  # host and GPU time per call (``make bench HOST=1``)
    graph_ms: float | None = None  # the call replayed from a CUDA graph (``make bench HOST=1``)


def measure(
    spec: Spec, case: Case, impls: dict[str, Callable], host: bool = False, failed: list[str] | None = None
) -> list[Measurement]:
    """Time each implementation on the same inputs; each output is checked before it counts.
    ``host``: also split each call's time into host and GPU time (``host_and_device_ms``).
    ``failed``: where given, a baseline other than PyTorch's that raises is left out with a line
    here (another library may not take every dtype or shape); otherwise the error propagates.

    A course implementation (``COURSE_IMPLS``) with a wrong result is not timed. A baseline's
    result (PyTorch's, torch.compile's, another library's) is checked too, but the course is
    measured against it, so a result outside the module's tolerance (a bf16 backward that
    accumulates in bf16, say) is timed all the same and the row carries a note that says by how
    much it is off.
    """
    args, kwargs = build_inputs(spec, case)
    references = reference_outputs(spec, args, kwargs)
    rows = []
    for name, fn in impls.items():
        # fresh inputs for each: an in-place API changes its arguments (the seed repeats the values)
        args, kwargs = build_inputs(spec, case)
        try:
            returned = returned_values(protocols.calling(spec.protocol, fn, spec.api)(*args, **kwargs), spec.mutates)
        except Exception as error:
            if failed is None or name in COURSE_IMPLS or name == "pytorch":
                raise
            failed.append(f"{name} raised on {case.name} and is not timed there: {type(error).__name__}: {error}")
            continue
        problems = compare(spec, case, with_mutated(spec, returned, args), references, (args, kwargs))
        note = None
        if problems and name not in COURSE_IMPLS:
            # how far off it is; the diagnosis lines after it are advice for a learner's kernel
            off = problems[0].split("\nPattern:")[0].replace("\n", " ")
            note = (
                f"{_named(name)}'s own result on {case.name} is outside this module's tolerance; it is timed "
                f"as a baseline all the same. {off}"
            )
        elif problems:
            raise AssertionError(f"{name} is wrong on {case.name}, so it is not timed:\n" + problems[0])
        once = functools.partial(protocols.timed(spec.protocol, fn, spec.api), *args, **kwargs)
        ms = time_ms(once)
        gbs = spec.bytes_moved(case) / ms / 1e6 if spec.bytes_moved else None
        tflops = spec.flops(case) / ms / 1e9 if spec.flops else None
        row = Measurement(case, name, ms, gbs, tflops, note)
        if host:
            row.split = host_and_device_ms(once)
            row.graph_ms, why = graph_ms(once)
            if why is not None:
                row.note = (f"{row.note} " if row.note else "") + (
                    f"{_named(name)} cannot be captured in a CUDA graph on {case.name} ({why})."
                )
        rows.append(row)
    return rows


def ceiling_ratio(spec: Spec, row: Measurement, rows: list[Measurement], copy_gbs: float) -> float:
    """The row's speed as a fraction of the module's ceiling (copy bandwidth, or PyTorch's time)."""
    if spec.ceiling == "copy":
        return row.gbs / copy_gbs
    baseline = next(r for r in rows if r.impl == "pytorch" and r.case == row.case)
    return baseline.ms / row.ms


def format_table(spec: Spec, rows: list[Measurement], copy_gbs: float) -> str:
    ceiling = "x copy" if spec.ceiling == "copy" else "x PyTorch"
    split = any(row.split is not None for row in rows)
    graphed = any(row.graph_ms is not None for row in rows)
    extra = (f" {'host ms':>9} {'GPU ms':>9}" if split else "") + (f" {'graph ms':>9}" if graphed else "")
    header = f"{'case':<34} {'impl':<13} {'ms':>9} {'GB/s':>8} {'TFLOP/s':>8} {ceiling:>10}{extra}"
    lines = [f"{device.describe()}; copy bandwidth {copy_gbs:.0f} GB/s (measured now)", header, "-" * len(header)]
    for row in rows:
        gbs = f"{row.gbs:8.0f}" if row.gbs is not None else f"{'':>8}"
        tflops = f"{row.tflops:8.1f}" if row.tflops is not None else f"{'':>8}"
        ratio = ceiling_ratio(spec, row, rows, copy_gbs)
        line = f"{row.case.name:<34} {row.impl:<13} {row.ms:9.3f} {gbs} {tflops} {ratio:10.2f}"
        if split:
            line += _split_columns(row.split)
        if graphed:
            line += f" {row.graph_ms:9.3f}" if row.graph_ms is not None else f" {'-':>9}"
        lines.append(line)
    lines += speedups(rows)
    lines += [f"Note: {row.note}" for row in rows if row.note]
    if any(row.split is not None and row.split.host_bound for row in rows):
        lines.append(
            "*: host-bound: issuing the call (Python, the autograd Function, allocations, launches) "
            "takes longer than the GPU's work, so in a loop the GPU waits. Fewer launches, a CUDA "
            "graph or a larger batch pay off here; a faster kernel does not. Such a call's ms hides "
            "part of its host time (issued while the benchmark flushes the cache), so its speed-up "
            "line compares loop times: the longer of host and GPU time."
        )
    if graphed:
        lines.append(
            "graph ms: the call captured once in a CUDA graph and replayed, so the host issues nothing "
            "but the replay: its GPU time, which is what a training step captured whole pays for it."
        )
    if any(row.split is not None and row.split.synchronizes for row in rows):
        lines.append(
            "sync: the call waits for the GPU itself (a .item(), a copy to the CPU), so host and "
            "GPU time cannot be told apart; in a training loop such a wait stalls every step."
        )
    return "\n".join(lines)


def speedups(rows: list[Measurement]) -> list[str]:
    """Where the table compares with more than PyTorch: per case, how many times faster the course's
    first implementation is than each baseline (their time over its time; above 1: the course wins)."""
    baselines = {r.impl for r in rows if r.impl not in COURSE_IMPLS}
    if baselines <= {"pytorch"}:
        return []
    lines = []
    for case in dict.fromkeys(r.case.name for r in rows):
        of_case = [r for r in rows if r.case.name == case]
        ours = next((r for r in of_case if r.impl in COURSE_IMPLS), None)
        if ours is None:
            continue
        # do_bench's ms hides part of a host-bound call's issuing behind its cache flush, by how
        # much depends on the call: where any of them is host-bound, compare loop times instead.
        in_loop = all(r.split is not None and r.split.loop_ms is not None for r in of_case) and any(
            r.split.host_bound for r in of_case
        )
        time_of = (lambda r: r.split.loop_ms) if in_loop else (lambda r: r.ms)
        ratios = [f"{time_of(r) / time_of(ours):.2f} x {_named(r.impl)}" for r in of_case if r.impl not in COURSE_IMPLS]
        how = "in a loop, the longer of host and GPU time; " if in_loop else ""
        lines.append(f"{case}: {ours.impl} runs at " + ", ".join(ratios) + f" ({how}their time / its time)")
    return lines


def _named(impl: str) -> str:
    return "eager PyTorch" if impl == "pytorch" else impl


def _split_columns(split: HostAndDevice | None) -> str:
    if split is None:
        return f" {'':>9} {'':>9}"
    if split.device_ms is None:
        return f" {split.host_ms:9.3f} {'sync':>9}"
    return f" {split.host_ms:9.3f} {split.device_ms:9.3f}" + ("*" if split.host_bound else "")


def plot(spec: Spec, rows: list[Measurement], copy_gbs: float, title: str, path) -> None:
    """Bar chart of each implementation's speed per case, against the module's ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r.case.name for r in rows))
    impls = list(dict.fromkeys(r.impl for r in rows))
    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(cases)), 4))
    for i, impl in enumerate(impls):
        values = [
            next((ceiling_ratio(spec, r, rows, copy_gbs) for r in rows if r.impl == impl and r.case.name == c), 0)
            for c in cases
        ]
        ax.bar([x + i * width for x in range(len(cases))], values, width, label=impl)
    ax.axhline(spec.target, color="black", linestyle="--", linewidth=1, label="reference target")
    ax.set_xticks([x + width * (len(impls) - 1) / 2 for x in range(len(cases))])
    ax.set_xticklabels(cases, fontsize=8)
    ax.set_ylabel("fraction of copy bandwidth" if spec.ceiling == "copy" else "speed-up over PyTorch")
    ax.set_title(f"{title} on {device.describe()}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
