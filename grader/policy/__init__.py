"""Static policy gate: refuse what no exercise needs in a submitted kernel.py, before any of it runs.

The gate is an allowlist. A kernel file needs very little outside its @triton.jit kernels: import
torch, triton, triton.language and math; allocate, reshape and copy tensors; ask the device a few
questions; compute a grid with integer arithmetic and launch. Everything else (other modules,
private attributes, frame and code introspection, PyTorch compute, moving tensor values to NumPy
or Python, changing other modules, autotuner hooks) is refused with a one-line reason that names
the line, so that a learner who wanders off the path learns why, and a student who read the
grader's source cannot reach its internals from Python.

Rule ids (``Violation.rule``): import, builtin, private, introspection, module-object,
module-attribute-write, attribute-write, torch-compute, torch-internals, triton-internals,
module-member, tensor-escape, kernel-body, hook, heuristics, metaclass, class-object, stream, syntax.

Classes are the way from a value to objects the gate never sees being made: the class of
``sys.stdout.buffer.raw`` is io.FileIO, and calling it opens any file. So ``type(...)`` may only be
compared or printed, the members whose calls the gate checks argument by argument (torch.Tensor,
triton.Config, autotune, heuristics, jit) may only be called where they are named, and
sys.stdout/sys.stderr may only be printed to: nothing else in kernel.py reaches a file object.
Hooks are recognised by parameter, not by spelling: a positional argument of those Triton calls is
named from the installed Triton's signature, and ``*args``/``**kwargs`` into them are refused.

We walk the tree ourselves with the standard library's ``ast`` rather than plugging rules into a
third-party linter: the rules are few but specific to this course (which names are modules, which
functions are kernels), and a small walker keeps the grader's trusted code free of dependencies.
What depends on the installed versions (torch.Tensor's attributes, what triton.language holds) is
read from torch and triton themselves, imported on first use; nothing of the submission is.

What a static check cannot decide is left to the runtime operator log in the child: operators on
tensors (``x + y``, ``out[:] = x``, ``float(t)``, iterating a tensor) look exactly like integer
arithmetic on shapes, and values that flow through parameters (a tensor passed as a constexpr to
a kernel, an object handed to a helper that sets its attributes) have no static type here.

``check_source`` returns no violation for a file that does not parse: the loader reports syntax
errors with better messages (the offending token, a caret), so the gate stays out of its way.

The package: ``allowlists`` holds what is allowed (data), ``walker`` the ``ast`` visitor that
applies it; this module is the gate's API (``policy_for``, ``check_source``, ``explain``).
"""

from __future__ import annotations

from grader.core import syntax
from grader.policy.allowlists import _DO_INSTEAD, DEFAULT_POLICY, Policy, Violation
from grader.policy.walker import _Checker

__all__ = ["DEFAULT_POLICY", "Policy", "Violation", "check_source", "explain", "policy_for"]


def policy_for(*specs: object) -> Policy:
    """The policy for one module: the default, widened by what its ``Spec`` s allow together
    (``allowed_torch_names``, dotted below torch like "autograd.Function",
    ``allowed_tensor_methods`` and ``allowed_hooks``): one file serves all of a module's
    functions. Duck-typed so that this module needs no grader import."""

    def union(field: str) -> set:
        return set().union(*(getattr(spec, field, ()) for spec in specs))

    return DEFAULT_POLICY.widen(
        torch_names=union("allowed_torch_names"),
        tensor_methods=union("allowed_tensor_methods"),
        hooks=union("allowed_hooks"),
    )


def check_source(source: str, policy: Policy = DEFAULT_POLICY) -> list[Violation]:
    """Everything in ``source`` that ``policy`` refuses, sorted by line.

    A file that does not parse gives no violation (the loader reports syntax errors better); a
    file too deeply nested to parse or walk is refused outright ("syntax") rather than waved through.
    """
    too_deep = [
        Violation(
            1,
            "syntax",
            "kernel.py is nested too deeply for the grader to check: split long expressions into several statements.",
        )
    ]
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):  # ValueError: NUL bytes on Python < 3.12
        return []
    except (RecursionError, MemoryError):  # refuse what cannot be walked rather than wave it through
        return too_deep
    try:
        checker = _Checker(tree, policy)
        checker.visit(tree)
    except RecursionError:
        return too_deep
    return checker.violations()


def explain(violations: list[Violation], limit: int = 5) -> str:
    """A short learner-facing block: what is refused (at most ``limit`` lines) and what to do."""
    lines = ["The grader refuses this kernel.py before running it:"]
    lines += [f"  {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"  ... and {len(violations) - limit} more")
    lines.append(_DO_INSTEAD)
    return "\n".join(lines)
