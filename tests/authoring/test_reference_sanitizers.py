"""The references as clean controls under the GPU's tools, on a CPU: which cases a run takes, that
a run of a reference passes them (and says so), the command lines the tools wrap it in, how the
tools' runs are fanned out without the checker, and the refusal where there is no GPU."""

import sys

import pytest

from grader.authoring import reference_sanitizers as refs
from grader.authoring import sanitizers
from grader.core import cases, device
from grader.core.catalog import MODULES, find_module

TRAINING = find_module("mastery/04-training-kernels")


def test_every_function_gets_its_first_cases_that_the_interpreter_runs():
    picked = refs.picked_cases(TRAINING, 2)
    module_spec, found = cases.public(TRAINING)  # loaded afresh: compare by names, not identity
    wanted = []
    for spec in cases.specs_of(module_spec, found):
        runnable = [c for c in found if cases.spec_for(c, module_spec) is spec and not c.cuda_only]
        wanted += [(spec.api, case.name) for case in runnable[:2]]
    assert [(spec.api, case.name) for spec, case in picked] == wanted
    assert len({api for api, _ in wanted}) > 5 and not any(case.cuda_only for _, case in picked)  # no GPU here


def test_a_module_is_named_by_its_id_or_its_log_folder_and_nothing_else():
    vector_add = MODULES[0]
    assert refs.module_named(vector_add.id) is vector_add
    assert refs.module_named(refs.entry_name(vector_add)) is vector_add
    assert "/" not in refs.entry_name(vector_add)
    with pytest.raises(LookupError, match="no module is named 'vector-ad'"):
        refs.module_named("vector-ad")


def test_a_plain_run_passes_the_reference_and_names_each_case(capsys):
    assert refs.plain("missing-elements/01-vector-add", 1) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.endswith(": passed") for line in lines) and lines[0].startswith("add ")


def test_a_plain_run_fails_when_a_case_fails(monkeypatch, capsys):
    real = refs.checks.run_case
    monkeypatch.setattr(
        refs.checks, "run_case", lambda fn, spec, case: real(lambda *a, **k: fn(*a, **k) * 2, spec, case)
    )
    assert refs.plain("missing-elements/01-vector-add", 1) == 1
    assert "FAILED" in capsys.readouterr().out


def test_each_tool_wraps_the_plain_run_of_one_reference():
    command = refs.command_for(3)
    plain_run = [str(refs.SCRIPT), "--plain", "mastery-03-attention-kernels", "--cases", "3"]
    assert command("memcheck", "mastery-03-attention-kernels") == [
        "compute-sanitizer", "--tool", "memcheck", "--error-exitcode", str(sanitizers.ERROR_EXIT), sys.executable,
        *plain_run,
    ]  # fmt: skip
    assert command("gsan", "mastery-03-attention-kernels") == [sys.executable, "-m", "triton.tools.gsan", *plain_run]


def test_the_tools_run_without_the_checker_and_keep_its_verdict(tmp_path, monkeypatch):
    ran = []

    def fake(command, *, env, timeout, log):
        ran.append(command[0])
        return sanitizers.Finished("========= ERROR SUMMARY: 0 errors\n", 0, 0.1, False)

    monkeypatch.setattr(sanitizers, "run_process", fake)
    entry = sanitizers.Entry("missing-elements-01-vector-add", "", 0, ())
    entry.checker = sanitizers.Verdict(verdict=refs.CHECKED_IN_THE_SUITE)
    note = sanitizers.run(
        [entry], tmp_path, jobs=2, command_for=lambda tool, name: [tool, name], with_checker=False, progress=len
    )
    tools = [t for t in sanitizers.TOOLS if t != "gsan" or not note]
    assert sorted(ran) == sorted(tools)
    assert entry.checker.verdict == refs.CHECKED_IN_THE_SUITE and all(r.errors == 0 for r in entry.tools.values())
    lines = sanitizers.totals([entry], note)
    assert lines[1] == "false alarms on the 1 clean controls: checker 0, tools 0"
    assert not any("no verdict" in line for line in lines)


@pytest.mark.skipif(device.is_cuda(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_the_command_refuses_and_says_where_the_references_are_checked(tmp_path, capsys):
    assert refs.main(["--sanitizers", str(tmp_path / "out")]) == 2
    said = capsys.readouterr().err
    assert "no CUDA GPU here" in said and "make test" in said
    assert not (tmp_path / "out").exists()


def test_the_results_name_the_machine_and_print_the_table_totals_and_notes(tmp_path, monkeypatch, capsys):
    import json

    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a fake GPU")
    entry = sanitizers.Entry("missing-elements-01-vector-add", "", 0, ())
    entry.checker = sanitizers.Verdict(verdict=refs.CHECKED_IN_THE_SUITE)
    entry.tools = {"memcheck": sanitizers.Report(errors=0, returncode=0)}
    sanitizers.publish([entry], tmp_path, "", {"cases_per_function": "1"}, ["a note"])
    saved = json.loads((tmp_path / "sanitizers.json").read_text())
    assert saved["gpu"] == "a fake GPU" and saved["gsan"] == "ran" and saved["cases_per_function"] == "1"
    assert saved["entries"][0]["name"] == "missing-elements-01-vector-add"
    out = capsys.readouterr().out
    assert out.startswith("entry") and "false alarms on the 1 clean controls: checker 0, tools 0" in out
    assert "\na note\n" in out and f"the results in {tmp_path / 'sanitizers.json'}" in out


def test_the_modules_with_the_most_cases_start_first():
    order = refs.heaviest_first([MODULES[0], TRAINING, MODULES[2]], 1)
    assert order[0] is TRAINING
    sizes = [len(refs.picked_cases(m, 1)) for m in order]
    assert sizes == sorted(sizes, reverse=True)
