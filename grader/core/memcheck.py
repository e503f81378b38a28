"""The memory checker: out-of-bounds and misaligned accesses, races between programs, and reads of
memory nothing has written, found under the interpreter.

On a GPU these bugs crash, corrupt a neighbour's data, or give results that change from run to
run; under the interpreter they often give the right numbers, because programs run one after
another on host memory. The checker sees every access (``grader.core.instrument``) and the
tensors each launch was given, and says what went wrong in one sentence:

- **out of bounds**: every lane a ``tl.load``/``tl.store``/atomic lets through must fall inside
  one of the tensors passed to the launch (the part of its storage the view covers). A violation
  is refused before it happens and stops the call with ``MemoryFault``;
- **misaligned**: an element read or written at an address that is not a multiple of its size
  (a GPU faults on it); also refused;
- **race**: two programs of one launch storing different values to one address without an
  atomic (on a GPU one write is lost, which one depends on timing). Two programs storing the
  same value are harmless and not reported. Also a program loading what another program of the
  same launch stored with ``tl.store`` (on a GPU the load may come first), and a program storing a
  different value over what another program of the launch loaded (the load may come after it),
  unless the program that loads, or stores, made an atomic (a counter or a lock may order them);
  these are reported only where no store of the launch raced (a read-modify-write without an
  atomic is named at its store);
- **uninitialised read**: a kernel loading bytes of a tensor that was allocated with
  ``torch.empty*`` inside the checked block and that no kernel or PyTorch op has written yet;
- **unwritten output** (``MemoryChecker.unwritten``): elements of a returned tensor allocated
  that way that nothing wrote.

Races and uninitialised reads are collected in ``findings``; the caller decides what to do.
A kernel that reaches tensors through addresses it loads from memory (the pointer table of a
multi-tensor optimizer) is checked against every tensor the caller names as ``known`` and every
tensor allocated inside the block, since its arguments alone do not say what it may touch.
The checker works only under the interpreter; on a GPU, compute-sanitizer does this job.

``BoundsGuard`` is the out-of-bounds refusal alone, cheap enough to stay on for every launch of a
process: the grader's child installs one before it imports the learner's file. Under the
interpreter a kernel's addresses are host addresses, so without it a kernel could read or
rewrite any object of the process (the grader's own monitor included). It also records which
bytes the launches stored to during a call (``BoundsGuard.unwritten``): the evidence that a
returned tensor was written by the submission's kernels and not moved there by PyTorch.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grader.core.instrument import Access, AccessRecorder

ENV_SWITCH = "TRITON_CURRICULUM_MEMCHECK"  # "1": the harness's checks run every call under the checker

_EMPTY_OPS = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided"}


def enabled() -> bool:
    """Whether the harness's checks run under the checker (``make check`` on a CPU turns it on)."""
    return os.environ.get(ENV_SWITCH, "") == "1"


@dataclass(frozen=True)
class Finding:
    kind: str  # "out-of-bounds", "misaligned", "race", "uninitialised-read", "unwritten-output"
    message: str
    kernel: str = ""
    file: str = ""
    line: int = 0
    program: tuple = ()
    lane: tuple = ()
    tensor: str | None = None

    def __str__(self) -> str:
        return self.message

    @classmethod
    def at(cls, kind: str, message: str, launch: _Launch, access: Access, lane, tensor: str | None) -> Finding:
        """A finding about one lane of one access of ``launch``."""
        return cls(
            kind,
            message,
            launch.kernel,
            access.file,
            access.line,
            access.program[: len(_axes(launch))],
            tuple(int(i) for i in lane),
            tensor,
        )


class MemoryFault(Exception):
    """An access the checker refused (out of bounds or misaligned); ``finding`` says which."""

    def __init__(self, finding: Finding):
        super().__init__(finding.message)
        self.finding = finding


@dataclass
class _Buffer:
    """A tensor a launch was given: the bytes its view covers and the storage around them."""

    name: str
    start: int
    end: int  # one past the last byte the view covers
    storage_start: int
    storage_end: int
    itemsize: int
    numel: int
    writers: np.ndarray | None = None  # per byte: the program that stored there (-1: none yet)
    values: np.ndarray | None = None  # per byte: the byte that program stored
    readers: np.ndarray | None = None  # per byte: the first program that loaded it in this launch (-1: none)
    shared: np.ndarray | None = None  # per byte: loaded by more than one program of this launch
    memory: np.ndarray | None = field(default=None, repr=False)  # the view's bytes, read in place

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> _Buffer:
        storage = tensor.untyped_storage()
        start = tensor.data_ptr()
        extent = sum((size - 1) * abs(stride) for size, stride in zip(tensor.shape, tensor.stride()))
        end = start + (extent + 1) * tensor.element_size() if tensor.numel() else start
        return cls(
            name,
            start,
            end,
            storage.data_ptr(),
            storage.data_ptr() + storage.nbytes(),
            tensor.element_size(),
            tensor.numel(),
        )

    def describe(self) -> str:
        return f"`{self.name}` ({self.numel} element{'' if self.numel == 1 else 's'} of {self.itemsize} bytes)"


