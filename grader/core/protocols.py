"""How a case calls a module's API when one plain call is not the whole story.

Most APIs are pure functions: ``outputs = api(*args, **kwargs)``. Training code is not: an
autograd Function is judged by the gradients it gives back, and an optimizer step by how it
updates its arguments in place, over several steps. A ``Spec`` says which with two fields, read
here and nowhere else, so that the learner's check, the test suite, the grader's sandboxed child
and its timing all call the API the same way:

- ``mutates``: the positions of the arguments the API updates in place; their tensors are
  compared after the returned outputs, and are not reported as input mutation;
- ``protocol``: ``Backward`` (forward, then backpropagate given upstream gradients), ``Steps``
  (call once per entry of a per-step argument, e.g. each step's gradients), ``Calls`` (several
  independent calls in one case, e.g. dropout with two seeds, judged together), ``Raises``
  (the call must refuse its inputs with the right exception and a message that says what to do:
  input validation is part of most modules' lessons, and is graded like their results) or
  ``Warns`` (several calls, like ``Calls``, of which exactly one warns, saying why: a fallback).

An in-place API must update the caller's very tensors: what is compared is read from the tensors
the caller passed (``as_passed``), and a call that puts other tensors in its argument lists, or
points a tensor at other memory, fails (``moved_input``).

The child receives the protocol as plain data (``order_of``/``from_order``): it never imports a
module's tests.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Backward:
    """The API is differentiable. Its last ``upstream`` positional arguments are upstream
    gradients, one per forward output; the inputs at positions ``wrt`` become leaves that require
    grad. Compared: the forward outputs, then the gradient of each ``wrt`` input, in order."""

    wrt: tuple[int, ...]
    upstream: int = 1


@dataclass(frozen=True)
class Steps:
    """The API is one step of a stateful update (an optimizer). ``args[per_step]`` is a list with
    one entry per step; step t calls the API with entry t in its place and, when ``counter`` is
    set, that keyword equal to t + 1. Compared: what the last call returned, then the ``mutates``
    arguments."""

    per_step: int
    counter: str | None = None


@dataclass(frozen=True)
class Calls:
    """The API is called once per entry of the case's positional arguments, each entry an
    ``(args, kwargs)`` pair of one call, in order: properties that no single call shows (the same
    seed gives the same mask, another seed another) are judged on all the calls together.
    Compared: every call's outputs, one call after another."""


@dataclass(frozen=True)
class Raises:
    """The call must raise one of ``errors`` (names of builtin exception classes; a subclass
    counts) whose message matches every regular expression in ``needles``, ignoring case; ``why``
    says what the message must tell its reader. Nothing is compared: a refusal has no outputs."""

    errors: tuple[str, ...]
    needles: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class Warns:
    """Like ``Calls``, and of all the calls exactly one gives a warning whose message matches
    every regular expression of ``needles`` (ignoring case): a fallback says once that it
    happened and why, not on every call. ``why`` says what the warning must tell its reader."""

    needles: tuple[str, ...] = ()
    why: str = ""


class ProtocolError(Exception):
    """The call did not give what the protocol needs (no gradient, a non-differentiable output)."""


def order_of(protocol, mutates: tuple[int, ...] = ()) -> dict:
    """``protocol`` and ``mutates`` as JSON-able data for the grader's child."""
    order: dict[str, Any] = {"mutates": list(mutates)}
    if isinstance(protocol, Backward):
        order.update(kind="backward", wrt=list(protocol.wrt), upstream=protocol.upstream)
    elif isinstance(protocol, Steps):
        order.update(kind="steps", per_step=protocol.per_step, counter=protocol.counter)
    elif isinstance(protocol, Calls):
        order["kind"] = "calls"
    elif isinstance(protocol, Warns):
        order.update(kind="warns", needles=list(protocol.needles), why=protocol.why)
    elif isinstance(protocol, Raises):
        order.update(kind="raises", errors=list(protocol.errors), needles=list(protocol.needles), why=protocol.why)
    else:
        order["kind"] = "call"
    return order


def from_order(order: dict | None):
    """(protocol, mutates) from ``order_of``'s data; anything malformed means a plain call."""
    order = order if isinstance(order, dict) else {}
    mutates = tuple(int(i) for i in order.get("mutates") or () if isinstance(i, int))
    kind = order.get("kind")
    if kind == "backward":
        return Backward(tuple(int(i) for i in order.get("wrt") or ()), int(order.get("upstream") or 1)), mutates
    if kind == "steps":
        counter = order.get("counter")
        return Steps(int(order.get("per_step") or 0), counter if isinstance(counter, str) else None), mutates
    if kind == "calls":
        return Calls(), mutates
    if kind == "warns":
        return Warns(tuple(str(t) for t in order.get("needles") or ()), str(order.get("why") or "")), mutates
    if kind == "raises":
        texts = [str(t) for t in order.get("errors") or ()], [str(t) for t in order.get("needles") or ()]
        return Raises(tuple(texts[0]), tuple(texts[1]), str(order.get("why") or "")), mutates
    return None, mutates


