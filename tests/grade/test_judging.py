"""Contracts the parent holds a call to, whatever the child saved:

- an in-place API updates the caller's very tensors (a list slot reassigned, or a tensor pointed at
  other memory, is not an update: the values are read from the tensors the caller passed);
- every output has the dtype and shape the reference's spec gives it, and is compared with the
  tolerance of that dtype, not of the one a submission chose;
- a random op is graded on its randomness: the same seed drops the same elements of other values,
  another seed other elements (``Calls`` cases, judged on several calls together);
- a failed hidden case reads the same whatever the submission did;
- an output that is a small view of a large allocation travels as its own size.

The last test grades one example submission per contract through the run phase, as ``make grade``
does (the policy gate on), on the cases that concern it.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from grader.authoring import example_submissions
from grader.core import cases, device, memcheck, protocols
from grader.core.cases import Case, Spec, spec_for, specs_of
from grader.core.catalog import REPO_ROOT, find_module
from grader.core.checks import KernelCallError, build_inputs, call_api, compare, reference_outputs, run_case
from grader.core.loading import load_kernel
from grader.grade import grading, judging, plan, record, runphase
from grader.sandbox import wire
from grader.sandbox.isolation import GiB, Limits, offers

EXAMPLES = REPO_ROOT / "grader" / "examples" / "submissions"
TRAINING = find_module("mastery/04-training-kernels")
ATTENTION = find_module("mastery/03-attention-kernels")
MEMORY = find_module("debugging/04-memory-debugging")


def _example(name: str, module) -> Path:
    """The example's kernel.py, derived from its patch into a folder of its own."""
    folder = Path(tempfile.mkdtemp(prefix="example-")) / name / module.track / module.slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.py").write_text(example_submissions.kernel_source(EXAMPLES / name / module.track / module.slug))
    return folder / "kernel.py"


def _cases(module, apis: set[str], labels: str = "") -> list[Case]:
    spec, public = cases.public(module)
    return [
        c
        for c in cases.for_mode(public + cases.hidden(module), device.is_cuda())
        if spec_for(c, spec).api in apis and labels in c.label
    ]


# --- in-place APIs: the caller's tensors ---------------------------------------------------------


def _in_place_spec() -> Spec:
    def make_inputs(case, rand):
        return ([rand.randn(5), rand.randn(3, 2)], [rand.randn(5), rand.randn(3, 2)]), {}

    def reference(params, grads):
        for param, grad in zip(params, grads):
            param.sub_(grad)

    return Spec(api="step", make_inputs=make_inputs, reference=reference, output_names=(), mutates=(0,))


def _call(spec, fn):
    args, kwargs = build_inputs(spec, Case({}))
    return call_api(fn, args, kwargs, spec.api, spec.mutates, ["params", "grads"])


def test_an_in_place_api_that_updates_the_callers_tensors_passes():
    def step(params, grads):
        for param, grad in zip(params, grads):
            param.sub_(grad)

    assert _call(_in_place_spec(), step) == ()


@pytest.mark.parametrize("how", ["new tensor in the list", "other memory behind the tensor"])
def test_an_in_place_api_must_not_move_the_callers_tensors(how):
    def step(params, grads):
        for i, grad in enumerate(grads):
            if how == "new tensor in the list":
                params[i] = params[i] - grad
            else:  # what .data = ... and set_() do: the same object, other memory
                params[i].set_(params[i] - grad)

    with pytest.raises(KernelCallError, match=r"put another tensor in the place of params\[0\]"):
        _call(_in_place_spec(), step)


def test_the_parent_reads_in_place_results_from_the_callers_tensors():
    # What a child saves: "args", the caller's tensors (here untouched); "after", what the lists
    # held after the call (updated copies). The parent must not take the copies for the update.
    spec, case = _in_place_spec(), Case({})
    args, kwargs = build_inputs(spec, case)
    passed = protocols.as_passed(args, kwargs)
    copies = [p - g for p, g in zip(args[0], args[1])]
    saved = {"outputs": [], "args": list(passed[0]), "kwargs": passed[1], "after": copies + list(args[1])}
    verdict = judging.judge(
        spec, case, args, kwargs, {"returned": [], "launches": 1}, lambda refs: saved, torch.device("cpu")
    )
    assert not verdict.passed and verdict.kind == "replaced", verdict
    assert "params[0]" in verdict.message


