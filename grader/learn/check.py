"""The learner's main command: run a module's public tests on their kernel.py and explain.

The tests run in-process through pytest (quietly), and the report lists per test pass/fail with
the diagnosis, the TODOs left, and on a GPU the speed against PyTorch and the reference.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from grader.core import cases, crashes, device
from grader.core.catalog import REPO_ROOT, Module, find_module
from grader.core.checks import across, short_error
from grader.core.diagnosis import gist
from grader.core.loading import kernel_path, missing_kernel, todo_summary
from grader.core.markers import open_todos, todo_named
from grader.learn import progress
from grader.policy import check_source, explain, policy_for

# Where the checking process notes each test as it starts and ends, so that the parent can still
# report the finished tests, and name the one that ran, when a kernel crashes the process.
JOURNAL = "GRADER_CHECK_JOURNAL"


class _Collector:
    """pytest plugin that keeps each test's outcome and its learner-facing message (and, with
    ``JOURNAL`` set, writes each to that file as soon as it is known)."""

    def __init__(self):
        self.results: list[tuple[str, str, str]] = []  # (test name, outcome, message)
        journal = os.environ.get(JOURNAL)
        self._journal = open(journal, "a", buffering=1) if journal else None  # open for the whole run

    def _note(self, **entry) -> None:
        if self._journal is not None:
            self._journal.write(json.dumps(entry) + "\n")
            self._journal.flush()
            os.fsync(self._journal.fileno())

    def pytest_runtest_logstart(self, nodeid, location):
        self._note(started=nodeid.rsplit("::", 1)[-1])

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" or report.outcome != "passed":
            message = ""
            if call.excinfo is not None and report.outcome == "failed":
                error = call.excinfo.value
                message = (
                    str(error)
                    if isinstance(error, (AssertionError, pytest.fail.Exception))
                    else f"{type(error).__name__}: {short_error(error)}"
                )
            elif report.outcome == "skipped":
                message = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
            self.results.append((item.name, report.outcome, message))
            self._note(name=item.name, outcome=report.outcome, message=message)


def run_public_tests(module: Module, impl: str | Path, function: str | None = None) -> list[tuple[str, str, str]]:
    collector = _Collector()
    test_file = module.learner_dir / "test_kernel.py"
    only = [f"--function={function}"] if function else []
    with redirect_stdout(io.StringIO()):
        pytest.main(
            [
                str(test_file),
                f"--impl={impl}",
                *only,
                "-p",
                "no:terminal",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:faulthandler",
                "-W",
                "ignore",
            ],
            plugins=[collector],
        )
    return collector.results


def functions_of(module: Module) -> list[str]:
    """The functions a module's public cases call, its main one first."""
    spec, public = cases.public(module)
    return list(dict.fromkeys(s.api for s in [spec, *cases.specs_of(spec, public)]))


