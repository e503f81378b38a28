"""The learners' bundle: the repository minus everything instructors keep to themselves.

``build()`` copies the repository's files (tracked, plus new ones git does not ignore) except
what only instructors and maintainers use (``INSTRUCTOR_ONLY``), writes every learner
``kernel.py`` as the generator makes it (``stub_for``: the working tree's copy may hold someone's
finished kernel), writes README.md without the parts marked as not for learners, adds nbgrader's
``generate_assignment`` output as ``release/<track>-<slug>/``, and then checks the result: a
bundle that contains a line of a reference solution's TODO regions or of a ``hidden.py``, or a
learner ``kernel.py`` that is not the generated stub, is deleted and reported, never left for
someone to hand out.

A "secret" line is one that the course shows learners nowhere: not in a generated stub, nor in a
README or public test under ``tracks/``. Short lines do not count.

README.md marks what learners do not get with HTML comments, invisible on the rendered page:

    <!-- not in the learners' bundle -->     on a line of its own: drop every line up to
    ...                                      the next <!-- end -->
    <!-- end -->
    text <!-- not in the learners' bundle -->     anywhere else in a line: drop that line
    <!-- in the learners' bundle: text -->       only the bundle shows the text
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

from grader.core.catalog import REPO_ROOT, TRACKS_DIR, Module
from grader.core.markers import is_marker, modules_with_solutions, stub_for
from grader.grade import course

DEFAULT_OUT = REPO_ROOT / "build" / "release"
# The reference solutions and hidden cases; example submissions (some are solutions); the course's
# own test suite, which runs against solutions/ and holds kernels of its own; continuous
# integration, which runs that suite; the instructors' guide.
INSTRUCTOR_ONLY = ("solutions/", "grader/examples/", "tests/", ".ci/", "docs/instructors.md", "docs/maintainers.md")
_MIN_SECRET_CHARS = 10
NOT_IN_BUNDLE = "<!-- not in the learners' bundle -->"
END_MARK = "<!-- end -->"
_IN_BUNDLE = re.compile(r"<!-- in the learners' bundle: (.*?)\s*-->", re.S)


# The Makefile's rules that learners use. The bundle's Makefile is the repository's without the
# others (grading, releasing, stubs from solutions/, the course's own tests and maintainers'
# checks), whose targets there print one line saying where that work is done (``bundle_makefile``).
LEARNER_TARGETS = ("help", "check", "progress", "bench", "lab", "clean-env", ".venv/.ready")
_ELSEWHERE = {
    "grade": "grading is done from your instructor's copy of the course (it needs solutions/ and the hidden "
    "cases); to see where you stand, run make check or make progress.",
    "release": "the learners' copy is built from the instructor's copy of the course; this is one already.",
    "stubs": "the starting kernels are generated from solutions/, which this copy leaves out; each module's "
    "starting kernel.py is also in release/<track>-<module>/, to copy back if you want to start again.",
}
_MAINTAINERS = (
    "the course's own checks run in the maintainers' copy of the course (with solutions/ and tests/); "
    "to check your kernels, run make check."
)


class ReleaseError(RuntimeError):
    """The bundle could not be built, or would have leaked instructor-only text."""


@dataclass
class Bundle:
    folder: Path
    files: list[str]  # relative paths of the repository's files in the bundle
    uncommitted: list[str]  # of those, files git does not track yet (generated ones aside)
    assignments: list[str]


def repository_files(root: Path = REPO_ROOT) -> tuple[list[str], list[str]]:
    """(every file a commit of the work tree would hold, the untracked ones among them)."""

    def git(*args: str) -> list[str]:
        result = subprocess.run(["git", "ls-files", "-z", *args], cwd=root, capture_output=True)
        if result.returncode != 0:
            raise ReleaseError(
                f"`git ls-files` failed in {root}: {result.stderr.decode().strip()} "
                "Build the release from a git checkout of the course."
            )
        return [name for name in result.stdout.decode().split("\0") if name]

    tracked = git("--cached")
    untracked = git("--others", "--exclude-standard")
    files = sorted(name for name in {*tracked, *untracked} if (root / name).is_file())
    return files, sorted(set(untracked) & set(files))


def _released(name: str) -> bool:
    return not name.startswith(INSTRUCTOR_ONLY)


def learner_kernels(modules: list[Module] | None = None) -> dict[str, str]:
    """{path in the bundle: the generated stub} for every learner kernel.py the bundle holds."""
    kernels = {}
    for module in modules or modules_with_solutions():
        stub = stub_for(module)
        kernels[f"tracks/{module.id}/kernel.py"] = stub
        kernels[f"release/{course.assignment_name(module)}/kernel.py"] = stub
    return kernels


def bundle_readme(text: str) -> str:
    """README.md as learners get it: the marked parts dropped or shown (see the module's doc)."""
    kept, opened = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        if opened:
            opened = None if line.strip() == END_MARK else opened
        elif line.strip() == NOT_IN_BUNDLE:
            opened = number
        elif NOT_IN_BUNDLE not in line:
            kept.append(line)
    if opened:
        raise ReleaseError(f"README.md:{opened}: {NOT_IN_BUNDLE} has no {END_MARK} after it.")
    readme = _IN_BUNDLE.sub(lambda match: match[1], "\n".join(kept))
    if END_MARK in readme or "learners' bundle -->" in readme:
        raise ReleaseError(
            f"README.md: a {END_MARK} or a bundle marker is not where it belongs; "
            "see the markers in grader/grade/release.py."
        )
    return re.sub(r"\n{3,}", "\n\n", readme).strip() + "\n"


# ----------------------------------------------------------------------------------------------
# The bundle's Makefile
# ----------------------------------------------------------------------------------------------

_RULE = re.compile(r"^(?P<targets>[^\s#=:][^=:]*?)\s*:(?!=)")
_DEFINITION = re.compile(r"^(?P<name>\w+)\s*(?:\?=|:=|\+=|=)")
_HELP_LINES = re.compile(r"sed -n '1,(\d+)p' Makefile")


def _rule_targets(line: str) -> list[str]:
    """The targets a rule line defines ([] for any other line: recipes, variables, comments)."""
    if line.startswith("\t"):
        return []
    rule = _RULE.match(line)
    return rule["targets"].split() if rule else []


def _mentions(text: str, targets: set[str]) -> bool:
    """Whether ``text`` names one of ``targets`` as a word (``verify-*`` names every verify- target)."""
    words = re.findall(r"[\w.*/-]+", text)
    return any(
        word == target or ("*" in word and fnmatch.fnmatch(target, word)) for word in words for target in targets
    )


def _help_header(lines: list[str], dropped: set[str]) -> list[str]:
    """The Makefile's leading comment (what ``make help`` prints) without what names a dropped
    target: usage items of those targets, the prose clauses about them, IMPL=solutions."""
    prose, usage = [], []
    for line in lines:
        text = line[1:].strip()
        if text.startswith("make "):
            items = [item for item in text.split(" | ") if item.split()[1] not in dropped]
            if items:
                usage.append("#   " + re.sub(r"IMPL=solutions\|", "IMPL=", " | ".join(items)))
        elif text:
            prose.append(text)
        elif usage:
            usage.append("#")
    clauses = [c for c in re.split(r"(?<=[.;])\s+", " ".join(prose)) if not _mentions(c, dropped)]
    # A clause that ended in ";" before one that was taken out now ends its sentence.
    for i, clause in enumerate(clauses):
        if clause.endswith(";") and (i + 1 == len(clauses) or clauses[i + 1][:1].isupper()):
            clauses[i] = clause[:-1] + "."
    wrapped = ["# " + line for line in textwrap.wrap(" ".join(clauses), 98)]
    return [*wrapped, "#", *usage] if usage else wrapped


def _unused_definitions_dropped(lines: list[str]) -> list[str]:
    """``lines`` without the variable definitions nothing refers to any more (with the comment
    lines right above each), repeated until none is left."""
    while True:
        text = "\n".join(lines)
        unused = {
            i
            for i, line in enumerate(lines)
            if (d := _DEFINITION.match(line)) and not re.search(rf"\$[({{]{d['name']}[)}}]", text)
        }
        if not unused:
            return lines
        for i in sorted(unused):
            above = i - 1
            while above >= 0 and lines[above].startswith("#") and above not in unused:
                unused.add(above)
                above -= 1
        lines = [line for i, line in enumerate(lines) if i not in unused]


def _stand_ins(dropped: set[str]) -> list[str]:
    """A rule per dropped target a learner may type: one line saying where that is done."""
    lines = ["", "# Instructors and maintainers work in their own copy of the course, which has solutions/."]
    for target in sorted(t for t in dropped if not t.startswith(".")):
        why = _ELSEWHERE.get(target, _MAINTAINERS)
        if any(c in why for c in '"$`\\'):
            raise ReleaseError(f"the bundle's message for make {target} holds a character the shell would read")
        lines += ["", f"{target}:", f'\t@echo "make {target}: {why}"; exit 2']
    return lines


def bundle_makefile(text: str) -> str:
    """The repository's Makefile as learners get it: only ``LEARNER_TARGETS``' rules, the help
    text saying only those, the variables they use; the other targets print where they are
    done. Raises ReleaseError where the result would still name a left-out target in its help."""
    lines = text.splitlines()
    header_end = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    targets = {t for line in lines for t in _rule_targets(line) if t != ".PHONY"}
    dropped = targets - set(LEARNER_TARGETS)
    header = _help_header(lines[:header_end], dropped)
    blocks, block = [], []
    for line in lines[header_end:] + [""]:
        if line.strip():
            block.append(line)
        elif block:
            blocks.append(block)
            block = []
    kept = []
    for block in blocks:
        defined = {t for line in block for t in _rule_targets(line) if t != ".PHONY"}
        if defined & dropped and defined - dropped:
            raise ReleaseError(
                f"Makefile: the rules of {sorted(defined)} share a paragraph; put a blank line "
                "between learners' rules and the others."
            )
        if not defined & dropped:
            kept.append([_phony_line(line, dropped) for line in block])
    body = _unused_definitions_dropped([line for block in kept for line in [*block, ""]])
    result = "\n".join([*header, "", *body]).rstrip() + "\n" + "\n".join(_stand_ins(dropped)) + "\n"
    found = _HELP_LINES.search(result)
    if found is None:
        raise ReleaseError(
            "Makefile: `make help` does not print the file's first lines with sed -n '1,Np' as "
            "grader/grade/release.py expects; update bundle_makefile to match."
        )
    result = result[: found.start(1)] + str(len(header)) + result[found.end(1) :]
    if _mentions("\n".join(header), dropped) or "solutions" in "\n".join(header):
        raise ReleaseError(
            "Makefile: the help text names a target learners do not get, in a way "
            "grader/grade/release.py cannot take out; reword it."
        )
    return result


def _phony_line(line: str, dropped: set[str]) -> str:
    """``.PHONY:`` without the dropped targets, and with the stand-ins that replace them."""
    if not line.startswith(".PHONY:"):
        return line
    names = [name for name in line.split()[1:] if name not in dropped]
    return " ".join([".PHONY:", *names, *sorted(t for t in dropped if not t.startswith("."))])


# ----------------------------------------------------------------------------------------------
# What must never be in the bundle
# ----------------------------------------------------------------------------------------------


# Complete code a module gives its learners beside their kernel.py, to read (a worked operator,
# a benchmark script): shown on purpose, as the stubs are. Named one by one, so that a scratch file
# left under tracks/ can never make a solution's lines count as shown.
GIVEN_FILES = (
    "mastery/04-training-kernels/mamba_step.py",
    "mastery/04-training-kernels/training_loop.py",
    "mastery/04-training-kernels/transformer_step.py",
    "mastery/05-production-ready/attention_op.py",
    "mastery/05-production-ready/benchmark.py",
)


def public_text(modules: list[Module] | None = None) -> str:
    """What the course shows learners on purpose: the generated stubs, the READMEs and public
    tests under tracks/, and the given files (never a kernel.py there, which may be someone's
    finished work)."""
    material = [
        path.read_text(errors="replace")
        for path in sorted(TRACKS_DIR.rglob("*"))
        if path.is_file()
        and (
            path.suffix == ".md"
            or (path.name.startswith("test_") and path.suffix == ".py")
            or path.relative_to(TRACKS_DIR).as_posix() in GIVEN_FILES
        )
    ]
    return "\n".join([*material, *learner_kernels(modules).values()])


def secret_lines(modules: list[Module] | None = None) -> dict[str, str]:
    """{line: where it comes from} for every solution-region line and hidden-case line that the
    course does not show learners (``public_text``)."""
    shown = public_text()
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
    from grader.core import cases

    names = set()
    for module in modules or modules_with_solutions():
        _, public = cases.public(module)
        public_names = {c.name for c in public}
        names |= {c.name for c in cases.hidden(module) if c.name not in public_names}
    return names


def find_leaks(folder: Path, modules: list[Module] | None = None, pattern: str = "*") -> list[str]:
    """'<file>: <what>' for each secret found in a text file under ``folder`` whose name matches
    ``pattern``, and for each learner kernel.py there that is not the generated stub (a finished
    kernel may hold only lines the course shows, yet completes every TODO)."""
    secrets = secret_lines(modules)
    secrets.update(dict.fromkeys(hidden_case_names(modules), "a hidden case's name"))
    stubs = learner_kernels(modules)
    found = []
    for path in sorted(p for p in Path(folder).rglob(pattern) if p.is_file()):
        name = path.relative_to(folder).as_posix()
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images) hold no source text
        if name in stubs and text != stubs[name]:
            found.append(f"{name}: not the generated stub (learners get exactly what `make stubs` writes)")
        found += [f"{name}: {secret!r} (from {origin})" for secret, origin in secrets.items() if secret in text]
    return found