@dataclass
class _Launch:
    kernel: str
    buffers: list[_Buffer]
    grid: tuple[int, int, int] | None = None  # known at the launch's first access
    reported_races: set = field(default_factory=set)  # source lines already reported
    # Loads of what another program of the launch stored, stores over what another program loaded:
    # reported when the launch ends, only if no store of it raced (a read-modify-write without an
    # atomic is named at its store).
    pending_reads: list = field(default_factory=list)
    atomic_programs: set = field(default_factory=set)  # programs that made an atomic (they may wait)


@dataclass
class _Allocation:
    """A tensor allocated with torch.empty* inside the checked block, and which bytes are written."""

    storage: torch.UntypedStorage = field(repr=False)  # held: its memory cannot be reused while checking
    start: int
    written: np.ndarray  # bool per byte


_active: list[MemoryChecker] = []
_lock = threading.Lock()
_originals: dict[str, object] = {}


class MemoryChecker:
    """``with MemoryChecker() as checker: fn(...)`` checks every kernel launched inside; see the
    module's docstring. Checkers nest: each sees every launch made while it is open."""

    def __init__(self, known: dict[str, torch.Tensor] | None = None):
        """``known``: tensors (by name) that a kernel may reach without being given them, through
        addresses it loads from memory (the pointer tables of multi-tensor kernels); each launch's
        own tensors and those allocated inside the block are always allowed."""
        self.findings: list[Finding] = []
        self._known = [
            _Buffer.of(name, t)
            for name, t in (known or {}).items()
            if isinstance(t, torch.Tensor) and t.device.type == "cpu"
        ]
        self.fault: Finding | None = None
        self._launches: list[_Launch] = []  # the launch running now is last (launches nest)
        self._in_launch = 0  # > 0 from a launch's start to its end (argument copies included)
        self._allocations: list[_Allocation] = []
        self._recorder = AccessRecorder(on_access=self._on_access)
        self._mode = _Allocations(self)

    # -- opening and closing ------------------------------------------------------------------
    def __enter__(self) -> MemoryChecker:
        with _lock:
            if not _active:
                _patch_launches()
            _active.append(self)
        self._recorder.__enter__()
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._mode.__exit__(exc_type, exc, tb)
        self._recorder.__exit__(exc_type, exc, tb)
        with _lock:
            _active.remove(self)
            if not _active:
                _unpatch_launches()
        if exc is not None and self.fault is not None and not isinstance(exc, MemoryFault):
            raise MemoryFault(self.fault) from None  # the interpreter wraps our error: unwrap it
        return False

    # -- what a caller asks after the call -----------------------------------------------------
    def unwritten(self, tensor: torch.Tensor, name: str) -> Finding | None:
        """The elements of ``tensor`` (allocated with torch.empty* inside the block) that nothing
        wrote, as one finding; None when all were written or the tensor was not allocated here."""
        if not isinstance(tensor, torch.Tensor) or tensor.numel() == 0 or tensor.device.type != "cpu":
            return None
        allocation = self._allocation_at(tensor.untyped_storage().data_ptr())
        if allocation is None:
            return None
        offsets = _element_offsets(tensor) * tensor.element_size() + (tensor.data_ptr() - allocation.start)
        spans = offsets[:, None] + np.arange(tensor.element_size())
        missing = ~allocation.written[spans].all(axis=1)
        if not missing.any():
            return None
        indices = np.flatnonzero(missing)
        count = len(indices)
        where = _flat_ranges(indices)
        finding = Finding(
            "unwritten-output",
            f"{count} of the {tensor.numel()} elements of {name} were never written (flat indices "
            f"{where}): it was allocated with torch.empty, and no kernel stored to those elements.",
            tensor=name,
        )
        self.findings.append(finding)
        return finding

    @property
    def problems(self) -> list[Finding]:
        """Races and uninitialised reads found so far (faults stop the call themselves)."""
        return [f for f in self.findings if f.kind in ("race", "uninitialised-read")]

    # -- launches ---------------------------------------------------------------------------------
    def _begin_launch(self, fn, args, kwargs) -> None:
        buffers: list[_Buffer] = []
        try:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
        except TypeError:
            bound = {f"argument {i}": a for i, a in enumerate(args)} | dict(kwargs)
        for name, value in bound.items():
            _collect_buffers(name, value, buffers)
        self._launches.append(_Launch(getattr(fn, "__name__", "kernel"), buffers))

    def _end_launch(self) -> None:
        if self._launches:
            launch = self._launches.pop()
            if not launch.reported_races:
                self.findings.extend(launch.pending_reads)

    # -- accesses ---------------------------------------------------------------------------------
    def _on_access(self, access: Access) -> None:
        if not self._launches or not access.active.any():
            return
        launch = self._launches[-1]
        if launch.grid is None:  # the launcher sets the grid after the arguments are copied
            from triton.runtime import interpreter

            launch.grid = tuple(interpreter.interpreter_builder.grid_dim)
        lanes = np.argwhere(access.active)  # lane indices, in lane order
        addresses = access.addresses[access.active].astype(np.int64)
        self._check_bounds(launch, access, lanes, addresses)
        if access.kind in ("load", "atomic"):
            self._check_initialised(launch, access, lanes, addresses)
        if access.kind == "load":
            self._check_read_after_write(launch, access, lanes, addresses)
            self._note_reads(launch, access, addresses)
        elif access.kind == "atomic":
            launch.atomic_programs.add(_linear(access.program, launch.grid))
        if access.kind in ("store", "atomic"):
            self._mark_written(addresses, access.itemsize)
        if access.kind == "store":
            self._check_race(launch, access, lanes, addresses)

    def _check_bounds(self, launch: _Launch, access: Access, lanes, addresses) -> None:
        size = access.itemsize
        misaligned = addresses % size != 0
        inside = np.zeros(len(addresses), dtype=bool)
        for buffer in launch.buffers:
            inside |= (addresses >= buffer.start) & (addresses + size <= buffer.end)
        if not inside.all():  # reached through a loaded address: any tensor of the call will do
            for start, end in self._reachable():
                inside |= (addresses >= start) & (addresses + size <= end)
        bad = ~inside | misaligned
        if not bad.any():
            return
        first = int(np.flatnonzero(bad)[0])
        address = int(addresses[first])
        head = self._where(launch, access, lanes[first])
        if misaligned[first] and inside[first]:
            kind = "misaligned"
            what = (
                f"address {address:#x} is not a multiple of the element size ({size} bytes); "
                "a GPU stops with 'misaligned address'. Offsets are counted in elements of the "
                "pointer's type: check the pointer's dtype and how its offsets are computed"
            )
            buffer = _nearest(launch.buffers, address)
        else:
            kind = "out-of-bounds"
            buffer = _nearest(launch.buffers, address)
            if buffer is None:
                what = "no tensor given to the kernel is there"
            else:  # no lane of the access lands in the tensor it is nearest to: not a tail
                own = (addresses >= buffer.start) & (addresses + size <= buffer.end)
                what = _outside(buffer, address, size, every_lane=not own.any())
        finding = Finding.at(
            kind,
            f"{head}: {what}.",
            launch,
            access,
            lanes[first],
            buffer.name if buffer else None,
        )
        self.findings.append(finding)
        self.fault = finding
        raise MemoryFault(finding)

    def _reachable(self) -> list[tuple[int, int]]:
        return [(b.start, b.end) for b in self._known] + [
            (a.start, a.start + len(a.written)) for a in self._allocations
        ]

    def _check_race(self, launch: _Launch, access: Access, lanes, addresses) -> None:
        program = _linear(access.program, launch.grid)
        values = (
            None
            if access.values is None
            else np.ascontiguousarray(np.broadcast_to(access.values, access.addresses.shape)[access.active])
        )
        for buffer in launch.buffers:
            inside = (addresses >= buffer.start) & (addresses < buffer.end)
            if not inside.any():
                continue
            if buffer.writers is None:
                buffer.writers = np.full(buffer.end - buffer.start, -1, dtype=np.int64)
                buffer.values = np.zeros(buffer.end - buffer.start, dtype=np.uint8)
            spans = (addresses[inside] - buffer.start)[:, None] + np.arange(access.itemsize)
            spans = np.minimum(spans, len(buffer.writers) - 1)
            before = buffer.writers[spans]
            new_bytes = (
                values[inside].view(np.uint8).reshape(len(spans), -1)
                if values is not None
                else np.zeros(spans.shape, np.uint8)
            )
            if buffer.readers is not None:
                self._check_write_after_read(launch, access, lanes, addresses, inside, spans, new_bytes, buffer)
            clash = ((before >= 0) & (before != program) & (buffer.values[spans] != new_bytes)).any(axis=1)
            buffer.writers[spans] = program
            buffer.values[spans] = new_bytes
            if clash.any() and access.line not in launch.reported_races:
                launch.reported_races.add(access.line)
                k = int(np.flatnonzero(clash)[0])
                other = _unlinear(int(before[k][before[k] >= 0][0]), launch.grid, len(_axes(launch)))
                element, lane, head = self._kth(launch, access, lanes, addresses, inside, k, buffer)
                self.findings.append(
                    Finding.at(
                        "race",
                        f"{head}: program {other} already stored a different value to element {element} "
                        f"of `{buffer.name}` in this launch, without an atomic. On a GPU programs run at "
                        "the same time and one of the two writes is lost, so the result can change from "
                        "run to run (the interpreter runs programs one after another, which hides it). "
                        "Give each program its own elements, or combine with tl.atomic_add/atomic_max.",
                        launch,
                        access,
                        lane,
                        buffer.name,
                    )
                )

    def _kth(self, launch: _Launch, access: Access, lanes, addresses, inside, k: int, buffer: _Buffer):
        """The ``k``-th of the access's lanes that fall in ``buffer``: its element, its lane, and
        where it is, in words (a finding's head)."""
        element = (int(addresses[inside][k]) - buffer.start) // buffer.itemsize
        lane = lanes[np.flatnonzero(inside)[k]]
        return element, lane, self._where(launch, access, lane)

    def _note_reads(self, launch: _Launch, access: Access, addresses) -> None:
        """Which program first loaded each byte of the launch's tensors (the first byte of each
        load), and which bytes more than one program loaded: what a later store checks."""
        program = _linear(access.program, launch.grid)
        for buffer in launch.buffers:
            inside = (addresses >= buffer.start) & (addresses < buffer.end)
            if not inside.any():
                continue
            if buffer.readers is None:
                buffer.readers = np.full(buffer.end - buffer.start, -1, dtype=np.int32)
                buffer.shared = np.zeros(buffer.end - buffer.start, dtype=bool)
            relative = addresses[inside] - buffer.start
            first = buffer.readers[relative]
            buffer.shared[relative] |= (first >= 0) & (first != program)
            buffer.readers[relative] = np.where(first >= 0, first, program)

    def _check_write_after_read(self, launch, access, lanes, addresses, inside, spans, new_bytes, buffer) -> None:
        """A store that changes bytes another program of this launch loaded: on a GPU that load
        may come after the store and see the new value. Its bytes then start afresh."""
        program = _linear(access.program, launch.grid)
        relative = spans[:, 0]
        first = buffer.readers[relative]
        suspect = (first >= 0) & ((first != program) | buffer.shared[relative])
        buffer.readers[relative], buffer.shared[relative] = -1, False
        if not suspect.any() or program in launch.atomic_programs:
            return
        if any(f.line == access.line for f in launch.pending_reads):
            return
        if buffer.memory is None:  # the bytes still there: the store is made after its listeners
            buffer.memory = np.ctypeslib.as_array(
                (ctypes.c_uint8 * (buffer.end - buffer.start)).from_address(buffer.start)
            )
        changed = suspect & (buffer.memory[spans] != new_bytes).any(axis=1)
        if not changed.any():
            return
        k = int(np.flatnonzero(changed)[0])
        reader = (
            f"program {_unlinear(int(first[k]), launch.grid, len(_axes(launch)))}"
            if first[k] != program
            else "another program"
        )
        element, lane, head = self._kth(launch, access, lanes, addresses, inside, k, buffer)
        launch.pending_reads.append(
            Finding.at(
                "race",
                f"{head} overwrites element {element} of `{buffer.name}`, which {reader} loaded earlier "
                "in this same launch. On a GPU programs run at the same time in no set order, so that "
                "load may see the new value instead of the old one (the interpreter runs programs one "
                "after another, which hides it). Write the results to another tensor, or have each "
                "program load only elements that no other program stores to.",
                launch,
                access,
                lane,
                buffer.name,
            )
        )

    def _check_read_after_write(self, launch: _Launch, access: Access, lanes, addresses) -> None:
        """A load of bytes that another program of this launch stored with tl.store: on a GPU it
        may run before or after that store. Programs that made an atomic are left alone (a lock
        or a counter may order them)."""
        program = _linear(access.program, launch.grid)
        if program in launch.atomic_programs or any(f.line == access.line for f in launch.pending_reads):
            return
        for buffer in launch.buffers:
            if buffer.writers is None:
                continue
            inside = (addresses >= buffer.start) & (addresses < buffer.end)
            if not inside.any():
                continue
            spans = (addresses[inside] - buffer.start)[:, None] + np.arange(access.itemsize)
            before = buffer.writers[np.minimum(spans, len(buffer.writers) - 1)]
            other = ((before >= 0) & (before != program)).any(axis=1)
            if not other.any():
                continue
            k = int(np.flatnonzero(other)[0])
            writer = _unlinear(
                int(before[k][(before[k] >= 0) & (before[k] != program)][0]), launch.grid, len(_axes(launch))
            )
            element, lane, head = self._kth(launch, access, lanes, addresses, inside, k, buffer)
            launch.pending_reads.append(
                Finding.at(
                    "race",
                    f"{head} reads element {element} of `{buffer.name}`, which program {writer} stored "
                    "in this same launch. On a GPU programs run at the same time in no set order, so the "
                    "load may see the value from before or after that store (the interpreter runs "
                    "programs one after another, which hides it). Read it in a later launch, or have "
                    "each program compute what it needs itself.",
                    launch,
                    access,
                    lane,
                    buffer.name,
                )
            )
            return

    def _check_initialised(self, launch: _Launch, access: Access, lanes, addresses) -> None:
        for allocation in self._allocations:
            end = allocation.start + len(allocation.written)
            inside = (addresses >= allocation.start) & (addresses + access.itemsize <= end)
            if not inside.any():
                continue
            spans = (addresses[inside] - allocation.start)[:, None] + np.arange(access.itemsize)
            unset = ~allocation.written[spans].all(axis=1)
            if not unset.any():
                continue
            k = int(np.flatnonzero(unset)[0])
            address = int(addresses[inside][k])
            buffer = _nearest([b for b in launch.buffers if b.start <= address < b.end], address)
            name = f"`{buffer.name}`" if buffer else "a tensor"
            element = f"element {(address - buffer.start) // buffer.itemsize} of " if buffer else ""
            lane = lanes[np.flatnonzero(inside)[k]]
            head = self._where(launch, access, lane)
            self.findings.append(
                Finding.at(
                    "uninitialised-read",
                    f"{head} reads {element}{name}, which was allocated with torch.empty and which "
                    "nothing has written yet: its value is whatever the memory held before. Fill it first "
                    "(torch.zeros, or a store) or do not read it.",
                    launch,
                    access,
                    lane,
                    buffer.name if buffer else None,
                )
            )
            allocation.written[spans[unset]] = True  # report each byte once
            return

    def _mark_written(self, addresses, itemsize: int) -> None:
        for allocation in self._allocations:
            offsets = addresses - allocation.start
            inside = (offsets >= 0) & (offsets + itemsize <= len(allocation.written))
            if inside.any():
                allocation.written[(offsets[inside][:, None] + np.arange(itemsize)).ravel()] = True

    def _where(self, launch: _Launch, access: Access, lane) -> str:
        program = access.program[: len(_axes(launch))]
        lane = tuple(int(i) for i in lane)
        lane_text = str(lane[0]) if len(lane) == 1 else str(lane)
        verb = {"load": "load", "store": "store", "atomic": "atomic"}[access.kind]
        return (
            f"{verb} at line {access.line} of {Path(access.file).name} (kernel {launch.kernel}), "
            f"program {program}, lane {lane_text}"
        )

    # -- allocations (through the dispatch mode) --------------------------------------------------
    def _allocated(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        if tensor.device.type == "cpu" and storage.nbytes():
            self._allocations.append(_Allocation(storage, storage.data_ptr(), np.zeros(storage.nbytes(), dtype=bool)))

    def _written_by_torch(self, tensor: torch.Tensor) -> None:
        if tensor.device.type != "cpu" or tensor.numel() == 0:
            return
        buffer = _Buffer.of("", tensor)
        for allocation in self._allocations:
            lo = max(buffer.start - allocation.start, 0)
            hi = min(buffer.end - allocation.start, len(allocation.written))
            if lo < hi:
                allocation.written[lo:hi] = True

    def _allocation_at(self, address: int) -> _Allocation | None:
        return next((a for a in self._allocations if a.start == address), None)


class _Allocations(TorchDispatchMode):
    """Sees every PyTorch op in the checked block: tensors from torch.empty* are tracked as
    unwritten; an op that writes into a tensor marks the bytes its view covers as written (the
    whole span, so a strided write errs towards silence). Kernel launches are left out: the
    interpreter's own copies of the arguments are not the learner's writes."""

    def __init__(self, checker: MemoryChecker):
        super().__init__()
        self.checker = checker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.checker._in_launch:
            return out
        schema = func._schema
        if schema.name in _EMPTY_OPS and isinstance(out, torch.Tensor):
            self.checker._allocated(out)
        else:
            for position, argument in enumerate(schema.arguments):
                if argument.alias_info is None or not argument.alias_info.is_write:
                    continue
                value = args[position] if position < len(args) else kwargs.get(argument.name)
                for tensor in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(tensor, torch.Tensor):
                        self.checker._written_by_torch(tensor)
        return out


class BoundsGuard:
    """Refuses every load, store and atomic of the interpreter outside the tensors given to the
    launch that makes it (and, during a call, the call's own tensors, which a pointer table may
    reach): the access is never made, the launch stops with ``MemoryFault``, and ``fault`` keeps
    the finding even if the caller swallows the exception. Only bounds are checked, against the
    part of each tensor's storage that its view covers; races, alignment and uninitialised reads
    are ``MemoryChecker``'s job. ``install`` puts it in place for good (the grader's child),
    ``uninstall`` takes it out (tests).

    During ``call`` it also records, per storage a launch was given, the bytes its stores and
    atomics wrote (holding those storages, so that their memory cannot be handed to another
    tensor before the call's outputs are read): ``unwritten`` then names the returned tensors that
    hold values no store of a kernel wrote."""

    def __init__(self):
        self.fault: Finding | None = None
        self._in_launch = 0  # the launch seam's counter (shared with MemoryChecker)
        self._launches: list[list[tuple[_Buffer, torch.UntypedStorage]]] = []  # innermost last
        self._known: list[_Buffer] = []
        self._written: dict[int, tuple[torch.UntypedStorage, np.ndarray]] | None = None
        self._installed = False

    def install(self) -> BoundsGuard:
        from grader.core import instrument

        with _lock:
            if not _active:
                _patch_launches()
            _active.append(self)
        instrument.add_guard(self.check)
        self._installed = True
        return self

    def uninstall(self) -> None:
        from grader.core import instrument

        if not self._installed:
            return
        instrument.remove_guard(self.check)
        with _lock:
            _active.remove(self)
            if not _active:
                _unpatch_launches()
        self._installed = False

    def take_fault(self) -> Finding | None:
        """The first access refused since the last call of this method."""
        fault, self.fault = self.fault, None
        return fault

    # -- one call of the learner's API ----------------------------------------------------------
    def call(self, fn, args: tuple, kwargs: dict):
        """``fn`` wrapped: while it runs, the tensors of ``args`` and ``kwargs`` may be reached
        by any launch (pointer tables), and stores are recorded for ``unwritten``."""
        guard = self

        def called(*call_args, **call_kwargs):
            known: list[_Buffer] = []
            _collect_buffers("argument", list(args) + list(kwargs.values()), known)
            guard._known, guard._written = known, {}
            try:
                return fn(*call_args, **call_kwargs)
            finally:
                guard._known = []

        return called

    def unwritten(self, outputs) -> list[int]:
        """The positions in ``outputs`` of the tensors holding an element that no store of a
        kernel wrote during the last ``call`` and that is not all zero bytes (an element left as
        ``torch.zeros`` made it carries nothing). Forgets what the call stored."""
        written, self._written = self._written or {}, None
        found = []
        for index, tensor in enumerate(outputs):
            if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" or not tensor.numel():
                continue
            if _holds_unstored(tensor, written.get(tensor.untyped_storage().data_ptr())):
                found.append(index)
        return found

    # -- the launch seam (see _patch_launches) ---------------------------------------------------
    def _begin_launch(self, fn, args, kwargs) -> None:
        buffers: list[_Buffer] = []
        storages: list[torch.UntypedStorage] = []
        try:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
        except TypeError:
            bound = {f"argument {i}": a for i, a in enumerate(args)} | dict(kwargs)
        for name, value in bound.items():
            _collect_buffers(name, value, buffers, storages)
        self._launches.append(list(zip(buffers, storages)))

    def _end_launch(self) -> None:
        if self._launches:
            self._launches.pop()

    # -- every access -----------------------------------------------------------------------------
    def check(self, kind: str, ptrs, mask, itemsize: int) -> None:
        ptrs = np.asarray(ptrs)
        if mask is None:
            active = ptrs.ravel()
        else:
            mask = np.asarray(mask, dtype=bool)
            active = ptrs[mask if mask.shape == ptrs.shape else np.broadcast_to(mask, ptrs.shape)]
        if not active.size:
            return
        launch = self._launches[-1] if self._launches else []
        low, high = int(active.min()), int(active.max()) + itemsize
        for buffer, storage in launch:  # the usual case: one block inside one tensor
            if buffer.start <= low and high <= buffer.end:
                if kind != "load" and self._written is not None:
                    self._mark(buffer, storage, active, itemsize)
                return
        addresses = active.astype(np.uint64)
        inside = np.zeros(len(addresses), dtype=bool)
        for buffer in [b for b, _ in launch] + self._known:
            if buffer.end - buffer.start >= itemsize:
                inside |= (addresses >= np.uint64(buffer.start)) & (addresses <= np.uint64(buffer.end - itemsize))
        if inside.all():
            if kind != "load" and self._written is not None:
                for buffer, storage in launch:
                    lanes = (addresses >= np.uint64(buffer.start)) & (addresses < np.uint64(buffer.end))
                    if lanes.any():
                        self._mark(buffer, storage, addresses[lanes], itemsize)
            return
        self._refuse(kind, ptrs, mask, launch, int(np.flatnonzero(~inside)[0]), int(addresses[~inside][0]), itemsize)

    def _mark(self, buffer: _Buffer, storage, addresses, itemsize: int) -> None:
        entry = self._written.get(buffer.storage_start)
        if entry is None or len(entry[1]) != buffer.storage_end - buffer.storage_start:
            entry = (storage, np.zeros(buffer.storage_end - buffer.storage_start, dtype=bool))
            self._written[buffer.storage_start] = entry
        offsets = addresses.astype(np.int64) - buffer.storage_start
        if itemsize == 1:
            entry[1][offsets] = True
        else:
            entry[1][(offsets[:, None] + np.arange(itemsize)).ravel()] = True

    def _refuse(self, kind: str, ptrs, mask, launch, position: int, address: int, itemsize: int) -> None:
        from triton.runtime import interpreter

        from grader.core.instrument import where

        kernel, file, line = where()
        if mask is None:
            lanes = np.argwhere(np.ones(ptrs.shape, dtype=bool))
        else:
            lanes = np.argwhere(mask if mask.shape == ptrs.shape else np.broadcast_to(mask, ptrs.shape))
        lane = tuple(int(i) for i in lanes[position]) if len(lanes) > position else ()
        builder = interpreter.interpreter_builder
        grid = tuple(getattr(builder, "grid_dim", None) or (1, 1, 1))
        program = tuple(getattr(builder, "grid_idx", None) or (0, 0, 0))
        axes = max((i + 1 for i, n in enumerate(grid) if n > 1), default=1)
        buffers = [b for b, _ in launch]
        buffer = _nearest(buffers, address)
        near = buffer is not None and min(abs(address - buffer.start), abs(address - buffer.end)) < (1 << 20)
        if near:  # a mask or an offset a little off: say where, as the memory checker does
            what = _outside(buffer, address, itemsize)
        else:
            what = f"address {address:#x} is in none of the tensors given to the kernel"
        lane_text = str(lane[0]) if len(lane) == 1 else str(lane)
        finding = Finding(
            "out-of-bounds",
            f"{kind} at line {line} of {Path(file).name} (kernel {kernel}), program "
            f"{program[:axes]}, lane {lane_text}: {what}. A kernel may touch only the tensors passed "
            "to its launch; the grader refused the access.",
            kernel,
            file,
            line,
            program[:axes],
            lane,
            buffer.name if near else None,
        )
        if self.fault is None:
            self.fault = finding
        raise MemoryFault(finding)


def _holds_unstored(tensor: torch.Tensor, entry) -> bool:
    """Whether ``tensor`` has an element that is not all zero bytes and whose bytes the stores
    recorded in ``entry`` (storage, bytes written) do not all cover."""
    size, storage = tensor.element_size(), tensor.untyped_storage()
    flat = tensor.detach()
    if not flat.is_contiguous():
        flat = flat.contiguous()  # the values, in flat order (the stored bytes are read by offset)
    values = flat.reshape(-1).view(torch.uint8).numpy().reshape(tensor.numel(), size)
    if entry is None or len(entry[1]) != storage.nbytes():
        return bool(values.any())
    start = tensor.data_ptr() - storage.data_ptr()
    if tensor.is_contiguous():  # the usual case: one run of bytes, read in place
        stored = entry[1][start : start + tensor.numel() * size].reshape(-1, size).all(axis=1)
    else:
        offsets = _element_offsets(tensor) * size + start
        stored = entry[1][offsets[:, None] + np.arange(size)].all(axis=1)
    return not stored.all() and bool(values[~stored].any())


# -- the launch seam --------------------------------------------------------------------------------
# GridExecutor.__call__ runs one launch; GridExecutor._init_args_hst turns its arguments into the
# host tensors the kernel's addresses point into. Both have the same signature on Triton 3.6-3.9.


def _patch_launches() -> None:
    from triton.runtime.interpreter import GridExecutor

    call, init = GridExecutor.__call__, GridExecutor._init_args_hst
    _originals.update(call=call, init=init)

    def checked_call(self, *args, **kwargs):
        checkers = list(_active)
        for checker in checkers:
            checker._in_launch += 1
        try:
            return call(self, *args, **kwargs)
        finally:
            for checker in checkers:
                checker._in_launch -= 1
                checker._end_launch()

    def checked_init(self, args_dev, kwargs):
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        for checker in list(_active):
            checker._begin_launch(self.fn, args_hst, kwargs_hst)
        return args_hst, kwargs_hst

    GridExecutor.__call__, GridExecutor._init_args_hst = checked_call, checked_init


def _unpatch_launches() -> None:
    from triton.runtime.interpreter import GridExecutor

    GridExecutor.__call__, GridExecutor._init_args_hst = _originals.pop("call"), _originals.pop("init")


def _collect_buffers(name: str, value, buffers: list[_Buffer], storages: list | None = None) -> None:
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _collect_buffers(f"{name}[{i}]", item, buffers, storages)
    elif hasattr(value, "base") and hasattr(value, "block_shape"):  # a tensor descriptor
        _collect_buffers(name, value.base, buffers, storages)
    elif hasattr(value, "data_ptr"):
        tensor = getattr(value, "base", value) if not isinstance(value, torch.Tensor) else value
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
            # (a TensorWrapper, a reinterpreted dtype, wraps one)
            buffers.append(_Buffer.of(name, tensor))
            if storages is not None:
                storages.append(tensor.untyped_storage())


# -- small helpers -----------------------------------------------------------------------------------


def _axes(launch: _Launch) -> tuple:
    """The grid's axes worth naming: (3,) for a 1-D grid, (3, 1) for a 2-D one."""
    used = max((i + 1 for i, n in enumerate(launch.grid) if n > 1), default=1)
    return launch.grid[:used]


def _linear(program: tuple, grid: tuple) -> int:
    return program[0] + program[1] * grid[0] + program[2] * grid[0] * grid[1]


def _unlinear(index: int, grid: tuple, axes: int) -> tuple:
    x, rest = index % grid[0], index // grid[0]
    return (x, rest % grid[1], rest // grid[1])[:axes]


def _nearest(buffers: list[_Buffer], address: int) -> _Buffer | None:
    def distance(buffer: _Buffer) -> int:
        if buffer.start <= address < max(buffer.end, buffer.start + 1):
            return 0
        return buffer.start - address if address < buffer.start else address - buffer.end + 1

    return min(buffers, key=distance, default=None)


def _outside(buffer: _Buffer, address: int, size: int, every_lane: bool = False) -> str:
    """Where ``address`` lies against ``buffer``, and what to check. ``every_lane``: no lane of
    the access landed in a tensor, which a missing mask alone rarely explains."""
    if buffer.numel == 0:
        return f"{buffer.describe()} is empty, so no lane may touch it"
    if address >= buffer.end:
        past = address + size - buffer.end
        where = f"{past} bytes past the end of {buffer.describe()}"
    elif address < buffer.start:
        where = f"{buffer.start - address} bytes before the start of {buffer.describe()}"
    else:
        where = f"partly past the end of {buffer.describe()}"
    if buffer.storage_start <= address and address + size <= buffer.storage_end:
        where += (
            " (still inside the memory it is a view of, which is someone else's data: a GPU "
            "would not stop, it would read or overwrite it)"
        )
    if every_lane:
        return (
            where + "; every lane of this program's access is outside, which usually means the program "
            "starts in the wrong place (how its offset is computed from program_id, a row or head mapping) "
            "or should not run at all (a grid larger than the data), more than a missing mask"
        )
    return where + "; check the mask of this access, and where the mask is right, the offsets it guards (strides)"


def _element_offsets(tensor: torch.Tensor) -> np.ndarray:
    """The element offset from data_ptr of each element of ``tensor``, in flat (row-major) order."""
    offsets = np.zeros((), dtype=np.int64)
    for size, stride in zip(tensor.shape, tensor.stride()):
        offsets = offsets[..., None] + np.arange(size, dtype=np.int64) * stride
    return offsets.ravel()


def _flat_ranges(indices: np.ndarray, shown: int = 3) -> str:
    """``[5, 6, 7, 9]`` -> "5..7, 9" (at most ``shown`` ranges, then "...")."""
    ranges: list[str] = []
    start = prev = int(indices[0])
    for i in [int(i) for i in indices[1:]] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        ranges.append(f"{start}" if start == prev else f"{start}..{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(ranges[:shown]) + (", ..." if len(ranges) > shown else "")
