"""grader.learn.sanitizer: compute-sanitizer's reports read into findings and plain sentences.

On a CPU the parser is tested on reports written for these tests: constructed examples in the
formats compute-sanitizer prints (the layout of its 2023-2025 releases, and the older one of
cuda-memcheck and early compute-sanitizer), with made-up addresses and paths. The runner is tested
with a stand-in executable that prints such a report. On a GPU with the CUDA toolkit, the real
tool runs on the planted bugs of debugging/04-memory-debugging.
"""

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.core import device, sanitizer_report
from grader.core.catalog import find_module
from grader.core.markers import planted_bugs
from grader.learn import sanitizer

# Constructed example: memcheck on a Triton kernel whose store has no mask, three threads of two
# programs reporting the same store (the modern layout: "kernel+offset in file:line").
MEMCHECK_OUT_OF_BOUNDS = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 16 bytes
=========     at add_bias_kernel+0x3c0 in /home/learner/course/tracks/debugging/04-memory-debugging/kernel.py:112
=========     by thread (96,0,0) in block (2,0,0)
=========     Address 0x7f3a1e02b580 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a1e020000 of size 44,400 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f2c1a] in libcuda.so.1
=========         Host Frame: _launch [0x1a3f] in add_bias_kernel.cpython-311-x86_64-linux-gnu.so
=========
========= Invalid __global__ write of size 16 bytes
=========     at add_bias_kernel+0x3c0 in /home/learner/course/tracks/debugging/04-memory-debugging/kernel.py:112
=========     by thread (97,0,0) in block (2,0,0)
=========     Address 0x7f3a1e02b590 is out of bounds
=========     and is 17 bytes after the nearest allocation at 0x7f3a1e020000 of size 44,400 bytes
=========
========= Invalid __global__ write of size 16 bytes
=========     at add_bias_kernel+0x3c0 in /home/learner/course/tracks/debugging/04-memory-debugging/kernel.py:112
=========     by thread (0,0,0) in block (2,1,0)
=========     Address 0x7f3a1e02b5a0 is out of bounds
=========     and is 33 bytes after the nearest allocation at 0x7f3a1e020000 of size 44,400 bytes
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========
========= ERROR SUMMARY: 4 errors
"""

# Constructed example: the older layout ("0x... in file:line:kernel", "Address ... is out of
# bounds" with no allocation line), a load before the start of a tensor.
MEMCHECK_OLD_LAYOUT = """\
========= CUDA-MEMCHECK
========= Invalid __global__ read of size 4
=========     at 0x000001b0 in /tmp/shift.py:21:shift_left_kernel
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f0012fffffc is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""

# Constructed example: a 4-byte load from an fp16 tensor that starts 2 bytes into a 4-byte word.
MEMCHECK_MISALIGNED = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at scale_kernel+0x120 in /work/kernel.py:202
=========     by thread (5,0,0) in block (0,0,0)
=========     Address 0x7f3a1e000002 is misaligned
=========
========= Warp Misaligned Address
=========     at scale_kernel+0x120 in /work/kernel.py:202
=========     by thread (0,0,0) in block (1,0,0)
=========
========= ERROR SUMMARY: 2 errors
"""

# Constructed example: initcheck on an atomic add into a torch.empty accumulator.
INITCHECK_ACCUMULATOR = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at dot_kernel+0x5f0 in /work/kernel.py:76
=========     by thread (0,0,0) in block (3,0,0)
=========     Address 0x7f3a1e000000
=========     Saved host backtrace up to driver entry point at kernel launch time
=========
========= Host API memory access error at host access to 0x7f3a1e000000 of size 4 bytes
=========     Uninitialized access at 0x7f3a1e000000 on access by cudaMemcpyAsync source
=========
========= ERROR SUMMARY: 2 errors
"""

# Constructed example: racecheck on a kernel whose threads share a shared-memory buffer without a
# barrier (the modern layout, then the older "Potential hazard" one).
RACECHECK_SHARED = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at reduce_kernel+0x2a0 in /work/reduce.py:30
=========     and Read access at reduce_kernel+0x310 in /work/reduce.py:33 [124 hazards]
=========     and Read access at reduce_kernel+0x330 in /work/reduce.py:34 [4 hazards]
=========
========= ERROR: Potential WAR hazard detected at __shared__ 0x40 in block (1, 0, 0) :
=========     Read Thread (3, 0, 0) at 0x00000310 in /work/reduce.py:33:reduce_kernel
=========     Write Thread (35, 0, 0) at 0x000002a0 in /work/reduce.py:30:reduce_kernel
=========
========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
"""

CLEAN = """\
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""


