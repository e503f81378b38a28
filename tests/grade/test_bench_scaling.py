"""The scaling benchmark's class and its comparison of grades (the runs themselves need GPUs)."""

from __future__ import annotations

import json

import pytest

from grader.core.catalog import find_module
from grader.grade import bench_scaling


def test_the_class_mixes_complete_partial_and_failing_files_all_distinct(tmp_path):
    modules = [find_module("missing-elements/01-vector-add"), find_module("debugging/02-error-handling")]
    source, students = bench_scaling.build_class(tmp_path, 6, modules)
    files = sorted(source.glob("*/*/kernel.py"))
    assert len(files) == 12
    assert len({f.read_bytes() for f in files}) == 12  # no two share a record
    kinds = [kind for student in students for kind in student.kind.values()]
    assert "complete" in kinds and "stub" in kinds
    assert any(kind.startswith("partial: ") for kind in kinds)
    planted = next(
        source / s.name / a / "kernel.py" for s in students for a, k in s.kind.items() if k.startswith("partial: ")
    )
    module = next(m for m in modules if m.slug in str(planted))
    assert planted.read_text().split("\n", 1)[1] != (module.solution_dir / "kernel.py").read_text()


def _record(tmp_path, name, **changes):
    record = {
        "module": "missing-elements/01-vector-add",
        "submission_sha256": "ab",
        "graded_at": "2026-11-27T10:00:00",
        "cpu_seconds": {"total": 3.0},
        "totals": {"passed": 1, "total": 2, "score": 0.5},
        "cases": [{"name": "n=1", "visibility": "public", "passed": True, "kind": "", "message": "", "seconds": 0.1}],
        "performance": {"graded": True, "credit": 1.0, "ratio": 0.99, "reason": ""},
    }
    record.update(changes)
    folder = tmp_path / name
    (folder / "records" / "missing-elements" / "01-vector-add").mkdir(parents=True)
    (folder / "records" / "missing-elements" / "01-vector-add" / "ab-cd.json").write_text(json.dumps(record))
    (folder / "index.json").write_text(json.dumps({"totals": {}}))  # not a record
    return folder


def test_correctness_must_match_exactly_and_credit_is_compared_as_a_measurement(tmp_path):
    first = _record(tmp_path, "a")
    timed_again = _record(
        tmp_path,
        "b",
        graded_at="2026-11-28T11:00:00",
        cpu_seconds={"total": 9.0},
        performance={"graded": True, "credit": 0.96, "ratio": 1.02, "reason": "1.02 x the reference's speed"},
    )
    assert bench_scaling.grades(timed_again) == bench_scaling.grades(first)
    assert len(bench_scaling.grades(first)) == 1
    gap = bench_scaling.credit_gap(bench_scaling.credits(first), bench_scaling.credits(timed_again))
    assert abs(gap - 0.04) < 1e-9
    other_verdict = _record(
        tmp_path, "c", cases=[{"name": "n=1", "visibility": "public", "passed": False, "kind": "x", "message": "m"}]
    )
    assert bench_scaling.grades(other_verdict) != bench_scaling.grades(first)
    untimed = _record(tmp_path, "d", performance={"graded": False, "reason": "not graded"})
    assert bench_scaling.credit_gap(bench_scaling.credits(first), bench_scaling.credits(untimed)) is None
    assert bench_scaling.reference_ratios(timed_again) == []  # not every case passed


def test_the_steady_rate_leaves_out_the_start_and_the_tail():
    lines = ["run phase: 0/10 gradings (0%)"]
    done = [(1, "50 s"), (2, "1:50"), (5, "2:20"), (9, "3:00")]
    lines += [f"run phase: {n}/10 gradings ({10 * n}%), {t}, ETA 1:00" for n, t in done]
    lines += ["run phase: 10/10 gradings, 400.0 s"]
    # from 2 done at 110 s to 9 done at 180 s: 7 gradings in 70 s
    assert bench_scaling.steady_rate("\n".join(lines)) == 0.1
    assert bench_scaling.steady_rate("run phase: 10/10 gradings, 4.0 s") is None


def test_a_run_is_kind_gpus_and_optionally_in_turn():
    assert bench_scaling.parse_run("local:1") == ("local", 1, False)
    assert bench_scaling.parse_run("ray:4:in-turn") == ("ray", 4, True)
    for wrong in ("local", "ray:0", "slurm:2", "ray:two", "local:1:beside", "ray:2:in-turn:x"):
        try:
            bench_scaling.parse_run(wrong)
        except ValueError as error:
            assert "KIND:GPUS" in str(error) or "in-turn" in str(error)
        else:
            raise AssertionError(f"{wrong!r} was accepted")


