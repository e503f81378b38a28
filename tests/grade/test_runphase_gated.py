"""The whole grader, as ``make grade`` runs it: every example submission goes through the static
policy gate and then the sandboxed run phase. Benign submissions keep their marks; every hostile
one scores zero with its reason named, the escapes refused by the gate with the line named.
(test_runphase.py tests the layers behind the gate with the gate switched off.) A file of its own,
so that this grading runs beside the others.
"""

from __future__ import annotations

import re
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


@pytest.fixture(scope="module")
def gated(tmp_path_factory, platform_protections) -> Gated:
    root = tmp_path_factory.mktemp("gated-submissions")
    results = tmp_path_factory.mktemp("gated-results")
    names = example_submissions.assemble(root, modules=[VECTOR_ADD])
    for name in ON_THEIR_OWN:
        shutil.rmtree(root / name)
    options = runphase.Options(limits=LIMITS, allow_unsafe=not offers(platform_protections, "processes"))
    summary = runphase.run(root, results, [VECTOR_ADD], options, progress=False)
    # Only the examples of vector add (and not those graded on their own).
    names = [n for n in names if any(p.parent.name.endswith(VECTOR_ADD.slug) for p in (root / n).rglob("kernel.py"))]
    return Gated(summary, names)


BENIGN = {"complete", "noisy", "partial", "stub"}
ON_THEIR_OWN = ("endless-loop", "missing-masks")  # graded by tests of their own (a short limit; many processes)


def test_every_example_is_graded_by_the_whole_grader(gated):
    assert not gated.summary.errors, [o.error for o in gated.summary.errors]
    for name in gated.examples:
        assert gated.record(name)["totals"]["total"] > 0, name


def test_benign_submissions_keep_their_marks_under_the_gate(gated):
    for name in BENIGN:
        assert gated.record(name)["refusal"] is None, (name, gated.record(name)["refusal"])
    totals = {name: gated.record(name)["totals"] for name in BENIGN}
    assert totals["complete"]["passed"] == totals["noisy"]["passed"] == totals["complete"]["total"]
    assert 0 < totals["partial"]["passed"] < totals["partial"]["total"] and totals["stub"]["passed"] == 0


def test_every_hostile_submission_scores_zero_with_its_reason_named(gated):
    hostile = sorted(set(gated.examples) - BENIGN)
    assert len(hostile) >= 25
    for name in hostile:
        record = gated.record(name)
        assert record["totals"]["passed"] == 0 or record["totals"]["score"] == 0.0, name
        reason = record["refusal"] or (record["integrity"] or {}).get("message") or record["load_error"] or ""
        if not reason:  # an honest-looking failure: every case must say why it failed
            assert all(row["message"] for row in record["cases"]), name
        else:
            assert len(reason) > 20, (name, reason)


# The refusal's reason for the examples whose file is refused for one construct (the rest of it is
# the reference solution): the line of the refusal that names it.
REFUSED_FOR = {
    "opens-own-memory": r"line \d+: `type\(sys\.stdout\.buffer\.raw\)` is a class, which kernel\.py may only compare",
    "positional-pre-hook": r"line \d+: argument 6 of `triton\.Config\(\.\.\.\)` is its `pre_hook`, a Python hook",
}


GATED = example_submissions.REFUSED_BY_THE_GATE_ALONE | {
    "forges-result",
    "reads-files",
    "writes-files",
    "network",
    "fork-bomb",
    "deep-folders",
    "fifo-outputs",
    "output-bomb",
    "leaks-hidden-cases",
    "patches-checks",
    *REFUSED_FOR,
}


@pytest.mark.parametrize("example", sorted(GATED))
def test_escapes_are_refused_by_the_gate_with_the_line_named(gated, example):
    record = gated.record(example)
    assert record["refusal"] and re.search(r"line \d+: ", record["refusal"]), record["summary"]
    assert record["integrity"]["violation"] == "policy" and record["totals"]["score"] == 0.0
    assert all(row["kind"] == "policy" for row in record["cases"])


@pytest.mark.parametrize("example, reason", sorted(REFUSED_FOR.items()))
def test_the_refusal_names_the_construct_the_example_abuses(gated, example, reason):
    assert re.search(reason, gated.record(example)["refusal"]), gated.record(example)["refusal"]


def test_nothing_learner_facing_names_a_hidden_case_under_the_gate(gated, hidden_numbers_shown):
    for name in gated.examples:
        assert not hidden_numbers_shown(gated.record(name)), name
