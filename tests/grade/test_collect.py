"""What a run takes into the course and keeps there: collecting (misnamed files of an LMS zip are
reported with the name they should have, submission times), the results folder's secret, and the
selection of students and modules a run grades or regrades (grader.grade.collect, store,
pipeline). Unit-level: no sandboxed child and no nbgrader, but for the one zip test marked heavy.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import sys
import zipfile
from pathlib import Path

import pytest

from grader.core.catalog import find_module
from grader.grade import cluster, collect, course, deadlines, pipeline, runphase, store
from grader.grade.grading import Options

VECTOR_ADD = find_module("missing-elements/01-vector-add")
ASSIGNMENT = course.assignment_name(VECTOR_ADD)
COURSE_ASSIGNMENTS = list(course.modules_by_assignment())
UTC = dt.timezone.utc


def _zip(path: Path, members: dict[str, bytes], when=(2026, 3, 2, 23, 30, 0), utc: int | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as handle:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=when)
            if utc is not None:  # the extended timestamp field: flags (mtime present), mtime
                info.extra = struct.pack("<HHBi", 0x5455, 5, 1, utc)
            handle.writestr(info, data)
    return path


# --- misnamed files of an LMS zip ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name, said",
    [
        (
            "alice_optimization-03-shared-mem_kernel.py",
            "(the closest is optimization-03-shared-memory): rename it to "
            "alice_optimization-03-shared-memory_kernel.py (alice's optimization-03-shared-memory)",
        ),
        (
            "bob smith_missing-elements-01-vector-add_kernel.py",
            "'bob smith' is no student id (letters, digits and . _ @ - only: no spaces): rename it to "
            "bob.smith_missing-elements-01-vector-add_kernel.py (or with the student's LMS login",
        ),
        ("carol_kernel.py", "it names no assignment: rename it to carol_<assignment>_kernel.py"),
        (
            "dave_missing-elements-01-vector-add.py",
            "it does not end in _kernel.py: rename it to dave_missing-elements-01-vector-add_kernel.py",
        ),
        ("erin_missing-elements-01-vector-add_kernel (1).py", "it ends in 'kernel (1)' instead of kernel"),
        ("frank_missing-elements-01-vector-add_torch.py", "only kernel.py files are graded, so this one was left out"),
        (
            "gina_some-other-course_kernel.py",
            "'some-other-course' is no assignment of this course: rename it to gina_<assignment>_kernel.py",
        ),
        ("__MACOSX/._alice_missing-elements-01-vector-add_kernel.py", "macOS's archive metadata"),
        (
            "frank-optimization-03_kernel.py",
            "'frank-optimization-03' is no assignment of this course (the closest is optimization-03-shared-memory): "
            "rename it to frank_optimization-03-shared-memory_kernel.py (frank's optimization-03-shared-memory)",
        ),
    ],
)
def test_a_misnamed_file_is_told_the_name_it_should_have(name, said):
    advice = collect.advice(name, COURSE_ASSIGNMENTS)
    assert said in advice, advice
    assert advice.endswith(("collect again.", "nothing to do."))


def test_every_file_of_the_zip_that_no_assignment_takes_is_listed(tmp_path):
    archive = _zip(
        tmp_path / "lms.zip",
        {
            f"alice_{ASSIGNMENT}_kernel.py": b"# alice\n",
            f"sub/bo_{course.assignment_name(find_module('optimization/01-tiling'))}"
            "_kernel.py": b"# a module left out of this run\n",
            "carol_kernel.py": b"# carol\n",
            "readme.txt": b"hello\n",
        },
    )
    with zipfile.ZipFile(archive) as handle:
        members = [m for m in handle.infolist() if not m.is_dir()]
    found = dict(collect.unmatched(members, COURSE_ASSIGNMENTS))
    assert sorted(found) == ["carol_kernel.py", "readme.txt"]


def test_a_zip_with_only_misnamed_files_is_refused_with_what_to_rename(tmp_path):
    archive = _zip(tmp_path / "lms.zip", {"bob smith_missing-elements-01-vector-add_kernel.py": b"# bob\n"})
    with pytest.raises(collect.CollectError) as refused:
        collect.collect(archive, tmp_path / "course", [VECTOR_ADD])
    assert "rename it to bob.smith_missing-elements-01-vector-add_kernel.py" in str(refused.value)
    assert not (tmp_path / "course" / "submitted").exists()


def test_two_files_for_one_student_and_assignment_are_refused_before_collecting(tmp_path):
    archive = _zip(
        tmp_path / "lms.zip",
        {f"a/alice_{ASSIGNMENT}_kernel.py": b"# one\n", f"b/alice_{ASSIGNMENT}_kernel.py": b"# two\n"},
    )
    with pytest.raises(collect.CollectError, match=rf"two files for alice's {ASSIGNMENT}: a/.* and b/"):
        collect.collect(archive, tmp_path / "course", [VECTOR_ADD])


def test_collecting_some_students_from_a_zip_takes_only_their_files():
    pattern = collect._zip_pattern(ASSIGNMENT, {"al", "bo.b"})
    assert pattern.match(f"x/al_{ASSIGNMENT}_kernel.py")["student_id"] == "al"
    assert pattern.match(f"x/bo.b_{ASSIGNMENT}_kernel.py")["student_id"] == "bo.b"
    assert not pattern.match(f"x/cy_{ASSIGNMENT}_kernel.py") and not pattern.match(f"x/boxb_{ASSIGNMENT}_kernel.py")
    assert collect._zip_pattern(ASSIGNMENT).match(f"x/cy_{ASSIGNMENT}_kernel.py")["student_id"] == "cy"


def test_a_zip_entrys_time_is_utc_where_the_zip_says_so_else_local_without_offset(tmp_path):
    utc = int(dt.datetime(2026, 3, 2, 22, 30, tzinfo=UTC).timestamp())
    with zipfile.ZipFile(_zip(tmp_path / "a.zip", {"k.py": b""}, utc=utc)) as handle:
        assert collect._entry_time(handle.infolist()[0]) == dt.datetime(2026, 3, 2, 22, 30, tzinfo=UTC)
    with zipfile.ZipFile(_zip(tmp_path / "b.zip", {"k.py": b""})) as handle:
        assert collect._entry_time(handle.infolist()[0]) == dt.datetime(2026, 3, 2, 23, 30)
    with zipfile.ZipFile(_zip(tmp_path / "c.zip", {"k.py": b""}, when=(1980, 1, 1, 0, 0, 0))) as handle:
        assert collect._entry_time(handle.infolist()[0]) is None


@pytest.mark.heavy
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the course is built on Linux")
def test_a_zip_is_collected_with_its_times_and_its_misnamed_files_listed(tmp_path):
    pytest.importorskip("nbgrader", reason="collecting a zip needs the [grading] extra (nbgrader)")
    utc = int(dt.datetime(2026, 3, 2, 22, 30, tzinfo=UTC).timestamp())
    archive = _zip(
        tmp_path / "lms.zip",
        {
            f"alice_{ASSIGNMENT}_kernel.py": b"# alice\n",
            f"bob smith_{ASSIGNMENT}_kernel.py": b"# bob\n",
            "carol_kernel.py": b"# carol\n",
        },
        utc=utc,
    )
    course_dir = tmp_path / "course"
    course.generate_assignments(course_dir, [VECTOR_ADD])
    collected = collect.collect(archive, course_dir, [VECTOR_ADD])
    assert collected.submissions == [("alice", ASSIGNMENT)]
    assert [name for name, _ in collected.unmatched] == [f"bob smith_{ASSIGNMENT}_kernel.py", "carol_kernel.py"]
    assert sorted(p.name for p in (course_dir / "submitted").iterdir()) == ["alice"]  # no "bob smith", no "bob"
    folder = collect.submitted_dir(course_dir, "alice", ASSIGNMENT)
    assert deadlines.read_timestamp(folder) == dt.datetime(2026, 3, 2, 22, 30, tzinfo=UTC)


# --- a folder source --------------------------------------------------------------------------


def _folder_source(root: Path, students: list[str]) -> None:
    for student in students:
        kernel = root / student / VECTOR_ADD.track / VECTOR_ADD.slug / "kernel.py"
        kernel.parent.mkdir(parents=True)
        kernel.write_text(f"# {student}\n")


def test_a_folder_submissions_time_is_its_timestamp_txt_else_its_modification_time(tmp_path):
    _folder_source(tmp_path / "source", ["al", "bo"])
    stamped = dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    os.utime(
        tmp_path / "source" / "al" / VECTOR_ADD.track / VECTOR_ADD.slug / "kernel.py",
        (stamped.timestamp(), stamped.timestamp()),
    )
    deadlines.write_timestamp(
        tmp_path / "source" / "bo" / VECTOR_ADD.track / VECTOR_ADD.slug, dt.datetime(2026, 3, 4, 9, 0, tzinfo=UTC)
    )
    collect.collect(tmp_path / "source", tmp_path / "course", [VECTOR_ADD])
    read = {
        s: deadlines.read_timestamp(collect.submitted_dir(tmp_path / "course", s, ASSIGNMENT)) for s in ("al", "bo")
    }
    assert read == {"al": stamped, "bo": dt.datetime(2026, 3, 4, 9, 0, tzinfo=UTC)}


def test_collecting_some_students_leaves_the_others_files_as_they_were(tmp_path):
    _folder_source(tmp_path / "source", ["al", "bo"])
    collect.collect(tmp_path / "source", tmp_path / "course", [VECTOR_ADD])
    for student in ("al", "bo"):
        (tmp_path / "source" / student / VECTOR_ADD.track / VECTOR_ADD.slug / "kernel.py").write_text("# changed\n")
    collected = collect.collect(tmp_path / "source", tmp_path / "course", [VECTOR_ADD], students=["al"])
    assert collected.submissions == [("al", ASSIGNMENT)]
    submitted = {
        s: (collect.submitted_dir(tmp_path / "course", s, ASSIGNMENT) / "kernel.py").read_text() for s in ("al", "bo")
    }
    assert submitted == {"al": "# changed\n", "bo": "# bo\n"}


# --- one secret per results folder --------------------------------------------------------------


def test_the_secret_is_drawn_once_per_results_folder_and_kept_private(tmp_path):
    first = store.run_secret(tmp_path / "results")
    assert store.run_secret(tmp_path / "results") == first  # a second run: the same hidden inputs
    assert store.run_secret(tmp_path / "other") != first  # a fresh folder: others (a 2**-48 chance)
    assert (tmp_path / "results" / "secret").stat().st_mode & 0o777 == 0o600


def test_a_damaged_secret_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "secret").write_text("not a number\n")
    with pytest.raises(store.SecretError, match="Delete it to draw a new one"):
        store.run_secret(tmp_path)


class _Stop(Exception):
    """Raised by a stand-in for grade_one once it has seen the secret."""


def test_grading_one_file_and_the_pool_use_the_folders_secret(tmp_path, monkeypatch):
    seen = []

    def grade_one(module, source, sandbox, secret, options, stop):
        seen.append(secret)
        raise _Stop()

    class FakeSandbox:
        def probe(self):
            return {}

        def close(self):
            pass

    monkeypatch.setattr(runphase, "grade_one", grade_one)
    monkeypatch.setattr(runphase, "make_sandbox", lambda *args, **kwargs: FakeSandbox())
    kernel = tmp_path / "al" / ASSIGNMENT / "kernel.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# al\n")
    results = tmp_path / "results"
    with pytest.raises(_Stop):
        runphase.grade_submission(VECTOR_ADD, kernel, results)
    summary = runphase.run(tmp_path, results, [VECTOR_ADD], Options(workers=1), progress=False)
    assert "_Stop" in summary.outcomes[0].error  # the pool's grading reached grade_one
    # grade_submission, then the pool: al's file and the module's starting kernel, graded beside it
    assert seen == [store.run_secret(results)] * 3


def test_the_ray_path_is_handed_the_folders_secret(tmp_path, monkeypatch):
    handed = []
    monkeypatch.setattr(cluster, "available", lambda: True)
    monkeypatch.setattr(cluster, "grade_pending", lambda *args, **kwargs: handed.append(args[5]) or {})
    kernel = tmp_path / "al" / ASSIGNMENT / "kernel.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# al\n")
    runphase.run(tmp_path, tmp_path / "results", [VECTOR_ADD], Options(workers=1, ray=""), progress=False)
    assert handed == [store.run_secret(tmp_path / "results")]


def test_children_are_blind_to_the_results_folder_that_holds_the_secret(tmp_path, monkeypatch):
    from grader.grade import grading

    made = []
    monkeypatch.setattr(grading, "Sandbox", lambda **kwargs: made.append(kwargs))
    runphase.make_sandbox(Options(workers=1), tmp_path / "results")
    monkeypatch.setattr(cluster, "make_sandbox", lambda options, results, **kwargs: made.append({"hide": [results]}))
    cluster.GradingWorker(Options(workers=1), 1, 1, tmp_path / "results")
    assert all(tmp_path / "results" in kwargs["hide"] for kwargs in made) and len(made) == 2


# --- what a run grades and regrades -------------------------------------------------------------


def _submitted(course_dir: Path, students: dict[str, str]) -> None:
    for student, text in students.items():
        folder = collect.submitted_dir(course_dir, student, ASSIGNMENT)
        folder.mkdir(parents=True)
        (folder / "kernel.py").write_text(text)


def test_a_selected_student_without_a_submission_is_refused_with_the_names_there_are(tmp_path):
    _submitted(tmp_path, {"alice": "# a\n", "bob": "# b\n"})
    assert pipeline._selected(tmp_path, [ASSIGNMENT], ["bob"], True) == [("bob", ASSIGNMENT)]
    with pytest.raises(pipeline.SelectionError, match="Did you mean alice"):
        pipeline._selected(tmp_path, [ASSIGNMENT], ["alicia"], True)
    with pytest.raises(pipeline.SelectionError, match="pass the submissions"):
        pipeline._selected(tmp_path / "empty", [ASSIGNMENT], None, True)


def test_only_the_selected_files_are_staged_for_the_run_phase(tmp_path):
    _submitted(tmp_path, {"alice": "# a\n", "bob": "# b\n"})
    root = pipeline._stage(tmp_path, {("bob", ASSIGNMENT)})
    assert [p.relative_to(root).as_posix() for p in root.rglob("kernel.py")] == [f"bob/{ASSIGNMENT}/kernel.py"]
    assert (root / "bob" / ASSIGNMENT / "kernel.py").read_text() == "# b\n"


def test_a_regrade_moves_only_the_selected_record_aside_and_names_who_shares_the_file(tmp_path):
    _submitted(tmp_path, {"alice": "# same\n", "bob": "# same\n", "carol": "# own\n"})
    results = tmp_path / "results"
    paths = {}
    for text in ("# same\n", "# own\n"):
        record = {"submission_sha256": store.sha256(text.encode()), "cases_sha256": store.cases_hash(VECTOR_ADD)}
        paths[text] = store.keep(results, VECTOR_ADD, record, "log")
    notes = pipeline._set_aside(tmp_path, results, {("alice", ASSIGNMENT)})
    assert not paths["# same\n"].exists() and paths["# own\n"].exists()  # carol's record untouched
    [moved] = (results / "replaced").rglob("*.json")
    assert f"the old record is kept in {moved}" in notes[0] and notes[1].startswith("  bob handed in the same file")


def test_a_record_made_again_makes_its_notebook_stale(tmp_path):
    row = pipeline.Row(
        "alice",
        ASSIGNMENT,
        VECTOR_ADD,
        record={"submission_sha256": "a", "cases_sha256": "b", "graded_at": "2026-03-01T10:00:00+00:00"},
    )
    before = pipeline._stamp(row, b"{}")
    row.record = {**row.record, "graded_at": "2026-03-05T10:00:00+00:00"}
    assert pipeline._stamp(row, b"{}") != before


def test_nbgrader_runs_once_per_selected_student_and_once_for_all_otherwise():
    assert pipeline._each_student(["*"], None) == [("*",)]
    assert pipeline._each_student(["a1"], ["al", "bo"]) == [("a1", "--student=al"), ("a1", "--student=bo")]


def test_the_table_gains_the_files_not_collected_and_the_regrades(tmp_path):
    grading = pipeline.ClassGrades(
        [],
        tmp_path,
        tmp_path,
        protections={},
        seconds={},
        unmatched=[("carol_kernel.py", "it names no assignment: rename it.")],
        notes=["Regrading alice x: the old record is kept in y."],
    )
    lines = pipeline.extra_lines(grading)
    assert "  carol_kernel.py: it names no assignment: rename it." in lines
    assert "Regrading alice x: the old record is kept in y." in lines
    (tmp_path / "report.md").write_text("# Grades\n")
    pipeline._add_to_report(grading)
    assert "carol_kernel.py" in (tmp_path / "report.md").read_text()
