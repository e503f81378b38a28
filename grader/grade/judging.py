"""Judging one call in the parent, from what the sandboxed child saved: the verdict, and what a
learner may read of a failed hidden case."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from grader.core.cases import Case, Spec, spec_for
from grader.core.checks import (
    aliased_output,
    changed_input,
    compare,
    reference_outputs,
    same_values,
    tensors_in,
    with_mutated,
)
from grader.core.diagnosis import input_names
from grader.core.evidence import judge_evidence
from grader.core.protocols import frozen_inputs, moved_input, tensor_names
from grader.grade.host_memory import JUDGING
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
    kind: str = ""  # what went wrong, for records and integrity findings (never a hidden case's text)
    message: str = ""
    seconds: float = 0.0
    outputs: tuple = ()
    crash: ChildEnded | None = None  # how the process crashed, when it did


def _placeholder(type_name: str):
    """Something whose type is called ``type_name``, so that compare() names what was returned."""
    return type(type_name, (), {})()


def fetch(child, name: str, args: tuple, kwargs: dict, references: tuple) -> dict:
    """What the child saved under ``name``, read within limits set by what a right answer needs:
    the caller's tensors as the call left them, the tensors the arguments hold after the call
    (the same ones, unless the call replaced some) and the outputs (the references, in float64,
    bound any dtype), with room for one wrong-sized output. Raises on anything else."""
    inputs = tensors_in((args, kwargs))
    expected = [t for t in (*references, *inputs) if isinstance(t, torch.Tensor)]
    max_elements = 2 * max([t.numel() for t in expected] + [1]) + 1024
    max_bytes = (
        2 * sum(t.untyped_storage().nbytes() for t in inputs)
        + 4 * sum(t.numel() * 8 for t in references if isinstance(t, torch.Tensor))
        + (1 << 20)
    )
    JUDGING.need(min(child.size(name), max_bytes))
    saved = wire.parse(child.take(name, max_bytes), max_elements)
    if not isinstance(saved, dict) or not isinstance(saved.get("outputs"), list):
        raise wire.WireError("the file does not hold the expected fields")
    return saved


def judge(
    spec: Spec,
    case: Case,
    args: tuple,
    kwargs: dict,
    done: dict,
    fetch,
    on: torch.device,
    earlier: tuple = (),
    own_kernels: set[str] | None = None,
    hidden: bool = False,
    room=None,
    step=None,
) -> Verdict:
    """The verdict on one call, from the child's report ``done`` and what it saved (``fetch``:
        the references -> the saved outputs and inputs). ``own_kernels``: the submission's
        @triton.jit names, read against the child's CUDA kernel trace. A ``hidden`` case's wrong
        output is not diagnosed: ``hidden_message`` is all its learner reads. ``room``: where a wrong
        output's diagnosis may run (``grader.grade.gpu_memory.diagnosis_room``). ``step(name)``: a context
    manager that times a part of the judging (``grader.grade.profile.Profile.step``)."""
    step = step or (lambda name: nullcontext())
    spec = spec_for(case, spec)
    api = spec.api
    seconds = float(done.get("seconds") or 0.0)
    replaced = None
    if done.get("error"):
        # call_api's own messages start with these; a learner's exception starts "add() raised".
        error = str(done["error"])
        if not error.startswith(f"{api}() put another tensor in the place of"):
            kind = (
                "mutation"
                if error.startswith(f"{api}() changed its input")
                else "alias"
                if error.startswith(f"{api}() returned one of its inputs")
                else "error"
            )
            return Verdict(False, kind, error, seconds)
        # The child found the caller's tensors replaced: the parent says so from what it saved,
        # naming the arguments as the reference does (the child knows no names).
        replaced = error
    with step("judging references"):
        references = reference_outputs(spec, args, kwargs)
    try:
        saved = fetch(references)
        # "args" and "kwargs": the caller's tensors (as the child held them before the call, now
        # holding what the call wrote into them); "after": the arguments' tensors after the call.
        kept, args_after, kwargs_after = saved["outputs"], saved["args"], saved["kwargs"]
        after = saved.get("after")
    except FileNotFoundError:
        return Verdict(False, "unreadable", f"{api}() returned, but nothing it returned was saved.", seconds)
    except Exception as error:
        return Verdict(
            False,
            "unreadable",
            f"The grader could not read what {api}() returned ({error}). "
            "Return plain torch.Tensor objects of the expected shape.",
            seconds,
        )
    returned = done.get("returned") or []
    if not isinstance(returned, list) or len(returned) != len(kept):
        return Verdict(False, "unreadable", f"The grader could not read what {api}() returned.", seconds)
    outputs = tuple(out if out is not None else _placeholder(str(name)) for out, name in zip(kept, returned))

    expected_device = on.type
    for name, where in zip(spec.output_names, done.get("devices") or []):
        if where is not None and where != expected_device:
            return Verdict(
                False,
                "device",
                f"{name} is on {where}, but the inputs are on {expected_device}: "
                "allocate the output on the inputs' device.",
                seconds,
            )
    # The child checked these too, but code that patched torch could have fooled it.
    if (
        not isinstance(args_after, (list, tuple))
        or not isinstance(kwargs_after, dict)
        or len(tensors_in((args, kwargs))) != len(tensors_in((args_after, kwargs_after)))
    ):
        return Verdict(False, "unreadable", f"The grader could not read the inputs after {api}().", seconds)
    args_after = tuple(args_after)
    problem = changed_input(
        frozen_inputs(args, kwargs, spec.mutates), frozen_inputs(args_after, kwargs_after, spec.mutates), api
    )
    if problem:
        return Verdict(False, "mutation", problem, seconds)
    passed = tensors_in((args_after, kwargs_after))
    if after is not None:  # an in-place API's results are read from the caller's tensors, which must stay put
        problem = moved_input(
            passed,
            after if isinstance(after, list) else [],
            api,
            tensor_names(input_names(spec.reference), args, kwargs),
        )
        if problem:
            return Verdict(False, "replaced", problem, seconds)
    if replaced:  # a call that failed in the child never passes here
        return Verdict(False, "replaced", replaced, seconds)
    problem = aliased_output(outputs, passed, api)
    if problem:
        return Verdict(False, "alias", problem, seconds)
    outputs = with_mutated(spec, outputs, args_after)

    try:
        with step("judging comparisons"):
            problems = compare(spec, case, outputs, references, (args, kwargs), detail=not hidden, room=room)
    except Exception as error:  # a malformed output (meta tensor, odd layout) must not stop grading
        problems = [f"The grader could not compare what {api}() returned ({type(error).__name__})."]
    if problems:
        message = "\n".join(problems)
        if earlier and all(
            isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_values(a, b)
            for a, b in zip(outputs, earlier)
        ):
            return Verdict(
                False,
                "cache",
                f"{api}() returned the same values for two different inputs "
                "of the same shape: it reuses an earlier result. Compute the output on every call.",
                seconds,
                outputs,
            )
        return Verdict(False, "wrong", message, seconds, outputs)

    found = judge_evidence(
        api, done, any(isinstance(o, torch.Tensor) and o.numel() for o in outputs), own_kernels, spec
    )
    if found:
        return Verdict(False, found[0], found[1], seconds, outputs)
    return Verdict(True, seconds=seconds, outputs=outputs)


# Failures that are not mistakes but ways around the exercise: any one of them withholds every
# point of the module, with this reason.
INTEGRITY = {
    "torch": "a case was computed with PyTorch (or NumPy) instead of a Triton kernel.",
    "moved": "a case's output was moved into place with PyTorch, where moving the data is the exercise.",
    "tampered": "the grader's monitor was tampered with (its check after a call went unseen).",
    "no_launch": "a case returned a result without launching a Triton kernel.",
    "cache": "a call returned an earlier result for new inputs (outputs cached across calls).",
    "alias": "a call returned one of its inputs instead of a new tensor.",
    "mutation": "a call changed its inputs.",
    "replaced": "a call put other tensors in place of those it had to update in place.",
    "policy": "the grader refused kernel.py before running it.",
}


# Every failed hidden case reads the same: how it failed (the kind of failure, what was raised,
# which elements were wrong, how the process ended) is the submission's choice, so it could spell
# out the hidden inputs a few bits per case. Only the grader's own reasons for not running a case
# (the time budget spent, kernel.py refused) are said.
HIDDEN_FAILED = (
    "Hidden case failed: {api}() did not pass it. Hidden cases show nothing more: run the public "
    "cases (make check), whose messages say what went wrong and what to try; the hidden ones "
    "test the same things on other sizes, dtypes and layouts."
)


def hidden_message(verdict: Verdict, api: str) -> str:
    """What a learner may read about a hidden case that did not pass: ``HIDDEN_FAILED``, or the
    grader's own reason for not running it. Nothing of the verdict's kind or message beyond that."""
    if verdict.kind == "not_run":  # the grader's own words (the time budget), never the learner's
        return f"Hidden case {verdict.message[0].lower()}{verdict.message[1:]}"
    if verdict.kind == "policy":  # the module's refusal, the same for every case
        return "Hidden case not run: the grader refused kernel.py before running it."
    return HIDDEN_FAILED.format(api=api)


# ----------------------------------------------------------------------------------------------
# Grading one submission of one module
# ----------------------------------------------------------------------------------------------
