"""Parsing kernel.py from several grading threads at once must not fail (CPython 3.11 shares the
AST conversion's depth counter between threads)."""

import gc
import sys
import threading

from grader.core import syntax

_SOURCE = "\n".join(f"def f{i}(a, b):\n    return [a + b * {i} for _ in range(3)]" for i in range(40))


class _InCycle:
    """Collected only by the cyclic GC; its ``__del__`` is Python code, where another thread may run."""

    def __init__(self):
        self.me = self

    def __del__(self):
        pass


def test_parsing_on_many_threads_at_once_gives_whole_trees():
    failures, trees = [], []

    def parse_often():
        for _ in range(80):
            garbage = [_InCycle() for _ in range(20)]  # so collections happen during parsing
            del garbage
            try:
                trees.append(len(syntax.parse(_SOURCE).body))
            except SystemError as error:
                failures.append(str(error))

    interval, threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50)
    try:
        threads = [threading.Thread(target=parse_often) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*threshold)
    assert not failures, failures[:3]
    assert trees == [40] * 320
