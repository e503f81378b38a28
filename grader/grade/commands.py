"""The instructor's commands: ``release``, ``collect`` and ``grade``.

``grader.cli`` registers them on ``python -m grader`` through ``add_commands``;
``python -m grader.grade.commands <command>`` runs them on their own.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from grader.core.catalog import REPO_ROOT
from grader.grade.course import DEFAULT_COURSE_DIR


def add_ray_argument(parser) -> None:
    """``--ray [ADDRESS]``, for ``run`` and ``grade``."""
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="grade on a Ray cluster: one task per submission and module, one worker per GPU "
        "(needs `pip install -e '.[cluster]'`); without ADDRESS, the cluster of this "
        "machine (`ray start --head`), or a private one for this run; `--ray local`: a private "
        "one even where a cluster runs here",
    )


def add_workers_argument(parser) -> None:
    """``--workers N``, for ``run`` and ``grade``."""
    parser.add_argument(
        "--workers",
        type=int,
        help="gradings at a time on this machine (default: --per-gpu for each GPU, or min(4, CPUs) without one)",
    )
    parser.add_argument(
        "--per-gpu",
        type=int,
        default=4,
        metavar="N",
        help="gradings at a time on each GPU, locally and on every worker of a Ray cluster "
        "(default 4; 8 where a GPU has 16 or more CPU cores beside it)",
    )
    parser.add_argument(
        "--in-turn",
        action="store_true",
        help="on a GPU, run a grading's hidden cases after its public ones instead of beside them: "
        "the second child then finds the kernels the first compiled, which saves CPU time where "
        "every core is busy, at the cost of each grading's own wall time",
    )


def _modules(names):
    from grader.core.catalog import find_module

    return [find_module(name) for name in names] if names else None


def cmd_release(args) -> int:
    from grader.grade import release

    bundle = release.build(Path(args.out), Path(args.course), _modules(args.module))
    print(
        f"Wrote the learners' bundle to {bundle.folder}: {len(bundle.files)} file(s) of the repository "
        f"(without {', '.join(release.INSTRUCTOR_ONLY)}) and release/ with {len(bundle.assignments)} "
        "assignment(s). No solution or hidden-case text was found in it."
    )
    if bundle.uncommitted:
        print(
            f"Note: {len(bundle.uncommitted)} file(s) not committed yet are included: "
            f"{', '.join(bundle.uncommitted[:8])}{' ...' if len(bundle.uncommitted) > 8 else ''}"
        )
    return 0


def cmd_collect(args) -> int:
    from grader.grade import collect, course

    course.generate_assignments(Path(args.course), _modules(args.module))
    collected = collect.collect(Path(args.source), Path(args.course), _modules(args.module))
    print(f"Collected {len(collected.submissions)} submission(s) into {Path(args.course) / 'submitted'}.")
    for student, assignment, why in collected.refused:
        print(f"NOT COLLECTED {student} {assignment}: {why}.")
    for name, what in collected.unmatched:
        print(f"NOT COLLECTED {name}: {what}")
    return 0


def _publishing(args) -> tuple[list[str] | None, dict | None]:
    """The roster and the deadlines, read before anything is graded so that a mistake in either
    file costs nothing."""
    from grader.grade import deadlines, export

    roster = export.read_roster(Path(args.roster)) if args.roster else None
    due = deadlines.load(Path(args.deadlines)) if args.deadlines else None
    return roster, due


def _print_published(published) -> None:
    """Where lms.csv and the summaries are, and what to check before importing them."""
    print(
        f"LMS gradebook: {published.lms_csv} ({len(published.students)} student(s) x "
        f"{len(published.assignments)} module(s)); a summary per student in {published.summaries}."
    )
    if published.roster is not None:
        for student in published.not_on_roster:
            print(
                f"NOT ON THE ROSTER {student}: graded and exported, but the LMS will not know this id; fix "
                "the file names (or the roster) and grade again."
            )
    missing = published.missing
    if missing:
        print(f"{len(missing)} missing submission(s) count as 0: see the missing column of lms.csv.")
    if published.late:
        print(
            f"{len(published.late)} late submission(s): their penalty is in lms.csv and the students' summaries "
            "(nbgrader's gradebook keeps the points earned)."
        )
    for entry in published.ungraded:
        print(
            f"NO GRADE {entry.student} {entry.assignment}: left empty in lms.csv; grade it again "
            "(--student, --regrade) before importing."
        )


def cmd_grade(args) -> int:
    from grader.core import device
    from grader.grade import phases, report, runphase
    from grader.grade import pipeline as grading
    from grader.sandbox.isolation import Limits

    source = Path(args.source) if args.source else None
    roster, due = _publishing(args)
    # Limits count CPU seconds. The bundled examples include an endless loop: a shorter limit
    # keeps `make grade` quick there, still ~7x the slowest reference case under the interpreter
    # (not on a GPU, where a first call also compiles, autotuning included).
    examples = source is None and not (args.student or args.regrade)
    case_seconds = args.case_timeout or (20.0 if examples and not device.is_cuda() else 60.0)
    options = runphase.Options(
        workers=args.workers,
        children_per_gpu=args.per_gpu,
        side_by_side=False if args.in_turn else None,
        allow_unsafe=args.allow_unsafe,
        limits=Limits(case_seconds=case_seconds),
        ray=args.ray,
    )
    if source is None and not examples:
        print(f"No submissions given: grading what is collected in {Path(args.course) / 'submitted'}.")
    elif examples:
        print(
            "No submissions given: grading the bundled examples (grader/examples and the course's own "
            "solutions and stubs)."
        )
    result = grading.grade(
        source,
        Path(args.course),
        Path(args.out),
        _modules(args.module),
        options,
        students=args.student,
        regrade=args.regrade,
        roster=roster,
        deadlines=due,
    )
    print()
    print("\n".join([report.table(result), *grading.extra_lines(result)]))
    print(f"\n{phases.table(result.phases)}")
    written = [result.out / name for name in ("grades.csv", "report.md", "scores.png") if (result.out / name).is_file()]
    print(f"\nWrote {', '.join(map(str, written))} and feedback under {result.course_dir / 'feedback'}.")
    if result.published is not None:
        _print_published(result.published)
    if args.profile:
        print(f"\n{result.profile}")
    for error in result.grader_errors:
        print(f"GRADER ERROR {error}")
    return 1 if result.grader_errors else 0


def _errors():
    from grader.grade.cluster import ClusterError
    from grader.grade.collect import CollectError
    from grader.grade.course import NbgraderError
    from grader.grade.deadlines import DeadlineError
    from grader.grade.export import RosterError
    from grader.grade.pipeline import SelectionError
    from grader.grade.release import ReleaseError
    from grader.grade.store import SecretError
    from grader.sandbox.isolation import SandboxError

    return (
        ClusterError,
        CollectError,
        NbgraderError,
        ReleaseError,
        SandboxError,
        SelectionError,
        SecretError,
        DeadlineError,
        RosterError,
    )


def stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and a scheduler's stop (SIGTERM) both raise KeyboardInterrupt here, even
    where the process started with SIGINT ignored (a background job of a script, some test
    runners' workers): a run must stop when told to, and keep what it finished."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


def _guarded(command):
    def run(args) -> int:
        from grader.core.versions import grading_problem

        problem = grading_problem()
        if problem is not None:
            print(problem)
            return 2
        stop_on_signals()
        try:
            return command(args)
        except _errors() as error:
            print(error)
            return 2
        except KeyboardInterrupt:
            print("Stopped. Run the same command again to continue: finished work is reused.", flush=True)
            from grader.grade.runphase import exit_if_workers_linger

            exit_if_workers_linger(130)
            return 130

    return run


def add_commands(commands) -> None:
    """Register release, collect and grade on ``python -m grader``'s subparsers."""
    release_cmd = commands.add_parser("release", help="the learners' bundle, without solutions (instructors)")
    release_cmd.add_argument(
        "--out", default=str(REPO_ROOT / "build" / "release"), help="folder to write (replaced; default build/release)"
    )
    release_cmd.set_defaults(run=_guarded(cmd_release))

    collect_cmd = commands.add_parser("collect", help="bring submissions into the nbgrader course")
    collect_cmd.add_argument(
        "source",
        help="a folder of <student>/<track>/<slug>/kernel.py (or "
        "<student>/<track>-<slug>/kernel.py), or an LMS zip of "
        "<student>_<track>-<slug>_kernel.py files",
    )
    collect_cmd.set_defaults(run=_guarded(cmd_collect))

    grade_cmd = commands.add_parser("grade", help="grade submissions end to end with nbgrader (instructors)")
    grade_cmd.add_argument("source", nargs="?", help="as for collect (default: the bundled examples)")
    grade_cmd.add_argument(
        "--out",
        default=str(REPO_ROOT / "build" / "grades"),
        help="folder for grades.csv and report.md (default build/grades)",
    )
    add_workers_argument(grade_cmd)
    grade_cmd.add_argument(
        "--case-timeout",
        type=float,
        help="CPU seconds per call before a case is stopped (default 60; 20 for the examples)",
    )
    grade_cmd.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="grade even where the sandbox cannot limit processes (a machine of your own)",
    )
    grade_cmd.add_argument(
        "--profile", action="store_true", help="print where the run phase's time went, per module and step"
    )
    add_ray_argument(grade_cmd)
    grade_cmd.add_argument(
        "--student",
        action="append",
        help="only this student's submissions (repeatable); without SOURCE, those already collected in the course",
    )
    grade_cmd.add_argument(
        "--regrade",
        action="store_true",
        help="grade the selected submissions (--student, --module; else all) again, even "
        "where a record exists; other students' records and grades stay as they are",
    )
    grade_cmd.add_argument(
        "--roster",
        help="the class: one student id per line, or a CSV with a student column; "
        "lms.csv gives a 0 for each missing submission",
    )
    grade_cmd.add_argument(
        "--deadlines",
        help="due dates and late penalties per module (.toml or .csv; see "
        "docs/instructors.md), applied in lms.csv and the summaries",
    )
    grade_cmd.set_defaults(run=_guarded(cmd_grade))

    for command in (release_cmd, collect_cmd, grade_cmd):
        command.add_argument(
            "--course", default=str(DEFAULT_COURSE_DIR), help="the nbgrader course folder (default build/course)"
        )
        command.add_argument("--module", action="append", help="only this module (repeatable)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.grade.commands", description=__doc__)
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except LookupError as error:  # an unknown --module
        print(error)
        return 2


if __name__ == "__main__":
    sys.exit(main())
