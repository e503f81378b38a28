"""What ``grade`` hands the instructor: a table per student and module, ``grades.csv``,
``report.md`` with a PNG of the score distribution, and a view of the class
(``overview.html``, ``grader.grade.overview``).

Points come from nbgrader's gradebook (the system of record); the reasons for lost points, the
performance status and whether a file is still the starting kernel come from the run phase's
records. Every total here is out of what was graded (``scoring.graded_parts``): performance
without a CUDA GPU is left out, never counted as 0, and so are, there, the cases of a module whose
starting kernel already passes them all (0 of 0: "not graded: needs a GPU"), while nbgrader's own
export keeps each module's full maximum (its cells' points are fixed when the assignments are
generated).
"""

from __future__ import annotations

import csv
import math
import os
import resource
from pathlib import Path

from grader.grade import overview
from grader.grade.course import points
from grader.grade.record import performance_status
from grader.grade.scoring import NOT_GRADED_HERE, POINTS, TRACK_POINTS, graded_parts, no_work_reason, not_graded_here

MAX_POINTS = sum(POINTS.values())
STARTING_KERNEL = "unchanged starting kernel"
# Where each total's maximum comes from, in one line of report.md.
OUT_OF_LINE = (
    "`grades.csv` (its `max_points`) and this report count each total out of what was graded; "
    "nbgrader's own export, `nbgrader-grades.csv`, counts ungraded points in its maximum "
    f"({MAX_POINTS} per module)."
)


def _first_line(text: str, limit: int = 90) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _peak_memory_mib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def out_of(row) -> int:
    """What ``row``'s total is out of: the points of the parts that were graded."""
    return sum(graded_parts(row.record, row.module.track).values())


def left_out(row) -> dict[str, int]:
    """The parts of ``row``'s module that were not graded, with their points."""
    graded = graded_parts(row.record, row.module.track)
    return {part: n for part, n in points(row.module).items() if part not in graded}


def graded_here(row) -> bool:
    """Whether any part of ``row`` was graded on this machine (``scoring.not_graded_here``)."""
    return not not_graded_here(row.record, row.module.track)


def status(row) -> str:
    """ "not graded", "not graded: needs a GPU" (nothing could show the work here), "unchanged
    starting kernel" (graded, but the file is still the one handed out: where that passes every
    case, only this tells it from finished work) or "graded"."""
    if not row.scores:
        return "not graded"
    if not graded_here(row):
        return NOT_GRADED_HERE
    return STARTING_KERNEL if (row.record or {}).get("starting_kernel") else "graded"


def _cases_reason(record: dict) -> str:
    """Why cases fail, in a few words: the count of open TODOs whenever any are open (with the
    first failure, which may have another cause), else the first failure; "" when all pass."""
    failed = next((r for r in record.get("cases", []) if not r["passed"]), None)
    if failed is None:
        return ""
    first = _first_line(failed["message"], 200) or "a case fails"
    todos = len(record.get("todos") or [])
    return f"{todos} TODO(s) open; first failure: {first}" if todos else first


def reason(row) -> str:
    """Why a submission lost points, that it was not graded on this machine, or that it is still
    the starting kernel, in a few words ("" when there is nothing to say)."""
    why = _reason(row)
    if row.record is not None and not graded_here(row):
        return f"{NOT_GRADED_HERE}: {no_work_reason()}" + (f"; {why}" if why else "")
    return why


def _reason(row) -> str:
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
    why = _cases_reason(record)
    if record.get("starting_kernel") and not why:
        todos = len(record.get("todos") or [])
        why = "every case passes, as the code handed out already did" + (f"; {todos} TODO(s) open" if todos else "")
    return _first_line(f"{STARTING_KERNEL}: {why}" if record.get("starting_kernel") else why, 140)


def performance(row) -> str:
    if row.record is None:
        return ""
    state = performance_status(row.record)
    return state if state == "not graded" else f"{row.scores.get('performance', 0.0):g}"


def _cell(row) -> str:
    if not row.scores:
        return "ERROR" if row.problem or row.record is None else "-"
    if not graded_here(row):
        return NOT_GRADED_HERE + "*"
    marked = row.total == 0 or status(row) == STARTING_KERNEL or row.record is None
    return f"{row.total:g}/{out_of(row)}" + ("*" if marked else "")


