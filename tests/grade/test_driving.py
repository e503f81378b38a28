"""A grading child's start: it must run on the grader's device."""

from __future__ import annotations

import pytest

from grader.core import device
from grader.grade import driving
from grader.sandbox.isolation import SandboxError


def test_a_child_on_another_device_is_a_grader_error_not_the_files_grade(monkeypatch):
    monkeypatch.setattr(device, "mode", lambda: "cuda")
    with pytest.raises(SandboxError, match="started on 'cpu', but this grader grades on 'cuda'.*no grade"):
        driving._same_device({"event": "started", "mode": "cpu"})
    driving._same_device({"event": "started", "mode": "cuda"})
    driving._same_device({"event": "started"})  # an older child that does not say


def test_a_hidden_cases_call_is_judged_without_a_diagnosis_and_every_call_with_the_gradings_room(monkeypatch):
    """A failed hidden case reads the same whatever went wrong, so its judging spends nothing on
    the diagnosis (on a GPU, most of a grading's judging); public calls are diagnosed, in the
    room the grading has on its GPU."""
    from types import SimpleNamespace

    import torch

    from grader.grade.judging import Trial, Verdict
    from grader.grade.profile import Profile

    seen = []

    def judge(*args, hidden=False, room=None, **kwargs):
        seen.append((hidden, room))
        return Verdict(False, "wrong", "y is wrong.")

    monkeypatch.setattr(driving, "judge", judge)
    room = object()
    public, hidden = object(), object()
    trials = [Trial(0, 0, 1), Trial(1, 1, 1)]
    grading = SimpleNamespace(
        plan=SimpleNamespace(
            cases=((public, "public"), (hidden, "hidden")), trials=trials, spec=None, own_kernels=set()
        ),
        inputs={0: ((torch.ones(2),), {}), 1: ((torch.ones(2),), {})},
        on=torch.device("cpu"),
        room=room,
        profile=Profile(),
        ledger=SimpleNamespace(verdicts={}, unconfirmed={}, traced=False),
    )
    child = SimpleNamespace(discard=lambda name: None)
    for trial in trials:
        driving._judge(grading, child, trial, {"seconds": 0.1}, 0.2, {})
    assert seen == [(False, room), (True, room)]
