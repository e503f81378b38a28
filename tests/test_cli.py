import os
import re
import subprocess
import sys

import pytest

from grader.core import device
from grader.core.catalog import MODULES, REPO_ROOT, find_module
from grader.learn import progress


def test_catalog_has_nineteen_modules_in_four_tracks():
    assert len(MODULES) == 19
    assert [m.track for m in MODULES].count("missing-elements") == 5
    assert len({m.track for m in MODULES}) == 4


def test_find_module_by_id_slug_and_path():
    softmax = find_module("missing-elements/03-softmax")
    assert find_module("03-softmax") == softmax
    assert find_module(str(REPO_ROOT / "tracks/missing-elements/01-vector-add")).slug == "01-vector-add"
    with pytest.raises(LookupError, match="No module matches 'qqq'. Give a track and folder"):
        find_module("qqq")


def test_a_misspelt_or_ambiguous_module_name_says_what_was_meant():
    with pytest.raises(LookupError, match=r"Did you mean missing-elements/03-softmax\?"):
        find_module("softmx")
    with pytest.raises(LookupError, match=r"Did you mean missing-elements/01-vector-add\?"):
        find_module("missing_elements/01-vector-add")
    with pytest.raises(LookupError, match=r"'optimization/0' matches 5 modules: optimization/01-tiling, "):
        find_module("optimization/0")


def _grader(*args):
    return subprocess.run(
        [sys.executable, "-m", "grader", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )


def test_check_fails_on_the_stub_and_passes_on_the_solution(tmp_path, monkeypatch):
    stub = _grader("check", "missing-elements/01-vector-add", "--impl", "learner")
    assert stub.returncode == 1
    assert "TODOs left: 15" in stub.stdout and "Next: complete TODO 1" in stub.stdout
    # how to run the file directly: the environment must be active for `python kernel.py`
    assert "`source .venv/bin/activate`" in stub.stdout and "`python kernel.py`" in stub.stdout
    assert re.search(r"0 of \d+ output cases", stub.stdout)  # more of them on a GPU
    solution = _grader("check", "missing-elements/01-vector-add", "--impl", "solutions")
    assert solution.returncode == 0, solution.stdout + solution.stderr
    assert "All public tests pass" in solution.stdout
    assert "Next: the study notebook notebooks/missing-elements-01-vector-add.ipynb" in solution.stdout
    if not device.is_cuda():  # what the tests launched, compiled for a GPU
        assert "GPU compile check: the " in solution.stdout and "compile for an H100" in solution.stdout


def test_check_of_a_slow_starting_kernel_shows_the_traffic_and_points_at_the_todo_behind_it():
    import io

    from grader.core import device
    from grader.core.catalog import find_module
    from grader.learn.check import check

    if device.is_cuda():
        pytest.skip("the memory-traffic report watches the interpreter (a CPU run)")
    out = io.StringIO()
    assert not check(find_module("optimization/05-advanced-optimizations"), "learner", out)
    text = out.getvalue()
    assert re.search(r"\d+ of \d+ output cases, 0 of 1 memory-traffic bars", text)
    assert "Memory traffic, as the interpreter saw it" in text and "programs that touched memory: 64" in text
    # TODO 1 is the search space; the failing traffic bar names TODO 4, the persistent loop.
    assert "Next: complete TODO 4 (line" in text


def test_progress_lists_all_modules():
    result = _grader("progress")
    assert result.returncode == 0
    assert result.stdout.count("not yet available") == sum(not m.available for m in MODULES)
    assert "01-vector-add" in result.stdout and "05-production-ready" in result.stdout


def test_progress_state_follows_the_recorded_hash(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "STORE", tmp_path / "progress.json")
    module = find_module("missing-elements/01-vector-add")
    assert "TODOs left" in progress.state(module).text
    progress.record(module, module.learner_dir / "kernel.py", 13, 13)
    assert progress.state(module).done
    progress.record(module, module.learner_dir / "kernel.py", 3, 13)
    assert progress.state(module).text == "3 of 13 tests pass"
    assert progress.next_unfinished() == module


def test_editing_a_checked_kernel_invalidates_its_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "STORE", tmp_path / "progress.json")
    module = find_module("missing-elements/01-vector-add")
    mine = tmp_path / "tracks" / module.id
    mine.mkdir(parents=True)
    (mine / "kernel.py").write_text((module.solution_dir / "kernel.py").read_text())
    monkeypatch.setattr(type(module), "learner_dir", property(lambda self: tmp_path / "tracks" / self.id))
    progress.record(module, mine / "kernel.py", 13, 13)
    assert progress.state(module).done
    with open(mine / "kernel.py", "a") as file:
        file.write("# an edit after the check\n")
    assert not progress.state(module).done
    assert progress.state(module).text == "edited since the last check: run make check"


def test_stubs_check_reports_in_sync():
    assert _grader("stubs", "--check").returncode == 0


