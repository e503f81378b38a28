"""The nbgrader course: one assignment per available module, built from the catalog.

``build()`` writes a course folder (default ``build/course``) that nbgrader works in:

    nbgrader_config.py                       course id, exchange, time-outs, kernel.py kept as submitted
    source/<track>-<slug>/kernel.py          the learner's stub, as the generator writes it
    source/<track>-<slug>/<track>-<slug>.ipynb   intro + three locked autograder cells
    results/                                 the run phase's records (``grader.grade.record`` reads them)

Each assignment notebook is generated here, never edited by hand: a markdown intro (what is
graded, how points work) and three "autograder tests" cells (public correctness, hidden
correctness, performance), each calling ``grader.grade.record.score`` and ending with the points.
A new module becomes an assignment as soon as the catalog lists it as available.

``nbgrader()`` runs one nbgrader command in the course folder with the environment the record
phase needs: where the results are, and no current folder on ``sys.path`` (a learner's file next
to the notebook must never shadow a real module).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from grader.core.catalog import REPO_ROOT, Module, available_modules
from grader.core.markers import stub_for
from grader.grade import scoring
from grader.grade.scoring import POINTS  # noqa: F401  (the notebooks' and tables' totals)

COURSE_ID = "triton-kernels"
DEFAULT_COURSE_DIR = REPO_ROOT / "build" / "course"
RESULTS_ENV = "GRADER_RESULTS"  # where grader.grade.record finds the run phase's records


def points(module: Module) -> dict[str, int]:
    """The points of each part of ``module``'s assignment (``grader.grade.scoring``)."""
    return scoring.points(module.track)


# Seconds per notebook cell. A cell normally only reads a record (under a second); when the run
# phase did not produce it, the cell grades kernel.py itself: two time-outs of 60 s and a 90 s
# start-up fit.
CELL_TIMEOUT_SECONDS = 300
# Arguments of the notebook kernel: no history file, and no current folder (the submission's) on
# sys.path, so that no file there can shadow a module the cells import.
KERNEL_ARGUMENTS = ["--HistoryManager.hist_file=:memory:", "--InteractiveShellApp.ignore_cwd=True"]
NBGRADER_FAILED = (
    "nbgrader {command} failed (exit code {code}); the end of {log} says why. "
    "Fix that and run the grader again: work already finished is reused."
)


class NbgraderError(RuntimeError):
    """An nbgrader command failed; the message says where its log is."""


def assignment_name(module: Module) -> str:
    return f"{module.track}-{module.slug}"


def modules_by_assignment(modules: list[Module] | None = None) -> dict[str, Module]:
    return {assignment_name(m): m for m in (modules or available_modules()) if m.api}


def results_dir(course_dir: Path) -> Path:
    return Path(course_dir) / "results"


def released_notebook(course_dir: Path, assignment: str) -> Path:
    return Path(course_dir) / "release" / assignment / f"{assignment}.ipynb"


# ----------------------------------------------------------------------------------------------
# The assignment notebook
# ----------------------------------------------------------------------------------------------

_PARTS = {
    "public": "Public correctness: the cases of `test_kernel.py`",
    "hidden": "Hidden correctness: cases you have not seen, named by number only",
    "performance": "Performance: your kernel's speed against the reference solution's (CUDA GPU only)",
}


def _intro(module: Module, assignment: str) -> str:
    from grader.core import cases

    spec, _ = cases.public(module)
    threshold = spec.learner_threshold
    parts = points(module)
    total = sum(parts.values())
    return f"""# {module.title}: graded assignment `{assignment}`

Your work is **`kernel.py`** in this folder: complete its TODOs (`make check M={module.id}`
tells you what is still wrong). This notebook is how the course grades that file. You do not need
to edit or run it, and nothing you add to it counts: before grading, it is replaced by the
released copy.

Your `kernel.py` is never run inside this notebook. The grader runs it in a separate, sandboxed
process on fresh inputs, compares its outputs with a reference computed in higher precision,
and the cells below read that result.

| part | points | how it is scored |
|---|---|---|
| public correctness | {parts["public"]} | the share of public cases (those in `test_kernel.py`) that pass |
| hidden correctness | {parts["hidden"]} | the share of hidden cases that pass: other sizes, dtypes and layouts, shown by number only |
| performance | {parts["performance"]} | on a CUDA GPU, once every case passes: full points at {threshold:.2f} x the reference solution's speed or faster (both timed in the same run, on the same GPU), falling linearly to none at {spec.floor:.2f} x |

Out of {total} points. Without a CUDA GPU the performance part is **NOT GRADED**: its {parts["performance"]}
points are left out of your grade, which is then out of {total - parts["performance"]}, and the performance cell
says so. The score nbgrader shows at the top of the feedback still counts them in its maximum of
{total}; your instructor's table counts out of what was graded.{_no_work_note(module)} Each failed case
comes with the same diagnosis `make check` gives; a failed hidden case says only that it failed.
"""


