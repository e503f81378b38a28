"""The course never leads a learner to code the grader's policy gate refuses.

For every available module, under the policy its public tests give (the one ``make check``
reports with; grading widens it only with hidden cases' Specs):

- the generated stub passes the gate;
- every STUB line and every piece of code a HINT suggests passes the gate, placed in the reference
  solution at its TODO/BUG region: a region's STUB lines in place of its solution (all regions at
  once, then one at a time to pin a refusal on its line), a hint's code just before the region
  (before the statement whose head holds the region, such as a decorated def), one check per file;
- every ``python`` block of the module's README that is kernel.py code passes the gate, placed in
  a file with the reference's imports.

What counts as code in a HINT (prose is skipped). The hints of one region are read as one text (a
sentence may go on over several HINT lines), and these pieces of it are taken as code when they
parse as Python:

- a whole HINT line that parses as Python and holds a call, an attribute, an assignment or an
  import (``import numpy as np; np.add(x, y)``);
- a span in backticks;
- a call: a name or dotted name, or a method name after a dot (``.tolist()``, checked as
  ``value.tolist()``), with its balanced parentheses (``torch.isclose(got, want, rtol=rtol)``);
- a dotted name that is not called (``torch.channels_last``, ``y_ptr.dtype.element_ty``), except
  abbreviations of one-letter parts (``e.g``) and file names (``kernel.py``). Such a mention is
  only held to the rules that refuse a name whatever is done with it (a module kernel.py may not
  import, a private or introspecting attribute): a hint may name ``torch.optim.AdamW`` as the
  behaviour to match, or ``torch.cuda`` as where to look, without suggesting to compute with it;
- an assignment (``ctx.coeffs = ...``), and an ``import``/``from ... import`` that starts a line
  or follows ``;`` or ``:`` (not "may import only"): the longest stretch from there that parses.

A name that a piece of code uses but that its place does not define (``exp`` in ``exp(-x)``, a
variable of the explanation) is bound to a plain value just before it, so that the gate judges
what the code does, not that the hint abbreviates: unless it names a module (a standard-library
module, or a usual alias: np, F, nn, pd, plt), which is imported at the top of the file, as the
learner following the hint would. Python's builtins (``getattr``) stay builtins.

Which README blocks are kernel.py code. A ``python`` block is a standalone script, not kernel.py,
when it imports grader, kernel or pytest (the course's scripts switch Triton to its interpreter
with ``import grader``; kernel.py never does). Any other block is kernel.py code when it uses
``tl.``, decorates with ``@triton.jit``/``autotune``/``heuristics``, registers with
``torch.library``, or defines (def, class or top-level assignment) a name the reference kernel.py
defines too. The rest (calls of the module's
functions as a user makes them, benchmarking and profiling sessions) is not. In a kernel.py block,
``def``, ``class`` and imports stay at module level; every other top-level statement goes into a
wrapper function: a @triton.jit one when the statement uses ``tl.``, a plain one (a launcher) when
not, with the names the statements use but do not define as parameters. A ``...`` that stands for
elided parameters (``def f(a, ...):``) or dict entries (``{"BLOCK_M": 128, ...}``), or a missing
body, is filled in first.

A failure names the module, the file and line (README: the block's number and line), the code,
what the gate refuses in it and the gate's own explanation.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.core import cases, markers
from grader.core.catalog import REPO_ROOT, Module, available_modules
from grader.policy import Policy, Violation, check_source, explain, policy_for

MODULES = available_modules()

# Names a piece of hint code may use for a module without importing it (np.add(...)).
_MODULE_ALIASES = {
    "np": "numpy",
    "F": "torch.nn.functional",
    "nn": "torch.nn",
    "pd": "pandas",
    "plt": "matplotlib.pyplot",
}
_OTHER_MODULES = frozenset({"numpy", "scipy", "pandas", "cupy", "jax", "numba", "cffi", "ctypes"})
_BUILTINS = frozenset(dir(builtins))
_FILE_SUFFIXES = frozenset({"py", "ipynb", "md", "json", "csv", "txt", "png", "hatchet", "yml", "toml"})


@functools.cache
def _policy(module: Module) -> Policy:
    """The policy of the module's public Specs: what ``make check`` reports against."""
    return policy_for(*cases.specs_of(*cases.public(module)))


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


# --- what in a hint is code ----------------------------------------------------------------------

