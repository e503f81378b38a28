import pytest

from grader.authoring.mistakes import Mistake
from grader.core.markers import MarkerError, file_parts, generate_stub, is_marker, open_todos, planted_bugs, todo_named

SOLUTION = """\
def f(x):
    # TODO: double x
    # HINT: multiply
    y = 2 * x
    # STUB: y = ...
    # END TODO
    # BUG: off by one
    z = y
    # STUB: z = y + 1
    # END BUG
    # TODO: return it
    return z
    # END TODO
"""


def test_regions_become_numbered_todos_hints_and_stub_lines():
    stub = generate_stub(SOLUTION)
    assert stub == (
        "def f(x):\n"
        "    # TODO 1: double x\n"
        "    #   Hint: multiply\n"
        "    y = ...\n"
        "    z = y + 1\n"
        "    # TODO 2: return it\n"
    )
    assert [(t.number, t.line, t.text) for t in open_todos(stub)] == [(1, 2, "double x"), (2, 6, "return it")]


def test_solution_itself_has_no_open_todos():
    assert open_todos(SOLUTION) == []


@pytest.mark.parametrize(
    "broken",
    [
        "# TODO: a\nx = 1\n",  # never closed
        "# END TODO\n",  # closed without opening
        "# TODO: a\n# TODO: b\n# END TODO\n",  # nested
        "# TODO: a\nx = 1\n# END BUG\n",  # wrong closer
    ],
)
def test_malformed_markers_are_reported(broken):
    with pytest.raises(MarkerError):
        generate_stub(broken)


PARTED = """\
import torch

# PART 1: the backward passes
def f(x):
    # TODO: double x
    y = 2 * x
    # STUB: y = ...
    # END TODO
    # TODO: return it
    return y
    # END TODO

# PART 2: the optimizer step
def g(x):
    # TODO: halve x
    return x / 2
    # END TODO
"""


def test_parts_number_their_todos_afresh_and_keep_their_marker_lines():
    stub = generate_stub(PARTED)
    assert stub == (
        "import torch\n"
        "\n"
        "# PART 1: the backward passes\n"
        "def f(x):\n"
        "    # TODO 1.1: double x\n"
        "    y = ...\n"
        "    # TODO 1.2: return it\n"
        "\n"
        "# PART 2: the optimizer step\n"
        "def g(x):\n"
        "    # TODO 2.1: halve x\n"
    )
    todos = open_todos(stub)
    assert [(t.part, t.number, t.label, t.line) for t in todos] == [
        (1, 1, "1.1", 5),
        (1, 2, "1.2", 7),
        (2, 1, "2.1", 11),
    ]
    assert str(todos[2]) == "TODO 2.1 (line 11): halve x"
    assert str(open_todos(generate_stub(SOLUTION))[1]) == "TODO 2 (line 6): return it"  # no parts: as before
    assert [(p.number, p.title, p.first_line, p.last_line) for p in file_parts(stub)] == [
        (1, "the backward passes", 3, 8),
        (2, "the optimizer step", 9, 11),
    ]
    assert [(p.first_line, p.last_line) for p in file_parts(PARTED)] == [(3, 12), (13, 17)]  # the solution's lines
    assert file_parts(SOLUTION) == [] and is_marker("# PART 2: the optimizer step") and not is_marker("# PARTS")
    with pytest.raises(MarkerError, match="PART 3 where PART 2 was expected"):
        file_parts(stub.replace("# PART 2:", "# PART 3:"))


def test_a_learners_file_keeps_each_todos_part_when_others_are_deleted():
    source = "# PART 2: b\n    # TODO 2.3: the third of part two\n# TODO 7: no part\n"
    assert [(t.part, t.number, t.label) for t in open_todos(source)] == [(2, 3, "2.3"), (None, 7, "7")]


def test_the_todo_a_failure_names_is_found_by_its_label():
    """`make check` suggests the TODO a failure names ("See TODO 2.1 (line 11)"), else the first."""
    todos = open_todos(generate_stub(PARTED))
    named = f"transpose() touches 32 sectors per load. See {todos[2]}."
    assert todo_named(todos, ["wrong values", named]) == todos[2]
    assert todo_named(todos, ["2 TODO(s) still open:\n  - TODO 1.2 (line 7): return it"]) == todos[0]
    assert todo_named(todos, ["See TODO 3.1 (line 9): gone"]) == todos[0]  # deleted since: the first
    assert todo_named([], [named]) is None
    plain = open_todos(generate_stub(SOLUTION))
    assert todo_named(plain, [f"See {plain[1]}"]) == plain[1]


