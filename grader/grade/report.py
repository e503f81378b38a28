"""What ``grade`` hands the instructor: a table per student and module, ``grades.csv``, and
``report.md`` with a PNG of the score distribution.

Points come from nbgrader's gradebook (the system of record); the reasons for zeros and the
performance status come from the run phase's records. Performance without a CUDA GPU is shown
as "not graded", never as a score of zero.
"""

from __future__ import annotations

import csv
import os
import resource
from pathlib import Path

from grader.grade.course import points
from grader.grade.record import performance_status
from grader.grade.scoring import POINTS, TRACK_POINTS

MAX_POINTS = sum(POINTS.values())


def _first_line(text: str, limit: int = 90) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _peak_memory_mib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reason(row) -> str:
    """Why a submission lost its correctness points, in a few words ("" when all cases pass)."""
    record = row.record
    if record is None:
        return _first_line(row.problem) or "not graded (no run-phase record)"
    if record.get("load_error"):
        return _first_line(record["load_error"])
    if record.get("integrity", {}) and record["integrity"]["violation"] == "policy":
        refused = record["integrity"]["message"].splitlines()  # a heading, then "  line N: ..."
        return "refused: " + _first_line(refused[1] if len(refused) > 1 else refused[0])
    if record.get("integrity"):
        return "integrity: " + record["integrity"]["message"]
    if record["totals"]["passed"] == record["totals"]["total"]:
        return ""
    if record.get("todos"):
        return f"{len(record['todos'])} TODO(s) open"
    failed = next((r for r in record["cases"] if not r["passed"]), None)
    return _first_line(failed["message"]) if failed else ""


def performance(row) -> str:
    if row.record is None:
        return ""
    status = performance_status(row.record)
    return status if status == "not graded" else f"{row.scores.get('performance', 0.0):g}"


def _cell(row) -> str:
    if not row.scores:
        return "ERROR" if row.problem or row.record is None else "-"
    return f"{row.total:g}" + ("*" if row.total == 0 else "")


def table(grading) -> str:
    """Students down, modules across; zeros marked * with their reason below."""
    assignments = sorted({row.assignment for row in grading.rows})
    students = sorted({row.student for row in grading.rows})
    cells = {(row.student, row.assignment): row for row in grading.rows}
    header = ["student", *assignments]
    lines = [[s, *(_cell(cells[s, a]) if (s, a) in cells else "" for a in assignments)] for s in students]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines)]
    text = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in [header, *lines]]
    notes = [f"  {row.student} {row.assignment}: {reason(row) or 'no points'}" for row in grading.rows
             if not row.scores or row.total == 0]
    if notes:
        text += ["", "* no points (or no grade), because:", *notes]
    if grading.refused:
        text += ["", "Not collected (an earlier submission, if any, was graded instead):"]
        text += [f"  {student} {assignment}: {why}" for student, assignment, why in grading.refused]
    if any(performance(row) == "not graded" for row in grading.rows):
        shares = " or ".join(str(n) for n in sorted({points(row.module)["performance"] for row in grading.rows}))
        text += ["", f"Performance ({shares} of {MAX_POINTS} points per module) is NOT GRADED "
                     "here (no CUDA GPU): it counts as 0, and grades.csv says \"not graded\"."]
    return "\n".join(text)


def write_csv(grading, path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "module", "assignment", "public", "hidden", "performance", "total",
                         "max_points", "cases_passed", "cases_total", "status", "reason", "feedback"])
        for row in grading.rows:
            totals = (row.record or {}).get("totals", {})
            status = "graded" if row.scores else "not graded"
            writer.writerow([row.student, row.module.id, row.assignment, row.scores.get("public", ""),
                             row.scores.get("hidden", ""), performance(row), row.total if row.scores else "",
                             MAX_POINTS, totals.get("passed", ""), totals.get("total", ""), status, reason(row),
                             os.path.relpath(row.feedback, grading.out) if row.feedback else ""])


