import re

import pytest

from grader.core import cases, device
from grader.core.catalog import find_module
from grader.core.checks import build_inputs, tensors_in
from grader.sandbox.isolation import Sandbox


@pytest.fixture(scope="module")
def platform_protections() -> dict:
    """What the sandbox can protect on this machine (a child's report; see grader.sandbox.boot)."""
    with Sandbox(allow_unsafe=True) as sandbox:
        return sandbox.probe()


@pytest.fixture(scope="session")
def hidden_numbers_shown():
    """A function that returns the sizes and strides of vector add's hidden inputs (those that no
    public case has) which a record shows its learner: in the summary, errors or case rows."""
    module = find_module("missing-elements/01-vector-add")
    spec, public = cases.public(module)
    cuda = device.is_cuda()

    def dimensions(case_list) -> set[str]:
        found = set()
        for case in cases.for_mode(case_list, cuda):
            args, kwargs = build_inputs(spec, case, on=device.torch_device())
            for tensor in tensors_in((args, kwargs)):
                found.update(str(n) for n in (*tensor.shape, *tensor.stride()))
        return found

    secret = {n for n in dimensions(cases.hidden(module)) - dimensions(public) if int(n) > 64}
    assert secret, "no hidden input has a size of its own: the tests that use this would prove nothing"

    def shown(record: dict) -> list[str]:
        parts = [record["summary"], record["load_error"] or "", record["refusal"] or ""]
        parts += [f"{row['name']} {row['message']}" for row in record["cases"]]
        text = "\n".join(parts)
        return sorted(n for n in secret if re.search(rf"\b{n}\b", text))

    return shown


@pytest.fixture(scope="session")
def graded_record():
    """A function: the record a run phase wrote for a student's vector add, asserting that the run
    had no grader errors and that the student was graded."""
    module = find_module("missing-elements/01-vector-add")

    def record(summary, student: str) -> dict:
        assert not summary.errors, "\n".join(str(o.error) for o in summary.errors)
        found = summary.record_for(student, module.id)
        assert found is not None, f"{student} was not graded"
        return found

    return record