@pytest.mark.parametrize(
    "broken, why",
    [
        (PARTED.replace("# PART 2:", "# PART 3:"), "PART 3 where PART 2 was expected"),  # a part skipped
        (
            PARTED.replace("# PART 1:", "# PART 2:").replace("# PART 2: the opt", "# PART 1: the opt"),
            "PART 2 where PART 1 was expected",
        ),  # out of order
        (
            PARTED.replace("    # TODO: return it\n", "    # TODO: return it\n# PART 2: early\n"),
            "inside the TODO region",
        ),  # a part begins inside a region
        (PARTED.replace("# PART 2: the optimizer step", "    # PART 2: the optimizer step"), "beginning of the line"),
        ("# TODO: a\nx = 1\n# END TODO\n" + PARTED, "TODO before PART 1"),
    ],
)
def test_parts_out_of_order_or_inside_a_region_are_refused(broken, why):
    with pytest.raises(MarkerError, match=why):
        generate_stub(broken)


def test_a_hand_edited_stub_is_recognised_and_a_generated_one_is_not(tmp_path):
    from grader.authoring.stubs import hand_edited

    target = tmp_path / "kernel.py"
    target.write_text("old stub\n")
    assert not hand_edited(target, "new stub\n", committed="old stub\n")  # untouched: regenerate
    target.write_text("my finished kernel\n")
    assert hand_edited(target, "new stub\n", committed="old stub\n")  # a learner's work: keep
    assert not hand_edited(target, "my finished kernel\n", committed="old stub\n")  # nothing to do
    assert hand_edited(target, "new stub\n", committed=None)  # no git to ask: keep it safe


def test_make_stubs_keeps_a_learners_kernel(monkeypatch, tmp_path):
    from grader.authoring import stubs
    from grader.core.catalog import find_module

    module = find_module("missing-elements/01-vector-add")
    learner = tmp_path / "tracks" / module.track / module.slug
    learner.mkdir(parents=True)
    (learner / "kernel.py").write_text("# my finished kernel\n")
    monkeypatch.setattr(type(module), "learner_dir", property(lambda self: learner))
    monkeypatch.setattr(stubs, "committed_text", lambda path: stubs.stub_for(module))
    changed, kept = stubs.write_all([module])
    assert (changed, kept) == ([], [learner / "kernel.py"])
    assert (learner / "kernel.py").read_text() == "# my finished kernel\n"
    changed, kept = stubs.write_all([module], force=True)
    assert changed == [learner / "kernel.py"] and (learner / "kernel.py").read_text() == stubs.stub_for(module)


def test_each_bug_region_is_a_planted_bug_with_its_symptom():
    source = SOLUTION.replace("    # BUG: off by one\n", "    # BUG: off by one\n    # SYMPTOM: one too large\n")
    assert generate_stub(source) == generate_stub(SOLUTION)  # the symptom is not shown
    (bug,) = planted_bugs(source)
    assert (bug.text, bug.correct, bug.buggy, bug.symptom, bug.line) == (
        "off by one",
        "    z = y",
        "    z = y + 1",
        "one too large",
        7,
    )
    planted = Mistake(bug.text, bug.correct, bug.buggy, bug.symptom).apply(source)
    assert "\n    z = y + 1\n" in planted and "\n    z = y\n" not in planted


@pytest.mark.parametrize(
    "broken",
    [
        SOLUTION,  # a BUG region must say what the tests report
        SOLUTION.replace("    # HINT: multiply\n", "    # SYMPTOM: x\n"),  # a symptom outside a BUG region
    ],
)
def test_bug_regions_need_a_symptom_and_todo_regions_refuse_one(broken):
    with pytest.raises(MarkerError):
        planted_bugs(broken)


def test_every_patched_example_applies_to_its_base_and_changes_it():
    """Examples of the larger modules are patches on a reference or a stub: each must still apply
    (a reference that moved on makes it fail here, with what to do) and must change something."""
    from grader.authoring import example_submissions

    patches = sorted((example_submissions.HANDWRITTEN.parent).rglob(example_submissions.PATCH))
    assert len(patches) >= 9
    for patch in patches:
        derived = example_submissions.derived(patch)
        header = next(line for line in patch.read_text().splitlines() if line.startswith("--- "))
        assert derived != example_submissions._base(header[4:].strip()), patch
        assert derived.startswith('"""') and "xample" in derived.split('"""')[1], f"{patch}: say what it tries"


def test_only_the_todos_a_function_reaches_are_named_as_the_likely_cause():
    """A failure of one function names the TODOs in it, in the kernels it launches and at the top
    of the file; not those of another function that it never calls."""
    from grader.core.markers import open_todos, todos_behind

    source = (
        "# TODO 1: pick a block size\n"
        "BLOCK = 128\n"
        "def helper_kernel(x):\n"
        "    # TODO 2: load\n"
        "    pass\n"
        "def first(x):\n"
        "    return helper_kernel(x)\n"
        "def second(x):\n"
        "    # TODO 3: the second function\n"
        "    pass\n"
    )
    todos = open_todos(source)
    assert [t.number for t in todos] == [1, 2, 3]
    assert [t.number for t in todos_behind(source, todos, "first")] == [1, 2]
    assert [t.number for t in todos_behind(source, todos, "second")] == [1, 3]
    assert todos_behind(source, todos, "missing") == todos  # no such function: say them all
    assert todos_behind("def (:", todos, "first") == todos  # does not parse: say them all