def test_a_judging_times_its_references_and_its_comparisons_for_the_profile():
    """``--profile`` splits a judging: the references, then the comparison (with the diagnosis of a
    wrong output), each timed by the step the grader hands over."""
    from contextlib import contextmanager

    spec = Spec(api="double", make_inputs=lambda case, rand: ((rand.randn(8),), {}), reference=lambda x: x * 2)
    case = Case({})
    args, kwargs = build_inputs(spec, case)
    passed = protocols.as_passed(args, kwargs)
    saved = {"outputs": [args[0] * 3], "args": list(passed[0]), "kwargs": passed[1]}
    steps = []

    @contextmanager
    def step(name):
        steps.append(name)
        yield

    done = {"returned": ["Tensor"], "launches": 1, "devices": ["cpu"]}
    verdict = judging.judge(spec, case, args, kwargs, done, lambda refs: saved, torch.device("cpu"), step=step)
    assert not verdict.passed and verdict.kind == "wrong", verdict
    assert steps == ["judging references", "judging comparisons"]


def test_adamw_and_sgd_that_fill_the_lists_with_updated_copies_fail(monkeypatch):
    # The memory checker would stop the call first (the copies are no tensor of the call's): off,
    # so that this test is about the harness's own check after the call.
    monkeypatch.setenv(memcheck.ENV_SWITCH, "0")
    kernel = load_kernel(TRAINING, _example("inplace-copies", TRAINING))
    spec, _ = cases.public(TRAINING)
    for api in ("adamw", "sgd"):
        case = _cases(TRAINING, {api})[0]
        result = run_case(kernel.api(api), spec_for(case, spec), case)
        assert not result.passed and "put another tensor in the place of params[0]" in result.message, result


# --- every output's dtype and shape --------------------------------------------------------------


def _two_outputs_spec(**fields) -> Spec:
    def make_inputs(case, rand):
        return (rand.randn(4, 6, dtype=case.dtype),), {}

    def reference(x):
        return x * 2, torch.logsumexp(x, -1)

    return Spec(api="f", make_inputs=make_inputs, reference=reference, output_names=("y", "lse"), **fields)


def _compare(spec, case, make_outputs):
    args, kwargs = build_inputs(spec, case)
    references = reference_outputs(spec, args, kwargs)
    return compare(spec, case, make_outputs(*args), references, (args, kwargs))


def test_a_second_output_in_lower_precision_fails_on_its_dtype():
    spec = _two_outputs_spec(output_dtypes={"lse": torch.float32})
    case = Case({}, torch.bfloat16)
    right = lambda x: (x * 2, torch.logsumexp(x.float(), -1))
    assert _compare(spec, case, right) == []
    # about 0.4 % off: within bfloat16's tolerance, far outside float32's
    low = lambda x: (x * 2, torch.logsumexp(x.float(), -1).to(torch.bfloat16))
    problems = _compare(spec, case, low)
    assert problems and "lse has dtype torch.bfloat16, expected torch.float32" in problems[0]


def test_an_undeclared_output_has_the_inputs_dtype_and_the_exact_shape():
    spec, case = _two_outputs_spec(), Case({}, torch.float16)
    assert _compare(spec, case, lambda x: (x * 2, torch.logsumexp(x.float(), -1).half())) == []
    problems = _compare(spec, case, lambda x: (x * 2, torch.logsumexp(x.float(), -1)))
    assert problems and "lse has dtype torch.float32, expected torch.float16" in problems[0]
    problems = _compare(spec, case, lambda x: (x * 2, torch.logsumexp(x.float(), -1, keepdim=True).half()))
    assert problems and "lse has shape (4, 1) but should have shape (4,)" in problems[0]


def test_a_gradient_has_its_inputs_dtype():
    def make_inputs(case, rand):
        return (rand.randn(3, 4, dtype=case.dtype), rand.randn(4), rand.randn(3, 4, dtype=case.dtype)), {}

    spec = Spec(
        api="scale",
        make_inputs=make_inputs,
        protocol=cases.Backward(wrt=(0, 1)),
        reference=protocols.autograd_reference(lambda x, w: x * w, wrt=(0, 1)),
        output_names=("y", "grad_x", "grad_w"),
    )
    case = Case({}, torch.float16)

    def outputs(x, w, dy, w_dtype=torch.float32):
        return (x * w.half(), (dy * w).half(), (dy.float() * x.float()).sum(0).to(w_dtype))

    assert _compare(spec, case, outputs) == []
    problems = _compare(spec, case, lambda x, w, dy: outputs(x, w, dy, torch.float16))
    assert problems and "grad_w has dtype torch.float16, expected torch.float32, the dtype of w" in problems[0]


