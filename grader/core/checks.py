"""Run one case of a module's API and judge the result.

The pieces are separate so that the grader can run ``call_api`` in a sandboxed child process and
``reference_outputs``/``compare`` in the parent; ``run_case`` strings them together in-process
for the learner's ``check`` and the test suite.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import torch

from grader.core import device, memcheck, protocols
from grader.core.cases import Case, Rand, Spec, refusal, spec_for
from grader.core.diagnosis import Outcome, across_cases, diagnose, input_names, matches, non_contiguous_inputs
from grader.core.evidence import ALLOWED_OPS, judge_evidence, shared_monitor
from grader.core.loading import LoadedKernel, todo_summary
from grader.core.markers import todos_behind
from grader.core.protocols import (
    autograd_reference,  # noqa: F401  (Backward specs' references)
    tensors_in,
)


class KernelCallError(Exception):
    """The API call raised, or broke a rule (mutated an input, returned an input)."""


@dataclass
class CaseResult:
    case: Case
    passed: bool
    message: str = ""


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values (NaN equal to NaN), wherever the two tensors live (compared
    where ``a`` is: on a GPU, without copying it to the CPU)."""
    a, b = a.detach(), b.detach().to(a.device)
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.nan_to_num(), b.nan_to_num())


def changed_input(before: list[torch.Tensor], after: list[torch.Tensor], api: str) -> str | None:
    """The learner-facing message if a call changed one of its inputs."""
    for position, (old, new) in enumerate(zip(before, after)):
        if not same_values(old, new):
            return (
                f"{api}() changed its input #{position + 1} (shape {tuple(new.shape)}). Write "
                "results to a new output tensor and leave the inputs as they are."
            )
    return None


def aliased_output(outputs: tuple, inputs: list[torch.Tensor], api: str) -> str | None:
    """The learner-facing message if a call returned (a view of) one of its inputs."""
    input_storages = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.numel() and out.untyped_storage().data_ptr() in input_storages:
            return (
                f"{api}() returned one of its inputs (or a view of it). Allocate a fresh "
                "output tensor and have the kernel write it."
            )
    return None


def _upcast(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(torch.float64) if obj.is_floating_point() else obj.detach().clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_upcast(item) for item in obj)
    if isinstance(obj, dict):
        return {key: _upcast(value) for key, value in obj.items()}
    return obj


def as_tuple(outputs) -> tuple:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def build_inputs(spec: Spec, case: Case, secret: int = 0, on: torch.device | None = None) -> tuple[tuple, dict]:
    spec = spec_for(case, spec)
    return spec.make_inputs(case, Rand(case.seed(secret), on or device.torch_device()))


def returned_values(result, mutates: tuple[int, ...]) -> tuple:
    """A call's result as a tuple; an in-place API that returns None returned nothing."""
    return () if result is None and mutates else as_tuple(result)


def with_mutated(spec: Spec, outputs: tuple, args: tuple) -> tuple:
    """What a case compares: the returned outputs, then the tensors the API updates in place."""
    return tuple(outputs) + tuple(protocols.mutated(args, spec.mutates))


def reference_outputs(spec: Spec, args: tuple, kwargs: dict) -> tuple[torch.Tensor, ...]:
    """The expected values, computed from float64 copies of the inputs (an in-place reference
    updates its copies, which are then read like the API's own arguments)."""
    copies, kwarg_copies = _upcast(args), _upcast(kwargs)
    with torch.no_grad():
        result = spec.reference(*copies, **kwarg_copies)
    return with_mutated(spec, returned_values(result, spec.mutates), copies)


def output_names(spec: Spec, count: int, inputs=None) -> list[str]:
    """A name for each of ``count`` compared values: the spec's output names, then the mutated
    arguments' (``exp_avg[2]``)."""
    names = list(spec.output_names)
    if spec.mutates and inputs is not None:
        extra = protocols.mutated_names(input_names(spec.reference), inputs[0], spec.mutates)
        names = names[: max(count - len(extra), 0)] + extra
    return names[:count] + [f"output #{i + 1}" for i in range(len(names), count)]


