"""The comparison of the memory checker with triton-viz: reading triton-viz's records, the verdicts,
the table and the totals (pure, no triton-viz needed), the exit when triton-viz is missing, and, where
triton-viz is installed, two corpus entries run through its sanitizer."""

import sys
from pathlib import Path

import pytest

from grader.authoring import memory_corpus, viz_compare
from grader.authoring.viz_compare import Row, VizFinding, VizResult
from grader.core import device
from grader.core.memcheck import Finding

CORPUS = memory_corpus.__file__


def _row(name, kind, checker_caught, viz_caught, **times):
    planted = 0 if not kind else 10
    return Row(
        name=name,
        kind=kind,
        planted=planted,
        checker=f"yes ({kind})" if checker_caught else ("clean" if not kind else "MISSED"),
        checker_caught=checker_caught,
        checker_line=planted if checker_caught else 0,
        viz=f"yes ({kind})" if viz_caught else ("clean" if not kind else "missed"),
        viz_caught=viz_caught,
        viz_line=planted if viz_caught else 0,
        **times,
    )


def test_the_line_is_the_deepest_frame_in_the_corpus_file():
    frames = [("/x/viz_compare.py", 5), (CORPUS, 120), ("/y/other.py", 9), (CORPUS, 117), ("/z/patch.py", 3)]
    assert viz_compare.corpus_line(frames) == 117
    assert viz_compare.corpus_line([("/x/viz_compare.py", 5)]) == 0
    assert viz_compare.corpus_line([]) == 0


def test_a_record_becomes_a_finding_with_the_element_it_reached():
    past_end = viz_compare.finding("Store", "out_ptr", 1000 + 4 * 100, 1000, 4, [(CORPUS, 117)])
    assert past_end == VizFinding("store", "out_ptr", 100, 117)
    assert str(past_end) == "store of out_ptr[100] at line 117"
    before_start = viz_compare.finding("Load", "x_ptr", 996, 1000, 4, [])
    assert (before_start.op, before_start.element, before_start.line) == ("load", -1, 0)
    assert before_start.kind == "out-of-bounds" and str(before_start) == "load of x_ptr[-1]"


@pytest.mark.parametrize(
    ("kind", "found", "error", "expected"),
    [
        ("out-of-bounds", ["out-of-bounds"], "", "yes (out-of-bounds)"),
        ("race", [], "", "missed"),
        ("misaligned", ["out-of-bounds"], "", "wrong kind (out-of-bounds)"),
        ("", [], "", "clean"),
        ("", ["out-of-bounds"], "", "FALSE ALARM (out-of-bounds)"),
        ("out-of-bounds", ["out-of-bounds"], "NotImplementedError: x", "ERROR NotImplementedError: x"),
    ],
)
def test_the_verdict_reads_like_the_checkers(kind, found, error, expected):
    assert viz_compare.viz_verdict(kind, found, error) == expected


def test_an_error_is_one_short_line():
    assert viz_compare.short_error(ValueError("first\nsecond")) == "ValueError: first"
    assert viz_compare.short_error(SystemExit()) == "SystemExit"
    long = viz_compare.short_error(RuntimeError("y" * 200), limit=40)
    assert len(long) == 40 and long.endswith("...")


def test_a_row_holds_both_verdicts_and_lines():
    bug = memory_corpus.named("store-tail-no-mask")
    checked = memory_corpus.Result(bug, [Finding("out-of-bounds", "m", line=bug.line)], seconds=0.4)
    viz = VizResult(bug, [VizFinding("store", "out_ptr", 100, bug.line)], seconds=0.2)
    r = viz_compare.row(checked, viz, plain_s=0.1)
    assert (r.checker, r.checker_caught, r.checker_line) == ("yes (out-of-bounds)", True, bug.line)
    assert (r.viz, r.viz_caught, r.viz_line) == ("yes (out-of-bounds)", True, bug.line)
    assert r.viz_detail == f"store of out_ptr[100] at line {bug.line}"
    missed = viz_compare.row(checked, VizResult(bug, error="NotImplementedError: atomic"), plain_s=0.1)
    assert missed.viz == "ERROR NotImplementedError: atomic" and not missed.viz_caught and missed.viz_line == 0


