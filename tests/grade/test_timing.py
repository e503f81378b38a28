"""Performance credit: full at the module's threshold, linear down to the floor, none below."""

import pytest

from grader.core.cases import Spec
from grader.grade.scoring import credit


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
    from grader.core.checks import build_inputs
    from grader.grade import timing

    spec, public = cases.public(find_module(module_id))
    case = public[0]
    args, kwargs = build_inputs(spec, case, 0, on=torch.device("cpu"))
    monkeypatch.setattr(timing, "fetch_timed", lambda child, refs: {0: list(outputs_of(refs[0], case))})
    grading = SimpleNamespace(plan=SimpleNamespace(spec=spec))
    return timing._timed_outputs_problem(_target(grading), None, timing.TimingPlan(case, [(args, kwargs)], reps=1))


def test_the_timed_outputs_are_judged_with_the_inputs_of_their_call(monkeypatch):
    """A module's own judge reads the call's inputs (debugging/03 compares y with x and the bias):
    right outputs pass, wrong ones are named, and neither stops the grader."""
    right = lambda refs, case: [r.to(case.dtype) for r in refs]
    wrong = lambda refs, case: [r.to(case.dtype) + 1 for r in refs]
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

    from grader.grade.profile import Profile
    from grader.sandbox.isolation import Limits

    spec = Spec(api="f", make_inputs=None, reference=None)
    let_in = []  # the children told to go on after their imports
    return SimpleNamespace(
        plan=SimpleNamespace(spec=spec, limits=Limits(case_seconds=2, startup_seconds=3), own_kernels=frozenset()),
        ledger=SimpleNamespace(log=[]),
        profile=Profile(),
        room=None,
        let_in=let_in.append,
        went_on=let_in,
    )


def _target(grading):
    """What a timing of ``grading``'s whole module is of."""
    from grader.grade import timing

    return timing._Target(grading, grading.plan.spec, "")


def test_the_warm_up_before_timing_grades_nothing_but_a_child_that_hangs_or_ends():
    from grader.grade import timing

    failed = _ScriptedChild({"event": "warmed_up", "error": "RuntimeError: boom"})
    grading = _grading()
    assert timing._warm_up(_target(grading), failed) is None, "a failing first call fails again when timed, saying why"
    assert failed.orders[0]["warm_up"] and "boom" in grading.ledger.log[0]

    hung = _ScriptedChild()
    entry = timing._warm_up(_target(_grading()), hung)
    assert hung.killed and entry["credit"] == 0.0 and "within 6 s" in entry["reason"]
    assert "make bench" in entry["reason"]

    ended = timing._warm_up(_target(_grading()), _ScriptedChild({"event": "finished"}))
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
    """The timed calls end at timing_end; the child then reports their kernel trace and, after
    the last window, saves the outputs; a child that never saves them gets no credit."""
    from grader.grade import timing

    child = _ScriptedChild(
        {"event": "timing_start", "received_at": 10.0},
        {"event": "timing_end", "received_at": 10.5, "event_ms": 480.0},
        {"event": "timing_kernels", "counts": {"k": 100}, "times_us": {"k": 5.0}},
    )
    window = timing._timed_window(_target(_grading()), child, 100, retune=True, save=True, windows=1)
    assert (window.ms, window.event_ms) == (500.0, [480.0])
    assert window.traces == [{"counts": {"k": 100}, "times_us": {"k": 5.0}}]
    assert child.orders[0]["timing"] == 100 and child.orders[0]["save"] and child.orders[0]["retune"]
    assert not child.killed, "the window returns with its trace, before the outputs are saved"

    assert timing._saved(_grading(), _ScriptedChild({"event": "timing_saved"})) is None
    never = _ScriptedChild({"event": "timing_kernels", "counts": {}, "times_us": {}})
    entry = timing._saved(_grading(), never)
    assert never.killed and entry["credit"] == 0.0 and "not saved within 2 s" in entry["reason"]
    failed = timing._saved(_grading(), _ScriptedChild({"event": "timing_error", "error": "x"}))
    assert failed["credit"] == 0.0 and "could not be saved" in failed["reason"]