@contextmanager
def poisoned_memory():
    """Fill every tensor allocated with torch.empty* with NaN (floats) or the largest integer,
    so that output elements a kernel never writes cannot pass by luck."""
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_filling = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = was_filling


def short_error(error: BaseException, max_lines: int = 8) -> str:
    """The useful head of an exception message. A Triton compile error (on a GPU) puts its cause
    after the kernel's source: its message comes first, then the line at fault."""
    if type(error).__name__ == "CompilationError":
        from grader.core.gpu_compile import compiler_refusal

        refusal = compiler_refusal(error)
        where = f" (line {refusal.line_in_kernel} of the kernel, counted from its def" if refusal.line_in_kernel else ""
        if where:
            where += f": `{refusal.source_line}`)" if refusal.source_line else ")"
        meaning = f". That usually means {refusal.meaning}" if refusal.meaning else ""
        return f"{refusal.message}{where}{meaning}"
    text = str(error).strip() or repr(error)
    lines = [line for line in text.splitlines() if line.strip()]
    shown = "\n".join(lines[:max_lines])
    return shown + ("\n..." if len(lines) > max_lines else "")


def numpy_too_new(error: BaseException) -> str:
    """A hint when the error is the one NumPy 2.4 and later raise inside Triton's interpreter
    (which turns 1-element arrays into Python numbers), else ""."""
    if device.is_cuda() or "only 0-dimensional arrays can be converted to Python scalars" not in str(error):
        return ""
    import numpy

    version = tuple(int(part) for part in re.findall(r"\d+", numpy.__version__)[:2])
    if version < (2, 4):
        return ""
    return (
        f"\nNumPy {numpy.__version__} is installed, and this error usually means Triton's interpreter is "
        "older than it: the course pins numpy<2.4 (pip install 'numpy<2.4', or pip install -e . again)."
    )


def call_api(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    api: str = "the function",
    mutates: tuple[int, ...] = (),
    arg_names: list[str] | None = None,
) -> tuple:
    """Call ``fn`` (the API, or its protocol from ``grader.core.protocols.calling``, watched as a
    whole) with poisoned allocations, and return its outputs after a device sync (not the
    arguments it updates in place).

    Raises KernelCallError if the call raises, changes an input it must not (all but those at
    ``mutates``), leaves other tensors in its arguments than the caller's (a list slot reassigned:
    the caller's tensor was not updated), or returns an input tensor. ``arg_names`` name the
    arguments in that message.
    """
    passed = protocols.tensors_in(protocols.as_passed(args, kwargs))
    inputs = protocols.frozen_inputs(args, kwargs, mutates)
    snapshots = [t.detach().clone() for t in inputs]
    checker = (
        memcheck.MemoryChecker(known=_named_tensors(args, kwargs))
        if memcheck.enabled() and not device.is_cuda()
        else nullcontext()
    )
    try:
        with poisoned_memory(), checker:
            outputs = returned_values(fn(*args, **kwargs), mutates)
            device.synchronize()
    except protocols.ProtocolError as error:
        raise KernelCallError(str(error)) from None
    except memcheck.MemoryFault as fault:
        raise KernelCallError(f"The memory checker stopped {api}(): {fault}") from None
    except Exception as error:  # the learner's code can raise anything
        message = f"{api}() raised {type(error).__name__}: {short_error(error)}"
        if "ellipsis" in str(error):
            message += "\nA `...` placeholder is still in kernel.py: replace it with your code."
        message += numpy_too_new(error)
        raise KernelCallError(message) from None
    problem = (
        changed_input(snapshots, inputs, api)
        or protocols.moved_input(
            passed, tensors_in((args, kwargs)), api, protocols.tensor_names(list(arg_names or ()), args, kwargs)
        )
        or aliased_output(outputs, passed, api)
    )
    if not problem and isinstance(checker, memcheck.MemoryChecker):
        problem = memory_problem(checker, api)
    if problem:
        raise KernelCallError(problem)
    return outputs


