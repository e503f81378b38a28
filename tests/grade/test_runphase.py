"""The grader's run phase end to end: every example submission of grader/examples/ is graded in
sandboxed children, and each row of GRADER.md's threat model is checked against its record.

Each defence is tested on its own. ``graded`` runs the examples with the static policy gate
switched off, so that the layers behind it (the sandbox, inputs handed over one call at a time,
the parent's checks and file handling) must hold by themselves; test_runphase_gated.py runs every
example through the whole grader, as ``make grade`` does. Limits are generous, so that no outcome
of a correct submission depends on how busy the machine is. Time limits, budgets and interruptions
are tested in test_runphase_limits.py, crashes that surface late in test_runphase_crashes.py, the
GPU's own rows in test_runphase_gpu.py (files of their own, so that their gradings run beside
these). Rows whose outcome depends on a
protection the platform may not offer (a private file system view, a network namespace, a process
limit) are skipped with the reason where the sandbox reports that protection missing.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.authoring import example_submissions
from grader.core import cases, device
from grader.core.catalog import REPO_ROOT, find_module
from grader.core.checks import build_inputs
from grader.grade import judging, profile, runphase
from grader.sandbox.isolation import ChildEnded, GiB, Limits, Sandbox, offers

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.heavy,
]

VECTOR_ADD = find_module("missing-elements/01-vector-add")
# Limits count the child's CPU time, which a loaded machine hardly changes: far beyond what a
# correct call needs (under 0.2 CPU-seconds for vector add).
LIMITS = (
    Limits(case_seconds=60, startup_seconds=120)
    if device.is_cuda()
    else Limits(case_seconds=30, startup_seconds=120, memory_bytes=1 * GiB)
)
MARK = "written-by-writes-files"
# Each example's outcome behind the gate is data beside it (its expected.json, behind_gate): this file
# grades those of vector add whose behind_gate names it.
BEHIND = {
    name: found.behind_gate
    for name, found in example_submissions.expected_all().items()
    if found.module in (None, VECTOR_ADD.id)
    and found.behind_gate is not None
    and found.behind_gate.graded_by == example_submissions.BEHIND_TEST
}


def _expected_cases():
    spec, public = cases.public(VECTOR_ADD)
    cuda = device.is_cuda()
    return cases.for_mode(public, cuda), cases.for_mode(cases.hidden(VECTOR_ADD), cuda)


def _set(path: Path, name: str, value) -> None:
    """Point an example's EXTRA_TARGETS / PORT at this test's real folders and port."""
    text = path.read_text()
    new = re.sub(rf"^{name} = .*$", f"{name} = {value!r}", text, count=1, flags=re.MULTILINE)
    assert new != text, f"{path} has no `{name} = ...` line"
    path.write_text(new)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@dataclass
class Graded:
    summary: runphase.RunSummary
    root: Path
    results: Path
    protections: dict
    connections: list
    submissions_before: dict
    examples: list[str]

    def record(self, student: str) -> dict:
        record = self.summary.record_for(student, VECTOR_ADD.id)
        assert record is not None, f"{student} was not graded"
        return record

    def log(self, student: str) -> str:
        self.record(student)
        return self.summary.log_for(student, VECTOR_ADD.id)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, platform_protections) -> Graded:
    root = tmp_path_factory.mktemp("submissions")
    results = tmp_path_factory.mktemp("results")
    names = example_submissions.assemble(root, modules=[VECTOR_ADD])
    # Never start a fork bomb where processes cannot be limited, nor let a file-reading or
    # file-writing example loose where the child would see the real file system.
    unsafe = [] if offers(platform_protections, "processes") else ["fork-bomb"]
    if not offers(platform_protections, "view"):
        unsafe += ["reads-files", "writes-files"]
    # And only the examples whose expected outcome behind the gate this file grades (their expected.json).
    elsewhere = [name for name in names if name not in BEHIND]
    for name in [*unsafe, *elsewhere]:
        if (root / name).exists():
            shutil.rmtree(root / name)
    # Only the examples of vector add: the others are graded by tests of their modules.
    names = [n for n in names if any(p.parent.name.endswith(VECTOR_ADD.slug) for p in (root / n).rglob("kernel.py"))]
    kernel = Path(VECTOR_ADD.track) / VECTOR_ADD.slug / "kernel.py"
    targets = [str(results), str(root), str(REPO_ROOT), str(VECTOR_ADD.solution_dir)]
    for name in ("reads-files", "writes-files"):
        if name in names:
            _set(root / name / kernel, "EXTRA_TARGETS", targets)

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    _set(root / "network" / kernel, "PORT", listener.getsockname()[1])
    before = _snapshot(root)

    # The default workers, as a class is graded: min(4, CPUs), or 4 per GPU.
    options = runphase.Options(
        limits=LIMITS, policy_gate=False, allow_unsafe=not offers(platform_protections, "processes")
    )
    summary = runphase.run(root, results, [VECTOR_ADD], options, progress=False)
    connections = []
    try:
        while True:
            connections.append(listener.accept())
    except BlockingIOError:
        pass
    listener.close()
    return Graded(summary, root, results, summary.protections, connections, before, names)


def _require(graded: Graded, what: str, example: str | None = None) -> None:
    if not offers(graded.protections, what) or (example and example not in graded.examples):
        pytest.skip(f"this platform does not give the child that protection ({what}): {json.dumps(graded.protections)}")


# --- normal submissions --------------------------------------------------------------------


def test_every_example_is_graded_without_errors(graded):
    assert not graded.summary.errors, "\n".join(str(o.error) for o in graded.summary.errors)
    assert {o.submissions[0].student for o in graded.summary.outcomes} == set(graded.examples)


def test_complete_passes_every_case(graded):
    public, hidden = _expected_cases()
    record = graded.record("complete")
    assert record["totals"]["public"] == {"passed": len(public), "total": len(public)}
    assert record["totals"]["hidden"] == {"passed": len(hidden), "total": len(hidden)}
    assert record["summary"] == f"All {len(public) + len(hidden)} cases pass."
    if device.is_cuda():  # timed against the reference; see also the cuda tests below
        assert record["performance"]["graded"] and record["performance"]["ratio"] > 0
    else:
        assert record["performance"] == {"graded": False, "reason": "not graded: needs a CUDA GPU"}


def test_stub_in_nbgrader_layout_scores_zero_and_names_the_todos(graded):
    [stub] = [o for o in graded.summary.outcomes if o.submissions[0].student == "stub"]
    assert stub.submissions[0].path.parent.name == f"{VECTOR_ADD.track}-{VECTOR_ADD.slug}"
    record = graded.record("stub")
    assert record["totals"]["passed"] == 0
    assert "TODO(s) still open in kernel.py" in record["summary"]
    assert record["todos"][0].startswith("TODO 1 (line ")
    for row in record["cases"]:
        assert "TODO" in row["message"], row


def test_partial_passes_exactly_the_cases_a_rounded_down_grid_covers(graded):
    public, hidden = _expected_cases()
    spec, _ = cases.public(VECTOR_ADD)

    def covered(case):  # the grid n // 1024 covers everything only when n is a multiple of 1024
        args, _kwargs = build_inputs(spec, case, on=device.torch_device())
        return args[0].numel() % 1024 == 0

    expected = {c.name for c in public if covered(c)} | {
        f"hidden case {i}" for i, c in enumerate(hidden, start=1) if covered(c)
    }
    record = graded.record("partial")
    assert {row["name"] for row in record["cases"] if row["passed"]} == expected
    assert expected and record["totals"]["passed"] < record["totals"]["total"]
    failed = next(row for row in record["cases"] if not row["passed"] and row["visibility"] == "public")
    assert "nothing was written" in failed["message"]  # size 1: no element at all


@pytest.mark.parametrize("example", sorted(BEHIND))
def test_each_example_is_graded_as_its_expected_json_says(graded, example):
    """Not refused (the gate is off); marks, reason and integrity finding as expected.json has them."""
    if BEHIND[example].interpreter_only and device.is_cuda():
        pytest.skip(f"under the interpreter only: {BEHIND[example].interpreter_only}")
    if BEHIND[example].needs:
        _require(graded, BEHIND[example].needs, example)
    record = graded.record(example)
    assert not BEHIND[example].problems(record), (record["summary"], record["load_error"], record["cases"][:2])


# --- threat model rows -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "example, says",
    [
        ("syntax-error", "syntax error at line"),
        ("raises-at-import", "raised AttributeError while being imported"),
        ("exits-at-import", "raised SystemExit while being imported"),
        ("os-exit-at-import", "stopped the grading process while being imported"),
    ],
)
def test_a_file_that_cannot_be_imported_scores_zero_with_a_clear_message(graded, example, says):
    record = graded.record(example)
    assert record["totals"]["passed"] == 0
    assert says in record["load_error"] and says in record["summary"]
    assert all(row["message"].startswith("Not run: kernel.py could not be imported") for row in record["cases"])


def test_a_fork_bomb_is_contained_and_reported(graded):
    _require(graded, "processes", "fork-bomb")
    record = graded.record("fork-bomb")
    assert record["totals"]["passed"] == 0
    assert "BlockingIOError" in record["load_error"] and "processes and threads" in record["load_error"]
    match = re.match(r"uid (\d+) \(dedicated", record["protections"]["user"])
    if match:  # nothing of the sandbox's uid is left running (outside a live sandbox)
        assert not _orphans(_processes_of(int(match.group(1))))


def _orphans(pids: list[int]) -> list[int]:
    """Those of ``pids`` no live sandbox started. Another grader on the machine (a second test
    run) may hold the same uid by now, for children of its own: those descend from its boot step."""

    def parent(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return 0

    def in_a_sandbox(pid: int) -> bool:
        while pid > 1:
            try:
                if b"--boot" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                return False
            pid = parent(pid)
        return False

    return [pid for pid in pids if not in_a_sandbox(pid)]


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as status:
                uids = next(line for line in status if line.startswith("Uid:")).split()[1:]
        except (OSError, StopIteration):
            continue
        if str(uid) in uids:
            found.append(int(entry))
    return found


def test_a_memory_hog_is_contained_and_reported(graded):
    record = graded.record("memory-hog")
    assert record["totals"]["passed"] == 0
    assert "MemoryError" in record["load_error"] and "GiB of host memory" in record["load_error"]


def test_computing_with_pytorch_is_detected(graded):
    record = graded.record("torch-compute")
    assert record["totals"]["passed"] == 0
    # On a GPU the kernel trace speaks first (PyTorch's own CUDA kernel ran); on a CPU the operator log.
    evidence = "not your Triton kernels (void at::native::" if device.is_cuda() else "computed with PyTorch (aten.add)"
    for row in record["cases"]:
        if row["visibility"] == "public":
            assert evidence in row["message"], row
        else:  # a hidden case says only that it failed; the module's integrity finding says why
            assert row["message"] == judging.HIDDEN_FAILED.format(api="add"), row
    assert "computed with PyTorch" in record["integrity"]["message"]


def test_patching_the_checks_and_timers_has_no_effect(graded):
    record = graded.record("patches-checks")
    assert record["totals"]["passed"] == 0
    assert "nothing was written" in record["cases"][0]["message"]


def test_cached_outputs_are_caught_by_fresh_inputs(graded):
    record = graded.record("caches-outputs")
    first, *rest = record["cases"]
    assert not first["passed"] and "reuses an earlier result" in first["message"]
    assert all(row["passed"] for row in rest)  # every other case has a shape of its own


def test_returning_an_input_is_caught(graded):
    record = graded.record("returns-input")
    assert record["totals"]["passed"] == 0
    contiguous = [row for row in record["cases"] if row["visibility"] == "public" and "strided" not in row["name"]]
    assert all("returned one of its inputs" in row["message"] for row in contiguous)


def test_mutating_an_input_is_caught(graded):
    record = graded.record("mutates-input")
    rows = [row for row in record["cases"] if "strided" not in row["name"]]  # x.contiguous() copies those
    assert rows and not any(row["passed"] for row in rows if row["visibility"] == "public")
    assert all("changed its input #1" in row["message"] for row in rows if row["visibility"] == "public")


def test_reading_around_finds_nothing(graded):
    _require(graded, "view", "reads-files")
    record = graded.record("reads-files")
    # The example raises whatever it finds; every case passing means it found nothing.
    assert record["totals"]["passed"] == record["totals"]["total"], record["cases"][0]["message"]
    assert "reads-files found: nothing" in graded.log("reads-files")


def test_writing_around_changes_nothing(graded):
    _require(graded, "view", "writes-files")
    record = graded.record("writes-files")
    assert record["totals"]["passed"] == record["totals"]["total"]
    stray = [
        p
        for folder in (graded.results, graded.root, REPO_ROOT, Path("/tmp"), Path("/var/tmp"))
        for p in folder.glob(f"**/{MARK}" if folder != Path("/tmp") else MARK)
    ]
    for path in stray:  # never leave them behind, even when the test fails
        path.unlink()
    assert not stray
    assert _snapshot(graded.root) == graded.submissions_before


def test_the_results_folder_holds_only_what_the_parent_wrote(graded):
    names = {p.relative_to(graded.results).parts[0] for p in graded.results.iterdir()}
    assert names == {"records", "logs", "students.json", "profile.jsonl", "secret"}
    assert (graded.results / "secret").stat().st_mode & 0o077 == 0  # the course's secret: the grader's alone
    records = list((graded.results / "records").rglob("*"))
    for path in (p for p in records if p.is_file()):
        record = json.loads(path.read_text())  # complete JSON, not '{"passed": true}'
        assert path.name.startswith(record["submission_sha256"])
    index = json.loads((graded.results / "students.json").read_text())
    assert index["complete"][VECTOR_ADD.id]["passed"] == index["complete"][VECTOR_ADD.id]["total"]


def test_output_on_stderr_and_warnings_do_not_count(graded):
    record = graded.record("noisy")
    assert record["totals"]["passed"] == record["totals"]["total"]
    assert "noisy: something on stderr" in graded.log("noisy")  # kept for instructors only


def test_forged_result_lines_are_ignored(graded):
    record = graded.record("forges-result")
    assert record["totals"]["passed"] == 0
    assert "on the grader's channel ignored (forged or garbled)" in graded.log("forges-result")


def test_network_connections_fail(graded):
    _require(graded, "network")
    record = graded.record("network")
    assert record["totals"]["passed"] == record["totals"]["total"]
    assert graded.connections == []
    assert "network: no connection" in graded.log("network")


def test_hidden_cases_show_neither_their_parameters_nor_their_labels(graded):
    public, hidden = _expected_cases()
    public_text = " ".join(c.name for c in public)  # labels such as "tail" are public too
    secrets = {text for c in hidden for text in (c.label, c.name) if text and text not in public_text}
    assert secrets
    for outcome in graded.summary.outcomes:
        text = json.dumps(outcome.record)
        assert not [s for s in secrets if s and s in text], outcome.submissions[0].student
        for row in outcome.record["cases"]:
            if row["visibility"] == "hidden":
                assert re.fullmatch(r"hidden case \d+", row["name"])
                # The note on open TODOs counts them in the file (the same for every case): no case's fact.
                shown = re.sub(r" \(\d+ TODO\(s\) are still open in .*\)$", "", row["message"])
                assert not re.search(r"\d", shown), row["message"]


# --- the parent behind the gate: files, memory and hidden inputs -----------------------------


def test_a_deep_folder_chain_neither_crashes_nor_stops_the_run(graded):
    record = graded.record("deep-folders")  # graded like any other: cleanup went on
    assert record["totals"]["total"] > 0
    assert graded.record("complete")["totals"]["passed"] == graded.record("complete")["totals"]["total"]
    # Nothing left behind in this process's sandboxes (other graders may share /tmp right now).
    ours = [
        folder
        for folder in Path(tempfile.gettempdir()).glob("grader-sandbox-*")
        if (folder / "owner").is_file() and (folder / "owner").read_text().split()[:1] == [str(os.getpid())]
    ]
    assert not [child for folder in ours for child in folder.glob("child-*")]


def test_a_fifo_in_place_of_an_output_is_refused_without_blocking(graded):
    record = graded.record("fifo-outputs")
    failed = [row for row in record["cases"] if not row["passed"]]
    assert failed and record["totals"]["passed"] < record["totals"]["total"]
    public = [row for row in failed if row["visibility"] == "public"]
    assert any("FIFO" in row["message"] or "could not read" in row["message"] for row in public), public


def test_a_small_file_declaring_gigabytes_allocates_nothing(graded):
    record = graded.record("output-bomb")
    assert record["totals"]["passed"] < record["totals"]["total"]
    assert any(row["kind"] == "unreadable" for row in record["cases"]), record["cases"]
    if not device.is_cuda():
        # The parent (this process) never held the 2 GB the files declare. (On a GPU it holds
        # the large cases' own tensors, gigabytes of them, so its peak says nothing there.)
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2 * 1024 * 1024, "KiB"


def test_nothing_is_computed_at_import_time_because_no_input_exists_yet(graded):
    assert graded.record("computes-at-import")["totals"]["passed"] == 0


def test_a_public_error_cannot_carry_the_hidden_cases_inputs(graded, hidden_numbers_shown):
    record = graded.record("leaks-hidden-cases")
    assert not hidden_numbers_shown(record)
    assert any(not row["passed"] for row in record["cases"] if row["visibility"] == "public")


def test_records_say_which_protections_were_active(graded):
    protections = graded.record("complete")["protections"]
    for key in ("network", "filesystem", "processes", "user", "limits"):
        assert key in protections
    assert protections["limits"]["cpu_seconds"] > 0


def test_children_of_one_grading_share_a_folder_no_other_child_sees(tmp_path, platform_protections):
    """Triton's cache on a GPU: what one child of a grading writes there the next one reads, and
    a child of another grading (another slot) neither sees the folder nor can enter it."""
    if not offers(platform_protections, "view"):
        pytest.skip("no private file system view on this platform")
    write = "import os; open(os.environ['TRITON_CACHE_DIR'] + '/kernel.bin', 'w').write('compiled')"
    read = "import os; print('cache holds', open(os.environ['TRITON_CACHE_DIR'] + '/kernel.bin').read())"
    with Sandbox(workers=2, allow_unsafe=True) as sandbox:

        def run(slot, script, shared):
            child = sandbox.start(slot, {}, ["-S", "-c", script], {}, 1, "token", shared=shared)
            try:
                sandbox.wait_sandbox(child)
                with pytest.raises(ChildEnded):
                    child.next_event(time.monotonic() + 60)
                return child.log_tail()
            finally:
                child.close()

        with sandbox.slot() as mine, sandbox.slot() as other:
            shared = sandbox.new_shared(mine)
            run(mine, write, shared)
            assert "cache holds compiled" in run(mine, read, shared)
            peek = f"import os; print('other sees', os.path.exists({str(shared)!r}))"
            assert "other sees False" in run(other, peek, None)
            sandbox.remove_shared(shared)
            assert not shared.exists()


def test_the_profile_accounts_for_each_graded_submission(graded, platform_protections):
    """--profile: every grading of the run has a profile whose steps add up to its total (to more
    where its public and hidden children ran side by side, as on a GPU), one line each in
    profile.jsonl, and the table names each module."""
    profiled = [o for o in graded.summary.outcomes if o.profile is not None]
    assert len(profiled) == len(graded.summary.outcomes)
    overlapping = device.is_cuda() and offers(platform_protections, "pid_namespace")
    for outcome in profiled:
        seconds = outcome.profile.seconds
        assert outcome.profile.total > 0
        if outcome.submissions[0].student == "complete":
            assert seconds["cases"] > 0 and seconds["imports"] > 0 and seconds["learner import"] > 0
            assert {"planning", "closing", "record"} <= seconds.keys()  # the grader's own steps, named
        counted = sum(v for k, v in seconds.items() if k not in profile.INSIDE)
        if overlapping:
            assert counted >= outcome.profile.total - 1e-3
        else:
            assert counted == pytest.approx(outcome.profile.total, rel=1e-6, abs=1e-3)
    lines = [json.loads(line) for line in (graded.results / "profile.jsonl").read_text().splitlines()]
    assert len(lines) == len(profiled) and {line["module"] for line in lines} == {VECTOR_ADD.id}
    table = graded.summary.profile_table()
    assert VECTOR_ADD.id in table and "learner import" in table


# --- idempotence, interruption, refusals ----------------------------------------------------


def test_a_second_run_reuses_every_record_and_starts_no_process(graded, monkeypatch):
    def no_sandbox(*args, **kwargs):
        raise AssertionError("a re-run must not start a sandbox")

    monkeypatch.setattr(runphase, "make_sandbox", no_sandbox)
    before = _snapshot(graded.results / "records")
    summary = runphase.run(graded.root, graded.results, [VECTOR_ADD], runphase.Options(limits=LIMITS), progress=False)
    assert summary.children_started == 0
    assert all(o.reused for o in summary.outcomes)
    assert _snapshot(graded.results / "records") == before


def test_the_cli_reports_reused_records(graded):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "run",
            str(graded.root),
            "--results",
            str(graded.results),
            "--module",
            VECTOR_ADD.id,
            "--quiet",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(graded.examples)} submission(s) graded" in result.stdout
    assert f"({len(graded.examples)} reused, 0 child process(es) started)" in result.stdout


def test_a_linked_kernel_file_is_refused_without_running_anything(tmp_path):
    folder = tmp_path / "submissions" / "mallory" / VECTOR_ADD.track / VECTOR_ADD.slug
    folder.mkdir(parents=True)
    (folder / "kernel.py").symlink_to(VECTOR_ADD.solution_dir / "kernel.py")
    summary = runphase.run(tmp_path / "submissions", tmp_path / "results", [VECTOR_ADD], progress=False)
    [outcome] = summary.outcomes
    assert outcome.record is None and "regular file" in outcome.error
    assert summary.children_started == 0


@contextmanager
def _script_child(script: str, **sandbox_options):
    """(A sandboxed child running ``python -S -c script``, the protections it got); closed afterwards."""
    with Sandbox(allow_unsafe=True, **sandbox_options) as sandbox, sandbox.slot() as slot:
        child = sandbox.start(slot, {}, ["-S", "-c", script], {}, 1, "token")
        try:
            yield child, sandbox.wait_sandbox(child)
        finally:
            child.close()


def test_a_secret_inside_an_exposed_folder_is_covered(tmp_path, platform_protections):
    if not offers(platform_protections, "view"):
        pytest.skip("no private file system view on this platform")
    (tmp_path / "course" / "solutions").mkdir(parents=True)
    (tmp_path / "course" / "solutions" / "hidden.py").write_text("SECRET = 1\n")
    (tmp_path / "course" / "public.txt").write_text("public\n")
    (tmp_path / "course").chmod(0o755)  # like a course installed under /opt
    script = (
        f"import os; course = {str(tmp_path / 'course')!r}; "
        "print(sorted(os.listdir(course)), os.listdir(course + '/solutions'))"
    )
    hidden = [tmp_path / "course" / "solutions"]
    with _script_child(script, expose=[tmp_path / "course"], hide=hidden) as (child, protections):
        with pytest.raises(ChildEnded):
            child.next_event(time.monotonic() + 30)
        output = child.log_tail()
    assert "['public.txt', 'solutions'] []" in output, output
    assert str(tmp_path / "course" / "solutions") in protections["hidden_paths"]


def test_a_checkout_that_a_system_folder_shows_is_covered_but_for_what_the_child_needs(tmp_path, platform_protections):
    """A course installed under /opt: /opt is shown whole, so the checkout is covered, and its venv
    (which the child's Python needs) is shown on top of the cover, read-only."""
    if not offers(platform_protections, "view"):
        pytest.skip("no private file system view on this platform")
    system, checkout = tmp_path / "opt", tmp_path / "opt" / "course"
    (checkout / ".venv").mkdir(parents=True)
    (checkout / ".venv" / "marker.txt").write_text("venv\n")
    (checkout / "tracks").mkdir()
    (checkout / "tracks" / "kernel.py").write_text("someone's work\n")
    (system / "other-tool").mkdir()
    for folder in (tmp_path, system, checkout, checkout / ".venv", checkout / "tracks", system / "other-tool"):
        folder.chmod(0o755)
    script = (
        f"import os; c = {str(checkout)!r}; "
        "print('listing', sorted(os.listdir(c)), sorted(os.listdir(os.path.dirname(c))), "
        "open(c + '/.venv/marker.txt').read().strip()); "
        "open(c + '/.venv/new.txt', 'w')"
    )
    options = {"expose": [system, checkout / ".venv"], "hide": [checkout]}
    with _script_child(script, **options) as (child, protections):
        with pytest.raises(ChildEnded):
            child.next_event(time.monotonic() + 30)
        output = child.log_tail()
    assert "listing ['.venv'] ['course', 'other-tool'] venv" in output, output
    assert "Read-only file system" in output or "Permission denied" in output, output
    assert str(checkout) in protections["hidden_paths"]
    assert not (checkout / ".venv" / "new.txt").exists()


def test_the_sandbox_hides_its_own_checkout():
    with Sandbox(allow_unsafe=True) as sandbox:
        assert str(REPO_ROOT.resolve()) in sandbox.hide


def test_system_calls_no_exercise_needs_are_refused(platform_protections):
    if not platform_protections.get("syscall_filter", "").endswith("...)"):
        pytest.skip(f"no system-call filter on this platform: {platform_protections.get('syscall_filter')}")
    script = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        "print('unshare', libc.unshare(0x40000000), ctypes.get_errno()); "
        "print('child', os.fork() == 0 or os.wait()[1])"
    )
    with _script_child(script) as (child, _):
        with pytest.raises(ChildEnded):
            child.next_event(time.monotonic() + 30)
        output = child.log_tail()
    assert f"unshare -1 {errno.EPERM}" in output, output  # a new network namespace: refused
    assert "child True" in output and "child 0" in output  # ordinary calls still work