def left_out_note(rows, nbgrader: bool = True) -> str:
    """One sentence on the totals that leave ungraded parts out (with ``nbgrader``, one more on
    what nbgrader's gradebook counts instead); "" when every part of every row was graded."""
    short = sorted({(out_of(row), out_of(row) + sum(left_out(row).values())) for row in rows if left_out(row)})
    if not short:
        return ""
    n = sum(1 for row in rows if left_out(row))
    reasons = {((row.record or {}).get("performance") or {}).get("reason") for row in rows if left_out(row)}
    why = " (no CUDA GPU)" if all(reason and "CUDA GPU" in reason for reason in reasons) else ""
    maxima = ", ".join(f"out of {graded} instead of {full}" for graded, full in short)
    text = (
        f"Performance was not graded for {n} submission(s){why}: their totals are out of what was graded "
        f'({maxima}), and grades.csv says "not graded".'
    )
    cases = [row for row in rows if {"public", "hidden"} & set(left_out(row))]
    if cases:
        nothing = sum(1 for row in cases if not graded_here(row))
        text += f" For {len(cases)} of them the cases are left out too, as {no_work_reason()}" + (
            f' ({nothing} not graded at all: "{NOT_GRADED_HERE}").' if nothing else "."
        )
    return text + (
        " nbgrader's gradebook and its export (nbgrader-grades.csv) still count those points in each module's maximum."
        if nbgrader
        else ""
    )


def table(grading) -> str:
    """Students down, modules across, each total out of what was graded; zeros and unchanged
    starting kernels marked * with the reason below."""
    assignments = sorted({row.assignment for row in grading.rows})
    students = sorted({row.student for row in grading.rows})
    cells = {(row.student, row.assignment): row for row in grading.rows}
    header = ["student", *assignments]
    lines = [[s, *(_cell(cells[s, a]) if (s, a) in cells else "" for a in assignments)] for s in students]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines)]
    text = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in [header, *lines]]
    notes = [
        f"  {row.student} {row.assignment}: {reason(row) or 'no points'}"
        for row in grading.rows
        if not row.scores or row.total == 0 or status(row) == STARTING_KERNEL or row.record is None
    ]
    if notes:
        text += ["", "* no points, no grade, not graded on this machine, or the unchanged starting kernel:", *notes]
    if grading.refused:
        text += ["", "Not collected (an earlier submission, if any, was graded instead):"]
        text += [f"  {student} {assignment}: {why}" for student, assignment, why in grading.refused]
    note = left_out_note(grading.rows)
    if note:
        text += ["", note]
    return "\n".join(text)


CSV_COLUMNS = [
    "student",
    "module",
    "assignment",
    "public",
    "hidden",
    "performance",
    "total",
    "max_points",
    "cases_passed",
    "cases_total",
    "status",
    "reason",
    "feedback",
    "left_out",
    "left_out_points",
]


