"""The record's format (grader.grade.record_format): what the run phase writes is what the store
reads back, and a record of another format or shape is graded again rather than misread."""

import json

from grader.grade import record_format, store
from grader.grade.record_format import CaseRow, Count, Integrity, PartInfo, Record, Totals


def _record(**fields) -> Record:
    values = {
        "module": "mastery/04-training-kernels",
        "submission_sha256": "a" * 64,
        "cases_sha256": "b" * 16,
        "device": "cpu",
        "graded_at": "2026-11-27T12:00:00+00:00",
        "summary": "All 2 cases pass.",
        "load_error": None,
        "todos": [],
        "starting_kernel": False,
        "cases": [
            CaseRow("one", "public", True, "", "", 0.1, "scan"),
            CaseRow("hidden case 1", "hidden", True, "", "", 0.2),
        ],
        "parts": [PartInfo("scan", "the selective scan", 1.0)],
        "totals": Totals(Count(1, 1), Count(1, 1), 2, 2, 1.0),
        "integrity": None,
        "refusal": None,
        "performance": {"graded": False, "reason": "not graded: needs a CUDA GPU"},
        "note": "",
        "cpu_seconds": {"budget": 60, "spent": 1.0},
        "protections": {},
        "evidence": "interpreter",
        "child_processes": 2,
    }
    return Record(**{**values, **fields})


def test_a_record_round_trips_through_the_store(tmp_path):
    data = _record().to_json()
    assert data["record_version"] == record_format.RECORD_VERSION and record_format.problems(data) == []
    assert data["cases"][0]["part"] == "scan" and "part" not in data["cases"][1], "no part: left out"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert store.read_record(path) == data
    flagged = _record(integrity=Integrity("torch", "computed with PyTorch")).to_json()
    assert record_format.problems(flagged) == [] and flagged["integrity"]["violation"] == "torch"


def test_a_record_of_another_version_or_shape_is_not_read(tmp_path):
    path = tmp_path / "r.json"
    for spoil, words in [
        (lambda d: d.update(record_version=5), "record_version 5"),
        (lambda d: d.pop("totals"), "totals is missing"),
        (lambda d: d.update(starting_kernel="no"), "starting_kernel has the wrong type"),
        (lambda d: d["cases"][0].update(passed=1), "cases[0].passed has the wrong type"),
        (lambda d: d["totals"].update(score=True), "totals.score has the wrong type"),
        (lambda d: d.update(cases={}), "cases has the wrong type"),
    ]:
        data = _record().to_json()
        spoil(data)
        found = record_format.problems(data)
        assert any(words in problem for problem in found), (words, found)
        path.write_text(json.dumps(data))
        assert store.read_record(path) is None
    assert record_format.problems([]) == ["not a JSON object"]
