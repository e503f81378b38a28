"""The learners' bundle (`python -m grader release`): the repository without solutions, hidden
cases, example submissions or the course's own tests, plus nbgrader's released assignments, and
not one line of a solution's TODO regions or of a hidden.py in it. About 10 s."""

from __future__ import annotations

import json
import shutil

import pytest

from grader import course, release
from grader.catalog import REPO_ROOT, available_modules
from grader.stubs import modules_with_solutions

nbgrader = pytest.importorskip("nbgrader", reason="releasing needs the [grading] extra (nbgrader)")

MODULES = [m for m in available_modules() if m.api]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> release.Bundle:
    tmp = tmp_path_factory.mktemp("release")
    return release.build(tmp / "bundle", tmp / "course")


def _files(bundle) -> list[str]:
    return sorted(str(p.relative_to(bundle.folder)) for p in bundle.folder.rglob("*") if p.is_file())


def test_instructor_only_folders_are_left_out(bundle):
    files = _files(bundle)
    for prefix in release.INSTRUCTOR_ONLY:
        assert not [f for f in files if f.startswith(prefix)], prefix
    for needed in ("README.md", "Makefile", "grader/record.py", "grader/cli.py"):
        assert needed in files
    for module in MODULES:
        assert f"tracks/{module.id}/kernel.py" in files and f"tracks/{module.id}/test_kernel.py" in files


def test_every_assignment_is_released_by_nbgrader(bundle):
    for module in MODULES:
        name = course.assignment_name(module)
        folder = bundle.folder / "release" / name
        assert (folder / "kernel.py").read_text() == (module.learner_dir / "kernel.py").read_text()
        notebook = json.loads((folder / f"{name}.ipynb").read_text())
        grade_cells = [c["metadata"]["nbgrader"] for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
        assert [(c["grade_id"], c["points"], c["locked"]) for c in grade_cells] == \
            [(part, points, True) for part, points in course.POINTS.items()]


def test_no_solution_or_hidden_case_text_is_in_the_bundle(bundle):
    secrets = release.secret_lines()
    for module in modules_with_solutions():  # the check knows every module's secrets
        origins = {origin.split(":")[0] for origin in secrets.values()}
        assert {f"solutions/{module.id}/kernel.py", f"solutions/{module.id}/hidden.py"} <= origins, module.id
    assert release.find_leaks(bundle.folder) == []
    names = release.hidden_case_names()
    assert names and not [n for n in names for p in bundle.folder.rglob("*.ipynb") if n in p.read_text()]


def test_the_leak_check_finds_a_solution_put_in_the_bundle(bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(bundle.folder / "tracks", copy / "tracks")
    module = modules_with_solutions()[0]
    shutil.copy(module.solution_dir / "kernel.py", copy / "tracks" / module.id / "kernel.py")
    shutil.copy(module.solution_dir / "hidden.py", copy / "notes.py")
    leaks = release.find_leaks(copy)
    assert any(f"tracks/{module.id}/kernel.py" in leak for leak in leaks)
    assert any(leak.startswith("notes.py:") for leak in leaks)


def test_every_hidden_case_definition_counts_as_secret():
    secrets = release.secret_lines()
    for module in modules_with_solutions():
        hidden = (module.solution_dir / "hidden.py").read_text()
        public = "\n".join(p.read_text() for p in module.learner_dir.iterdir() if p.suffix in (".py", ".md"))
        for line in (line.strip() for line in hidden.splitlines() if line.strip().startswith("Case(")):
            assert line in secrets or line in public, line


def test_a_release_into_the_repository_is_refused():
    with pytest.raises(release.ReleaseError, match="would replace the repository"):
        release.build(REPO_ROOT)