def check(module: Module, impl: str | Path = "learner", out=sys.stdout, function: str | None = None) -> bool:
    """Print the report for one module; True when every public test passes and, on a GPU, the
    kernel meets the course's speed bar on every benchmark case. ``function``: only the tests of
    that function (no speed bar, no progress recorded: the module is not done by one function)."""
    if function is not None:
        return _check_function(module, impl, function, out)
    path = _heading(module, impl, "", out)
    if path is None:
        return False
    source = path.read_text()
    todos = open_todos(source)
    summary = todo_summary(todos, track=module.track)
    if todos:
        print(f"TODOs left: {len(todos)}", file=out)
        for todo in todos:
            print(f"  {todo}", file=out)
        print(file=out)
    refused = check_source(source, policy_for(*cases.specs_of(*cases.public(module))))
    if refused:  # say it now, not when the grade comes back as zero
        print(f"{explain(refused)}\nThe tests below still run, but a graded submission like this scores 0.\n", file=out)

    if not device.is_cuda():
        print(_memcheck_line(), file=out)
    with _recording() as recorder:
        results = run_public_tests(module, impl)
    passed = sum(outcome == "passed" for _, outcome, _ in results)
    counted = [r for r in results if r[1] != "skipped"]
    print(f"Public tests: {passed} of {len(counted)} pass{_breakdown(counted)}", file=out)
    pattern = _across_cases(module, results)
    if pattern:
        print(textwrap.fill(pattern, 100, initial_indent="  ", subsequent_indent="    "), file=out)
    shown: list[str] = []  # failure details printed so far
    skip_reasons: list[str] = []
    for name, outcome, message in results:
        mark = {"passed": "PASS", "failed": "FAIL", "skipped": "skip"}[outcome]
        print(f"  {mark} {name}", file=out)
        # The case name heads check_case's message; the TODO list was printed above.
        detail = message.replace(summary, "").strip()
        if name.endswith(f"[{detail.splitlines()[0]}]" if detail else "\0"):
            detail = "\n".join(detail.splitlines()[1:])
        detail = detail.removeprefix("Skipped: ")
        if outcome == "skipped":
            if detail in skip_reasons:
                print("      (skipped for the same reason as above)", file=out)
            else:
                skip_reasons.append(detail)
                print(textwrap.indent(detail, "      "), file=out)
        elif outcome == "failed" and gist(detail) in shown:
            first = detail.splitlines()[0] if detail and gist(detail) != gist(detail.splitlines()[0]) else ""
            print(textwrap.indent(f"{first}\n(the same problem as above)".strip(), "      "), file=out)
        elif outcome == "failed" and len(shown) < 4:
            shown.append(gist(detail))
            print(textwrap.indent(detail, "      "), file=out)
        elif outcome == "failed":
            print(
                "      (details omitted: fix the problems above first, or run pytest on "
                "test_kernel.py to see them all)",
                file=out,
            )

    done = passed == len(counted) and bool(counted)
    done = done and not refused
    if not device.is_cuda():
        _print_traffic(module, impl, out)
    not_compiled = False
    if done and recorder is not None:  # what the CPU ran, held to what a GPU compiles
        not_compiled = not _gpu_compiles(path, recorder, out)
        done = not not_compiled
    # On a GPU the speed bars stand in for the memory-traffic bars that the interpreter checks
    # (skipped there): a correct kernel below the bar is not done, wherever speed is graded.
    slow = False
    if done and device.is_cuda():
        from grader.learn.speed import report_speed

        slow = report_speed(module, impl, out) is False
    if path.resolve() == (module.learner_dir / "kernel.py").resolve():
        progress.record(module, path, passed, len(counted), slow=slow, not_compiled=not_compiled)
    print(file=out)
    if done and slow:
        where = ", and the TODOs left are where the speed comes from" if todos else ""
        print(
            "All public tests pass, but your kernel is below the course's speed bar (above): the "
            f"performance points need it{where}. The README's Performance section shows what the "
            "reference does differently.",
            file=out,
        )
        done = False
    elif done:
        print(f"All public tests pass{' (TODO markers remain: delete them)' if todos else ''}. Well done!", file=out)
        if not device.is_cuda():
            print("Speed is measured on a CUDA GPU only; on this CPU the interpreter checks correctness.", file=out)
        print(_next_steps(module), file=out)
    elif todos:
        # A failing test that names the TODO behind it (the traffic bars do) beats file order.
        first = todo_named(todos, [message for _, outcome, message in results if outcome == "failed"])
        print(
            f"Next: complete {first}, then run the check again. (Done with it already? Delete its "
            f"`# TODO {first.label}` line: the check reads the markers left as the work left.)",
            file=out,
        )
    elif passed == len(counted) and counted and not refused:
        print(
            "Next: every public test passes on this CPU, but a GPU would not compile or launch the kernel "
            "above; fix what the compile check names (the interpreter is more lenient than the compiler).",
            file=out,
        )
    else:
        print("Next: read the first failure above; the README's Hints and Common errors help.", file=out)
    if not done:
        print(
            f"Run it again with `make check M={module.id}`, or with `python kernel.py` in "
            f"{module.learner_dir.relative_to(REPO_ROOT)} once `source .venv/bin/activate` has run "
            "in this terminal.",
            file=out,
        )
    return done


