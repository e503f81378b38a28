"""The memory-traffic report: what a kernel asks of global memory, counted under the interpreter.

A CPU cannot time a GPU kernel, but the interpreter sees every address a kernel touches
(``grader.core.instrument``). From those this module counts, for one call of a module's function:

- **bytes** loaded and stored, against the fewest the problem needs (the module's cost model);
- **sectors per warp-wide access**: a GPU serves a warp's 32 lanes in 32-byte sectors, so 32 lanes
  reading 4-byte neighbours need 4 sectors (coalesced) and 32 lanes reading 4 bytes each from
  different rows need 32;
- **loads per output element**: how often each stored element needed an element loaded (reuse);
- **programs** that touched memory: one program runs on one multiprocessor, so a kernel that
  leaves the work to a handful of programs leaves most of a GPU idle;
- **bytes per wave**: a GPU runs programs roughly in the order of their ids, a wave of them at a
  time; the distinct bytes a wave of consecutive programs loads is what competes for the L2
  cache at once (the report counts it, it does not simulate the cache).

How lanes form warps is modelled the way Triton's compiler lays a block out: lanes run along the
block's dimension whose addresses are contiguous (the compiler's coalescing pass picks that order),
or along the last dimension where none is; 32 consecutive lanes, one element each, make one
warp-wide access. What the report cannot see: caches (a re-read that hits L2 still counts as
traffic here), occupancy, latency hiding (``num_stages``, ``num_warps``), tensor cores, and how
many bytes one lane moves per instruction. It predicts the memory side of speed, not the speed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grader.core.cases import Case, Spec, spec_for
from grader.core.instrument import Access, AccessRecorder
from grader.core.protocols import timed

WARP = 32  # lanes per warp
SECTOR = 32  # bytes per memory sector


@dataclass
class LineTraffic:
    """The warp-wide accesses of one ``tl.load`` / ``tl.store`` line."""

    kind: str
    file: str
    line: int
    warp_accesses: int = 0
    sectors: int = 0
    ideal_sectors: int = 0  # what the same lanes would need if their bytes were contiguous
    bytes: int = 0

    @property
    def sectors_per_access(self) -> float:
        return self.sectors / self.warp_accesses if self.warp_accesses else 0.0

    @property
    def ideal_per_access(self) -> float:
        return self.ideal_sectors / self.warp_accesses if self.warp_accesses else 0.0

    @property
    def excess(self) -> float:
        """Sectors touched per sector needed: 1.0 is perfectly coalesced."""
        return self.sectors / self.ideal_sectors if self.ideal_sectors else 1.0


@dataclass
class Traffic:
    """Everything one call asked of global memory."""

    lines: dict[tuple[str, str, int], LineTraffic] = field(default_factory=dict)
    elements_loaded: int = 0
    elements_stored: int = 0
    minimum_bytes: int | None = None  # the problem's own minimum (read each input, write each output once)
    programs: set = field(default_factory=set)  # the program ids that made an access
    # (kernel, program) -> the sectors its loads touched; kept only when asked (it grows with the input)
    footprints: dict | None = None

    def total(self, kind: str, what: str) -> int:
        return sum(getattr(line, what) for line in self.lines.values() if line.kind == kind)

    @property
    def bytes_loaded(self) -> int:
        return self.total("load", "bytes")

    @property
    def bytes_stored(self) -> int:
        return self.total("store", "bytes") + self.total("atomic", "bytes")

    def sectors_per_access(self, kind: str) -> float:
        accesses = self.total(kind, "warp_accesses")
        return self.total(kind, "sectors") / accesses if accesses else 0.0

    def ideal_per_access(self, kind: str) -> float:
        accesses = self.total(kind, "warp_accesses")
        return self.total(kind, "ideal_sectors") / accesses if accesses else 0.0

    def excess(self, kind: str) -> float:
        ideal = self.total(kind, "ideal_sectors")
        return self.total(kind, "sectors") / ideal if ideal else 1.0

    @property
    def loads_per_output(self) -> float:
        return self.elements_loaded / self.elements_stored if self.elements_stored else 0.0

    @property
    def bytes_over_minimum(self) -> float | None:
        if not self.minimum_bytes:
            return None
        return (self.bytes_loaded + self.bytes_stored) / self.minimum_bytes

    @property
    def busiest_launch(self) -> int:
        """The most programs any one kernel of the call ran with (programs that touched memory)."""
        per_kernel: dict[str, int] = {}
        for kernel, _ in self.programs:
            per_kernel[kernel] = per_kernel.get(kernel, 0) + 1
        return max(per_kernel.values(), default=0)

    def wave_bytes(self, wave: int) -> float:
        """The distinct bytes loaded by ``wave`` consecutive programs (in launch order, axis 0
        fastest), averaged over the waves of a kernel: the data a wave asks the L2 cache to hold
        at once. With several kernels in the call, the largest of their averages."""
        if not self.footprints:
            return 0.0
        averages = []
        for name in {kernel for kernel, _ in self.footprints}:
            order = sorted(
                (program for kernel, program in self.footprints if kernel == name), key=lambda p: (p[2], p[1], p[0])
            )
            sizes = [
                np.unique(np.concatenate([self.footprints[(name, p)] for p in order[i : i + wave]])).size
                for i in range(0, len(order), wave)
            ]
            averages.append(float(np.mean(sizes)) * SECTOR)
        return max(averages)

    def worst_line(self, kind: str) -> LineTraffic | None:
        """The line of this kind that wastes the most sectors."""
        candidates = [line for line in self.lines.values() if line.kind == kind and line.warp_accesses]
        return max(candidates, key=lambda line: (line.sectors - line.ideal_sectors, line.line), default=None)

    def add(self, access: Access) -> None:
        key = (access.kind, access.file, access.line)
        if access.active.any():
            self.programs.add((access.kernel, access.program))
        line = self.lines.get(key)
        if line is None:
            line = self.lines[key] = LineTraffic(access.kind, access.file, access.line)
        if self.footprints is not None and access.kind == "load":
            touched = np.unique(access.touched // SECTOR)
            key_program = (access.kernel, access.program)
            known = self.footprints.get(key_program)
            self.footprints[key_program] = touched if known is None else np.union1d(known, touched)
        warps, sectors, ideal, active = warp_sectors(access)
        line.warp_accesses += warps
        line.sectors += sectors
        line.ideal_sectors += ideal
        line.bytes += active * access.itemsize
        if access.kind == "load":
            self.elements_loaded += active
        else:
            self.elements_stored += active


def measure(call: Callable[[], object], minimum_bytes: int | None = None, footprints: bool = False) -> Traffic:
    """Run ``call()`` (which launches kernels under the interpreter) and count its traffic;
    ``footprints`` also keeps what each program loads, for ``Traffic.wave_bytes``."""
    traffic = Traffic(minimum_bytes=minimum_bytes, footprints={} if footprints else None)
    with AccessRecorder(on_access=traffic.add):
        call()
    return traffic


@dataclass(frozen=True)
class TrafficBar:
    """What a module asks of one call's memory traffic, checked under the interpreter: the kinds
    of access that must be coalesced, and how often each output may need an element loaded."""

    case: Case
    lesson: str  # what fixes a miss, in a sentence: "load a 2-D tile, so that ..."
    coalesced: tuple[str, ...] = ("load", "store")
    max_excess: float = 1.25  # sectors touched per sector needed, per kind of access
    max_loads_per_output: float | None = None
    max_bytes_over_minimum: float | None = None  # bytes moved per byte the problem needs
    min_programs: int | None = None  # programs that must share the work (per launch of the busiest kernel)
    max_programs: int | None = None  # at most this many (a persistent kernel: one per multiprocessor)
    max_wave_bytes: int | None = None  # distinct bytes loaded by ``wave`` consecutive programs
    wave: int = 32
    todo: str = ""  # words from the text of the TODO that fixes a miss, to name it while it is open

    @property
    def name(self) -> str:
        return self.case.name


def traffic_of(kernel, module_spec: Spec, case: Case, footprints: bool = False) -> Traffic:
    """The traffic of one call of the loaded ``kernel`` on ``case``'s inputs."""
    from grader.core.checks import build_inputs

    spec = spec_for(case, module_spec)
    args, kwargs = build_inputs(spec, case)
    fn = timed(spec.protocol, kernel.api(spec.api), spec.api)
    return measure(lambda: fn(*args, **kwargs), spec.bytes_moved(case) if spec.bytes_moved else None, footprints)