def test_an_out_of_bounds_store_reported_by_many_threads_is_one_finding():
    findings = sanitizer_report.parse_report(MEMCHECK_OUT_OF_BOUNDS)
    store, api = findings
    assert (store.kind, store.access, store.space, store.size) == ("out-of-bounds", "write", "global", 16)
    assert (store.kernel, store.line, store.block, store.thread) == ("add_bias_kernel", 112, (2, 0, 0), (96, 0, 0))
    assert store.file.endswith("04-memory-debugging/kernel.py")
    assert (store.relation, store.distance, store.allocation_size, store.count) == ("after", 1, 44400, 3)
    assert store.allocation == 0x7F3A1E020000 and store.address == 0x7F3A1E02B580
    sentence = str(store)
    for needed in (
        "write of 16 bytes at line 112 of kernel.py",
        "kernel add_bias_kernel",
        "program (2, 0, 0)",
        "thread (96, 0, 0)",
        "past the end of the nearest allocation",
        "44400 bytes",
        "2 more report(s)",
    ):
        assert needed in sentence, f"{needed!r} is missing from: {sentence}"
    assert api.kind == "api-error" and "cudaErrorLaunchFailure (error 719" in str(api)
    assert "echo of an earlier fault" in str(api)
    assert sanitizer_report.reported_errors(MEMCHECK_OUT_OF_BOUNDS) == 4


def test_the_older_layout_names_the_kernel_and_line_too():
    (load,) = sanitizer_report.parse_report(MEMCHECK_OLD_LAYOUT)
    assert (load.kind, load.access, load.size, load.kernel, load.file, load.line) == (
        "out-of-bounds",
        "read",
        4,
        "shift_left_kernel",
        "/tmp/shift.py",
        21,
    )
    assert load.relation == "" and "out of bounds of every allocation (address 0x7f0012fffffc)" in str(load)
    assert sanitizer_report.reported_errors(MEMCHECK_OLD_LAYOUT) == 1


def test_a_misaligned_load_and_the_hardware_exception_it_causes():
    load, exception = sanitizer_report.parse_report(MEMCHECK_MISALIGNED)
    assert (load.kind, load.address, load.line) == ("misaligned", 0x7F3A1E000002, 202)
    assert "misaligned" in str(load) and "pointer's dtype" in str(load)
    assert (exception.kind, exception.detail, exception.block) == (
        "hardware-exception",
        "Warp Misaligned Address",
        (1, 0, 0),
    )
    assert str(exception).startswith("Warp Misaligned Address at line 202 of kernel.py (kernel scale_kernel)")


def test_initcheck_reads_of_memory_nothing_wrote():
    atomic, copy = sanitizer_report.parse_report(INITCHECK_ACCUMULATOR, tool="initcheck")
    assert (atomic.tool, atomic.kind, atomic.kernel, atomic.line, atomic.address) == (
        "initcheck",
        "uninitialised-read",
        "dot_kernel",
        76,
        0x7F3A1E000000,
    )
    assert "reads global memory that nothing has written since it was allocated" in str(atomic)
    assert (copy.kind, copy.detail, copy.size) == ("uninitialised-read", "cudaMemcpyAsync source", 4)
    assert str(copy).startswith("cudaMemcpyAsync source copied 4 bytes")


def test_racecheck_reports_shared_memory_races_in_both_layouts():
    modern, older = sanitizer_report.parse_report(RACECHECK_SHARED, tool="racecheck")
    assert (modern.kind, modern.access, modern.space, modern.line, modern.hazards) == (
        "race",
        "write",
        "shared",
        30,
        128,
    )
    assert modern.other == "read at line 33 of reduce.py"
    sentence = str(modern)
    assert "race in shared memory: a write at line 30 of reduce.py" in sentence
    assert "and a read at line 33 of reduce.py" in sentence and "(128 hazards)" in sentence
    assert "racecheck looks at shared memory only" in sentence
    assert (older.kind, older.access, older.line, older.block, older.thread) == (
        "race",
        "WAR hazard",
        33,
        (1, 0, 0),
        (3, 0, 0),
    )
    assert older.other == "write at line 30 of reduce.py"
    assert sanitizer_report.reported_errors(RACECHECK_SHARED) == 2


