"""The marker grammar of the course's kernels: turn a reference solution into the learner's
stub, and find the TODOs still open in a learner's file.

A solution marks each piece the learner must write as a region::

    # TODO: compute the offsets of the elements this program handles
    # HINT: program pid starts at element pid * BLOCK_SIZE
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # STUB: offsets = ...
    # END TODO

In the stub the region becomes a numbered ``# TODO n:`` comment, its hints, and the ``STUB``
lines (nothing if there are none). A ``# BUG: <what is wrong>`` ... ``# END BUG`` region gives
the learner its STUB lines with no comment at all: the planted bug of the debugging track. A BUG
region also says what the public tests report when that bug alone is planted::

    # BUG: the mask lets the last program store one element too many
    # SYMPTOM: out of bounds|past the end
    mask = offsets < n
    # STUB: mask = offsets <= n
    # END BUG

The course's suite plants each bug on its own into the reference and checks that the public
tests fail with a message matching SYMPTOM (a regular expression): the symptom, not the fix.

A file that holds several exercises, each for one sitting, divides itself into parts with a
top-level line ``# PART <n>: <title>`` before each (parts 1, 2, 3, ... in order; code before
part 1 is shared by all). The line is kept as it is in the stub, and the TODOs are numbered
afresh in each part, with the part in front: ``# TODO 2.3:`` is the third TODO of part 2. In a
file without parts they read ``# TODO 3:`` as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.catalog import MODULES, Module

_OPEN = re.compile(r"^(?P<indent>\s*)# (?P<kind>TODO|BUG): (?P<text>.+?)\s*$")
_HINT = re.compile(r"^\s*# HINT: (?P<text>.+?)\s*$")
_STUB = re.compile(r"^\s*# STUB:(?: (?P<code>.*))?$")
_SYMPTOM = re.compile(r"^\s*# SYMPTOM: (?P<text>.+?)\s*$")
_CLOSE = re.compile(r"^\s*# END (?P<kind>TODO|BUG)\s*$")
_PART = re.compile(r"^(?P<indent>\s*)# PART (?P<number>\d+): (?P<title>.+?)\s*$")
# What a generated stub contains for an open TODO; the learner deletes it when done. The part
# is there only in a file with parts: ``# TODO 2.3:``, else ``# TODO 3:``.
_LEARNER_TODO = re.compile(r"^\s*# TODO (?:(?P<part>\d+)\.)?(?P<number>\d+): (?P<text>.+?)\s*$")


class MarkerError(ValueError):
    """A solution file whose TODO/BUG markers do not nest or close properly."""


@dataclass(frozen=True)
class Todo:
    number: int  # counted from 1 within its part (within the file when it has no parts)
    line: int  # 1-based line in the learner's file
    text: str
    part: int | None = None  # the part it belongs to, in a file with parts

    @property
    def label(self) -> str:
        """What the stub calls it: "2.3" (part 2, its third TODO), or "3" in a file without parts."""
        return str(self.number) if self.part is None else f"{self.part}.{self.number}"

    def __str__(self) -> str:
        return f"TODO {self.label} (line {self.line}): {self.text}"


@dataclass(frozen=True)
class FilePart:
    """One ``# PART <number>: <title>`` of a file, and the lines it spans (1-based, inclusive:
    from its marker to the line before the next part's marker, or to the end of the file)."""

    number: int
    title: str
    first_line: int
    last_line: int


def is_marker(line: str) -> bool:
    """True for the marker lines of a solution (TODO/BUG openers, HINT, STUB, END, PART)."""
    return any(pattern.match(line) for pattern in (_OPEN, _HINT, _STUB, _SYMPTOM, _CLOSE, _PART))


def _next_part(marker: re.Match, previous: int, origin: str, line: int) -> int:
    """The number of the part that ``marker`` (a PART line at ``line``) opens after part
    ``previous`` (0 before the first), or MarkerError when it is indented or out of order."""
    if marker["indent"]:
        raise MarkerError(
            f"{origin}:{line}: a PART marker must start at the beginning of the line "
            "(a part is a stretch of the file, not of a function)"
        )
    if int(marker["number"]) != previous + 1:
        raise MarkerError(
            f"{origin}:{line}: PART {marker['number']} where PART {previous + 1} was expected: "
            "number the parts 1, 2, 3, ... in the order of the file"
        )
    return previous + 1


def file_parts(source: str, origin: str = "source") -> list[FilePart]:
    """The parts of a solution or of its stub (the PART lines are the same in both), in order;
    empty for a file without parts. Raises MarkerError for an indented PART line or parts that
    do not count 1, 2, 3, ... in order."""
    found: list[tuple[int, str, int]] = []
    lines = source.splitlines()
    for number, line in enumerate(lines, start=1):
        if marker := _PART.match(line):
            found.append((_next_part(marker, len(found), origin, number), marker["title"], number))
    ends = [first - 1 for _, _, first in found[1:]] + [len(lines)]
    return [FilePart(part, title, first, last) for (part, title, first), last in zip(found, ends)]


