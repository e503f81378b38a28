"""The whole grader, as ``make grade`` runs it: every example submission goes through the static
policy gate and then the sandboxed run phase. Benign submissions keep their marks; every hostile
one scores zero with its reason named, the escapes refused by the gate with the line named.
(test_runphase.py tests the layers behind the gate with the gate switched off.) A file of its own,
so that this grading runs beside the others.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass

import pytest

from grader.authoring import example_submissions
from grader.core import device
from grader.core.catalog import find_module
from grader.grade import runphase
from grader.sandbox.isolation import GiB, Limits, offers

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux"),
    pytest.mark.heavy,
]

VECTOR_ADD = find_module("missing-elements/01-vector-add")
# Generous, as in test_runphase.py: no outcome of a correct submission depends on a busy machine.
LIMITS = (
    Limits(case_seconds=60, startup_seconds=120)
    if device.is_cuda()
    else Limits(case_seconds=30, startup_seconds=120, memory_bytes=1 * GiB)
)


@dataclass
class Gated:
    summary: runphase.RunSummary
    examples: list[str]

    def record(self, student: str) -> dict:
        record = self.summary.record_for(student, VECTOR_ADD.id)
        assert record is not None, f"{student} was not graded"
        return record


# Each example's outcome with the gate is data beside it (its expected.json, with_gate); this file
# grades vector add's examples whose with_gate names it (the others are graded by tests of their own).
EXPECTED = {
    name: found
    for name, found in example_submissions.expected_all().items()
    if found.module in (None, VECTOR_ADD.id) and found.with_gate.graded_by == example_submissions.GATED_TEST
}


@pytest.fixture(scope="module")
def gated(tmp_path_factory, platform_protections) -> Gated:
    root = tmp_path_factory.mktemp("gated-submissions")
    results = tmp_path_factory.mktemp("gated-results")
    names = example_submissions.assemble(root, modules=[VECTOR_ADD])
    for name in names:
        if name not in EXPECTED:
            shutil.rmtree(root / name)
    options = runphase.Options(limits=LIMITS, allow_unsafe=not offers(platform_protections, "processes"))
    summary = runphase.run(root, results, [VECTOR_ADD], options, progress=False)
    # Only the examples of vector add (and not those graded on their own).
    names = [n for n in EXPECTED if any(p.parent.name.endswith(VECTOR_ADD.slug) for p in (root / n).rglob("kernel.py"))]
    return Gated(summary, names)


def test_every_example_is_graded_by_the_whole_grader(gated):
    assert not gated.summary.errors, "\n".join(str(o.error) for o in gated.summary.errors)
    assert sorted(gated.examples) == sorted(EXPECTED)
    for name in gated.examples:
        assert gated.record(name)["totals"]["total"] > 0, name


def test_benign_submissions_keep_their_marks_under_the_gate(gated):
    benign = [name for name in gated.examples if EXPECTED[name].with_gate.outcome in ("full marks", "partial")]
    assert {"complete", "noisy", "partial"} <= set(benign)
    for name in [*benign, "stub"]:
        assert gated.record(name)["refusal"] is None, (name, gated.record(name)["refusal"])
    totals = {name: gated.record(name)["totals"] for name in ("complete", "noisy", "partial", "stub")}
    assert totals["complete"]["passed"] == totals["noisy"]["passed"] == totals["complete"]["total"]
    assert 0 < totals["partial"]["passed"] < totals["partial"]["total"] and totals["stub"]["passed"] == 0


def test_every_hostile_submission_scores_zero_with_its_reason_named(gated):
    hostile = sorted(
        name
        for name in gated.examples
        if EXPECTED[name].with_gate.outcome in ("no points", "refused") and name != "stub"
    )
    assert len(hostile) >= 25
    for name in hostile:
        record = gated.record(name)
        assert record["totals"]["passed"] == 0 or record["totals"]["score"] == 0.0, name
        reason = record["refusal"] or (record["integrity"] or {}).get("message") or record["load_error"] or ""
        if not reason:  # an honest-looking failure: every case must say why it failed
            assert all(row["message"] for row in record["cases"]), name
        else:
            assert len(reason) > 20, (name, reason)


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_each_example_is_graded_as_its_expected_json_says(gated, example):
    """Refused ones: the line named, a policy finding, no case run, the reason matched; the others:
    not refused, their marks, reason and integrity finding as expected.json has them."""
    record = gated.record(example)
    assert not EXPECTED[example].with_gate.problems(record), (record["summary"], record["refusal"])


def test_nothing_learner_facing_names_a_hidden_case_under_the_gate(gated, hidden_numbers_shown):
    for name in gated.examples:
        assert not hidden_numbers_shown(gated.record(name)), name