def test_a_clean_report_has_no_findings():
    assert sanitizer_report.parse_report(CLEAN) == []
    assert sanitizer_report.reported_errors(CLEAN) == 0
    assert sanitizer_report.parse_report("ordinary output of the program\n=== not a report line") == []


def test_the_command_line_and_the_childs_environment(monkeypatch):
    argv = sanitizer.command(["python", "x.py"], tool="initcheck", print_limit=5, sanitizer="/opt/cs")
    assert argv == ["/opt/cs", "--tool", "initcheck", "--print-limit", "5", "python", "x.py"]
    with pytest.raises(ValueError, match="memcheck"):
        sanitizer.command(["python"], tool="leakcheck", sanitizer="/opt/cs")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    env = sanitizer.child_environment()
    assert env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    assert "TRITON_INTERPRET" not in env and "TRITON_DISABLE_LINE_INFO" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(sanitizer.REPO_ROOT)
    monkeypatch.delenv("PYTORCH_NO_CUDA_MEMORY_CACHING", raising=False)
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" not in sanitizer.child_environment(caching=True)


def test_without_the_toolkit_the_tool_is_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sanitizer.Path, "is_file", lambda self: False)
    assert sanitizer.find_tool() is None
    with pytest.raises(FileNotFoundError, match="CUDA toolkit"):
        sanitizer.command(["python"])


def _stand_in(tmp_path, report: str):
    """A compute-sanitizer stand-in: it records its arguments and environment, runs the program,
    then prints ``report`` as the real tool would."""
    (tmp_path / "report").write_text(report)
    script = tmp_path / "compute-sanitizer"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > "{tmp_path}/args"\n'
        f'echo "$PYTORCH_NO_CUDA_MEMORY_CACHING" > "{tmp_path}/caching"\n'
        "shift 4\n"
        '"$@"\n'
        f'cat "{tmp_path}/report"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_run_function_runs_the_file_in_a_child_and_reads_the_report(tmp_path):
    stand_in = _stand_in(tmp_path, MEMCHECK_OUT_OF_BOUNDS)
    target = tmp_path / "target.py"
    target.write_text("def launch():\n    print('launched')\n")
    run = sanitizer.run_function(target, "launch", tool="memcheck", print_limit=7, sanitizer=str(stand_in))
    assert "launched" in run.output, run.output
    assert (tmp_path / "args").read_text().split()[:4] == ["--tool", "memcheck", "--print-limit", "7"]
    assert (tmp_path / "caching").read_text().strip() == "1"
    assert [f.kind for f in run.findings] == ["out-of-bounds", "api-error"] and run.errors == 4
    assert not run.clean and run.in_kernel("add_bias") == run.findings[:1]
    assert "found 2 problem(s)" in run.report() and "past the end" in run.report()
    with pytest.raises(ValueError, match="not a function name"):
        sanitizer.run_function(target, "launch(); import os", sanitizer=str(stand_in))


def test_a_clean_run_says_so(tmp_path):
    stand_in = _stand_in(tmp_path, CLEAN)
    run = sanitizer.run_python("print('fine')", tool="racecheck", sanitizer=str(stand_in))
    assert run.clean and run.errors == 0 and "nothing to report" in run.report()


# ---- the real tool, on a GPU ------------------------------------------------------------------------

MODULE = "debugging/04-memory-debugging"
DRIVERS = {
    "add_bias": ("x = torch.randn(37, 300, device='cuda')\nkernel.add_bias(x, torch.randn(300, device='cuda'))\n"),
    "dot": ("x = torch.randn(5000, device='cuda')\nkernel.dot(x, x)\n"),
}


def _sanitized(tmp_path, source: str, function: str, tool: str):
    if not device.is_cuda():
        pytest.skip("needs a CUDA GPU; this run uses Triton's interpreter on the CPU")
    if sanitizer.find_tool() is None:
        pytest.skip("compute-sanitizer is not on PATH nor in $CUDA_HOME/bin or /usr/local/cuda/bin")
    (tmp_path / "kernel.py").write_text(source)
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import importlib.util\nimport torch\n\n\ndef main():\n"
        f"    spec = importlib.util.spec_from_file_location('planted', {str(tmp_path / 'kernel.py')!r})\n"
        "    kernel = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(kernel)\n" + textwrap.indent(DRIVERS[function], "    ")
    )
    return sanitizer.run_function(driver, "main", tool=tool, timeout=900)


