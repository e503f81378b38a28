"""Grade one class on 1, 2, ... GPUs of this machine, time each run phase, and check that every
run gave the same grades.

    python -m grader.grade.bench_scaling --students 20 \
        --modules missing-elements/01-vector-add optimization/03-shared-memory ... \
        --runs local:1 ray:2 ray:4 [--per-gpu 8] [--work build/bench-scaling]

The class: for every student and module one distinct file (a comment names the student, so no
two files share a record), taken in turn from the module's reference solution (complete), the
reference with one of the module's typical mistakes planted (partial: ``mistakes.py``), its
starting kernel (failing) and, for missing-elements/01, the quick hand-written examples.

Each run is ``python -m grader run`` in a process of its own, seeing only its GPUs
(``CUDA_VISIBLE_DEVICES``), into a results folder of its own that starts with the same secret (so
every run meets the same hidden inputs). A run named ``local:N`` grades with the local pool,
``ray:N`` on a private Ray cluster of this machine. The table gives the wall time, the throughput
against the first run, whether the grades (every case's verdict and message, the totals, the
integrity finding and the performance credit) equal the first run's, and the complete files'
speed against the reference, which tells whether GPUs disturbed one another's timings. Exit
status 1 if any run's grades differ from the first's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grader.authoring import example_submissions, mistakes
from grader.core.catalog import REPO_ROOT, Module, find_module
from grader.grade import course, store
from grader.grade.bench_record import QUICK_EXAMPLES

# What a record says about the student, not about the run (times, dates and paths left out).
GRADE_FIELDS = ("load_error", "todos", "starting_kernel", "totals", "integrity", "refusal", "note")
CASE_FIELDS = ("name", "visibility", "passed", "kind", "message")
PERFORMANCE_FIELDS = ("graded", "credit", "reason")


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


def grades(results: Path) -> dict[str, str]:
    """{record file name: what the record says about the student, as canonical JSON}."""
    found = {}
    for path in sorted(results.rglob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or "totals" not in record:
            continue
        kept = {name: record.get(name) for name in GRADE_FIELDS}
        kept["cases"] = [{name: row.get(name) for name in CASE_FIELDS} for row in record.get("cases", [])]
        kept["performance"] = _performance_grade(record.get("performance") or {})
        found[f"{record['module']}/{record['submission_sha256']}"] = json.dumps(kept, sort_keys=True)
    return found


def _performance_grade(performance: dict) -> dict:
    kept = {name: performance.get(name) for name in PERFORMANCE_FIELDS}
    parts = performance.get("parts")
    if isinstance(parts, dict):
        kept["parts"] = {name: _performance_grade(part) for name, part in sorted(parts.items())}
    return kept


def reference_ratios(results: Path) -> list[float]:
    """The speed against the reference of every file graded with every case passing and timed."""
    ratios = []
    for path in sorted(results.rglob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        performance = (record.get("performance") or {}) if isinstance(record, dict) else {}
        totals = record.get("totals") or {} if isinstance(record, dict) else {}
        if totals.get("passed") == totals.get("total") and type(performance.get("ratio")) in (int, float):
            ratios.append(float(performance["ratio"]))
    return ratios


def run_one(source: Path, results: Path, kind: str, gpus: int, per_gpu: int, log: Path) -> float:
    """One run phase in a process of its own; return its wall seconds."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(gpu) for gpu in range(gpus)))
    command = [sys.executable, "-m", "grader", "run", str(source), "--results", str(results)]
    command += ["--per-gpu", str(per_gpu), "--profile"]
    if kind == "ray":
        command += ["--ray"]
    started = time.monotonic()
    with log.open("w") as handle:
        subprocess.run(command, env=env, cwd=REPO_ROOT, stdout=handle, stderr=subprocess.STDOUT, check=False)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.grade.bench_scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--modules", nargs="+", required=True)
    parser.add_argument("--runs", nargs="+", default=["local:1", "ray:2", "ray:4"], help="KIND:GPUS, KIND local or ray")
    parser.add_argument("--per-gpu", type=int, default=8, help="gradings at a time on each GPU")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "build" / "bench-scaling")
    args = parser.parse_args(argv)
    runs = [(kind, int(gpus)) for kind, gpus in (run.split(":") for run in args.runs)]
    modules = [find_module(name) for name in args.modules]
    source, students = build_class(args.work, args.students, modules)
    (args.work / "class.json").write_text(json.dumps({s.name: s.kind for s in students}, indent=1) + "\n")
    files = sum(len(s.kind) for s in students)
    print(f"{len(students)} students x {len(modules)} modules = {files} gradings", flush=True)

    secret, rows = None, []
    for kind, gpus in runs:
        results = args.work / f"results-{kind}-{gpus}"
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir(parents=True)
        if secret is not None:  # every run meets the first run's hidden inputs
            target = results / store.SECRET_FILE
            target.write_text(secret)
            target.chmod(0o600)
        seconds = run_one(source, results, kind, gpus, args.per_gpu, args.work / f"log-{kind}-{gpus}.txt")
        if secret is None:
            secret = (results / store.SECRET_FILE).read_text()
        found = grades(results)
        baseline = rows[0] if rows else None
        differing = (
            []
            if baseline is None
            else sorted(k for k in set(found) | set(baseline.grades) if found.get(k) != baseline.grades.get(k))
        )
        rows.append(Run(kind, gpus, seconds, found, differing, reference_ratios(results)))
        print(f"{kind}:{gpus} done in {seconds:.0f} s, {len(found)} records", flush=True)
    print("\n" + "\n".join(table(rows)))
    summary = [
        {
            "run": f"{r.kind}:{r.gpus}",
            "seconds": r.seconds,
            "speedup": rows[0].seconds / r.seconds,
            "records": len(r.grades),
            "differing": r.differing,
            "ratios": r.ratios,
        }
        for r in rows
    ]
    (args.work / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if any(r.differing for r in rows) else 0


@dataclass
class Run:
    kind: str
    gpus: int
    seconds: float
    grades: dict[str, str]
    differing: list[str]  # records whose grades differ from the first run's
    ratios: list[float]


def table(rows: list[Run]) -> list[str]:
    lines = [
        "| run | GPUs | wall (s) | throughput vs the first run | records (starting kernels too) | same grades "
        "| complete files' speed vs the reference: median (range, files) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        spread = "none timed"
        if r.ratios:
            spread = f"{statistics.median(r.ratios):.3f} ({min(r.ratios):.3f}-{max(r.ratios):.3f}, {len(r.ratios)})"
        same = "yes" if not r.differing else f"NO: {len(r.differing)} differ ({', '.join(r.differing[:3])})"
        runner = "local pool" if r.kind == "local" else "Ray"
        lines.append(
            f"| {runner} | {r.gpus} | {r.seconds:.0f} | {rows[0].seconds / r.seconds:.2f} | {len(r.grades)} "
            f"| {same} | {spread} |"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
