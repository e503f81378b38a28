"""pytest glue for the modules' public tests (``tracks/*/*/test_kernel.py``).

- ``--impl`` chooses the kernel.py under test: ``learner`` (default), ``solutions``, or a folder.
- a test that takes ``case`` runs once per entry of its module's ``CASES`` that suits the device;
- a test that takes ``bar`` runs once per entry of its module's ``TRAFFIC`` (memory-traffic bars),
  under the interpreter only: on a GPU the speed itself is measured instead;
- the ``kernel`` fixture is the loaded kernel.py, or a clean failure saying why it cannot load.
"""

from __future__ import annotations

import pytest

from grader.core import device
from grader.core.catalog import find_module
from grader.core.loading import LoadError, load_kernel


def pytest_addoption(parser):
    parser.addoption("--impl", default="learner",
                     help="kernel.py to test: learner (default), solutions, or a folder of submissions")


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped under the interpreter)")
    config.addinivalue_line("markers", "interpreter: watches Triton's interpreter (skipped on a GPU)")


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames and hasattr(metafunc.module, "CASES"):
        # GPU-only cases stay in the list so that a CPU run reports them as skipped.
        cases = [pytest.param(c, id=c.name, marks=[pytest.mark.cuda] if c.cuda_only else [])
                 for c in metafunc.module.CASES]
        metafunc.parametrize("case", cases)
    if "bar" in metafunc.fixturenames and hasattr(metafunc.module, "TRAFFIC"):
        metafunc.parametrize("bar", [pytest.param(b, id=b.name, marks=[pytest.mark.interpreter])
                                     for b in metafunc.module.TRAFFIC])


def pytest_runtest_setup(item):
    if item.get_closest_marker("cuda") and not device.is_cuda():
        pytest.skip("needs a CUDA GPU; this run uses Triton's interpreter on the CPU")
    if item.get_closest_marker("interpreter") and device.is_cuda():
        pytest.skip("the memory-traffic report watches Triton's interpreter; on this GPU the speed "
                    "itself is measured (set GRADER_DEVICE=cpu to see the report here)")


_loaded = {}


@pytest.fixture
def kernel(request):
    module = find_module(str(request.path.parent))
    impl = request.config.getoption("--impl")
    key = (module.id, impl)
    if key not in _loaded:
        try:
            _loaded[key] = load_kernel(module, impl)
        except LoadError as error:
            _loaded[key] = error
    loaded = _loaded[key]
    if isinstance(loaded, LoadError):
        pytest.fail(str(loaded), pytrace=False)
    return loaded
