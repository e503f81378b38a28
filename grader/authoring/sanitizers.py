"""The memory-bug corpus under the GPU's own tools, side by side with the course's checker.

``python -m grader.authoring.memory_corpus --sanitizers OUT_DIR`` runs every entry natively, one
process per entry and tool, under compute-sanitizer's memcheck, racecheck and initcheck, and under
Triton's GSan where the installed Triton has it (3.9 and later); and once more under the
interpreter with the course's memory checker (``GRADER_DEVICE=cpu``), on the same machine. The
raw output of every run is kept as ``OUT_DIR/<entry>/<tool>.txt``, the parsed results go to
``OUT_DIR/sanitizers.json``, and a table and its totals are printed.

Reading the tools' output (``parse_sanitizer``, ``parse_gsan``), the table and the totals are pure
functions of text and records, so that they are tested on a CPU with captured output; only
``run_process`` and ``run`` start processes. This module knows the corpus only as the records it
is handed (a name, a class, a planted line, ``gpu_tools``) and as a command line, so that
``memory_corpus`` imports it and not the reverse.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.authoring.text_table import aligned
from grader.core.catalog import REPO_ROOT
from grader.core.sanitizer_report import gsan_available, gsan_command, parse_report, reported_errors, reported_warnings
from grader.core.sanitizer_report import parse_gsan as gsan_findings

SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck")
TOOLS = (*SANITIZER_TOOLS, "gsan")
HEADINGS = {"memcheck": "memcheck", "racecheck": "racecheck", "initcheck": "initcheck", "gsan": "GSan"}
CORPUS_MODULE = "grader.authoring.memory_corpus"
CORPUS_FILE = "memory_corpus.py"  # the file a tool names when it finds the planted line
ERROR_EXIT = 99  # compute-sanitizer's exit status when it reported an error (--error-exitcode)


@dataclass
class Report:
    """What one tool said about one entry. ``errors`` is None when the run gave no count (it timed
    out, failed, or did not run: ``note`` says which)."""

    errors: int | None = None
    kind: str = ""  # the first error in the corpus's words: out-of-bounds, misaligned, race, ...
    description: str = ""  # the first error as the tool words it
    file: str = ""  # the source file the first error names (its base name), "" if it names none
    line: int = 0
    warnings: int = 0  # racecheck's hazards that it reports as warnings, not errors
    seconds: float = 0.0
    timed_out: bool = False
    returncode: int | None = None
    note: str = ""

    @property
    def found(self) -> bool:
        return bool(self.errors)

    @property
    def planted_line_named(self) -> int:
        """The line of the corpus's file the first error names; 0 if it names another file or none."""
        return self.line if self.file == CORPUS_FILE else 0


@dataclass
class Verdict:
    """The course checker's verdict on one entry, from ``memory_corpus --json`` under the interpreter."""

    verdict: str = ""  # as the checker's own table words it: "yes (race)", "MISSED", "clean", ...
    caught: bool = False
    false_alarm: bool = False
    line: int = 0
    seconds: float = 0.0
    timed_out: bool = False


@dataclass
class Entry:
    name: str
    kind: str  # the class planted; "" for a clean control
    planted: int
    gpu_tools: tuple[str, ...]
    checker: Verdict = field(default_factory=Verdict)
    tools: dict[str, Report] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.kind


# -- reading the tools' output ---------------------------------------------------------------------


def parse_sanitizer(output: str) -> Report:
    """compute-sanitizer's report (any of its tools), read by ``grader.core.sanitizer_report``: the
    error count from its summary line and the first error's description, class and source line.
    ``errors`` stays None when there is no summary (the tool or the program did not get that far)."""
    report = Report(errors=reported_errors(output), warnings=reported_warnings(output))
    findings = parse_report(output)
    if findings:
        first = findings[0]
        report.kind, report.description, report.line = first.kind, first.reported, first.line
        report.file = Path(first.file).name if first.file else ""
    return report


def parse_gsan(output: str, returncode: int | None) -> Report:
    """GSan's report, read by ``grader.core.sanitizer_report.parse_gsan`` (one failed device-side
    assertion per thread that finds a race): the count and the first finding. A run that ends
    normally without one found nothing; one that fails without one gave no count."""
    findings = gsan_findings(output)
    if not findings:
        return Report(errors=0 if returncode == 0 else None, returncode=returncode)
    first = findings[0]
    return Report(
        errors=sum(f.count for f in findings),
        kind="race" if "race" in first.detail.lower() else "other",
        description=first.detail,
        file=Path(first.file).name,
        line=first.line,
        returncode=returncode,
    )


