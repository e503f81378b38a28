import pytest

from grader.sandbox.isolation import Sandbox


@pytest.fixture(scope="module")
def platform_protections() -> dict:
    """What the sandbox can protect on this machine (a child's report; see grader.sandbox.boot)."""
    with Sandbox(allow_unsafe=True) as sandbox:
        return sandbox.probe()
