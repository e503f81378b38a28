"""The record phase's API: what an assignment notebook's autograder cells call.

    from grader.grade.record import score
    score("missing-elements/01-vector-add", "public", out_of=4)

``score`` finds the run phase's record of the ``kernel.py`` beside the notebook (by the file's
sha256, the module and the course's cases; if there is none, it grades that one file through
the run phase's sandbox), prints the learner's report for one part (public cases, hidden cases,
performance) and returns the points, which nbgrader takes as the cell's partial credit.

The notebook kernel never imports or runs the learner's file, and this module never writes to
stderr or shows a traceback (nbgrader gives a cell with stderr output zero points, and feedback
must not show grader internals): every failure becomes a one-line explanation and 0 points.
Where the records are: ``$GRADER_RESULTS`` (the grading pipeline sets it), else the ``results``
folder of the nbgrader course around the notebook, else ``build/course/results``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import textwrap
import warnings
from pathlib import Path

from grader.core.catalog import find_module
from grader.core.diagnosis import gist
from grader.grade import scoring
from grader.grade.course import DEFAULT_COURSE_DIR, RESULTS_ENV, results_dir
from grader.grade.scoring import (
    PARTS,
    case_share,
    graded_parts,
    part_points,
    parts_share,
    performance_share,
    withheld,
)
from grader.grade.store import starting_record

_TODO_HINT = re.compile(r"\n(?=\d+ TODO\(s\) still open in kernel\.py)")


class _Explained(Exception):
    """A failure whose message is already meant for the learner."""


# ----------------------------------------------------------------------------------------------
# What the cells call
# ----------------------------------------------------------------------------------------------


def score(module_id: str, part: str, out_of: float, folder: str | Path | None = None) -> float:
    """Print the report of one part of a module's grade and return its points (0 on failure)."""
    try:
        with _silenced():
            here = Path(folder or os.getcwd())
            record = with_given(
                find_record(module_id, here), starting_record(results_location(here), find_module(module_id))
            )
            text, points = part_report(record, part, out_of)
            text = _wrapped(text)
    except _Explained as error:
        text, points = f"{part.capitalize()} part: 0 of {out_of:g} points. {error}", 0.0
    except BaseException as error:
        first = (str(error).strip().splitlines() or [""])[0][:200]
        text, points = (
            f"{part.capitalize()} part: 0 of {out_of:g} points. The grader could not grade "
            f"this part ({type(error).__name__}{': ' + first if first else ''}). "
            "Ask your instructor to look at the grading log.",
            0.0,
        )
    # One write: print() makes two (the text, then the newline), and a notebook kernel on a busy
    # machine may send them as two outputs, which the feedback would show apart.
    sys.stdout.write(text + "\n")
    return points


def with_given(record: dict, starting: dict | None) -> dict:
    """``record`` with the names of the cases that the module's starting kernel passes
    (``starting``: its record from the same run, same cases), which scoring counts as no work."""
    if not starting or starting.get("cases_sha256") != record.get("cases_sha256") or starting.get("load_error"):
        return record
    return {**record, "given": sorted(row["name"] for row in starting["cases"] if row["passed"])}


def _wrapped(text: str, width: int = 100) -> str:
    """Long lines folded at ``width``, each continuation indented like its line: the feedback
    page shows the cell's output in a box that does not wrap."""
    lines = []
    for line in text.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        lines.append(
            textwrap.fill(line, width, subsequent_indent=indent + "  ", break_long_words=False, break_on_hyphens=False)
            if len(line) > width
            else line
        )
    return "\n".join(lines)


@contextlib.contextmanager
def _silenced():
    """No warnings and nothing on stderr, from Python or from C code, while grading."""
    saved_fd = None
    try:
        sys.stderr.flush()
        saved_fd = os.dup(2)
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
    except (OSError, ValueError, AttributeError):
        saved_fd = None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


# ----------------------------------------------------------------------------------------------
# Finding (or producing) the record
# ----------------------------------------------------------------------------------------------


def course_around(folder: Path) -> Path | None:
    """The nbgrader course folder that holds ``folder``, if any."""
    return next((p for p in (folder, *folder.parents) if (p / "nbgrader_config.py").is_file()), None)


def results_location(folder: Path) -> Path:
    if os.environ.get(RESULTS_ENV):
        return Path(os.environ[RESULTS_ENV])
    return results_dir(course_around(folder) or DEFAULT_COURSE_DIR)


def find_record(module_id: str, folder: Path) -> dict:
    """The run phase's record of ``folder/kernel.py``; graded now (sandboxed) if there is none."""
    from grader.grade import runphase
    from grader.sandbox.isolation import SandboxError

    folder = folder.resolve()
    kernel = folder / "kernel.py"
    if not kernel.exists() and not kernel.is_symlink():
        raise _Explained(
            "There is no kernel.py beside this notebook: submit your kernel.py in the "
            "assignment's folder, next to the notebook."
        )
    course = course_around(folder)
    options = runphase.Options(workers=1, hide=(course,) if course else ())
    try:
        outcome = runphase.grade_submission(find_module(module_id), kernel, results_location(folder), options)
    except ValueError as error:  # a link, a folder, a file that is too large
        raise _Explained(str(error)) from None
    except SandboxError as error:
        raise _Explained(
            "kernel.py was not graded: the sandbox that runs submissions cannot start here "
            f"({str(error).splitlines()[0]}). Your instructor grades it with "
            "`python -m grader grade`."
        ) from None
    return outcome.record


