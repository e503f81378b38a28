"""The learners' bundle: the repository minus everything instructors keep to themselves.

``build()`` copies the repository's files (tracked, plus new ones git does not ignore) except
``solutions/``, ``grader/examples/`` (example submissions, some of them solutions) and ``tests/``
(the course's own suite, which needs the solutions: learners run ``make check``), adds
nbgrader's ``generate_assignment`` output as ``release/<track>-<slug>/``, and then checks the
result: a bundle that contains a line of a reference solution's TODO regions or of a
``hidden.py`` is deleted and reported, never left for someone to hand out.

A "secret" line is one that the learner-facing course material (``tracks/``) does not show
anywhere: short lines and lines a README teaches on purpose do not count.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader import course
from grader.catalog import REPO_ROOT, TRACKS_DIR, Module
from grader.stubs import is_marker, modules_with_solutions

DEFAULT_OUT = REPO_ROOT / "build" / "release"
# The reference solutions and hidden cases; example submissions (some are solutions); the course's
# own test suite, which runs against solutions/ and holds kernels of its own.
INSTRUCTOR_ONLY = ("solutions/", "grader/examples/", "tests/")
_MIN_SECRET_CHARS = 10


class ReleaseError(RuntimeError):
    """The bundle could not be built, or would have leaked instructor-only text."""


@dataclass
class Bundle:
    folder: Path
    files: list[str]  # relative paths copied from the repository
    uncommitted: list[str]  # of those, files git does not track yet
    assignments: list[str]


def repository_files(root: Path = REPO_ROOT) -> tuple[list[str], list[str]]:
    """(every file a commit of the work tree would hold, the untracked ones among them)."""
    def git(*args: str) -> list[str]:
        result = subprocess.run(["git", "ls-files", "-z", *args], cwd=root, capture_output=True)
        if result.returncode != 0:
            raise ReleaseError(f"`git ls-files` failed in {root}: {result.stderr.decode().strip()} "
                               "Build the release from a git checkout of the course.")
        return [name for name in result.stdout.decode().split("\0") if name]

    tracked = git("--cached")
    untracked = git("--others", "--exclude-standard")
    files = sorted(name for name in {*tracked, *untracked} if (root / name).is_file())
    return files, sorted(set(untracked) & set(files))


def _released(name: str) -> bool:
    return not name.startswith(INSTRUCTOR_ONLY)


# ----------------------------------------------------------------------------------------------
# What must never be in the bundle
# ----------------------------------------------------------------------------------------------


def secret_lines(modules: list[Module] | None = None) -> dict[str, str]:
    """{line: where it comes from} for every solution-region line and hidden-case line that the
    course material under tracks/ does not show."""
    shown = "\n".join(path.read_text(errors="replace") for path in sorted(TRACKS_DIR.rglob("*"))
                      if path.is_file() and path.suffix in (".py", ".md"))
    secrets: dict[str, str] = {}
    for module in modules or modules_with_solutions():
        sources = [module.solution_dir / "kernel.py", module.solution_dir / "hidden.py"]
        for path in filter(Path.is_file, sources):
            for number, raw in enumerate(path.read_text().splitlines(), start=1):
                line = raw.strip()
                if len(line.replace(" ", "")) >= _MIN_SECRET_CHARS and line not in shown and not is_marker(line):
                    secrets.setdefault(line, f"{path.relative_to(REPO_ROOT)}:{number}")
    return secrets


def hidden_case_names(modules: list[Module] | None = None) -> set[str]:
    """The names of hidden cases (label, sizes, dtype) that no public case shares."""
    from grader import cases

    names = set()
    for module in modules or modules_with_solutions():
        _, public = cases.public(module)
        public_names = {c.name for c in public}
        names |= {c.name for c in cases.hidden(module) if c.name not in public_names}
    return names


def find_leaks(folder: Path, modules: list[Module] | None = None, pattern: str = "*") -> list[str]:
    """'<file>: <secret> (from <origin>)' for each secret found in a text file under ``folder``
    whose name matches ``pattern``."""
    secrets = secret_lines(modules)
    secrets.update({name: "a hidden case's name" for name in hidden_case_names(modules)})
    found = []
    for path in sorted(p for p in Path(folder).rglob(pattern) if p.is_file()):
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images) hold no source text
        found += [f"{path.relative_to(folder)}: {secret!r} (from {origin})"
                  for secret, origin in secrets.items() if secret in text]
    return found


# ----------------------------------------------------------------------------------------------
# Building the bundle
# ----------------------------------------------------------------------------------------------


def build(out: Path = DEFAULT_OUT, course_dir: Path = course.DEFAULT_COURSE_DIR,
          modules: list[Module] | None = None) -> Bundle:
    """Write the learners' bundle into ``out`` (replacing it) and check it for leaks."""
    out, course_dir = Path(out).resolve(), Path(course_dir).resolve()
    if out == REPO_ROOT or REPO_ROOT.is_relative_to(out):
        raise ReleaseError(f"--out {out} would replace the repository itself; choose a new folder "
                           "such as build/release.")
    files, untracked = repository_files()
    files = [name for name in files if _released(name)]
    assignments = course.generate_assignments(course_dir, modules)
    if out.exists():
        shutil.rmtree(out)
    for name in files:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)
    for name in assignments:
        shutil.copytree(course_dir / "release" / name, out / "release" / name)
    leaks = find_leaks(out)
    if leaks:
        shutil.rmtree(out)
        shown = "\n  ".join(leaks[:10]) + (f"\n  ... and {len(leaks) - 10} more" if len(leaks) > 10 else "")
        raise ReleaseError(f"The release would contain instructor-only text, so it was deleted:\n  {shown}\n"
                           "Remove that text from the files named (or move them under solutions/), "
                           "then run `make release` again.")
    return Bundle(out, files, [name for name in untracked if _released(name)], assignments)