def test_the_grade_takes_the_fastest_of_several_windows_each_with_its_own_trace():
    """A moment of interference in one window (another process waking) does not decide a
    host-bound timing: the fastest window counts, and each window's trace is kept to be checked."""
    from grader.grade import timing

    events = []
    for index, (start, end) in enumerate([(10.0, 10.30), (11.0, 11.20), (12.0, 12.25)]):
        events += [
            {"event": "timing_start", "received_at": start},
            {"event": "timing_end", "received_at": end, "event_ms": 190.0 + index},
            {"event": "timing_kernels", "counts": {"k": 100 + index}, "times_us": {"k": 5.0}},
        ]
    child = _ScriptedChild(*events)
    window = timing._timed_window(_target(_grading()), child, 100, windows=3)
    assert child.orders[0]["windows"] == 3
    assert window.best == 1 and round(window.ms, 6) == 200.0 and window.event_ms[window.best] == 191.0
    assert [trace["counts"]["k"] for trace in window.traces] == [100, 101, 102]
    short = timing._timed_window(_target(_grading()), _ScriptedChild(*events[:3]), 100, windows=3)
    assert short["credit"] == 0.0, "a child that stops after one window is not graded on it"


def test_every_window_must_do_the_judged_work_not_only_the_fastest():
    """Skipping work in one window and making it up in another keeps the total launches equal;
    each window is therefore held to the judged call on its own."""
    from grader.grade.timed_work import windows_work_problem

    honest = _window(50, 4900.0)
    assert windows_work_problem(50, [honest, honest, honest], AUDIT, OWN) is None
    skipped, doubled = _window(0, 0.0), _window(100, 9800.0)
    kind, message, window = windows_work_problem(50, [honest, skipped, doubled], AUDIT, OWN)
    assert kind == "timed_skipped" and window is skipped and "0 launches in 50 timed calls" in message


# --- What is timed is what was judged (grader.grade.timed_work) ---------------------------------

OWN = {"add_kernel"}
AUDIT = {"kernel_counts": {"add_kernel": 1, "FillFunctor": 1}, "kernel_us": {"add_kernel": 100.0, "FillFunctor": 30.0}}


def _window(launches: int, us: float, **more) -> dict:
    return {
        "counts": {"add_kernel": launches, **{name: n for name, (n, _) in more.items()}},
        "times_us": {"add_kernel": us, **{name: t for name, (_, t) in more.items()}},
    }


def test_timed_calls_that_do_the_judged_work_pass():
    from grader.grade.timed_work import timed_work_problem

    assert timed_work_problem(50, _window(50, 4900.0), AUDIT, OWN) is None
    copies = _window(50, 4900.0, **{"Memcpy DtoD (Device -> Device)": (50, 300.0)})
    assert timed_work_problem(50, copies, AUDIT, OWN) is None, "data movement around the launch is allowed"
    assert timed_work_problem(50, _window(50, 4100.0), AUDIT, OWN) is None, (
        "the judged call's fill of its outputs is not the kernel's work, and some jitter is allowed"
    )


def test_timed_calls_that_skip_or_remember_work_are_caught():
    """A submission that recognises an input set it has seen (pointer, version, shape) and returns
    what it computed before launches fewer kernels; one that launches a trivial kernel instead
    keeps the GPU busy for less time than the judged call on fresh inputs."""
    from grader.grade.timed_work import timed_work_problem

    kind, message = timed_work_problem(50, _window(2, 200.0), AUDIT, OWN)
    assert kind == "timed_skipped" and "2 launches in 50 timed calls" in message
    kind, message = timed_work_problem(50, _window(50, 500.0, FillFunctor=(50, 4500.0)), AUDIT, OWN)
    assert kind == "timed_skipped" and "less work" in message, "a busy copy does not stand in for the kernel"
    other = _window(50, 5000.0, fast_kernel=(50, 100.0))
    assert timed_work_problem(50, other, AUDIT, {"add_kernel", "fast_kernel"})[0] == "timed_skipped"