# ----------------------------------------------------------------------------------------------
# The report of one part, and its points (pure functions of the record)
# ----------------------------------------------------------------------------------------------


def performance_credit(record: dict) -> tuple[float | None, float, float]:
    """(the share of the performance points, or None when performance was not graded; the
    threshold of full credit; the floor of no credit), as speeds relative to the reference."""
    from grader.core import cases

    performance = record.get("performance") or {}
    spec = cases.public(find_module(record["module"]))[0]
    threshold = performance.get("threshold") or spec.learner_threshold
    floor = performance.get("floor", spec.floor)
    return performance_share(performance, threshold, floor), threshold, floor


def performance_status(record: dict) -> str:
    """ "not graded" or the share of the points, for tables and CSV files."""
    credit, _, _ = performance_credit(record)
    return "not graded" if credit is None else f"{credit:.2f}"


def _cases_report(record: dict, visibility: str, out_of: float) -> tuple[str, float]:
    rows = [row for row in record["cases"] if row["visibility"] == visibility]
    passed, total = case_share(rows, visibility)
    weights = {part["name"]: part["weight"] for part in record.get("parts") or ()}
    share, counted, earned = parts_share(rows, set(record.get("given") or ()), weights)
    points = part_points(share, out_of) if total else 0.0
    title = "Public cases" if visibility == "public" else "Hidden cases"
    left_out = scoring.shows_no_work(record, visibility)
    if left_out:
        points = 0.0
    if not rows:
        where = (
            "this checkout has none (they are only in the instructor's)"
            if visibility == "hidden"
            else "the module has none on this device"
        )
        if left_out:
            return f"{title}: NOT GRADED, 0 of {out_of:g} points: {where}, and {scoring.no_work_reason()}.", points
        return f"{title}: {points:g} of {out_of:g} points: {where}.", points
    lines = [f"{title}: {passed} of {len(rows)} pass: {points:g} of {out_of:g} points."]
    if left_out:
        which = "" if scoring.not_graded_here(record, find_module(record["module"]).track) else f"{visibility} "
        lines = [
            f"{title}: {passed} of {len(rows)} pass: NOT GRADED, 0 of {out_of:g} points. They are left out of "
            f"this grade because {scoring.no_work_reason(which)}."
        ]
    if weights:
        lines.append(
            "  Each part counts as its share of the module's points, whatever its number of cases: "
            + "; ".join(_part_line(record, part, rows) for part in record["parts"])
            + "."
        )
    if counted < len(rows):
        given = set(record.get("given") or ())
        broken = sum(not row["passed"] for row in rows if row["name"] in given)
        lines.append(
            f"  {len(rows) - counted} of them already pass in the starting kernel, so the points count the "
            f"other {counted}, of which {earned} pass"
            + (f"; {broken} case(s) the starting kernel passes now fail, and each takes one back" if broken else "")
            + "."
        )
    if visibility == "public":
        lines.append(
            f"(kernel.py {record['submission_sha256'][:12]}, graded on {record['device']}, {record['graded_at']})"
        )
    if record.get("load_error"):
        lines.append(
            record["summary"]
            if visibility == "public"
            else "None ran: kernel.py could not be imported (see the public part)."
        )
        return "\n".join(lines), points
    hints, seen = [], set()
    for row in rows:
        lines.append(f"  {'PASS' if row['passed'] else 'FAIL'}  {row['name']}")
        if not row["passed"] and row["message"]:
            message, *hint = _TODO_HINT.split(row["message"], maxsplit=1)
            hints += hint
            same = gist(message) in seen
            seen.add(gist(message))
            lines.append(textwrap.indent("(the same problem as above)" if same else message, "        "))
    if visibility == "public" and record.get("note"):  # a crash that no case caused alone
        lines.append(record["note"])
    return "\n".join(lines + hints[:1]), points


def _part_label(record: dict, part: dict) -> str:
    """ "part 2, the optimizer step (30%)": one part of a module of several, with its share."""
    number = [p["name"] for p in record["parts"]].index(part["name"]) + 1
    weight = part["weight"] / sum(p["weight"] for p in record["parts"])
    return f"part {number}, {part['title']} ({weight:.0%})"


def _part_line(record: dict, part: dict, rows: list[dict]) -> str:
    """ "part 2, the optimizer step (30%): 11 of 12 pass" for one part of a module of several."""
    mine = [row for row in rows if row.get("part") == part["name"]]
    return f"{_part_label(record, part)}: {sum(bool(row['passed']) for row in mine)} of {len(mine)} pass"


