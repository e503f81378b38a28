"""pytest glue for the modules' public tests (``tracks/*/*/test_kernel.py``).

- ``--impl`` chooses the kernel.py under test: ``learner`` (default), ``solutions``, or a folder;
  ``--function`` keeps only the tests of one function of the module, or of one of its parts
  (``make check K=...``);
- a test that takes ``case`` runs once per entry of its module's ``CASES`` that suits the device;
- a test that takes ``bar`` runs once per entry of its module's ``TRAFFIC`` (memory-traffic bars),
  under the interpreter only: on a GPU the speed itself is measured instead;
- the ``kernel`` fixture is the loaded kernel.py, or a clean failure saying why it cannot load;
- ``timed`` marks a test that times GPU work (make verify-gpu runs those alone, after the rest);
- under ``--dist loadfile``, the files that test every module split by track over the workers,
  and the longest units start first (``heavy`` marks the long ones before any run has timed them).
"""

from __future__ import annotations

import pytest

from grader.authoring import test_order
from grader.core import device
from grader.core.cases import spec_for
from grader.core.catalog import find_module
from grader.core.loading import LoadError, load_kernel


def pytest_addoption(parser):
    parser.addoption(
        "--failures-at-once",
        action="store_true",
        help="name each failing test as it fails, not only in the closing summary: a run stopped "
        "at a time limit still says which tests failed (make verify-gpu)",
    )
    parser.addoption(
        "--impl", default="learner", help="kernel.py to test: learner (default), solutions, or a folder of submissions"
    )
    parser.addoption(
        "--function",
        default=None,
        help="only the tests of this function of the module (make check K=...): the cases "
        "that call it, and the other tests that name it",
    )


class _FailuresAtOnce:
    """--failures-at-once: each failure named as its report arrives (in a parallel run, the
    controller's reports: every worker's)."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        if report.failed:
            said = "FAILED" if report.when == "call" else f"ERROR at {report.when}"
            reason = _first_line_of_failure(report)
            line = f"{said} {report.nodeid}" + (f" - {reason}" if reason else "")
            self.config.pluginmanager.get_plugin("terminalreporter").write_line(line)


def _first_line_of_failure(report, limit: int = 300) -> str:
    """What failed, in one line (the assertion or the exception raised), as pytest's -rf says it."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr or "")
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[0][:limit] if lines else ""


def pytest_configure(config):
    if config.getoption("--failures-at-once"):
        config.pluginmanager.register(_FailuresAtOnce(config), "failures-at-once")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped under the interpreter)")
    config.addinivalue_line("markers", "interpreter: watches Triton's interpreter (skipped on a GPU)")
    config.addinivalue_line(
        "markers",
        "timed: times GPU work, so it needs the GPU to itself (make verify-gpu "
        "runs these after the parallel pass, one at a time)",
    )
    config.addinivalue_line(
        "markers",
        "heavy: a file whose module-scoped fixture grades for minutes; until a "
        "parallel run has timed it, such a file starts first, so that it does not "
        "end the run",
    )


# With ``--dist loadfile`` each work unit (grader.authoring.test_order) runs on one worker. The
# xdist workers' collection puts the longest units first, and the scheduler keeps that order; the
# controller of a parallel run times each unit for the next one.
def pytest_collection_modifyitems(config, items):
    function = config.getoption("--function")
    if function:
        kept = [item for item in items if tests_function(item, function)]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    if not hasattr(config, "workerinput"):  # not an xdist worker: a run in one process keeps its order
        return
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(test_order.work_unit(item.nodeid), []).append(item)
    heavy = {name for name, unit in units.items() if unit[0].get_closest_marker("heavy")}
    history = test_order.expected_seconds(config.rootpath, device.mode())
    items[:] = [item for name in test_order.longest_first(units, history, heavy) for item in units[name]]


def tests_function(item, function: str) -> bool:
    """Whether test ``item`` tests ``function`` of its module (or, for a module of several parts,
    any function of the part named ``function``): a case (or traffic bar) whose Spec calls it, or
    another test whose name names it."""
    callspec = getattr(item, "callspec", None)
    module = getattr(item, "module", None)
    module_spec = getattr(module, "SPEC", None)
    part = next((part for part in getattr(module, "PARTS", ()) if part.name == function), None)
    functions = set(part.functions) if part is not None else {function}
    for name in ("case", "bar"):
        if callspec is not None and name in callspec.params and module_spec is not None:
            value = callspec.params[name]
            return spec_for(value if name == "case" else value.case, module_spec).api in functions
    return any(named in item.name for named in functions)


