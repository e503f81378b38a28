"""The GPU memory ledger: the caps of the children alive on one GPU never add up to more than
its budget (the ledger itself needs no GPU)."""

import threading
import time

from grader.grade import gpu_memory
from grader.grade.gpu_memory import GIB, MemoryBudget


def test_a_reservation_that_does_not_fit_waits_until_memory_is_given_back():
    ledger = MemoryBudget(100)
    order = []
    with ledger.reserve(60):
        waiter = threading.Thread(target=lambda: _reserve_and_note(ledger, 60, order))
        waiter.start()
        time.sleep(0.2)
        assert order == [] and ledger.used == 60  # still waiting: 60 + 60 > 100
        order.append("released")
    waiter.join(timeout=10)
    assert order == ["released", "reserved"]
    assert ledger.used == 0


def _reserve_and_note(ledger: MemoryBudget, nbytes: int, order: list) -> None:
    with ledger.reserve(nbytes):
        order.append("reserved")


def test_reservations_that_fit_together_do_not_wait():
    ledger = MemoryBudget(100)
    with ledger.reserve(40), ledger.reserve(60):
        assert ledger.used == 100
    assert ledger.used == 0


def test_a_reservation_larger_than_the_budget_takes_the_whole_budget_rather_than_waiting_forever():
    ledger = MemoryBudget(100)
    with ledger.reserve(500) as taken:
        assert taken == 100


def test_correctness_caps_of_every_child_the_gradings_may_run_fit_the_budget_together():
    ledger = MemoryBudget(72 * GIB)
    for gradings in (1, 2, 4, 8, 16):
        for children in (1, 2):
            cap = gpu_memory.correctness_cap(ledger, gradings, children)
            assert 0 < cap * gradings * children <= ledger.budget


def test_a_timed_cap_fits_its_inputs_and_leaves_room_for_the_reference_child():
    ledger = MemoryBudget(72 * GIB)
    floor = gpu_memory.correctness_cap(ledger, 4, 2)
    small = gpu_memory.timed_cap(ledger, 24 << 20, floor)
    assert small == floor  # tiny inputs: a correctness child's share is room enough
    large = gpu_memory.timed_cap(ledger, 4 * GIB, floor)
    assert large >= 4 * 4 * GIB  # the inputs, the audit call's and outputs of their size
    huge = gpu_memory.timed_cap(ledger, 64 * GIB, floor)
    assert 2 * huge <= ledger.budget  # the submission's and the reference's children together


def test_graders_that_share_a_gpu_split_its_budget_evenly():
    total = 80 * GIB
    assert gpu_memory.budget_bytes(total, 0.9, 1) == int(total * 0.9)
    assert gpu_memory.budget_bytes(total, 0.9, 4) == int(total * 0.9) // 4
    assert gpu_memory.graders_sharing({}) == 1
    assert gpu_memory.graders_sharing({gpu_memory.SHARED_BY: " 4 "}) == 4


def test_a_share_that_is_not_a_count_of_graders_is_refused_with_the_variable_named():
    for wrong in ("0", "-2", "two", "1.5"):
        try:
            gpu_memory.graders_sharing({gpu_memory.SHARED_BY: wrong})
        except gpu_memory.SharingError as error:
            assert "GRADER_GPU_SHARED_BY" in str(error) and "whole number" in str(error)
        else:
            raise AssertionError(f"{wrong!r} was taken as a number of graders")


def test_a_run_with_a_malformed_share_stops_before_grading_anything(tmp_path, monkeypatch, capsys):
    from grader import cli

    monkeypatch.setenv(gpu_memory.SHARED_BY, "all")
    assert cli.main(["run", str(tmp_path), "--results", str(tmp_path / "results"), "--quiet"]) == 2
    assert "GRADER_GPU_SHARED_BY='all'" in capsys.readouterr().out
    assert not (tmp_path / "results").exists()


def test_a_diagnosis_gets_a_part_of_the_graders_own_share_and_none_where_it_never_fits(monkeypatch):
    """The children have ``fraction`` of a GPU; the grader's own share is the rest, split between
    the graders sharing it, and a wrong output's diagnosis may hold a third of that."""
    from types import SimpleNamespace

    monkeypatch.setattr(gpu_memory, "_rooms", {})
    monkeypatch.setattr(
        gpu_memory.torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=24 * GIB)
    )
    monkeypatch.setenv(gpu_memory.SHARED_BY, "2")
    room = gpu_memory.diagnosis_room(1, 0.75)  # 6 GiB the graders', 3 this one's, 1 the diagnosis's
    with room(GIB) as where:
        assert where == gpu_memory.torch.device("cuda", 1)
        assert gpu_memory._rooms[1].used == GIB
    assert gpu_memory._rooms[1].used == 0
    with room(GIB + 1) as where:
        assert where is None
