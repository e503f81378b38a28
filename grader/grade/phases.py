"""Progress of the grader's phases, for the instructor who waits: one bar per phase, with its
count (done/total, in the phase's unit) and an ETA, then a table of each phase's wall time.

``python -m grader grade`` (``grader.grade.pipeline``) and ``python -m grader run``
(``grader.grade.runphase``) report through a ``Phases``:

    phases = Phases()
    with phases.phase("autograde", total=12, unit="notebooks") as bar:
        ...                       # bar.advance() as each one ends
    print(table(phases.results))

On a terminal (stderr) a bar is one line redrawn in place; elsewhere (CI, a log file) a plain
line is printed when a phase starts, at most every ``PLAIN_EVERY`` seconds after that, and when
it ends, never a carriage return. ``Phases(enabled=False)`` prints nothing and still measures.
The ETA is elapsed / done x remaining, shown once the first item has ended; items that ended at
once (a reused record, a refused file: ``advance(tag=...)``) count as done but not towards the
rate. This module imports nothing of the grader: the others use it, not the other way round.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

PLAIN_EVERY = 5.0  # seconds between two plain progress lines of one phase
REDRAW_EVERY = 0.1  # seconds between two redraws of a terminal bar
BAR_WIDTH = 24


@dataclass
class Result:
    """What one phase did: ``done`` of ``total`` items in ``seconds`` (None: skipped)."""

    name: str
    unit: str = ""
    done: int | None = None  # None: a step without a count
    total: int | None = None
    seconds: float | None = None
    tags: dict[str, int] = field(default_factory=dict)  # e.g. {"reused": 3}
    why: str = ""  # why it was skipped

    def count(self) -> str:
        """E.g. "12/12 gradings (3 reused)"; why it was skipped; "" for a step without a count."""
        if self.seconds is None:
            return self.why
        tags = ", ".join(f"{n} {tag}" for tag, n in self.tags.items())
        return _count(self.done, self.total, self.unit) + (f" ({tags})" if tags else "")


def _count(done: int | None, total: int | None, unit: str) -> str:
    if done is None:
        return ""
    return (f"{done}" if total is None else f"{done}/{total}") + (f" {unit}" if unit else "")


def duration(seconds: float) -> str:
    """12 s, 3:05, 1:02:03."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Bar:
    """One phase's progress; made by ``Phases.phase``."""

    def __init__(self, phases: Phases, name: str, total: int | None, unit: str):
        self.phases, self.name, self.unit = phases, name, unit
        self._total, self.done, self.instant = total, 0, 0
        self.tags: Counter = Counter()
        self.note = ""
        self.drawn = 0  # characters of the terminal line drawn last
        self.started = phases.clock()
        self.printed = self.started  # when the last line was written
        self._lock = threading.Lock()

    @property
    def total(self) -> int | None:
        return self._total

    @total.setter
    def total(self, total: int | None) -> None:
        """Once known (after the phase began): shown at once."""
        known, self._total = self._total is not None, total
        if not known:
            self.phases._begin(self)

    def advance(self, n: int = 1, note: str = "", tag: str = "") -> None:
        """``n`` more items ended; ``note`` says something about the last one; a ``tag``
        (e.g. "reused") counts them as such, and as having taken no time."""
        with self._lock:
            self.done += n
            if tag and n:
                self.tags[tag] += n
                self.instant += n
            self.note = note or self.note
            self.phases._show(self)

    def finish(self, done: int | None = None) -> None:
        """The phase's real count, where it is known better than by counting (an nbgrader
        command's outputs, once it has ended); the total too when it was not known."""
        with self._lock:
            if done is not None:
                self.done = done
            if self._total is None and done is not None:
                self._total = done

    def elapsed(self) -> float:
        return self.phases.clock() - self.started

    def eta(self) -> float | None:
        """Seconds left: elapsed / done x remaining; None before the first item ended."""
        worked = self.done - self.instant
        if self.total is None or worked <= 0 or self.done >= self.total:
            return None
        return self.elapsed() / worked * (self.total - self.done)

    def counted(self) -> bool:
        return bool(self.unit) or self.total is not None

    def count(self) -> str:
        return _count(self.done if self.counted() else None, self.total, self.unit)

    def line(self, plain: bool) -> str:
        """The progress line: words, or on a terminal a bar and the last item's note."""
        eta = self.eta()
        timing = duration(self.elapsed()) + (f", ETA {duration(eta)}" if eta is not None else "")
        if not self.done:  # (a line is drawn again only as items end: a time here would stand still)
            timing = "" if plain or self.total else "..."
        percent = f"{100 * self.done // self.total}%" if self.total else ""
        if plain:
            count = self.count() + (f" ({percent})" if percent else "")
            return f"{self.name}: " + ", ".join(p for p in (count, timing) if p)
        bar = ""
        if self.total:
            filled = min(BAR_WIDTH, BAR_WIDTH * self.done // self.total)
            bar = f"|{'#' * filled}{'.' * (BAR_WIDTH - filled)}|"
        text = " ".join(p for p in (self.name, bar, self.count(), percent, timing) if p)
        return text + (f"  {self.note}" if self.note else "")

    def result(self, seconds: float | None) -> Result:
        return Result(self.name, self.unit, self.done if self.counted() else None, self.total, seconds, dict(self.tags))


class Phases:
    """The phases of one command: their bars while they run, their results afterwards."""

    def __init__(
        self,
        enabled: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        interactive: bool | None = None,
        every: float = PLAIN_EVERY,
        width: int | None = None,
    ):
        self.enabled, self._stream, self.clock = enabled, stream, clock
        self._interactive, self.every, self._width = interactive, every, width
        self.results: list[Result] = []

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr  # (looked up late: tests replace sys.stderr)

    def interactive(self) -> bool:
        if self._interactive is not None:
            return self._interactive
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def width(self) -> int:
        return self._width or shutil.get_terminal_size((100, 20)).columns

    @property
    def seconds(self) -> dict[str, float]:
        """Wall seconds per phase that ran, in their order (a phase run twice: both added)."""
        seconds: dict[str, float] = {}
        for result in self.results:
            if result.seconds is not None:
                seconds[result.name] = round(seconds.get(result.name, 0.0) + result.seconds, 2)
        return seconds

    @contextmanager
    def phase(self, name: str, total: int | None = None, unit: str = ""):
        """Time a phase and show its bar; ``unit`` names what it counts (none: a plain step).
        ``bar.total`` may be set later, once known."""
        bar = Bar(self, name, total, unit)
        self._begin(bar)
        try:
            yield bar
        finally:
            result = bar.result(round(bar.elapsed(), 2))
            self.results.append(result)
            if self.enabled:
                done = f"{name}: " + ", ".join(p for p in (result.count(), f"{result.seconds:.1f} s") if p)
                self._write(("\r" + done.ljust(bar.drawn) if self.interactive() else done) + "\n")

    def skip(self, name: str, unit: str = "", why: str = "nothing to do") -> None:
        """A phase with nothing to do this time: in the table, not in ``seconds``."""
        self.results.append(Result(name, unit, 0, 0, None, why=why))
        if self.enabled:
            self._write(f"{name}: {why}\n")

    def _begin(self, bar: Bar) -> None:
        """A phase's first line: with its total, where it is known."""
        if self.enabled and self.interactive():
            self._draw(bar)
        elif self.enabled and bar.total:
            self._write(bar.line(plain=True) + "\n")

    def _show(self, bar: Bar) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if self.interactive():
            if now - bar.printed >= REDRAW_EVERY or (bar.total is not None and bar.done >= bar.total):
                self._draw(bar)
                bar.printed = now
        elif now - bar.printed >= self.every and not (bar.total is not None and bar.done >= bar.total):
            self._write(bar.line(plain=True) + "\n")  # (the phase's last line says 100%)
            bar.printed = now

    def _draw(self, bar: Bar) -> None:
        text = bar.line(plain=False)[: self.width() - 1]
        self._write("\r" + text.ljust(bar.drawn))
        bar.drawn = len(text)

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def quiet_bar(total: int | None = None) -> Bar:
    """A bar that shows nothing, for a caller that passed none."""
    return Bar(Phases(enabled=False), "", total, "")


def table(results: list[Result]) -> str:
    """One line per phase: its name, its count and its wall seconds, then the total."""
    rows = []
    for result in results:
        rows.append((result.name, result.count(), f"{result.seconds:.1f}" if result.seconds is not None else "-"))
    total = sum(r.seconds for r in results if r.seconds is not None)
    rows.append(("total", "", f"{total:.1f}"))
    widths = [max(len(row[i]) for row in [("phase", "count", "seconds"), *rows]) for i in range(3)]
    lines = [f"{'phase':<{widths[0]}}  {'count':<{widths[1]}}  {'seconds':>{widths[2]}}"]
    lines += [f"{name:<{widths[0]}}  {count:<{widths[1]}}  {seconds:>{widths[2]}}" for name, count, seconds in rows]
    return "\n".join(line.rstrip() for line in lines)