def test_a_run_sees_its_own_gpus_and_cores_and_grades_in_turn_if_asked(tmp_path, monkeypatch):
    started = []

    def fake_popen(command, env, preexec_fn, **kwargs):
        started.append((command, env["CUDA_VISIBLE_DEVICES"], preexec_fn))

    monkeypatch.setattr(bench_scaling.subprocess, "Popen", fake_popen)
    pinned = []
    monkeypatch.setattr(bench_scaling.os, "sched_setaffinity", lambda pid, cores: pinned.append(cores))
    monkeypatch.setattr(bench_scaling, "cores_in_order", lambda: list(range(16)))  # a 16-core machine
    log = tmp_path / "log.txt"
    bench_scaling.start_one(tmp_path, tmp_path / "r", "ray", 2, 8, 4, log, in_turn=True, first_gpu=1)
    bench_scaling.start_one(tmp_path, tmp_path / "r", "local", 1, 8, 0, log)
    (ray_command, ray_gpus, ray_pin), (local_command, local_gpus, local_pin) = started
    assert "--in-turn" in ray_command and ray_command[ray_command.index("--ray") + 1] == "local"
    assert "--in-turn" not in local_command and "--ray" not in local_command
    assert (ray_gpus, local_gpus) == ("1,2", "0")
    ray_pin()
    assert pinned == [set(range(4, 12))]  # 4 cores for each of GPUs 1 and 2
    assert local_pin is None


def test_in_turn_on_the_command_line_turns_side_by_side_off(tmp_path, monkeypatch):
    from grader import cli
    from grader.grade import runphase

    seen = []

    def fake_run(submissions, results, modules, options, progress):
        seen.append(options)
        raise SystemExit(0)

    monkeypatch.setattr(runphase, "run", fake_run)
    for flags, expected in ((["--in-turn"], False), ([], None)):
        try:
            cli.main(["run", str(tmp_path), "--results", str(tmp_path / "r"), *flags])
        except SystemExit:
            pass
        assert seen[-1].side_by_side is expected


def test_runs_started_together_need_their_own_cores_and_at_most_one_ray_cluster():
    assert bench_scaling.parse_group("local:1+ray:2", pinned=True) == [("local", 1, False), ("ray", 2, False)]
    assert bench_scaling.parse_group("ray:4", pinned=False) == [("ray", 4, False)]
    with pytest.raises(ValueError, match="--cores-per-gpu"):
        bench_scaling.parse_group("local:1+ray:2", pinned=False)
    with pytest.raises(ValueError, match="at most one Ray run"):
        bench_scaling.parse_group("ray:1+ray:2", pinned=True)
    with pytest.raises(ValueError, match="KIND:GPUS"):
        bench_scaling.parse_group("local:1+", pinned=True)


def test_the_cpu_share_counts_only_the_runs_own_cores():
    before = {0: (100, 1000), 1: (100, 1000)}
    after = {0: (190, 1100), 1: (110, 1100)}  # core 0 busy 90 of 100 ticks, core 1 10 of 100
    assert bench_scaling.busy_share(before, after, {0}) == 0.9
    assert bench_scaling.busy_share(before, after, None) == 0.5
    assert bench_scaling.busy_share(before, after, {7}) is None
    now = bench_scaling.cpu_times()
    assert now and all(0 <= busy <= total for busy, total in now.values())


def _fake_cpus(root, threads_of_core):
    for cpu, (package, core) in threads_of_core.items():
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{package}\n")
        (topo / "core_id").write_text(f"{core}\n")


def test_runs_get_whole_physical_cores_where_each_core_has_two_threads(tmp_path):
    """Linux numbers the second thread of core k as k + cores: pinned by number, a 1-GPU run on
    CPUs 0-3 and a 2-GPU run on CPUs 0-7 of a 4-core machine would hold the same 4 cores."""
    _fake_cpus(tmp_path, {cpu: (0, cpu % 4) for cpu in range(8)})
    order = bench_scaling.cores_in_order(tmp_path)
    assert order == [0, 4, 1, 5, 2, 6, 3, 7]
    assert bench_scaling.topology(tmp_path) == "8 logical CPUs on 4 physical cores (2 thread(s) each)"
    one, two = bench_scaling.run_cores(2, 0, 1, order), bench_scaling.run_cores(2, 1, 2, order)
    assert one == {0, 4} and two == {1, 5, 2, 6} and not one & two  # whole cores, none shared
    assert bench_scaling.run_cores(0, 0, 1, order) == set()  # not pinned


def test_without_a_readable_topology_cores_go_in_numeric_order(tmp_path):
    for cpu in (0, 1, 2, 10):
        (tmp_path / f"cpu{cpu}").mkdir()
    assert bench_scaling.cores_in_order(tmp_path) == [0, 1, 2, 10]
    assert "physical cores unknown" in bench_scaling.topology(tmp_path)