_CALL = re.compile(r"(?<![\w.@])\.?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\(")
_DOTTED = re.compile(r"(?<![\w.@])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?!\.?[\w(])")
_TICKS = re.compile(r"`([^`\n]+)`")
_STATEMENT = re.compile(r"(?:^|[;:]\s+|\n)(?=(?:import|from)\s+[A-Za-z_])")
_ASSIGN = re.compile(r"(?<![\w.\]])[A-Za-z_][\w.]*(?:\[[^\]\n]*\])?\s*(?:[-+*/|&]|//)?=(?!=)")
_OPENERS, _CLOSERS = "([{", ")]}"


def _parses(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):
        return None


def _is_code(tree: ast.Module) -> bool:
    kinds = (ast.Call, ast.Attribute, ast.Assign, ast.AugAssign, ast.Import, ast.ImportFrom)
    return any(isinstance(node, kinds) for node in ast.walk(tree))


def _balanced(text: str, start: int) -> int | None:
    """The index just past the bracket that closes the one at ``start``, or None."""
    depth = []
    for i in range(start, len(text)):
        char = text[i]
        if char in _OPENERS:
            depth.append(_CLOSERS[_OPENERS.index(char)])
        elif char in _CLOSERS:
            if not depth or depth.pop() != char:
                return None
            if not depth:
                return i + 1
    return None


def _longest_statement(text: str, start: int, kinds: tuple[type, ...]) -> str | None:
    """The longest stretch of ``text`` from ``start`` (up to a ``;`` or the end of its line, and
    ending before a space or punctuation) that parses as one statement of ``kinds``."""
    end = len(text)
    for stop in (";", "\n"):
        found = text.find(stop, start)
        end = min(end, found if found >= 0 else end)
    stretch = text[start:end]
    ends = sorted({i for i, char in enumerate(stretch) if char in " ,):"} | {len(stretch)}, reverse=True)
    for stop in ends:
        tree = _parses(stretch[:stop].rstrip(" .,"))
        if tree and len(tree.body) == 1 and isinstance(tree.body[0], kinds):
            return stretch[:stop].rstrip(" .,")
    return None


# What the gate refuses in a name whatever is done with it: the rules a mere mention can break.
_MENTION_RULES = frozenset({"import", "private", "introspection", "stream"})


def _hint_code(text: str) -> list[tuple[int, str]]:
    """The pieces of code in ``text`` (the hints of a region, one per line), as (offset, code):
    the rule is in this file's docstring."""
    found: list[tuple[int, str]] = []
    offset = 0
    for line in text.split("\n"):
        whole = line.strip().rstrip(".")
        tree = _parses(whole)
        if tree is not None and _is_code(tree):
            found.append((offset, whole))
        offset += len(line) + 1
    for match in _TICKS.finditer(text):
        found.append((match.start(1), match[1].strip()))
    for match in _CALL.finditer(text):
        end = _balanced(text, match.end() - 1)
        if end is not None:
            code = text[match.start() : end].replace("\n", " ")
            found.append((match.start(), "value" + code if code.startswith(".") else code))
    for match in _DOTTED.finditer(text):
        parts = match[0].split(".")
        if all(len(part) == 1 for part in parts) or parts[-1] in _FILE_SUFFIXES:
            continue
        found.append((match.start(), match[0]))
    for match in _ASSIGN.finditer(text):
        code = _longest_statement(text, match.start(), (ast.Assign, ast.AugAssign))
        if code:
            found.append((match.start(), code))
    for match in _STATEMENT.finditer(text):
        code = _longest_statement(text, match.end(), (ast.Import, ast.ImportFrom))
        if code:
            found.append((match.end(), code))
    kept, seen = [], set()
    for start, code in sorted(found):
        tree = _parses(code)
        if code not in seen and tree is not None and tree.body and _is_code(tree):
            seen.add(code)
            kept.append((start, code))
    return kept


# --- placing code in the reference and asking the gate -------------------------------------------


@dataclass(frozen=True)
class Piece:
    """Code the course shows the learner: where it is shown, what it says, the code to check."""

    where: str  # file:line
    kind: str  # "HINT", "STUB" or "README"
    text: str  # the line as the learner reads it
    code: str
    mention: bool = False  # a dotted name the text names without calling or assigning it


@dataclass
class _Insertion:
    before: int  # 0-based index of the line of the source it goes before
    end: int  # the lines from ``before`` up to this index are replaced (a STUB region)
    indent: str
    piece: Piece
    kernel: bool  # whether that place is inside a @triton.jit function
    bound: frozenset[str]  # the names defined there