def test_hidden_messages_hold_nothing_the_submission_chose():
    # How a hidden case failed is the submission's choice (what it raised, which elements it got
    # wrong, how its process ended): every failure reads the same, with nothing of the verdict.
    failures = [
        judging.Verdict(
            False,
            "wrong",
            "output: 5 of 1029 elements are wrong (0.5%). First at index (1024,): got "
            "nan, expected 0.5.\n5 element(s) are NaN.\nPattern: only the last 5 element(s) are wrong.",
        ),
        judging.Verdict(False, "error", "add() raised ShapeIs_2049: (2049,)"),
        judging.Verdict(False, "error", "add() raised KeyError: 'x'"),
        judging.Verdict(False, "timeout", "add() did not return within 30 s of computing."),
        judging.Verdict(
            False,
            "crash",
            "The process running add() was ended by SIGSEGV during this case.",
            crash=ChildEnded("was ended by SIGSEGV", -11),
        ),
        judging.Verdict(False, "unreadable", "The grader could not read what add() returned (x is 4194756 bytes)."),
        judging.Verdict(False, "torch", "add() computed with PyTorch (aten.add)."),
    ]
    messages = {judging.hidden_message(verdict, "add") for verdict in failures}
    assert messages == {judging.HIDDEN_FAILED.format(api="add")}
    (message,) = messages
    assert "make check" in message and not re.search(r"\d", message)
    # The grader's own reasons are said: the time budget, a refused file.
    budget = judging.Verdict(False, "not_run", "Not run: the module's time budget (60 s of CPU time) was spent.")
    assert (
        judging.hidden_message(budget, "add")
        == "Hidden case not run: the module's time budget (60 s of CPU time) was spent."
    )
    refused = judging.Verdict(False, "policy", "Not run: the grader refused kernel.py before running it.")
    assert judging.hidden_message(refused, "add").startswith("Hidden case not run: the grader refused kernel.py")


