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
