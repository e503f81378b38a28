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
