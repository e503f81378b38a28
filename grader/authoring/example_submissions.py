"""Assemble the example submissions that `make grade` and the tests grade.

Two kinds of student are generated from the course itself, so that they never go stale:
``complete`` (the reference solutions, as ``<track>/<slug>/kernel.py``) and ``stub`` (the learner
files as the generator writes them, in nbgrader's ``<track>-<slug>/kernel.py`` layout: never the
working tree's ``tracks/`` copy, which may hold someone's work). The others live under
``grader/examples/submissions/``: a partial solution and one per row of the grader's threat
model (GPU-only rows under ``submissions-gpu/``). Those of vector add are small, hand-written
files; those of larger modules are a ``kernel.patch`` on the module's reference solution or stub
(a unified diff whose ``---`` line names it), applied when the examples are assembled, so that
they follow the reference and a patch that no longer applies fails loudly. ``make_patch`` writes
one from an edited copy.

Each example's expected outcome is data beside it: ``expected.json`` in its folder (the generated
students' in ``grader/examples/generated.json``), read by ``expected``; the schema is described in
``grader/examples/submissions/README.md``, whose tables ``readme_table`` writes from those files.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from grader.core.catalog import REPO_ROOT, Module
from grader.core.markers import modules_with_solutions, stub_for

HANDWRITTEN = REPO_ROOT / "grader" / "examples" / "submissions"
HANDWRITTEN_GPU = REPO_ROOT / "grader" / "examples" / "submissions-gpu"
EXPECTED = "expected.json"  # each example folder's expected outcome (see expected())
GENERATED = REPO_ROOT / "grader" / "examples" / "generated.json"  # that of the generated students
GATED_TEST = "tests/grade/test_runphase_gated.py"  # grades vector add's examples as make grade does
BEHIND_TEST = "tests/grade/test_runphase.py"  # grades them with the policy gate switched off
OUTCOMES = ("full marks", "partial", "no points", "refused", "not graded")


def assemble(dest: Path, modules: list[Module] | None = None, handwritten: bool = True, gpu: bool = False) -> list[str]:
    """Write the example students into ``dest``; return their names."""
    modules = modules if modules is not None else modules_with_solutions()
    dest.mkdir(parents=True, exist_ok=True)
    for module in modules:
        complete = dest / "complete" / module.track / module.slug
        complete.mkdir(parents=True, exist_ok=True)
        shutil.copy(module.solution_dir / "kernel.py", complete / "kernel.py")
        stub = dest / "stub" / f"{module.track}-{module.slug}"
        stub.mkdir(parents=True, exist_ok=True)
        (stub / "kernel.py").write_text(stub_for(module))
    folders = []
    if handwritten:
        folders += sorted(p for p in HANDWRITTEN.iterdir() if p.is_dir())
    if gpu:
        folders += sorted(p for p in HANDWRITTEN_GPU.iterdir() if p.is_dir())
    for folder in folders:
        shutil.copytree(folder, dest / folder.name, dirs_exist_ok=True, ignore=shutil.ignore_patterns(PATCH, EXPECTED))
        for patch in folder.rglob(PATCH):
            (dest / folder.name / patch.parent.relative_to(folder) / "kernel.py").write_text(derived(patch))
    return sorted(p.name for p in dest.iterdir() if p.is_dir())


PATCH = "kernel.patch"
STUB_OF = "stub of "  # a patch's base named "stub of <track>/<slug>": the generated learner file


class PatchError(ValueError):
    """An example's patch no longer applies to the file it was made from."""


def kernel_source(folder: Path) -> str:
    """The kernel.py of an example's module folder: the file, or its patch applied."""
    written = folder / "kernel.py"
    return written.read_text() if written.is_file() else derived(folder / PATCH)


def make_patch(base_label: str, edited: str) -> str:
    """The patch that turns ``base_label`` (``solutions/<track>/<slug>/kernel.py``, or ``stub of
    <track>/<slug>``) into ``edited``."""
    base, edited = (text if text.endswith("\n") else text + "\n" for text in (_base(base_label), edited))
    lines = difflib.unified_diff(
        base.splitlines(keepends=True), edited.splitlines(keepends=True), fromfile=base_label, tofile="kernel.py", n=2
    )
    return "".join(lines)


