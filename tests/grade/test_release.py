"""The learners' bundle (`python -m grader release`): the repository without solutions, hidden
cases, example submissions, the course's own tests or maintainers' files, plus nbgrader's released
assignments; every learner kernel.py the generated stub, a README for learners, and not one line
of a solution's TODO regions or of a hidden.py in it. About 15 s."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from grader.core.catalog import REPO_ROOT, available_modules
from grader.core.markers import modules_with_solutions, stub_for
from grader.grade import course, release


def _needs_nbgrader() -> None:
    """Only the tests that run nbgrader skip without it; the others run anyway."""
    pytest.importorskip("nbgrader", reason="releasing needs the [grading] extra (nbgrader)")


MODULES = [m for m in available_modules() if m.api]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> release.Bundle:
    _needs_nbgrader()
    tmp = tmp_path_factory.mktemp("release")
    return release.build(tmp / "bundle", tmp / "course")


def _files(bundle) -> list[str]:
    return sorted(str(p.relative_to(bundle.folder)) for p in bundle.folder.rglob("*") if p.is_file())


def test_instructor_only_folders_are_left_out(bundle):
    files = _files(bundle)
    for prefix in release.INSTRUCTOR_ONLY:
        assert not [f for f in files if f.startswith(prefix)], prefix
    for needed in ("README.md", "Makefile", "grader/grade/record.py", "grader/cli.py"):
        assert needed in files
    for module in MODULES:
        assert f"tracks/{module.id}/kernel.py" in files and f"tracks/{module.id}/test_kernel.py" in files


def test_every_assignment_is_released_by_nbgrader(bundle):
    for module in MODULES:
        name = course.assignment_name(module)
        folder = bundle.folder / "release" / name
        assert (folder / "kernel.py").read_text() == stub_for(module)
        notebook = json.loads((folder / f"{name}.ipynb").read_text())
        grade_cells = [
            c["metadata"]["nbgrader"] for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade")
        ]
        assert [(c["grade_id"], c["points"], c["locked"]) for c in grade_cells] == [
            (part, points, True) for part, points in course.points(module).items()
        ]


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
    assert f"tracks/{module.id}/kernel.py: not the generated stub" in "\n".join(leaks)
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


def test_a_kernel_that_is_not_the_generated_stub_is_a_leak(bundle, tmp_path):
    # Finished with lines the course shows anyway: only the comparison with the stub tells.
    module = modules_with_solutions()[0]
    copy = tmp_path / "bundle"
    shutil.copytree(bundle.folder / "release", copy / "release")
    name = f"release/{course.assignment_name(module)}/kernel.py"
    (copy / name).write_text(stub_for(module).replace("# TODO 1:", "# done:"))
    assert release.find_leaks(copy) == [
        f"{name}: not the generated stub (learners get exactly what `make stubs` writes)"
    ]


def test_a_finished_kernel_in_tracks_never_reaches_the_bundle(tmp_path, monkeypatch):
    _needs_nbgrader()  # the bundle holds the notebooks nbgrader generates
    module = MODULES[0]
    solution = (module.solution_dir / "kernel.py").read_text()
    root = tmp_path / "repo"  # a working tree whose tracks/ kernel is finished
    shutil.copytree(module.learner_dir, root / "tracks" / module.id)
    (root / "tracks" / module.id / "kernel.py").write_text(solution)
    shutil.copy(REPO_ROOT / "README.md", root / "README.md")
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    monkeypatch.setattr(release, "repository_files", lambda root: (files, []))
    real = type(module).learner_dir
    monkeypatch.setattr(
        type(module),
        "learner_dir",
        property(lambda self: root / "tracks" / self.id if self == module else real.fget(self)),
    )

    bundle = release.build(tmp_path / "bundle", tmp_path / "course", [module], root=root)
    name = course.assignment_name(module)
    assert (root / "tracks" / module.id / "kernel.py").read_text() == solution  # still there, untouched
    assert (tmp_path / "course" / "source" / name / "kernel.py").read_text() == stub_for(module)
    assert (bundle.folder / "tracks" / module.id / "kernel.py").read_text() == stub_for(module)
    assert (bundle.folder / "release" / name / "kernel.py").read_text() == stub_for(module)

    # A solution copied into any other file of the bundle: refused, the file named, nothing left.
    (root / "notes").mkdir()
    (root / "notes" / "answers.py").write_text(solution)
    files.append("notes/answers.py")
    with pytest.raises(release.ReleaseError, match=r"deleted:\n  notes/answers\.py: ") as refused:
        release.build(tmp_path / "bundle", tmp_path / "course", [module], root=root)
    assert not (tmp_path / "bundle").exists()
    assert "tracks/" not in str(refused.value)


def test_the_readme_fits_the_bundle(bundle):
    text = (bundle.folder / "README.md").read_text()
    assert "make test" not in text and "solutions/" not in text
    assert release.NOT_IN_BUNDLE not in text and release.END_MARK not in text and "learners' bundle:" not in text
    assert "Instructors release and grade the course from their own copy" in text
    for link in re.findall(r"\]\(([^):#]+)\)", text):  # relative links lead to bundled files
        assert (bundle.folder / link).exists(), link
    targets = set(re.findall(r"(?:^|`)make ([a-z][\w-]*)", text, re.M))
    assert {"check", "progress", "bench", "lab"} <= targets
    for target in sorted(targets):  # each exists, and what it runs needs no solutions/
        dry = subprocess.run(
            ["make", "-n", target, "PYTHON=python3"], cwd=bundle.folder, capture_output=True, text=True
        )
        assert dry.returncode == 0 and "solutions" not in dry.stdout, (target, dry.stdout, dry.stderr)


def test_readme_markers():
    readme = release.bundle_readme(
        "a\n<!-- not in the learners' bundle -->\nb\n<!-- end -->\n"
        "c <!-- not in the learners' bundle -->\n"
        "<!-- in the learners' bundle: d\ne -->\nf\n"
    )
    assert readme == "a\nd\ne\nf\n"
    with pytest.raises(release.ReleaseError, match="README.md:2: .* has no <!-- end -->"):
        release.bundle_readme("a\n<!-- not in the learners' bundle -->\nb\n")
    with pytest.raises(release.ReleaseError, match="not where it belongs"):
        release.bundle_readme("a\n<!-- end -->\n")


def test_speed_carries_most_points_where_the_starting_kernel_is_already_correct():
    _needs_nbgrader()  # the points live in the course's nbgrader configuration
    from grader.core.catalog import find_module

    tiling, vector_add = find_module("optimization/01-tiling"), find_module("missing-elements/01-vector-add")
    assert course.points(tiling) == {"public": 2, "hidden": 2, "performance": 6}
    assert course.points(vector_add) == course.POINTS == {"public": 4, "hidden": 4, "performance": 2}
    assert sum(course.points(tiling).values()) == sum(course.POINTS.values())  # every assignment out of 10
    cells = [c for c in json.loads(course.notebook_text(tiling))["cells"] if c["metadata"]["nbgrader"].get("grade")]
    assert [(c["metadata"]["nbgrader"]["grade_id"], c["metadata"]["nbgrader"]["points"]) for c in cells] == [
        ("public", 2),
        ("hidden", 2),
        ("performance", 6),
    ]
    assert "out_of=6" in "".join(cells[-1]["source"])


# --- the bundle's Makefile --------------------------------------------------------------------

INSTRUCTOR_TARGETS = (
    "grade",
    "release",
    "test",
    "lint",
    "mutants",
    "verify-gpu",
    "verify-secrets",
    "verify-versions",
    "stubs",
)


def _make(folder, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=folder, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def learners_makefile(tmp_path_factory):
    """The bundle's Makefile, generated from the repository's, alone in a folder."""
    folder = tmp_path_factory.mktemp("makefile")
    (folder / "Makefile").write_text(release.bundle_makefile((REPO_ROOT / "Makefile").read_text()))
    return folder


def test_the_bundle_holds_the_learners_makefile(bundle):
    makefile = (bundle.folder / "Makefile").read_text()
    assert makefile == release.bundle_makefile((REPO_ROOT / "Makefile").read_text())
    graded = _make(bundle.folder, "grade")
    assert graded.returncode != 0 and "instructor's copy" in graded.stdout and "Traceback" not in graded.stderr


def test_the_bundle_makefile_helps_with_learners_commands_only(learners_makefile):
    shown = _make(learners_makefile, "help")
    assert shown.returncode == 0, shown.stderr
    for target in ("check", "progress", "bench", "lab"):
        assert f"make {target}" in shown.stdout
    for target in INSTRUCTOR_TARGETS:
        assert not re.search(rf"\b{target}\b", shown.stdout), target
    assert "solutions" not in shown.stdout and "nbgrader" not in shown.stdout
    # make help prints exactly the file's leading comment, no line of the rules after it
    header = (learners_makefile / "Makefile").read_text().splitlines()
    assert len(shown.stdout.splitlines()) == next(i for i, line in enumerate(header) if not line.startswith("#"))


def test_instructor_targets_in_the_bundle_say_where_that_is_done(learners_makefile):
    graded = _make(learners_makefile, "grade")
    assert graded.returncode != 0 and "Traceback" not in graded.stdout + graded.stderr
    [line] = graded.stdout.splitlines()
    assert line.startswith("make grade: grading is done from your instructor's copy of the course")
    for target in INSTRUCTOR_TARGETS:
        said = _make(learners_makefile, target)
        assert said.returncode != 0 and said.stdout.startswith(f"make {target}: "), (target, said.stdout)
        assert len(said.stdout.splitlines()) == 1, target  # that line only: nothing else ran


def test_learners_targets_in_the_bundle_run_what_the_repository_runs(learners_makefile):
    text = (learners_makefile / "Makefile").read_text()
    for name in ("SUBMISSIONS", "GRADING_ENV", "DEV_ENV", "GPU_WORKERS", ".venv/.grading", ".venv/.dev"):
        assert name not in text, name  # only what learners' rules use is left
    for target in ("check", "progress", "bench", "lab"):
        ours = _make(learners_makefile, "-n", target, "PYTHON=python3", "M=missing-elements/01-vector-add")
        theirs = _make(REPO_ROOT, "-n", target, "PYTHON=python3", "M=missing-elements/01-vector-add")
        assert ours.returncode == 0 and ours.stdout == theirs.stdout, (target, ours.stderr)


def test_a_help_text_the_generator_cannot_clean_is_refused():
    rules = "\n\nhelp:\n\t@sed -n '1,3p' Makefile\n\ncheck:\n\t@echo check\n\ngrade:\n\t@echo grade\n"
    clean = release.bundle_makefile("# Targets.\n#\n#   make check | make grade   (instructors)" + rules)
    assert "make grade" not in clean.split("\n\n")[0] and "@sed -n '1,3p' Makefile" in clean
    with pytest.raises(release.ReleaseError, match="names a target learners do not get"):
        release.bundle_makefile("# Targets.\n#\n#   make check (then make grade)" + rules)
    with pytest.raises(release.ReleaseError, match="share a paragraph"):
        release.bundle_makefile("# Targets.\n#\n#   make check" + rules.replace("\n\ngrade:", "\ngrade:"))


def test_the_given_files_exist_and_only_they_count_as_shown_beside_the_stubs():
    """A module's complete, given code (a worked operator) is shown on purpose; it is named one by
    one, so that any other file under tracks/ cannot hide a solution line."""
    for name in release.GIVEN_FILES:
        assert (release.TRACKS_DIR / name).is_file(), f"{name} is named as given but does not exist"