@pytest.mark.parametrize(
    "example, violation",
    [
        ("torch-compute", "torch"),
        ("caches-outputs", "cache"),
        ("returns-input", "alias"),
        ("mutates-input", "mutation"),
    ],
)
def test_cheating_withholds_every_point_of_the_module_with_a_named_reason(graded, example, violation):
    record = graded.record(example)
    assert record["integrity"]["violation"] == violation
    assert record["totals"]["score"] == 0.0 and record["performance"].get("credit", 0.0) == 0.0
    assert record["summary"].startswith("No points for this module: ")


def test_honest_mistakes_are_not_integrity_violations(graded):
    for example in ("complete", "partial", "stub", "patches-checks"):
        assert graded.record(example)["integrity"] is None, example


def test_the_graders_verdict_names_overflow_on_large_inputs_as_make_check_does():
    # judge() gets the case's inputs to the diagnosis, so the feedback tells overflow from
    # elements that were never written, like make check does.
    import torch

    module = find_module("missing-elements/03-softmax")
    spec, public = cases.public(module)
    case = next(c for c in public if c.label == "large values" and c.dtype == torch.float32)
    args, kwargs = build_inputs(spec, case, on=device.torch_device())
    out = torch.softmax(args[0].float(), dim=-1).to(case.dtype)
    out[0, :3] = float("nan")  # what exp() overflowing to inf, then inf / inf, leaves
    saved = {"outputs": [out], "args": args, "kwargs": kwargs}
    verdict = judging.judge(
        spec, case, args, kwargs, {"returned": ["output"]}, lambda refs: saved, device.torch_device()
    )
    assert not verdict.passed and "overflowed" in verdict.message, verdict.message
    assert "never written" not in verdict.message


