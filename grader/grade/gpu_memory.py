"""How much GPU memory each child may allocate, so that the caps of all the children alive on one
GPU add up to no more than the GPU can hold.

A cap alone (``torch.cuda.set_per_process_memory_fraction`` in the child) does not do that: eight
gradings with a public and a hidden child each, plus timed children waiting frozen with their
benchmark inputs still on the GPU, could together ask for several GPUs' worth, and the child that
ran out would be marked down for another submission's memory. So every child's cap is reserved in
a ledger of its GPU before the child starts, and given back once it has ended; a reservation that
does not fit waits. Each grading holds one reservation at a time (its correctness children's,
then its timing's), taken before it waits for the GPU's lease (``grader.grade.leases``), so a
grading that waits for memory holds nothing another one waits for.

Correctness children get an equal share that never waits while all gradings are checking
correctness; a timing gets what its inputs need, at most half of the budget per child (the
submission's and the reference's children exist together).

The ledger is this grader's: two graders on one GPU (the grader's own tests on several workers,
two classes graded at once) would each budget the whole GPU, and a child of one could run out of
memory the other's children hold. ``GRADER_GPU_SHARED_BY=N`` gives each of N graders 1/N.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import torch

GIB = 1 << 30
CONTEXT_BYTES = 2 * GIB  # room for what a child's kernels use beside its inputs: outputs, workspaces
INPUT_FACTOR = 4  # a timed child holds its inputs, the audit call's, and outputs of about their size
SHARED_BY = "GRADER_GPU_SHARED_BY"  # how many graders share each GPU (their budgets add up to one)


class MemoryBudget:
    """The GPU memory reserved by the children of one GPU, against a fixed budget."""

    def __init__(self, budget: int):
        self.budget = budget
        self._used = 0
        self._lock = threading.Condition()

    @contextmanager
    def reserve(self, nbytes: int):
        """Hold ``nbytes`` (at most the whole budget) for as long as the block runs; wait first
        while they do not fit beside what is held."""
        nbytes = min(max(0, nbytes), self.budget)
        with self._lock:
            self._lock.wait_for(lambda: self._used + nbytes <= self.budget)
            self._used += nbytes
        try:
            yield nbytes
        finally:
            with self._lock:
                self._used -= nbytes
                self._lock.notify_all()

    @property
    def used(self) -> int:
        with self._lock:
            return self._used


_ledgers: dict[int, MemoryBudget] = {}
_ledgers_lock = threading.Lock()


def for_gpu(index: int, fraction: float) -> MemoryBudget:
    """The ledger of GPU ``index`` in this process: ``fraction`` of its memory (the rest is the
    grader's own and the CUDA contexts')."""
    with _ledgers_lock:
        if index not in _ledgers:
            total = torch.cuda.get_device_properties(index).total_memory
            _ledgers[index] = MemoryBudget(budget_bytes(total, fraction, graders_sharing()))
        return _ledgers[index]


# A wrong output's diagnosis may hold this part of the grader's own share of a GPU (what the
# children's ``fraction`` leaves): the rest holds the cases' inputs and references.
DIAGNOSIS_PART = 3
_rooms: dict[int, MemoryBudget] = {}


def diagnosis_room(index: int, fraction: float):
    """``grader.core.diagnosis.diagnose``'s ``room`` on GPU ``index``: a diagnosis reserves what it
    needs there (waiting while others' do not leave room), or is told None when it could never
    fit, so that the judgings of many gradings never take memory the children were promised."""
    with _ledgers_lock:
        if index not in _rooms:
            total = torch.cuda.get_device_properties(index).total_memory
            _rooms[index] = MemoryBudget(budget_bytes(total, 1.0 - fraction, graders_sharing()) // DIAGNOSIS_PART)
        room = _rooms[index]
    return lambda nbytes: _room(room, nbytes, torch.device("cuda", index))


@contextmanager
def _room(room: MemoryBudget, nbytes: int, on):
    if nbytes > room.budget:
        yield None
        return
    with room.reserve(nbytes):
        yield on


def budget_bytes(total: int, fraction: float, graders: int) -> int:
    """This grader's budget on a GPU of ``total`` bytes: ``fraction`` of it, split evenly between
    the ``graders`` that share the GPU."""
    return int(total * fraction) // graders


class SharingError(ValueError):
    """``GRADER_GPU_SHARED_BY`` holds something other than a count of graders."""


def graders_sharing(environ=os.environ) -> int:
    """How many graders share each GPU: ``GRADER_GPU_SHARED_BY``, 1 when unset."""
    raw = environ.get(SHARED_BY, "").strip()
    if not raw:
        return 1
    if not raw.isdigit() or int(raw) < 1:
        raise SharingError(
            f"{SHARED_BY}={raw!r}: it must be how many graders share each GPU, a whole number of 1 or "
            f"more; unset it when this grader has the GPUs to itself."
        )
    return int(raw)


def correctness_cap(ledger: MemoryBudget, gradings: int, children_per_grading: int) -> int:
    """Each correctness child's cap: an equal share for every child the GPU's gradings may run
    at once, so that these reservations never wait for one another."""
    return ledger.budget // max(1, gradings * children_per_grading)


def timed_cap(ledger: MemoryBudget, input_bytes: int, floor: int) -> int:
    """A timed child's cap: room for its timing inputs (the rotated sets and the audit call's,
    ``input_bytes`` in all), what its calls produce from them, and its kernels' own needs; never
    less than a correctness child's (``floor``), never more than half the budget."""
    return max(floor, min(ledger.budget // 2, INPUT_FACTOR * input_bytes + CONTEXT_BYTES))


def fraction_of(nbytes: int, index: int) -> float:
    """``nbytes`` as the fraction of GPU ``index``'s memory that PyTorch's allocator takes."""
    return nbytes / torch.cuda.get_device_properties(index).total_memory
