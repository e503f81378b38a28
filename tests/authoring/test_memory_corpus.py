"""The memory-bug corpus against the interpreter's memory checker: every planted bug is found with
the kind planted and at the planted line, the clean controls give nothing, and the checker misses
exactly the entries documented as missed (a regression and a silent fix both fail here)."""

from pathlib import Path

import pytest

from grader.authoring import memory_corpus
from grader.authoring.memory_corpus import BUGS, GPU_TOOLS, KINDS
from grader.core import device

pytestmark = pytest.mark.skipif(
    device.is_cuda(), reason="the memory checker watches the interpreter; on a GPU compute-sanitizer does its job"
)

DOCUMENTED_MISSES = {"wrong-stride-in-view-gap", "pointer-into-neighbour"}


@pytest.fixture(scope="module")
def results():
    return {bug.name: memory_corpus.checked(bug) for bug in BUGS}


def test_the_corpus_covers_every_class_with_at_least_30_bugs_and_some_clean_controls():
    bugs = [b for b in BUGS if not b.clean]
    assert len(bugs) >= 30 and sum(b.clean for b in BUGS) >= 5
    assert {b.kind for b in bugs} == set(KINDS)
    assert len({b.name for b in BUGS}) == len(BUGS), "names are unique (--only picks by name)"
    for bug in BUGS:
        assert set(bug.gpu_tools) <= set(GPU_TOOLS), bug.name
        assert bug.clean or bug.line > 0, f"{bug.name}: no line marked {memory_corpus.MARKER!r}"
        assert not (bug.clean and bug.gpu_tools), bug.name


@pytest.mark.parametrize("bug", [b for b in BUGS if not b.clean and not b.missed_by_checker], ids=lambda b: b.name)
def test_each_bug_is_found_with_its_kind_at_the_planted_line(results, bug):
    result = results[bug.name]
    assert not result.error, result.error
    finding = result.finding
    assert finding is not None and finding.kind == bug.kind, [str(f) for f in result.findings]
    if bug.kind == "unwritten-output":  # named by tensor and elements, not by a line
        assert finding.tensor and "were never written" in str(finding)
    else:
        assert (Path(finding.file).name, finding.line) == ("memory_corpus.py", bug.line), str(finding)
        assert f"at line {bug.line} of memory_corpus.py" in str(finding)
    assert result.as_documented


def test_the_clean_controls_give_no_finding(results):
    alarms = {b.name: [str(f) for f in results[b.name].findings] or results[b.name].error for b in BUGS if b.clean}
    assert {name: found for name, found in alarms.items() if found} == {}


def test_the_checker_misses_exactly_the_documented_entries(results):
    missed = {b.name for b in BUGS if not b.clean and not results[b.name].caught}
    assert missed == DOCUMENTED_MISSES == {b.name for b in BUGS if b.missed_by_checker}
    for name in DOCUMENTED_MISSES:
        assert results[name].findings == [] and not results[name].error


def test_the_runner_prints_the_table_and_lists_the_entries(capsys):
    assert memory_corpus.main(["--only", "load-tail-no-mask,clean-in-place", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "load-tail-no-mask" in out and "yes (out-of-bounds)" in out and "clean-in-place" in out
    assert "false alarms on the 1 clean controls: 0" in out and "x the plain interpreter" in out
    assert memory_corpus.main(["--tool", "plain", "--only", "sum-with-plain-store"]) == 0
    assert "sum-with-plain-store" in capsys.readouterr().out
    assert memory_corpus.main(["--list"]) == 0
    listing = capsys.readouterr().out
    assert all(bug.name in listing for bug in BUGS) and "initcheck" in listing
