"""Each example submission's expected outcome is data beside it (expected.json): every folder has
a valid one, the gate's verdict agrees with it, the tests that grade the examples are the ones it
names, and the README tables are written from it. Fast: nothing here runs a submission."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from grader.authoring import example_submissions as examples
from grader.core import cases
from grader.core.catalog import REPO_ROOT, find_module
from grader.policy import check_source, explain, policy_for


def _gate_verdict(found: examples.Expected) -> str | None:
    """The gate's refusal of an example's file, as the run phase plans it, or None."""
    module = find_module(found.module)
    spec, public = cases.public(module)
    root = examples.HANDWRITTEN_GPU if found.gpu else examples.HANDWRITTEN
    source = examples.kernel_source(root / found.name / found.module)
    violations = check_source(source, policy_for(*cases.specs_of(spec, public + cases.hidden(module))))
    return explain(violations) if violations else None


def test_every_example_folder_has_a_valid_expected_outcome():
    every = examples.expected_all()
    folders = examples.example_folders()
    assert folders and {folder.name for folder in folders} <= set(every)
    for folder in folders:
        found = examples.expected(folder.name)
        assert found.name == folder.name and found.module is not None
        assert found.gpu == (folder.parent == examples.HANDWRITTEN_GPU)
        find_module(found.module)
    assert {"complete", "stub"} <= set(every)


def test_a_missing_or_malformed_file_is_named(tmp_path, monkeypatch):
    root = tmp_path / "submissions"
    shutil.copytree(examples.HANDWRITTEN / "partial", root / "partial")
    monkeypatch.setattr(examples, "HANDWRITTEN", root)
    good = json.loads((root / "partial" / examples.EXPECTED).read_text())
    assert examples.expected("partial").with_gate.outcome == "partial"

    def broken(data, says: str) -> None:
        (root / "partial" / examples.EXPECTED).write_text(data if isinstance(data, str) else json.dumps(data))
        with pytest.raises(examples.ExpectedError, match=says) as raised:
            examples.expected("partial")
        assert "partial" in str(raised.value)

    broken("{", "not valid JSON")
    broken({**good, "with_gate": {**good["with_gate"], "outcome": "fine"}}, "outcome must be one of")
    broken({**good, "module": "missing-elements/02-other"}, "does not match the folder")
    broken({k: v for k, v in good.items() if k != "behind_gate"}, "behind_gate")
    broken({**good, "with_gate": {**good["with_gate"], "reason": "("}}, "not a regular expression")
    broken({**good, "with_gate": {**good["with_gate"], "graded_by": "tests/nowhere.py"}}, "graded_by")
    refused = {**good["with_gate"], "outcome": "refused"}
    broken({**good, "with_gate": refused}, "must name the line")
    (root / "partial" / examples.EXPECTED).unlink()
    with pytest.raises(examples.ExpectedError, match=f"{re.escape(str(root / 'partial'))} has no expected.json"):
        examples.expected("partial")


def test_the_gate_refuses_exactly_the_examples_expected_refused_with_their_reason():
    for name, found in examples.expected_all().items():
        if found.module is None:
            continue
        refusal = _gate_verdict(found)
        if found.with_gate.outcome == "refused":
            assert refusal is not None, f"{name}: expected refused, the gate lets it through"
            assert re.search(found.with_gate.reason, refusal), (name, found.with_gate.reason, refusal)
        else:
            assert refusal is None, f"{name}: expected {found.with_gate.outcome!r}, the gate refuses it: {refusal}"


def test_the_examples_refused_under_the_gate_are_graded_so_by_the_gated_test():
    refused = [
        found
        for found in examples.expected_all().values()
        if found.module == examples.VECTOR_ADD_ID and found.with_gate.outcome == "refused"
    ]
    assert len(refused) >= 20
    for found in refused:
        assert found.with_gate.graded_by == examples.GATED_TEST, found.name
    # The gated test grades vector add's examples as the data says, and nothing else.
    text = (REPO_ROOT / examples.GATED_TEST).read_text()
    assert "expected_all()" in text and ".problems(" in text
    assert examples.refused_by_the_gate_alone() == {
        found.name for found in refused if found.behind_gate.graded_by != examples.BEHIND_TEST
    }


def test_each_test_named_as_grading_an_example_names_it():
    """Tests other than the two that read the data name the examples they grade."""
    for name, found in examples.expected_all().items():
        for phase in (found.with_gate, found.behind_gate):
            if phase is None or phase.graded_by in (None, examples.GATED_TEST, examples.BEHIND_TEST):
                continue
            assert f'"{name}"' in (REPO_ROOT / phase.graded_by).read_text(), (name, phase.graded_by)
        if found.module != examples.VECTOR_ADD_ID and found.module is not None:
            graded = [p.graded_by for p in (found.with_gate, found.behind_gate) if p is not None]
            assert examples.GATED_TEST not in graded and examples.BEHIND_TEST not in graded, name


def _table_names(path) -> list[str]:
    rows = [line for line in path.read_text().splitlines() if re.match(r"\| (?!folder |---)", line)]
    return [row.split(" | ")[0].removeprefix("| ").split(" (")[0] for row in rows]


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_the_readme_tables_list_exactly_the_example_folders(gpu):
    path = examples.README_GPU if gpu else examples.README
    names = _table_names(path)
    folders = [folder.name for folder in examples.example_folders(gpu)]
    generated = [] if gpu else ["complete", "stub"]
    assert sorted(names) == sorted(folders + generated), (
        f"{path}: rows without a folder {sorted(set(names) - set(folders) - set(generated))}, "
        f"folders without a row {sorted(set(folders) - set(names))}"
    )
    assert examples.readme_with_rows(path.read_text(), examples.readme_rows(gpu)) == path.read_text(), (
        f"{path}: its rows are not those of the examples' expected.json: "
        "run python -m grader.authoring.example_submissions"
    )
