"""--profile's account of a grading's wall time: the steps, and the time no step covers."""

from __future__ import annotations

import time

from grader.grade import profile


def test_time_no_step_covers_is_found_and_named_by_the_step_before_it():
    spans = [(0.0, 2.0, "planning"), (2.0, 5.0, "cases"), (3.0, 4.0, "judging"), (9.0, 10.0, "record")]
    # 5 to 9 follows the cases (judging ended inside them); 10 to 12 follows the record
    assert profile.uncovered(spans, 0.0, 12.0) == {"cases": 4.0, "record": 2.0}
    assert profile.uncovered([(1.0, 3.0, "cases")], 0.0, 3.0) == {"start": 1.0}
    assert profile.uncovered([], 0.0, 2.5) == {"start": 2.5}
    # side by side: overlapping steps cover the wall once, and nothing is left over
    assert profile.uncovered([(0.0, 4.0, "cases"), (1.0, 3.0, "cases"), (3.5, 6.0, "exits")], 0.0, 6.0) == {}


def test_a_closed_profile_keeps_its_gaps_apart_from_its_steps_and_the_table_names_the_largest():
    p = profile.Profile()
    started = time.monotonic()
    p.add("planning", 0.0)  # nothing to cover
    with p.step("cases"):
        time.sleep(0.05)
    time.sleep(0.2)  # no step
    p.close(time.monotonic() - started)
    assert set(p.seconds) == {"planning", "cases", "other"}
    # at least the sleep after the step (a busy machine only adds), never more than the whole
    assert 0.2 <= p.gaps["cases"] <= p.total
    assert p.as_dict()["uncovered"]["cases"] == round(p.gaps["cases"], 3)
    p.gaps = {"cases": 3.0, "judging": 1.5}
    table = profile.table([("m/01", p)])
    assert "m/01: 4.5 s a grading covered by no step, 3.0 s after cases, 1.5 s after judging" in table