def check_bar(kernel, module_spec: Spec, bar: TrafficBar) -> Traffic:
    """Raise AssertionError with a learner-facing message when ``bar`` is missed; return the traffic."""
    spec = spec_for(bar.case, module_spec)
    traffic = traffic_of(kernel, module_spec, bar.case, footprints=bar.max_wave_bytes is not None)
    misses = []
    for kind in bar.coalesced:
        worst = traffic.worst_line(kind)
        if worst is not None and traffic.excess(kind) > bar.max_excess:
            misses.append(
                (
                    worst,
                    f"{spec.api}() touches {traffic.sectors_per_access(kind):.1f} sectors per "
                    f"warp-wide {kind}; coalesced is {traffic.ideal_per_access(kind):.1f} "
                    f"(worst: line {worst.line}, {worst.sectors_per_access:.1f}).",
                )
            )
    if bar.max_loads_per_output is not None and traffic.loads_per_output > bar.max_loads_per_output:
        loads = [line for line in traffic.lines.values() if line.kind == "load"]
        worst = max(loads, key=lambda line: line.bytes, default=None)
        misses.append(
            (
                worst,
                f"{spec.api}() loads {traffic.loads_per_output:.1f} elements per element it "
                f"stores; the bar is {bar.max_loads_per_output:g}.",
            )
        )
    if bar.max_bytes_over_minimum is not None and (traffic.bytes_over_minimum or 0) > bar.max_bytes_over_minimum:
        loads = [line for line in traffic.lines.values() if line.kind == "load"]
        worst = max(loads, key=lambda line: line.bytes, default=None)
        misses.append(
            (
                worst,
                f"{spec.api}() moves {traffic.bytes_over_minimum:.2f} x the bytes the problem "
                f"needs; the bar is {bar.max_bytes_over_minimum:g} x.",
            )
        )
    if bar.min_programs is not None and traffic.busiest_launch < bar.min_programs:
        misses.append(
            (
                None,
                f"{spec.api}() leaves the work to {traffic.busiest_launch} program(s); the bar is "
                f"{bar.min_programs}: a GPU runs one program per multiprocessor at a time.",
            )
        )
    if bar.max_programs is not None and traffic.busiest_launch > bar.max_programs:
        misses.append(
            (
                None,
                f"{spec.api}() launches {traffic.busiest_launch} programs; the bar is "
                f"{bar.max_programs}, one per multiprocessor, each looping over tiles.",
            )
        )
    if bar.max_wave_bytes is not None and traffic.wave_bytes(bar.wave) > bar.max_wave_bytes:
        misses.append(
            (
                None,
                f"each wave of {bar.wave} consecutive programs of {spec.api}() loads "
                f"{_size(int(traffic.wave_bytes(bar.wave)))} of distinct data; the bar is "
                f"{_size(bar.max_wave_bytes)}.",
            )
        )
    if not misses:
        return traffic
    todo = _todo_for(kernel, bar.todo, misses[0][0])
    lines = [f"{bar.case.name}: memory traffic", *(text for _, text in misses), bar.lesson]
    if todo is not None:
        lines.append(f"See {todo}.")
    raise AssertionError("\n".join(lines))


