"""Judging one call in the parent, from what the sandboxed child saved: the verdict, and what a
learner may read of a failed hidden case."""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass

import torch

from grader.core import crashes
from grader.core.cases import Case, Spec, spec_for
from grader.core.checks import (aliased_output, changed_input, compare, reference_outputs, same_values, tensors_in,
                                 with_mutated)
from grader.core.protocols import frozen_inputs
from grader.core.evidence import judge_evidence
from grader.sandbox import wire
from grader.sandbox.isolation import ChildEnded


@dataclass
class Trial:
    id: int
    case_index: int
    secret: int
    repeat: bool = False  # a second call on fresh inputs of the same shape: catches caching


@dataclass
class Verdict:
    passed: bool
    kind: str = ""  # what went wrong, for the hidden cases' generic messages
    message: str = ""
    seconds: float = 0.0
    outputs: tuple = ()
    crash: ChildEnded | None = None  # how the process crashed, when it did


def _placeholder(type_name: str):
    """Something whose type is called ``type_name``, so that compare() names what was returned."""
    return type(type_name, (), {})()


def fetch(child, name: str, args: tuple, kwargs: dict, references: tuple) -> dict:
    """What the child saved under ``name``, read within limits set by what a right answer needs:
    the inputs as they are after the call plus the outputs (the references, in float64, bound
    any dtype), with room for one wrong-sized output. Raises on anything else."""
    inputs = tensors_in((args, kwargs))
    expected = [t for t in (*references, *inputs) if isinstance(t, torch.Tensor)]
    max_elements = 2 * max([t.numel() for t in expected] + [1]) + 1024
    max_bytes = 2 * sum(t.untyped_storage().nbytes() for t in inputs) + \
        4 * sum(t.numel() * 8 for t in references if isinstance(t, torch.Tensor)) + (1 << 20)
    saved = wire.parse(child.take(name, max_bytes), max_elements)
    if not isinstance(saved, dict) or not isinstance(saved.get("outputs"), list):
        raise wire.WireError("the file does not hold the expected fields")
    return saved


def judge(spec: Spec, case: Case, args: tuple, kwargs: dict, done: dict, fetch, on: torch.device,
          earlier: tuple = (), own_kernels: set[str] | None = None) -> Verdict:
    """The verdict on one call, from the child's report ``done`` and what it saved (``fetch``:
    the references -> the saved outputs and inputs). ``own_kernels``: the submission's
    @triton.jit names, read against the child's CUDA kernel trace."""
    spec = spec_for(case, spec)
    api = spec.api
    seconds = float(done.get("seconds") or 0.0)
    if done.get("error"):
        # call_api's own messages start with these; a learner's exception starts "add() raised".
        error = str(done["error"])
        kind = "mutation" if error.startswith(f"{api}() changed its input") else \
            "alias" if error.startswith(f"{api}() returned one of its inputs") else "error"
        return Verdict(False, kind, error, seconds)
    references = reference_outputs(spec, args, kwargs)
    try:
        saved = fetch(references)
        kept, args_after, kwargs_after = saved["outputs"], saved["args"], saved["kwargs"]
    except FileNotFoundError:
        return Verdict(False, "unreadable", f"{api}() returned, but nothing it returned was saved.", seconds)
    except Exception as error:
        return Verdict(False, "unreadable", f"The grader could not read what {api}() returned ({error}). "
                       "Return plain torch.Tensor objects of the expected shape.", seconds)
    returned = done.get("returned") or []
    if not isinstance(returned, list) or len(returned) != len(kept):
        return Verdict(False, "unreadable", f"The grader could not read what {api}() returned.", seconds)
    outputs = tuple(out if out is not None else _placeholder(str(name)) for out, name in zip(kept, returned))

    expected_device = on.type
    for name, where in zip(spec.output_names, done.get("devices") or []):
        if where is not None and where != expected_device:
            return Verdict(False, "device", f"{name} is on {where}, but the inputs are on {expected_device}: "
                           "allocate the output on the inputs' device.", seconds)
    # The child checked these too, but code that patched torch could have fooled it.
    if not isinstance(args_after, (list, tuple)) or not isinstance(kwargs_after, dict) or \
            len(tensors_in((args, kwargs))) != len(tensors_in((args_after, kwargs_after))):
        return Verdict(False, "unreadable", f"The grader could not read the inputs after {api}().", seconds)
    args_after = tuple(args_after)
    problem = changed_input(frozen_inputs(args, kwargs, spec.mutates),
                            frozen_inputs(args_after, kwargs_after, spec.mutates), api)
    if problem:
        return Verdict(False, "mutation", problem, seconds)
    problem = aliased_output(outputs, tensors_in((args_after, kwargs_after)), api)
    if problem:
        return Verdict(False, "alias", problem, seconds)
    outputs = with_mutated(spec, outputs, args_after)

    try:
        problems = compare(spec, case, outputs, references, (args, kwargs))
    except Exception as error:  # a malformed output (meta tensor, odd layout) must not stop grading
        problems = [f"The grader could not compare what {api}() returned ({type(error).__name__})."]
    if problems:
        message = "\n".join(problems)
        if earlier and all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_values(a, b)
                           for a, b in zip(outputs, earlier)):
            return Verdict(False, "cache", f"{api}() returned the same values for two different inputs "
                           "of the same shape: it reuses an earlier result. Compute the output on every call.",
                           seconds, outputs)
        return Verdict(False, "wrong", message, seconds, outputs)

    found = judge_evidence(api, done, any(isinstance(o, torch.Tensor) and o.numel() for o in outputs),
                           own_kernels, spec)
    if found:
        return Verdict(False, found[0], found[1], seconds, outputs)
    return Verdict(True, seconds=seconds, outputs=outputs)