def test_bench_refuses_what_it_cannot_time_honestly():
    result = _grader("bench", "missing-elements/01-vector-add")  # the untouched stub
    if device.is_cuda():
        assert result.returncode == 1 and "so it is not timed" in result.stdout
    else:
        assert result.returncode == 0 and "need a CUDA GPU" in result.stdout


EXAMPLES = REPO_ROOT / "grader" / "examples" / "submissions"


def test_check_fails_a_pytorch_result_with_the_reason():
    kernel = EXAMPLES / "torch-compute" / "missing-elements" / "01-vector-add" / "kernel.py"
    result = _grader("check", "missing-elements/01-vector-add", "--impl", str(kernel))
    assert result.returncode == 1
    assert "FAIL test_matches_reference" in result.stdout
    assert "computed with PyTorch (aten.add) instead of a Triton kernel" in result.stdout


def test_check_says_what_the_grader_would_refuse():
    kernel = EXAMPLES / "computes-in-thread" / "missing-elements" / "01-vector-add" / "kernel.py"
    result = _grader("check", "missing-elements/01-vector-add", "--impl", str(kernel))
    assert result.returncode == 1  # even if every test passed: a graded copy scores 0
    assert "The grader refuses this kernel.py before running it:" in result.stdout
    assert "`import threading` is not allowed" in result.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the crash is a read of address 0 on Linux")