def _todo_for(kernel, words: str, line: LineTraffic | None):
    """The learner's open TODO whose text holds ``words``; else the one nearest above ``line``
    in kernel.py; else the first open one (None when none is open)."""
    todos = list(getattr(kernel, "todos", None) or [])
    if not todos:
        return None
    named = [todo for todo in todos if words and words in todo.text]
    if named:
        return named[0]
    if line is not None and Path(line.file) == Path(kernel.path):
        above = [todo for todo in todos if todo.line <= line.line]
        if above:
            return above[-1]
    return todos[0]


def lane_order(addresses: np.ndarray, itemsize: int) -> int:
    """The axis lanes run along: the one whose neighbouring elements are most often adjacent in
    memory, or the last axis when no axis is mostly contiguous."""
    best_axis, best_share = addresses.ndim - 1, 0.5
    signed = addresses.astype(np.int64)
    for axis in range(addresses.ndim):
        if addresses.shape[axis] < 2:
            continue
        share = float(np.mean(np.diff(signed, axis=axis) == itemsize))
        if share > best_share:
            best_axis, best_share = axis, share
    return best_axis


def requests_of(addresses, active, itemsize: int, size: int = WARP) -> tuple[np.ndarray, np.ndarray]:
    """An access's addresses and active flags in rows of ``size`` consecutive elements along its
    contiguous axis (the block flattened with that axis last), one row per request that has an
    active lane: ``size`` is a warp's 32 lanes, times the elements each lane moves at once."""
    addresses = np.atleast_1d(addresses)
    active = np.broadcast_to(np.atleast_1d(active), addresses.shape)
    axis = lane_order(addresses, itemsize)
    lanes = np.moveaxis(addresses, axis, -1).reshape(-1)
    on = np.moveaxis(active, axis, -1).reshape(-1)
    padding = (-lanes.size) % size
    lanes = np.concatenate([lanes, np.zeros(padding, dtype=lanes.dtype)]).reshape(-1, size)
    on = np.concatenate([on, np.zeros(padding, dtype=bool)]).reshape(-1, size)
    in_use = on.any(axis=1)
    return lanes[in_use], on[in_use]