def calling(protocol, fn: Callable, api: str = "the function") -> Callable:
    """A function of the case's (args, kwargs) that runs ``fn`` as ``protocol`` says and returns
    what is compared before the mutated arguments (a tuple, or None for nothing)."""
    if isinstance(protocol, Backward):
        return _backward(fn, protocol, api)
    if isinstance(protocol, Steps):
        return _steps(fn, protocol, every=True)
    if isinstance(protocol, Calls):
        return _calls(fn)
    if isinstance(protocol, Raises):
        return _refusing(fn, protocol, api)
    if isinstance(protocol, Warns):
        return _warning_once(fn, protocol, api)
    return fn


def timed(protocol, fn: Callable, api: str = "the function") -> Callable:
    """What one timed repetition calls: the whole protocol, except a ``Steps`` API, which is timed
    one step at a time (the first entry, as step 1)."""
    if isinstance(protocol, Steps):
        return _steps(fn, protocol, every=False)
    return calling(protocol, fn, api)


def _steps(fn: Callable, protocol: Steps, every: bool) -> Callable:
    def call(*args, **kwargs):
        entries = args[protocol.per_step]
        result = None
        for step, entry in enumerate(entries if every else list(entries)[:1]):
            step_args = list(args)
            step_args[protocol.per_step] = entry
            step_kwargs = dict(kwargs)
            if protocol.counter:
                step_kwargs[protocol.counter] = step + 1
            result = fn(*step_args, **step_kwargs)
        return result

    return call


def _calls(fn: Callable) -> Callable:
    def call(*calls, **_):
        outputs: tuple = ()
        for call_args, call_kwargs in calls:
            result = fn(*call_args, **call_kwargs)
            outputs += tuple(result) if isinstance(result, (tuple, list)) else (result,)
        return outputs

    return call


