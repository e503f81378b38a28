"""Every global-memory access a Triton kernel makes under the interpreter: what was touched, by
which program and lane, from which source line.

The interpreter (``TRITON_INTERPRET=1``) runs a kernel one program at a time with numpy, and
performs every load, store and atomic through four functions of Triton's C extension (``load``,
``store``, ``atomic_rmw``, ``atomic_cas``), which ``triton.runtime.interpreter`` calls through its
module global ``_interpreter``. That is the seam used here: those four signatures are the same on
Triton 3.6 and 3.9, while the builder methods around them (cache and eviction arguments, tensor
descriptors) changed between the two. Tensor-descriptor loads and stores end in the same calls.

Clients (the memory-traffic report of the optimization track, the out-of-bounds and race checks)
open an ``AccessRecorder`` around a kernel call and get one ``Access`` per executed load, store
or atomic: the block of byte addresses (a lane is a position in the block), the mask of lanes
that really touched memory, the element size, the program id, the kernel and the source line.

A guard (``add_guard``) is the cheaper hook beneath: it gets the raw addresses and mask of each
access before any listener and before the access is made, and may refuse it by raising. The
grader's child keeps one installed for its whole life (``grader.core.memcheck.BoundsGuard``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Folders as code objects may name them: as imported, and with links resolved (a venv reached
# through a symbolic link names its files by the link).
_TRITON_DIR: tuple[str, ...] | None = None  # the installed triton package's folder, found on first use
_HARNESS_DIR = tuple({str(Path(__file__).parent), str(Path(__file__).resolve().parent)})


@dataclass(frozen=True)
class Access:
    kind: str  # "load", "store" or "atomic"
    program: tuple[int, int, int]  # tl.program_id along axes 0, 1, 2
    addresses: np.ndarray  # uint64 byte addresses, shaped like the block; lane = index in it
    active: np.ndarray  # bool, same shape: the lanes whose mask let them touch memory
    itemsize: int  # bytes per element
    kernel: str  # the @triton.jit function that was launched
    file: str  # where the tl.load / tl.store is written (the kernel or a helper it calls)
    line: int
    values: np.ndarray | None = None  # what a store writes (shaped like the block or broadcast to it)

    @property
    def touched(self) -> np.ndarray:
        """The byte addresses of the active lanes, flattened in lane order."""
        return self.addresses[self.active]


Listener = Callable[[Access], None]
# (kind, addresses, mask or None, itemsize): called before the access is made; raises to refuse it.
Guard = Callable[[str, np.ndarray, "np.ndarray | None", int], None]
_listeners: list[Listener] = []
_guards: list[Guard] = []
_lock = threading.Lock()
_original = None  # triton's _interpreter module while a recorder or a guard is installed


class AccessRecorder:
    """``with AccessRecorder() as recorder: kernel[grid](...)`` keeps ``recorder.accesses``;
    with ``on_access`` each access goes to that callback instead (nothing is kept), which suits
    long runs. Recorders nest; each sees every access made while it is open."""

    def __init__(self, on_access: Listener | None = None):
        self.accesses: list[Access] = []
        self._listener = on_access or self.accesses.append

    def __enter__(self) -> AccessRecorder:
        _add_listener(self._listener)
        return self

    def __exit__(self, *exc) -> bool:
        _remove_listener(self._listener)
        return False


def _add_listener(listener: Listener) -> None:
    with _lock:
        _listeners.append(listener)
        _sync()


def _remove_listener(listener: Listener) -> None:
    with _lock:
        _listeners.remove(listener)
        _sync()


def add_guard(guard: Guard) -> None:
    """Call ``guard`` before every load, store and atomic of every launch from now on."""
    with _lock:
        _guards.append(guard)
        _sync()


def remove_guard(guard: Guard) -> None:
    with _lock:
        _guards.remove(guard)
        _sync()


def _sync() -> None:
    """Stand in for triton's ``_interpreter`` while anyone listens or guards; restore it after."""
    global _original
    from triton.runtime import interpreter

    if (_listeners or _guards) and _original is None:
        _original = interpreter._interpreter
        interpreter._interpreter = _RecordingInterpreter(_original)
    elif not (_listeners or _guards) and _original is not None:
        interpreter._interpreter = _original
        _original = None


class _RecordingInterpreter:
    """Stands in for triton's ``_interpreter`` extension module: reports each memory call to the
    listeners, then performs it with the real function. Everything else passes through."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def load(self, ptrs, mask, other, dtype):
        itemsize = np.dtype(dtype).itemsize
        for guard in _guards:
            guard("load", ptrs, mask, itemsize)
        if _listeners:
            _report("load", ptrs, mask, itemsize)
        return self._real.load(ptrs, mask, other, dtype)

    def store(self, ptrs, values, mask):
        itemsize = np.asarray(values).dtype.itemsize
        for guard in _guards:
            guard("store", ptrs, mask, itemsize)
        if _listeners:
            _report("store", ptrs, mask, itemsize, values)
        return self._real.store(ptrs, values, mask)

    def atomic_rmw(self, op, ptrs, values, mask, sem):
        itemsize = np.asarray(values).dtype.itemsize
        for guard in _guards:
            guard("atomic", ptrs, mask, itemsize)
        if _listeners:
            _report("atomic", ptrs, mask, itemsize)
        return self._real.atomic_rmw(op, ptrs, values, mask, sem)

    def atomic_cas(self, ptrs, expected, values, sem):
        itemsize = np.asarray(values).dtype.itemsize
        for guard in _guards:
            guard("atomic", ptrs, None, itemsize)
        if _listeners:
            _report("atomic", ptrs, np.ones(np.shape(ptrs), dtype=bool), itemsize)
        return self._real.atomic_cas(ptrs, expected, values, sem)


def _report(kind: str, ptrs, mask, itemsize: int, values=None) -> None:
    from triton.runtime import interpreter

    addresses = np.array(ptrs, dtype=np.uint64, copy=True)
    active = np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape).copy()
    grid_idx = getattr(interpreter.interpreter_builder, "grid_idx", None) or (0, 0, 0)
    kernel, file, line = where()
    access = Access(
        kind,
        tuple(int(i) for i in grid_idx),
        addresses,
        active,
        itemsize,
        kernel,
        file,
        line,
        None if values is None else np.asarray(values),
    )
    for listener in list(_listeners):
        listener(access)


def where() -> tuple[str, str, int]:
    """(launched kernel, file, line) of the access being made, called from inside the access. The
    line is the innermost frame outside triton and grader.core (a helper the kernel calls, or the
    kernel); the launched kernel is the first such frame inside the interpreter's launch (frames
    above that are the launcher's)."""
    global _TRITON_DIR
    if _TRITON_DIR is None:
        import triton

        _TRITON_DIR = tuple({str(Path(triton.__file__).parent), str(Path(triton.__file__).resolve().parent)})
    frames = []  # innermost first
    frame = sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back

    def ours(f) -> bool:  # not triton, not the harness's own patches of the interpreter
        return not f.f_code.co_filename.startswith(_TRITON_DIR + _HARNESS_DIR)

    innermost = next((f for f in frames if ours(f)), None)
    if innermost is None:
        return "?", "?", 0
    kernel = innermost
    inside_launch = False
    for f in reversed(frames):  # outermost first
        if f.f_code.co_filename.startswith(_TRITON_DIR) and f.f_code.co_filename.endswith("interpreter.py"):
            inside_launch = True
        elif inside_launch and ours(f):
            kernel = f
            break
    return kernel.f_code.co_name, innermost.f_code.co_filename, innermost.f_lineno
