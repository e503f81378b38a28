"""Where the run phase's time goes, per submission of one module (``--profile``).

Each grading keeps the wall seconds of its steps; the child reports three of them itself (its
own imports, and the compiling and autotuning Triton reports to its listeners where the
installed Triton has them), which are claims of a process that ran learner code: good enough to see where
time goes, never used for a grade. ``table`` sums the gradings of a run per module.
"""

from __future__ import annotations

import json
import resource
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.grade.leases import IDLE_LIMIT_SECONDS

# In the order a grading meets them.
STEPS = (
    ("waiting", "waiting: for a worker slot (a GPU, or CPU cores), for another grading's timing, for GPU memory"),
    ("memory wait", "of which for GPU memory that other gradings' children had reserved"),
    ("alone wait", "of which for the GPU alone, to time this grading's kernel"),
    ("planning", "the grading's plan: its cases, and the policy gate reading kernel.py"),
    ("inputs", "building the cases' inputs in the grader"),
    ("sandbox", "starting sandboxed processes"),
    ("imports", "the child importing torch, Triton and the harness"),
    ("learner import", "importing kernel.py"),
    ("cases", "the calls of the public and hidden cases (compiling included)"),
    ("compiling", "of which Triton compiling, where Triton reports it"),
    ("autotuning", "of which autotuning (its configs' compiling included), where reported"),
    ("stopped calls", "calls that a crash or a time limit ended (the file's own: an endless loop waits out its limit)"),
    ("judging", "references and comparisons in the grader"),
    ("judging memory wait", "of which waiting for the grader's memory that other judgings held (its budget)"),
    ("judging reads", "of which reading what the child saved (its outputs, the inputs as it left them)"),
    ("judging references", "of which computing the references (float64, where the inputs are)"),
    ("judging comparisons", "of which comparing the outputs with them, and diagnosing wrong ones"),
    ("timing start", "starting the timed children and their first call (compiling), sharing the GPU"),
    ("reference timing", "timing the reference solution (once per run and GPU)"),
    ("learner timing", "timing the submission's kernel, with the GPU alone"),
    ("warm-up", "of the two timings, the first calls before each timed loop (tuning again, alone)"),
    ("tuning alone", "of which autotuning, where reported"),
    ("compiling alone", "of which compiling that the first call beside other processes left (normally 0)"),
    ("timed check", "saving and checking the timed call's outputs, sharing the GPU again"),
    ("exits", "children exiting after their last case"),
    ("closing", "closing each ended child (its working folder removed) and the grading's shared Triton cache"),
    ("record", "building the grading's record from its verdicts"),
    ("other", "the rest: logs, feedback to the grader's threads, and what no step above covers"),
)
# Parts of another step, not added to the total.
INSIDE = {
    "compiling",
    "autotuning",
    "warm-up",
    "tuning alone",
    "compiling alone",
    "memory wait",
    "alone wait",
    "judging memory wait",
    "judging reads",
    "judging references",
    "judging comparisons",
}
_adding = threading.Lock()


def claimed_seconds(value) -> float:
    """A duration a child reported, or 0 for anything that is not a plain non-negative number."""
    return float(value) if type(value) in (int, float) and 0 <= value < 1e6 else 0.0


@dataclass
class Profile:
    seconds: dict[str, float] = field(default_factory=dict)
    total: float = 0.0
    spans: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, step), monotonic
    # The wall seconds no step covers, by the step that ended just before them (``uncovered``).
    gaps: dict[str, float] = field(default_factory=dict)

    def add(self, step: str, seconds: float) -> None:
        """``seconds`` of ``step`` that ended now."""
        seconds = max(0.0, float(seconds))
        with _adding:  # a grading's public and hidden children may report at once
            self.seconds[step] = self.seconds.get(step, 0.0) + seconds
            if step not in INSIDE and seconds > 0:
                now = time.monotonic()
                self.spans.append((now - seconds, now, step))

    @contextmanager
    def step(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - started)

    def close(self, total: float) -> None:
        """The grading took ``total`` seconds of wall time: what no step accounts for is "other"."""
        self.total = total
        counted = sum(s for name, s in self.seconds.items() if name not in INSIDE and name != "other")
        self.seconds["other"] = max(0.0, total - counted)
        end = time.monotonic()
        self.gaps = uncovered(self.spans, end - total, end)

    def as_dict(self) -> dict:
        found = {"total": round(self.total, 3), **{k: round(v, 3) for k, v in self.seconds.items()}}
        if self.gaps:
            found["uncovered"] = {k: round(v, 3) for k, v in self.gaps.items()}
        return found


def uncovered(spans: list[tuple[float, float, str]], start: float, end: float) -> dict[str, float]:
    """The seconds of [start, end] that no span covers, each gap under the step whose span ended
    last before it ("start" for a gap before every span). Side by side, the steps overlap, so
    "other" (the total less the steps' sum) misses such gaps; these are where the time went."""
    gaps: dict[str, float] = {}
    reached, last = start, "start"
    for begin, finish, name in sorted(spans):
        if begin > reached:
            gaps[last] = gaps.get(last, 0.0) + min(begin, end) - reached
        if finish >= reached:
            reached, last = finish, name
        if reached >= end:
            break
    if end > reached:
        gaps[last] = gaps.get(last, 0.0) + end - reached
    return {name: seconds for name, seconds in gaps.items() if seconds > 0}