def test_a_check_that_crashed_never_says_nothing_crashed(tmp_path):
    """Under make, a failed check adds a line before make's own "Error": it must not call a crash
    a plain failure."""
    folder = tmp_path / "missing-elements" / "01-vector-add"
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text("import ctypes\n\n\ndef add(x, y):\n    ctypes.string_at(0)\n")
    result = subprocess.run(
        [sys.executable, "-m", "grader", "check", "missing-elements/01-vector-add", "--impl", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MAKELEVEL": "1"},
    )
    assert result.returncode == 3, result.stdout[-2000:]
    assert "Nothing crashed" not in result.stdout and "the check crashed, as said above" in result.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the crash is a read of address 0 on Linux")
def test_a_crash_keeps_the_finished_tests_and_names_the_one_that_ran(tmp_path):
    """The reference, made to crash the process on inputs of more than 5000 elements: the tests
    that finished before are still reported, and the crash is placed in the test that ran."""
    module = find_module("missing-elements/01-vector-add")
    source = (module.solution_dir / "kernel.py").read_text()
    anchor = "def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:\n"
    assert anchor in source, "the reference's signature changed: update the anchor"
    doc_end = source.index('"""', source.index('"""', source.index(anchor)) + 3) + 3
    crashing = (
        source[:doc_end]
        + "\n    if x.numel() > 5000:\n        import ctypes\n        ctypes.string_at(0)"
        + source[doc_end:]
    )
    folder = tmp_path / module.track / module.slug
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text(crashing)
    result = _grader("check", module.id, "--impl", str(tmp_path))
    assert result.returncode == 3, result.stdout[-2000:]
    assert re.search(r"Before the crash, (\d+) of \1 finished public tests passed:", result.stdout), result.stdout
    assert "PASS test_matches_reference[exactly one block" in result.stdout
    assert re.search(
        r"crashed the Python process \(SIGSEGV\) while running test_matches_reference\[[^]]*\(98432,\)", result.stdout
    ), result.stdout


def _collected(module, function: str) -> list[str]:
    """The test ids pytest collects for ``make check K=<function>`` (a function or a part)."""
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "--impl=solutions",
            "--function",
            function,
            str(module.learner_dir / "test_kernel.py"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    ).stdout
    return [line for line in collected.splitlines() if "::" in line]


def test_check_of_one_function_runs_only_that_function_s_tests(tmp_path, monkeypatch):
    """make check K=rms_norm: the cases whose Spec calls rms_norm() and the tests that name it, no
    other function's, and no progress recorded for a module checked in part."""
    from io import StringIO

    from grader.learn import check

    monkeypatch.setattr(progress, "STORE", tmp_path / "progress.json")
    module = find_module("mastery/04-training-kernels")
    names = _collected(module, "rms_norm")
    assert names and all("rms_norm" in n or "test_matches_reference[" in n for n in names)
    assert any("rms_norm: refuses" in n for n in names)  # its input validation, graded as refusal cases
    assert any("gradcheck_in_float64[rms_norm]" in n for n in names)
    assert not any("layer_norm" in n or "adamw" in n for n in names)
    cases = [n for n in names if "test_matches_reference[" in n]
    assert len(cases) == sum(
        1
        for c in check.cases.public(module)[1]
        if check.cases.spec_for(c, check.cases.public(module)[0]).api == "rms_norm"
    )

    out = StringIO()
    assert not check.check(module, "learner", out, function="rms_nrm")
    assert "has no function 'rms_nrm'" in out.getvalue() and "rms_norm, layer_norm" in out.getvalue()

    vector_add = find_module("missing-elements/01-vector-add")
    out = StringIO()
    assert not check.check(vector_add, "learner", out, function="add")
    assert "Public tests of add(): 0 of" in out.getvalue() and "Not yet" in out.getvalue()
    assert not (tmp_path / "progress.json").exists()


def test_check_of_one_function_says_what_its_failing_cases_share(monkeypatch):
    """make check K=add prints the summary across the cases, as the whole module's check does:
    here exactly the non-contiguous cases fail."""
    from io import StringIO

    from grader.learn import check

    module = find_module("missing-elements/01-vector-add")
    spec, public = check.cases.public(module)
    results = [
        (
            f"test_matches_reference[{case.name}]",
            "failed" if case.params.get("layout") == "strided" else "passed",
            "wrong values",
        )
        for case in public
        if check.cases.spec_for(case, spec).api == "add" and not case.cuda_only
    ]
    monkeypatch.setattr(check, "run_public_tests", lambda module, impl, function=None: results)
    out = StringIO()
    assert not check.check(module, "solutions", out, function="add")
    assert "Across the cases: exactly the cases where" in out.getvalue() and "contiguous" in out.getvalue()


def test_check_of_one_part_runs_only_that_part_s_tests():
    """make check M=mastery/04 K=optimizer: the cases of adamw, sgd and unscale_grads and the tests
    that name them, nothing of the backward passes or the scan."""
    from io import StringIO

    from grader.learn import check

    module = find_module("mastery/04-training-kernels")
    parts = {part.name: part for part in check.cases.parts(module)}
    assert list(parts) == ["backward", "optimizer", "scan"]
    assert sum(part.weight for part in parts.values()) == pytest.approx(1.0)
    names = _collected(module, "optimizer")
    assert (
        any("adamw" in n for n in names) and any("sgd" in n for n in names) and any("unscale_grads" in n for n in names)
    )
    assert not any(word in n for n in names for word in ("rms_norm", "layer_norm", "selective_scan", "dropout"))
    spec, public = check.cases.public(module)
    assert sum("test_matches_reference[" in n for n in names) == sum(
        check.cases.spec_for(c, spec).api in parts["optimizer"].functions for c in public
    )

    out = StringIO()
    assert not check.check(module, "learner", out, function="optimiser")
    assert "its parts are backward, optimizer, scan" in out.getvalue()


def test_sanitize_passes_everything_after_it_to_the_sanitizer(tmp_path):
    """`python -m grader sanitize --tool initcheck script.py -v`: options of the tool and the
    script's own arguments both reach grader.learn.sanitizer."""
    from grader.learn import sanitizer

    if sanitizer.find_tool() is not None:
        pytest.skip("compute-sanitizer is installed here: the GPU tests run it for real")
    result = _grader("sanitize", "--tool", "initcheck", str(tmp_path / "script.py"), "-v")
    assert result.returncode == 2
    assert "compute-sanitizer was not found" in result.stdout + result.stderr
    usage = _grader("sanitize", "--help")
    assert "--tool {memcheck,initcheck,racecheck,synccheck,gsan}" in usage.stdout


@pytest.mark.skipif(device.is_cuda(), reason="on a GPU the kernel compiles for real")
def test_a_kernel_a_gpu_would_not_compile_is_not_done_on_a_cpu(tmp_path, monkeypatch):
    """Every public test passes under the interpreter, but Triton's compiler refuses the kernel
    (a `break` in its loop): make check says so, names the line, and the module is not done."""
    monkeypatch.setattr(progress, "STORE", tmp_path / "progress.json")
    module = find_module("missing-elements/01-vector-add")
    source = (module.solution_dir / "kernel.py").read_text()
    anchor = "    offsets = block_start + tl.arange(0, BLOCK_SIZE)\n"
    assert anchor in source
    folder = tmp_path / module.track / module.slug
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text(source.replace(anchor, anchor + "    for _ in range(0, 1):\n        break\n"))
    result = _grader("check", module.id, "--impl", str(tmp_path))
    assert result.returncode == 1, result.stdout
    assert re.search(r"Public tests: (\d+) of \1 pass", result.stdout), result.stdout
    text = " ".join(result.stdout.split())
    assert "would not run on an H100 (sm_90)" in text
    break_line = source[: source.index(anchor)].count("\n") + 3  # the anchor, the loop, then its break
    assert f"(line {break_line} of kernel.py): unsupported AST node type: Break" in text
    assert "cannot break or continue" in text  # what it means
    assert "a GPU would not compile or launch the kernel" in text


def test_bench_against_takes_one_list_of_names_and_leaves_the_module_alone(monkeypatch):
    from grader import cli

    seen = []
    monkeypatch.setattr(cli, "cmd_bench", lambda args: seen.append(args) or 0)
    assert cli.main(["bench", "--against", "compile,liger", "mastery/04-training-kernels"]) == 0
    assert cli.main(["bench", "mastery/04-training-kernels", "--against", "compile liger"]) == 0
    assert cli.main(["bench", "mastery/04-training-kernels"]) == 0
    assert [(a.module, list(a.against)) for a in seen] == [
        ("mastery/04-training-kernels", ["compile", "liger"]),
        ("mastery/04-training-kernels", ["compile", "liger"]),
        ("mastery/04-training-kernels", []),
    ]