def _loaded_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    loaded, stored = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            stored.add(node.arg)
    return loaded, stored


def _module_of(name: str) -> str | None:
    """The module a free name stands for, if it names one (np, os, numpy)."""
    if name in _MODULE_ALIASES:
        return _MODULE_ALIASES[name]
    if name in sys.stdlib_module_names or name in _OTHER_MODULES:
        return name
    return None


def _free(code: str, bound: frozenset[str]) -> tuple[list[str], list[str]]:
    """(names to bind to a value, import lines) that ``code`` needs at a place defining ``bound``."""
    tree = _parses(code)
    if tree is None:
        return [], []
    loaded, stored = _loaded_names(tree)
    values, imports = [], []
    for name in sorted(loaded - stored - bound - _BUILTINS):
        module = _module_of(name)
        if module is None:
            values.append(name)
        else:
            imports.append(f"import {module}" if module == name else f"import {module} as {name}")
    return values, imports


def _is_jit(node: ast.AST) -> bool:
    for decorator in getattr(node, "decorator_list", []):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in ("triton.jit", "jit"):
            return True
    return False


def _scopes(tree: ast.Module) -> tuple[list[tuple[int, int, bool, frozenset[str]]], frozenset[str]]:
    """The functions of ``tree`` as (first line, last line, is a kernel, names defined inside),
    and the names the module defines."""
    module_names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module_names.add(node.name)
        else:
            module_names |= _loaded_names(node)[1]
    scopes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _, stored = _loaded_names(node)
            scopes.append((node.lineno, node.end_lineno, _is_jit(node), frozenset(stored)))
    return scopes, frozenset(module_names)


def _place(tree: ast.Module, line: int, scopes=None) -> tuple[bool, frozenset[str]]:
    """Whether 1-based ``line`` of ``tree`` is in a kernel, and the names defined there."""
    functions, module_names = scopes or _scopes(tree)
    kernel, names = False, set(module_names)
    for first, last, jit, stored in functions:
        if first <= line <= last:
            kernel = kernel or jit
            names |= stored
    return kernel, frozenset(names)


def _statement_start(tree: ast.Module, line: int, indent: str) -> tuple[int, str]:
    """Where code for a region that opens at 1-based ``line`` can go: before that line, or, when
    the line is inside a statement's head (between a decorator and its def, inside the brackets
    of a call), before that statement. Returns (0-based index, indent)."""
    best = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        head_end = node.lineno
        for field, value in ast.iter_fields(node):
            if field not in ("body", "orelse", "finalbody", "handlers", "cases"):
                for part in value if isinstance(value, list) else [value]:
                    head_end = max(head_end, getattr(part, "end_lineno", None) or head_end)
        if first < line <= head_end and (best is None or first < best[0]):
            best = (first, node.col_offset)
    if best is None:
        return line - 1, indent
    return best[0] - 1, " " * best[1]


def _future_end(lines: list[str], tree: ast.Module) -> int:
    """The index of the first line after the docstring and ``from __future__`` imports."""
    end = 0
    for node in tree.body:
        is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (is_doc or is_future):
            break
        end = node.end_lineno
    return end


def _assemble(lines: list[str], tree: ast.Module, insertions: list[_Insertion]) -> tuple[str, dict[int, Piece]]:
    """The source with the insertions in place, and which piece each inserted line (1-based) is."""
    before: dict[int, list[tuple[str, Piece | None]]] = {}
    top: list[tuple[str, Piece]] = []
    for ins in insertions:
        values, imports = _free(ins.piece.code, ins.bound) if ins.before == ins.end else ([], [])
        block = [f"{ins.indent}{' = '.join(values)} = 0"] if values else []
        block += [ins.indent + code_line for code_line in ins.piece.code.splitlines()]
        before.setdefault(ins.before, []).extend((text, ins.piece) for text in block)
        top += [(text, ins.piece) for text in imports]
    head = _future_end(lines, tree)
    replaced = {i for ins in insertions for i in range(ins.before, ins.end)}
    out: list[str] = []
    owner: dict[int, Piece] = {}

    def add(text: str, piece: Piece | None) -> None:
        out.append(text)
        if piece is not None:
            owner[len(out)] = piece

    for index, line in enumerate(lines):
        if index == head:
            for text, piece in top:
                add(text, piece)
        for text, piece in before.get(index, []):
            add(text, piece)
        if index not in replaced:
            add(line, None)
    if head >= len(lines):
        for text, piece in top:
            add(text, piece)
    return "\n".join(out) + "\n", owner


