"""The GPU lease: correctness children share a GPU, a timing has it alone."""

import threading

from grader.grade.leases import GpuLease

HANG_GUARD = 60  # seconds; only a broken lease ever waits this long


def test_a_timing_waits_for_the_children_already_running_and_holds_off_new_ones():
    lease, events = GpuLease(), []
    first_in, release_first, timing_waits = threading.Event(), threading.Event(), threading.Event()

    def child(name, entered=None, release=None):
        with lease.shared():
            events.append(f"{name} in")
            if entered:
                entered.set()
            if release:
                assert release.wait(HANG_GUARD)
            events.append(f"{name} out")

    def timing():
        timing_waits.set()
        with lease.exclusive():
            events.append("timing")

    running = threading.Thread(target=child, args=("first", first_in, release_first))
    running.start()
    assert first_in.wait(HANG_GUARD)
    timer = threading.Thread(target=timing)
    timer.start()
    assert timing_waits.wait(HANG_GUARD)
    while not lease._waiting:  # the timing has queued
        threading.Event().wait(0.01)
    late = threading.Thread(target=child, args=("late",))
    late.start()
    release_first.set()
    for thread in (running, timer, late):
        thread.join(HANG_GUARD)
        assert not thread.is_alive()
    assert events == ["first in", "first out", "timing", "late in", "late out"]


def test_children_share_the_gpu_with_each_other():
    lease = GpuLease()
    with lease.shared(), lease.shared():  # a second holder does not wait for the first
        assert lease._sharing == 2
    assert lease._sharing == 0


def test_a_running_child_steps_aside_for_a_waiting_timing_between_calls():
    lease, events = GpuLease(), []
    in_call, call_done = threading.Event(), threading.Event()

    def child():
        with lease.shared():
            assert lease.step_aside(lambda: events.append("never"), lambda: events.append("never")) == 0.0
            in_call.set()
            assert call_done.wait(HANG_GUARD)  # a call in progress: the timing waits for it
            lease.step_aside(lambda: events.append("paused"), lambda: events.append("resumed"))
            events.append("next call")

    def timing():
        with lease.exclusive():
            events.append("timing")

    runner = threading.Thread(target=child)
    runner.start()
    assert in_call.wait(HANG_GUARD)
    timer = threading.Thread(target=timing)
    timer.start()
    while not lease._waiting:
        threading.Event().wait(0.01)
    assert events == []
    call_done.set()
    for thread in (runner, timer):
        thread.join(HANG_GUARD)
        assert not thread.is_alive()
    assert events == ["paused", "timing", "resumed", "next call"]


def test_timed_children_started_side_by_side_take_the_gpu_in_turn():
    # Each starts while sharing, lets go, then waits for the GPU alone: none waits for another's start.
    lease, order, started = GpuLease(), [], threading.Barrier(3)

    def timed(name):
        with lease.shared():
            started.wait(HANG_GUARD)  # all three hold the shared lease at once
        with lease.exclusive():
            order.append(name)
            assert lease._sharing == 0

    threads = [threading.Thread(target=timed, args=(n,)) for n in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD)
        assert not thread.is_alive()
    assert sorted(order) == ["a", "b", "c"]


def test_the_lease_counts_its_timings_and_how_long_they_waited_for_the_calls_in_progress(monkeypatch):
    from grader.grade import leases

    clock = [100.0]
    monkeypatch.setattr(leases.time, "monotonic", lambda: clock[0])
    lease = GpuLease()
    with lease.exclusive():  # nobody sharing: no waiting
        clock[0] += 1.0
    assert (lease.usage.timings, lease.usage.alone_seconds, lease.usage.draining_seconds) == (1, 1.0, 0.0)

    sharing, timed, release_timing = threading.Event(), threading.Event(), threading.Event()

    def timing():
        with lease.exclusive():
            timed.set()
            assert release_timing.wait(HANG_GUARD)

    with lease.shared():
        sharing.set()
        timer = threading.Thread(target=timing)
        timer.start()
        while not lease._waiting:
            threading.Event().wait(0.01)
        clock[0] += 5.0  # the call in progress takes 5 s more
    assert timed.wait(HANG_GUARD)
    clock[0] += 2.0
    release_timing.set()
    timer.join(HANG_GUARD)
    assert (lease.usage.timings, lease.usage.alone_seconds, lease.usage.draining_seconds) == (2, 3.0, 5.0)
    assert lease.usage.since(leases.Usage(1, 1.0, 0.0)) == leases.Usage(1, 2.0, 5.0)
    later, earlier = leases.Usage(3, 4.0, 5.0, 1.5, 2), leases.Usage(1, 1.0, 2.0, 0.5, 1)
    assert later.since(earlier) == leases.Usage(2, 3.0, 3.0, 1.0, 1)