def _no_work_note(module: Module) -> str:
    """For a track whose starting kernels are correct but slow: what a grade without a GPU leaves out."""
    if module.track != "optimization":
        return ""
    return (
        " Here the kernel you start from already passes every case, so without a GPU the cases show no"
        " work either: they are left out too, and the module is not graded until it runs on a GPU."
    )


def _grade_cell(module: Module, part: str) -> dict:
    import nbformat

    out_of = points(module)[part]
    source = (
        f"# {_PARTS[part]} ({out_of} points)\n"
        "from grader.grade.record import score\n"
        f"score({module.id!r}, {part!r}, out_of={out_of})"
    )
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {
        "grade": True,
        "solution": False,
        "locked": True,
        "task": False,
        "points": out_of,
        "grade_id": part,
        "schema_version": 3,
    }
    cell.metadata["deletable"] = False
    cell.metadata["editable"] = False
    return cell


def notebook_text(module: Module) -> str:
    import nbformat

    assignment = assignment_name(module)
    intro = nbformat.v4.new_markdown_cell(_intro(module, assignment))
    intro.metadata["nbgrader"] = {
        "grade": False,
        "solution": False,
        "locked": True,
        "task": False,
        "grade_id": "intro",
        "schema_version": 3,
    }
    notebook = nbformat.v4.new_notebook(cells=[intro, *(_grade_cell(module, part) for part in points(module))])
    notebook.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    for index, cell in enumerate(notebook.cells):  # stable ids: rebuilding changes nothing
        cell["id"] = f"{assignment}-{index}"
    return nbformat.writes(notebook)


# ----------------------------------------------------------------------------------------------
# The course folder
# ----------------------------------------------------------------------------------------------


def _config_text(course_dir: Path, assignments: list[str]) -> str:
    exchange = course_dir.parent / "exchange"
    keep = {name: ["kernel.py"] for name in assignments}
    return f"""# Written by grader/grade/course.py (`python -m grader grade`); edits are overwritten.
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {COURSE_ID!r}
c.CourseDirectory.root = {str(course_dir)!r}
c.Exchange.root = {str(exchange)!r}
# The learner's kernel.py is the submission: autograde must not replace it with the stub.
c.Autograde.exclude_overwriting = {keep!r}
c.Execute.timeout = {CELL_TIMEOUT_SECONDS}
# The notebook kernel must not import from its own folder (the submission's).
c.Execute.extra_arguments = {KERNEL_ARGUMENTS!r}
# `nbgrader zip_collect` takes only kernel.py files (grader/grade/collect.py gives the name pattern).
c.FileNameCollectorPlugin.valid_ext = [".py"]
"""


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def build(course_dir: Path = DEFAULT_COURSE_DIR, modules: list[Module] | None = None) -> list[str]:
    """Write the course folder; return the assignments whose source changed (or is new)."""
    course_dir = Path(course_dir).resolve()
    assignments = modules_by_assignment(modules)
    (course_dir.parent / "exchange").mkdir(parents=True, exist_ok=True)
    results_dir(course_dir).mkdir(parents=True, exist_ok=True)
    # Every assignment keeps its kernel.py, even when only some are being built.
    _write_if_changed(course_dir / "nbgrader_config.py", _config_text(course_dir, list(modules_by_assignment())))
    changed = []
    for name, module in assignments.items():
        folder = course_dir / "source" / name
        stub = _write_if_changed(folder / "kernel.py", stub_for(module))
        notebook = _write_if_changed(folder / f"{name}.ipynb", notebook_text(module))
        if stub or notebook or not released_notebook(course_dir, name).is_file():
            changed.append(name)
    return changed


def generate_assignments(course_dir: Path = DEFAULT_COURSE_DIR, modules: list[Module] | None = None) -> list[str]:
    """Build the course and release every assignment whose source changed; return them all."""
    if build(course_dir, modules):
        nbgrader(course_dir, "generate_assignment", "*", "--force")
    return list(modules_by_assignment(modules))