def graded_total(record: dict) -> tuple[float, int]:
    """(the points of the parts that were graded, what they are out of): the grade as the
    learner should read it when performance was left out."""

    parts = graded_parts(record, find_module(record["module"]).track)
    if withheld(record):
        return 0.0, sum(parts.values())
    earned = sum(_cases_report(record, part, out_of)[1] for part, out_of in parts.items() if part != "performance")
    if "performance" in parts:
        credit, _, _ = performance_credit(record)
        earned += part_points(credit or 0.0, parts["performance"])
    return round(earned, 2), sum(parts.values())


def _left_out_text(record: dict, out_of: float) -> str:
    """Why the performance points are not in this grade, what the grade is out of instead, and
    what nbgrader's own score at the top of the page counts."""

    performance = record.get("performance") or {}
    why = (
        "speed is graded on a CUDA GPU only"
        if scoring.no_gpu(performance)
        else (performance.get("reason") or "it was not graded")
    )
    track = find_module(record["module"]).track
    full = sum(scoring.points(track).values())
    nbgrader = f"The score nbgrader shows at the top of this page is out of {full:g}: it counts "
    if scoring.not_graded_here(record, track):
        return (
            f"This module is not graded on this machine: {scoring.no_work_reason()}. {nbgrader}every "
            "part in its maximum, although none was graded."
        )
    earned, graded = graded_total(record)
    counted = [part for part in ("public", "hidden") if part in graded_parts(record, track)]
    have = f"you have {earned:g} of {graded:g}"
    if record.get("starting_kernel"):
        have += ", all of it for code you were given (see the note in the public part)"
    return (
        f"Its {out_of:g} points were left out of this grade because {why}: here the module is out of "
        f"{graded:g} (the {' and '.join(counted)} cases), and {have}. {nbgrader}these {out_of:g} points in "
        "its maximum, although they were not graded."
    )


def _performance_report(record: dict, out_of: float) -> tuple[str, float]:
    performance = record.get("performance") or {}
    credit, threshold, floor = performance_credit(record)
    reason = performance.get("reason") or ""
    if credit is None:
        return f"Performance: NOT GRADED ({reason or 'not graded'}). {_left_out_text(record, out_of)}", 0.0
    points = part_points(credit, out_of)
    if performance.get("parts"):  # a module of several parts: each timed on its own function
        text = f"Performance: {points:g} of {out_of:g} points, each part timed on its own function:"
        for part in record.get("parts") or ():
            entry = performance["parts"].get(part["name"]) or {}
            text += f"\n  {_part_label(record, part)}: {entry.get('reason') or 'not timed'}"
        if performance.get("warning"):
            text += f"\n  Note: {performance['warning']}."
        return text, points
    if not reason and "ratio" in performance:
        reason = f"{float(performance['ratio']):.2f} x the reference's speed"
    text = (
        f"Performance: {points:g} of {out_of:g} points: {reason or 'timed against the reference'}.\n"
        f"  Full points from {threshold:.2f} x the reference's speed, none at or below {floor:.2f} x."
    )
    if performance.get("warning"):
        text += f"\n  Note: {performance['warning']}."
    return text, points


def starting_kernel_note(record: dict) -> str:
    """What to tell a learner whose kernel.py is still the starting kernel (comments and layout
    aside), so that an untouched file never reads like a finished one, even where the starting
    code is correct and speed, the module's point, cannot be graded here."""
    if not record.get("starting_kernel"):
        return ""
    from grader.core import cases

    module = find_module(record["module"])
    check = f"`make check M={module.id}`"
    head = "Your kernel.py is still the starting kernel (only comments, docstrings or spacing changed, if anything)"
    if all(row["passed"] for row in record["cases"]):
        bars = (
            "to see its memory traffic against the module's bars"
            if cases.traffic_bars(module)
            else "to see what the module asks of it beyond correct values"
        )
        return (
            f"{head}: its cases pass because the code you were given already computes the right values, "
            f"and this module's exercise is to make it faster. Run {check} {bars}; speed is graded on a GPU."
        )
    work = "find and fix the bugs planted in it" if module.track == "debugging" else "complete its TODOs"
    return f"{head}: {work}, then run {check} to see what is still wrong."


def part_report(record: dict, part: str, out_of: float) -> tuple[str, float]:
    """(the learner's report, points) for one part of a record."""
    reason = withheld(record)
    if reason is not None:
        text = f"No points for this part: {reason}"
        if part == "public":  # show where it happened
            text += "\n" + _cases_report(record, "public", out_of)[0].split("\n", 1)[-1]
        return text, 0.0
    if part == "performance":
        return _performance_report(record, out_of)
    if part == "public" and starting_kernel_note(record):
        text, points = _cases_report(record, part, out_of)
        return f"{starting_kernel_note(record)}\n{text}", points
    if part in ("public", "hidden"):
        return _cases_report(record, part, out_of)
    raise _Explained(f"Unknown part {part!r}; the parts are {', '.join(PARTS)}.")