def write_csv(grading, path: Path) -> None:
    """grades.csv: a row per submission, its total out of what was graded (``max_points``); the
    parts left out and their points at the end (``max_points`` + ``left_out_points`` is
    nbgrader's maximum)."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for row in grading.rows:
            totals = (row.record or {}).get("totals", {})
            missing = left_out(row)
            writer.writerow(
                [
                    row.student,
                    row.module.id,
                    row.assignment,
                    row.scores.get("public", ""),
                    row.scores.get("hidden", ""),
                    performance(row),
                    row.total if row.scores else "",
                    out_of(row),
                    totals.get("passed", ""),
                    totals.get("total", ""),
                    status(row),
                    reason(row),
                    os.path.relpath(row.feedback, grading.out) if row.feedback else "",
                    " ".join(missing),
                    sum(missing.values()),
                ]
            )


def plot_data(grading) -> dict[str, tuple[dict[str, list[float]], int, str]]:
    """{module: ({"edited" or "unchanged starting kernel": the totals of those graded
    submissions}, the axis's end, the axis's label)}: each module's axis ends at what its totals
    are out of, and says so; untouched files are told apart from the others. Submissions not
    graded on this machine (0 of 0) are counted in the label only; a module of nothing else has
    no totals, an end of 0 and the label "not graded: needs a GPU (N submission(s))"."""
    data = {}
    for module in sorted({row.module.id for row in grading.rows if row.scores}):
        every = [row for row in grading.rows if row.scores and row.module.id == module]
        rows = [row for row in every if graded_here(row)]
        skipped = len(every) - len(rows)
        if not rows:
            groups = {"edited": [], STARTING_KERNEL: []}
            data[module] = (groups, 0, f"{NOT_GRADED_HERE} ({skipped} submission(s))")
            continue
        maxima = sorted({out_of(row) for row in rows})
        label = f"points out of {' or '.join(map(str, maxima))}"
        if any(left_out(row) for row in rows):
            label += " (performance not graded)"
        if skipped:
            label += f"; {skipped} {NOT_GRADED_HERE}"
        groups = {
            "edited": [row.total for row in rows if status(row) != STARTING_KERNEL],
            STARTING_KERNEL: [row.total for row in rows if status(row) == STARTING_KERNEL],
        }
        data[module] = (groups, maxima[-1], label)
    return data


def plot(grading, path: Path) -> bool:
    """Histograms of the points per submission, one per module, each on an axis that ends at what
    its totals are out of, unchanged starting kernels in a colour of their own; False without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return False
    data = plot_data(grading)
    columns = max(1, min(3, len(data)))
    lines = max(1, math.ceil(len(data) / columns))
    fig, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 2.6 * lines), squeeze=False)
    for ax, (module, (groups, end, label)) in zip(axes.flat, data.items()):
        if not any(groups.values()):  # not graded on this machine: say so instead of an empty axis
            ax.text(0.5, 0.5, label, ha="center", va="center", fontsize=8, transform=ax.transAxes)
            ax.set_title(module, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        bins = [x / 2 - 0.25 for x in range(2 * end + 2)]  # a bar per half point, centred on it
        ax.hist(
            list(groups.values()),
            bins=bins,
            stacked=True,
            label=list(groups),
            color=["#3a7", "#bbb"],
            edgecolor="white",
        )
        ax.set_xlim(-0.5, end + 0.5)
        ax.set_title(module, fontsize=8)
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel("submissions", fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if groups[STARTING_KERNEL]:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(data) :]:
        ax.set_visible(False)
    fig.suptitle("Points per submission, by module" if data else "No graded submission")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _markdown_table(grading) -> list[str]:
    """A row per submission, every text from a record escaped (it can quote the submission)."""
    md = overview.md
    lines = [
        "| student | module | public | hidden | performance | total | out of | status | why | feedback |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in grading.rows:
        feedback = f"[html]({os.path.relpath(row.feedback, grading.out)})" if row.feedback else ""
        lines.append(
            f"| {md(row.student)} | {md(row.module.id)} | {row.scores.get('public', '')} | "
            f"{row.scores.get('hidden', '')} | {performance(row)} | {row.total if row.scores else ''} | "
            f"{out_of(row)} | {status(row)} | {md(reason(row))} | {feedback} |"
        )
    return lines


def _points_line(grading) -> str:
    """How many were graded, and what every module is worth."""
    graded = sum(1 for row in grading.rows if row.scores)
    split = ", ".join(f"{k} {v}" for k, v in POINTS.items())
    optimization = ", ".join(f"{k} {v}" for k, v in TRACK_POINTS["optimization"].items())
    return (
        f"{graded} submission(s) graded, {len(grading.rows) - graded} without a grade. Every module is worth "
        f"{MAX_POINTS} points: {split}; in the optimization track {optimization}."
    )


def _timing_lines(grading) -> list[str]:
    seconds = grading.seconds
    lines = ["", "## Timings", "", "| step | seconds |", "|---|---|"]
    lines += [f"| {step} | {value:.1f} |" for step, value in seconds.items()]
    if grading.autograded:
        per_notebook = seconds.get("autograde", 0.0) / grading.autograded
        record_phase = per_notebook + (seconds.get("feedback", 0.0) + seconds.get("export", 0.0)) / grading.autograded
        lines += [
            "",
            f"nbgrader autograded {grading.autograded} notebook(s): {per_notebook:.1f} s per notebook "
            f"(one command for all of them, start-up included); {record_phase:.1f} s per submission "
            "with feedback and export.",
        ]
    else:
        lines += ["", "Nothing changed since the last run: every record and autograded notebook was reused."]
    lines += [
        "",
        f"The run phase started {grading.children_started} sandboxed child process(es). The grading "
        f"process itself peaked at {_peak_memory_mib():.0f} MiB of memory (whatever the children did).",
    ]
    return lines


def write(grading) -> None:
    """grades.csv, scores.png, overview.html and report.md in ``grading.out``."""
    out = grading.out
    out.mkdir(parents=True, exist_ok=True)
    write_csv(grading, out / "grades.csv")
    plotted = plot(grading, out / "scores.png")
    views = overview.write(grading.rows, out / "overview.html")
    lines = ["# Grades", "", _points_line(grading), "Points come from nbgrader's gradebook. " + OUT_OF_LINE, ""]
    note = left_out_note(grading.rows, nbgrader=False)  # OUT_OF_LINE says what nbgrader counts
    lines += [note, ""] if note else []
    lines += _markdown_table(grading)
    if plotted:
        lines += ["", "![score distribution](scores.png)"]
    lines += ["", *overview.markdown(views)]
    lines += _timing_lines(grading)
    if grading.protections:
        lines += ["", "## Sandbox protections", ""]
        lines += [f"- {key}: {value}" for key, value in grading.protections.items() if key != "limits"]
    if grading.grader_errors:
        lines += ["", "## Grader errors (the learners see a one-line note instead)", ""]
        lines += [f"- {error}" for error in grading.grader_errors]
    (out / "report.md").write_text("\n".join(lines) + "\n")
