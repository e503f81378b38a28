"""Helpers for the study notebooks: load the learner's kernel, or explain why it cannot run yet.

A notebook must run top to bottom even before the learner has finished ``kernel.py``: then it
shows what is missing and uses PyTorch's implementation for the remaining cells.
Set ``GRADER_NOTEBOOK_IMPL=solutions`` (the test suite does) to run the reference instead.
"""

from __future__ import annotations

import os
from typing import Callable

from grader import cases, device
from grader.catalog import find_module
from grader.checks import run_case
from grader.loading import LoadError, load_kernel, todo_summary


def kernel_or_fallback(module_id: str) -> Callable:
    """The module's API function from your kernel.py if it passes a quick check, else PyTorch's."""
    module = find_module(module_id)
    impl = os.environ.get("GRADER_NOTEBOOK_IMPL", "learner")
    spec, public_cases = cases.public(module)
    print(f"Kernels run on {device.describe()}.")
    try:
        loaded = load_kernel(module, impl)
        fn = loaded.api(spec.api)
        result = run_case(fn, spec, cases.for_mode(public_cases, device.is_cuda())[-1])
        problem = "" if result.passed else result.message + "\n" + todo_summary(loaded.todos)
    except LoadError as error:
        problem = str(error)
    if not problem:
        print(f"Using {spec.api}() from {impl if impl != 'learner' else 'your kernel.py'}: it passes a quick check.")
        return fn
    print(f"Your kernel.py is not ready yet, so this notebook uses PyTorch's version for now:\n{problem.strip()}")
    return spec.torch_baseline
