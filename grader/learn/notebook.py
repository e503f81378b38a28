"""Helpers for the study notebooks: load the learner's kernel, or explain why it cannot run yet.

A notebook must run top to bottom even before the learner has finished ``kernel.py``: then it
shows what is missing and uses PyTorch's implementation for the remaining cells. Those results
look exactly like a working kernel's, so every one of them carries the returned function's
``label``: the cells print it and put it in plot titles and legends.
Set ``GRADER_NOTEBOOK_IMPL=solutions`` (the test suite does) to run the reference instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from grader.core import cases, device
from grader.core.catalog import find_module
from grader.core.checks import run_case
from grader.core.loading import LoadError, load_kernel, todo_summary

YOURS = "your kernel"
FALLBACK = "PyTorch's result (your kernel is not ready yet)"


@dataclass(frozen=True)
class NotebookKernel:
    """What kernel_or_fallback returns: call it like the module's API function; ``label`` says
    who computed its results."""

    fn: Callable
    label: str  # YOURS, FALLBACK, or the reference's label: for prints, titles and legends
    is_fallback: bool
    namespace: object = None  # the loaded kernel.py (its kernels and helpers); None for the fallback

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def _label(impl: str) -> str:
    return {"learner": YOURS, "solutions": "the reference solution"}.get(impl, f"the kernel in {impl}")


def kernel_or_fallback(module_id: str, api: str | None = None) -> NotebookKernel:
    """The module's function ``api`` (default: its main one) from your kernel.py if it passes a
    quick check, else PyTorch's."""
    module = find_module(module_id)
    impl = os.environ.get("GRADER_NOTEBOOK_IMPL", "learner")
    module_spec, public_cases = cases.public(module)
    spec = next((s for s in cases.specs_of(module_spec, public_cases) if s.api == api), None) if api else module_spec
    if spec is None:
        raise LookupError(f"{module_id}'s public tests have no function {api}()")
    own_cases = [case for case in public_cases if cases.spec_for(case, module_spec) is spec]
    print(f"Kernels run on {device.describe()}.")
    try:
        loaded = load_kernel(module, impl)
        fn = loaded.api(spec.api)
        result = run_case(fn, module_spec, cases.for_mode(own_cases, device.is_cuda())[-1])
        hint = todo_summary(loaded.todos, track=module.track)
        problem = "" if result.passed else result.message + "\n" + hint
    except LoadError as error:
        problem = str(error)
    if not problem:
        print(f"Using {spec.api}() from {impl if impl != 'learner' else 'your kernel.py'}: it passes a quick check.")
        return NotebookKernel(fn, _label(impl), is_fallback=False, namespace=loaded.namespace)
    rule = "=" * 100
    print(
        f"{rule}\n{FALLBACK.upper()}\nYour kernel.py is not ready yet, so this notebook uses PyTorch's "
        f'version for now.\nEvery result below that PyTorch computed is labelled "{FALLBACK}".\n'
        f"Why:\n{problem.strip()}\n{rule}"
    )
    return NotebookKernel(spec.torch_baseline, FALLBACK, is_fallback=True)