def derived(patch: Path) -> str:
    """The file ``patch`` makes of its base. Each hunk's old lines (context and removals) must
    appear in the base after the previous hunk's; line numbers are only hints."""
    text = patch.read_text()
    header = next((line for line in text.splitlines() if line.startswith("--- ")), None)
    if header is None:
        raise PatchError(f"{patch} names no base file (no '--- ' line)")
    base_label = header[4:].strip()
    base, result, cursor = _base(base_label).splitlines(keepends=True), [], 0
    for old, new in _hunks(text):
        at = next((i for i in range(cursor, len(base) - len(old) + 1) if base[i : i + len(old)] == old), None)
        if at is None:
            raise PatchError(
                f"{patch} no longer applies to {base_label} (near: {''.join(old)[:120]!r}); "
                "edit a copy of the new base and write the patch again with make_patch"
            )
        result += base[cursor:at] + new
        cursor = at + len(old)
    return "".join(result + base[cursor:])


def _base(label: str) -> str:
    from grader.core.catalog import find_module

    if label.startswith(STUB_OF):
        return stub_for(find_module(label[len(STUB_OF) :]))
    return (REPO_ROOT / label).read_text()


def _hunks(text: str) -> list[tuple[list[str], list[str]]]:
    hunks, old, new = [], None, None
    for line in text.splitlines(keepends=True):
        if line.startswith("@@"):
            if old is not None:
                hunks.append((old, new))
            old, new = [], []
        elif old is not None and line[:1] in (" ", "-", "+"):
            if line[0] != "+":
                old.append(line[1:])
            if line[0] != "-":
                new.append(line[1:])
    if old is not None:
        hunks.append((old, new))
    return hunks


# --- expected outcomes ---------------------------------------------------------------------------

VECTOR_ADD_ID = "missing-elements/01-vector-add"
_MODULE = re.compile(r"[a-z0-9-]+/\d\d-[a-z0-9-]+")
_NO_VIOLATION_CHECK = object()


class ExpectedError(ValueError):
    """An example's expected.json is missing or does not follow the schema."""


@dataclass(frozen=True)
class Outcome:
    """What grading one example gives, with the policy gate on (``make grade``) or off.

    ``outcome``: "full marks" (not refused, every case passes), "partial" (not refused, some but
    not every case passes), "no points" (not refused, the module scores 0, the reason said),
    "refused" (the gate refused the file, the line named, 0) or, behind the gate only, "not
    graded" (no test grades it with the gate off). ``reason``: a regular expression that the
    refusal (refused) or one of the integrity finding, import error, summary and case messages
    must match. ``violation``: the integrity finding's kind, None for none (unchecked when absent).
    ``needs``: the sandbox protection the outcome depends on (skipped where it is missing).
    ``graded_by``: the test file that grades the example so, or None. ``says``: the README's words.
    ``interpreter_only``: why the outcome holds under Triton's interpreter only (on a GPU the test
    that grades it skips, saying so), or None where it holds on both.
    """

    outcome: str
    says: str
    graded_by: str | None
    reason: str | None = None
    violation: object = _NO_VIOLATION_CHECK
    needs: str | None = None
    interpreter_only: str | None = None

    @property
    def checks_violation(self) -> bool:
        return self.violation is not _NO_VIOLATION_CHECK

    def problems(self, record: dict) -> list[str]:
        """How ``record`` (a grading record) differs from this outcome; empty when it matches."""
        found, totals, refusal = [], record["totals"], record["refusal"]
        integrity = record["integrity"] or {}
        if self.outcome == "refused":
            if not (refusal and re.search(r"line \d+: ", refusal)):
                found.append(f"not refused with a line named: {refusal!r}")
            if integrity.get("violation") != "policy" or totals["score"] != 0.0:
                found.append(f"refused without a policy finding and no points: {integrity}, {totals}")
            if not all(row["kind"] == "policy" for row in record["cases"]):
                found.append("a case ran although the file was refused")
        elif refusal is not None:
            found.append(f"refused: {refusal}")
        if self.outcome == "full marks" and not totals["passed"] == totals["total"] > 0:
            found.append(f"not every case passes: {totals}")
        if self.outcome == "partial" and not 0 < totals["passed"] < totals["total"]:
            found.append(f"not partial: {totals}")
        if self.outcome in ("no points", "refused"):
            if totals["score"] != 0.0:
                found.append(f"points given: {totals}")
            said = refusal or integrity.get("message") or record["load_error"] or ""
            if said and len(said) <= 20:
                found.append(f"the reason is too short to say anything: {said!r}")
            if not said and not all(row["message"] for row in record["cases"]):
                found.append("a case failed without saying why")
        if self.reason is not None:
            texts = (
                [refusal or ""]
                if self.outcome == "refused"
                else [
                    integrity.get("message") or "",
                    record["load_error"] or "",
                    record["summary"] or "",
                    *(row["message"] for row in record["cases"]),
                ]
            )
            if not any(re.search(self.reason, text) for text in texts):
                found.append(f"nothing matches {self.reason!r}: {texts[:4]}")
        if self.checks_violation and integrity.get("violation") != self.violation:
            found.append(f"integrity finding {integrity.get('violation')!r}, expected {self.violation!r}")
        return found