@dataclass(frozen=True)
class Refusal:
    module: str
    piece: Piece
    violations: tuple[Violation, ...]

    def __str__(self) -> str:
        p = self.piece
        shown = [dataclasses.replace(v, line=int(p.where.rsplit(":", 1)[1])) for v in self.violations]
        rules = ", ".join(sorted({v.rule for v in self.violations}))
        what = f"`{p.code}`, which" if p.code != p.text else "code"
        head = f"{self.module}: {p.where}: the {p.kind} `{p.text}` suggests {what} the gate refuses ({rules})"
        return f"{head}:\n{explain(shown)}"


def _wrapped_alone(piece: Piece, kernel: bool, imports: list[str], policy: Policy) -> list[Violation]:
    """The gate's verdict on ``piece`` alone, in a function of the kind its place is (the stub's
    shape), after ``imports``; nothing when it does not parse on its own (then the stub's own
    check covers it)."""
    if _parses(piece.code) is None:
        return []
    values, needed = _free(piece.code, _loaded_names(ast.parse("\n".join(imports)))[1])
    head = [*imports, *needed, "", *(["@triton.jit"] if kernel else [])]
    body = [f"def probe({', '.join(values)}):", *("    " + line for line in piece.code.splitlines())]
    found = check_source("\n".join(head + body) + "\n", policy)
    return found


