"""The checks catch the ways a kernel can look right and be wrong."""

import pytest
import torch
import triton
import triton.language as tl

from grader.core import device
from grader.core.cases import Case, Spec
from grader.core.checks import run_case

SPEC = Spec(
    api="double", make_inputs=lambda case, rand: ((rand.randn(case.params["n"]),), {}), reference=lambda x: 2 * x
)
CASE = Case({"n": 100})


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def double(x):
    out = torch.empty_like(x)
    _double_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


def test_correct_kernel_passes():
    assert run_case(double, SPEC, CASE).passed


def test_computing_with_pytorch_fails_with_the_reason():
    result = run_case(lambda x: 2 * x, SPEC, CASE)
    assert not result.passed and "computed with PyTorch (aten.mul)" in result.message


def test_a_pytorch_result_beside_a_launch_still_fails():
    def launches_then_cheats(x):
        double(x)
        return x * 2

    result = run_case(launches_then_cheats, SPEC, CASE)
    assert not result.passed and "aten.mul" in result.message


def test_a_result_without_any_launch_fails_with_the_reason():
    spec = Spec(api="same", make_inputs=SPEC.make_inputs, reference=lambda x: x)
    result = run_case(lambda x: x.clone(), spec, CASE)
    assert not result.passed and "no Triton kernel ran" in result.message


def test_reading_values_into_python_counts_as_computing():
    def through_python(x):
        out = torch.empty_like(x)
        double(x)
        for i in range(x.numel()):
            out[i] = 2 * float(x[i])
        return out

    result = run_case(through_python, SPEC, CASE)
    assert not result.passed and "_local_scalar_dense" in result.message


def test_unwritten_output_is_caught_by_poisoning():
    def half_written(x):
        out = torch.empty_like(x)
        out[:50] = 2 * x[:50]
        return out

    result = run_case(half_written, SPEC, CASE)
    assert not result.passed and "never written" in result.message


def test_input_mutation_is_caught():
    def in_place(x):
        x.mul_(2)
        return x.clone()

    result = run_case(in_place, SPEC, CASE)
    assert not result.passed and "changed its input" in result.message


def test_returning_an_input_is_caught():
    spec = Spec(api="same", make_inputs=SPEC.make_inputs, reference=lambda x: x)
    result = run_case(lambda x: x, spec, CASE)
    assert not result.passed and "returned one of its inputs" in result.message


def test_exceptions_become_messages():
    def broken(x):
        raise RuntimeError("boom")

    result = run_case(broken, SPEC, CASE)
    assert not result.passed and "double() raised RuntimeError: boom" in result.message


def test_numpy_newer_than_the_interpreter_is_named_only_where_it_is_the_cause(monkeypatch):
    import numpy

    def interpreted(x):
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")

    monkeypatch.setattr("grader.core.device.is_cuda", lambda: False)
    monkeypatch.setattr(numpy, "__version__", "2.5.2")
    assert "the course pins numpy<2.4" in run_case(interpreted, SPEC, CASE).message
    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    assert "numpy<2.4" not in run_case(interpreted, SPEC, CASE).message
    monkeypatch.setattr(numpy, "__version__", "2.5.2")
    assert "numpy<2.4" not in run_case(lambda x: 1 / 0, SPEC, CASE).message
    # the same hint where a test calls a kernel outside a case (gradcheck, properties)
    from grader.core.checks import explained
    from grader.core.loading import LoadedKernel

    learner = LoadedKernel(module=None, path=None, namespace=None)
    with pytest.raises(AssertionError, match="the course pins numpy<2.4"):
        with explained(learner, "gradcheck"):
            interpreted(None)


def test_wrong_dtype_and_count_of_outputs():
    assert "dtype torch.float64" in run_case(lambda x: 2 * x.double(), SPEC, CASE).message
    assert "returned 2 value(s)" in run_case(lambda x: (2 * x, x.clone()), SPEC, CASE).message


def test_a_returned_placeholder_is_named():
    def stub(x):
        double(x)
        return ...

    message = run_case(stub, SPEC, CASE).message
    assert "should be a torch.Tensor, got ellipsis. A `...` placeholder is still in kernel.py" in message


def test_inputs_are_reproducible_and_secret_dependent():
    from grader.core.checks import build_inputs

    (a,), _ = build_inputs(SPEC, CASE)
    (b,), _ = build_inputs(SPEC, CASE)
    (c,), _ = build_inputs(SPEC, CASE, secret=1234)
    assert torch.equal(a, b) and not torch.equal(a, c)


# --- reading a CUDA kernel trace (grader.core.evidence) -----------------------------------------------

ATEN_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
)
ATEN_FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"


def test_a_trace_of_own_kernels_and_data_movement_is_accepted():
    from grader.core.evidence import judge_evidence

    report = {"launches": 1, "kernels": ["add_kernel", ATEN_FILL, "Memcpy DtoD (Device -> Device)"]}
    assert judge_evidence("add", report, True, {"add_kernel"}) is None