def plot(grading, path: Path) -> bool:
    """A histogram of the points per submission, one colour per module; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return False
    by_module: dict[str, list[float]] = {}
    for row in grading.rows:
        if row.scores:
            by_module.setdefault(row.module.id, []).append(row.total)
    # Without a GPU nobody can earn the performance points: the axis ends where scores can.
    timed = any(row.record and performance_status(row.record) != "not graded" for row in grading.rows)
    performance_points = min((points(row.module)["performance"] for row in grading.rows), default=0)
    reachable = MAX_POINTS if timed else MAX_POINTS - performance_points
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bins = [x / 2 for x in range(2 * reachable + 2)]
    ax.hist(list(by_module.values()), bins=bins, stacked=True, label=list(by_module), edgecolor="white")
    ax.set_xlabel(f"points per submission (out of {reachable}"
                  + ("" if timed else "; the performance points need a GPU") + ")")
    ax.set_ylabel("submissions")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Score distribution")
    if by_module:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _markdown_table(grading) -> list[str]:
    lines = ["| student | module | public | hidden | performance | total | why points were lost | feedback |",
             "|---|---|---|---|---|---|---|---|"]
    for row in grading.rows:
        feedback = f"[html]({os.path.relpath(row.feedback, grading.out)})" if row.feedback else ""
        lines.append(f"| {row.student} | {row.module.id} | {row.scores.get('public', '')} | "
                     f"{row.scores.get('hidden', '')} | {performance(row)} | {row.total if row.scores else ''} | "
                     f"{reason(row).replace('|', '/')} | {feedback} |")
    return lines


def write(grading) -> None:
    """grades.csv, scores.png and report.md in ``grading.out``."""
    out = grading.out
    out.mkdir(parents=True, exist_ok=True)
    write_csv(grading, out / "grades.csv")
    plotted = plot(grading, out / "scores.png")
    graded = [row for row in grading.rows if row.scores]
    seconds = grading.seconds
    lines = ["# Grades", "",
             f"{len(graded)} submission(s) graded, {len(grading.rows) - len(graded)} without a grade. "
             f"Points per module: {', '.join(f'{k} {v}' for k, v in POINTS.items())} (out of {MAX_POINTS}); "
             "in the optimization track "
             f"{', '.join(f'{k} {v}' for k, v in TRACK_POINTS['optimization'].items())}.",
             "Points come from nbgrader's gradebook (`nbgrader-grades.csv` is its own export).", ""]
    lines += _markdown_table(grading)
    if plotted:
        lines += ["", "![score distribution](scores.png)"]
    lines += ["", "## Timings", "", "| step | seconds |", "|---|---|"]
    lines += [f"| {step} | {value:.1f} |" for step, value in seconds.items()]
    if grading.autograded:
        per_notebook = seconds.get("autograde", 0.0) / grading.autograded
        record_phase = per_notebook + (seconds.get("feedback", 0.0) + seconds.get("export", 0.0)) / grading.autograded
        lines += ["", f"nbgrader autograded {grading.autograded} notebook(s): {per_notebook:.1f} s per notebook "
                      f"(one command for all of them, start-up included); {record_phase:.1f} s per submission "
                      "with feedback and export."]
    else:
        lines += ["", "Nothing changed since the last run: every record and autograded notebook was reused."]
    lines += ["", f"The run phase started {grading.children_started} sandboxed child process(es). The grading "
                  f"process itself peaked at {_peak_memory_mib():.0f} MiB of memory (whatever the children did)."]
    if grading.protections:
        lines += ["", "## Sandbox protections", ""]
        lines += [f"- {key}: {value}" for key, value in grading.protections.items() if key != "limits"]
    if grading.grader_errors:
        lines += ["", "## Grader errors (the learners see a one-line note instead)", ""]
        lines += [f"- {error}" for error in grading.grader_errors]
    (out / "report.md").write_text("\n".join(lines) + "\n")