def _named_tensors(args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
    """The call's tensors by where they were passed: "argument 2", "argument 1[3]", "weight"."""
    named: dict[str, torch.Tensor] = {}

    def visit(name: str, value) -> None:
        if isinstance(value, torch.Tensor):
            named[name] = value
        elif isinstance(value, (list, tuple)):
            for j, item in enumerate(value):
                visit(f"{name}[{j}]", item)

    for name, value in [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items()):
        visit(name, value)
    return named


def memory_problem(checker: memcheck.MemoryChecker, api: str = "", what: str = "") -> str | None:
    """What the memory checker found in one call of ``api`` (or while running ``what``): races and
    uninitialised reads. (Output elements nothing wrote are left to the comparison, whose
    diagnosis knows their patterns.)"""
    found = checker.problems
    if not found:
        return None
    more = len(found) - 1
    extra = f" ({more} more finding{'s' if more > 1 else ''} of the memory checker after this one.)" if more else ""
    return f"The memory checker found a problem in {what or api + '()'}: {found[0]}{extra}"


def largest_magnitude(inputs) -> float:
    """The largest finite magnitude among the tensors in ``inputs`` (0 when there are none)."""
    sizes = [
        float(t.detach().abs().nan_to_num(0.0, 0.0, 0.0).max())
        for t in tensors_in(inputs)
        if t.numel() and (t.is_floating_point() or t.is_complex())
    ]
    return max(sizes, default=0.0)


def expected_dtypes(spec: Spec, case: Case, references: tuple, inputs=None) -> list[tuple[torch.dtype, str]]:
    """The dtype each compared value must have (the references are float64, so they cannot say),
    with the end of the sentence that explains it: the one ``Spec.output_dtypes`` declares; for a
    gradient, its input's; for an argument updated in place, the caller's tensor's; else a floating
    result has the case's dtype (the inputs') and any other the reference's (a bool mask). The
    comparison's tolerance is that of this dtype, never of the one a submission chose."""
    spec = spec_for(case, spec)
    count = len(references)
    names = output_names(spec, count, inputs)
    args = inputs[0] if inputs is not None else None
    known: dict[int, tuple[torch.dtype, str]] = {}
    if args is not None:
        updated = protocols.mutated(args, spec.mutates)
        for k, tensor in enumerate(updated):
            known[count - len(updated) + k] = (tensor.dtype, " (the dtype of the tensor it updates)")
        if isinstance(spec.protocol, protocols.Backward):
            forward_args = args[: len(args) - spec.protocol.upstream]
            arg_names = input_names(spec.reference)
            first = count - len(updated) - len(spec.protocol.wrt)
            for k, position in enumerate(spec.protocol.wrt):
                if position < len(forward_args) and isinstance(forward_args[position], torch.Tensor):
                    input_name = arg_names[position] if position < len(arg_names) else f"input #{position + 1}"
                    known[first + k] = (
                        forward_args[position].dtype,
                        f", the dtype of {input_name}: a gradient has the dtype of its input",
                    )
    found = []
    for index, (name, ref) in enumerate(zip(names, references)):
        declared = spec.output_dtypes.get(name.split("[")[0])
        if declared is not None:
            dtype = declared(case) if callable(declared) else declared
            found.append((dtype, f" (as the function documents): allocate {name} with dtype={dtype}"))
        elif index in known:
            found.append(known[index])
        elif isinstance(ref, torch.Tensor) and not (ref.is_floating_point() or ref.is_complex()):
            found.append((ref.dtype, ""))
        else:
            found.append((case.dtype, " (the input's dtype): allocate the output with dtype=x.dtype"))
    return found


def compare(
    spec: Spec, case: Case, outputs: tuple, references: tuple, inputs=None, detail: bool = True, room=None
) -> list[str]:
    """Problems found in ``outputs`` (empty when the case passes). ``inputs`` (the call's args and
    kwargs) let the diagnosis tell overflow on large inputs from unwritten elements. Without
    ``detail`` (a hidden case, whose learner reads no more than "failed") a wrong output is named
    but not diagnosed: the diagnosis of a large output is most of a grading's judging. ``room``:
    where the diagnosis may run (``diagnosis.diagnose``)."""
    spec = spec_for(case, spec)
    names = output_names(spec, len(references), inputs)
    if len(outputs) != len(references):
        in_place = len(protocols.mutated(inputs[0], spec.mutates)) if inputs is not None else 0
        return [
            f"{spec.api}() returned {len(outputs) - in_place} value(s); it should return "
            f"{len(references) - in_place}: {', '.join(names[: len(references) - in_place])}."
        ]
    problems, right, wrong_values = [], [], []
    largest = largest_magnitude(inputs) if inputs is not None and detail else 0.0
    inf_seen = detail and any(
        isinstance(out, torch.Tensor)
        and out.is_floating_point()
        and out.shape == ref.shape
        and bool((torch.isinf(out.detach().to(ref.device)) & torch.isfinite(ref)).any())
        for out, ref in zip(outputs, references)
    )
    # The outputs that are inputs updated in place (an optimizer's parameters) come last: they
    # held numbers before the call, so a NaN there was computed, never left unwritten.
    in_place = len(protocols.mutated(inputs[0], spec.mutates)) if inputs is not None and spec.mutates else 0
    for index, (name, out, ref, (expected_dtype, why)) in enumerate(
        zip(names, outputs, references, expected_dtypes(spec, case, references, inputs))
    ):
        if not isinstance(out, torch.Tensor):
            problems.append(
                f"{name} should be a torch.Tensor, got {type(out).__name__}."
                + (" A `...` placeholder is still in kernel.py: replace it with your code." if out is Ellipsis else "")
            )
            continue
        if out.dtype != expected_dtype:
            problems.append(f"{name} has dtype {out.dtype}, expected {expected_dtype}{why}.")
            continue
        if tuple(out.shape) != tuple(ref.shape):
            problems.append(
                f"{name} has shape {tuple(out.shape)} but should have shape {tuple(ref.shape)}: "
                "allocate it with the shape the function documents."
            )
            continue
        if spec.judge is not None:
            right.append(name)
            continue
        atol, rtol = spec.tolerance(expected_dtype, case, name)
        if not detail:
            problem = None if matches(out, ref, atol, rtol) else f"{name} is wrong."
        else:
            problem = diagnose(
                out,
                ref,
                atol,
                rtol,
                name=name,
                largest_input=largest,
                inf_elsewhere=inf_seen,
                updated_in_place=index >= len(outputs) - in_place,
                room=room,
            )
        if problem:
            problems.append(problem)
            wrong_values.append(name)
        else:
            right.append(name)
    named = suspected(spec, case, dict(zip(names, outputs)), wrong_values, inputs) if detail else None
    if named:
        problems.insert(0, named)
    if wrong_values and right:  # wrong values beside right ones (not a dtype or a shape): what differs
        only = "; ".join(spec.output_notes[n] for n in wrong_values if n in spec.output_notes)
        problems.append(
            f"{' and '.join(right)} {'is' if len(right) == 1 else 'are'} right, so look at "
            f"what only {' and '.join(wrong_values)} depend{'s' if len(wrong_values) == 1 else ''} on"
            + (f": {only}." if only else ".")
        )
    if not problems and spec.judge is not None:
        args, kwargs = inputs if inputs is not None else ((), {})
        # A judge reads outputs against inputs: both on the references' device (the grader reads
        # a child's outputs from its file onto the CPU, while the inputs stay on the GPU).
        on = next((r.device for r in references if isinstance(r, torch.Tensor)), None)
        outputs = tuple(o.to(on) if on is not None and isinstance(o, torch.Tensor) else o for o in outputs)
        problems = list(spec.judge(outputs, references, args, kwargs, case))
    if problems and case.hint:
        problems.append(f"What this case checks: {case.hint}")
    return problems


def suspected(spec: Spec, case: Case, outputs: dict, wrong: list[str], inputs) -> str | None:
    """A line naming the first of ``spec.suspects`` whose outputs every wrong one matches, where
    the inputs are known; None otherwise."""
    if not spec.suspects or not wrong or inputs is None:
        return None
    args, kwargs = inputs
    for suspect in spec.suspects:
        try:
            theirs = dict(zip(outputs, reference_outputs(replace(spec, reference=suspect.compute), args, kwargs)))
        except (RuntimeError, ValueError, IndexError):  # not computable for these inputs: no evidence
            continue
        if all(_close(spec, case, name, outputs[name], theirs.get(name)) for name in wrong):
            verb = "matches" if len(wrong) == 1 else "match"
            return f"{' and '.join(wrong)} {verb} what {suspect.what} gives: {suspect.advice}"
    return None


def _close(spec: Spec, case: Case, name: str, out, expected) -> bool:
    if not isinstance(out, torch.Tensor) or not isinstance(expected, torch.Tensor) or out.shape != expected.shape:
        return False
    atol, rtol = spec.tolerance(out.dtype, case, name)
    got = out.detach().to(device=expected.device, dtype=torch.float64)
    return bool(torch.allclose(got, expected.to(torch.float64), atol=atol, rtol=rtol, equal_nan=True))


def run_case(fn: Callable, spec: Spec, case: Case, secret: int = 0) -> CaseResult:
    """Run one case in this process: the output is compared with the reference, and a call that
    went around the exercise (PyTorch compute, no Triton launch) fails with the reason."""
    spec = spec_for(case, spec)
    args, kwargs = build_inputs(spec, case, secret)
    references = reference_outputs(spec, args, kwargs)
    monitor = shared_monitor()
    # Where moving the data is the exercise, the stores of the call are recorded under the
    # interpreter, as the grader's child does, so that an output PyTorch moved into place fails here too.
    guard = memcheck.BoundsGuard().install() if spec.kernel_writes_outputs and not device.is_cuda() else None
    try:
        called = monitor.watching(protocols.calling(spec.protocol, fn, spec.api), ALLOWED_OPS | spec.allowed_ops)
        outputs = call_api(
            called if guard is None else guard.call(called, args, kwargs),
            args,
            kwargs,
            spec.api,
            spec.mutates,
            input_names(spec.reference),
        )
        report = monitor.report()
        if guard is not None:
            report["unwritten_by_kernel"] = guard.unwritten(outputs)
    except KernelCallError as error:  # the call raised or crashed: what the case checks may say why
        return CaseResult(case, False, str(error) + (f"\nWhat this case checks: {case.hint}" if case.hint else ""))
    finally:
        if guard is not None:
            guard.uninstall()
    outputs = with_mutated(spec, outputs, args)
    problems = compare(spec, case, outputs, references, (args, kwargs))
    if not problems:
        found = judge_evidence(
            spec.api, report, any(isinstance(o, torch.Tensor) and o.numel() for o in outputs), spec=spec
        )
        problems = [found[1]] if found else []
    return CaseResult(case, not problems, "\n".join(problems))


def check_case(kernel: LoadedKernel, spec: Spec, case: Case) -> None:
    """Assert that the loaded kernel passes ``case``; the message is the learner's diagnosis."""
    spec = spec_for(case, spec)
    result = run_case(kernel.api(spec.api), spec, case)
    if not result.passed:
        behind = todos_behind(kernel.path.read_text(), kernel.todos, spec.api) if kernel.todos else []
        hint = todo_summary(behind, track=kernel.module.track)
        raise AssertionError(f"{case.name}\n{result.message}" + (f"\n{hint}" if hint else ""))


@contextmanager
def explained(kernel: LoadedKernel, what: str, memory_checked: bool = True):
    """For tests that call a kernel outside a Case (gradcheck, opcheck, properties): turn any error
    inside the block into a failure that says what was running, and names the TODOs still open
    in kernel.py. On a CPU the block runs under the memory checker unless ``memory_checked`` is
    False (torch.compile, which traces nothing while the checker's dispatch mode is active)."""
    todos = "".join(f"\n  - {todo}" for todo in kernel.todos[:3])
    todos = f"\nTODOs still open in kernel.py:{todos}" if todos else ""
    # Under the memory checker, as every case is: a bad store is named with its line instead of
    # corrupting memory that a later test (or Python itself) trips over.
    checker = memcheck.MemoryChecker() if memory_checked and memcheck.enabled() and not device.is_cuda() else None
    try:
        with checker or nullcontext():
            yield
    except memcheck.MemoryFault as fault:
        raise AssertionError(f"The memory checker stopped {what}: {fault}{todos}") from None
    except AssertionError as error:
        raise AssertionError(f"{error}{todos}") from None
    except Exception as error:  # the learner's code can raise anything
        text = str(error).strip().splitlines()
        raise AssertionError(
            f"{what} raised {type(error).__name__}: {text[0] if text else ''}{numpy_too_new(error)}{todos}"
        ) from None
    problem = memory_problem(checker, what=what) if checker is not None else None
    if problem:
        raise AssertionError(problem + todos)


def expect_error(fn: Callable, *args: Any, errors=(ValueError, TypeError), match: str = "", **kwargs: Any) -> None:
    """Assert that ``fn(*args, **kwargs)`` rejects its input with a clear Python error."""
    try:
        fn(*args, **kwargs)
    except errors as error:
        if match and not re.search(match, str(error), re.IGNORECASE):
            raise AssertionError(f"The error message {str(error)!r} should mention {match!r}.") from None
        return
    except Exception as error:
        names = " or ".join(e.__name__ for e in errors)
        raise AssertionError(
            f"Expected a {names} explaining the bad input, got {type(error).__name__}: {short_error(error, 3)}"
        ) from None
    names = " or ".join(e.__name__ for e in errors)
    raise AssertionError(
        f"Expected a {names} for this bad input, but the call succeeded. "
        "Validate the inputs before launching the kernel."
    )


def matmul_refusals(spec: Spec) -> list[Case]:
    """The refusals every matmul of the course is graded on: operands whose inner dimensions
    differ, and operands of two dtypes, each refused with a message that names the problem."""
    return [
        refusal(
            spec,
            lambda rand: ((rand.randn(4, 5), rand.randn(6, 3)), {}),
            (ValueError, TypeError),
            r"inner dimension",
            why="say that the inner dimensions differ",
            label="refuses mismatched inner dims",
        ),
        refusal(
            spec,
            lambda rand: ((rand.randn(4, 5), rand.randn(5, 3, dtype=torch.float16)), {}),
            (ValueError, TypeError),
            r"dtype",
            why="say that the dtypes differ",
            label="refuses mixed dtypes",
        ),
    ]


def expect_matmul_input_errors(fn: Callable) -> None:
    """Assert that a matmul ``fn(a, b)`` rejects operands whose inner dimensions differ and
    operands of two dtypes, each with a message that names the problem."""
    where = device.torch_device()
    expect_error(fn, torch.ones(4, 5, device=where), torch.ones(6, 3, device=where), match="inner dimension")
    expect_error(fn, torch.ones(4, 5, device=where), torch.ones(5, 3, device=where, dtype=torch.float16), match="dtype")


def case_outcome(spec: Spec, case: Case, passed: bool) -> Outcome:
    """``case`` and its verdict as ``across_cases`` reads them (builds the inputs again: cheap)."""
    spec = spec_for(case, spec)
    args, _ = build_inputs(spec, case)
    return Outcome(case, passed, non_contiguous_inputs(args, input_names(spec.reference)), spec.row_wise)


def across(spec: Spec, verdicts: list[tuple[Case, bool]]) -> str | None:
    """What the failing cases of a run have in common that the passing ones lack, if anything."""
    return across_cases([case_outcome(spec, case, passed) for case, passed in verdicts])