def table(profiles: list[tuple[str, Profile]]) -> str:
    """Seconds per step, summed per module (``profiles``: (module id, profile)), with the mean
    per graded submission; the steps are those of ``STEPS``."""
    by_module: dict[str, list[Profile]] = {}
    for module_id, profile in profiles:
        by_module.setdefault(module_id, []).append(profile)
    if not by_module:
        return "No submission was graded in this run (every record was reused), so there is nothing to profile."
    names = [name for name, _ in STEPS]
    width = max(len(m) for m in by_module) + 2
    lines = [
        "Where the run phase's wall time went, in seconds per graded submission (mean over n):",
        f"{'module':<{width}}{'n':>4}{'total':>8}" + "".join(f"{n[:10]:>11}" for n in names),
    ]
    for module_id, entries in sorted(by_module.items()):
        n = len(entries)
        total = sum(p.total for p in entries) / n
        means = [sum(p.seconds.get(step, 0.0) for p in entries) / n for step in names]
        lines.append(f"{module_id:<{width}}{n:>4}{total:>8.1f}" + "".join(f"{mean:>11.2f}" for mean in means))
    for module_id, entries in sorted(by_module.items()):
        gaps: dict[str, float] = {}
        for p in entries:
            for name, seconds in p.gaps.items():
                gaps[name] = gaps.get(name, 0.0) + seconds / len(entries)
        if sum(gaps.values()) >= 1.0:
            largest = sorted(gaps.items(), key=lambda item: -item[1])[:3]
            lines.append(
                f"{module_id}: {sum(gaps.values()):.1f} s a grading covered by no step, "
                + ", ".join(f"{seconds:.1f} s after {name}" for name, seconds in largest)
            )
    lines.append("Steps: " + "; ".join(f"{name}: {what}" for name, what in STEPS) + ".")
    lines.append("Gradings run side by side, so the totals add up to more than the run's wall time.")
    return "\n".join(lines)


def lease_line(gpu, usage) -> str:
    """One GPU's exclusive use during a run (``grader.grade.leases.Usage``), in words."""
    line = (
        f"GPU {gpu}: {usage.timings} timings had it alone for {usage.alone_seconds:.1f} s in all, of which "
        f"{usage.idle_wait_seconds:.1f} s waiting for the driver to report no kernel running; they waited "
        f"{usage.draining_seconds:.1f} s for the calls in progress to end (children whose call had ended "
        f"frozen meanwhile)."
    )
    if usage.busy_starts:
        line += (
            f" {usage.busy_starts} of the timings began on a GPU still busy after {IDLE_LIMIT_SECONDS:.0f} s "
            f"of waiting (their records say so): something that freezing the grader's children does not stop "
            f"was running there, such as another program (see nvidia-smi). Stop it, then grade those "
            f"submissions again (--regrade)."
        )
    return line


def memory_line() -> str:
    """The grader process's own peak memory so far (its children are limited apart, by the sandbox)."""
    from grader.grade.host_memory import JUDGING

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return (
        f"The grader's own process peaked at {peak_kib / (1 << 20):.2f} GiB of memory (its children not "
        f"counted); the files it judged held at most {JUDGING.peak / (1 << 30):.2f} GiB at once "
        f"(budget {JUDGING.budget / (1 << 30):.2f} GiB)."
    )


# Where a run phase appends each grading's profile as it ends (``grader.grade.runphase``).
LOG_NAME = "profile.jsonl"


def log_size(results_dir: Path) -> int:
    """Bytes in ``results_dir``'s profile log now: where the lines of a run starting now begin."""
    try:
        return (Path(results_dir) / LOG_NAME).stat().st_size
    except OSError:
        return 0


def logged_table(results_dir: Path, start: int) -> str:
    """``table`` of the gradings logged after byte ``start`` of ``results_dir``'s profile log: those a
    run that was stopped had finished (its own table is never printed)."""
    steps = {name for name, _ in STEPS}
    profiles = []
    for entry in _logged(results_dir, start):
        try:
            found = Profile({k: float(v) for k, v in entry.items() if k in steps}, float(entry["total"]))
            found.gaps = {str(k): float(v) for k, v in entry.get("uncovered", {}).items()}
            profiles.append((str(entry["module"]), found))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return table(profiles)


def _logged(results_dir: Path, start: int) -> list[dict]:
    """The entries of ``results_dir``'s profile log from byte ``start`` on (negative: that many
    bytes before its end); a line cut (by a stop, or by the start) is left out."""
    try:
        with open(Path(results_dir) / LOG_NAME, "rb") as handle:
            handle.seek(max(0, start) if start >= 0 else max(0, handle.seek(0, 2) + start))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def measured_seconds(results_dir: Path, device_name: str, tail_bytes: int = 4 << 20) -> dict[str, float]:
    """Mean wall seconds per grading of each module on this device, from the ``profile.jsonl``
    lines earlier runs left in ``results_dir`` (its last ``tail_bytes``); {} when there are none."""
    sums: dict[str, list[float]] = {}
    for entry in _logged(results_dir, -tail_bytes):
        try:
            if entry.get("device") == device_name:
                sums.setdefault(str(entry["module"]), []).append(float(entry["total"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # an entry without the fields a grading writes
    return {module: sum(values) / len(values) for module, values in sums.items()}