_GENERIC = {
    "wrong": "the output is wrong.",
    "mutation": "the function changed one of its inputs.",
    "alias": "the function returned one of its inputs instead of a new tensor.",
    "device": "the output is on the wrong device.",
    "unreadable": "the function returned something other than tensors.",
    "cache": "the function returned an earlier result for new inputs of the same shape.",
    "torch": "the function computed with PyTorch (or NumPy) instead of a Triton kernel.",
    "no_launch": "the function did not launch a Triton kernel.",
    "timeout": "the function did not return within the time limit (an endless loop?).",
    "policy": "not run: the grader refused kernel.py before running it.",
}


# Failures that are not mistakes but ways around the exercise: any one of them withholds every
# point of the module, with this reason.
INTEGRITY = {
    "torch": "a case was computed with PyTorch (or NumPy) instead of a Triton kernel.",
    "no_launch": "a case returned a result without launching a Triton kernel.",
    "cache": "a call returned an earlier result for new inputs (outputs cached across calls).",
    "alias": "a call returned one of its inputs instead of a new tensor.",
    "mutation": "a call changed its inputs.",
    "policy": "the grader refused kernel.py before running it.",
}


# A dtype's name keeps its digits ("Compute in float32"); every other number becomes N.
_DTYPE_OR_NUMBER = re.compile(r"\b((?:b?float|u?int)(?:8|16|32|64)|(?:fp|bf)(?:16|32|64))\b"
                              r"|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _without_numbers(line: str) -> str:
    return _DTYPE_OR_NUMBER.sub(lambda match: match.group(1) or "N", line)


def hidden_message(verdict: Verdict, api: str) -> str:
    """What a learner may read about a failed hidden case: what kind of failure, and the pattern
    of wrong elements, with every number (a size, an index, a value) left out."""
    text = f"Hidden case failed: {_GENERIC.get(verdict.kind, 'it did not pass.')}"
    if verdict.kind == "error":
        # Only a built-in exception's name: a class of the learner's could be named after a shape.
        match = re.search(r"raised (\w+)", verdict.message)
        found = getattr(builtins, match.group(1), None) if match else None
        name = found.__name__ if isinstance(found, type) and issubclass(found, BaseException) else "an exception"
        text = (f"Hidden case failed: {api}() raised {name}. Hidden cases do not show error messages; "
                "the public cases with similar shapes usually raise the same error.")
    elif verdict.kind == "wrong":
        kept = [line for line in verdict.message.splitlines() if line.startswith("Pattern:") or "NaN" in line]
        kept = [re.sub(r"^\d+ element\(s\) are NaN", "Some elements are NaN", line) for line in kept]
        text += "".join(" " + _without_numbers(line) for line in kept)
    elif verdict.kind == "not_run":  # the grader's own words (the time budget), never the learner's
        text = f"Hidden case {verdict.message[0].lower()}{verdict.message[1:]}"
    if verdict.crash is not None:  # the signal and make check's diagnosis: nothing of the case
        name = crashes.signal_name(verdict.crash.returncode)
        crashed = (f"the process running {api}() crashed{f' ({name})' if name else ''} on this case, in a fresh "
                   f"process that ran no other case. {crashes.explain(verdict.crash.returncode)}").rstrip()
        text = f"Hidden case failed: {crashed}" if verdict.kind == "crash" else f"{text} Then {crashed}"
    return text


# ----------------------------------------------------------------------------------------------
# Grading one submission of one module
# ----------------------------------------------------------------------------------------------