def _heading(module: Module, impl: str | Path, what: str, out) -> Path | None:
    """Print which file is checked on which device; its path, or None (said why) when it is missing."""
    path = kernel_path(module, impl)
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    print(f"{module.id}: {module.title}\nChecking {what}{shown} on {device.describe()}\n", file=out)
    if not path.is_file():
        print(missing_kernel(module, impl, path), file=out)
        return None
    return path


def _check_function(module: Module, impl: str | Path, function: str, out) -> bool:
    """``check`` narrowed to one function's tests, or to one part's (a module of several
    exercises): what a learner runs while working on one of them."""
    known = functions_of(module)
    parts = {part.name: part for part in cases.parts(module) if part.name}
    if function not in known and function not in parts:
        named = f"; its parts are {', '.join(parts)}" if parts else ""
        print(
            f"{module.id} has no function {function!r} with tests of its own; its functions are "
            f"{', '.join(known)}{named}. Run the check with one of them as K, or without K for all.",
            file=out,
        )
        return False
    what = f"part {list(parts).index(function) + 1} ({parts[function].title})" if function in parts else f"{function}()"
    path = _heading(module, impl, f"{what} in ", out)
    if path is None:
        return False
    if not device.is_cuda():
        print(_memcheck_line(), file=out)
    results = run_public_tests(module, impl, function)
    counted = [r for r in results if r[1] != "skipped"]
    passed = sum(outcome == "passed" for _, outcome, _ in counted)
    print(f"Public tests of {what}: {passed} of {len(counted)} pass", file=out)
    pattern = _across_cases(module, results)
    if pattern:
        print(textwrap.fill(pattern, 100, initial_indent="  ", subsequent_indent="    "), file=out)
    shown_details: list[str] = []
    for name, outcome, message in results:
        print(f"  {({'passed': 'PASS', 'failed': 'FAIL', 'skipped': 'skip'})[outcome]} {name}", file=out)
        if outcome == "failed" and gist(message) not in shown_details and len(shown_details) < 4:
            shown_details.append(gist(message))
            print(textwrap.indent(message.strip(), "      "), file=out)
    done = bool(counted) and passed == len(counted)
    mine = set(parts[function].functions) if function in parts else {function}
    others = [name for name in known if name not in mine]
    print(
        f"\n{'All of them pass' if done else 'Not yet'}: run the check without K for the whole module"
        f"{' (' + ', '.join(others) + ')' if others else ''}, its speed and its progress.",
        file=out,
    )
    return done


GPU_CHECK_SWITCH = "GRADER_GPU_COMPILE"  # "0": make check skips compiling for a GPU (GPUCHECK=0)
GPU_CHECK_LIMIT = 8  # specialisations compiled at most: a few seconds each


def _recording():
    """On a CPU, a recorder of the kernels' launches for ``_gpu_compiles`` (else None)."""
    from contextlib import nullcontext

    if device.is_cuda() or os.environ.get(GPU_CHECK_SWITCH, "1") == "0":
        return nullcontext()
    from grader.core.gpu_compile import LaunchRecorder

    return LaunchRecorder()