def test_a_paused_child_and_what_it_started_run_nothing_until_resumed():
    # How a timed child waits for the GPU: frozen, so that nothing of it runs during another's timing.
    script = "import os, time\nif os.fork() == 0:\n    while True: pass\nwhile True: pass\n"
    with _script_child(script) as (child, _):
        deadline = time.monotonic() + 30
        while child.cpu_seconds() < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        child.pause()
        time.sleep(0.2)  # signals are delivered, running slices end
        frozen = child.cpu_seconds()
        time.sleep(1.0)
        assert child.cpu_seconds() - frozen < 0.05
        child.resume()
        # Both processes run again: wait for their CPU time to grow, however busy the machine is.
        deadline = time.monotonic() + 120
        while child.cpu_seconds() - frozen <= 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.cpu_seconds() - frozen > 0.5


def test_a_childs_cpu_time_counts_processes_it_starts_later_without_listing_proc_at_every_read(monkeypatch):
    from grader.sandbox import process

    listed = []
    descendants = process._descendants
    monkeypatch.setattr(process, "_descendants", lambda pid: listed.append(pid) or descendants(pid))
    # The parent sleeps; only a process it starts a moment later uses the CPU.
    script = "import os, time\ntime.sleep(0.5)\nif os.fork() == 0:\n    while True: pass\ntime.sleep(600)\n"
    with _script_child(script) as (child, _):
        child.cpu_seconds()
        reads = len(listed)
        for _ in range(50):
            child.cpu_seconds()
        assert len(listed) == reads  # within TREE_SECONDS the list is reused
        deadline = time.monotonic() + 120
        while child.cpu_seconds() < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.cpu_seconds() >= 0.5  # the later process's time, from a later listing


