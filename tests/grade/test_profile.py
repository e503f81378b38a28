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


def _logged(path, module: str, total: float, **steps) -> None:
    line = {"module": module, "device": "cpu", "children": 2, "total": total, **steps}
    with open(path / profile.LOG_NAME, "a") as handle:
        handle.write(__import__("json").dumps(line) + "\n")


def test_a_stopped_run_tables_only_the_gradings_it_finished(tmp_path):
    """profile.jsonl keeps every run's lines; a stopped run's table reads those after its start."""
    _logged(tmp_path, "earlier/01", 9.0, cases=9.0)
    start = profile.log_size(tmp_path)
    _logged(tmp_path, "m/01", 4.0, cases=3.0, judging=1.0, uncovered={"cases": 2.0})
    _logged(tmp_path, "m/01", 2.0, cases=1.0, judging=1.0)
    with open(tmp_path / profile.LOG_NAME, "a") as handle:
        handle.write('{"module": "m/01", "tot')  # cut by the stop
    table = profile.logged_table(tmp_path, start)
    row = next(line for line in table.splitlines() if line.startswith("m/01 "))
    assert row.split()[1:3] == ["2", "3.0"]  # two gradings, 3.0 s on average
    assert "earlier/01" not in table
    assert "m/01: 1.0 s a grading covered by no step, 1.0 s after cases" in table
    assert profile.log_size(tmp_path / "nowhere") == 0
    assert "nothing to profile" in profile.logged_table(tmp_path / "nowhere", 0)


def test_a_run_stopped_with_profile_prints_the_table_of_what_it_finished(tmp_path, monkeypatch, capsys):
    from grader import cli
    from grader.grade import runphase

    def stopped(submissions, results, modules, options, progress=True):
        _logged(results, "missing-elements/01-vector-add", 5.0, cases=5.0)
        raise KeyboardInterrupt

    monkeypatch.setattr(runphase, "run", stopped)
    monkeypatch.setattr(cli, "stop_on_signals", lambda: None)  # this test process keeps its handlers
    (tmp_path / "results").mkdir()
    code = cli.main(["run", str(tmp_path), "--results", str(tmp_path / "results"), "--profile"])
    said = capsys.readouterr().out
    assert code == 130 and "Stopped. Records written so far are kept" in said
    assert "missing-elements/01-vector-add" in said and "Where the run phase's wall time went" in said