def test_a_trace_with_an_aten_kernel_means_pytorch_computed():
    from grader.core.evidence import judge_evidence

    # the in-process log says nothing (it could have been switched off); the trace still shows it
    report = {"launches": 1, "ops": {}, "kernels": ["add_kernel", ATEN_ADD]}
    kind, message = judge_evidence("add", report, True, {"add_kernel"})
    assert kind == "torch" and "not your Triton kernels" in message and "CUDAFunctor_add" in message


def test_a_trace_without_own_kernels_means_no_launch_whatever_the_counter_says():
    from grader.core.evidence import judge_evidence

    report = {"launches": 5, "kernels": [ATEN_FILL]}  # a forged launch count
    assert judge_evidence("add", report, True, {"add_kernel"})[0] == "no_launch"


def test_own_kernel_names_come_from_the_source():
    from grader.core.evidence import triton_kernel_names

    source = (
        "import triton\nfrom triton import jit\n@triton.jit\ndef a(x): pass\n@jit\ndef b(x): pass\n"
        "@triton.autotune(configs=[], key=[])\n@triton.jit(do_not_specialize=[0])\ndef c(x): pass\n"
        "def helper(): pass\n"
    )
    assert triton_kernel_names(source) == {"a", "b", "c"}


@triton.jit
def _negate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, -tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def test_a_case_of_another_function_is_checked_against_that_functions_spec():
    from types import SimpleNamespace

    from grader.core.cases import spec_for, specs_of
    from grader.core.checks import check_case

    negate = Spec(
        api="negate", make_inputs=lambda case, rand: ((rand.randn(case.params["n"]),), {}), reference=lambda x: -x
    )
    other = Case({"n": 10}, spec=negate)
    assert spec_for(other, SPEC) is negate and spec_for(CASE, SPEC) is SPEC
    assert specs_of(SPEC, [CASE, other, Case({"n": 3}, spec=negate)]) == [SPEC, negate]
    assert other.name.startswith("negate: ") and not CASE.name.startswith("double: ")

    def negate_with_triton(x):
        out = torch.empty_like(x)
        _negate_kernel[(1,)](x, out, x.numel(), BLOCK=16)
        return out

    kernel = SimpleNamespace(api={"double": double, "negate": negate_with_triton}.get, todos=[])
    check_case(kernel, SPEC, CASE)
    check_case(kernel, SPEC, other)  # negate() is called and compared with -x, not 2 * x
    assert not run_case(double, SPEC, other).passed


@pytest.mark.cuda
def test_a_module_judge_sees_outputs_on_the_inputs_device():
    """The grader reads a child's outputs from its file onto the CPU while the inputs stay on the
    GPU; a module's own judge (dropout's statistics) compares the two, so it gets both on one device."""
    from grader.core.checks import compare, reference_outputs

    devices = []

    def judge(outputs, references, args, kwargs, case):
        devices.append({t.device.type for t in (*outputs, *references, *args)})
        return [] if torch.equal(outputs[0], args[0] * 2) else ["wrong"]

    spec = Spec(api="double", make_inputs=None, reference=lambda x: x * 2, judge=judge)
    x = torch.randn(64, device="cuda")
    references = reference_outputs(spec, (x,), {})
    assert compare(spec, Case({}, torch.float32), ((x * 2).cpu(),), references, ((x,), {})) == []
    assert devices == [{"cuda"}]


@pytest.mark.skipif(device.is_cuda(), reason="on a GPU the kernel trace names the copy kernel instead")
def test_make_check_fails_a_transpose_that_pytorch_moved(tmp_path):
    """`make check` judges as the grader does: where moving the data is the exercise, an output
    that no Triton store wrote fails, here too."""
    from grader.authoring import example_submissions
    from grader.core import cases
    from grader.core.catalog import find_module
    from grader.core.checks import run_case
    from grader.core.loading import load_kernel

    module = find_module("optimization/01-tiling")
    folder = tmp_path / module.track / module.slug
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text(
        example_submissions.kernel_source(
            example_submissions.HANDWRITTEN / "transpose-by-view" / module.track / module.slug
        )
    )
    kernel = load_kernel(module, tmp_path)
    spec, public = cases.public(module)
    case = next(c for c in public if cases.spec_for(c, spec).api == "transpose")
    result = run_case(kernel.api("transpose"), cases.spec_for(case, spec), case)
    assert not result.passed and "no Triton kernel of yours stored" in result.message
    reference = load_kernel(module, "solutions")
    assert run_case(reference.api("transpose"), cases.spec_for(case, spec), case).passed


class CompilationError(Exception):
    """Stands for Triton's: the course recognises a compile error by its class name and text."""


