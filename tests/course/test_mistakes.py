"""Typical mistakes, planted into each reference (solutions/<module>/mistakes.py): the public tests
must catch every one on several cases, and what the learner reads must name its cause."""

import pytest
import triton

from grader.authoring import kill_table, mistakes
from grader.core import cases, device
from grader.core.checks import across, run_case
from grader.core.loading import load_kernel
from grader.core.markers import file_parts, modules_with_solutions

MODULES = modules_with_solutions()
PLANTED = [(module, mistake) for module in MODULES for mistake in mistakes.for_module(module)]
MIN_MISTAKES, MIN_FAILING_CASES, FAILURES_READ = 5, 3, 3


@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_every_module_lists_its_typical_mistakes(module):
    listed = mistakes.for_module(module)
    assert len(listed) >= MIN_MISTAKES, f"{module.id} lists {len(listed)} typical mistakes; add more."
    source = (module.solution_dir / "kernel.py").read_text()
    for mistake in listed:
        assert mistake.apply(source) != source


PARTED = [m for m in MODULES if file_parts((m.solution_dir / "kernel.py").read_text())]


@pytest.mark.parametrize("module", PARTED, ids=[m.id for m in PARTED])
def test_every_part_of_a_module_lists_its_typical_mistakes(module):
    """A module of several exercises (``# PART`` markers): each part is graded on its own, so each
    lists its own mistakes, counted by the part whose lines hold the text a mistake changes."""
    source = (module.solution_dir / "kernel.py").read_text()
    counts = {part.number: 0 for part in file_parts(source)}
    for mistake in mistakes.for_module(module):
        line = source[: source.index(mistake.before)].count("\n") + 1
        counts.update(
            {
                part.number: counts[part.number] + 1
                for part in file_parts(source)
                if part.first_line <= line <= part.last_line
            }
        )
    few = {number: count for number, count in counts.items() if count < MIN_MISTAKES}
    assert not few, f"{module.id}: these parts list fewer than {MIN_MISTAKES} typical mistakes: {few}"


def test_a_mistake_that_does_not_match_the_reference_is_refused():
    mistake = mistakes.Mistake("nothing", "no such text", "x", cause="x")
    with pytest.raises(ValueError, match="occurs 0 times"):
        mistake.apply("source")


@pytest.mark.parametrize("module,mistake", PLANTED, ids=[f"{m.id}: {k.name}" for m, k in PLANTED])
def test_planted_mistake_is_caught_and_named(module, mistake, tmp_path, monkeypatch):
    if mistake.gpu_only and not device.is_cuda():
        pytest.skip(mistake.gpu_only)
    if mistake.interpreter_only and device.is_cuda():
        pytest.skip(mistake.interpreter_only)
    # Tuning changes speed, not results: on a GPU, every planted kernel would otherwise tune
    # every config for every case's shape.
    monkeypatch.setattr(triton, "autotune", triton.autotune)  # restored after the test
    device.run_first_autotune_config()
    planted = tmp_path / "kernel.py"
    planted.write_text(mistake.apply((module.solution_dir / "kernel.py").read_text()))
    if mistake.caught_by:  # right values: the public test function that catches it, as `make check` runs it
        failing, said = kill_table.failing_functions(module, tmp_path, only=mistake.caught_by)
        assert failing == [mistake.caught_by], f"{mistake.name!r} is not caught by {mistake.caught_by}:\n{said[-3000:]}"
        assert mistake.named_by(said), (
            f"{mistake.caught_by} does not name the cause ({mistake.cause!r}):\n{said[-3000:]}"
        )
        return
    spec, public = cases.public(module)
    kernel = load_kernel(module, planted)
    results = []
    for case in _in_reading_order(module, mistake, spec, public):
        results.append(run_case(kernel.api(cases.spec_for(case, spec).api), spec, case))
        failing = [r for r in results if not r.passed]
        if len(failing) >= MIN_FAILING_CASES and mistake.named_by(
            "\n".join(r.message for r in failing[:FAILURES_READ])
        ):
            return  # caught, and the first failures a learner reads already name the cause
    failing = [r for r in results if not r.passed]
    assert len(failing) >= MIN_FAILING_CASES, (
        f"{mistake.name!r} fails only {len(failing)} public case(s): "
        f"{[r.case.name for r in failing]}; add cases that catch it."
    )
    summary = across(spec, [(r.case, r.passed) for r in results]) or ""
    read = "\n".join([summary] + [r.message for r in failing[:FAILURES_READ]])
    assert mistake.named_by(read), (
        f"What a learner reads for {mistake.name!r} does not name its cause ({mistake.cause!r}):\n{read}"
    )


def _in_reading_order(module, mistake, spec, public) -> list:
    """The public cases in the order a learner reads their failures. A module of several parts is
    checked part by part (`make check K=<part>`), so the cases of the part whose code the mistake
    changes come first (which also spares running every other part's passing cases first)."""
    ordered = cases.for_mode(public, device.is_cuda())
    source = (module.solution_dir / "kernel.py").read_text()
    line = source[: source.index(mistake.before)].count("\n") + 1
    number = next((p.number for p in file_parts(source) if p.first_line <= line <= p.last_line), None)
    declared = cases.parts(module)
    if number is None or number > len(declared):
        return ordered
    mine = set(declared[number - 1].functions)
    first = [case for case in ordered if cases.spec_for(case, spec).api in mine]
    return first + [case for case in ordered if case not in first]
