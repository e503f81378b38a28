"""The view of the class (grader/grade/overview.py): per module, how many pass each case (hidden
cases by number only, never their text), the most common diagnoses, integrity findings and
performance; as a static page and as Markdown, every text from a record escaped. Records are built
here; a few seconds."""

from __future__ import annotations

import re

from grader.core.catalog import find_module
from grader.grade import overview
from grader.grade.pipeline import Row

VECTOR_ADD = find_module("missing-elements/01-vector-add")
SOFTMAX = find_module("missing-elements/03-softmax")
NO_GPU = {"graded": False, "reason": "not graded: needs a CUDA GPU"}
SECRET_NAME = "hidden: n=987654 fp16"  # what a hidden row must never show, even if a record held it
SECRET_MESSAGE = "Hidden case failed at n=987654"


def _record(
    public: dict[str, str | None], hidden: list[bool], performance=None, integrity=None, starting=False, load_error=None
) -> dict:
    """Public cases {label: None when it passes, else its message}; hidden cases pass or fail."""
    rows = [
        {"name": label, "visibility": "public", "passed": message is None, "message": message or ""}
        for label, message in public.items()
    ]
    rows += [
        {"name": SECRET_NAME, "visibility": "hidden", "passed": ok, "message": "" if ok else SECRET_MESSAGE}
        for ok in hidden
    ]
    return {
        "module": VECTOR_ADD.id,
        "cases": rows,
        "integrity": integrity,
        "starting_kernel": starting,
        "load_error": load_error,
        "performance": dict(performance or NO_GPU),
        "todos": [],
    }


def _rows() -> list[Row]:
    tail = "output: 3 of 1000 elements are wrong, all past index 997\nthe last, partial block is not launched"
    tail_too = "output: 24 of 1024 elements are wrong, all past index 1000\nthe last, partial block is not launched"
    return [
        Row("ada", "a", VECTOR_ADD, _record({"size 1": None, "tail: n=1000": None}, [True, True])),
        Row("bob", "a", VECTOR_ADD, _record({"size 1": None, "tail: n=1000": tail}, [True, False])),
        Row("cyd", "a", VECTOR_ADD, _record({"size 1": tail_too, "tail: n=1000": tail}, [False, False], starting=True)),
        Row(
            "dee",
            "a",
            VECTOR_ADD,
            _record(
                {"size 1": "<script>alert('x')</script> | [a](b)", "tail: n=1000": None},
                [True, True],
                integrity={"violation": "torch", "message": "computed with PyTorch"},
            ),
        ),
        Row("eve", "a", VECTOR_ADD, None, problem="kernel.py is a link"),
    ]


def test_cases_are_counted_per_label_and_hidden_ones_by_number_only():
    [view] = overview.summarise(_rows())
    assert view.module == VECTOR_ADD.id and view.submissions == 4 and view.no_record == 1
    tallies = [(t.name, t.passed, t.total) for t in view.cases.values()]
    assert tallies == [("size 1", 2, 4), ("tail: n=1000", 2, 4), ("hidden case 1", 3, 4), ("hidden case 2", 2, 4)]
    assert (view.all_pass, view.starting_kernels) == (1, 1)  # dee passes all, but has an integrity finding
    page = overview.page([view])
    text = "\n".join(overview.markdown([view]))
    for shown in (page, text):
        assert "hidden case 2" in shown
        assert "987654" not in shown and SECRET_MESSAGE not in shown


def test_diagnoses_are_counted_by_first_line_numbers_aside():
    [view] = overview.summarise(_rows())
    top = view.top_diagnoses()
    assert [(d.cases, len(d.students)) for d in top] == [(3, 2), (1, 1)]
    assert top[0].text == "output: 3 of 1000 elements are wrong, all past index 997"  # as first seen
    assert "the last, partial block" not in overview.page([view])  # first lines only


