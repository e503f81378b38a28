"""How a case calls a training API (grader.core.protocols): backward, steps, in-place outputs,
statistical judges and per-output tolerances, through the same call_api/compare the grader uses."""

import pytest
import torch

from grader.core import protocols
from grader.core.cases import Backward, Case, Spec, Steps
from grader.core.checks import KernelCallError, autograd_reference, call_api, compare, reference_outputs, with_mutated


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * x * scale

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return 2 * x * scale * grad, (x * x * grad).sum(0)


def square(x, scale):
    return _Square.apply(x, scale)


def square_wrong_backward(x, scale):
    class Wrong(_Square):
        @staticmethod
        def backward(ctx, grad):
            x, scale = ctx.saved_tensors
            return x * scale * grad, (x * x * grad).sum(0)  # missing the factor 2

    return Wrong.apply(x, scale)


def _backward_spec():
    def make_inputs(case, rand):
        x, scale = rand.randn(4, 3), rand.randn(3)
        return (x, scale, rand.randn(4, 3)), {}

    return Spec(
        api="square",
        make_inputs=make_inputs,
        reference=autograd_reference(lambda x, scale: x * x * scale, wrt=(0, 1)),
        output_names=("y", "grad_x", "grad_scale"),
        protocol=Backward(wrt=(0, 1)),
        output_tolerances={"grad_scale": {torch.float32: (1e-4, 1e-3)}},
    )


def _run(spec, fn, case=None):
    from grader.core.checks import build_inputs

    case = case if case is not None else Case({})
    args, kwargs = build_inputs(spec, case)
    references = reference_outputs(spec, args, kwargs)
    outputs = call_api(protocols.calling(spec.protocol, fn, spec.api), args, kwargs, spec.api, spec.mutates)
    return compare(spec, case, with_mutated(spec, outputs, args), references, (args, kwargs))


def test_backward_compares_forward_and_every_gradient():
    spec = _backward_spec()
    assert _run(spec, square) == []
    problems = _run(spec, square_wrong_backward)
    assert problems and "grad_x" in problems[0]
    assert "y and grad_scale are right" in "\n".join(problems)


def test_backward_of_a_function_without_autograd_says_to_use_apply():
    spec = _backward_spec()
    with pytest.raises(KernelCallError, match="requires grad.*apply"):
        _run(spec, lambda x, scale: (x * x * scale).detach())


def test_per_output_tolerance_applies_to_that_output_only():
    spec = _backward_spec()
    assert spec.tolerance(torch.float32, output="grad_scale") == (1e-4, 1e-3)
    assert spec.tolerance(torch.float32, output="grad_x") == (1e-5, 1e-4)


def _sgd_spec():
    def make_inputs(case, rand):
        params = [rand.randn(5), rand.randn(2, 3)]
        grads = [[rand.randn(5), rand.randn(2, 3)] for _ in range(case.params["steps"])]
        return (params, grads), {"lr": 0.1}

    def reference(params, grads, lr=0.1):
        for step_grads in grads:
            for p, g in zip(params, step_grads):
                p -= lr * g

    return Spec(
        api="sgd",
        make_inputs=make_inputs,
        reference=reference,
        mutates=(0,),
        protocol=Steps(per_step=1, counter="step"),
    )


def test_steps_update_in_place_and_are_compared_by_name():
    seen_steps = []

    def sgd(params, grads, *, lr, step):
        seen_steps.append(step)
        for p, g in zip(params, grads):
            p -= lr * g

    spec = _sgd_spec()
    assert _run(spec, sgd, Case({"steps": 3})) == []
    assert seen_steps == [1, 2, 3]

    def sgd_skips_the_last_tensor(params, grads, *, lr, step):
        params[0] -= lr * grads[0]

    problems = _run(spec, sgd_skips_the_last_tensor, Case({"steps": 2}))
    assert problems and problems[0].startswith("params[1]")


def test_steps_may_not_change_the_inputs_that_are_not_updated_in_place():
    def sgd_that_clears_grads(params, grads, *, lr, step):
        for p, g in zip(params, grads):
            p -= lr * g
            g.zero_()

    with pytest.raises(KernelCallError, match="changed its input"):
        _run(_sgd_spec(), sgd_that_clears_grads, Case({"steps": 1}))


def test_a_judge_replaces_the_elementwise_comparison():
    def make_inputs(case, rand):
        return (rand.randn(1000),), {}

    def judge(outputs, references, args, kwargs, case):
        kept = (outputs[0] != 0).float().mean().item()
        return [] if 0.4 < kept < 0.6 else [f"kept {kept:.2f} of the elements, expected about half"]

    spec = Spec(api="drop", make_inputs=make_inputs, reference=lambda x: x, judge=judge)
    half = lambda x: torch.where(torch.arange(x.numel(), device=x.device) % 2 == 0, x, 0.0)
    assert _run(spec, half) == []
    assert "kept 1.00" in _run(spec, lambda x: x.clone())[0]