def parse_verdict(output: str, name: str) -> Verdict | None:
    """The checker's verdict on ``name`` from ``memory_corpus --json`` (one JSON object a line)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("name") == name:
                return Verdict(
                    verdict=record["verdict"],
                    caught=record["caught"],
                    false_alarm=record["false_alarm"],
                    line=record["line"],
                )
    return None


# -- running ---------------------------------------------------------------------------------------


@dataclass
class Finished:
    output: str
    returncode: int | None  # None when it was stopped at the timeout
    seconds: float
    timed_out: bool


def run_process(command: Sequence[str], *, env: dict[str, str], timeout: float, log: Path) -> Finished:
    """Run ``command`` in a session of its own, its output and errors together into ``log``. At the
    timeout the whole session is killed: compute-sanitizer's Python child would otherwise keep the
    pipe open, and the parent would wait on it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO_ROOT,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            output, _ = process.communicate()
            timed_out = True
    seconds = time.perf_counter() - start
    log.write_text(output)
    return Finished(output, None if timed_out else process.returncode, seconds, timed_out)


def child_env(base: dict[str, str], tool: str) -> dict[str, str]:
    """The environment of one run. Native runs drop what would send them to the interpreter; the
    sanitizers want every tensor its own allocation (no caching allocator), GSan the opposite: it
    puts its shadow memory behind a memory pool of the caching allocator, which ``=0`` keeps on
    (``memory_corpus`` only sets the variable where it is absent). The checker runs on the CPU."""
    env = {k: v for k, v in base.items() if k not in ("TRITON_INTERPRET", "GRADER_DEVICE")}
    if tool == "checker":
        env["GRADER_DEVICE"] = "cpu"
    else:
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "0" if tool == "gsan" else "1"
    return env


def command(tool: str, name: str) -> list[str]:
    plain = ["--tool", "plain", "--only", name]
    if tool == "checker":
        return [sys.executable, "-m", CORPUS_MODULE, "--json", "--only", name]
    if tool == "gsan":  # GSan runs a script by path
        return gsan_command([str(REPO_ROOT / "grader/authoring" / CORPUS_FILE), *plain])
    error_exit = ["--error-exitcode", str(ERROR_EXIT)]
    return ["compute-sanitizer", "--tool", tool, *error_exit, sys.executable, "-m", CORPUS_MODULE, *plain]


def gsan_missing() -> str:
    """Why GSan cannot run here, or "" if it can."""
    if gsan_available():
        return ""
    import triton

    return f"GSan not available in Triton {'.'.join(triton.__version__.split('.')[:2])}"


def unavailable(has_cuda: bool) -> str:
    """One sentence saying why ``--sanitizers`` cannot run here and what to run instead, or ""."""
    if not has_cuda:
        return (
            "--sanitizers runs the corpus natively under the GPU's tools and there is no CUDA GPU here: "
            "run `python -m grader.authoring.memory_corpus` for the interpreter's checker alone, or this "
            "command on a machine with a GPU and compute-sanitizer."
        )
    if not shutil.which("compute-sanitizer"):
        return (
            "--sanitizers needs compute-sanitizer on PATH (it ships with the CUDA toolkit, e.g. "
            "/usr/local/cuda/bin): add that folder to PATH and run the command again."
        )
    return ""


def _report(tool: str, finished: Finished) -> Report:
    if finished.timed_out:
        report = Report(note=f"timed out after {finished.seconds:.0f} s")
    elif tool == "gsan":
        report = parse_gsan(finished.output, finished.returncode)
    else:
        report = parse_sanitizer(finished.output)
    if report.errors is None and not report.note:
        report.note = f"no result (exit status {finished.returncode})"
    report.seconds, report.timed_out, report.returncode = finished.seconds, finished.timed_out, finished.returncode
    return report


def run(
    entries: list[Entry],
    out_dir: Path,
    *,
    jobs: int = 8,
    timeout: float = 120.0,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    command_for: Callable[[str, str], list[str]] = command,
    with_checker: bool = True,
) -> str:
    """Fill in each entry's checker verdict and tool reports, running ``jobs`` processes at a time.
    ``command_for(tool, name)``: the command line of one run (the corpus's by default);
    ``with_checker``: also run the checker (entries checked elsewhere keep the verdict they hold).
    Returns the note on GSan ("" if it ran)."""
    gsan_note = gsan_missing()
    tools = [t for t in TOOLS if t != "gsan" or not gsan_note]
    runs = [(entry, tool) for entry in entries for tool in (("checker",) if with_checker else ()) + tuple(tools)]
    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        futures = {
            pool.submit(
                run_process,
                command_for(tool, entry.name),
                env=child_env(dict(os.environ), tool),
                timeout=timeout,
                log=out_dir / entry.name / f"{tool}.txt",
            ): (entry, tool)
            for entry, tool in runs
        }
        for done, future in enumerate(as_completed(futures), 1):
            entry, tool = futures[future]
            finished = future.result()
            if tool == "checker":
                verdict = parse_verdict(finished.output, entry.name) or Verdict(
                    verdict="TIMEOUT" if finished.timed_out else f"no verdict (exit status {finished.returncode})"
                )
                verdict.seconds, verdict.timed_out = finished.seconds, finished.timed_out
                entry.checker = verdict
            else:
                entry.tools[tool] = _report(tool, finished)
            progress(f"[{done}/{len(runs)}] {entry.name} {tool}: {finished.seconds:.1f} s")
    for entry in entries:
        if gsan_note:
            entry.tools["gsan"] = Report(note=gsan_note)
    return gsan_note