def test_a_deadline_stops_the_runs_going_keeps_their_records_and_starts_no_more(tmp_path, monkeypatch, capsys):
    """On a machine lent for a fixed time: the run still going at the deadline is stopped as
    Ctrl-C stops it (so it writes what it finished), the next one is not started, and the table
    compares what the runs have."""
    import signal

    monkeypatch.setattr(bench_scaling, "build_class", lambda work, count, modules: (tmp_path / "source", []))
    monkeypatch.setattr(bench_scaling, "find_module", lambda name: name)
    signals, starts = [], []

    class Endless:  # a run that ends only when told to stop
        returncode = None

        def poll(self):
            return self.returncode

        def send_signal(self, sig):
            signals.append(sig)
            self.returncode = 130

        def kill(self):
            self.returncode = -9

    def start_one(source, results, kind, gpus, per_gpu, cores, log, in_turn=False, first_gpu=0):
        starts.append(kind)
        log.write_text("run phase: 0/4 gradings (0%)\n")
        return Endless()

    monkeypatch.setattr(bench_scaling, "start_one", start_one)
    argv = ["--modules", "x", "--runs", "local:1", "ray:2", "--work", str(tmp_path), "--deadline", "0.3"]
    bench_scaling.main(argv)
    out = capsys.readouterr().out
    assert starts == ["local"] and signals == [signal.SIGINT]
    assert "ray:2 not started: the deadline has passed" in out
    assert "| local pool | 1 | stopped at " in out
    assert json.loads((tmp_path / "summary.json").read_text())[0]["stopped"] is True


def test_a_stopped_run_is_compared_on_the_records_both_runs_have():
    full = bench_scaling.Run("local", 1, False, 10.0, None, {"a": "x", "b": "y"}, {}, [])
    stopped = bench_scaling.Run("ray", 2, False, 5.0, None, {"a": "x"}, {}, [], stopped=True)
    assert bench_scaling.compare(stopped, full) == ([], 0.0)
    finished = bench_scaling.Run("ray", 2, False, 5.0, None, {"a": "x"}, {}, [])
    assert bench_scaling.compare(finished, full) == (["b"], 0.0)  # a finished run lacking one differs


def test_reuse_reads_back_a_finished_run_and_grades_the_next_with_its_secret(tmp_path, monkeypatch, capsys):
    """A run that needs every GPU free can follow other work: a second call with ``--reuse`` reads
    the first call's finished run back (its time, its records) instead of running it again, and
    the run it starts meets the same hidden inputs (the first run's secret)."""
    from grader.grade import store

    monkeypatch.setattr(bench_scaling, "build_class", lambda work, count, modules: (tmp_path / "source", []))
    monkeypatch.setattr(bench_scaling, "find_module", lambda name: name)
    starts = []

    class Done:
        returncode = 0

        def poll(self):
            return 0

    def start_one(source, results, kind, gpus, per_gpu, cores, log, in_turn=False, first_gpu=0):
        starts.append((kind, (results / store.SECRET_FILE).read_text().strip()))
        log.write_text("run phase: 4/4 gradings (100%)\n")
        return Done()

    monkeypatch.setattr(bench_scaling, "start_one", start_one)
    work = ["--modules", "x", "--work", str(tmp_path)]
    bench_scaling.main([*work, "--runs", "local:1"])
    ((first_kind, secret),) = starts
    noted = json.loads((tmp_path / "results-local-1" / bench_scaling.RUN_FILE).read_text())
    assert first_kind == "local" and noted["stopped"] is False

    bench_scaling.main([*work, "--runs", "local:1", "ray:2", "--reuse"])
    assert starts[1:] == [("ray", secret)]  # local:1 not run again; ray:2 with its secret
    out = capsys.readouterr().out
    assert "local-1: read back from an earlier call" in out
    assert [run["run"] for run in json.loads((tmp_path / "summary.json").read_text())] == ["local:1", "ray:2"]

    bench_scaling.main([*work, "--runs", "local:1", "ray:2"])  # without --reuse: both run again
    assert [kind for kind, _ in starts[2:]] == ["local", "ray"]


def test_reuse_refuses_a_class_that_differs_from_the_earlier_calls(tmp_path, monkeypatch, capsys):
    students = [bench_scaling.Student("student-000", {"m": "complete"})]
    monkeypatch.setattr(bench_scaling, "build_class", lambda work, count, modules: (tmp_path / "source", students))
    monkeypatch.setattr(bench_scaling, "find_module", lambda name: name)
    (tmp_path / "class.json").write_text(json.dumps({"student-000": {"m": "stub"}}) + "\n")
    assert bench_scaling.main(["--modules", "x", "--work", str(tmp_path), "--runs", "local:1", "--reuse"]) == 2
    assert "this class differs from the earlier call's" in capsys.readouterr().err