def test_protocols_travel_to_the_child_as_plain_data():
    for protocol, mutates in ((Backward((0, 2), 2), ()), (Steps(1, "step"), (0, 2, 3)), (None, ())):
        assert protocols.from_order(protocols.order_of(protocol, mutates)) == (protocol, mutates)
    assert protocols.from_order({"kind": "unknown", "mutates": ["x"]}) == (None, ())


def test_a_pytorch_adamw_behind_a_triton_launch_fails_with_the_reason():
    """The training module's optimizer: PyTorch doing the update, with a Triton launch as cover,
    gets the right numbers but fails on the evidence, by name."""
    from grader.core import cases
    from grader.core.catalog import find_module
    from grader.core.checks import run_case
    from grader.core.loading import load_kernel

    module = find_module("mastery/04-training-kernels")
    case = next(c for c in cases.public(module)[1] if c.spec is not None and c.spec.api == "adamw" and not c.cuda_only)
    adamw_spec = case.spec
    reference = load_kernel(module, "solutions")
    cover = reference.api("relu")

    def pytorch_adamw(params, grads, exp_avgs, exp_avg_sqs, *, step, lr, beta1, beta2, eps, weight_decay):
        cover(torch.ones(4, device=params[0].device))
        with torch.no_grad():
            for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
                p.mul_(1 - lr * weight_decay)
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (v.sqrt() / (1 - beta2**step) ** 0.5).add_(eps)
                p.addcdiv_(m, denom, value=-lr / (1 - beta1**step))

    assert run_case(reference.api("adamw"), adamw_spec, case).passed
    result = run_case(pytorch_adamw, adamw_spec, case)
    assert not result.passed and "computed with PyTorch" in result.message, result.message


def test_hidden_cases_find_their_spec_by_name_while_other_threads_import_the_same_tests():
    # The run phase loads hidden cases from several threads at once; each lookup must read the
    # test file it imported, not another thread's half-executed copy of it.
    from concurrent.futures import ThreadPoolExecutor

    from grader.core.cases import public_spec

    def look_up(_):
        return public_spec("mastery/01-custom-kernels", "GLU_BACKWARD").api

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert set(pool.map(look_up, range(24))) == {"glu"}
    with pytest.raises(LookupError, match="no Spec for nothing"):
        public_spec("mastery/01-custom-kernels", "nothing")


def test_a_refusal_passes_only_the_named_error_with_a_message_that_says_enough():
    from grader.core.protocols import ProtocolError, Raises, calling, from_order, order_of

    protocol = Raises(("TypeError",), (r"int64", r"\.float\(\)"), why="name the dtype and how to convert")
    assert from_order(order_of(protocol)) == (protocol, ())  # the child gets it as plain data

    def refuses(message, error=TypeError):
        def api(x):
            raise error(message)

        return api

    assert calling(protocol, refuses("got int64: call x.float() first"), "f")(1) == ()

    class Subclass(TypeError):
        pass

    assert calling(protocol, refuses("int64: use x.float()", Subclass), "f")(1) == ()
    for api, said in [
        (refuses("bad input"), "does not say enough"),
        (refuses("int64, x.float()", ValueError), "should raise TypeError"),
        (lambda x: x, "accepted these inputs"),
    ]:
        with pytest.raises(ProtocolError, match=said):
            calling(protocol, api, "f")(1)


def test_a_fallback_must_warn_exactly_once_saying_why():
    import warnings as py_warnings

    from grader.core.protocols import ProtocolError, Warns, calling, from_order, order_of

    protocol = Warns((r"32769", r"torch"), why="say why and what computes instead")
    assert from_order(order_of(protocol)) == (protocol, ())
    said = []

    def once(x):
        if not said:
            said.append(True)
            py_warnings.warn("rows of 32769 are too long: computed with torch.softmax", stacklevel=2)
        py_warnings.warn("an unrelated warning from elsewhere", stacklevel=2)  # does not count either way
        return x

    calls = (((1,), {}), ((2,), {}))
    assert calling(protocol, once, "f")(*calls) == (1, 2)

    def warns(text):
        return lambda x: py_warnings.warn(text, stacklevel=2) or x

    for api, problem in [
        (warns("32769 too long, torch"), "gave 2 warnings"),
        (warns("falling back"), "gave no warning that says why"),
        (lambda x: x, "gave no warning"),
    ]:
        with pytest.raises(ProtocolError, match=problem):
            calling(protocol, api, "f")(*calls)