@dataclass(frozen=True)
class Expected:
    """One example's expected.json: the module it attacks (None: every module, the generated
    students), what it tries, and its outcome with the gate and behind it (None: graded with the
    gate only, as the GPU examples are)."""

    name: str
    module: str | None
    tries: str
    with_gate: Outcome
    behind_gate: Outcome | None
    gpu: bool = False

    def graded_by(self, test: str) -> bool:
        """Whether ``test`` (a path from the repository root) grades this example, in either phase."""
        return any(phase is not None and phase.graded_by == test for phase in (self.with_gate, self.behind_gate))


def example_folders(gpu: bool | None = None) -> list[Path]:
    """The example folders (those of CPU examples, of GPU ones, or both for None)."""
    roots = {False: [HANDWRITTEN], True: [HANDWRITTEN_GPU], None: [HANDWRITTEN, HANDWRITTEN_GPU]}[gpu]
    return [p for root in roots for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def expected(name: str) -> Expected:
    """The expected outcome of the example ``name`` (a folder, or a generated student)."""
    generated = _generated()
    if name in generated:
        return _parse(name, generated[name], GENERATED, folder=None, gpu=False)
    for gpu, root in ((False, HANDWRITTEN), (True, HANDWRITTEN_GPU)):
        folder = root / name
        if folder.is_dir():
            path = folder / EXPECTED
            if not path.is_file():
                raise ExpectedError(f"{folder} has no {EXPECTED}: add the example's expected outcome there")
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as error:
                raise ExpectedError(f"{path} is not valid JSON: {error}") from error
            return _parse(name, data, path, folder=folder, gpu=gpu)
    raise ExpectedError(f"no example named {name!r} in {HANDWRITTEN} or {HANDWRITTEN_GPU}, nor in {GENERATED}")


def expected_all() -> dict[str, Expected]:
    """Every example's expected outcome, by name: the generated students first, then the folders."""
    names = [*_generated(), *(folder.name for folder in example_folders())]
    return {name: expected(name) for name in names}


def refused_by_the_gate_alone() -> frozenset[str]:
    """Vector add's examples that the gate refuses and the grading behind the gate skips: the
    evidence gathered in the child's own process can be switched off by the very code the gate
    refuses (computing in a thread, in a heuristic or in NumPy, forging the child's channel), so
    nothing behind the gate grades them, or a test of its own does (patching the monitor, which
    the canary after each call catches: tests/sandbox/test_child_hardening.py)."""
    return frozenset(
        name
        for name, found in expected_all().items()
        if found.module == VECTOR_ADD_ID
        and found.with_gate.outcome == "refused"
        and found.behind_gate is not None
        and found.behind_gate.graded_by != BEHIND_TEST
    )


def _generated() -> dict:
    try:
        data = json.loads(GENERATED.read_text())
    except (OSError, ValueError) as error:
        raise ExpectedError(f"{GENERATED} cannot be read as JSON: {error}") from error
    if not isinstance(data, dict):
        raise ExpectedError(f"{GENERATED} must map each generated student to its expected outcome")
    return data


def _parse(name: str, data: object, path: Path, folder: Path | None, gpu: bool) -> Expected:
    def fail(what: str):
        raise ExpectedError(f"{path} (example {name!r}): {what}")

    if not isinstance(data, dict):
        fail("must hold a JSON object")
    keys = {"module", "tries", "with_gate", "behind_gate"}
    if set(data) - keys or not {"module", "tries", "with_gate"} <= set(data):
        fail(f"needs the keys module, tries, with_gate (and behind_gate but for GPU examples), got {sorted(data)}")
    module, tries = data["module"], data["tries"]
    if folder is None:
        if module is not None:
            fail("a generated student's module is null (it has every module)")
    elif not (isinstance(module, str) and _MODULE.fullmatch(module)):
        fail(f'"module" must be "<track>/<slug>", got {module!r}')
    elif not any((folder / module / file).is_file() for file in ("kernel.py", PATCH)):
        fail(f"module {module!r} does not match the folder: no {module}/kernel.py or {module}/{PATCH}")
    if not (isinstance(tries, str) and tries.strip()):
        fail('"tries" must say in a line what the example tries')
    behind = data.get("behind_gate")
    if behind is None and not gpu:
        fail('"behind_gate" is needed: the run phase grades CPU examples with the gate off too')
    return Expected(
        name=name,
        module=module,
        tries=tries,
        with_gate=_outcome(data["with_gate"], "with_gate", fail),
        behind_gate=None if behind is None else _outcome(behind, "behind_gate", fail),
        gpu=gpu,
    )


def _outcome(data: object, where: str, fail) -> Outcome:
    keys = {"outcome", "says", "graded_by", "reason", "violation", "needs", "interpreter_only"}
    if not isinstance(data, dict) or set(data) - keys or not {"outcome", "says", "graded_by"} <= set(data):
        fail(
            f"{where} must be an object with outcome, says, graded_by "
            "(reason, violation, needs, interpreter_only optional)"
        )
    outcome, graded_by = data["outcome"], data["graded_by"]
    if outcome not in OUTCOMES or (outcome == "not graded" and where != "behind_gate"):
        fail(
            f"{where}.outcome must be one of {', '.join(OUTCOMES[:-1])} "
            f"(or, behind the gate, not graded), got {outcome!r}"
        )
    if outcome == "not graded" and graded_by is not None:
        fail(f"{where}: an example that is not graded has no graded_by")
    if graded_by is not None and not (isinstance(graded_by, str) and (REPO_ROOT / graded_by).is_file()):
        fail(f"{where}.graded_by must name a test file from the repository root, got {graded_by!r}")
    if not (isinstance(data["says"], str) and data["says"].strip()) or "|" in data["says"]:
        fail(f"{where}.says must be the README's words, without '|'")
    reason = data.get("reason")
    if outcome == "refused" and reason is None:
        fail(f"{where}: a refusal's reason must name the line the gate refuses")
    if reason is not None:
        try:
            re.compile(reason)
        except (re.error, TypeError) as error:
            fail(f"{where}.reason is not a regular expression: {error}")
    violation = data.get("violation", _NO_VIOLATION_CHECK)
    if violation is not _NO_VIOLATION_CHECK and not (violation is None or isinstance(violation, str)):
        fail(f"{where}.violation must be an integrity finding's kind, or null for none")
    needs = data.get("needs")
    if needs is not None and not isinstance(needs, str):
        fail(f"{where}.needs must name a sandbox protection")
    interpreter_only = data.get("interpreter_only")
    if interpreter_only is not None and not (isinstance(interpreter_only, str) and interpreter_only.strip()):
        fail(f"{where}.interpreter_only must say why the outcome holds under the interpreter only")
    return Outcome(outcome, data["says"], graded_by, reason, violation, needs, interpreter_only)


# --- the README tables ---------------------------------------------------------------------------

README = HANDWRITTEN / "README.md"
README_GPU = HANDWRITTEN_GPU / "README.md"
ROWS_START = "<!-- rows written from each example's expected.json: python -m grader.authoring.example_submissions -->"
ROWS_END = "<!-- end of the rows -->"


def folder_label(found: Expected) -> str:
    """The README's first column: the name, with the module's track and number where it is not
    vector add's (``custom-op-compute (mastery/05)``)."""
    if found.module in (None, VECTOR_ADD_ID):
        return found.name
    track, slug = found.module.split("/")
    return f"{found.name} ({track}/{slug[:2]})"


def readme_rows(gpu: bool = False) -> list[str]:
    """The README table (its header, then a row each) for the CPU examples (the generated students
    first) or the GPU ones: vector add's, then those of other modules, by module and name."""
    every = [found for found in expected_all().values() if found.gpu == gpu]
    every.sort(
        key=lambda found: (found.module is not None, found.module != VECTOR_ADD_ID, found.module or "", found.name)
    )
    if gpu:
        return [
            "| folder | what it does | expected outcome |",
            "|---|---|---|",
            *(f"| {folder_label(found)} | {found.tries} | {found.with_gate.says} |" for found in every),
        ]
    return [
        "| folder | what it tries | with the gate (`make grade`) | behind the gate |",
        "|---|---|---|---|",
        *(
            f"| {folder_label(found)} | {found.tries} | {found.with_gate.says} | {found.behind_gate.says} |"
            for found in every
        ),
    ]


def readme_with_rows(text: str, rows: list[str]) -> str:
    """``text`` (a README) with the rows between its markers replaced by ``rows``."""
    if text.count(ROWS_START) != 1 or text.count(ROWS_END) != 1:
        raise ExpectedError(f"the README needs one line {ROWS_START!r} and one {ROWS_END!r} around its rows")
    head, rest = text.split(ROWS_START + "\n")
    _, tail = rest.split(ROWS_END)
    return head + ROWS_START + "\n" + "".join(row + "\n" for row in rows) + ROWS_END + tail


def write_readme_tables() -> None:
    for path, gpu in ((README, False), (README_GPU, True)):
        path.write_text(readme_with_rows(path.read_text(), readme_rows(gpu)))


if __name__ == "__main__":
    write_readme_tables()
