"""``python -m grader <command>``: the learner's and the course maintainer's commands."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grader.authoring import stubs
from grader.core import device
from grader.core.catalog import REPO_ROOT, available_modules, find_module
from grader.grade.commands import add_commands as add_instructor_commands
from grader.grade.commands import add_ray_argument, add_workers_argument, stop_on_signals
from grader.grade.gpu_memory import SharingError
from grader.learn import progress


def _module_or_next(name: str | None):
    if name:
        return find_module(name)
    module = progress.next_unfinished()
    if module is None:
        print("Every available module is done. Congratulations! See `make progress`.")
        sys.exit(0)
    print("(No module given: checking your next unfinished one.)\n")
    return module


def cmd_check(args) -> int:
    from grader.learn import check

    code = check.check_contained(
        _module_or_next(args.module), args.impl, memcheck=not args.no_memcheck, function=args.function
    )
    if code and os.environ.get("MAKELEVEL") and not check.is_inner():  # make adds its own "Error N" line after ours
        crashed = code == check.CRASHED
        print(
            "(make reports the exit status next: "
            + (
                "the check crashed, as said above.)"
                if crashed
                else "the check did not pass, as said above. Nothing crashed.)"
            )
        )
    return code


def cmd_progress(args) -> int:
    print(progress.table())
    return 0


def cmd_bench(args) -> int:
    modules = available_modules() if args.module == "all" else [_module_or_next(args.module)]
    if not device.is_cuda():
        print(
            f"Benchmarks need a CUDA GPU; this machine runs kernels on {device.describe()}, whose "
            "timings say nothing about GPU speed. Run `make bench` on a machine with an NVIDIA GPU."
        )
        return 0
    from grader.learn.speed import run_bench

    for module in modules:
        print(f"\n## {module.id}: {module.title}\n")
        try:
            run_bench(module, args.impl, Path(args.out), host=args.host, against=args.against)
        except AssertionError as wrong:  # a kernel that fails its check is not timed
            print(f"{wrong}\nRun `make check M={module.id}` first.")
            return 1
    return 0


def cmd_stubs(args) -> int:
    if args.check:
        stale = stubs.out_of_date()
        for path in stale:
            print(f"out of date: {path.relative_to(REPO_ROOT)} (run `make stubs`)")
        return 1 if stale else 0
    changed, kept = stubs.write_all(args.module and [find_module(args.module)], force=args.force)
    for path in changed:
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    for path in kept:
        print(
            f"NOT overwritten: {path.relative_to(REPO_ROOT)} holds edits of yours (it differs from the "
            "committed stub). Copy your work elsewhere, then run `make stubs FORCE=1` to regenerate it."
        )
    if not kept:
        print(f"{len(changed)} stub(s) regenerated." if changed else "All stubs are up to date.")
    return 1 if kept else 0


def cmd_mutants(args) -> int:
    import tempfile

    from grader.authoring import kill_table, mistakes
    from grader.core.memcheck import ENV_SWITCH

    # Under the interpreter every call runs under the memory checker, as in make check and the
    # suite: a mutant's store past a tensor is its finding, not a write into this process's memory.
    os.environ.setdefault(ENV_SWITCH, "1")

    if args.module:
        modules = [find_module(name) for name in args.module]
    else:
        modules = [m for m in available_modules() if m.api and mistakes.for_module(m)]
    extra = kill_table.extra_mistakes(Path(args.extra)) if args.extra else []
    if extra and len(modules) != 1:
        print("--extra plants its mistakes into one reference: name it with --module.")
        return 2
    survived = False
    for module in modules:
        with tempfile.TemporaryDirectory() as folder:
            kills = [
                kill_table.plant(module, mistake, Path(folder), hidden=not args.no_hidden)
                for mistake in mistakes.for_module(module) + extra
            ]
        print(kill_table.table(module, kills) + "\n", flush=True)
        survived = survived or any(kill.verdict == "SURVIVED" for kill in kills)
    return 1 if survived else 0


def cmd_sweep_secrets(args) -> int:
    from grader.authoring import secret_sweep

    modules = [find_module(args.module)] if args.module else [m for m in available_modules() if m.api]
    failed = False
    for module in modules:
        result = secret_sweep.sweep(module, args.secrets, args.seed, args.impl)
        print(secret_sweep.report(result), flush=True)
        failed = failed or bool(result.failures)
    if failed:
        print(
            "Each failure names the secret that reproduces it. A correct kernel that fails only for some "
            "secrets usually means a tolerance too tight for what float32 rounding does on those inputs."
        )
    return 1 if failed else 0


def cmd_lab(args) -> int:
    from grader.learn.lab import run

    return run(args.jupyter_args)


def cmd_sanitize(args) -> int:
    from grader.learn import sanitizer

    return sanitizer.main(args.sanitizer_args)


def cmd_run(args) -> int:
    from grader.grade import profile, runphase
    from grader.grade.cluster import ClusterError
    from grader.sandbox.isolation import GiB, Limits, SandboxError

    stop_on_signals()
    limits = Limits(
        case_seconds=args.case_timeout,
        startup_seconds=args.startup_timeout,
        memory_bytes=int(args.memory_gib * GiB) if args.memory_gib else None,
    )
    options = runphase.Options(
        workers=args.workers,
        children_per_gpu=args.per_gpu,
        side_by_side=False if args.in_turn else None,
        limits=limits,
        hide=tuple(args.hide),
        expose=tuple(args.expose),
        allow_unsafe=args.allow_unsafe,
        ray=args.ray,
    )
    modules = [find_module(name) for name in args.module] if args.module else None
    logged_from = profile.log_size(Path(args.results))
    try:
        summary = runphase.run(Path(args.submissions), Path(args.results), modules, options, progress=not args.quiet)
    except SandboxError as error:
        print(f"The sandbox cannot run here: {error}")
        return 2
    except ClusterError as error:
        print(error)
        return 2
    except KeyboardInterrupt:
        print("Stopped. Records written so far are kept; run the same command again to continue.", flush=True)
        if args.profile:  # of the gradings that finished before the stop
            print(profile.logged_table(Path(args.results), logged_from), flush=True)
        runphase.exit_if_workers_linger(130)
        return 130
    graded = [o for o in summary.outcomes if o.record is not None]
    reused = sum(len(o.submissions) for o in graded if o.reused)
    print(
        f"{sum(len(o.submissions) for o in graded)} submission(s) graded into {summary.results_dir} "
        f"({reused} reused, {summary.children_started} child process(es) started)."
    )
    if summary.protections:
        print(
            "Protections: "
            + "; ".join(f"{key}: {value}" for key, value in summary.protections.items() if key != "limits")
        )
    if args.profile:
        print(summary.profile_table())
    for outcome in summary.errors:
        who = ", ".join(f"{s.student} {s.module.id}" for s in outcome.submissions)
        print(f"NOT GRADED {who}: {outcome.error}")
    return 1 if summary.errors else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="run a module's public tests on your kernel.py")
    check.add_argument("module", nargs="?", help="e.g. missing-elements/03-softmax (default: your next one)")
    check.add_argument("--impl", default="learner", help="learner (default), solutions, or a folder/file")
    check.add_argument(
        "--no-memcheck",
        action="store_true",
        help="on a CPU, skip the memory checker (out-of-bounds, races, unwritten memory)",
    )
    check.add_argument("--function", help="only the tests of this function of the module, e.g. rms_norm")
    check.set_defaults(run=cmd_check)

    commands.add_parser("progress", help="all modules and where you stand").set_defaults(run=cmd_progress)

    bench_cmd = commands.add_parser("bench", help="GPU benchmark table and plot for a module")
    bench_cmd.add_argument("module", nargs="?", help="a module, or `all` (default: your next one)")
    bench_cmd.add_argument("--impl", default="learner")
    bench_cmd.add_argument("--out", default="bench-results", help="folder for the PNG plot")
    bench_cmd.add_argument(
        "--host", action="store_true", help="also split each call's time into host (CPU) and GPU time"
    )
    bench_cmd.add_argument(
        "--against",
        type=lambda text: text.replace(",", " ").split(),
        default=(),
        metavar="NAMES",
        help="also time these comparisons where a function offers them, comma-separated: compile "
        "(torch.compile of PyTorch's version), a library's name (liger), or all",
    )
    bench_cmd.set_defaults(run=cmd_bench)

    stubs_cmd = commands.add_parser("stubs", help="regenerate learner stubs from the solutions")
    stubs_cmd.add_argument("--check", action="store_true", help="only report stubs that are out of date")
    stubs_cmd.add_argument("--module", help="regenerate only this module's stub")
    stubs_cmd.add_argument(
        "--force", action="store_true", help="also overwrite stubs that hold hand edits (a learner's work is lost)"
    )
    stubs_cmd.set_defaults(run=cmd_stubs)

    sweep_cmd = commands.add_parser(
        "sweep-secrets", help="every case of the references under many secrets (maintainers)"
    )
    sweep_cmd.add_argument("--module", help="one module (default: every available one)")
    sweep_cmd.add_argument("--secrets", type=int, default=8, help="how many secrets (default 8)")
    sweep_cmd.add_argument("--seed", type=int, default=0, help="draws the secrets (default 0)")
    sweep_cmd.add_argument("--impl", default="solutions", help="solutions (default), or a folder/file")
    sweep_cmd.set_defaults(run=cmd_sweep_secrets)

    mutants_cmd = commands.add_parser(
        "mutants", help="each typical mistake planted into a reference: the cases that kill it (maintainers)"
    )
    mutants_cmd.add_argument("--module", action="append", help="one module (repeatable; default: every one)")
    mutants_cmd.add_argument("--extra", help="a file of MISTAKES to try too (written like a module's mistakes.py)")
    mutants_cmd.add_argument("--no-hidden", action="store_true", help="run the public cases only")
    mutants_cmd.set_defaults(run=cmd_mutants)

    lab_cmd = commands.add_parser("lab", help="JupyterLab on the study notebooks")
    lab_cmd.add_argument(
        "jupyter_args", nargs="*", help="passed on to JupyterLab after `--`, e.g. -- --no-browser --port=8890"
    )
    lab_cmd.set_defaults(run=cmd_lab)

    # Listed for --help; main() hands everything after `sanitize` to grader.learn.sanitizer itself.
    commands.add_parser(
        "sanitize",
        help="GPU only: run a script under compute-sanitizer or GSan, its findings in plain "
        "sentences (sanitize [--tool memcheck|initcheck|racecheck|synccheck|gsan] SCRIPT)",
    )

    run_cmd = commands.add_parser("run", help="grade submissions in sandboxed processes (instructors)")
    run_cmd.add_argument(
        "submissions", help="folder of <student>/<track>/<slug>/kernel.py or <student>/<track>-<slug>/kernel.py"
    )
    run_cmd.add_argument("--results", required=True, help="folder for the result records")
    run_cmd.add_argument("--profile", action="store_true", help="print where the time went, per module and step")
    run_cmd.add_argument("--module", action="append", help="grade only this module (repeatable)")
    add_workers_argument(run_cmd)
    run_cmd.add_argument(
        "--case-timeout",
        type=float,
        default=60.0,
        help="CPU seconds per call (default 60; wall time may run 10x longer)",
    )
    run_cmd.add_argument(
        "--startup-timeout", type=float, default=90.0, help="CPU seconds to start and import kernel.py (default 90)"
    )
    run_cmd.add_argument("--memory-gib", type=float, help="host memory per child (default 4, 16 on CUDA)")
    run_cmd.add_argument(
        "--hide",
        action="append",
        default=[],
        help="a path the child must not see, e.g. the nbgrader course folder (repeatable)",
    )
    run_cmd.add_argument(
        "--expose",
        action="append",
        default=[],
        help="a read-only path the child needs, e.g. a CUDA toolkit outside /usr",
    )
    run_cmd.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="grade even where the sandbox cannot limit processes (a machine of your own)",
    )
    run_cmd.add_argument("--quiet", action="store_true", help="no progress output")
    add_ray_argument(run_cmd)
    run_cmd.set_defaults(run=cmd_run)
    add_instructor_commands(commands)

    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["sanitize"]:  # everything after it is compute-sanitizer's and the script's
        return cmd_sanitize(argparse.Namespace(sanitizer_args=given[1:]))
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (LookupError, SharingError) as error:
        print(error)
        return 2