# --- random ops: graded on several calls ---------------------------------------------------------


def test_a_dropout_that_keeps_the_largest_elements_fails_the_graded_seed_cases():
    spec, _ = cases.public(TRAINING)
    seed_cases = _cases(TRAINING, {"dropout", "dropout_with_mask"}, "the seed's alone")
    assert {spec_for(c, spec).api for c in seed_cases} == {"dropout", "dropout_with_mask"}
    reference = load_kernel(TRAINING, TRAINING.solution_dir / "kernel.py")
    fake = load_kernel(TRAINING, _example("fake-dropout", TRAINING))
    for case in seed_cases:
        case_spec = spec_for(case, spec)
        assert run_case(reference.api(case_spec.api), case_spec, case).passed, case.name
        result = run_case(fake.api(case_spec.api), case_spec, case)
        assert not result.passed and "lost different elements" in result.message, result
        assert re.search(r"seeds \d+ and \d+ gave masks that differ at 0 of", result.message), result.message


# --- hidden cases: nothing the submission chose --------------------------------------------------


def test_every_failure_of_a_hidden_case_reads_the_same():
    kinds = ["wrong", "error", "timeout", "crash", "unreadable", "cache", "torch", "alias", "mutation", "replaced"]
    texts = {
        judging.hidden_message(judging.Verdict(False, kind, f"{kind}: KeyError 2049 (0, 7) NaN"), "dot")
        for kind in kinds
    }
    assert texts == {judging.HIDDEN_FAILED.format(api="dot")}


# --- views of large allocations ------------------------------------------------------------------


def test_a_result_that_views_a_large_workspace_travels_at_its_own_size():
    workspace = torch.zeros(1 << 20)
    workspace[12345] = 2.5
    result = workspace[12345:12346].reshape(())
    data = wire.dump_spans({"outputs": [result]})
    assert len(data) < 4096
    assert float(wire.parse(data, 10)["outputs"][0]) == 2.5


# --- the examples, graded as make grade grades them ----------------------------------------------

# Each example's module, and the functions whose cases concern it (the others are not run).
GRADED = {
    "inplace-copies": (TRAINING, {"adamw", "sgd"}),
    "fake-dropout": (TRAINING, {"dropout", "dropout_with_mask"}),
    "low-precision-lse": (ATTENTION, {"attention_forward"}),
    "view-of-workspace": (MEMORY, {"dot"}),
    "hidden-exception-channel": (MEMORY, {"dot"}),
}
LIMITS = (
    Limits(case_seconds=60, startup_seconds=120)
    if device.is_cuda()
    else Limits(case_seconds=30, startup_seconds=120, memory_bytes=2 * GiB)
)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, platform_protections):
    if not sys.platform.startswith("linux"):
        pytest.skip("the sandbox needs Linux")
    root, results = tmp_path_factory.mktemp("contract-examples"), tmp_path_factory.mktemp("contract-results")
    for name, (module, _) in GRADED.items():
        folder = root / name / module.track / module.slug
        folder.mkdir(parents=True)
        (folder / "kernel.py").write_bytes(_example(name, module).read_bytes())
    apis = {}
    for module, functions in GRADED.values():
        apis.setdefault(module.id, set()).update(functions)
    public, hidden = cases.public, cases.hidden

    def only_public(module):
        spec, found = public(module)
        return spec, [c for c in found if spec_for(c, spec).api in apis.get(module.id, ())]

    def only_hidden(module):
        spec, _ = public(module)
        return [c for c in hidden(module) if spec_for(c, spec).api in apis.get(module.id, ())]

    # The policy gate and the child's functions stay the whole module's, as make grade has them.
    whole = {}
    for module in {module.id: module for module, _ in GRADED.values()}.values():
        spec, found = public(module)
        whole[spec.api] = (spec, found + hidden(module))

    def every_spec(spec, found):
        main, every = whole.get(spec.api, (spec, found))
        return specs_of(main, every)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cases, "public", only_public)
        patch.setattr(cases, "hidden", only_hidden)
        patch.setattr(grading, "specs_of", every_spec)  # what the child may call
        patch.setattr(plan, "specs_of", every_spec)  # what the policy gate allows
        options = runphase.Options(limits=LIMITS, allow_unsafe=not offers(platform_protections, "processes"))
        summary = runphase.run(root, results, [TRAINING, ATTENTION, MEMORY], options, progress=False)
    assert not summary.errors, "\n".join(str(o.error) for o in summary.errors)

    def record_of(name: str) -> dict:
        found = summary.record_for(name, GRADED[name][0].id)
        assert found is not None, f"{name} was not graded"
        assert found["refusal"] is None and found["load_error"] is None, (found["refusal"], found["load_error"])
        return found

    return record_of


