"""For every module with a reference solution: the stub is in sync and has its TODOs, the
untouched stub fails with the TODO message, and the reference passes every hidden case.
(The public cases run the reference through tracks/*/test_kernel.py with --impl=solutions.)"""

import re

import pytest

from grader.core import cases, device
from grader.core.checks import check_case, run_case
from grader.core.loading import load_kernel
from grader.core.markers import file_parts, modules_with_solutions, open_todos, stub_for, todos_behind

MODULES = modules_with_solutions()
IDS = [m.id for m in MODULES]


def test_track_one_is_complete():
    assert {m.slug for m in MODULES if m.track == "missing-elements"} == {
        "01-vector-add",
        "02-matrix-mul",
        "03-softmax",
        "04-layer-norm",
        "05-conv2d",
    }


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_committed_stub_is_in_sync(module):
    committed = (module.learner_dir / "kernel.py").read_text()
    assert committed == stub_for(module), f"{module.id}: run `make stubs` and commit the result"


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_stub_has_the_promised_todos(module):
    stub = (module.learner_dir / "kernel.py").read_text()
    todos = open_todos(stub)
    assert len(todos) >= max(module.missing, 1)
    # 1, 2, 3, ... through the file; in a file with parts 1.1, 1.2, ..., 2.1, ...: afresh in each part
    expected = []
    for part in file_parts(stub) or [None]:
        inside = [t for t in todos if part is None or part.first_line <= t.line <= part.last_line]
        expected += [(part and part.number, n) for n in range(1, len(inside) + 1)]
    assert [(t.part, t.number) for t in todos] == expected


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_the_stubs_parts_are_the_graded_parts(module):
    """The ``# PART`` markers of kernel.py and the parts its tests grade (``PARTS``) are the same,
    in the same order, and each part of the file defines the functions graded in that part."""
    stub = stub_for(module)
    graded = [part for part in cases.parts(module) if part.name]
    marked = file_parts(stub)
    assert [p.title for p in marked] == [p.title for p in graded]
    defined = {m[1]: stub[: m.start()].count("\n") + 1 for m in re.finditer(r"(?m)^def (\w+)\(", stub)}
    for part, lines in zip(graded, marked):
        outside = [api for api in part.functions if not lines.first_line <= defined.get(api, 0) <= lines.last_line]
        assert not outside, f"{module.id}: {outside} belong to part {lines.number} but are not defined in it"


STARTS_CORRECT = [m for m in MODULES if m.track == "optimization"]  # correct but slow
SLOW_NOT_WRONG = {"debugging/03-performance-profiling"}  # its planted bugs are slowness


@pytest.mark.parametrize(
    "module", [m for m in MODULES if m not in STARTS_CORRECT], ids=[m.id for m in MODULES if m not in STARTS_CORRECT]
)
def test_untouched_stub_fails_with_the_todo_message(module):
    if module.id in SLOW_NOT_WRONG and device.is_cuda():
        pytest.skip(
            "its planted bugs make it slow, not wrong: the interpreter's traffic report shows them, "
            "and on a GPU its speed test does"
        )
    stub = load_kernel(module, "learner")
    spec, public_cases = cases.public(module)
    case = cases.for_mode(public_cases, device.is_cuda())[0]
    assert not run_case(stub.api(spec.api), spec, case).passed
    with pytest.raises(AssertionError) as failure:
        check_case(stub, spec, case)
    # The TODOs named are those the failing function reaches (its kernels, the file's top level).
    behind = todos_behind(stub.path.read_text(), stub.todos, cases.spec_for(case, spec).api)
    if not behind:  # the debugging track's kernels fail by their planted bugs; its TODOs are tools
        assert module.track == "debugging", f"no open TODO reaches {spec.api}() in the untouched stub"
        assert "still open" not in str(failure.value), "TODOs the failing function never reaches are no cause"
        return
    assert "TODO(s) still open in kernel.py" in str(failure.value) and str(behind[0]) in str(failure.value)


@pytest.mark.parametrize("module", STARTS_CORRECT, ids=[m.id for m in STARTS_CORRECT])
def test_untouched_slow_stub_is_correct_and_misses_its_bars_naming_a_todo(module):
    from grader.core.traffic import check_bar

    stub = load_kernel(module, "learner")
    spec, public_cases = cases.public(module)
    case = cases.for_mode(public_cases, device.is_cuda())[0]
    check_case(stub, spec, case)  # the starting kernel is correct
    bars = cases.traffic_bars(module)
    assert bars, f"{module.id} has no memory-traffic bars"
    if device.is_cuda():
        pytest.skip("the memory-traffic bars need the interpreter; the GPU speed test covers the rest")
    for bar in bars:
        with pytest.raises(AssertionError, match=r"See TODO \d+(\.\d+)? \(line \d+\)"):
            check_bar(stub, spec, bar)


def _hidden_cases():
    for module in MODULES:
        for case in cases.hidden(module):
            marks = [pytest.mark.cuda] if case.cuda_only else []
            yield pytest.param(module, case, id=f"{module.id}[{case.name}]", marks=marks)


@pytest.mark.parametrize("module, case", list(_hidden_cases()))
def test_reference_passes_hidden_case(module, case):
    spec, _ = cases.public(module)
    check_case(load_kernel(module, "solutions"), spec, case)


@pytest.mark.parametrize("module", MODULES, ids=IDS)
def test_module_has_hidden_cases_and_notebook(module):
    assert len(cases.hidden(module)) >= 4
    assert module.notebook.is_file()
    assert (module.learner_dir / "README.md").is_file()
