"""The scaling benchmark's class and its comparison of grades (the runs themselves need GPUs)."""

from __future__ import annotations

import json

from grader.core.catalog import find_module
from grader.grade import bench_scaling


def test_the_class_mixes_complete_partial_and_failing_files_all_distinct(tmp_path):
    modules = [find_module("missing-elements/01-vector-add"), find_module("debugging/02-error-handling")]
    source, students = bench_scaling.build_class(tmp_path, 6, modules)
    files = sorted(source.glob("*/*/kernel.py"))
    assert len(files) == 12
    assert len({f.read_bytes() for f in files}) == 12  # no two share a record
    kinds = [kind for student in students for kind in student.kind.values()]
    assert "complete" in kinds and "stub" in kinds
    assert any(kind.startswith("partial: ") for kind in kinds)
    planted = next(
        source / s.name / a / "kernel.py" for s in students for a, k in s.kind.items() if k.startswith("partial: ")
    )
    module = next(m for m in modules if m.slug in str(planted))
    assert planted.read_text().split("\n", 1)[1] != (module.solution_dir / "kernel.py").read_text()


def _record(tmp_path, name, **changes):
    record = {
        "module": "missing-elements/01-vector-add",
        "submission_sha256": "ab",
        "graded_at": "2026-11-27T10:00:00",
        "cpu_seconds": {"total": 3.0},
        "totals": {"passed": 1, "total": 2, "score": 0.5},
        "cases": [{"name": "n=1", "visibility": "public", "passed": True, "kind": "", "message": "", "seconds": 0.1}],
        "performance": {"graded": True, "credit": 1.0, "ratio": 0.99, "reason": ""},
    }
    record.update(changes)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "record.json").write_text(json.dumps(record))
    return folder


def test_grades_leave_out_times_and_dates_but_not_verdicts_or_credit(tmp_path):
    first = bench_scaling.grades(_record(tmp_path, "a"))
    timed_again = _record(
        tmp_path,
        "b",
        graded_at="2026-11-28T11:00:00",
        cpu_seconds={"total": 9.0},
        performance={"graded": True, "credit": 1.0, "ratio": 1.02, "reason": ""},
    )
    assert bench_scaling.grades(timed_again) == first
    other_verdict = _record(
        tmp_path, "c", cases=[{"name": "n=1", "visibility": "public", "passed": False, "kind": "x", "message": "m"}]
    )
    assert bench_scaling.grades(other_verdict) != first
    less_credit = _record(tmp_path, "d", performance={"graded": True, "credit": 0.5, "ratio": 0.7, "reason": ""})
    assert bench_scaling.grades(less_credit) != first
    assert bench_scaling.reference_ratios(timed_again) == []  # not every case passed
