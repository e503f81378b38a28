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
# What a generated stub contains for an open TODO; the learner deletes it when done.
_LEARNER_TODO = re.compile(r"^\s*# TODO (?P<number>\d+): (?P<text>.+?)\s*$")


class MarkerError(ValueError):
    """A solution file whose TODO/BUG markers do not nest or close properly."""


@dataclass(frozen=True)
class Todo:
    number: int
    line: int  # 1-based line in the learner's file
    text: str

    def __str__(self) -> str:
        return f"TODO {self.number} (line {self.line}): {self.text}"


def is_marker(line: str) -> bool:
    """True for the marker lines of a solution (TODO/BUG openers, HINT, STUB, END)."""
    return any(pattern.match(line) for pattern in (_OPEN, _HINT, _STUB, _SYMPTOM, _CLOSE))


def generate_stub(solution_source: str, origin: str = "solution") -> str:
    """Return the learner's file for a solution source."""
    out: list[str] = []
    region = None  # (kind, indent, text, hints, stub_lines, opened_at)
    todo_count = 0
    for number, line in enumerate(solution_source.splitlines(), start=1):
        if region is None:
            opened = _OPEN.match(line)
            if opened:
                region = (opened["kind"], opened["indent"], opened["text"], [], [], number)
            elif _CLOSE.match(line) or _HINT.match(line) or _STUB.match(line) or _SYMPTOM.match(line):
                raise MarkerError(f"{origin}:{number}: marker outside a TODO/BUG region")
            else:
                out.append(line)
            continue
        kind, indent, text, hints, stub_lines, opened_at = region
        if _OPEN.match(line):
            raise MarkerError(f"{origin}:{number}: region opened at line {opened_at} is not closed")
        closed = _CLOSE.match(line)
        if closed:
            if closed["kind"] != kind:
                raise MarkerError(f"{origin}:{number}: END {closed['kind']} closes a {kind} region")
            if kind == "TODO":
                todo_count += 1
                out.append(f"{indent}# TODO {todo_count}: {text}")
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
            bugs.append(PlantedBug(text, "\n".join(code), "\n".join(indent + c if c else "" for c in stub),
                                   "|".join(symptom), opened_at))
            region = None
        elif stub := _STUB.match(line):
            region[3].append(stub["code"] or "")
        elif symptom := _SYMPTOM.match(line):
            region[4].append(symptom["text"])
        elif not _HINT.match(line):
            region[2].append(line)
    return bugs


def open_todos(source: str) -> list[Todo]:
    """The ``# TODO n:`` markers still present in a learner's file."""
    return [Todo(int(m["number"]), lineno, m["text"])
            for lineno, line in enumerate(source.splitlines(), start=1)
            if (m := _LEARNER_TODO.match(line))]


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