def write_json(entries: list[Entry], path: Path, about: dict[str, str]) -> None:
    records = []
    for entry in entries:
        record = asdict(entry)
        record["class"] = record.pop("kind") or "clean"
        for tool, report in entry.tools.items():
            record["tools"][tool]["line_named"] = report.planted_line_named
        records.append(record)
    path.write_text(json.dumps({**about, "entries": records}, indent=1) + "\n")


def publish(entries: list[Entry], out_dir: Path, gsan_note: str, about: dict[str, str], notes=()) -> None:
    """Write ``sanitizers.json`` (what ran where, with ``about``'s own keys) and print the table, its
    totals, the ``notes`` and where the raw output is."""
    import torch
    import triton

    ran_on = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    write_json(entries, out_dir / "sanitizers.json", {**ran_on, "gsan": gsan_note or "ran", **about})
    print(table(entries))
    print()
    print("\n".join([*totals(entries, gsan_note), *notes]))
    print(f"\nraw output of every run under {out_dir}/<entry>/; the results in {out_dir / 'sanitizers.json'}")


# -- the table and its totals ----------------------------------------------------------------------


def cell(report: Report | None) -> str:
    """A tool's column: "-" for nothing found, else the count, the class and the line it names."""
    if report is None:
        return ""
    if report.timed_out:
        return "TIMEOUT"
    if report.errors is None:
        return "n/a" if report.note.startswith("GSan not available") else "failed"
    if not report.errors:
        return "-"
    where = ""
    if report.planted_line_named:
        where = f" @{report.line}"
    elif report.file:
        where = f" @{report.file}:{report.line}"
    return f"{report.errors} {report.kind}{where}"


def _checker_cell(verdict: Verdict) -> str:
    return verdict.verdict + (f" @{verdict.line}" if verdict.line and verdict.verdict.startswith("yes") else "")


def table(entries: Iterable[Entry]) -> str:
    rows = [("entry", "class", "planted", "checker", *(HEADINGS[t] for t in TOOLS))]
    for e in entries:
        row = (e.name, e.kind or "clean", str(e.planted or "-"), _checker_cell(e.checker))
        rows.append(row + tuple(cell(e.tools.get(t)) for t in TOOLS))
    return aligned(rows)


def totals(entries: list[Entry], gsan_note: str = "") -> list[str]:
    """The comparison in sentences, then one line for each place where a tool disagrees with the
    entry's ``gpu_tools`` (so that the documentation can be corrected), then the runs that gave no
    result."""
    bugs = [e for e in entries if not e.clean]
    clean = [e for e in entries if e.clean]
    found = [e for e in bugs if any(r.found for r in e.tools.values())]
    missed = [e.name for e in found if not e.checker.caught]
    tool_alarms = [f"{e.name} ({t})" for e in clean for t, r in e.tools.items() if r.found]
    lines = [
        f"GPU tools find {len(found)} of the {len(bugs)} bugs; the checker misses {len(missed)} of them"
        + (f" ({', '.join(missed)})" if missed else ""),
        f"false alarms on the {len(clean)} clean controls: checker {sum(e.checker.false_alarm for e in clean)}, "
        f"tools {len(tool_alarms)}" + (f" ({', '.join(tool_alarms)})" if tool_alarms else ""),
    ]
    if gsan_note:
        lines.append(gsan_note)
    for e in bugs:
        for tool in TOOLS:
            report = e.tools.get(tool)
            if report is None or report.errors is None:
                continue
            if report.found and tool not in e.gpu_tools:
                lines.append(f"{HEADINGS[tool]} finds {e.name} ({report.kind}), which its gpu_tools do not list")
            elif not report.found and tool in e.gpu_tools:
                lines.append(f"{HEADINGS[tool]} misses {e.name}, which its gpu_tools list")
    for e in entries:
        for tool, report in e.tools.items():
            if report.errors is None and not report.note.startswith("GSan not available"):
                lines.append(f"{HEADINGS[tool]} gave no result on {e.name}: {report.note}")
        if e.checker.timed_out or not e.checker.verdict or e.checker.verdict.startswith("no verdict"):
            lines.append(f"the checker gave no verdict on {e.name}: {e.checker.verdict or 'not run'}")
    return lines
