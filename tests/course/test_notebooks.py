"""Every study notebook runs top to bottom (under the interpreter on CPU), with the reference
kernels, and also with an unfinished learner file, where it falls back to PyTorch and says so on
every result that PyTorch computed."""

import os
import re

import pytest

nbclient = pytest.importorskip("nbclient", reason="notebooks need the [notebooks] extra (nbclient)")
nbformat = pytest.importorskip("nbformat", reason="notebooks need the [notebooks] extra (nbformat)")

from grader.core.markers import modules_with_solutions  # noqa: E402 (after the extra's check)
from grader.learn.notebook import FALLBACK  # noqa: E402

MODULES = modules_with_solutions()


def _execute(path, impl):
    """The notebook's code cells after a run, each as (source, text it printed)."""
    notebook = nbformat.read(str(path), as_version=4)
    os.environ["GRADER_NOTEBOOK_IMPL"] = impl
    try:
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    finally:
        os.environ.pop("GRADER_NOTEBOOK_IMPL")
    return [
        (cell.source, "\n".join(out.get("text", "") for out in cell.get("outputs", [])))
        for cell in notebook.cells
        if cell.cell_type == "code"
    ]


def _text(cells):
    return "\n".join(text for _, text in cells)


def _kernel_name(notebook):
    """The variable a notebook binds to kernel_or_fallback(...)."""
    source = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    return re.search(r"^(\w+) = kernel_or_fallback\(", source, re.M).group(1)


@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_notebook_runs_with_the_reference(module):
    text = _text(_execute(module.notebook, "solutions"))
    assert "from solutions: it passes a quick check" in text
    assert "[the reference solution]" in text and FALLBACK not in text


def test_notebook_runs_before_the_learner_is_done():
    module = next(m for m in MODULES if m.slug == "01-vector-add")
    cells = _execute(module.notebook, "learner")
    text = _text(cells)
    assert "not ready yet" in text and "TODO 1" in text
    # The live section's results come from torch.add here: its output must say so.
    live = [printed for source, printed in cells if "add(x, y)" in source]
    assert live and all(f"[{FALLBACK}]" in printed for printed in live)


@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_every_cell_using_the_kernel_labels_its_results(module):
    """A result of the fallback looks like a working kernel's: each cell that uses the kernel
    must print or title its output with the kernel's label."""
    notebook = nbformat.read(str(module.notebook), as_version=4)
    name = _kernel_name(notebook)
    uses = re.compile(rf"(?<![\w.]){name}\b(?!\.label)")
    unlabelled = [
        cell.source.splitlines()[0]
        for cell in notebook.cells
        if cell.cell_type == "code"
        and "kernel_or_fallback" not in cell.source
        and uses.search(cell.source)
        and f"{name}.label" not in cell.source
    ]
    assert not unlabelled, f"cells that use {name} without {name}.label: {unlabelled}"


@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_committed_notebook_has_no_outputs(module):
    notebook = nbformat.read(str(module.notebook), as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