# ----------------------------------------------------------------------------------------------
# Building the bundle
# ----------------------------------------------------------------------------------------------


def build(
    out: Path = DEFAULT_OUT,
    course_dir: Path = course.DEFAULT_COURSE_DIR,
    modules: list[Module] | None = None,
    root: Path = REPO_ROOT,
) -> Bundle:
    """Write the learners' bundle of the repository ``root`` into ``out`` (replacing it) and
    check it for leaks."""
    out, course_dir, root = Path(out).resolve(), Path(course_dir).resolve(), Path(root).resolve()
    if any(repo.is_relative_to(out) for repo in (REPO_ROOT, root)):
        raise ReleaseError(
            f"--out {out} would replace the repository itself; choose a new folder such as build/release."
        )
    files, untracked = repository_files(root)
    files = [name for name in files if _released(name)]
    kernels = learner_kernels()
    generated = {name: text for name, text in kernels.items() if name.startswith("tracks/")}
    if "README.md" in files:
        generated["README.md"] = bundle_readme((root / "README.md").read_text())
    if "Makefile" in files:
        generated["Makefile"] = bundle_makefile((root / "Makefile").read_text())
    assignments = course.generate_assignments(course_dir, modules)
    if out.exists():
        shutil.rmtree(out)
    for name in files:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    for name, text in generated.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    for name in assignments:
        shutil.copytree(course_dir / "release" / name, out / "release" / name)
        # The course's source copies tracks/: put the generated stub in its place here too.
        stub = kernels.get(f"release/{name}/kernel.py")
        if stub is not None:
            (out / "release" / name / "kernel.py").write_text(stub)
    leaks = find_leaks(out)
    if leaks:
        shutil.rmtree(out)
        shown = "\n  ".join(leaks[:10]) + (f"\n  ... and {len(leaks) - 10} more" if len(leaks) > 10 else "")
        raise ReleaseError(
            f"The release would contain instructor-only text, so it was deleted:\n  {shown}\n"
            "Remove that text from the files named (or move them under solutions/), "
            "then run `make release` again."
        )
    released = sorted({*files, *generated})
    return Bundle(out, released, [name for name in untracked if _released(name) and name not in generated], assignments)