def warp_sectors(access: Access) -> tuple[int, int, int, int]:
    """(warp-wide accesses, sectors touched, sectors ideally needed, active lanes) of one access."""
    lanes, on = requests_of(access.addresses, access.active, access.itemsize)
    if not lanes.size:
        return 0, 0, 0, 0
    # Sectors of the active lanes; an element may straddle two sectors only when misaligned.
    first = lanes // SECTOR
    last = (lanes + access.itemsize - 1) // SECTOR
    unused = np.iinfo(np.uint64).max
    sectors = np.concatenate([np.where(on, first, unused), np.where(on, last, unused)], axis=1)
    sectors.sort(axis=1)
    distinct = (np.diff(sectors, axis=1) != 0) & (sectors[:, 1:] != unused)
    touched = int(distinct.sum() + np.count_nonzero(sectors[:, 0] != unused))
    per_warp = on.sum(axis=1)
    ideal = int(np.sum(-(-per_warp * access.itemsize // SECTOR)))
    return int(lanes.shape[0]), touched, ideal, int(per_warp.sum())


def describe(traffic: Traffic, root: Path | None = None, wave: int = 32) -> str:
    """The report as a few lines of text for a learner."""

    def where(line: LineTraffic) -> str:
        path = Path(line.file)
        shown = path.name if root is None or not path.is_relative_to(root) else path.relative_to(root)
        return f"{shown}:{line.line}"

    rows = [
        f"  global memory: {_size(traffic.bytes_loaded)} loaded, {_size(traffic.bytes_stored)} stored"
        + (
            f" ({traffic.bytes_over_minimum:.2f} x the {_size(traffic.minimum_bytes)} the problem needs)"
            if traffic.minimum_bytes
            else ""
        )
    ]
    for kind in ("load", "store"):
        if traffic.total(kind, "warp_accesses"):
            rows.append(
                f"  sectors per warp-wide {kind}: {traffic.sectors_per_access(kind):.1f} "
                f"(coalesced: {traffic.ideal_per_access(kind):.1f})"
            )
            worst = traffic.worst_line(kind)
            if worst is not None and worst.excess > 1.25:
                rows.append(
                    f"    most wasteful: {where(worst)}, {worst.sectors_per_access:.1f} sectors "
                    f"per access where {worst.ideal_per_access:.1f} would do"
                )
    if traffic.elements_stored:
        rows.append(f"  elements loaded per element stored: {traffic.loads_per_output:.1f}")
    if traffic.programs:
        rows.append(f"  programs that touched memory: {traffic.busiest_launch} in the largest launch")
    if traffic.footprints:
        rows.append(
            f"  distinct data loaded per wave of {wave} consecutive programs: {_size(int(traffic.wave_bytes(wave)))}"
        )
    return "\n".join(rows)


def _size(count: int | None) -> str:
    count = count or 0
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
