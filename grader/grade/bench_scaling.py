"""Grade one class on 1, 2, ... GPUs of this machine, time each run phase, and check that every
run gave the same grades.

    python -m grader.grade.bench_scaling --students 20 \
        --modules missing-elements/01-vector-add optimization/03-shared-memory ... \
        --runs local:1 ray:2 ray:4 [--per-gpu 8] [--cores-per-gpu 16] [--work build/bench-scaling]

The class: for every student and module one distinct file (a comment names the student, so no
two files share a record), taken in turn from the module's reference solution (complete), the
reference with one of the module's typical mistakes planted (partial: ``mistakes.py``), its
starting kernel (failing) and, for missing-elements/01, the quick hand-written examples.

Each run is ``python -m grader run`` in a process of its own, seeing only its GPUs
(``CUDA_VISIBLE_DEVICES``; ``--cores-per-gpu N`` pins it to N logical CPUs per GPU, made of whole
physical cores, the same for every run), into a results
folder of its own that starts with the same secret (so every run meets the same hidden inputs).
A run named ``local:N`` grades with the local pool, ``ray:N`` on a private Ray cluster of this
machine. ``local:1+ray:2`` starts two runs together on disjoint GPUs (the first run on the
lowest) and disjoint cores (``--cores-per-gpu``), which halves the bench's time on a machine of
four GPUs; the complete files' speed then also tells whether the runs disturbed each other's
timings. The table gives, per run: the wall time; the throughput once every slot is busy (from
the progress lines, without the first gradings' start and the last ones' tail, which dominate a
small class); whether every record's correctness (each case's verdict and message, the totals,
the integrity finding) equals the first run's; the largest gap in performance credit (which
follows the measured speed between a module's floor and threshold); and the complete files'
speed against the reference, which tells whether GPUs disturbed one another's timings. What
differs is written side by side in ``<work>/summary.json``. Exit status 1 if any run's
correctness differs from the first's. ``--deadline S`` stops the runs still going S seconds after
the start, as Ctrl-C does (each keeps the records it finished), starts no later run, and compares
the records the runs share: for a machine lent for a fixed time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.authoring import example_submissions, mistakes
from grader.core.catalog import REPO_ROOT, Module, find_module
from grader.grade import course, store
from grader.grade.bench_record import QUICK_EXAMPLES

# How long a run stopped at the deadline may take to write what it finished before it is killed.
STOP_GRACE_SECONDS = 120
# What a record says about the student, not about the run (times, dates and paths left out).
GRADE_FIELDS = ("load_error", "todos", "starting_kernel", "totals", "integrity", "refusal", "note")
CASE_FIELDS = ("name", "visibility", "passed", "kind", "message")


@dataclass(frozen=True)
class Student:
    name: str
    kind: dict[str, str]  # assignment -> "complete", "partial: <mistake>", "stub" or an example's name


def _planted(module: Module, index: int) -> tuple[str, str] | None:
    """The reference with the ``index``-th (cyclically) of its typical mistakes that a GPU shows."""
    usable = [m for m in mistakes.for_module(module) if not m.interpreter_only]
    if not usable:
        return None
    mistake = usable[index % len(usable)]
    return mistake.name, mistake.apply((module.solution_dir / "kernel.py").read_text())


def build_class(work: Path, count: int, modules: list[Module]) -> tuple[Path, list[Student]]:
    """``<work>/source/<student>/<track>-<slug>/kernel.py`` for ``count`` students."""
    examples, source = work / "examples", work / "source"
    shutil.rmtree(examples, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)
    example_submissions.assemble(examples, modules)
    students = [Student(f"student-{n:03d}", {}) for n in range(count)]
    for column, module in enumerate(modules):
        assignment = course.assignment_name(module)
        quick = [
            name
            for name in QUICK_EXAMPLES
            if (examples / name / assignment / "kernel.py").is_file()
            or (examples / name / module.track / module.slug / "kernel.py").is_file()
        ]
        kinds = ["complete", "partial", "stub", "partial", *quick]
        for row, student in enumerate(students):
            kind = kinds[(row + column) % len(kinds)]
            if kind == "complete":
                text = (module.solution_dir / "kernel.py").read_text()
            elif kind == "stub":
                text = (examples / "stub" / assignment / "kernel.py").read_text()
            elif kind == "partial":
                planted = _planted(module, row)
                if planted is None:
                    kind, text = "complete", (module.solution_dir / "kernel.py").read_text()
                else:
                    kind, text = f"partial: {planted[0]}", planted[1]
            else:
                folder = examples / kind
                path = folder / assignment / "kernel.py"
                text = (path if path.is_file() else folder / module.track / module.slug / "kernel.py").read_text()
            target = source / student.name / assignment / "kernel.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"# {student.name}\n{text}")
            student.kind[assignment] = kind
    return source, students


def _records(results: Path):
    """(key, record) of every record in ``results`` (``grader.grade.store.record_path``)."""
    for path in sorted((results / "records").rglob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "totals" in record:
            yield f"{record.get('module')}/{record.get('submission_sha256')}", record


def grades(results: Path) -> dict[str, str]:
    """{record: what it says about the student's correctness, as canonical JSON}: every case's
    verdict and message, the totals, the integrity finding, the refusal (times and dates left out)."""
    found = {}
    for key, record in _records(results):
        kept = {name: record.get(name) for name in GRADE_FIELDS}
        kept["cases"] = [{name: row.get(name) for name in CASE_FIELDS} for row in record.get("cases", [])]
        found[key] = json.dumps(kept, sort_keys=True)
    return found


def credits(results: Path) -> dict[str, dict[str, float | None]]:
    """{record: {part ("" for the module's whole timing): performance credit, None if not graded}}.
    Between a module's floor and its threshold the credit follows the measured speed, so two
    runs may differ there by what the clock gives (``grader.grade.scoring.credit``)."""
    found = {}
    for key, record in _records(results):
        performance = record.get("performance") or {}
        parts = performance.get("parts") if isinstance(performance.get("parts"), dict) else {"": performance}
        found[key] = {name: part.get("credit") if part.get("graded") else None for name, part in parts.items()}
    return found


def credit_gap(first: dict, other: dict) -> float | None:
    """The largest difference of performance credit between two runs' records, over the parts
    both graded; None if one graded a part that the other did not."""
    gap = 0.0
    for key in set(first) & set(other):
        for part in set(first[key]) | set(other[key]):
            a, b = first[key].get(part), other[key].get(part)
            if (a is None) != (b is None):
                return None
            if a is not None:
                gap = max(gap, abs(a - b))
    return gap


def reference_ratios(results: Path) -> list[float]:
    """The speed against the reference of every file graded with every case passing and timed."""
    ratios = []
    for _, record in _records(results):
        performance, totals = record.get("performance") or {}, record.get("totals") or {}
        if totals.get("passed") == totals.get("total") and type(performance.get("ratio")) in (int, float):
            ratios.append(float(performance["ratio"]))
    return ratios


PROGRESS = re.compile(r"^run phase: (\d+)/(\d+) gradings \(\d+%\), (?:(\d+):)?(\d+)(?: s)?,", re.M)


def steady_rate(log: str) -> float | None:
    """Gradings a second between the runs' 20th and 90th percent of gradings done (the run
    phase's progress lines): the throughput once every slot is busy, without the first
    gradings' start (imports, compiling, the reference's timing) or the last ones' tail."""
    done = [(int(n), int(m or 0) * 60 + int(sec), int(total)) for n, total, m, sec in PROGRESS.findall(log)]
    if not done:
        return None
    total = done[0][2]
    window = [(n, t) for n, t, _ in done if 0.2 * total <= n <= 0.9 * total]
    if len(window) < 2 or window[-1][1] == window[0][1]:
        return None
    return (window[-1][0] - window[0][0]) / (window[-1][1] - window[0][1])


def cpu_times() -> dict[int, tuple[int, int]]:
    """{core: (busy, total)} clock ticks since boot, from /proc/stat ({} where it cannot be read)."""
    found = {}
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        name, *values = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            ticks = [int(v) for v in values[:8]]
            found[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))  # less idle and iowait
    return found


def busy_share(before: dict, after: dict, cores: set[int] | None) -> float | None:
    """The share of ``cores``' time (every core if None) that was busy between two ``cpu_times``:
    near 1, the CPU limited the run."""
    cores = set(after) if cores is None else cores
    busy = sum(after[c][0] - before[c][0] for c in cores if c in before and c in after)
    total = sum(after[c][1] - before[c][1] for c in cores if c in before and c in after)
    return busy / total if total > 0 else None


CPU_ROOT = Path("/sys/devices/system/cpu")


def cpu_topology(root: Path = CPU_ROOT) -> list[tuple[int, int, int]] | None:
    """(package, core, logical CPU) for every logical CPU, sorted, so that the hardware threads of
    one physical core stand side by side; None where the topology cannot be read."""
    found = []
    for path in root.glob("cpu[0-9]*"):
        try:
            package = int((path / "topology" / "physical_package_id").read_text())
            core = int((path / "topology" / "core_id").read_text())
        except (OSError, ValueError):
            return None
        found.append((package, core, int(path.name[3:])))
    return sorted(found)


def cores_in_order(root: Path = CPU_ROOT) -> list[int]:
    """This machine's logical CPUs, a physical core's threads side by side, so that a run given N
    of them in a row holds whole physical cores: Linux numbers a core's second thread far from its
    first (on 16 cores with two threads each, CPUs 0 and 16), and runs pinned to CPUs 0-15 and 0-31
    would get the same 16 cores, not 1:2. Numeric order where the topology cannot be read."""
    found = cpu_topology(root)
    if found is None:
        return sorted(int(p.name[3:]) for p in root.glob("cpu[0-9]*")) or sorted(os.sched_getaffinity(0))
    return [cpu for *_, cpu in found]


def topology(root: Path = CPU_ROOT) -> str:
    """A line on the machine's cores: logical CPUs, physical cores and threads per core."""
    found = cpu_topology(root)
    if found is None:
        return f"{len(cores_in_order(root))} logical CPUs (their physical cores unknown)"
    physical = {(package, core) for package, core, _ in found}
    return (
        f"{len(found)} logical CPUs on {len(physical)} physical cores ({len(found) / len(physical):g} thread(s) each)"
    )


def run_cores(cores_per_gpu: int, first_gpu: int, gpus: int, order: list[int] | None = None) -> set[int]:
    """The logical CPUs of a run on GPUs ``first_gpu`` .. ``first_gpu + gpus - 1``: ``cores_per_gpu``
    per GPU, whole physical cores from ``cores_in_order``, the same ones every time (none without
    ``cores_per_gpu``)."""
    if not cores_per_gpu:
        return set()
    order = cores_in_order() if order is None else order
    return set(order[cores_per_gpu * first_gpu : cores_per_gpu * (first_gpu + gpus)])


def start_one(
    source: Path,
    results: Path,
    kind: str,
    gpus: int,
    per_gpu: int,
    cores: int,
    log: Path,
    in_turn: bool = False,
    first_gpu: int = 0,
) -> subprocess.Popen:
    """Start one run phase in a process of its own, on GPUs ``first_gpu`` .. ``first_gpu + gpus - 1``
    and, if ``cores`` is given, on that many CPU cores per GPU (the cores that belong to those GPUs,
    so that runs started together share neither); ``in_turn``: each grading's hidden cases after its
    public ones (``--in-turn``)."""
    visible = range(first_gpu, first_gpu + gpus)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(gpu) for gpu in visible))
    command = [sys.executable, "-m", "grader", "run", str(source), "--results", str(results)]
    command += ["--per-gpu", str(per_gpu), "--profile"]
    if kind == "ray":
        command += ["--ray", "local"]  # its own cluster of its GPUs, never one left running here
    if in_turn:
        command += ["--in-turn"]
    # children and Ray's processes inherit the pinning
    pinned = run_cores(cores, first_gpu, gpus) or None
    with log.open("w") as handle:
        return subprocess.Popen(
            command,
            env=env,
            cwd=REPO_ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda: os.sched_setaffinity(0, pinned)) if pinned else None,
        )


