import pytest

from grader.stubs import MarkerError, generate_stub, open_todos

SOLUTION = '''\
def f(x):
    # TODO: double x
    # HINT: multiply
    y = 2 * x
    # STUB: y = ...
    # END TODO
    # BUG: off by one
    z = y
    # STUB: z = y + 1
    # END BUG
    # TODO: return it
    return z
    # END TODO
'''


def test_regions_become_numbered_todos_hints_and_stub_lines():
    stub = generate_stub(SOLUTION)
    assert stub == ('def f(x):\n'
                    '    # TODO 1: double x\n'
                    '    #   Hint: multiply\n'
                    '    y = ...\n'
                    '    z = y + 1\n'
                    '    # TODO 2: return it\n')
    assert [(t.number, t.line, t.text) for t in open_todos(stub)] == [(1, 2, "double x"), (2, 6, "return it")]


def test_solution_itself_has_no_open_todos():
    assert open_todos(SOLUTION) == []


@pytest.mark.parametrize("broken", [
    "# TODO: a\nx = 1\n",                       # never closed
    "# END TODO\n",                             # closed without opening
    "# TODO: a\n# TODO: b\n# END TODO\n",       # nested
    "# TODO: a\nx = 1\n# END BUG\n",            # wrong closer
])
def test_malformed_markers_are_reported(broken):
    with pytest.raises(MarkerError):
        generate_stub(broken)
