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
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                        help="grade on a Ray cluster: one task per submission and module, one worker per GPU "
                             "(needs `pip install -e '.[cluster]'`); without ADDRESS, the cluster of this "
                             "machine (`ray start --head`), or a private one for this run")


def add_workers_argument(parser) -> None:
    """``--workers N``, for ``run`` and ``grade``."""
    parser.add_argument("--workers", type=int,
                        help="gradings at a time (default: 4 per GPU, or min(4, CPUs) without one; with "
                             "16 or more CPU cores per GPU, 8 per GPU is faster)")


def _modules(names):
    from grader.core.catalog import find_module

    return [find_module(name) for name in names] if names else None


def cmd_release(args) -> int:
    from grader.grade import release

    bundle = release.build(Path(args.out), Path(args.course), _modules(args.module))
    print(f"Wrote the learners' bundle to {bundle.folder}: {len(bundle.files)} file(s) of the repository "
          f"(without {', '.join(release.INSTRUCTOR_ONLY)}) and release/ with {len(bundle.assignments)} "
          "assignment(s). No solution or hidden-case text was found in it.")
    if bundle.uncommitted:
        print(f"Note: {len(bundle.uncommitted)} file(s) not committed yet are included: "
              f"{', '.join(bundle.uncommitted[:8])}{' ...' if len(bundle.uncommitted) > 8 else ''}")
    return 0


def cmd_collect(args) -> int:
    from grader.grade import collect, course

    course.generate_assignments(Path(args.course), _modules(args.module))
    collected = collect.collect(Path(args.source), Path(args.course), _modules(args.module))
    print(f"Collected {len(collected.submissions)} submission(s) into {Path(args.course) / 'submitted'}.")
    for student, assignment, why in collected.refused:
        print(f"NOT COLLECTED {student} {assignment}: {why}.")
    return 0


def cmd_grade(args) -> int:
    from grader.core import device
    from grader.grade import phases, report, runphase
    from grader.grade import pipeline as grading
    from grader.sandbox.isolation import Limits

    source = Path(args.source) if args.source else None
    # Limits count CPU seconds. The bundled examples include an endless loop: a shorter limit
    # keeps `make grade` quick there, still ~7x the slowest reference case under the interpreter
    # (not on a GPU, where a first call also compiles, autotuning included).
    case_seconds = args.case_timeout or (60.0 if source or device.is_cuda() else 20.0)
    options = runphase.Options(workers=args.workers, allow_unsafe=args.allow_unsafe,
                               limits=Limits(case_seconds=case_seconds), ray=args.ray)
    if source is None:
        print("No submissions given: grading the bundled examples (grader/examples and the course's own "
              "solutions and stubs).")
    result = grading.grade(source, Path(args.course), Path(args.out), _modules(args.module), options)
    print()
    print(report.table(result))
    print(f"\n{phases.table(result.phases)}")
    written = [result.out / name for name in ("grades.csv", "report.md", "scores.png")
               if (result.out / name).is_file()]
    print(f"\nWrote {', '.join(map(str, written))} and feedback under {result.course_dir / 'feedback'}.")
    if args.profile:
        print(f"\n{result.profile}")
    for error in result.grader_errors:
        print(f"GRADER ERROR {error}")
    return 1 if result.grader_errors else 0


def _errors():
    from grader.grade.cluster import ClusterError
    from grader.grade.collect import CollectError
    from grader.grade.course import NbgraderError
    from grader.grade.release import ReleaseError
    from grader.sandbox.isolation import SandboxError

    return (ClusterError, CollectError, NbgraderError, ReleaseError, SandboxError)


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
    release_cmd.add_argument("--out", default=str(REPO_ROOT / "build" / "release"),
                             help="folder to write (replaced; default build/release)")
    release_cmd.set_defaults(run=_guarded(cmd_release))

    collect_cmd = commands.add_parser("collect", help="bring submissions into the nbgrader course")
    collect_cmd.add_argument("source", help="a folder of <student>/<track>/<slug>/kernel.py (or "
                                            "<student>/<track>-<slug>/kernel.py), or an LMS zip of "
                                            "<student>_<track>-<slug>_kernel.py files")
    collect_cmd.set_defaults(run=_guarded(cmd_collect))

    grade_cmd = commands.add_parser("grade", help="grade submissions end to end with nbgrader (instructors)")
    grade_cmd.add_argument("source", nargs="?", help="as for collect (default: the bundled examples)")
    grade_cmd.add_argument("--out", default=str(REPO_ROOT / "build" / "grades"),
                           help="folder for grades.csv and report.md (default build/grades)")
    add_workers_argument(grade_cmd)
    grade_cmd.add_argument("--case-timeout", type=float,
                           help="CPU seconds per call before a case is stopped (default 60; 20 for the examples)")
    grade_cmd.add_argument("--allow-unsafe", action="store_true",
                           help="grade even where the sandbox cannot limit processes (a machine of your own)")
    grade_cmd.add_argument("--profile", action="store_true",
                           help="print where the run phase's time went, per module and step")
    add_ray_argument(grade_cmd)
    grade_cmd.set_defaults(run=_guarded(cmd_grade))

    for command in (release_cmd, collect_cmd, grade_cmd):
        command.add_argument("--course", default=str(DEFAULT_COURSE_DIR),
                             help="the nbgrader course folder (default build/course)")
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