@dataclass
class Run:
    kind: str
    gpus: int
    in_turn: bool
    seconds: float
    rate: float | None  # gradings a second once every slot is busy (``steady_rate``)
    grades: dict[str, str]
    credits: dict[str, dict]
    ratios: list[float]
    cpu_busy: float | None = None  # the share of its CPU cores' time that was busy (``busy_share``)
    stopped: bool = False  # stopped at the deadline: its records are those it finished


@dataclass
class _Started:
    """A run phase started by ``main``, until it ends: its seconds and its cores' CPU times then."""

    kind: str
    gpus: int
    in_turn: bool
    name: str
    results: Path
    log: Path
    process: subprocess.Popen
    cores: set[int] | None
    began: float = field(default_factory=time.monotonic)
    cpu_before: dict = field(default_factory=cpu_times)
    seconds: float = 0.0
    cpu_after: dict | None = None
    stopped: bool = False

    def ended(self) -> bool:
        """Whether the run has ended; the first time it is seen ended, note its time and CPU times."""
        if self.cpu_after is None and self.process.poll() is not None:
            self.seconds, self.cpu_after = time.monotonic() - self.began, cpu_times()
        return self.cpu_after is not None

    def stop(self) -> None:
        """Stop the run as Ctrl-C does (it keeps the records it finished), unless it has ended."""
        if not self.ended():
            self.stopped = True
            self.process.send_signal(signal.SIGINT)