def _rows(found: dict, visibility: str | None = None) -> list[dict]:
    return [row for row in found["cases"] if visibility in (None, row["visibility"])]


def test_updated_copies_in_the_lists_lose_every_optimizer_case(graded):
    found = graded("inplace-copies")
    optimizers = [
        row
        for row in _rows(found, "public")
        if row["name"].startswith(("adamw:", "sgd:")) and ": refuses " not in row["name"]
    ]
    assert len(optimizers) > 10
    for row in optimizers:
        assert not row["passed"] and "put another tensor in the place of params[0]" in row["message"], row
    assert all(row["passed"] for row in _rows(found, "public") if row not in optimizers)
    assert found["totals"]["hidden"]["passed"] < found["totals"]["hidden"]["total"]
    assert found["integrity"]["violation"] == "replaced" and found["totals"]["score"] == 0.0, (
        "not updating the caller's tensors goes around the in-place contract: no points for the module"
    )


def test_a_dropout_that_ignores_the_seed_loses_exactly_the_seed_cases(graded):
    found = graded("fake-dropout")
    dropout = [row for row in _rows(found, "public") if row["name"].startswith("dropout")]
    failed = [row for row in dropout if not row["passed"]]
    assert failed and all("the seed's alone" in row["name"] for row in failed), failed
    assert all(row["passed"] for row in dropout if "the seed's alone" not in row["name"])
    assert "lost different elements" in failed[0]["message"]
    assert found["totals"]["hidden"]["passed"] < found["totals"]["hidden"]["total"]


def test_a_log_sum_exp_in_lower_precision_fails_where_it_is_not_float32(graded):
    found = graded("low-precision-lse")
    public = [row for row in _rows(found, "public") if ": refuses " not in row["name"]]  # a refusal has no dtype
    for row in public:
        assert row["passed"] == row["name"].endswith("fp32"), row
    assert any("lse has dtype torch.float16, expected torch.float32" in row["message"] for row in public)


def test_a_view_of_a_large_workspace_gets_full_marks(graded):
    found = graded("view-of-workspace")
    assert found["totals"]["passed"] == found["totals"]["total"] > 0, found["cases"]


def test_the_exception_a_submission_raises_on_hidden_cases_reaches_no_learner(graded):
    found = graded("hidden-exception-channel")
    assert all(row["passed"] for row in _rows(found, "public"))
    hidden = _rows(found, "hidden")
    assert hidden and not any(row["passed"] for row in hidden)
    # The learner's view: the record's messages and summary, and the feedback of the hidden part.
    shown = (
        json.dumps([found["summary"], found["note"], [row["message"] for row in found["cases"]]])
        + record.part_report(found, "hidden", 4)[0]
    )
    assert not re.search(r"[A-Z][A-Za-z]*(Error|Exception)\b", shown), shown
    assert {row["message"] for row in hidden} == {judging.HIDDEN_FAILED.format(api="dot")}


def test_how_a_process_of_hidden_cases_ended_is_never_said():
    """A crash no single case is blamed for gets a note in the module's summary; a submission
    could choose how a process running hidden cases ends (SIGSEGV, SIGABRT, ...) to spell out
    bits of them, so the note is only ever about public cases."""
    from types import SimpleNamespace

    from grader.grade.judging import Trial, Verdict
    from grader.grade.results import crash_note
    from grader.sandbox.process import ChildEnded

    plan = SimpleNamespace(trials=[Trial(0, 0, 1), Trial(1, 1, 1)], cases=[(None, "public"), (None, "hidden")])
    ended = ChildEnded("was ended by SIGABRT", -6)
    passed = {0: Verdict(True), 1: Verdict(True)}
    public = SimpleNamespace(crashes=[(ended, {0})], verdicts=passed)
    hidden = SimpleNamespace(crashes=[(ended, {1})], verdicts=passed)
    assert "SIGABRT" in crash_note(plan, public)
    assert crash_note(plan, hidden) is None
