"""The loader turns every broken kernel.py into a LoadError that says what to do."""

import shutil

import pytest

from grader.core.catalog import find_module
from grader.core.loading import LoadError, load_kernel

MODULE = find_module("missing-elements/01-vector-add")


def _write(tmp_path, text):
    (tmp_path / "kernel.py").write_text(text)
    return tmp_path


def test_solution_and_stub_load():
    assert load_kernel(MODULE, "solutions").todos == []
    assert len(load_kernel(MODULE, "learner").todos) >= MODULE.missing


def test_syntax_error_names_the_line(tmp_path):
    with pytest.raises(LoadError, match=r"syntax error at line 2") as error:
        load_kernel(MODULE, _write(tmp_path, "x = 1\ndef add(x, y)\n    return x\n"))
    assert "def add(x, y)" in str(error.value)


def test_error_at_import_names_the_line(tmp_path):
    with pytest.raises(LoadError, match=r"NameError while being imported \(line 2"):
        load_kernel(MODULE, _write(tmp_path, "import torch\nBLOCK = undefined_name\n"))


def test_sys_exit_at_import_is_contained(tmp_path):
    with pytest.raises(LoadError, match="SystemExit"):
        load_kernel(MODULE, _write(tmp_path, "import sys\nsys.exit(3)\n"))


def test_missing_api_function(tmp_path):
    with pytest.raises(LoadError, match="does not define `add`"):
        load_kernel(MODULE, _write(tmp_path, "def plus(x, y):\n    return x + y\n"))


def test_import_error_lists_open_todos(tmp_path):
    text = "# TODO 1: import the language module\nBLOCK: tl.constexpr = 4\n"
    with pytest.raises(LoadError, match=r"TODO 1 \(line 1\): import the language module"):
        load_kernel(MODULE, _write(tmp_path, text))


def test_folder_layouts_are_found(tmp_path):
    nested = tmp_path / MODULE.track / MODULE.slug
    nested.mkdir(parents=True)
    shutil.copy(MODULE.solution_dir / "kernel.py", nested / "kernel.py")
    assert load_kernel(MODULE, tmp_path).path == (nested / "kernel.py").resolve()


def test_missing_file(tmp_path):
    with pytest.raises(LoadError, match="no kernel.py"):
        load_kernel(MODULE, tmp_path / "nowhere")


def test_a_missing_kernel_says_what_impl_takes(tmp_path):
    softmax = find_module("missing-elements/03-softmax")
    with pytest.raises(LoadError, match=r"'solution' is neither a file nor a folder here\. IMPL takes learner"):
        load_kernel(softmax, "solution")
    with pytest.raises(LoadError, match=r"should hold missing-elements/03-softmax/kernel\.py, 03-softmax/kernel\.py"):
        load_kernel(softmax, tmp_path)


def test_a_missing_learner_file_points_to_the_way_back_that_this_copy_has(tmp_path, monkeypatch):
    from grader.core import catalog
    from grader.core.loading import missing_kernel

    softmax = find_module("missing-elements/03-softmax")
    assert "make stubs" in missing_kernel(softmax, "learner", tmp_path / "kernel.py")
    monkeypatch.setattr(catalog, "SOLUTIONS_DIR", tmp_path / "no-solutions")  # as in the learners' bundle
    said = missing_kernel(softmax, "learner", tmp_path / "kernel.py")
    assert "make stubs" not in said and "release/missing-elements-03-softmax/kernel.py" in said
