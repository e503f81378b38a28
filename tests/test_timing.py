"""Performance credit: full at the module's threshold, linear down to the floor, none below."""

import pytest

from grader.core.cases import Spec
from grader.grade.timing import credit


@pytest.mark.parametrize("ratio, expected", [(1.3, 1.0), (0.8, 1.0), (0.6, 0.5), (0.4, 0.0), (0.1, 0.0)])
def test_credit_is_linear_between_floor_and_threshold(ratio, expected):
    spec = Spec(api="f", make_inputs=None, reference=None)  # the defaults: 0.8, floor at half of it
    assert (spec.learner_threshold, spec.floor) == (0.8, 0.4)
    assert credit(ratio, spec.learner_threshold, spec.floor) == pytest.approx(expected)


def test_a_module_can_raise_the_floor_above_its_slow_starting_kernel():
    spec = Spec(api="f", make_inputs=None, reference=None, learner_threshold=0.9, learner_floor=0.6)
    assert credit(0.55, spec.learner_threshold, spec.floor) == 0.0
    assert credit(0.75, spec.learner_threshold, spec.floor) == pytest.approx(0.5)


def _timed_problem(monkeypatch, module_id: str, outputs_of) -> str:
    """What the grader says of the outputs of a module's timed calls, read from ``outputs_of``
    (the references -> what the child saved), on the module's first public case."""
    from types import SimpleNamespace

    import torch

    from grader.core import cases
    from grader.core.catalog import find_module
    from grader.core.checks import build_inputs, reference_outputs
    from grader.grade import timing

    spec, public = cases.public(find_module(module_id))
    case = public[0]
    args, kwargs = build_inputs(spec, case, 0, on=torch.device("cpu"))
    references = reference_outputs(spec, args, kwargs)
    monkeypatch.setattr(timing, "fetch", lambda child, name, a, k, refs: {"outputs": list(outputs_of(refs, case))})
    grading = SimpleNamespace(plan=SimpleNamespace(spec=spec))
    return timing._timed_outputs_problem(grading, None, timing.TimingPlan(case, [(args, kwargs)], reps=1))


def test_the_timed_outputs_are_judged_with_the_inputs_of_their_call(monkeypatch):
    """A module's own judge reads the call's inputs (debugging/03 compares y with x and the bias):
    right outputs pass, wrong ones are named, and neither stops the grader."""
    right = lambda refs, case: [r.to(case.dtype) for r in refs]  # noqa: E731
    wrong = lambda refs, case: [r.to(case.dtype) + 1 for r in refs]  # noqa: E731
    assert _timed_problem(monkeypatch, "debugging/03-performance-profiling", right) == ""
    assert "wrong" in _timed_problem(monkeypatch, "debugging/03-performance-profiling", wrong)


class _ScriptedChild:
    """A timed child that answers with the events it is given, then nothing (a time-out)."""

    def __init__(self, *events):
        self.events, self.orders, self.killed = list(events), [], False

    def order(self, order, deadline):
        self.orders.append(order)

    def next_event(self, deadline):
        return self.events.pop(0) if self.events else None

    def kill(self):
        self.killed = True


def _grading():
    from types import SimpleNamespace

    from grader.sandbox.isolation import Limits

    from grader.grade.profile import Profile

    spec = Spec(api="f", make_inputs=None, reference=None)
    let_in = []  # the children told to go on after their imports
    return SimpleNamespace(limits=Limits(case_seconds=2, startup_seconds=3), log=[], plan=SimpleNamespace(spec=spec),
                           profile=Profile(), let_in=let_in.append, went_on=let_in)


def test_the_warm_up_before_timing_grades_nothing_but_a_child_that_hangs_or_ends():
    from grader.grade import timing

    failed = _ScriptedChild({"event": "warmed_up", "error": "RuntimeError: boom"})
    grading = _grading()
    assert timing._warm_up(grading, failed) is None, "a failing first call fails again when timed, saying why"
    assert failed.orders[0]["warm_up"] and "boom" in grading.log[0]

    hung = _ScriptedChild()
    entry = timing._warm_up(_grading(), hung)
    assert hung.killed and entry["credit"] == 0.0 and "within 6 s" in entry["reason"]
    assert "make bench" in entry["reason"]

    ended = timing._warm_up(_grading(), _ScriptedChild({"event": "finished"}))
    assert ended["credit"] == 0.0 and "ended early" in ended["reason"]


def test_the_timed_child_must_import_kernel_py_within_the_startup_limit():
    from grader.grade import timing

    grading, child = _grading(), _ScriptedChild({"event": "started"}, {"event": "loaded"})
    assert timing._until_loaded(grading, child) is None
    assert grading.went_on == [child], "told to go on once it had imported torch and Triton"

    slow = _ScriptedChild({"event": "started"})
    entry = timing._until_loaded(_grading(), slow)
    assert slow.killed and "did not import kernel.py within 3 s" in entry["reason"]
    inputs = timing._until_loaded(_grading(), _ScriptedChild(), "timing_inputs_loaded")
    assert "did not load its timing inputs" in inputs["reason"]


def test_the_timed_window_ends_with_the_loop_and_the_outputs_are_checked_after_it(monkeypatch):
    """The exclusive part ends when the timed calls do; the saved outputs are awaited and checked
    afterwards, and a child that never saves them gets no credit."""
    from grader.grade import timing

    child = _ScriptedChild({"event": "timing_start", "received_at": 10.0},
                           {"event": "timing_end", "received_at": 10.5, "event_ms": 480.0})
    window = timing._timed_window(_grading(), child, 100, retune=True, save=True)
    assert window == (500.0, 480.0)
    assert child.orders[0]["timing"] == 100 and child.orders[0]["save"] and child.orders[0]["retune"]
    assert not child.killed, "the window returns at timing_end, before the outputs are saved"

    monkeypatch.setattr(timing, "_timed_outputs_problem", lambda grading, child, plan: "")
    from grader.core.cases import Case

    plan = timing.TimingPlan(Case({"n": 8}), [((), {})], reps=100, reference_ms=4.0)
    entry = timing._checked(_grading(), _ScriptedChild({"event": "timing_saved"}), plan, window)
    assert entry["ratio"] == 0.8 and entry["learner_ms"] == 5.0 and entry["credit"] == 1.0

    never = _ScriptedChild()
    entry = timing._checked(_grading(), never, plan, window)
    assert never.killed and entry["credit"] == 0.0 and "not saved within 2 s" in entry["reason"]
    failed = timing._checked(_grading(), _ScriptedChild({"event": "timing_error", "error": "x"}), plan, window)
    assert failed["credit"] == 0.0 and "could not be saved" in failed["reason"]