def _warning_once(fn: Callable, protocol: Warns, api: str) -> Callable:
    calls = _calls(fn)

    def call(*entries, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outputs = calls(*entries, **kwargs)
        said = [" ".join(str(w.message).split()) for w in caught]
        # Only warnings that say what is asked count: other code (PyTorch's own) may warn too.
        matching = [m for m in said if all(re.search(n, m, re.IGNORECASE) for n in protocol.needles)]
        if not matching:
            heard = f" (it gave {len(said)} other warning(s): {said[0][:200]!r})" if said else ""
            raise ProtocolError(
                f"{len(entries)} calls of {api}() gave no warning that says why{heard}: the "
                f"warning should {protocol.why}."
            )
        if len(matching) > 1:
            raise ProtocolError(
                f"{len(entries)} calls of {api}() gave {len(matching)} warnings "
                f"({matching[0][:200]!r}): warn the first time only: a warning on every call of "
                "a training loop buries everything else."
            )
        return outputs

    return call


def _refusing(fn: Callable, protocol: Raises, api: str) -> Callable:
    expected = " or ".join(protocol.errors)

    def call(*args, **kwargs):
        try:
            fn(*args, **kwargs)
        except Exception as error:
            raised = type(error).__name__
            message = " ".join(str(error).split())
            shown = message if len(message) <= 300 else message[:297] + "..."
            if not {k.__name__ for k in type(error).__mro__} & set(protocol.errors):
                raise ProtocolError(
                    f"{api}() raised {raised} ({shown!r}) for these inputs, but should raise "
                    f"{expected}: it should {protocol.why}."
                ) from None
            missing = [n for n in protocol.needles if not re.search(n, message, re.IGNORECASE)]
            if missing:
                raise ProtocolError(
                    f"{api}() rightly raised {raised}, but its message {shown!r} does not say "
                    f"enough: it should {protocol.why}."
                ) from None
            return ()
        article = "an" if expected[:1] in "AEIOU" else "a"
        raise ProtocolError(
            f"{api}() accepted these inputs, but should refuse them with {article} {expected}: it "
            f"should {protocol.why}. Check the inputs before launching a kernel."
        )

    return call


def _backward(fn: Callable, protocol: Backward, api: str) -> Callable:
    def call(*args, **kwargs):
        split = len(args) - protocol.upstream
        forward_args, upstream = list(args[:split]), args[split:]
        leaves = []
        for position in protocol.wrt:
            leaf = forward_args[position].detach().requires_grad_(True)
            forward_args[position] = leaf
            leaves.append(leaf)
        with torch.enable_grad():
            result = fn(*forward_args, **kwargs)
            outputs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            pairs = [
                (out, grad)
                for out, grad in zip(outputs, upstream)
                if isinstance(out, torch.Tensor) and out.requires_grad
            ]
            if not pairs:
                raise ProtocolError(
                    f"{api}() returned no output that requires grad, so no gradient can flow back: "
                    "return the result of your torch.autograd.Function's apply(), not of the kernel."
                )
            grads = torch.autograd.grad(
                [out for out, _ in pairs], leaves, [grad for _, grad in pairs], allow_unused=True
            )
        for position, grad in zip(protocol.wrt, grads):
            if grad is None:
                raise ProtocolError(
                    f"{api}()'s backward gave no gradient for its input #{position + 1}: return one "
                    "gradient per input of forward() from backward() (None only for non-tensors)."
                )
        detached = tuple(out.detach() if isinstance(out, torch.Tensor) else out for out in outputs)
        return detached + tuple(grads)

    return call


def mutated(args: tuple, mutates: tuple[int, ...]) -> list[torch.Tensor]:
    """The tensors of the arguments at ``mutates`` (every tensor of a list argument), in order."""
    found = []
    for position in mutates:
        if position < len(args):
            value = args[position]
            found.extend(
                t for t in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(t, torch.Tensor)
            )
    return found


def mutated_names(arg_names: list[str], args: tuple, mutates: tuple[int, ...]) -> list[str]:
    """Names for ``mutated``'s tensors: the argument's name, indexed for a list argument."""
    names = []
    for position in mutates:
        if position >= len(args):
            continue
        name = arg_names[position] if position < len(arg_names) else f"input #{position + 1}"
        value = args[position]
        if isinstance(value, (list, tuple)):
            names.extend(f"{name}[{k}]" for k, t in enumerate(value) if isinstance(t, torch.Tensor))
        elif isinstance(value, torch.Tensor):
            names.append(name)
    return names


def frozen_inputs(args: tuple, kwargs: dict, mutates: tuple[int, ...]) -> list[torch.Tensor]:
    """The input tensors a call must leave as they were: all but the ``mutates`` arguments'."""
    kept = [value for position, value in enumerate(args) if position not in mutates]
    return tensors_in([kept, kwargs])


def as_passed(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call's arguments as its caller holds them, taken before the call: every list, tuple and
    dict copied (a slot the call reassigns still holds the caller's tensor here) and every tensor
    an alias of the caller's (same memory and layout: a tensor the call points at other memory
    still shows the caller's memory here). What the call wrote into the caller's tensors shows
    through the aliases."""

    def copy(obj):
        if isinstance(obj, torch.Tensor):
            return obj.detach()
        if isinstance(obj, (tuple, list)):
            return type(obj)(copy(item) for item in obj)
        if isinstance(obj, dict):
            return {key: copy(value) for key, value in obj.items()}
        return obj

    return copy(tuple(args)), copy(dict(kwargs))


def same_place(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are one view of one memory: same storage, offset, shape, strides, dtype."""
    return (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and a.dtype == b.dtype
        and a.storage_offset() == b.storage_offset()
        and a.shape == b.shape
        and a.stride() == b.stride()
    )


def tensor_names(arg_names: list[str], args: tuple, kwargs: dict) -> list[str]:
    """A name for each of ``tensors_in((args, kwargs))``, in its order: the parameter's name,
    indexed inside a list (``params[2]``), keyed inside a dict."""
    names: list[str] = []

    def visit(name: str, obj) -> None:
        if isinstance(obj, torch.Tensor):
            names.append(name)
        elif isinstance(obj, (tuple, list)):
            for index, item in enumerate(obj):
                visit(f"{name}[{index}]", item)
        elif isinstance(obj, dict):
            for key, value in obj.items():
                visit(f"{name}[{key!r}]", value)

    for position, value in enumerate(args):
        visit(arg_names[position] if position < len(arg_names) else f"input #{position + 1}", value)
    for key, value in kwargs.items():
        visit(str(key), value)
    return names


def moved_input(
    passed: list[torch.Tensor], after: list[torch.Tensor], api: str, names: list[str] | None = None
) -> str | None:
    """The learner-facing message if a call left its arguments holding other tensors than the
    caller passed (``passed``, from ``as_passed``; ``after``: the arguments' tensors after the
    call): a reassigned list slot, a tensor pointed at other memory, a list grown or shrunk."""
    if len(passed) != len(after):
        return (
            f"{api}() added tensors to the lists it was given, or removed some: leave the lists as "
            "they are and update the tensors in them in place."
        )
    for position, (old, new) in enumerate(zip(passed, after)):
        if not isinstance(new, torch.Tensor) or (old.numel() and not same_place(old, new)):
            name = names[position] if names and position < len(names) else f"input tensor #{position + 1}"
            return (
                f"{api}() put another tensor in the place of {name}, but the caller keeps its own "
                f"{name}: update the tensors you were given in place (have the kernel store into "
                "them), and leave the caller's lists holding them (build a new list for other tensors)."
            )
    return None


def tensors_in(obj) -> list[torch.Tensor]:
    """Every tensor in a nest of tuples, lists and dicts, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in tensors_in(item)]
    return []


def autograd_reference(forward: Callable, wrt: tuple[int, ...], upstream: int = 1) -> Callable:
    """A ``Backward`` spec's reference from a plain PyTorch ``forward``: called with the case's
    float64 inputs (forward arguments, then the upstream gradients), it returns the forward
    outputs, then the gradient of each ``wrt`` input."""

    def reference(*args, **kwargs):
        return _backward(forward, Backward(tuple(wrt), upstream), "the reference")(*args, **kwargs)

    reference.__signature__ = _signature_of(forward)
    return reference


def _signature_of(fn: Callable):
    import inspect

    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None