def test_a_compile_error_shows_its_cause_first_not_the_kernels_source():
    """On a GPU, Triton's compile errors print the kernel's source up to the line at fault before
    their message; the head of the text alone would show source and drop the cause."""
    from grader.core.checks import short_error

    source = [f"    line_{i} = {i}" for i in range(12)]
    text = "at 14:12:\ndef silu_kernel(x_ptr, y_ptr, n):\n" + "\n".join(source) + "\n    y = tl.exp(x)\n        ^\n"
    error = CompilationError(text + "ValueError('Expected dtype ['fp32', 'fp64'] but got fp16')")
    shown = short_error(error, 3)
    assert shown.startswith("Expected dtype ['fp32', 'fp64'] but got fp16 (line 14 of the kernel"), shown
    assert "`y = tl.exp(x)`" in shown and "line_0" not in shown
    assert short_error(ValueError("a\nb\nc\nd"), 2) == "a\nb\n..."
    carried = CompilationError(
        "at 3:8:\ndef k(x_ptr):\n    acc = tl.zeros((16,), dtype=tl.float16)\n    for i in range(4):\n        ^\n"
        "Loop-carried variable acc has initial type fp16 but is re-assigned to fp32 in loop!"
    )
    assert "That usually means a value updated in a loop must keep one dtype" in short_error(carried)


def test_a_compile_error_inside_a_called_jit_function_shows_the_callees_cause():
    """Triton points at the call line with no message of its own and chains the callee's error."""
    from grader.core.checks import short_error

    callee = CompilationError(
        "at 2:15:\ndef sigmoid(x):\n    return 1 / (1 + tl.exp(-x))\n               ^\n"
        "ValueError(\"Expected dtype ['fp32', 'fp64'] but got fp16\")"
    )
    call = CompilationError("at 8:8:\ndef silu_kernel(x_ptr, y_ptr, n):\n    y = x * sigmoid(x)\n        ^")
    call.__cause__ = callee
    shown = short_error(call)
    assert shown.startswith("Expected dtype ['fp32', 'fp64'] but got fp16 (line 8 of the kernel"), shown
    assert "`y = x * sigmoid(x)`" in shown
    assert "That usually means math functions such as tl.exp take float32" in shown
    accumulator = CompilationError(
        "at 41:14:\n    acc = tl.dot(a, b, acc)\n              ^\n"
        "AssertionError('expected accumulator dtype fp32, got fp16; pass out_dtype=fp16 to use this accumulator dtype')"
    )
    assert "That usually means a tl.dot accumulator must be float32" in short_error(accumulator)


def test_a_compile_error_without_a_message_says_so_and_reads_the_line():
    """Triton 3.6 checks tl.dot's accumulator with a bare assert: no message, only the line."""
    from grader.core.checks import short_error

    silent = CompilationError("at 41:14:\n    acc = tl.dot(a, b, acc)\n              ^")
    silent.__cause__ = AssertionError()
    shown = short_error(silent)
    assert shown.startswith("one of Triton's own checks failed on this line without saying which (line 41"), shown
    assert "That usually means a tl.dot accumulator must be float32" in shown
    elsewhere = CompilationError("at 3:4:\n    y = tl.sum(x, axis=2)\n    ^")
    shown = short_error(elsewhere)
    assert "without saying which" in shown and "usually means" not in shown, shown


def test_a_failing_output_equal_to_a_suspected_mistake_is_named_first():
    """A module's suspect (a typical wrong computation) is named where every wrong output matches
    it, and only there; one that cannot be computed for the inputs says nothing."""
    from grader.core.cases import Suspect
    from grader.core.checks import compare, reference_outputs

    def impossible(x):
        raise RuntimeError("needs another shape")

    spec = Spec(
        api="double",
        make_inputs=None,
        reference=lambda x: x * 2,
        suspects=(
            Suspect("a suspect that cannot run", impossible, "never said"),
            Suspect("x + x + x", lambda x: x * 3, "double, do not triple."),
        ),
    )
    x = torch.randn(64, dtype=torch.float32)
    case = Case({}, torch.float32)
    references = reference_outputs(spec, (x,), {})
    tripled = compare(spec, case, (x * 3,), references, ((x,), {}))
    assert tripled[0] == "output matches what x + x + x gives: double, do not triple.", tripled
    assert not any("never said" in p for p in tripled)
    quadrupled = compare(spec, case, (x * 4,), references, ((x,), {}))
    assert quadrupled and not any("x + x + x" in p for p in quadrupled)
    assert compare(spec, case, (x * 2,), references, ((x,), {})) == []
    assert not any("x + x + x" in p for p in compare(spec, case, (x * 3,), references, None))


def test_a_call_that_raises_still_says_what_its_case_checks():
    """The case's hint follows the error of a call that raised, as it follows wrong values."""

    def refuses(x):
        raise ValueError("x has 65536 elements; this kernel supports at most 65536")

    hinted = Case({"n": 100}, hint="rows of exactly MAX_ROW elements are allowed: the limit is > MAX_ROW")
    result = run_case(refuses, SPEC, hinted)
    assert not result.passed and "ValueError" in result.message
    assert result.message.endswith(
        "What this case checks: rows of exactly MAX_ROW elements are allowed: the limit is > MAX_ROW"
    )