def test_a_clean_control_with_a_finding_is_a_false_alarm_and_not_a_catch():
    bug = memory_corpus.named("clean-masked-copy")
    r = viz_compare.row(memory_corpus.Result(bug), VizResult(bug, [VizFinding("load", "x_ptr", 100, 0)]), 0.1)
    assert r.viz == "FALSE ALARM (out-of-bounds)" and r.viz_alarm and not r.viz_caught
    assert r.checker == "clean" and not r.checker_alarm


def test_the_table_has_a_header_a_rule_and_a_line_per_entry_in_aligned_columns():
    rows = [
        _row("load-tail-no-mask", "out-of-bounds", True, True, plain_s=0.1, checker_s=0.5, viz_s=0.2),
        _row("clean-2d-tiles", "", False, False, plain_s=0.2, checker_s=0.4, viz_s=0.1),
    ]
    lines = viz_compare.table(rows).splitlines()
    assert len(lines) == 4 and set(lines[1]) <= {"-", " "}
    assert lines[0].split()[:3] == ["name", "class", "planted"]
    verdict = ["yes", "(out-of-bounds)", "10"]
    assert lines[2].split() == ["load-tail-no-mask", "out-of-bounds", "10", *verdict, *verdict, "0.100", "5.0x", "2.0x"]
    assert lines[3].split()[:3] == ["clean-2d-tiles", "clean", "-"]
    class_column = lines[0].index("class")
    assert all(line[class_column - 2 : class_column] == "  " for line in lines[2:])


def test_the_totals_count_each_tool_by_class_and_name_what_only_one_catches():
    rows = [
        _row("a", "out-of-bounds", True, True, plain_s=1.0, checker_s=3.0, viz_s=2.0),
        _row("b", "out-of-bounds", False, True, plain_s=1.0, checker_s=3.0, viz_s=2.0),
        _row("c", "race", True, False, plain_s=1.0, checker_s=3.0, viz_s=2.0),
        _row("d", "race", False, False, plain_s=1.0, checker_s=3.0, viz_s=2.0),
        Row("e", "", 0, "FALSE ALARM (race)", False, 7, "clean", False, 0, plain_s=1.0, checker_s=3.0, viz_s=2.0),
    ]
    text = viz_compare.totals(rows)
    assert text[0] == "bugs caught: checker 2 of 4, triton-viz 2 of 4"
    assert "  out-of-bounds (2): checker 1, triton-viz 2" in text
    assert "  race (2): checker 1, triton-viz 0" in text
    assert "caught at the planted line (unwritten outputs have none): checker 2, triton-viz 2" in text
    assert "caught by triton-viz only: b" in text
    assert "caught by the checker only: c" in text
    assert "caught by neither: d" in text
    assert "false alarms on the 1 clean controls: checker 1 (e), triton-viz 0 (none)" in text
    assert "entries triton-viz stopped on with an error: none" in text
    assert text[-1] == "time: plain interpreter 5.00 s; checker 15.00 s (3.00 x); triton-viz 10.00 s (2.00 x)"


def test_without_triton_viz_the_command_says_how_to_install_it_and_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "triton_viz", None)  # makes `import triton_viz` fail
    assert viz_compare.main(["--only", "load-tail-no-mask"]) == 2
    err = capsys.readouterr().err
    assert "pip install triton-viz" in err and err.count("\n") == 1


@pytest.mark.skipif(device.is_cuda(), reason="triton-viz's sanitizer and the checker watch the interpreter")
def test_two_entries_through_triton_viz_a_planted_overrun_and_a_clean_control():
    if viz_compare.unavailable():
        pytest.skip("triton-viz is not installed (pip install triton-viz, or PYTHONPATH to a folder that holds it)")
    original = memory_corpus.load_tail_kernel
    bug = memory_corpus.named("load-tail-no-mask")
    overrun = viz_compare.under_viz(bug)
    assert not overrun.error, overrun.error
    assert overrun.findings and {f.kind for f in overrun.findings} == {"out-of-bounds"}
    assert overrun.findings[0].line == bug.line and overrun.findings[0].op == "load"
    clean = viz_compare.under_viz(memory_corpus.named("clean-masked-copy"))
    assert (clean.findings, clean.error) == ([], "")
    assert memory_corpus.load_tail_kernel is original, "the corpus's kernels are restored after a run"
    after = memory_corpus.checked(bug).finding  # and the checker still names the kernel's line
    assert (Path(after.file).name, after.line) == ("memory_corpus.py", bug.line), str(after)
