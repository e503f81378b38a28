"""The GPU tools' side of the memory corpus, on a CPU: compute-sanitizer's and GSan's output as
captured (in their own format), the table and totals built from it, the process runner's timeout,
and the command's refusal where there is no GPU."""

import sys
import time

import pytest

from grader.authoring import memory_corpus, sanitizers
from grader.authoring.sanitizers import Entry, Report, Verdict
from grader.core import device

# Newer releases name the kernel and the source line as "kernel+0x.. in file:line".
MEMCHECK_OUT_OF_BOUNDS = """\
========= COMPUTE-SANITIZER
load-tail-no-mask  1.204 s
========= Invalid __global__ read of size 4 bytes
=========     at load_tail_kernel+0x1d0 in /repo/grader/authoring/memory_corpus.py:141
=========     by thread (100,0,0) in block (3,0,0)
=========     Access to 0x7f3a5c000590 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a5c000400 of size 400 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f26f0] in /usr/lib/x86_64-linux-gnu/libcuda.so.1
=========         Host Frame: [0x2800] in /root/.triton/cache/ab/__triton_launcher.so:12
=========
========= Invalid __global__ read of size 4 bytes
=========     at load_tail_kernel+0x1d0 in /repo/grader/authoring/memory_corpus.py:141
=========     by thread (101,0,0) in block (3,0,0)
=========
========= ERROR SUMMARY: 28 errors
"""

# Older releases: "at 0x.. in file:line:kernel"; the address is misaligned, not out of bounds.
MEMCHECK_MISALIGNED = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at 0x90 in /repo/grader/authoring/memory_corpus.py:402:bytes_as_floats_kernel
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f3a5c000401 is misaligned
=========
========= ERROR SUMMARY: 1 error
"""

# A kernel built without line information: the report names the kernel, no file.
INITCHECK_NO_LINE = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at 0x70 in empty_input_kernel
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f3a5c000400
=========
========= ERROR SUMMARY: 64 errors
"""

RACECHECK_CLEAN = """\
========= COMPUTE-SANITIZER
sum-with-plain-store  0.950 s
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

RACECHECK_HAZARD = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at tile_kernel+0x150 in /repo/grader/authoring/memory_corpus.py:88
=========     and Read access at tile_kernel+0x470 in /repo/grader/authoring/memory_corpus.py:90 [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 2 warnings)
"""

# The program died before compute-sanitizer could sum up.
SANITIZER_CUT_SHORT = """\
========= COMPUTE-SANITIZER
Traceback (most recent call last):
ModuleNotFoundError: No module named 'torch'
"""

GSAN_RACE = (
    "".join(
        f"/repo/grader/authoring/memory_corpus.py:512: : block: [{block},0,0], thread: [0,0,0] "
        "Assertion `Write after write race detected` failed.\n"
        for block in (1, 2)
    )
    + "sum-with-plain-store  0.412 s  RuntimeError: CUDA error: device-side assert triggered\n"
)


def test_memcheck_gives_the_count_the_class_and_the_planted_line():
    report = sanitizers.parse_sanitizer(MEMCHECK_OUT_OF_BOUNDS)
    assert (report.errors, report.kind) == (28, "out-of-bounds")
    assert report.description == "Invalid __global__ read of size 4 bytes"
    assert (report.file, report.line, report.planted_line_named) == ("memory_corpus.py", 141, 141)
    assert sanitizers.cell(report) == "28 out-of-bounds @141"


def test_the_older_location_form_and_a_misaligned_address():
    report = sanitizers.parse_sanitizer(MEMCHECK_MISALIGNED)
    assert (report.errors, report.kind, report.line) == (1, "misaligned", 402)


def test_a_report_without_line_information_names_no_line():
    report = sanitizers.parse_sanitizer(INITCHECK_NO_LINE)
    assert (report.errors, report.kind, report.file, report.line) == (64, "uninitialised-read", "", 0)
    assert sanitizers.cell(report) == "64 uninitialised-read"


def test_racecheck_counts_from_its_own_summary():
    clean = sanitizers.parse_sanitizer(RACECHECK_CLEAN)
    assert (clean.errors, clean.kind, clean.description) == (0, "", "")
    assert sanitizers.cell(clean) == "-"
    hazard = sanitizers.parse_sanitizer(RACECHECK_HAZARD)
    assert (hazard.errors, hazard.warnings, hazard.kind, hazard.line) == (1, 2, "race", 88)


def test_a_run_without_a_summary_has_no_count():
    report = sanitizers.parse_sanitizer(SANITIZER_CUT_SHORT)
    assert report.errors is None and report.description == ""


def test_gsan_counts_its_failed_assertions():
    report = sanitizers.parse_gsan(GSAN_RACE, 0)
    assert (report.errors, report.kind, report.line) == (2, "race", 512)
    assert report.description == "Write after write race detected"
    assert sanitizers.parse_gsan("sum-with-plain-store  0.4 s\n", 0).errors == 0
    assert sanitizers.parse_gsan("Traceback ...\n", 1).errors is None


