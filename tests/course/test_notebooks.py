"""Every study notebook runs top to bottom (under the interpreter on CPU), with the reference
kernels, and also with an unfinished learner file, where it falls back to PyTorch and says so on
every result that PyTorch computed.

The notebooks that a test process runs one after another share one Jupyter kernel (starting a
kernel and importing torch and triton in it is most of a notebook's time on a CPU), reset before
each notebook as a new kernel would start: see ``SharedKernel``."""

import os
import re

import pytest

nbclient = pytest.importorskip("nbclient", reason="notebooks need the [notebooks] extra (nbclient)")
nbformat = pytest.importorskip("nbformat", reason="notebooks need the [notebooks] extra (nbformat)")

from nbclient.util import run_sync  # noqa: E402 (after the extra's check)

from grader.core.catalog import SOLUTIONS_DIR, TRACKS_DIR  # noqa: E402
from grader.core.markers import modules_with_solutions  # noqa: E402
from grader.grade.shared_kernel import RESET, stop  # noqa: E402
from grader.learn.notebook import FALLBACK  # noqa: E402

MODULES = modules_with_solutions()

# Run in the shared kernel before each notebook, then RESET: what a notebook may change in the
# process is put back as it was before the kernel's first notebook (environment variables, such
# as debugging/04's memory checker switch, and warning filters), the modules it imported from
# the course's tracks/ and solutions/ are dropped (a loaded kernel.py, a track's helper files),
# its figures are closed; then the implementation the notebook loads (grader.learn.notebook reads
# GRADER_NOTEBOOK_IMPL when a cell calls kernel_or_fallback).
PREPARE = """\
def _prepare(impl, folders):
    import os, sys, warnings
    start = sys.modules.setdefault("_kernel_before_notebooks", type(sys)("_kernel_before_notebooks"))
    if not hasattr(start, "environ"):
        start.environ, start.filters = dict(os.environ), list(warnings.filters)
    os.environ.clear()
    os.environ.update(start.environ)
    warnings.filters[:] = start.filters
    getattr(warnings, "_filters_mutated", lambda: None)()  # "once" warnings show again
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and os.path.realpath(file).startswith(folders):
            del sys.modules[name]
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    os.environ["GRADER_NOTEBOOK_IMPL"] = impl
_prepare({impl!r}, {folders!r})
"""
COURSE_FOLDERS = tuple(os.path.join(os.path.realpath(folder), "") for folder in (TRACKS_DIR, SOLUTIONS_DIR))


class SharedKernel:
    """One kernel, and its client, for the notebooks run one after another; a kernel whose notebook
    failed (a cell raised or timed out) is shut down, and the next notebook starts a new one."""

    def __init__(self):
        self.km = self.kc = None

    def execute(self, notebook, impl: str) -> None:
        if self.km is None:
            self.km = nbclient.NotebookClient(notebook, kernel_name="python3").create_kernel_manager()
        # A client given a manager it does not own leaves the kernel running after the notebook.
        client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", km=self.km)
        try:
            if self.kc is None:  # a new kernel, started as nbclient starts its own
                client.start_new_kernel()
                self.kc = client.start_new_kernel_client()
            client.kc = self.kc
            code = PREPARE.format(impl=impl, folders=COURSE_FOLDERS) + RESET.format(path=os.getcwd())
            reply = run_sync(client.async_wait_for_reply)(self.kc.execute(code, silent=True, store_history=False))
            if reply is None or reply["content"]["status"] != "ok":
                raise RuntimeError(f"the shared kernel could not be reset: {reply and reply['content']}")
            client.execute()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        kc, km, self.kc, self.km = self.kc, self.km, None, None
        stop(kc, km, now=True)


@pytest.fixture(scope="module")
def kernel():
    """Module-scoped: stopped when the process moves on to another file's tests (a parallel run
    hands a worker this file a track at a time), so that no idle kernel, its client's threads and
    sockets included, is left in a process that runs other tests."""
    shared = SharedKernel()
    yield shared
    shared.close()