def refusals_in_markers(source: str, origin: str, module: str, policy: Policy) -> list[Refusal]:
    """What the gate refuses among the STUB lines and the code of the HINT lines of a reference
    ``source`` (read from ``origin``): the STUB lines of each region in place of its solution, the
    code of its hints before its first line (with what it needs bound, see the docstring)."""
    lines = source.splitlines()
    tree = ast.parse(source)
    scopes = _scopes(tree)
    insertions: list[_Insertion] = []  # the code of the hints, before their region
    stub_regions: list[_Insertion] = []  # each region's STUB lines in place of its solution
    region = None
    for number, line in enumerate(lines, start=1):
        if opened := markers._OPEN.match(line):
            region = (number, opened["indent"], [], [])  # opener, indent, hints, stub lines
        elif region is None:
            continue
        elif hint := markers._HINT.match(line):
            region[2].append((number, hint["text"]))
        elif stub := markers._STUB.match(line):
            if stub["code"] and stub["code"].strip():
                region[3].append((number, stub["code"]))
        elif markers._CLOSE.match(line):
            opener, indent, hints, stubs = region
            kernel, bound = _place(tree, opener, scopes)
            at, at_indent = _statement_start(tree, opener, indent)
            if stubs:
                code = "\n".join(code for _, code in stubs)
                text = code if len(stubs) == 1 else f"{stubs[0][1]} ..."
                piece = Piece(f"{origin}:{stubs[0][0]}", "STUB line", text, code)
                stub_regions.append(_Insertion(opener - 1, number, indent, piece, kernel, bound))
            joined = "\n".join(text for _, text in hints)
            starts, length = [], 0
            for hint_line, text in hints:
                starts.append((length, hint_line, text))
                length += len(text) + 1
            for offset, code in _hint_code(joined):
                hint_line, text = next((n, t) for o, n, t in reversed(starts) if o <= offset)
                mention = _DOTTED.fullmatch(code) is not None
                piece = Piece(f"{origin}:{hint_line}", "HINT", text, code, mention)
                insertions.append(_Insertion(at, at, at_indent, piece, *_place(tree, at + 1, scopes)))
            region = None
    imports = [ast.get_source_segment(source, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    found = _refusals(lines, tree, stub_regions, module, policy, imports)
    return found + _refusals(lines, tree, insertions, module, policy, imports)


def _refusals(lines, tree, insertions, module, policy, imports) -> list[Refusal]:
    """Check all insertions in one file; when that does not parse, or the gate refuses lines of
    the file itself, check them one at a time so that each refusal is pinned on its piece."""
    if not insertions:
        return []
    source, owner = _assemble(lines, tree, insertions)
    violations = check_source(source, policy) if _parses(source) else None
    if violations is not None and all(v.line in owner for v in violations):
        by_piece: dict[Piece, list[Violation]] = {}
        for v in violations:
            if not owner[v.line].mention or v.rule in _MENTION_RULES:
                by_piece.setdefault(owner[v.line], []).append(v)
        return [Refusal(module, piece, tuple(found)) for piece, found in by_piece.items()]
    if len(insertions) > 1:
        return [r for ins in insertions for r in _refusals(lines, tree, [ins], module, policy, imports)]
    ins = insertions[0]
    found = violations if violations is not None else _wrapped_alone(ins.piece, ins.kernel, imports, policy)
    found = [v for v in found if not ins.piece.mention or v.rule in _MENTION_RULES]
    return [Refusal(module, ins.piece, tuple(found))] if found else []


# --- README blocks ---------------------------------------------------------------------------------

_FENCE = re.compile(r"^```python\s*$")
_SCRIPT = re.compile(r"^\s*(?:import (?:grader|kernel|pytest)\b|from (?:grader|kernel|pytest)[\s.])", re.MULTILINE)
_KERNEL_CODE = re.compile(r"\btl\.|@triton\.(?:jit|autotune|heuristics)\b|\btorch\.library\b")


def readme_blocks(text: str) -> list[tuple[int, int, str]]:
    """The ``python`` blocks of a README as (number from 1, line of the block's first line, code)."""
    blocks, lines = [], text.splitlines()
    index = 0
    while index < len(lines):
        if _FENCE.match(lines[index]):
            end = next((j for j in range(index + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            blocks.append((len(blocks) + 1, index + 2, "\n".join(lines[index + 1 : end])))
            index = end
        index += 1
    return blocks


def _complete(code: str) -> str:
    """An outline made whole: `...` for elided parameters dropped, a body for a bare header."""
    code = re.sub(r"(def \w+\([^)]*?),\s*\.\.\.\s*\)", r"\1)", code)
    code = re.sub(r",\s*\.\.\.\s*}", "}", code)
    if code.rstrip().endswith(":"):
        code = code.rstrip() + "\n    ..."
    return code


def is_kernel_code(code: str, reference_names: frozenset[str]) -> bool:
    """Whether a README block is kernel.py code (the rule is in this file's docstring)."""
    if _SCRIPT.search(code):
        return False
    if _KERNEL_CODE.search(code):
        return True
    tree = _parses(_complete(code))
    if tree is None:
        return False
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            defined |= _loaded_names(node)[1]
    return bool(defined & reference_names)


def refusals_in_readme_block(
    code: str, where: str, first_line: int, module: str, policy: Policy, imports: list[str]
) -> list[Refusal]:
    """What the gate refuses in one kernel.py block of a README, placed after ``imports``."""
    completed = _complete(code)
    tree = _parses(completed)
    block_piece = Piece(f"{where}:{first_line}", "README example", code.splitlines()[0] if code else "", code)
    if tree is None:
        return [Refusal(module, block_piece, (Violation(1, "syntax", "the block does not parse as Python"),))]
    src_lines = completed.splitlines()
    out: list[tuple[str, int | None]] = [(line, None) for line in imports]
    wrappers: dict[bool, list[ast.stmt]] = {True: [], False: []}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            out += [(src_lines[i], i) for i in range(first - 1, node.end_lineno)]
        else:
            uses_tl = any(isinstance(n, ast.Name) and n.id == "tl" for n in ast.walk(node))
            wrappers[uses_tl].append(node)
    _, module_names = _loaded_names(ast.parse("\n".join(line for line, _ in out)))
    for kernel, statements in wrappers.items():
        if not statements:
            continue
        body = [(src_lines[i], i) for s in statements for i in range(s.lineno - 1, s.end_lineno)]
        values, needed = _free("\n".join(line for line, _ in body), frozenset(module_names))
        out = [(line, None) for line in needed] + out
        out += [("", None), *([("@triton.jit", None)] if kernel else [])]
        out.append((f"def readme_{'kernel' if kernel else 'launcher'}({', '.join(values)}):", None))
        out += [("    " + line, i) for line, i in body]
    violations = check_source("\n".join(line for line, _ in out) + "\n", policy)
    refusals = []
    for v in violations:
        index = out[v.line - 1][1] if v.line <= len(out) else None
        line = first_line + (index if index is not None else 0)
        text = src_lines[index].strip() if index is not None else block_piece.text
        shown = Piece(f"{where}:{line}", "README example", text, text)
        refusals.append(Refusal(module, shown, (v,)))
    return refusals


# --- the tests ---------------------------------------------------------------------------------------


def _report(refusals: list) -> str:
    return "\n\n".join(str(r) for r in refusals)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.id)
def test_the_stub_passes_the_gate(module):
    violations = check_source(markers.stub_for(module), _policy(module))
    path = _rel(module.learner_dir / "kernel.py")
    assert not violations, f"{module.id}: the stub {path} (generated by make stubs):\n{explain(violations)}"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.id)
def test_hints_and_stub_lines_suggest_code_the_gate_allows(module):
    path = module.solution_dir / "kernel.py"
    refusals = refusals_in_markers(path.read_text(), _rel(path), module.id, _policy(module))
    assert not refusals, _report(refusals)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.id)
def test_readme_kernel_examples_pass_the_gate(module):
    readme = module.learner_dir / "README.md"
    if not readme.is_file():
        pytest.skip("no README")
    reference = (module.solution_dir / "kernel.py").read_text()
    tree = ast.parse(reference)
    imports = [ast.get_source_segment(reference, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = frozenset(_scopes(tree)[1])
    refusals = []
    for number, first_line, code in readme_blocks(readme.read_text()):
        if is_kernel_code(code, names):
            where = f"{_rel(readme)} (python block {number})"
            refusals += refusals_in_readme_block(code, where, first_line, module.id, _policy(module), imports)
    assert not refusals, _report(refusals)


# --- the rules themselves, on made-up text -----------------------------------------------------------


def test_hint_code_is_found_in_prose():
    codes = [code for _, code in _hint_code("import numpy as np; np.add(x, y)")]
    assert "import numpy as np; np.add(x, y)" in codes
    codes = [code for _, code in _hint_code("call getattr(obj, name), then .tolist() of it; e.g. in kernel.py")]
    assert codes == ["getattr(obj, name)", "value.tolist()"]
    codes = [code for _, code in _hint_code("store it (ctx.coeffs = coeffs): the result\nof torch.add")]
    assert "ctx.coeffs = coeffs" in codes and "torch.add" in codes
    assert _hint_code("a block divided by a scalar divides every lane.") == []


_MADE_UP = """\
import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # TODO: load and double
    # HINT: tl.load(x_ptr + offsets, mask=mask) and then {hint}
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)
    # STUB: {stub}
    # END TODO


def double(x):
    out = torch.empty_like(x)
    # TODO: launch
    # HINT: {host_hint}
    double_kernel[(1,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    # END TODO
    return out
"""


@pytest.mark.parametrize(
    ("hint", "stub", "host_hint", "rules"),
    [
        ("multiply by 2", "offsets = ...", "x.numel() elements", set()),
        ("multiply by 2", "x = torch.mul(x, 2)", "x.numel() elements", {"kernel-body"}),
        ("multiply by 2", "offsets = ...", "import numpy as np; np.add(...)", {"import"}),
        ("multiply by 2", "offsets = ...", "or torch.add(x, x, out=out)", {"torch-compute"}),
        ("getattr(x_ptr, name)", "offsets = ...", "launch", {"builtin"}),
        ("use os.getcwd()", "offsets = ...", "launch", {"import", "kernel-body"}),
        ("multiply by 2", "offsets = ...", "print(out.tolist()) to see it", {"tensor-escape"}),
    ],
)
def test_a_hint_or_stub_line_the_gate_refuses_is_reported(hint, stub, host_hint, rules):
    source = _MADE_UP.format(hint=hint, stub=stub, host_hint=host_hint)
    found = refusals_in_markers(source, "made_up.py", "made-up/module", policy_for())
    assert {v.rule for r in found for v in r.violations} == rules
    for refusal in found:
        assert "made-up/module: made_up.py:" in str(refusal) and "The grader refuses" in str(refusal)


def test_a_readme_block_the_gate_refuses_is_reported():
    code = (
        "def double(x):\n    out = torch.empty_like(x)\n    torch.add(x, x, out=out)\n    double_kernel[(1,)](x, out)"
    )
    assert is_kernel_code(code, frozenset({"double"}))
    found = refusals_in_readme_block(code, "README.md (python block 1)", 10, "made-up", policy_for(), ["import torch"])
    assert [(r.piece.where, [v.rule for v in r.violations]) for r in found] == [
        ("README.md (python block 1):12", ["torch-compute"])
    ]
    assert not is_kernel_code("import grader\n" + code, frozenset({"double"}))
    assert not is_kernel_code("y = double(x)  # like torch.add(x, x)", frozenset({"double"}))
