"""Waiting for the driver to report a GPU idle before a timing, with fake readings and time (no GPU)."""

import ctypes
from types import SimpleNamespace

import pytest

from grader.grade import gpu_idle
from grader.grade.gpu_idle import Idle, wait_until_idle


class FakeTime:
    def __init__(self):
        self.now, self.sleeps = 100.0, []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert len(self.sleeps) < 10_000, "the wait never ended"
        self.sleeps.append(seconds)
        self.now += seconds


def reader(*percents):
    """A reader that gives ``percents`` in turn, then the last one forever; it notes each index asked."""
    asked, left = [], list(percents)

    def read(index):
        asked.append(index)
        return left.pop(0) if len(left) > 1 else left[0]

    return read, asked


def test_waits_until_the_driver_reads_0_and_says_how_long_it_took():
    fake, (read, asked) = FakeTime(), reader(80, 35, 0, 90)
    idle = wait_until_idle(2, 30.0, poll_s=0.01, read=read, clock=fake.clock, sleep=fake.sleep, settle_s=0.0)
    assert idle == Idle(True, pytest.approx(0.02), 0)
    assert asked == [2, 2, 2] and fake.sleeps == [0.01, 0.01]


def test_stops_at_the_limit_with_the_gpu_still_busy():
    fake, (read, _) = FakeTime(), reader(100, 55)
    idle = wait_until_idle(0, 0.05, poll_s=0.01, read=read, clock=fake.clock, sleep=fake.sleep, settle_s=0.0)
    assert idle.idle is False and idle.last_percent == 55
    assert idle.waited_s == pytest.approx(0.05) and sum(fake.sleeps) == pytest.approx(0.05)


def test_returns_at_once_when_nvml_cannot_answer():
    fake, (read, asked) = FakeTime(), reader(None)
    idle = wait_until_idle(0, 30.0, read=read, clock=fake.clock, sleep=fake.sleep, settle_s=0.0)
    assert idle == Idle(None, 0.0, None) and asked == [0] and fake.sleeps == []


def test_a_0_read_before_the_driver_can_have_seen_the_wait_begin_does_not_count():
    """The driver's figure describes a period that may end before the wait began: a kernel queued
    just before the other children were frozen would not show in it yet."""
    fake, (read, asked) = FakeTime(), reader(0, 0, 70, 0)
    idle = wait_until_idle(0, 30.0, poll_s=0.01, read=read, clock=fake.clock, sleep=fake.sleep, settle_s=0.025)
    assert idle == Idle(True, pytest.approx(0.03), 0) and len(asked) == 4


def test_the_limit_is_never_shorter_than_the_settling():
    fake, (read, _) = FakeTime(), reader(0)
    idle = wait_until_idle(0, 0.25, poll_s=0.25, read=read, clock=fake.clock, sleep=fake.sleep, settle_s=0.75)
    assert idle == Idle(True, 0.75, 0)


def test_the_settling_defaults_to_a_few_of_the_drivers_sample_periods(monkeypatch):
    monkeypatch.setattr(gpu_idle, "sample_period_s", lambda index: 0.25 if index == 1 else None)
    settle = gpu_idle.SETTLE_PERIODS * 0.25
    assert gpu_idle.settle_seconds(1) == settle
    assert gpu_idle.settle_seconds(0) == gpu_idle.SETTLE_PERIODS * gpu_idle.LONGEST_PERIOD_S, "unknown: the longest"
    fake, (read, _) = FakeTime(), reader(0)
    idle = wait_until_idle(1, 30.0, poll_s=0.25, read=read, clock=fake.clock, sleep=fake.sleep)
    assert idle == Idle(True, settle, 0)


class FakeNvml:
    """The four NVML functions gpu_idle calls, answering through the pointers they are given."""

    def __init__(self, gpu=42, mig=None, utilization_rc=0, stamps=()):
        self.gpu, self.mig, self.utilization_rc, self.stamps, self.uuids = gpu, mig, utilization_rc, stamps, []

    def nvmlDeviceGetHandleByUUID(self, uuid, handle):
        self.uuids.append(uuid)
        handle._obj.value = 1234
        return 0 if uuid.startswith(b"GPU-") else 13  # NVML_ERROR_NOT_FOUND

    def nvmlDeviceGetMigMode(self, handle, current, pending):
        if self.mig is None:
            return 3  # NVML_ERROR_NOT_SUPPORTED: a GPU without MIG
        current._obj.value = self.mig
        return 0

    def nvmlDeviceGetUtilizationRates(self, handle, rates):
        if isinstance(self.gpu, Exception):
            raise self.gpu
        rates._obj.gpu = self.gpu
        return self.utilization_rc

    def nvmlDeviceGetSamples(self, handle, kind, last_seen, value_kind, count, samples):
        count._obj.value = len(self.stamps)
        if samples:
            for slot, stamp in zip(
                ctypes.cast(samples, ctypes.POINTER(gpu_idle._Sample * len(self.stamps)))[0], self.stamps
            ):
                slot.timestamp = stamp
        return 0


@pytest.fixture
def driver(monkeypatch):
    """Install a fake NVML; GPU 0's UUID as torch gives it (no "GPU-" prefix), GPU 1's with one."""
    import torch

    uuids = {0: "5c1d0f0e-aaaa-bbbb-cccc-000000000000", 1: "GPU-77e1a2b3-aaaa-bbbb-cccc-111111111111"}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(uuid=uuids[index]))
    monkeypatch.setattr(gpu_idle, "_handles", {})
    monkeypatch.setattr(gpu_idle, "_periods", {})

    def install(**answers):
        nvml = FakeNvml(**answers)
        monkeypatch.setattr(gpu_idle, "_nvml", nvml)
        return nvml

    return install


def test_busy_percent_asks_nvml_for_the_gpu_by_its_uuid(driver):
    nvml = driver(gpu=42)
    assert gpu_idle.busy_percent(0) == 42
    assert gpu_idle.busy_percent(1) == 42
    assert nvml.uuids == [b"GPU-5c1d0f0e-aaaa-bbbb-cccc-000000000000", b"GPU-77e1a2b3-aaaa-bbbb-cccc-111111111111"], (
        "one look-up per GPU, always with GPU-"
    )


@pytest.mark.parametrize(
    "answers",
    [{"mig": 1}, {"utilization_rc": 999}, {"gpu": RuntimeError("driver")}],
    ids=["mig", "nvml-error", "raises"],
)
def test_busy_percent_is_none_where_nvml_cannot_answer(driver, answers):
    driver(**answers)
    assert gpu_idle.busy_percent(0) is None


def test_busy_percent_is_none_without_the_driver_library(monkeypatch):
    monkeypatch.setattr(gpu_idle, "_LIBRARY", "libnvidia-ml-not-here.so.1")
    monkeypatch.setattr(gpu_idle, "_nvml", None)
    assert gpu_idle.busy_percent(0) is None and gpu_idle._nvml is False


def test_the_sample_period_is_the_spacing_of_the_drivers_samples(driver):
    driver(stamps=(1_000_000, 1_200_000, 1_400_100, 1_599_900, 1_800_000))
    assert gpu_idle.sample_period_s(0) == pytest.approx(0.2, abs=1e-3)
    driver(stamps=(1_000_000, 1_200_000))
    gpu_idle._periods.clear()
    assert gpu_idle.sample_period_s(0) is None, "too few samples to tell"