_clock: test_order.UnitClock | None = None


def pytest_sessionstart(session):
    global _clock
    config = session.config
    if not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("dsession"):
        _clock = test_order.UnitClock(config.rootpath, device.mode())


def pytest_runtest_logreport(report):
    if _clock is not None:
        _clock.add(report.nodeid, report.duration)


def pytest_sessionfinish(session, exitstatus):
    if _clock is not None and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        _clock.save()


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # without pytest-xdist the suite runs in one process
    LoadFileScheduling = None

if LoadFileScheduling is not None:

    class _LoadFileSplitByTrack(LoadFileScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # the collection's order is already the one wanted

        def _split_scope(self, nodeid: str) -> str:
            return test_order.work_unit(nodeid)

    @pytest.hookimpl(optionalhook=True)  # `-p no:xdist` leaves the hook unknown: no error then
    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") == "loadfile":
            return _LoadFileSplitByTrack(config, log)
        return None


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames and hasattr(metafunc.module, "CASES"):
        # GPU-only cases stay in the list so that a CPU run reports them as skipped.
        cases = [
            pytest.param(c, id=c.name, marks=[pytest.mark.cuda] if c.cuda_only else []) for c in metafunc.module.CASES
        ]
        metafunc.parametrize("case", cases)
    if "bar" in metafunc.fixturenames and hasattr(metafunc.module, "TRAFFIC"):
        metafunc.parametrize(
            "bar", [pytest.param(b, id=b.name, marks=[pytest.mark.interpreter]) for b in metafunc.module.TRAFFIC]
        )


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    # Several test processes share one GPU in make verify-gpu (and notebooks run beside them): hand
    # back the memory PyTorch's allocator keeps cached, so that none of them runs out for the others.
    # A test that leaves the CUDA context unusable (an illegal address in a planted bug) would make
    # every later test of this process fail in its place: it is named here, at its own teardown.
    # Last, once the test's fixtures are torn down: a test that patches torch.cuda is undone by
    # then, and a failure here cannot leave pytest's own teardown half done for the tests after.
    if device.is_cuda():
        import torch

        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except RuntimeError as error:  # torch.AcceleratorError is one
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            pytest.fail(
                f"this test left the process's CUDA context unusable ({first}); the later tests of "
                "this process fail with it. Run what faults under the interpreter only, or alone.",
                pytrace=False,
            )


def pytest_runtest_setup(item):
    if item.get_closest_marker("cuda") and not device.is_cuda():
        pytest.skip("needs a CUDA GPU; this run uses Triton's interpreter on the CPU")
    if item.get_closest_marker("interpreter") and device.is_cuda():
        pytest.skip(
            "the memory-traffic report watches Triton's interpreter; on this GPU the speed "
            "itself is measured (set GRADER_DEVICE=cpu to see the report here)"
        )


_loaded = {}
_refused: dict[str, str] = {}  # kernel.py -> what the policy gate refuses in it (said at the end)


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
        else:
            _note_refusals(module, _loaded[key].path)
    loaded = _loaded[key]
    if isinstance(loaded, LoadError):
        pytest.fail(str(loaded), pytrace=False)
    return loaded


def _note_refusals(module, path) -> None:
    """Remember what the grader's policy gate would refuse in ``path``: the tests still run, and
    the end of the session says it, as ``make check`` does, so that a file that passes here is
    not a surprise 0 when graded."""
    from grader.core import cases
    from grader.policy import check_source, explain, policy_for

    try:
        source = path.read_text()
    except OSError:
        return
    refused = check_source(source, policy_for(*cases.specs_of(*cases.public(module))))
    if refused:
        _refused[str(path)] = explain(refused)


def pytest_terminal_summary(terminalreporter):
    for path, text in _refused.items():
        terminalreporter.section(f"what grading would refuse in {path}", yellow=True)
        terminalreporter.write_line(f"{text}\nThe tests ran anyway, but a graded submission like this scores 0.")