def test_a_library_kernel_in_the_timed_window_is_an_integrity_violation():
    """Slow Triton kernel where judged, cuBLAS (through ``@``) where timed."""
    from grader.grade.timed_work import timed_work_problem

    window = {"counts": {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": 50}, "times_us": {}}
    kind, message = timed_work_problem(50, window, AUDIT, OWN)
    assert kind == "timed_foreign" and "sm90_xmma_gemm" in message


def test_where_moving_data_is_the_exercise_a_copy_kernel_in_the_timed_calls_is_foreign():
    from grader.grade.timed_work import timed_work_problem

    copies = _window(50, 5000.0, **{"Memcpy DtoD (Device -> Device)": (50, 3000.0)})
    assert timed_work_problem(50, copies, AUDIT, OWN) is None
    assert timed_work_problem(50, copies, AUDIT, OWN, moves_data=True)[0] == "timed_foreign"


def test_an_untraced_timing_is_not_graded_rather_than_trusted():
    from grader.grade.timed_work import timed_work_problem

    assert timed_work_problem(50, {"counts": None, "times_us": None}, AUDIT, OWN)[0] == "untraced"


def _checked_entry(monkeypatch, traced: dict, audit_passes: bool = True, outputs_problem: str = "") -> dict:
    from grader.core.cases import Case
    from grader.grade import timing
    from grader.grade.judging import Verdict

    monkeypatch.setattr(
        timing,
        "judge",
        lambda *a, **k: (
            Verdict(True) if audit_passes else Verdict(False, "torch", "f() computed with PyTorch (aten.mm)")
        ),
    )
    monkeypatch.setattr(timing, "_timed_outputs_problem", lambda grading, child, plan: outputs_problem)
    grading = _grading()
    grading.plan.own_kernels, grading.on = OWN, None
    plan = timing.TimingPlan(Case({"n": 8}), [((), {})], reps=50, reference_ms=4.0)
    inputs = timing.TimingInputs(plan.case, plan.input_sets, ((), {}))
    window = timing.Timed([250.0], [240.0], [traced])
    return timing._checked(_target(grading), _ScriptedChild(), plan, window, dict(AUDIT), inputs)


def test_the_speed_counts_only_when_the_timed_calls_did_the_judged_work(monkeypatch):
    honest = _checked_entry(monkeypatch, _window(50, 5000.0))
    assert honest["ratio"] == 0.8 and honest["credit"] == 1.0 and "integrity" not in honest

    remembering = _checked_entry(monkeypatch, _window(1, 100.0))
    assert remembering["credit"] == 0.0 and remembering["integrity"]["violation"] == "timed_skipped"
    swapping = _checked_entry(monkeypatch, _window(50, 5000.0, cutlass_gemm=(50, 100.0)))
    assert swapping["credit"] == 0.0 and swapping["integrity"]["violation"] == "timed_foreign"
    audit_cheats = _checked_entry(monkeypatch, _window(50, 5000.0), audit_passes=False)
    assert audit_cheats["credit"] == 0.0 and audit_cheats["integrity"]["violation"] == "torch"
    wrong = _checked_entry(monkeypatch, _window(50, 5000.0), outputs_problem="wrong")
    assert wrong["credit"] == 0.0 and "integrity" not in wrong


def test_the_audit_call_gets_inputs_only_when_it_is_made():
    """The call after the timed ones is a graded trial whose inputs the child receives only then."""
    from grader.grade import timing

    given = []
    child = _ScriptedChild({"event": "done", "trial": timing.AUDIT_TRIAL, "kernel_counts": {"add_kernel": 1}})
    child.give = lambda name, data: given.append(name)
    import torch

    inputs = timing.TimingInputs(None, [], ((torch.ones(4),), {}))
    event = timing._audit_call(_target(_grading()), child, inputs)
    assert event["kernel_counts"] == {"add_kernel": 1}
    assert given == [f"trial-{timing.AUDIT_TRIAL}.in"] and child.orders[0]["trial"] == timing.AUDIT_TRIAL


def test_last_timed_outputs_cover_every_input_set():
    from grader.grade import timing

    plan = timing.TimingPlan(None, [0, 1, 2], reps=10)
    assert timing.last_sets(plan) == [0, 1, 2]


def test_a_timed_child_may_write_files_as_large_as_a_benchmark_call_needs():
    """The audit call saves its inputs after the call and its outputs: at benchmark sizes that is
    more than the correctness children's file-size limit (2 GiB for 1 GiB inputs)."""
    import torch

    from grader.grade import timing

    big = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage(1 << 20))  # its storage's size counts
    inputs = timing.TimingInputs(None, [((big,), {})], ((big, big[:10]), {}))
    assert timing.saved_file_bytes(inputs) >= 4 * (1 << 20) + 2 * (1 << 20)
    # Its working folder holds the inputs handed to it besides: an AdamW step over 124 M float32
    # parameters (2 GB of state per set) passed the default 4 GiB and could not be timed.
    assert timing.working_folder_bytes(inputs) >= timing.saved_file_bytes(inputs) + 2 * (1 << 20)


def test_a_module_of_several_parts_gets_each_part_timed_and_their_credit_weighted():
    from grader.core.cases import Part
    from grader.grade import timing

    spec = Spec(api="f", make_inputs=None, reference=None)
    parts = (Part("a", "part a", ("f",), spec, weight=0.4), Part("b", "part b", ("g",), spec, weight=0.6))
    fast = {"graded": True, "credit": 1.0, "ratio": 1.0, "reason": "1.00 x"}
    slow = {"graded": True, "credit": 0.0, "ratio": 0.25, "reason": "0.25 x"}
    entry = timing.combined(parts, {"a": fast, "b": slow})
    assert entry["graded"] and entry["credit"] == pytest.approx(0.4) and entry["ratio"] == pytest.approx(0.5)
    assert entry["parts"] == {"a": fast, "b": slow} and "a: 1.00 x" in entry["reason"]
    # One part not graded (not traced, say): the module's performance is left out, not failed.
    left = timing.combined(parts, {"a": fast, "b": {"graded": False, "reason": "not graded: no trace"}})
    assert not left["graded"] and "no trace" in left["reason"]
    # A part's integrity finding is the module's.
    cheat = {**slow, "integrity": {"violation": "timed_foreign", "message": "cuBLAS"}}
    assert timing.combined(parts, {"a": fast, "b": cheat})["integrity"]["violation"] == "timed_foreign"


def test_a_part_is_timed_once_its_own_cases_pass_whatever_the_others_do():
    from types import SimpleNamespace

    from grader.core.cases import Part
    from grader.grade import timing

    spec = Spec(api="f", make_inputs=None, reference=None)
    parts = (Part("a", "part a", ("f",), spec), Part("b", "part b", ("g",), spec))
    trials = [SimpleNamespace(id=i) for i in range(4)]
    owner = {0: parts[0], 1: parts[0], 2: parts[1], 3: parts[1]}
    verdicts = {0: SimpleNamespace(passed=True), 1: SimpleNamespace(passed=True), 2: SimpleNamespace(passed=False)}
    grading = SimpleNamespace(
        plan=SimpleNamespace(trials=trials, parts=parts, part_of=owner.__getitem__),
        ledger=SimpleNamespace(verdicts=verdicts),
    )
    assert timing._every_case_passed(grading, parts[0])
    assert not timing._every_case_passed(grading, parts[1]), "a failed case of the part"
    assert not timing._every_case_passed(grading, None), "the whole module: every case"
    verdicts[2] = SimpleNamespace(passed=True)
    assert not timing._every_case_passed(grading, parts[1]), "a case of the part without a verdict"


def test_a_timing_that_began_on_a_busy_gpu_counts_but_says_so(monkeypatch):
    """The lease's wait for an idle GPU ran out: the timing still counts (a submission must not
    buy its way out of the speed bar by keeping the GPU busy), and the entry tells why it may be
    slow; a GPU that went idle leaves no note."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from grader.grade import gpu_idle, timing

    def lease(idle):
        @contextmanager
        def exclusive():
            yield gpu_idle.Idle(idle, 30.0, 97 if idle is False else 0)

        return SimpleNamespace(exclusive=exclusive)

    def measured(idle):
        grading = SimpleNamespace(lease=lease(idle), profile=SimpleNamespace(add=lambda *a: None))
        target = timing._Target(grading, Spec(api="f", make_inputs=None, reference=None), "")

        def timed(target, inputs, busy):
            with target.grading.lease.exclusive() as alone:
                if alone.idle is False:
                    busy.append(alone)
            return {"graded": True, "credit": 0.5, "ratio": 0.6}

        monkeypatch.setattr(timing, "_timed", timed)
        return timing._measure(target, None)

    busy = measured(False)
    assert busy["credit"] == 0.5 and busy["gpu_busy_at_start"] == 97 and "97% busy" in busy["warning"]
    assert "warning" not in measured(True) and "warning" not in measured(None)


def test_a_timed_child_gets_the_room_its_timing_inputs_need():
    """An AdamW step over 247 M float32 parameters hands the timed child 4 GB per input set: its
    working folder, file size and host memory grow with the inputs (the default 16 GiB ran out
    while it read them), and it times the part's own function."""
    from types import SimpleNamespace

    import torch

    from grader.grade import timing

    asked = {}

    class Started(Exception):
        pass

    def start_child(n_calls, **kwargs):
        asked.update(kwargs)
        raise Started

    big = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage(1 << 20))
    inputs = timing.TimingInputs(None, [((big,), {})], ((big,), {}))
    grading = SimpleNamespace(start_child=start_child)
    target = timing._Target(grading, Spec(api="adamw", make_inputs=None, reference=None), "optimizer")
    with pytest.raises(Started):
        timing._started(target, inputs)
    assert asked["api"] == "adamw" and asked["timed"]
    assert asked["disk_bytes"] == timing.working_folder_bytes(inputs) > asked["file_bytes"]
    assert asked["held_bytes"] == 3 * (2 << 20)