def _reference_and_bug(text: str) -> tuple[str, str, int]:
    """The reference source, the source with the BUG region whose text starts so planted, and the
    line of the planted code."""
    solution = (find_module(MODULE).solution_dir / "kernel.py").read_text()
    bug = next(b for b in planted_bugs(solution) if b.text.startswith(text))
    planted = solution.replace(bug.correct, bug.buggy)
    line = planted[: planted.index(bug.buggy.strip())].count("\n") + 1
    return solution, planted, line


@pytest.mark.cuda
def test_memcheck_finds_the_planted_store_past_the_end(tmp_path):
    _, planted, line = _reference_and_bug("the store has no mask")
    run = _sanitized(tmp_path, planted, "add_bias", "memcheck")
    found = [f for f in run.in_kernel("add_bias_kernel") if f.kind == "out-of-bounds"]
    assert found, f"memcheck reported no out-of-bounds access in add_bias_kernel:\n{run.report()}\n{run.output[-3000:]}"
    assert found[0].line == line and found[0].file.endswith("kernel.py"), str(found[0])
    assert "past the end" in str(found[0]), str(found[0])


@pytest.mark.cuda
def test_memcheck_finds_nothing_in_the_reference(tmp_path):
    solution, _, _ = _reference_and_bug("the store has no mask")
    run = _sanitized(tmp_path, solution, "add_bias", "memcheck")
    assert run.clean, f"{run.report()}\n{run.output[-3000:]}"


@pytest.mark.cuda
def test_initcheck_finds_the_accumulator_nothing_cleared(tmp_path):
    _, planted, _ = _reference_and_bug("the accumulator is allocated without a value")
    run = _sanitized(tmp_path, planted, "dot", "initcheck")
    found = [f for f in run.in_kernel("dot_kernel") if f.kind == "uninitialised-read"]
    assert found, (
        f"initcheck reported no read of uninitialised memory in dot_kernel:\n{run.report()}\n{run.output[-3000:]}"
    )


# What memcheck printed on an H200 for debugging/02's reference, whose device probe launches a
# kernel on a CPU tensor on purpose and catches Triton's refusal.
MEMCHECK_HOST_POINTER_PROBE = """\
========= COMPUTE-SANITIZER
========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call to cuPointerGetAttribute.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: extractPointer [0x3f6c] in cuda_utils.cpython-312-x86_64-linux-gnu.so
=========         Host Frame: kernel_device in kernel.py:77
=========
========= ERROR SUMMARY: 1 error
"""


# What memcheck printed on an H200 under Triton 3.9 for mastery/03's reference, which then passed
# every case: Triton's loadBinary setting an attribute of the kernel it loads.
MEMCHECK_LOAD_ATTRIBUTE = """\
========= COMPUTE-SANITIZER
========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call to cuFuncSetAttribute.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: loadBinary [0x4c33] in cuda_utils.cpython-312-x86_64-linux-gnu.so
=========
========= ERROR SUMMARY: 1 error
"""


@pytest.mark.parametrize(
    "output, call, says",
    [
        (MEMCHECK_HOST_POINTER_PROBE, "cuPointerGetAttribute", "CPU tensor"),
        (MEMCHECK_LOAD_ATTRIBUTE, "cuFuncSetAttribute", "Triton sets attributes of each kernel it loads"),
    ],
    ids=["host pointer", "kernel attribute at load"],
)
def test_a_call_triton_makes_that_fails_without_a_fault_is_explained_not_called_an_echo(output, call, says):
    (api,) = sanitizer_report.parse_report(output)
    sentence = str(api)
    assert api.kind == "api-error" and f"{call} returned CUDA_ERROR_INVALID_VALUE" in sentence
    assert says in sentence and "not a fault" in sentence
    assert "echo of an earlier fault" not in sentence