def test_the_modules_that_took_longest_before_are_graded_first(tmp_path):
    from grader.grade import runphase
    from grader.grade.profile import measured_seconds

    lines = [
        '{"module": "a", "device": "this GPU", "total": 10}',
        '{"module": "a", "device": "this GPU", "total": 30}',
        '{"module": "b", "device": "this GPU", "total": 50}',
        '{"module": "b", "device": "another", "total": 1}',
        '{"module": "c", "device": "this GPU", "tot',
        "not json at all",
    ]
    (tmp_path / "profile.jsonl").write_text("\n".join(lines) + "\n")
    assert measured_seconds(tmp_path, "this GPU") == {"a": 20.0, "b": 50.0}
    assert measured_seconds(tmp_path / "nowhere", "this GPU") == {}
    # Without measurements: later modules of the course first.
    first, last = runphase.available_modules()[0].id, runphase.available_modules()[-1].id
    jobs = [(first, "1"), (last, "2")]
    assert sorted(jobs, key=runphase._longest_first(tmp_path / "nowhere"))[0][0] == last


def test_the_profile_lists_a_run_that_met_both_a_gpu_lease_and_the_no_gpu_lease(tmp_path):
    from grader.grade import leases

    # A process that has taken GPU 0's lease (a worker checking its device) and graded on the
    # CPU too holds leases under 0 and None, which do not sort against each other.
    leases.for_gpu(0)
    leases.for_gpu(None)
    (tmp_path / "none").mkdir()
    summary = runphase.run(tmp_path / "none", tmp_path / "results", [], progress=False)
    assert list(summary.gpu_usage) == [0, None]
    summary.gpu_usage = {None: leases.Usage(timings=1), 0: leases.Usage(timings=2)}
    assert "GPU 0" in summary.profile_table()