# What a finished run leaves beside its records for ``--reuse``: its wall time, busy share, and
# whether the deadline stopped it.
RUN_FILE = "bench-run.json"


def read_run(kind: str, gpus: int, in_turn: bool, results: Path, log: Path, seconds: float, busy, stopped: bool) -> Run:
    """A run's row of the table, from its records and its log."""
    found = [grades(results), credits(results), reference_ratios(results)]
    rate = steady_rate(log.read_text(errors="replace"))
    return Run(kind, gpus, in_turn, seconds, rate, *found, busy, stopped)


@dataclass
class _Finished:
    name: str
    results: Path
    row: Run


def finished_run(work: Path, kind: str, gpus: int, in_turn: bool) -> _Finished | None:
    """The run of ``work`` that an earlier call finished (its records, log, secret and
    ``RUN_FILE``), or None."""
    name = f"{kind}-{gpus}" + ("-in-turn" if in_turn else "")
    results, log = work / f"results-{name}", work / f"log-{name}.txt"
    try:
        noted = json.loads((results / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not log.is_file() or not (results / store.SECRET_FILE).is_file():
        return None
    row = read_run(
        kind, gpus, in_turn, results, log, float(noted["seconds"]), noted["cpu_busy"], bool(noted["stopped"])
    )
    return _Finished(name, results, row)


def parse_run(text: str) -> tuple[str, int, bool]:
    """KIND:GPUS[:in-turn] as (kind, GPUs, in turn); a ValueError says what is wrong."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[0] not in ("local", "ray") or not parts[1].isdigit() or int(parts[1]) < 1:
        raise ValueError(f"a run is KIND:GPUS[:in-turn] with KIND local or ray and GPUS 1 or more, got {text!r}")
    if len(parts) == 3 and parts[2] != "in-turn":
        raise ValueError(f"the third part of a run can only be in-turn, got {text!r}")
    return parts[0], int(parts[1]), len(parts) == 3


def parse_group(text: str, pinned: bool) -> list[tuple[str, int, bool]]:
    """RUN[+RUN...]: runs started together on disjoint GPUs (the first on the lowest); they need
    ``--cores-per-gpu`` (each its own cores) and at most one of them on Ray (one private cluster
    per machine). A ValueError says what is wrong."""
    group = [parse_run(part) for part in text.split("+")]
    if len(group) > 1 and not pinned:
        raise ValueError(f"runs started together ({text!r}) need --cores-per-gpu, so that they share no CPU core")
    if sum(kind == "ray" for kind, _, _ in group) > 1:
        raise ValueError(f"at most one Ray run can be started together with others, got {text!r}")
    return group


def compare(run: Run, first: Run) -> tuple[list[str], float | None]:
    """The records whose correctness differs from the first run's (or that only one run has,
    where neither was stopped at the deadline), and the largest gap in performance credit (None:
    a part graded in one run only)."""
    keys = set(run.grades) & set(first.grades) if run.stopped or first.stopped else set(run.grades) | set(first.grades)
    return sorted(k for k in keys if run.grades.get(k) != first.grades.get(k)), credit_gap(first.credits, run.credits)


def table(rows: list[Run]) -> list[str]:
    first = rows[0]
    lines = [
        "| run | GPUs | wall (s) | wall vs the first run | throughput once busy (gradings/min) | vs the first run "
        "| records | same correctness | largest credit gap | complete files' speed vs the reference "
        "(median, range, files) | its CPU cores busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        differing, gap = compare(r, first)
        same = "yes" if not differing else f"NO: {len(differing)} differ ({', '.join(differing[:3])})"
        spread = "none timed"
        if r.ratios:
            spread = f"{statistics.median(r.ratios):.3f} ({min(r.ratios):.3f}-{max(r.ratios):.3f}, {len(r.ratios)})"
        rate = f"{60 * r.rate:.1f}" if r.rate else "?"
        rate_ratio = f"{r.rate / first.rate:.2f}" if r.rate and first.rate else "?"
        runner = ("local pool" if r.kind == "local" else "Ray") + (", in turn" if r.in_turn else "")
        gap_text = "a part graded in one run only" if gap is None else f"{gap:.3f}"
        wall = f"stopped at {r.seconds:.0f}" if r.stopped else f"{r.seconds:.0f}"
        wall_ratio = "" if r.stopped or first.stopped else f"{first.seconds / r.seconds:.2f}"
        cells = [runner, r.gpus, wall, wall_ratio, rate, rate_ratio]
        cells += [len(r.grades), same, gap_text, spread, "?" if r.cpu_busy is None else f"{100 * r.cpu_busy:.0f} %"]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.grade.bench_scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--modules", nargs="+", required=True)
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["local:1", "ray:2", "ray:4"],
        help="KIND:GPUS[:in-turn], KIND local or ray; in-turn grades as --in-turn does; "
        "RUN+RUN starts runs together on disjoint GPUs and cores (with --cores-per-gpu)",
    )
    parser.add_argument("--per-gpu", type=int, default=8, help="gradings at a time on each GPU")
    parser.add_argument("--cores-per-gpu", type=int, default=0, help="pin each run to this many CPU cores per GPU")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "build" / "bench-scaling")
    parser.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="seconds from the start after which runs still going are stopped as Ctrl-C stops them "
        "(keeping what they finished) and later runs are not started; the table then compares "
        "the records both runs have",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="read back the runs that an earlier call with the same --work, class and modules "
        "finished instead of running them again (its secret too: every run meets the same hidden "
        "inputs), so that runs that need the GPUs free can follow other work on the machine",
    )
    args = parser.parse_args(argv)
    try:
        groups = [parse_group(text, bool(args.cores_per_gpu)) for text in args.runs]
    except ValueError as error:
        parser.error(str(error))
    modules = [find_module(name) for name in args.modules]
    before = (args.work / "class.json").read_text() if (args.work / "class.json").is_file() else None
    source, students = build_class(args.work, args.students, modules)
    drawn = json.dumps({s.name: s.kind for s in students}, indent=1) + "\n"
    if args.reuse and before is not None and before != drawn:
        print(
            f"--reuse: this class differs from the earlier call's ({args.work / 'class.json'}): give the "
            "same --students and --modules, or leave --reuse out to run every run again.",
            file=sys.stderr,
        )
        return 2
    (args.work / "class.json").write_text(drawn)
    print(
        f"{len(students)} students x {len(modules)} modules = {sum(len(s.kind) for s in students)} gradings", flush=True
    )
    print(f"CPU: {topology()}", flush=True)

    secret, rows = None, []
    deadline = time.monotonic() + args.deadline if args.deadline > 0 else None
    for group in groups:
        earlier = [finished_run(args.work, *run) for run in group] if args.reuse else []
        if earlier and all(earlier):
            for run in earlier:
                if secret is None:
                    secret = (run.results / store.SECRET_FILE).read_text().strip()
                rows.append(run.row)
                print(f"{run.name}: read back from an earlier call ({run.row.seconds:.0f} s)", flush=True)
            continue
        if deadline is not None and time.monotonic() >= deadline:
            print(
                f"{'+'.join(f'{kind}:{gpus}' for kind, gpus, _ in group)} not started: the deadline has passed",
                flush=True,
            )
            continue
        started, first_gpu = [], 0
        for kind, gpus, in_turn in group:
            name = f"{kind}-{gpus}" + ("-in-turn" if in_turn else "")
            results, log = args.work / f"results-{name}", args.work / f"log-{name}.txt"
            shutil.rmtree(results, ignore_errors=True)
            results.mkdir(parents=True)
            if secret is None:  # every run meets the same hidden inputs
                secret = str(store.run_secret(results))
            else:
                target = results / store.SECRET_FILE
                target.write_text(secret + "\n")
                target.chmod(0o600)
            cores = run_cores(args.cores_per_gpu, first_gpu, gpus)
            process = start_one(source, results, kind, gpus, args.per_gpu, args.cores_per_gpu, log, in_turn, first_gpu)
            started.append(_Started(kind, gpus, in_turn, name, results, log, process, cores or None))
            first_gpu += gpus
        kill_at = None  # once stopped at the deadline: when a run still going is killed
        while True:
            ended = [run.ended() for run in started]  # every run asked, so that each notes its own end
            if all(ended):
                break
            now = time.monotonic()
            if kill_at is None and deadline is not None and now >= deadline:
                print("deadline: stopping the runs still going (they keep what they finished)", flush=True)
                for run in started:
                    run.stop()
                kill_at = now + STOP_GRACE_SECONDS
            elif kill_at is not None and now >= kill_at:
                for run in started:
                    if not run.ended():
                        run.process.kill()
                kill_at = math.inf
            time.sleep(0.5)
        for run in started:
            busy = busy_share(run.cpu_before, run.cpu_after, run.cores)
            rows.append(read_run(run.kind, run.gpus, run.in_turn, run.results, run.log, run.seconds, busy, run.stopped))
            (run.results / RUN_FILE).write_text(
                json.dumps({"seconds": run.seconds, "cpu_busy": busy, "stopped": run.stopped}) + "\n"
            )
            ended = "stopped" if run.stopped else "done"
            print(f"{run.name} {ended} in {run.seconds:.0f} s, {len(rows[-1].grades)} records", flush=True)
    if not rows:
        print("No run was started before the deadline.")
        return 1
    print("\n" + "\n".join(table(rows)))
    summary = []
    for r in rows:
        differing, gap = compare(r, rows[0])
        # What differs, side by side, so that a difference can be read without the records.
        shown = {k: {"first": rows[0].grades.get(k), "this": r.grades.get(k)} for k in differing}
        summary.append(
            {"run": f"{r.kind}:{r.gpus}" + (":in-turn" if r.in_turn else ""), "seconds": r.seconds,
             "rate": r.rate, "records": len(r.grades), "cpu_busy": r.cpu_busy, "stopped": r.stopped,
             "differing": shown, "credit_gap": gap, "ratios": r.ratios}
        )  # fmt: skip
    (args.work / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if any(item["differing"] for item in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