def _gpu_compiles(path: Path, recorder, out) -> bool:
    """Compile what the tests launched for the course's GPU and say what it refuses; True if
    nothing was refused (or nothing could be compiled here)."""
    from grader.core import gpu_compile

    launches = list(recorder.launches.values())
    if not launches:
        return True
    try:
        compiled = gpu_compile.compile_launches(path, launches, limit=GPU_CHECK_LIMIT)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        print(
            f"\nGPU compile check: not run ({error}). The tests above still count; `make check GPUCHECK=0` "
            "skips this step.",
            file=out,
        )
        return True
    if not compiled.checked:
        return True  # kernels made inside functions: nothing this check can reach
    if not compiled.findings:
        print(
            f"\nGPU compile check: the {compiled.checked} kernel specialisation(s) your tests launched compile for "
            f"{gpu_compile.TARGET_NAME} (`make check GPUCHECK=0` skips this).",
            file=out,
        )
        return True
    print(
        f"\nGPU compile check: {len(compiled.findings)} of the {compiled.checked} kernel specialisation(s) your "
        f"tests launched would not run on {gpu_compile.TARGET_NAME}:",
        file=out,
    )
    by_kernel: dict[str, list] = {}
    for finding in compiled.findings:
        by_kernel.setdefault(finding.launch.name, []).append(finding)
    for findings in by_kernel.values():
        more = f" (and {len(findings) - 1} more setting(s) of this kernel)" if len(findings) > 1 else ""
        print(
            textwrap.fill(
                f"{findings[0].launch.describe()}{more}: {findings[0].problem}",
                100,
                initial_indent="  ",
                subsequent_indent="    ",
            ),
            file=out,
        )
    return False


def _memcheck_line() -> str:
    from grader.core import memcheck

    if memcheck.enabled():
        return (
            "Memory checker: on (out-of-bounds and misaligned accesses, races between programs, "
            "reads of unwritten memory; `make check MEMCHECK=0` turns it off).\n"
        )
    return "Memory checker: off (`make check` without MEMCHECK=0 turns it on).\n"


_CASE_TEST = "test_matches_reference"
_TRAFFIC_TEST = "test_memory_traffic"


def _print_traffic(module: Module, impl: str | Path, out) -> None:
    """The memory-traffic report of each of the module's traffic bars (optimization track)."""
    from grader.core import traffic
    from grader.core.loading import LoadError, load_kernel

    spec, bars = cases.public(module)[0], cases.traffic_bars(module)
    if not bars:
        return
    try:
        kernel = load_kernel(module, impl)
    except LoadError:
        return  # the tests above already said why
    print("\nMemory traffic, as the interpreter saw it (what a GPU would be asked to move):", file=out)
    for bar in bars:
        try:
            measured = traffic.traffic_of(kernel, spec, bar.case, footprints=bar.max_wave_bytes is not None)
            report = traffic.describe(measured, REPO_ROOT, bar.wave)
        except Exception as error:  # a broken kernel: the failing tests above explain it
            report = f"  not measured: {type(error).__name__}: {short_error(error, 1)}"
        print(f"{bar.case.name}\n{report}", file=out)


_LAUNCHER = ", which the launcher around your TODOs may already handle"


_REFUSAL = re.compile(r"^\w+\[(\w+: )?refuses ")


def _breakdown(counted: list[tuple[str, str, str]]) -> str:
    """Say which passing tests are output cases and which check the launcher's input handling,
    so that an untouched stub's few passes (its validation is already written) do not mislead."""
    # Refusal cases ("<api>: refuses ...") check the input handling, like the other tests.
    cases_run = [r for r in counted if r[0].startswith(f"{_CASE_TEST}[") and not _REFUSAL.search(r[0])]
    bars = [r for r in counted if r[0].startswith(f"{_TRAFFIC_TEST}[")]
    others = [r for r in counted if r not in cases_run and r not in bars]
    if not cases_run or not others:
        return ""

    def n_pass(rows):
        return sum(outcome == "passed" for _, outcome, _ in rows)

    traffic = f", {n_pass(bars)} of {len(bars)} memory-traffic bars" if bars else ""
    return (
        f": {n_pass(cases_run)} of {len(cases_run)} output cases{traffic}, and {n_pass(others)} of "
        f"{len(others)} other tests (bad inputs, edge cases)"
        f"{_LAUNCHER if n_pass(cases_run) < len(cases_run) else ''}"
    )


def _across_cases(module: Module, results: list[tuple[str, str, str]]) -> str | None:
    """What the failing output cases share that the passing ones lack (grader.core.diagnosis)."""
    spec, public = cases.public(module)
    by_name = {f"{_CASE_TEST}[{case.name}]": case for case in public}
    verdicts = [
        (by_name[name], outcome == "passed") for name, outcome, _ in results if name in by_name and outcome != "skipped"
    ]
    try:
        return across(spec, verdicts)
    except Exception:  # a summary is a bonus: never let it hide the report above
        return None


