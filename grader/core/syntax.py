"""Parsing Python source into an ``ast`` tree, safely from several threads at once.

The run phase grades several submissions on threads of one process, and each grading parses its
kernel.py (the policy gate, the list of the submission's own kernels). CPython 3.11 keeps the depth
counter of its C-to-Python tree conversion in interpreter-wide state; when another thread runs in
the middle of a conversion (a garbage collection can run Python code there), the parse fails with
"SystemError: AST constructor recursion depth mismatch". One lock around every parse in the grader
prevents it between the grader's own parses and costs nothing measurable (a kernel.py parses in
about a millisecond); a parse elsewhere in the process (the standard library's traceback formatting
parses too) can still collide, so that one error is retried.
"""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()
_ATTEMPTS = 3


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, one call at a time; raises what ``ast.parse`` raises."""
    with _PARSING:
        for attempt in range(_ATTEMPTS):
            try:
                return ast.parse(source)
            except SystemError as error:
                if "recursion depth mismatch" not in str(error) or attempt == _ATTEMPTS - 1:
                    raise