def test_the_profile_says_how_each_gpu_was_held_alone(tmp_path):
    from grader.grade import leases, runphase

    summary = runphase.RunSummary(
        [], tmp_path, {}, {0: leases.Usage(2, 3.0, 5.0, 1.2), 1: leases.Usage(), 2: leases.Usage(4, 70.0, 0.0, 61.0, 2)}
    )
    lines = summary.profile_table().splitlines()
    assert [line for line in lines if line.startswith("GPU")] == [
        "GPU 0: 2 timings had it alone for 3.0 s in all, of which 1.2 s waiting for the driver to report no kernel "
        "running; they waited 5.0 s for the calls in progress to end (children whose call had ended frozen "
        "meanwhile).",
        "GPU 2: 4 timings had it alone for 70.0 s in all, of which 61.0 s waiting for the driver to report no kernel "
        "running; they waited 0.0 s for the calls in progress to end (children whose call had ended frozen "
        "meanwhile). 2 of the timings began on a GPU still busy after 30 s of waiting (their records say so): "
        "something that freezing the grader's children does not stop was running there, such as another program "
        "(see nvidia-smi). Stop it, then grade those submissions again (--regrade).",
    ]
    peak = float(lines[-1].split("peaked at ")[1].split(" GiB")[0])
    assert 0 < peak < 64, "the grader's own peak memory, in GiB"


def test_a_timing_does_not_wait_for_a_child_that_compiles_but_freezes_it_until_done():
    """A child that left mid-call (compiling) lets a timing start at once; it is frozen while
    the timing runs, and taking the GPU back waits for the timing to end."""
    lease, events = GpuLease(), []
    timing_in, release_timing = threading.Event(), threading.Event()

    def timing():
        with lease.exclusive():
            events.append("timing")
            timing_in.set()
            assert release_timing.wait(HANG_GUARD)
            events.append("timing ends")

    with lease.shared():
        lease.leave("child", lambda: events.append("paused"), lambda: events.append("resumed"))
        assert lease._sharing == 0
        timer = threading.Thread(target=timing)
        timer.start()
        assert timing_in.wait(HANG_GUARD), "the timing waited for a compiling child"
        rejoined = []
        rejoiner = threading.Thread(target=lambda: rejoined.append(lease.rejoin("child")))
        rejoiner.start()
        rejoiner.join(0.2)
        assert rejoiner.is_alive() and not rejoined, "took the GPU back while a timing had it"
        release_timing.set()
        for thread in (timer, rejoiner):
            thread.join(HANG_GUARD)
            assert not thread.is_alive()
        assert rejoined[0] > 0 and lease._sharing == 1
        assert lease.rejoin("child") == 0.0, "rejoining twice changes nothing"
    assert events == ["paused", "timing", "timing ends", "resumed"] and lease._sharing == 0


def test_a_child_that_left_and_ended_leaves_the_lease_balanced():
    lease, events = GpuLease(), []
    with lease.shared():
        lease.leave("child", lambda: events.append("paused"), lambda: events.append("resumed"))
        lease.leave("child", lambda: events.append("twice"), lambda: None)  # a repeated report
        assert lease._sharing == 0
        lease.forget("child")  # the child crashed while compiling
        lease.forget("child")
        assert lease._sharing == 1
    assert lease._sharing == 0 and not lease._off and events == []
    with lease.exclusive():  # nothing left for a timing to wait for
        assert lease._sharing == 0


def test_a_child_announces_each_compile_and_launches_only_on_the_parents_go(monkeypatch):
    """The child's half (``CompileGate``): nothing of it left on the GPU when it says it
    compiles, and the compiled kernel waits for the parent's go."""
    from types import SimpleNamespace

    from triton import knobs

    from grader.sandbox.child import CompileGate

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", None)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", None)
    steps = []
    channel = SimpleNamespace(send=lambda kind, **fields: steps.append(kind))
    orders = SimpleNamespace(next=lambda: steps.append("go") or {"go": True})
    CompileGate(channel, orders, lambda: steps.append("synchronized"))
    assert knobs.runtime.jit_cache_hook(key="k", repr="kernel", fn=None) is False, "a true value skips the compile"
    assert steps == ["synchronized", "compiling"]
    knobs.runtime.jit_post_compile_hook(key="k", repr="kernel", fn=None)
    assert steps == ["synchronized", "compiling", "compiled", "go"]