def test_integrity_findings_and_starting_kernels_are_summarised():
    [view] = overview.summarise(_rows())
    assert view.integrity == {"computed with PyTorch": ["dee"]}
    summary = overview.summary_text(view)
    assert "1 still the unchanged starting kernel" in summary and "1 with an integrity finding" in summary
    assert "1 not graded (no run-phase record)" in summary
    refused = _record(
        {"size 1": None},
        [True],
        integrity={"violation": "policy", "message": "kernel.py was refused\n  line 3: import os"},
    )
    [view] = overview.summarise([Row("fay", "a", VECTOR_ADD, refused)])
    assert list(view.integrity) == ["refused by the policy gate: kernel.py was refused"]


def test_performance_is_summarised_where_graded_and_said_not_graded_otherwise():
    [view] = overview.summarise(_rows())
    assert overview.performance_text(view) == "not graded: needs a CUDA GPU (4 submission(s))"
    timed = [
        Row(name, "a", VECTOR_ADD, _record({"size 1": None}, [True], performance=performance))
        for name, performance in [
            ("ada", {"graded": True, "credit": 1.0, "ratio": 1.2}),
            ("bob", {"graded": True, "credit": 0.0, "ratio": 0.3}),
            ("cyd", {"graded": True, "credit": 0.5, "ratio": 0.6}),
        ]
    ]
    [view] = overview.summarise(timed)
    assert overview.performance_text(view) == (
        "3 timed, median speed 0.60 x the reference's; 1 with full points, 1 with none"
    )
    # a record with a ratio and no credit: the module's own bar decides (vector-add: full from 0.8 x)
    ratio_only = Row(
        "dee", "a", VECTOR_ADD, _record({"size 1": None}, [True], performance={"graded": True, "ratio": 0.9})
    )
    [view] = overview.summarise([*timed, ratio_only])
    assert view.credits == [1.0, 0.0, 0.5, 1.0]


def test_every_record_text_is_escaped_and_the_page_needs_no_script(tmp_path):
    views = overview.write(_rows(), tmp_path / "overview.html")
    page = (tmp_path / "overview.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "&lt;script&gt;" in page
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|\bhref=", page)  # nothing fetched
    text = "\n".join(overview.markdown(views))
    assert "<script" not in text and "&lt;script&gt;" in text
    assert "\\| \\[a\\](b)" in text  # a table separator and a link, both as literal text
    assert overview.md("a|b\nc") == "a\\|b c"


def test_modules_get_a_view_each_in_order():
    rows = [Row("ada", "s", SOFTMAX, {**_record({"rows": None}, [True]), "module": SOFTMAX.id}), *_rows()]
    assert [v.module for v in overview.summarise(rows)] == [VECTOR_ADD.id, SOFTMAX.id]
    assert "No submission was graded" in overview.page([])


def test_a_module_not_graded_on_this_machine_says_so_and_why():
    shared_memory = find_module("optimization/03-shared-memory")
    every = {"size 1": None, "tail: n=1000": None}

    def row(name, given=True, **record):
        rec = {**_record(every, [True], **record), "module": shared_memory.id}
        return Row(name, "o", shared_memory, {**rec, "given": [r["name"] for r in rec["cases"]] if given else []})

    cheat = {"violation": "torch", "message": "computed with PyTorch"}
    [view] = overview.summarise([row("ada"), row("bob", starting=True), row("cyd", integrity=cheat)])
    assert view.not_graded_here == 2  # the integrity finding is graded: 0 of everything
    summary = overview.summary_text(view)
    assert "2 not graded: needs a GPU (0 of 0): the starting kernel already passes every case" in summary
    assert "grade this module on a GPU" in summary and "grade this module on a GPU" in overview.page([view])
    timed = {"graded": True, "credit": 1.0, "ratio": 1.2}
    [view] = overview.summarise([row("ada", performance=timed), row("bob", given=False)])
    assert view.not_graded_here == 0 and "not graded: needs a GPU" not in overview.summary_text(view)