def generate_stub(solution_source: str, origin: str = "solution") -> str:
    """Return the learner's file for a solution source."""
    out: list[str] = []
    region = None  # (kind, indent, text, hints, stub_lines, opened_at)
    lines = solution_source.splitlines()
    has_parts = any(_PART.match(line) for line in lines)
    part = None  # the part of the lines read so far, in a file with parts
    todo_count = 0
    for number, line in enumerate(lines, start=1):
        if region is None:
            opened = _OPEN.match(line)
            if opened:
                if has_parts and opened["kind"] == "TODO" and part is None:
                    raise MarkerError(
                        f"{origin}:{number}: a TODO before PART 1; in a file with parts every "
                        "TODO belongs to one (the code before PART 1 is shared and complete)"
                    )
                region = (opened["kind"], opened["indent"], opened["text"], [], [], number)
            elif _CLOSE.match(line) or _HINT.match(line) or _STUB.match(line) or _SYMPTOM.match(line):
                raise MarkerError(f"{origin}:{number}: marker outside a TODO/BUG region")
            else:
                if marker := _PART.match(line):
                    part, todo_count = _next_part(marker, part or 0, origin, number), 0
                out.append(line)
            continue
        kind, indent, text, hints, stub_lines, opened_at = region
        if _OPEN.match(line):
            raise MarkerError(f"{origin}:{number}: region opened at line {opened_at} is not closed")
        if _PART.match(line):
            raise MarkerError(
                f"{origin}:{number}: PART marker inside the {kind} region opened at line "
                f"{opened_at}; close the region first"
            )
        closed = _CLOSE.match(line)
        if closed:
            if closed["kind"] != kind:
                raise MarkerError(f"{origin}:{number}: END {closed['kind']} closes a {kind} region")
            if kind == "TODO":
                todo_count += 1
                label = todo_count if part is None else f"{part}.{todo_count}"
                out.append(f"{indent}# TODO {label}: {text}")
                out.extend(f"{indent}#   Hint: {hint}" for hint in hints)
            out.extend(indent + code if code else "" for code in stub_lines)
            region = None
        elif hint := _HINT.match(line):
            hints.append(hint["text"])
        elif stub := _STUB.match(line):
            stub_lines.append(stub["code"] or "")
        elif _SYMPTOM.match(line):
            if kind != "BUG":
                raise MarkerError(f"{origin}:{number}: SYMPTOM belongs in a BUG region, not a {kind} region")
    if region is not None:
        raise MarkerError(f"{origin}: region opened at line {region[5]} is never closed")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class PlantedBug:
    """One BUG region of a solution: its correct code, the buggy code the learner gets instead,
    and the symptom (a regular expression) the public tests must report for it."""

    text: str
    correct: str
    buggy: str
    symptom: str
    line: int


def planted_bugs(solution_source: str, origin: str = "solution") -> list[PlantedBug]:
    """The BUG regions of a solution, in file order (the markers must be well formed)."""
    generate_stub(solution_source, origin)  # raises MarkerError on broken markers
    bugs: list[PlantedBug] = []
    region = None  # (indent, text, code, stub, symptom, opened_at)
    for number, line in enumerate(solution_source.splitlines(), start=1):
        opened = _OPEN.match(line)
        if opened and opened["kind"] == "BUG":
            region = (opened["indent"], opened["text"], [], [], [], number)
        elif region is None:
            continue
        elif _CLOSE.match(line):
            indent, text, code, stub, symptom, opened_at = region
            if not symptom:
                raise MarkerError(f"{origin}:{opened_at}: BUG region without a `# SYMPTOM:` line")
            bugs.append(
                PlantedBug(
                    text,
                    "\n".join(code),
                    "\n".join(indent + c if c else "" for c in stub),
                    "|".join(symptom),
                    opened_at,
                )
            )
            region = None
        elif stub := _STUB.match(line):
            region[3].append(stub["code"] or "")
        elif symptom := _SYMPTOM.match(line):
            region[4].append(symptom["text"])
        elif not _HINT.match(line):
            region[2].append(line)
    return bugs


def open_todos(source: str) -> list[Todo]:
    """The ``# TODO n:`` (or ``# TODO p.n:``) markers still present in a learner's file."""
    return [
        Todo(int(m["number"]), lineno, m["text"], int(m["part"]) if m["part"] else None)
        for lineno, line in enumerate(source.splitlines(), start=1)
        if (m := _LEARNER_TODO.match(line))
    ]


def todo_named(todos: list[Todo], messages: list[str]) -> Todo | None:
    """The open TODO that the first of ``messages`` to name one ("See TODO 2.3 (line 812)", as
    a failure writes ``str(todo)``) names; else the first open TODO; None when none is open."""
    for message in messages:
        if named := re.search(r"See TODO (\d+(?:\.\d+)?) \(line", message):
            found = next((todo for todo in todos if todo.label == named[1]), None)
            return found or (todos[0] if todos else None)
    return todos[0] if todos else None


def todos_behind(source: str, todos: list[Todo], api: str) -> list[Todo]:
    """The open ``todos`` that can change what ``api`` computes: those inside ``api`` itself or
    inside a function or class of the file that it reaches by name (its kernels, their helpers,
    an autograd Function), and those outside every function (constants, configs, decorators).
    A file that does not parse, or has no ``api``, gets them all back."""
    import ast

    from grader.core import syntax

    try:
        tree = syntax.parse(source)  # called from the grader's threads: one parse at a time
    except (SyntaxError, ValueError):
        return todos
    spans, uses = {}, {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spans[node.name] = (first, node.end_lineno or node.lineno)
            uses[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if api not in spans:
        return todos
    reached, waiting = set(), [api]
    while waiting:
        name = waiting.pop()
        if name not in reached:
            reached.add(name)
            waiting += [used for used in uses[name] if used in spans]

    def owner(line: int) -> str | None:
        return next((name for name, (first, last) in spans.items() if first <= line <= last), None)

    return [todo for todo in todos if owner(todo.line) in reached or owner(todo.line) is None]


def stub_for(module: Module) -> str:
    solution = module.solution_dir / "kernel.py"
    return generate_stub(solution.read_text(), origin=str(solution))


def modules_with_solutions() -> list[Module]:
    return [m for m in MODULES if (m.solution_dir / "kernel.py").is_file()]