def test_a_started_child_is_told_to_go_on_once_no_timing_has_the_gpu():
    """``Grading.let_in``: a child that has imported torch and Triton (off the GPU until then)
    gets its go only after the timing holding the GPU ends; on the CPU there is nothing to wait for."""
    from types import SimpleNamespace

    import torch

    from grader.grade.grading import Grading

    class Child:  # the sandboxed process, as far as the lease and the order pipe go
        def order(self, order, deadline):
            steps.append(order)

    lease, steps, child = GpuLease(), [], Child()
    grading = SimpleNamespace(on=torch.device("cuda", 0), lease=lease)
    timing_in, release_timing = threading.Event(), threading.Event()

    def timing():
        with lease.exclusive():
            timing_in.set()
            assert release_timing.wait(HANG_GUARD)
            steps.append("timing ends")

    with lease.shared():
        lease.leave(child, lambda: steps.append("paused"), lambda: steps.append("resumed"))
        timer = threading.Thread(target=timing)
        timer.start()
        assert timing_in.wait(HANG_GUARD)
        letting = threading.Thread(target=Grading.let_in, args=(grading, child))
        letting.start()
        letting.join(0.2)
        assert letting.is_alive() and {"go": True} not in steps
        release_timing.set()
        for thread in (timer, letting):
            thread.join(HANG_GUARD)
            assert not thread.is_alive()
    assert steps == ["paused", "timing ends", "resumed", {"go": True}]
    on_cpu = SimpleNamespace(on=torch.device("cpu"), lease=lease)
    assert Grading.let_in(on_cpu, child) == 0.0 and steps[-1] == {"go": True} and len(steps) == 4


def _driver(monkeypatch, *percents):
    """Fake driver readings for the leases (``percents`` in turn, then the last one forever), no
    settling, and a registry of leases of the test's own; returns the GPU index of each reading."""
    from grader.grade import leases

    monkeypatch.setattr(leases, "_leases", {})
    left, readings = list(percents), []

    def read(index):
        readings.append(index)
        assert len(readings) < 1000, "the lease never stopped reading"
        return left.pop(0) if len(left) > 1 else left[0]

    monkeypatch.setattr(leases, "read_busy", read)
    monkeypatch.setattr(leases, "settle_seconds", lambda index: 0.0)
    return readings


def test_a_timing_waits_for_the_driver_to_report_the_gpu_idle_once_the_others_are_frozen(monkeypatch):
    from grader.grade import leases

    events = []
    readings = _driver(monkeypatch, 60, 30, 0)
    original = leases.read_busy
    monkeypatch.setattr(leases, "read_busy", lambda index: events.append("read") or original(index))
    lease = leases.GpuLease(3)
    with lease.shared():
        lease.leave("child", lambda: events.append("paused"), lambda: events.append("resumed"))
        with lease.exclusive() as idle:
            events.append("timing")
    assert readings == [3, 3, 3], "the lease's own GPU, until it read 0"
    assert events == ["paused", "read", "read", "read", "timing", "resumed"], "frozen first, then read"
    assert idle.idle is True and idle.last_percent == 0 and 0 < idle.waited_s < HANG_GUARD
    assert lease.usage.idle_wait_seconds == idle.waited_s and lease.usage.busy_starts == 0


def test_a_timing_that_begins_on_a_gpu_still_busy_is_counted(monkeypatch):
    from grader.grade import leases

    _driver(monkeypatch, 100, 85)
    monkeypatch.setattr(leases, "IDLE_LIMIT_SECONDS", 0.05)
    lease = leases.GpuLease(0)
    with lease.exclusive() as idle:
        assert lease._exclusive, "the timing goes ahead, marked"
    assert idle.idle is False and idle.last_percent == 85 and idle.waited_s >= 0.05
    assert (lease.usage.timings, lease.usage.busy_starts) == (1, 1)
    assert lease.usage.idle_wait_seconds == idle.waited_s
    before = leases.Usage(**vars(lease.usage))
    _driver(monkeypatch, 0)
    with lease.exclusive() as idle:
        pass
    assert idle.idle is True and lease.usage.since(before).busy_starts == 0 and lease.usage.busy_starts == 1


def test_a_lease_without_a_gpu_never_asks_the_driver(monkeypatch):
    from grader.grade import leases

    readings = _driver(monkeypatch, 50)
    assert leases.for_gpu(None).index is None and leases.for_gpu(5).index == 5
    lease = leases.GpuLease(None)
    with lease.exclusive() as idle:
        pass
    assert idle == leases.gpu_idle.Idle(None, 0.0, None) and readings == []
    assert (lease.usage.timings, lease.usage.idle_wait_seconds, lease.usage.busy_starts) == (1, 0.0, 0)