def _next_steps(module: Module) -> str:
    """Where to go once a module passes: its notebook, then the next unfinished module."""
    lines = []
    if module.notebook.is_file():
        lines.append(
            f"Next: the study notebook {module.notebook.relative_to(REPO_ROOT)} runs your kernel live (`make lab`)."
        )
    following = progress.next_unfinished()
    if following is not None and following != module:
        lines.append(f"Then: {following.id} ({following.title}): `make check M={following.id}`.")
    return "\n".join(lines)


_INNER = "GRADER_CHECK_INNER"


def is_inner() -> bool:
    """True in the child process that ``check_contained`` starts."""
    return bool(os.environ.get(_INNER))


def check_contained(module: Module, impl: str | Path, memcheck: bool = True, function: str | None = None) -> int:
    """Run ``check`` in a child process so that a crashing kernel still gets an explanation.

    Under the interpreter an unmasked load or store touches memory outside the tensor, which can
    kill Python outright (segmentation fault, heap corruption); the memory checker
    (``grader.core.memcheck``, on unless ``memcheck`` is False or its variable says "0") refuses
    such accesses first. Returns the exit code.
    """
    if os.environ.get(_INNER):
        return 0 if check(module, impl, function=function) else 1
    sys.stdout.flush()
    from grader.core.memcheck import ENV_SWITCH

    switch = os.environ.get(ENV_SWITCH, "1") if memcheck else "0"
    only = ["--function", function] if function else []
    with tempfile.TemporaryDirectory(prefix="check-") as folder:
        journal = Path(folder) / "journal.jsonl"
        child = subprocess.run(
            [sys.executable, "-m", "grader", "check", module.id, "--impl", str(impl), *only],
            env={**os.environ, _INNER: "1", ENV_SWITCH: switch, JOURNAL: str(journal)},
        )
        if crashes.signal_name(child.returncode):  # the same words as the grader's feedback
            print("\n" + crash_report(journal, child.returncode, module.learner_dir / "test_kernel.py"))
            return CRASHED
    return child.returncode


def crash_report(journal: Path, returncode: int, test_file: Path) -> str:
    """What a crashed check still knows: the tests that finished, and the one that was running."""
    try:
        entries = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        entries = []
    finished = [e for e in entries if "outcome" in e]
    started = [e["started"] for e in entries if "started" in e]
    done = {e["name"] for e in finished}
    running = next((name for name in reversed(started) if name not in done), None)
    lines = []
    if finished:
        counted = [e for e in finished if e["outcome"] != "skipped"]
        passed = sum(e["outcome"] == "passed" for e in counted)
        lines.append(f"Before the crash, {passed} of {len(counted)} finished public tests passed:")
        shown = 0
        for entry in finished:
            mark = {"passed": "PASS", "failed": "FAIL", "skipped": "skip"}[entry["outcome"]]
            lines.append(f"  {mark} {entry['name']}")
            if entry["outcome"] == "failed" and entry["message"] and shown < 3:
                shown += 1
                lines.append(textwrap.indent(entry["message"].strip(), "      "))
    where = f" while running {running}" if running else ""
    module = "/".join(test_file.parent.parts[-2:])  # tracks/<track>/<slug>/test_kernel.py
    lines.append(crashes.check_message(returncode, module).replace(" while the tests ran", where, 1))
    if running:
        shown = test_file.relative_to(REPO_ROOT) if test_file.is_relative_to(REPO_ROOT) else test_file
        lines.append(f'To run that test alone: pytest "{shown}::{running}"')
    return "\n".join(lines)


# check_contained's exit code when the checking process crashed (a failed check is 1).
CRASHED = 3


def self_check(file: str) -> None:
    """``python kernel.py``: check this very file against its module's public tests."""
    path = Path(file).resolve()
    sys.exit(check_contained(find_module(str(path.parent)), path))
