"""Every study notebook runs top to bottom (under the interpreter on CPU), with the reference
kernels, and also with an unfinished learner file, where it falls back to PyTorch."""

import os

import pytest

nbclient = pytest.importorskip("nbclient", reason="notebooks need the [notebooks] extra (nbclient)")
nbformat = pytest.importorskip("nbformat", reason="notebooks need the [notebooks] extra (nbformat)")

from grader.stubs import modules_with_solutions

MODULES = modules_with_solutions()


def _execute(path, impl):
    notebook = nbformat.read(str(path), as_version=4)
    os.environ["GRADER_NOTEBOOK_IMPL"] = impl
    try:
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    finally:
        os.environ.pop("GRADER_NOTEBOOK_IMPL")
    return "\n".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for out in cell.get("outputs", []))


@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_notebook_runs_with_the_reference(module):
    text = _execute(module.notebook, "solutions")
    assert "from solutions: it passes a quick check" in text


def test_notebook_runs_before_the_learner_is_done():
    module = next(m for m in MODULES if m.slug == "01-vector-add")
    text = _execute(module.notebook, "learner")
    assert "not ready yet" in text and "TODO 1" in text


@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_committed_notebook_has_no_outputs(module):
    notebook = nbformat.read(str(module.notebook), as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
