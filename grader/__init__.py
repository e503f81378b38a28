"""Harness, checks, benchmarks and grading for the Triton kernel curriculum.

The package is grouped by audience; dependencies point one way (nothing in ``core`` imports
anything above it):

- ``core``: the course's shared ground: device, catalog, cases, loading, checks, diagnosis,
  the marker grammar, the call monitor;
- ``learn``: the learner's commands (check, progress, bench, lab, the notebooks' helpers);
- ``grade``: the instructor's grading (run phase, timing, records, nbgrader, release);
- ``policy``: the policy gate, a static check of a submission's source (allowlists and walker);
- ``sandbox``: the child process that runs a submission and its protections;
- ``authoring``: what maintainers run (committed stubs, example submissions, planted mistakes).

Course files (kernels, their tests, notebooks) import a small public surface by short names:
``grader.device``, ``grader.validation``, ``grader.check``, ``grader.cases``, ``grader.checks``,
``grader.bench``, ``grader.traffic``, ``grader.memcheck``, ``grader.catalog``, ``grader.loading``,
``grader.instrument``, ``grader.evidence`` and ``grader.notebook``. Those names stay valid whatever
the layout, so a learner's file never breaks when the package is reorganised (a test holds every
file under ``tracks/`` and ``notebooks/`` to them).

Importing the package selects the device (CUDA, else Triton's interpreter) before any
learner code is loaded.
"""

import importlib
import importlib.abc
import importlib.util
import sys

from grader.core import device as _device
from grader.core import versions as _versions

PUBLIC_NAMES = {
    "grader.device": "grader.core.device",
    "grader.validation": "grader.core.validation",
    "grader.cases": "grader.core.cases",
    "grader.checks": "grader.core.checks",
    "grader.bench": "grader.core.bench",
    "grader.traffic": "grader.core.traffic",
    "grader.memcheck": "grader.core.memcheck",
    "grader.catalog": "grader.core.catalog",
    "grader.loading": "grader.core.loading",
    "grader.instrument": "grader.core.instrument",
    "grader.evidence": "grader.core.evidence",
    "grader.large_offsets": "grader.core.large_offsets",
    "grader.check": "grader.learn.check",
    "grader.notebook": "grader.learn.notebook",
}


class _PublicName(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import grader.<short name>`` give the very module object of its full name."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in PUBLIC_NAMES else None

    def create_module(self, spec):
        module = importlib.import_module(PUBLIC_NAMES[spec.name])
        spec.loader_state = module.__spec__  # the import machinery overwrites it next
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(finder, _PublicName) for finder in sys.meta_path):
    sys.meta_path.insert(0, _PublicName())

device = _device  # ``from grader import device``
_device.select()

try:  # a version the course cannot run with is named here, not misdiagnosed as the learner's bug
    _versions.check(interpreter=not _device.is_cuda())
except _versions.UnsupportedVersion as _error:
    sys.stderr.write(f"{_error}\n")
    raise SystemExit(2) from None

__version__ = "0.1.0"
