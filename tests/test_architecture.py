"""The package's shape: imports point one way (no cycles between grader's modules), and what
learners read imports only the short public names, which survive a reorganisation."""

import ast
import json
import re
from pathlib import Path

from grader import PUBLIC_NAMES
from grader.core.catalog import REPO_ROOT

PACKAGE = REPO_ROOT / "grader"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """grader module -> the grader modules it imports when it is loaded (imports inside functions
    run later, on demand, and cannot make a loading cycle)."""
    files = [p for p in PACKAGE.rglob("*.py") if "examples" not in p.parts]
    names = {_module_name(p) for p in files}
    graph = {}
    for path in files:
        tree = ast.parse(path.read_text())
        edges = set()
        for node in tree.body:
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            edges |= {t for t in targets if t in names and t != _module_name(path)}
        graph[_module_name(path)] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_grader_package_has_no_import_cycle():
    graph = _import_graph()
    assert len(graph) > 40 and graph["grader.grade.grading"], "the graph was read"
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# What each package of the grader may import besides itself: dependencies point one way, down to
# ``core`` (docs/maintainers.md, "The package").
LAYERS = {
    "core": set(),
    "policy": {"core"},
    "sandbox": {"core"},
    "authoring": {"core"},
    "learn": {"core", "policy"},
    "grade": {"core", "policy", "sandbox", "authoring"},
}


def _crossing(graph: dict) -> list[str]:
    """The imports of ``graph`` (module -> modules it imports) that go against ``LAYERS``."""

    def package(name: str) -> str:
        return name.split(".")[1] if name.count(".") >= 1 else name

    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if package(source) in LAYERS
        and package(target) != package(source)
        and package(target) not in LAYERS[package(source)]
    )


def test_the_packages_import_one_way():
    assert _crossing(_import_graph()) == [], "an import against the layers of docs/maintainers.md"
    assert _crossing({"grader.core.cases": {"grader.grade.timing"}, "grader.learn.check": {"grader.policy"}}) == [
        "grader.core.cases -> grader.grade.timing"
    ]


LONG_NAME = re.compile(
    r"\bgrader\.(core|learn|grade|sandbox|policy|authoring)\b"
    r"|from grader import (core|learn|grade|sandbox|policy)\b"
)


def test_what_learners_read_imports_only_the_short_public_names():
    offending = []
    for path in sorted([*(REPO_ROOT / "tracks").rglob("*.py"), *(REPO_ROOT / "notebooks").glob("*.ipynb")]):
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        offending += [f"{path.relative_to(REPO_ROOT)}: {m.group(0)}" for m in LONG_NAME.finditer(text)]
    assert offending == [], "use the short names of grader/__init__.py (PUBLIC_NAMES)"
    assert all(short.startswith("grader.") and full.startswith("grader.") for short, full in PUBLIC_NAMES.items())