def environment(course_dir: Path) -> dict[str, str]:
    """The environment of nbgrader commands and of the notebook kernels they start."""
    env = dict(os.environ)
    env[RESULTS_ENV] = str(results_dir(course_dir).resolve())
    # nbgrader runs `alembic` when it creates the gradebook: the environment's bin/ must be on PATH.
    env["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(sys.executable), env.get("PATH")]))
    env["PYTHONSAFEPATH"] = "1"  # no current folder on sys.path, in nbgrader and in its kernels
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _require_nbgrader() -> None:
    if importlib.util.find_spec("nbgrader") is None:
        raise NbgraderError(
            "nbgrader is not installed in this Python environment. Install the grading "
            "extra (`pip install -e '.[grading]'`; `make` targets do it) and try again."
        )


def shared_kernel_arguments() -> list[str]:
    """Arguments of ``nbgrader autograde`` that run every notebook of the command in one kernel
    (``grader.grade.autograde.SharedKernelExecute`` in place of nbgrader's ``Execute``), nbgrader's
    other autograde steps unchanged and in their order.

    nbgrader gives each notebook a kernel of its own: starting it and importing the grader cost
    seconds per notebook, while the cells only read a record. The notebooks' outputs, the
    gradebook and the feedback are the same either way (tests/grade/test_autograde.py compares them).
    """
    _require_nbgrader()
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import Execute

    steps = []
    for step in Autograde.autograde_preprocessors.default():
        if step is Execute:
            steps.append("grader.grade.autograde.SharedKernelExecute")
        else:
            steps.append(step if isinstance(step, str) else f"{step.__module__}.{step.__qualname__}")
    if "grader.grade.autograde.SharedKernelExecute" not in steps:
        raise NbgraderError(
            "This nbgrader's autograde has no Execute step, which the grader replaces to "
            "run the notebooks in one kernel. Install the nbgrader version that the grading "
            "extra pins (`pip install -e '.[grading]'`) and try again."
        )
    return [f"--Autograde.autograde_preprocessors={step}" for step in steps]


# What nbgrader (0.9.6) logs as it converts each notebook of a submission, e.g. for autograde:
#   [AutogradeApp | INFO] Autograding /course/autograded/ada/<assignment>/<assignment>.ipynb
#   [AutogradeApp | INFO] Converting notebook /course/autograded/ada/<assignment>/<assignment>.ipynb
#   [AutogradeApp | INFO] Writing 9965 bytes to /course/autograded/ada/<assignment>/<assignment>.ipynb
#   [AutogradeApp | INFO] Setting destination file permissions to 444
# (converters/autograde.py and converters/base.py): an item starts at the first line's pattern
# and ends at the permissions line, which closes each submission. For generate_feedback an item
# starts at "Converting notebook" (autograde logs that line twice per notebook, hence its own).
ITEM_STARTS = {
    "autograde": re.compile(r"\bAutograding \S"),
    "generate_feedback": re.compile(r"\bConverting notebook \S"),
}
ITEM_ENDS = re.compile(r"\bSetting destination file permissions\b")


class ItemLines:
    """Counts the items (notebooks) an nbgrader command finishes, from its log lines: call it
    with each line, then ``end()`` when the command has ended. An item that starts before the
    last one's end line (a failed one, or a line this nbgrader words otherwise) ends the last
    one; ``end()`` ends the one still open. Unknown lines change nothing."""

    def __init__(self, command: str, on_item: Callable[[], None]):
        self.start, self.on_item, self.open = ITEM_STARTS.get(command), on_item, False

    def __call__(self, line: str) -> None:
        if self.start is None:
            return
        if self.start.search(line):
            self.end()
            self.open = True
        elif self.open and ITEM_ENDS.search(line):
            self.end()

    def end(self) -> None:
        if self.open:
            self.open = False
            self.on_item()


def nbgrader(
    course_dir: Path, command: str, *args: str, check: bool = True, on_item: Callable[[], None] | None = None
) -> bool:
    """Run ``nbgrader <command> <args>`` in the course folder, its output appended to
    ``logs/nbgrader-<command>.log``; return whether it succeeded. ``on_item`` is called as each
    notebook ends, as far as the log says (``ItemLines``: autograde and generate_feedback).

    With ``check``, a failure raises NbgraderError naming the log."""
    _require_nbgrader()
    course_dir = Path(course_dir).resolve()
    log = course_dir / "logs" / f"nbgrader-{command}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    items = ItemLines(command, on_item or (lambda: None))
    with open(log, "a") as handle:
        handle.write(f"\n$ nbgrader {command} {' '.join(args)}\n")
        handle.flush()
        with (
            open(log, "rb") as reader,
            subprocess.Popen(
                [sys.executable, "-m", "nbgrader", command, *args],
                cwd=course_dir,
                env=environment(course_dir),
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
            ) as process,
        ):
            # The log is read as it grows (not a pipe, which a kernel nbgrader started could keep open).
            reader.seek(handle.tell())
            try:
                _follow(process, reader, items)
            except BaseException:
                process.kill()
                raise
    items.end()
    if process.returncode != 0 and check:
        raise NbgraderError(NBGRADER_FAILED.format(command=command, code=process.returncode, log=log))
    return process.returncode == 0


def _follow(process: subprocess.Popen, reader, on_line: Callable[[str], None], poll: float = 0.2) -> None:
    """Hand each line written to ``reader``'s file to ``on_line`` until ``process`` has ended."""
    pending = b""
    while True:
        try:
            process.wait(timeout=poll)
            ended = True
        except subprocess.TimeoutExpired:
            ended = False
        pending += reader.read()
        *lines, pending = pending.split(b"\n")
        for line in lines:
            on_line(line.decode("utf-8", "replace"))
        if ended:
            if pending:
                on_line(pending.decode("utf-8", "replace"))
            return
