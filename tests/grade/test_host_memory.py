"""The grader's own memory for judging big calls: reads are reserved against one budget."""

from __future__ import annotations

import threading
import time

from grader.grade.host_memory import HostBudget


def test_a_judging_waits_while_its_reads_do_not_fit_beside_another():
    budget = HostBudget(100)
    first_holds, second_done = threading.Event(), threading.Event()
    release_first = threading.Event()

    def first():
        with budget.judging():
            budget.need(80)
            first_holds.set()
            release_first.wait(5)

    def second():
        first_holds.wait(5)
        with budget.judging():
            budget.need(50)
            second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    first_holds.wait(5)
    time.sleep(0.2)
    assert not second_done.is_set() and budget.used == 80  # 80 + 50 > 100: it waits
    release_first.set()
    for thread in threads:
        thread.join(5)
    assert second_done.is_set() and budget.used == 0 and budget.peak == 80


def test_a_read_larger_than_the_budget_goes_alone_and_later_reads_of_a_judging_never_wait():
    budget = HostBudget(100)
    with budget.judging():
        budget.need(300)  # nothing else held: it proceeds
        budget.need(20)  # the same judging: no wait, or two judgings could wait on each other
        with budget.judging():  # a nested judging belongs to the outer one
            budget.need(5)
        assert budget.used == 325
    assert budget.used == 0 and budget.peak == 325


def test_reads_outside_a_judging_are_not_counted():
    budget = HostBudget(10)
    budget.need(1 << 40)
    assert budget.used == 0


def test_a_judging_says_how_long_its_reservation_waited(monkeypatch):
    """``--profile``'s "judging memory wait": the seconds spent in the wait for the budget, once
    per judging (its first reservation), none outside one."""
    from grader.grade import host_memory

    ticks = iter(range(100))
    monkeypatch.setattr(host_memory.time, "monotonic", lambda: float(next(ticks)) * 1.5)
    budget = HostBudget(100)
    with budget.judging() as waited:
        budget.need(10)  # one tick apart around the wait: 1.5 s
        budget.need(10)  # not the first reservation: never waits
        with budget.judging() as inner:  # a nested judging belongs to the outer one
            budget.need(5)
        assert inner is waited
    assert waited.seconds == 1.5
    with budget.judging() as nothing:
        pass
    assert nothing.seconds == 0.0