def _run(kernel, notebook, impl):
    """The notebook's code cells after a run, each as (source, text it printed)."""
    kernel.execute(notebook, impl)
    return [
        (cell.source, "\n".join(out.get("text", "") for out in cell.get("outputs", [])))
        for cell in notebook.cells
        if cell.cell_type == "code"
    ]


def _execute(kernel, path, impl):
    return _run(kernel, nbformat.read(str(path), as_version=4), impl)


def _text(cells):
    return "\n".join(text for _, text in cells)


def _kernel_name(notebook):
    """The variable a notebook binds to kernel_or_fallback(...)."""
    source = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    return re.search(r"^(\w+) = kernel_or_fallback\(", source, re.M).group(1)


@pytest.mark.parametrize("module", MODULES, ids=[m.id for m in MODULES])
def test_notebook_runs_with_the_reference(kernel, module):
    text = _text(_execute(kernel, module.notebook, "solutions"))
    assert "from solutions: it passes a quick check" in text
    assert "[the reference solution]" in text and FALLBACK not in text


def test_notebook_runs_before_the_learner_is_done(kernel):
    module = next(m for m in MODULES if m.slug == "01-vector-add")
    cells = _execute(kernel, module.notebook, "learner")
    text = _text(cells)
    assert "not ready yet" in text and "TODO 1" in text
    # The live section's results come from torch.add here: its output must say so.
    live = [printed for source, printed in cells if "add(x, y)" in source]
    assert live and all(f"[{FALLBACK}]" in printed for printed in live)


def test_a_notebook_sees_nothing_of_the_notebook_before_it(kernel):
    """In the shared kernel, a notebook run with the reference leaves nothing that the next one,
    run with the unfinished learner file, could pass with: no name, no loaded kernel.py, not the
    implementation it chose, nor an environment variable, a warning filter or an open figure (the
    inline backend of Jupyter closes a cell's figures; one set by MPLBACKEND would not)."""
    cell = nbformat.v4.new_code_cell
    first = nbformat.v4.new_notebook(
        cells=[
            cell(
                "import os, warnings\n"
                "import matplotlib.pyplot as plt\n"
                "from grader.notebook import kernel_or_fallback\n"
                'add = kernel_or_fallback("missing-elements/01-vector-add")\n'
                "print('fallback:', add.is_fallback)\n"
                "plt.figure()\n"
                'os.environ["LEFT_BEHIND"] = "1"\n'
                'warnings.simplefilter("ignore")\n'
            )
        ]
    )
    second = nbformat.v4.new_notebook(
        cells=[
            cell(
                "import os, sys, warnings\n"
                "import matplotlib.pyplot as plt\n"
                "print('names:', [n for n in ('add', 'kernel_or_fallback') if n in globals()])\n"
                f"folders = {COURSE_FOLDERS!r}\n"
                "print('course modules:', [n for n, m in list(sys.modules.items())\n"
                "      if os.path.realpath(getattr(m, '__file__', None) or '/').startswith(folders)])\n"
                "print('figures:', plt.get_fignums())\n"
                "print('variable:', os.environ.get('LEFT_BEHIND'))\n"
                "print('ignored:', [f for f in warnings.filters\n"
                "      if f[0] == 'ignore' and f[1] is None and f[2] is Warning])\n"
                "from grader.notebook import kernel_or_fallback\n"
                'add = kernel_or_fallback("missing-elements/01-vector-add")\n'
                "print('fallback:', add.is_fallback)\n"
            )
        ]
    )
    assert "fallback: False" in _text(_run(kernel, first, "solutions"))
    printed = _text(_run(kernel, second, "learner")).splitlines()
    for empty in ("names: []", "course modules: []", "figures: []", "variable: None", "ignored: []"):
        assert empty in printed
    assert "fallback: True" in printed and "not ready yet" in "\n".join(printed)


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
