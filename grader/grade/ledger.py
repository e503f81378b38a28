"""What happened while one file of one module was graded: the verdicts, the crashes, the CPU time
its children spent, the log, the performance entry. ``grader.grade.grading.Grading`` keeps one
beside its read-only ``Plan``; the children's drivers write it, ``grader.grade.results`` reads it
into the record.

The public and hidden children may run at the same time (two threads), so what both update (the
counters, the CPU time) changes under a lock.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.grade.judging import Trial, Verdict
from grader.grade.scoring import PERFORMANCE_NOT_GRADED
from grader.sandbox.isolation import ChildEnded

if TYPE_CHECKING:
    from grader.grade.plan import Plan


@dataclass
class Ledger:
    plan: Plan
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # trial id -> its verdict, once it counts
    # Verdicts of cases that ran in a child that crashed afterwards: the crash may be theirs, or an
    # earlier case's damage may have decided them; each runs again alone (``Grading.run``).
    unconfirmed: dict[int, Verdict] = field(default_factory=dict)
    crashes: list[tuple[ChildEnded, set[int]]] = field(default_factory=list)  # of children that ran several trials
    load_error: str | None = None  # why kernel.py could not be imported, once a child found it so
    protections: dict = field(default_factory=dict)  # what the sandbox could set up, as a child reported it
    children: int = 0  # child processes started
    cpu_spent: float = 0.0  # CPU seconds of the finished children
    public_spent: float = 0.0  # of which by children that ran public cases
    public_share: float = 0.0  # what the public cases may spend (set when the cases start)
    public_done: bool = False  # no public child will start any more
    import_cpu: float = 0.0  # what a child has taken to import the submission (at most)
    batch: int = 0  # trials per child: halved after a crash, doubled after a clean exit
    wall_end: float = math.inf  # when the cases must stop, by the wall clock
    log: list[str] = field(default_factory=list)  # what the children printed, for instructors only
    performance: dict = field(default_factory=lambda: dict(PERFORMANCE_NOT_GRADED))
    traced: bool = False  # a child's report carried a CUDA kernel trace
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.batch = self.batch or len(self.plan.trials)

    def child_started(self) -> None:
        with self._lock:
            self.children += 1

    def child_ended(self, cpu_seconds: float, visibility: str) -> None:
        with self._lock:
            self.cpu_spent += cpu_seconds
            if visibility == "public":
                self.public_spent += cpu_seconds

    def public_ended(self) -> None:
        with self._lock:
            self.public_done = True

    def spent(self, visibility: str) -> float:
        """CPU seconds that count against ``visibility``'s limit: public cases have a share of
        their own (hidden children running beside them do not eat it); hidden cases have what
        is left of the whole budget, less what public children beside them may still spend (a
        hidden step's limit is fixed when it starts, and both must fit in the budget)."""
        if visibility == "public":
            return self.public_spent
        with self._lock:
            reserved = 0.0 if self.public_done else max(0.0, self.public_share - self.public_spent)
            return self.cpu_spent + reserved

    def pending(self, visibility: str) -> list[Trial]:
        """The trials of ``visibility`` with no verdict yet. A repeat of a case that already
        failed needs no running: it fails the same way."""
        for trial in self.plan.trials:
            if trial.repeat and trial.id not in self.verdicts:
                first = self.verdicts.get(trial.id - 1)
                if first is not None and not first.passed:
                    self.verdicts[trial.id] = Verdict(False, first.kind, first.message, crash=first.crash)
        for trial_id in list(self.verdicts):  # a copy: the other visibility's thread may add to it
            self.unconfirmed.pop(trial_id, None)
        return [t for t in self.plan.trials if t.id not in self.verdicts and self.plan.visibility(t) == visibility]
