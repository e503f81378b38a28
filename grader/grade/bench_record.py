"""Time the record phase (nbgrader autograde, feedback, export) with a notebook kernel per
notebook (nbgrader's own way, the serial path) and with one shared kernel (``grader.grade.autograde``),
and check that both give the same grades, feedback and ``grades.csv``.

    python -m grader.grade.bench_record --students 50 [--work build/bench-record]

Builds N students, each with a ``kernel.py`` for every available module, taken in turn from the
example submissions (the solution, the stub, and for module 01 the hand-written ones that grade
quickly: partial, failing, refused, dishonest). The run phase grades each distinct file once
beforehand, into ``<work>/results`` (minutes on a CPU the first time; a later run with the same
``--work`` reuses the records); that is not timed. Then the same submissions go through
``python -m grader grade``'s pipeline twice, into ``<work>/serial`` and ``<work>/shared``; only the
record phase differs between the two, and the table shows its steps' wall seconds. Exit status 1
if the two disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from grader.authoring import example_submissions
from grader.core.catalog import REPO_ROOT, Module
from grader.grade import course, pipeline, runphase
from grader.sandbox.isolation import Limits

# Hand-written examples of module 01 that the run phase grades in seconds (no endless loop, no
# memory hog), besides the complete and stub students that every module has.
QUICK_EXAMPLES = [
    "partial",
    "noisy",
    "syntax-error",
    "raises-at-import",
    "torch-compute",
    "returns-input",
    "caches-outputs",
    "mutates-input",
    "reads-files",
    "exits-at-import",
]
STEPS = ("autograde", "feedback", "export")


def _example_file(examples: Path, name: str, module: Module) -> Path | None:
    for candidate in (
        examples / name / module.track / module.slug / "kernel.py",
        examples / name / f"{module.track}-{module.slug}" / "kernel.py",
    ):
        if candidate.is_file():
            return candidate
    return None


def build_students(work: Path, count: int) -> tuple[Path, list[Module]]:
    """``<work>/source/<student>/<track>-<slug>/kernel.py`` for ``count`` students; the modules."""
    examples, source = work / "examples", work / "source"
    shutil.rmtree(examples, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)
    example_submissions.assemble(examples)
    modules = list(course.modules_by_assignment().values())
    for index, module in enumerate(modules):
        names = ["complete", "stub", *QUICK_EXAMPLES]
        files = [f for f in (_example_file(examples, name, module) for name in names) if f is not None]
        for student in range(count):
            chosen = files[(student + index) % len(files)]  # a different mix in every module
            target = source / f"student-{student:03d}" / course.assignment_name(module) / "kernel.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(chosen, target)
    return source, modules


def _options() -> runphase.Options:
    from grader.core import device

    # As `python -m grader grade` grades the bundled examples (grader.grade.commands).
    return runphase.Options(limits=Limits(case_seconds=60.0 if device.is_cuda() else 20.0))


def prepare_records(source: Path, results: Path, modules: list[Module]) -> None:
    """The run phase, once per distinct file (not timed)."""
    started = time.monotonic()
    summary = runphase.run(source, results, modules, _options(), progress=True)
    graded = sum(1 for outcome in summary.outcomes if not outcome.reused)
    print(
        f"Run phase: {graded} file(s) graded, {len(summary.outcomes) - graded} reused, "
        f"{time.monotonic() - started:.0f} s (not timed below).",
        flush=True,
    )


def grade_with(label: str, shared: bool, work: Path, source: Path, results: Path) -> pipeline.ClassGrades:
    """The whole pipeline into ``<work>/<label>``, with the records of ``results`` in place."""
    folder = work / label
    shutil.rmtree(folder, ignore_errors=True)
    course_dir = folder / "course"
    shutil.copytree(results, course.results_dir(course_dir))
    saved = pipeline.SHARED_KERNEL
    pipeline.SHARED_KERNEL = shared
    try:
        grading = pipeline.grade(source, course_dir, folder / "grades", None, _options(), progress=False)
    finally:
        pipeline.SHARED_KERNEL = saved
    if grading.children_started:
        print(
            f"  note: the {label} run graded {grading.children_started} file(s) itself; the records "
            "were expected to be ready",
            flush=True,
        )
    return grading


def _without_execution_times(path: Path) -> str:
    """An autograded notebook without nbclient's timestamps of each cell's execution."""
    notebook = json.loads(path.read_text())
    for cell in notebook.get("cells", []):
        cell.get("metadata", {}).pop("execution", None)
    return json.dumps(notebook, sort_keys=True)


def compare(serial: pipeline.ClassGrades, shared: pipeline.ClassGrades) -> list[str]:
    """What differs between the two runs (empty: nothing)."""
    problems = []
    if (serial.out / "grades.csv").read_bytes() != (shared.out / "grades.csv").read_bytes():
        problems.append("grades.csv differs")
    exports = [(g.out / "nbgrader-grades.csv").read_bytes() for g in (serial, shared)]
    if exports[0] != exports[1]:
        problems.append("nbgrader's export (nbgrader-grades.csv) differs")
    scores = [{(r.student, r.assignment): r.scores for r in g.rows} for g in (serial, shared)]
    if scores[0] != scores[1]:
        problems.append("the gradebook's scores differ")
    for kind, pattern, read in (
        ("feedback page", "feedback/*/*/*.html", Path.read_bytes),
        ("autograded notebook", "autograded/*/*/*.ipynb", _without_execution_times),
    ):
        mine = sorted(p.relative_to(serial.course_dir) for p in serial.course_dir.glob(pattern))
        other = sorted(p.relative_to(shared.course_dir) for p in shared.course_dir.glob(pattern))
        if mine != other:
            problems.append(f"not the same {kind}s ({len(mine)} and {len(other)})")
        differing = [p for p in mine if p in other and read(serial.course_dir / p) != read(shared.course_dir / p)]
        if differing:
            problems.append(f"{len(differing)} {kind}(s) differ, e.g. {differing[0]}")
    return problems


def table(gradings: dict[str, pipeline.ClassGrades], notebooks: int) -> str:
    lines = [f"{'step':<11}" + "".join(f"{label:>30}" for label in gradings)]
    for step in (*STEPS, "total"):
        cells = []
        for grading in gradings.values():
            seconds = (
                sum(grading.seconds.get(s, 0.0) for s in STEPS) if step == "total" else grading.seconds.get(step, 0.0)
            )
            cells.append(f"{seconds:7.1f} s {seconds / max(1, notebooks):6.2f} s/notebook")
        lines.append(f"{step:<11}" + "".join(f"{cell:>30}" for cell in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.grade.bench_record",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--students", type=int, default=50, help="how many students (default 50)")
    parser.add_argument(
        "--work",
        default=str(REPO_ROOT / "build" / "bench-record"),
        help="working folder; its results/ keeps the records between runs (default build/bench-record)",
    )
    args = parser.parse_args(argv)
    if args.students < 1:
        parser.error("--students must be at least 1")
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    source, modules = build_students(work, args.students)
    results = work / "results"
    prepare_records(source, results, modules)
    notebooks = args.students * len(modules)
    gradings = {}
    for label, shared in (("serial (kernel per notebook)", False), ("shared kernel", True)):
        print(f"Record phase, {label}: {notebooks} notebook(s)...", flush=True)
        gradings[label] = grade_with("shared" if shared else "serial", shared, work, source, results)
    serial, shared = gradings.values()
    for grading in (serial, shared):
        if grading.autograded != notebooks or grading.grader_errors:
            print(
                f"Expected {notebooks} autograded notebooks without grader errors; got {grading.autograded} "
                f"and {len(grading.grader_errors)} error(s) in {grading.course_dir}: see its logs/."
            )
    problems = compare(serial, shared)
    print()
    print(
        f"Record phase of {args.students} students x {len(modules)} modules = {notebooks} notebooks, "
        f"{os.cpu_count()} CPU core(s), load average {os.getloadavg()[0]:.1f} at the end:"
    )
    print(table(gradings, notebooks))
    speedup = serial.seconds.get("autograde", 0.0) / max(0.01, shared.seconds.get("autograde", 0.0))
    print(f"autograde: {speedup:.1f} x faster with the shared kernel")
    print(
        "Same grades.csv (byte for byte), nbgrader export, scores, feedback HTML and autograded notebooks "
        "(but for their execution timestamps)."
        if not problems
        else "DIFFERENT: " + "; ".join(problems)
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