def test_another_failed_call_is_read_as_the_echo_of_an_earlier_fault():
    output = MEMCHECK_LOAD_ATTRIBUTE.replace("cuFuncSetAttribute", "cuMemcpyDtoHAsync")
    (api,) = sanitizer_report.parse_report(output)
    assert "echo of an earlier fault" in str(api) and "not a fault" not in str(api)


# What GSan printed on an H200 (Triton 3.9) for debugging/04's starting column_sum, shortened.
GSAN_COLUMN_SUM = """\
/opt/repo/tracks/debugging/04-memory-debugging/kernel.py:172: : block: [78,0,0], thread: [64,0,0] Assertion `Write after read race detected` failed.
/opt/repo/tracks/debugging/04-memory-debugging/kernel.py:172: : block: [78,0,0], thread: [65,0,0] Assertion `Write after read race detected` failed.
/opt/repo/tracks/debugging/04-memory-debugging/kernel.py:172: : block: [12,0,0], thread: [3,0,0] Assertion `Write after read race detected` failed.
torch.AcceleratorError: CUDA error: device-side assert triggered
"""


def test_gsans_failed_assertions_become_one_finding_per_line_with_the_program_named():
    (race,) = sanitizer_report.parse_gsan(GSAN_COLUMN_SUM)
    assert (race.kind, race.line, race.block, race.thread, race.count) == (
        "global-race",
        172,
        (78, 0, 0),
        (64, 0, 0),
        3,
    )
    sentence = str(race)
    assert sentence.startswith("GSan: a race on global memory at line 172 of kernel.py: program (78, 0, 0) stored")
    assert "over a value that another program had loaded" in sentence and "tl.atomic_add" in sentence
    assert "16 bits" not in sentence  # that caveat is for two stores
    (both,) = sanitizer_report.parse_gsan(GSAN_COLUMN_SUM.replace("Write after read", "Write after write"))
    assert "stored where another program had stored" in str(both) and "16 bits wide" in str(both)
    assert sanitizer_report.parse_gsan("an ordinary line\n" + CLEAN) == []


def test_gsan_runs_the_script_in_its_own_python_with_the_caching_allocator_on(monkeypatch):
    seen = {}

    def fake_run(argv, **options):
        seen["argv"], seen["env"] = argv, options["env"]
        seen["script"] = Path(argv[3]).read_text() if argv[3].endswith(".py") else None
        return subprocess.CompletedProcess(argv, 1, GSAN_COLUMN_SUM, "")

    monkeypatch.setattr(sanitizer, "gsan_available", lambda: True)
    monkeypatch.setattr(sanitizer.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sanitizer.subprocess, "run", fake_run)
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    run = sanitizer.run_python("print('racing')", tool="gsan")
    assert seen["argv"][:3] == [sys.executable, "-m", "triton.tools.gsan"] and seen["script"] == "print('racing')"
    assert seen["env"]["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "0"
    assert not run.clean and run.errors == 3 and [f.kind for f in run.findings] == ["global-race"]
    assert run.report().startswith("GSan found 1 problem(s)")
    assert sanitizer.command([sys.executable, "x.py", "--n", "3"], tool="gsan")[3:] == ["x.py", "--n", "3"]


def test_without_a_gpu_gsan_is_refused_and_the_cpus_checker_named(monkeypatch, capsys):
    monkeypatch.setattr(sanitizer.torch.cuda, "is_available", lambda: False)
    assert sanitizer.main(["--tool", "gsan", "x.py"]) == 2
    said = capsys.readouterr().err
    assert "no CUDA GPU here" in said and "make check" in said


def test_a_run_that_fails_without_a_finding_says_so_and_shows_the_end_of_its_output():
    run = sanitizer.SanitizerRun("gsan", ["x"], 1, "line 1\nRuntimeError: broken")
    report = run.report()
    assert report.startswith("GSan found no problem, but the program exited with code 1")
    assert report.endswith("RuntimeError: broken") and "0 problem(s)" not in report


def test_without_gsan_the_command_says_which_triton_has_it(monkeypatch, capsys):
    monkeypatch.setattr(sanitizer.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sanitizer, "gsan_available", lambda: False)
    with pytest.raises(FileNotFoundError, match="Triton 3.9 and later"):
        sanitizer.command([sys.executable, "x.py"], tool="gsan")
    assert sanitizer.main(["--tool", "gsan", "x.py"]) == 2
    assert "GSan ships with Triton 3.9" in capsys.readouterr().err
