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