def test_the_checker_verdict_is_read_from_its_json_line():
    output = '{"name": "a", "verdict": "MISSED", "caught": false, "false_alarm": false, "kind": "", "line": 0}\n'
    output += (
        '{"name": "b", "verdict": "yes (race)", "caught": true, "false_alarm": false, "kind": "race", "line": 7}\n'
    )
    assert sanitizers.parse_verdict(output, "b") == Verdict("yes (race)", True, False, 7)
    assert sanitizers.parse_verdict("Traceback\n", "b") is None


def test_children_run_natively_or_on_the_interpreter_as_asked():
    parent = {"TRITON_INTERPRET": "1", "GRADER_DEVICE": "cpu", "PATH": "/bin"}
    native = sanitizers.child_env(parent, "memcheck")
    assert "TRITON_INTERPRET" not in native and "GRADER_DEVICE" not in native
    assert native["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1" and native["PATH"] == "/bin"
    assert sanitizers.child_env(parent, "gsan")["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "0"
    assert sanitizers.child_env({}, "checker")["GRADER_DEVICE"] == "cpu"
    assert sanitizers.command("racecheck", "x")[:3] == ["compute-sanitizer", "--tool", "racecheck"]


def _entry(name, kind, gpu_tools, checker, **tools):
    return Entry(name, kind, 10 if kind else 0, gpu_tools, checker, tools)


def test_the_table_and_totals_compare_the_tools_with_the_checker_and_the_documentation():
    found = sanitizers.parse_sanitizer(MEMCHECK_OUT_OF_BOUNDS)
    none = Report(errors=0)
    gsan = Report(note="GSan not available in Triton 3.6")
    timeout = Report(timed_out=True, note="timed out after 120 s")
    entries = [
        _entry("oob", "out-of-bounds", ("memcheck",), Verdict("yes (out-of-bounds)", True, line=141),
               memcheck=found, racecheck=none, initcheck=none, gsan=gsan),
        _entry("view-gap", "out-of-bounds", (), Verdict("missed (documented)"),
               memcheck=found, racecheck=none, initcheck=none, gsan=gsan),
        _entry("uninit", "uninitialised-read", ("initcheck",), Verdict("yes (uninitialised-read)", True),
               memcheck=none, racecheck=none, initcheck=none, gsan=gsan),
        _entry("slow", "race", ("gsan",), Verdict("TIMEOUT", timed_out=True),
               memcheck=timeout, racecheck=none, initcheck=none, gsan=gsan),
        _entry("clean-copy", "", (), Verdict("clean"),
               memcheck=none, racecheck=none, initcheck=sanitizers.parse_sanitizer(INITCHECK_NO_LINE), gsan=gsan),
    ]  # fmt: skip
    text = sanitizers.table(entries)
    header, rule, oob = text.splitlines()[:3]
    assert header.split() == ["entry", "class", "planted", "checker", "memcheck", "racecheck", "initcheck", "GSan"]
    assert "yes (out-of-bounds) @141" in oob and "28 out-of-bounds @141" in oob and oob.endswith("n/a")
    assert "TIMEOUT" in text.splitlines()[5]
    lines = sanitizers.totals(entries, "GSan not available in Triton 3.6")
    assert lines[0] == "GPU tools find 2 of the 4 bugs; the checker misses 1 of them (view-gap)"
    assert lines[1] == "false alarms on the 1 clean controls: checker 0, tools 1 (clean-copy (initcheck))"
    assert lines.count("GSan not available in Triton 3.6") == 1
    assert "memcheck finds view-gap (out-of-bounds), which its gpu_tools do not list" in lines
    assert "initcheck misses uninit, which its gpu_tools list" in lines
    assert "memcheck gave no result on slow: timed out after 120 s" in lines
    assert "the checker gave no verdict on slow: TIMEOUT" in lines
    assert not any("oob" in line.split() for line in lines), "oob is as documented"


def test_the_runner_kills_a_run_at_its_timeout_with_its_children(tmp_path):
    # The child holds the pipe open after its parent is killed, as Python does under compute-sanitizer.
    script = "import subprocess, sys, time; print('started', flush=True); "
    script += "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    start = time.perf_counter()
    finished = sanitizers.run_process(
        [sys.executable, "-c", script], env={"PATH": "/usr/bin:/bin"}, timeout=1.0, log=tmp_path / "e" / "memcheck.txt"
    )
    assert time.perf_counter() - start < 10
    assert finished.timed_out and finished.returncode is None and 1.0 <= finished.seconds < 10
    assert (tmp_path / "e" / "memcheck.txt").read_text() == "started\n"
    report = sanitizers._report("memcheck", finished)
    assert report.timed_out and report.errors is None and sanitizers.cell(report) == "TIMEOUT"


@pytest.mark.skipif(device.is_cuda(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_the_command_refuses_in_one_sentence_and_names_what_to_run(tmp_path, capsys):
    assert memory_corpus.main(["--sanitizers", str(tmp_path / "out"), "--only", "load-tail-no-mask"]) == 2
    message = capsys.readouterr().err.strip()
    assert "no CUDA GPU" in message and "`python -m grader.authoring.memory_corpus`" in message
    assert message.count(". ") == 0 and message.endswith(".") and "\n" not in message
    assert not (tmp_path / "out").exists()
    assert "compute-sanitizer on PATH" in sanitizers.unavailable(True) or sanitizers.unavailable(True) == ""
