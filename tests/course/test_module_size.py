"""Every module an exercise for one sitting: its README read in about twenty minutes, its
learner file short enough to hold in mind. A module that grows past either fails here; the
modules already past them are named with the reason, and the test fails once they fit again, so
that the list only shrinks.

A module of several exercises marks each in its kernel.py with ``# PART <n>: <title>`` and gives
each a ``## Part <n>`` section of its README: there every part is a sitting of its own, held to
the budgets below, and the module as a whole is not."""

import re

from grader.core.catalog import MODULES
from grader.core.markers import file_parts

README_WORDS = 4500  # about 20 minutes of reading
STUB_LINES = 750
# A part is one sitting, like a module without parts, so it gets the same budgets; but at every
# sitting the learner reads the shared text again (the README's introduction and closing sections,
# the stub's top before PART 1: docstring, imports, shared helpers), so that text counts in each
# part's budget. A part can then not hide a long shared preamble, and three parts can hold three
# sittings' worth of text, as three modules would.
PART_README_WORDS = README_WORDS
PART_STUB_LINES = STUB_LINES
OVER_BUDGET: dict[str, str] = {}  # module id -> why it is past a budget
_PART_HEADING = re.compile(r"## Part (\d+)\b")


def _words(text: str) -> int:
    return len(re.findall(r"\S+", text))


def readme_parts(readme: str) -> tuple[int, dict[int, int]]:
    """(words shared by every part, {part: words of its ``## Part <n>`` section}). A section runs
    from its level-2 heading to the next one; the sections that are not a part are shared."""
    shared, sections = 0, {}
    for section in re.split(r"(?m)^(?=## )", readme):
        heading = _PART_HEADING.match(section)
        if heading:
            sections[int(heading[1])] = _words(section)
        else:
            shared += _words(section)
    return shared, sections


def stub_parts(stub: str) -> tuple[int, dict[int, int]]:
    """(lines before PART 1, {part: its lines, from its marker to the next}); ({}) without parts."""
    found = file_parts(stub)
    shared = found[0].first_line - 1 if found else len(stub.splitlines())
    return shared, {part.number: part.last_line - part.first_line + 1 for part in found}


def _sittings(module) -> dict[str, tuple[int, int]]:
    """{what: (README words, stub lines)} for each sitting of the module: the module itself, or
    each of its parts with the shared text counted in."""
    readme = (module.learner_dir / "README.md").read_text()
    stub = (module.learner_dir / "kernel.py").read_text()
    shared_lines, part_lines = stub_parts(stub)
    if not part_lines:
        return {module.id: (_words(readme), len(stub.splitlines()))}
    shared_words, part_words = readme_parts(readme)
    return {
        f"{module.id} part {n}": (shared_words + part_words.get(n, 0), shared_lines + lines)
        for n, lines in part_lines.items()
    }


def test_every_module_fits_one_sitting_or_is_named_with_its_reason():
    over = {}
    for module in MODULES:
        if module.available:
            for what, (words, lines) in _sittings(module).items():
                parted = what != module.id
                if words > (PART_README_WORDS if parted else README_WORDS) or lines > (
                    PART_STUB_LINES if parted else STUB_LINES
                ):
                    over.setdefault(module.id, {})[what] = (words, lines)
    unexplained = sorted(set(over) - set(OVER_BUDGET))
    assert not unexplained, (
        f"past {README_WORDS} README words or {STUB_LINES} stub lines (per part where a "
        "module has parts): " + ", ".join(f"{what} {size}" for m in unexplained for what, size in over[m].items())
    )
    fitting = sorted(set(OVER_BUDGET) - set(over))
    assert not fitting, f"these fit one sitting now: take them off OVER_BUDGET: {fitting}"


def test_each_part_of_a_stub_has_its_readme_section():
    """The parts of kernel.py and the ``## Part <n>`` sections of the README are the same parts,
    in the same order: a part without its section would be measured (and read) without its text."""
    for module in MODULES:
        if module.available:
            _, part_lines = stub_parts((module.learner_dir / "kernel.py").read_text())
            headings = [
                int(h) for h in re.findall(r"(?m)^## Part (\d+)\b", (module.learner_dir / "README.md").read_text())
            ]
            if part_lines or headings:
                assert headings == list(part_lines), (
                    f"{module.id}: kernel.py has parts {list(part_lines)}, its README `## Part <n>` sections "
                    f"{headings}; give each part one section, in order"
                )


def test_the_shared_text_counts_in_every_part():
    readme = (
        "# M\nintro words here\n## Part 1: a\none two\n### deeper\nthree\n## Part 2: b\nfour\n## Next steps\nfive\n"
    )
    assert readme_parts(readme) == (5 + 4, {1: 9, 2: 5})  # the intro and Next steps are shared
    stub = '"""doc"""\nimport torch\n# PART 1: a\nx = 1\n\n# PART 2: b\ny = 2\n'
    assert stub_parts(stub) == (2, {1: 3, 2: 2})
    assert stub_parts("x = 1\ny = 2\n") == (2, {})
