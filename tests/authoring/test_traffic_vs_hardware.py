"""The memory-traffic report against a GPU's counters (grader.authoring.traffic_vs_hardware): the
variant list, predictions under the interpreter at tiny shapes, the scaling to the full shape,
ncu's CSV and the comparison's arithmetic. Nothing here needs a GPU or ncu; the predictions run
under the interpreter only (on a GPU machine run this file with GRADER_DEVICE=cpu)."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from grader.authoring import traffic_vs_hardware as tvh
from grader.core import device, traffic
from grader.core.instrument import Access

interpreter_only = pytest.mark.skipif(
    device.is_cuda(), reason="the predictions run under the interpreter: use GRADER_DEVICE=cpu"
)


@pytest.fixture(scope="module")
def listed():
    return tvh.variants()


def test_the_list_covers_the_modules_with_fifty_variants_or_more(listed):
    names = [v.name for v in listed]
    assert len(listed) >= 50 and len(set(names)) == len(names)
    modules = {v.module for v in listed}
    assert modules >= {
        "optimization/01-tiling", "optimization/02-pipelining", "optimization/03-shared-memory",
        "optimization/04-warp-specialization", "optimization/05-advanced-optimizations",
        "missing-elements/01-vector-add", "missing-elements/02-matrix-mul", "missing-elements/03-softmax",
        "debugging/03-performance-profiling",
    }  # fmt: skip
    for family in tvh.FAMILIES:
        impls = {v.impl for v in listed if v.family == family}
        assert "reference" in impls and ("mistake" in impls) == (family.mistakes != "none"), family.key
        assert ("starting" in impls) == (family.module in tvh.STARTING_RUNS), family.key
    planted = [v for v in listed if v.mistake.startswith("planted bug")]
    assert len({v.mistake for v in planted}) == 3, "debugging/03's three planted performance bugs"
    assert {v.group for v in planted} == {f"{f.module}/{f.key}" for f in tvh.FAMILIES if f.key.startswith("bias_act")}
    # No mistake that reads or writes past a tensor: on a GPU it may fault and end the whole run.
    assert not any("past the end" in v.mistake or "mask compares with K" in v.mistake for v in listed)


def test_a_mistake_goes_to_the_functions_whose_code_reaches_it(listed):
    assert {v.family.api for v in listed if "x's column stride" in v.mistake} == {"transpose"}
    assert {v.family.api for v in listed if "b's column stride" in v.mistake and "tiling" in v.module} == {"matmul"}
    assert {v.family.api for v in listed if v.mistake == "vector sum ignores x's stride"} == {"vector_sum"}
    source = "def k():\n    x = 1\n\ndef launcher():\n    k()\n\ndef api():\n    launcher()\n\ndef other():\n    pass\n"
    assert tvh.mistake_apis(source, "x = 1", ("api", "other")) == ("api",)


def test_scaling_multiplies_by_elements_and_extrapolates_a_matmul_in_k():
    counts = dict.fromkeys(tvh.COUNTS, 0)
    elementwise = tvh.Family("m", "k", "f", "SPEC", {"shape": (1024, 64)}, ({"shape": (16, 64)},))
    scaled, how = tvh.scale_counts(elementwise, elementwise.points, [{**counts, "read_bytes": 100}])
    assert scaled["read_bytes"] == 6400 and "x 64" in how
    matmul = tvh.Family("m", "k", "f", "SPEC", {"mnk": (64, 64, 1024)}, tvh._mm(32, 32, 64), scaling="matmul")
    # 10 bytes that do not grow with K (the stores) and 1 byte per unit of K (the k-loop's loads)
    at = [{**counts, "read_bytes": 64, "write_bytes": 10}, {**counts, "read_bytes": 128, "write_bytes": 10}]
    scaled, _ = tvh.scale_counts(matmul, matmul.points, at)
    assert scaled["read_bytes"] == 4 * 1024 and scaled["write_bytes"] == 4 * 10


@interpreter_only
def test_the_scaled_prediction_equals_the_report_at_the_full_shape(tmp_path):
    """Exact for whole tiles: a transpose scaled by its elements, a matmul extrapolated in K and
    scaled in M, against the report counted at the full shape itself."""
    by_key = {(f.module, f.key): f for f in tvh.FAMILIES}
    transpose = replace(by_key["optimization/01-tiling", "transpose"], full={"shape": (128, 256)},
                        points=({"shape": (64, 128)},))  # fmt: skip
    matmul = replace(by_key["optimization/01-tiling", "matmul"], full={"mnk": (256, 128, 256)},
                     points=tvh._mm(128, 128, 64))  # fmt: skip
    for family in (transpose, matmul):
        variant = tvh.Variant("check", family, "reference")
        row = tvh.predict(variant, tmp_path)
        kernel = tvh.load(variant, tmp_path)
        spec = tvh._spec(family.module, family.spec_name)
        direct = tvh.counts_of(traffic.traffic_of(kernel, spec, tvh.case_of(family, family.full)))
        assert {name: row[name] for name in tvh.COUNTS} == direct, family.key


@interpreter_only
def test_every_family_and_a_sample_of_the_rest_predict_at_tiny_shapes(tmp_path, listed):
    sample = [v for v in listed if v.impl == "reference"]
    sample += [v for v in listed if v.impl == "starting" and v.family.key in ("matmul_bias_gelu", "bias_act")]
    sample += [v for v in listed if "planted-bug-line-375" in v.name or "stage-2-reads-one-chunk" in v.name]
    assert len({v.group for v in sample}) == len(tvh.FAMILIES)
    for variant in sample:
        row = tvh.predict(variant, tmp_path, tiny=True)
        assert "error" not in row, (variant.name, row.get("error"))
        assert row["kernels"] and row["read_bytes"] > 0 and row["write_bytes"] > 0, variant.name
        assert row["load_sectors_per_request"] >= row["load_ideal_per_request"] > 0, variant.name
    two_launches = tvh.predict(next(v for v in sample if "line-375" in v.name), tmp_path, tiny=True)
    reference = tvh.predict(next(v for v in sample if v.name.endswith("bias_act/reference")), tmp_path, tiny=True)
    assert two_launches["read_bytes"] > 1.5 * reference["read_bytes"], "y is read back: about twice the loads"


@interpreter_only
def test_predict_writes_a_json_line_per_variant(tmp_path, capsys):
    out = tmp_path / "pred.jsonl"
    chosen = ["01-tiling/transpose/starting", "01-vector-add/add/reference"]
    assert tvh.main(["--predict", str(out), "--tiny", *(arg for name in chosen for arg in ("--only", name))]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["variant"] for row in rows] == [
        "optimization/01-tiling/transpose/starting",
        "missing-elements/01-vector-add/add/reference",
    ]
    for row in rows:
        assert set(tvh.COUNTS) <= set(row) and "error" not in row
        assert row["kernels"] and "tiny shapes" in row["scaling"] and row["shape"]
        for name in tvh.COUNTS:
            assert isinstance(row[name], int) and row[name] >= 0
    transpose, add = rows
    assert transpose["load_sectors_per_request"] == 32.0, "the starting transpose reads a row apart per lane"
    assert transpose["store_sectors_per_request"] == add["load_sectors_per_request"] == 4.0
    assert "[2/2]" in capsys.readouterr().out


NCU_CSV = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
[profile 1] optimization/01-tiling/transpose/reference: profiled
==PROF== Profiling "traffic_vs_hardware_marker" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","traffic_vs_hardware_marker","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","0"
"0","4242","python3.12","127.0.0.1","traffic_vs_hardware_marker","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","2,144"
"1","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(64, 64, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","67.11"
"1","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(64, 64, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","67,108,864"
"1","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(64, 64, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","2,097,152"
"1","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(64, 64, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum","sector","2,097,152"
"1","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(64, 64, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","","131,072"
"1","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(64, 64, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_st.sum","","131,072"
"1","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(64, 64, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","61.25"
"2","4242","python3.12","127.0.0.1","traffic_vs_hardware_marker","1","7","(128, 1, 1)","(3, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","2,080"
"3","4242","python3.12","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>>(int, at::native::FillFunctor<float>, std::array<char *, 1>)","1","7","(128, 1, 1)","(2, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Kbyte","1.02"
"4","4242","python3.12","127.0.0.1","partial_sums_kernel","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Gbyte","0.134"
"4","4242","python3.12","127.0.0.1","partial_sums_kernel","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","32,768"
"4","4242","python3.12","127.0.0.1","partial_sums_kernel","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_st.sum","","n/a"
"5","4242","python3.12","127.0.0.1","total_kernel","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Kbyte","32.77"
"5","4242","python3.12","127.0.0.1","total_kernel","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","32"
==PROF== Disconnected from process 4242
"""  # noqa: E501


def test_ncu_csv_rows_become_kernels_in_base_units():
    kernels = tvh.parse_ncu_csv(NCU_CSV)
    assert [k["id"] for k in kernels] == [0, 1, 2, 3, 4, 5]
    transpose = kernels[1]
    assert transpose["kernel"] == "transpose_kernel" and transpose["grid"] == "(64, 64, 1)"
    metrics = transpose["metrics"]
    assert metrics["dram__bytes_read.sum"] == pytest.approx(67.11e6)
    assert metrics["dram__bytes_write.sum"] == 67_108_864
    assert metrics["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 131_072
    assert metrics["gpu__time_duration.sum"] == pytest.approx(61_250)
    assert kernels[3]["metrics"]["dram__bytes_write.sum"] == pytest.approx(1020)
    assert kernels[4]["metrics"]["dram__bytes_read.sum"] == pytest.approx(134e6)
    assert "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum" not in kernels[4]["metrics"], "n/a is no value"
    assert tvh.parse_ncu_csv("==PROF== no kernels were profiled\n") == []


def test_rows_after_a_marker_belong_to_its_variant_and_only_its_own_kernels_count():
    manifest = [
        {"variant": "a/transpose/reference", "number": 0, "triton_kernels": ["transpose_kernel"]},
        {"variant": "a/transpose/mistake:refused", "number": 1, "error": "CompilationError: no"},
        {"variant": "b/vector_sum/reference", "number": 2, "triton_kernels": ["partial_sums_kernel", "total_kernel"]},
    ]
    timing = [
        {"variant": "a/transpose/reference", "time_ms": 0.061},
        {"variant": "b/vector_sum/reference", "time_ms": 0.05},
    ]
    rows = {row["variant"]: row for row in tvh.measured_rows(manifest, tvh.parse_ncu_csv(NCU_CSV), timing)}
    first = rows["a/transpose/reference"]
    assert first["kernels"] == ["transpose_kernel"] and first["other_kernels"] == []
    assert first["dram_write_bytes"] == 67_108_864 and first["load_sectors_per_request"] == 16.0
    assert first["time_ms"] == 0.061 and first["ncu_time_ns"] == pytest.approx(61_250)
    summed = rows["b/vector_sum/reference"]  # the marker's grid (3, 1, 1) names variant number 2
    assert summed["kernels"] == ["partial_sums_kernel", "total_kernel"]
    assert summed["dram_read_bytes"] == pytest.approx(134e6 + 32.77e3)
    assert len(summed["other_kernels"]) == 1 and "FillFunctor" in summed["other_kernels"][0]
    assert summed["store_requests"] is None and summed["store_sectors_per_request"] is None
    assert rows["a/transpose/mistake:refused"]["error"].startswith("CompilationError")


def test_the_ncu_command_profiles_only_the_driver_ranges_with_the_metrics(tmp_path):
    command = tvh.ncu_command(tmp_path / "m.jsonl", tmp_path / "n.csv", ["01-tiling"])
    text = " ".join(command)
    assert command[0] == "ncu" and "--csv" in command and "--profile-from-start off" in text
    assert ",".join(tvh.METRICS) in command and "--print-units base" in text
    assert command[-4:] == ["profile", str(tmp_path / "m.jsonl"), "--only", "01-tiling"]
    extra = tvh.ncu_command(tmp_path / "m.jsonl", tmp_path / "n.csv", None, extra=("x__y.sum",))
    assert ",".join((*tvh.METRICS, "x__y.sum")) in extra and extra[-2:] == ["profile", str(tmp_path / "m.jsonl")]


def test_spearman_ranks_with_ties_and_the_ten_percent_share():
    assert tvh.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert tvh.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert tvh.ranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    # scipy.stats.spearmanr([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) is 0.8
    assert tvh.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # with ties: scipy.stats.spearmanr([1, 2, 2, 3], [1, 3, 2, 4]) is 0.9486832980505138
    assert tvh.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138)
    assert tvh.spearman([1, 1, 1], [1, 2, 3]) is None
    assert tvh.within(109, 100) and tvh.within(91, 100) and not tvh.within(111, 100) and not tvh.within(5, 0)
    assert tvh.share([True, False, True, True]) == "3 of 4 (75%)"


def _predicted(name, impl, read, write, load_sectors, load_requests, same=None):
    row = dict.fromkeys(tvh.COUNTS, 0)
    row.update(variant=name, group="m/f", impl=impl, read_bytes=read, write_bytes=write)
    row.update(minimum_bytes=read + write, load_sectors=load_sectors, load_requests=load_requests)
    row.update(load_ideal_sectors=4 * load_requests, store_sectors=4 * load_requests, store_requests=load_requests)
    row["store_ideal_sectors"] = 4 * load_requests
    row["load_sectors_per_request"] = load_sectors / load_requests
    row["store_sectors_per_request"] = 4.0
    if same is not None:
        row["same_as_reference"] = same
    return row


def _measured(name, read, write, load_sectors, load_requests, ms):
    return {"variant": name, "dram_read_bytes": read, "dram_write_bytes": write, "load_sectors": load_sectors,
            "load_requests": load_requests, "load_sectors_per_request": load_sectors / load_requests,
            "store_sectors": 4 * load_requests, "store_requests": load_requests / 4,
            "store_sectors_per_request": 16.0, "time_ms": ms}  # fmt: skip


def test_the_comparison_table_and_its_summary():
    predicted = [
        _predicted("m/f/reference", "reference", 100e6, 100e6, 4e6, 1e6),
        _predicted("m/f/starting", "starting", 100e6, 100e6, 32e6, 1e6),
        _predicted("m/f/mistake:same", "mistake", 100e6, 100e6, 4e6, 1e6, same=True),
        _predicted("m/f/mistake:missing", "mistake", 1e6, 1e6, 4e4, 1e4),
    ]
    measured = [
        _measured("m/f/reference", 102e6, 101e6, 4e6, 1e6 / 4, 0.07),
        _measured("m/f/starting", 150e6, 100e6, 32e6, 1e6, 0.40),
        _measured("m/f/mistake:same", 100e6, 99e6, 4e6, 1e6 / 4, 0.071),
    ]
    result = tvh.compare(predicted, measured)
    assert [p.name for p in result.pairs] == ["m/f/reference", "m/f/starting", "m/f/mistake:same"]
    assert result.unmatched == ["m/f/mistake:missing"]
    table = result.table()
    assert "m/f/starting" in table and "0.80" in table.splitlines()[3]  # 200 MB predicted for 250 MB measured
    summary = "\n".join(result.summary())
    assert "variants compared: 3" in summary
    assert "report's bytes 2 of 3 (67%)" in summary
    assert "only variants whose traffic differs from their reference's: 1 of 2 (50%)" in summary
    assert (
        "coalesced loads (predicted excess 1.0): sectors/request exact 0 of 2 (0%) at one element a lane, total "
        "sectors within ±10 % 2 of 2" in summary
    )
    assert "the prediction has no vector width" in summary, "a prediction file from before the model still compares"
    assert "Spearman rank correlation with measured time, sector bytes: 0.866 over 3" in summary
    assert "  m/f: starting kernel right (measured 5.71 x the time)" in summary


def test_the_driver_names_the_triton_kernels_of_a_loaded_file(tmp_path, listed):
    """Only these count towards a variant's measured totals (a fill of torch.zeros does not)."""
    variant = next(v for v in listed if v.name.endswith("vector_sum/reference"))
    names = tvh._jit_names(tvh.load(variant, tmp_path))
    assert {"partial_sums_kernel", "total_kernel"} <= set(names)
    assert tvh._owned("total_kernel", set(names)) and tvh._owned("total_kernel_0d1d2", set(names))
    assert not tvh._owned("vectorized_elementwise_kernel", set(names))


def test_a_gpu_run_measures_references_starting_kernels_and_mistakes_that_change_traffic(listed):
    predicted = [
        {"variant": "m/f/reference", "impl": "reference"},
        {"variant": "m/f/mistake:values-only", "impl": "mistake", "same_as_reference": True},
        {"variant": "m/f/mistake:strides", "impl": "mistake", "same_as_reference": False},
        {"variant": "m/f/mistake:refused", "impl": "mistake", "error": "CompilationError"},
    ]
    assert tvh.worth_measuring(predicted) == ["=m/f/reference", "=m/f/mistake:strides"]
    exact = tvh.select(["=optimization/01-tiling/transpose/reference"], listed)
    assert [v.name for v in exact] == ["optimization/01-tiling/transpose/reference"]
    assert len(tvh.select(["01-tiling/transpose/"], listed)) > 1


def test_compare_reads_the_measurements_of_several_runs(tmp_path, capsys):
    predicted = [
        _predicted("m/f/reference", "reference", 100e6, 100e6, 4e6, 1e6),
        _predicted("m/f/starting", "starting", 100e6, 100e6, 32e6, 1e6),
    ]
    pred, first, second = tmp_path / "pred.jsonl", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    pred.write_text("".join(json.dumps(row) + "\n" for row in predicted))
    first.write_text(json.dumps(_measured("m/f/reference", 102e6, 101e6, 4e6, 1e6 / 4, 0.07)) + "\n")
    second.write_text(json.dumps(_measured("m/f/starting", 150e6, 100e6, 32e6, 1e6, 0.40)) + "\n")
    assert tvh.main(["--compare", str(pred), str(first), str(second)]) == 0
    printed = capsys.readouterr().out
    assert "variants compared: 2 (left out, no match or an error: 0)" in printed
    assert "m/f: starting kernel right (measured 5.71 x the time)" in printed


def test_a_pass_that_faults_resumes_after_the_variant_and_records_it(tmp_path):
    """A driver that loses its CUDA context on "b" (its line written, then exit 3) and one that
    dies in "d" without a line: each later variant still gets its own run, and the two faults a line."""
    chosen = ["a", "b", "c", "d", "e"]
    calls = []

    def run_pass(part, left):
        calls.append(list(left))
        lines = []
        for name in left:
            if name == "d":
                break  # died without writing its line
            lines.append({"variant": name, "number": len(lines), "time_ms": 1.0})
            if name == "b" and part == 0:
                lines[-1] = {"variant": "b", "number": 1, "error": "AcceleratorError: illegal memory access",
                             "fault": True}  # fmt: skip
                break
        (tmp_path / f"timing-{part}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in lines))
        return 0 if len(lines) == len(left) else (tvh.FAULT_EXIT if part == 0 else -11)

    parts = tvh.resumed(chosen, run_pass, tmp_path, "timing", echo=lambda text: None)
    assert calls == [["a", "b", "c", "d", "e"], ["c", "d", "e"], ["e"]]
    rows = {row["variant"]: row for _, lines in parts for row in lines}
    assert set(rows) == set(chosen)
    assert rows["b"]["fault"] and "illegal memory access" in rows["b"]["error"]
    assert rows["d"]["fault"] and "died" in rows["d"]["error"] and rows["e"]["time_ms"] == 1.0
    assert [part for part, _ in parts] == [0, 1, 2]


def test_a_driver_that_cannot_start_is_not_tried_once_per_variant(tmp_path):
    calls = []

    def run_pass(part, left):
        calls.append(part)
        return 1

    parts = tvh.resumed(["a", "b", "c", "d"], run_pass, tmp_path, "timing", echo=lambda text: None)
    assert calls == [0, 1]
    rows = [row for _, lines in parts for row in lines]
    assert [row["variant"] for row in rows] == ["a", "b", "c", "d"] and all("error" in row for row in rows)


def test_a_cuda_fault_is_told_from_an_ordinary_error():
    assert tvh.is_device_fault(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not tvh.is_device_fault(ValueError("BLOCK_K must be a power of 2"))


def test_a_faulted_timing_line_leaves_the_counters_and_compare_goes_on_without_a_time(capsys, tmp_path):
    manifest = [{"variant": "a/transpose/reference", "number": 0, "triton_kernels": ["transpose_kernel"]}]
    timing = [{"variant": "a/transpose/reference", "number": 0, "error": "AcceleratorError: x", "fault": True}]
    row = tvh.measured_rows(manifest, tvh.parse_ncu_csv(NCU_CSV), timing)[0]
    assert row["time_ms"] is None and row["time_fault"] and row["dram_write_bytes"] == 67_108_864
    predicted = [
        _predicted("m/f/reference", "reference", 100e6, 100e6, 4e6, 1e6),
        _predicted("m/f/starting", "starting", 100e6, 100e6, 32e6, 1e6),
        _predicted("m/f/mistake:other", "mistake", 100e6, 50e6, 4e6, 1e6, same=False),
    ]
    measured = [
        {**_measured("m/f/reference", 102e6, 101e6, 4e6, 1e6 / 4, 0.07), "time_ms": None, "time_fault": True},
        _measured("m/f/starting", 150e6, 100e6, 32e6, 1e6, 0.40),
        _measured("m/f/mistake:other", 100e6, 50e6, 4e6, 1e6 / 4, 0.05),
    ]
    pred, meas = tmp_path / "pred.jsonl", tmp_path / "meas.jsonl"
    pred.write_text("".join(json.dumps(row) + "\n" for row in predicted))
    meas.write_text("".join(json.dumps(row) + "\n" for row in measured))
    assert tvh.main(["--compare", str(pred), str(meas)]) == 0
    printed = capsys.readouterr().out
    assert "over 2" in printed and "m/f: nothing to rank" not in printed


def test_reads_and_writes_are_judged_apart_and_a_write_back_residue_is_named():
    coalesced = _predicted("m/f/reference", "reference", 1000e6, 1000e6, 4e6, 1e6)
    # reads exact, writes 30 MB short: lines still dirty in L2 when the kernel ended
    pair = tvh.Pair(coalesced, _measured("m/f/reference", 1001e6, 930e6, 4e6, 1e6 / 4, 1.0))
    assert pair.caches_dominate() is None and pair.reads_agree() and pair.writes_agree()
    small = tvh.Pair(_predicted("m/f/reference", "reference", 64e6, 64e6, 4e6, 1e6),
                     _measured("m/f/reference", 64e6, 42e6, 4e6, 1e6 / 4, 1.0))  # fmt: skip
    assert not small.writes_agree() and small.writes_agree(tvh.L2_BYTES)
    assert not tvh.Pair(coalesced, _measured("m/f/reference", 1001e6, 500e6, 4e6, 1e6, 1.0)).writes_agree(tvh.L2_BYTES)
    # uncoalesced loads (8 sectors where 4 would do): DRAM reads anywhere between bytes and sectors
    strided = _predicted("m/f/starting", "starting", 100e6, 100e6, 8e6, 1e6)
    assert "uncoalesced" in tvh.Pair(strided, _measured("m/f/starting", 250e6, 100e6, 8e6, 1e6, 1.0)).caches_dominate()
    assert tvh.Pair(strided, _measured("m/f/starting", 250e6, 100e6, 8e6, 1e6, 1.0)).reads_agree()
    assert not tvh.Pair(strided, _measured("m/f/starting", 300e6, 100e6, 8e6, 1e6, 1.0)).reads_agree()
    matmul = {**coalesced, "shape": {"mnk": (64, 64, 64)}}
    assert tvh.Pair(matmul, _measured("m/f/reference", 1e6, 1e6, 4e6, 1e6, 1.0)).caches_dominate().startswith("matmul")


@interpreter_only
def test_a_mistake_that_reads_past_its_tensor_is_named_and_not_measured(tmp_path, listed):
    """b's row stride taken as N reads past the end of a transposed b: on an H100 it faulted."""
    name = "optimization/02-pipelining/matmul-b-transposed/mistake:b-s-row-stride-assumed-to-be-n"
    row = tvh.predict(tvh.select([f"={name}"], listed)[0], tmp_path, tiny=True)
    assert "past the end of `b_ptr`" in row["out_of_bounds"]
    reference = tvh.predict(tvh.select([name.split("mistake:")[0] + "reference"], listed)[0], tmp_path, tiny=True)
    assert "out_of_bounds" not in reference
    assert tvh.worth_measuring([reference, row]) == [f"={reference['variant']}"]


def test_measured_shapes_of_element_wise_families_dwarf_the_l2():
    """Outputs of half a gigabyte or more: the dirty lines a write-back L2 of 50 MiB keeps at the
    end are a few per cent of the writes, not a third (as at 64 MB)."""
    for family in tvh.FAMILIES:
        if family.scaling == "elements" and family.api != "vector_sum":
            size = tvh._elements(family.full) * (2 if family.dtype == "float16" else 4)
            assert size >= 10 * tvh.L2_BYTES, family.key


@triton.jit
def _gather_rows(x_ptr, y_ptr, STEP: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets * STEP))


def _vector_counts(x, step=1, block=1024, warps=4):
    """(load, store) sectors per request at the GPU's width, and the report's, for a copy of
    ``x[::step]`` in blocks of ``block`` elements on ``warps`` warps."""
    y = torch.empty(x.numel() // step, dtype=x.dtype)
    with tvh.vector_model() as model:
        report = traffic.measure(lambda: _gather_rows[(y.numel() // block,)](x, y, STEP=step, BLOCK=block,
                                                                              num_warps=warps))  # fmt: skip
    assert torch.equal(y, x[::step])
    counts = model.counts()
    per_request = {kind: counts[f"{kind}_vector_sectors"] / counts[f"{kind}_vector_requests"]
                   for kind in ("load", "store")}  # fmt: skip
    return per_request, {kind: report.sectors_per_access(kind) for kind in ("load", "store")}


@interpreter_only
@pytest.mark.parametrize("dtype, lane_elements", [(torch.float32, 4), (torch.float16, 8)])
def test_a_coalesced_row_takes_sixteen_sectors_a_request_at_the_gpus_width(dtype, lane_elements):
    """16 bytes a lane: 4 fp32 or 8 fp16 elements, 512 bytes a warp-wide request, 16 sectors
    (the report's one element a lane counts 4 for fp32, 2 for fp16, and 4 or 8 times the requests)."""
    vector, report = _vector_counts(torch.arange(4096, dtype=dtype))
    assert vector == {"load": 16.0, "store": 16.0}
    assert report == {"load": 16.0 / lane_elements, "store": 16.0 / lane_elements}


@interpreter_only
@pytest.mark.parametrize("step", [2, 8])
def test_a_strided_load_keeps_one_element_a_lane(step):
    """Lanes 8 or 32 bytes apart: no two elements of a lane are neighbours, so no vector; the
    load's sectors per request are the report's (8 or 32), the contiguous store's are 16."""
    vector, report = _vector_counts(torch.arange(4096 * step, dtype=torch.float32), step=step)
    assert vector["load"] == report["load"] == 4.0 * step
    assert vector["store"] == 16.0


@interpreter_only
def test_the_lane_width_follows_the_launchs_warps_and_the_alignment():
    """256 fp32 elements on 8 warps give a lane one element (4 sectors a request), on 2 warps four
    (16); a row one element off the 16-byte boundary gets no vector (5 sectors: the report's)."""
    x = torch.arange(4097, dtype=torch.float32)
    assert _vector_counts(x[:4096], block=256, warps=8)[0] == {"load": 4.0, "store": 4.0}
    assert _vector_counts(x[:4096], block=256, warps=2)[0] == {"load": 16.0, "store": 16.0}
    vector, report = _vector_counts(x[1:])
    assert vector["load"] == report["load"] == 5.0 and vector["store"] == 16.0


def test_a_block_held_by_several_warps_is_loaded_by_each():
    """A scalar load on 4 warps is 4 requests of 1 sector; its store is one (the others are masked)."""
    model = tvh.VectorModel(warps=4)
    for kind in ("load", "store"):
        model.add(Access(kind, (0, 0, 0), np.array([4096], dtype=np.uint64), np.array([True]), 4, "k", "f", 1))
    counts = model.counts()
    assert (counts["load_vector_requests"], counts["load_vector_sectors"]) == (4, 4)
    assert (counts["store_vector_requests"], counts["store_vector_sectors"]) == (1, 1)


def test_the_summary_counts_sectors_per_request_at_the_gpus_width_and_names_the_misses():
    def row(name, sectors, requests, vector_sectors, vector_requests, limit="16 bytes"):
        """A coalesced fp32 row: 4 sectors a request at one element a lane, 16 at 4 elements."""
        predicted = _predicted(name, "reference", 100e6, 100e6, sectors, requests)
        predicted.update(
            load_vector_sectors=vector_sectors,
            load_vector_requests=vector_requests,
            store_vector_sectors=4 * requests,
            store_vector_requests=requests / 4,
            load_vector_sectors_per_request=vector_sectors / vector_requests,
            store_vector_sectors_per_request=16.0,
            lane_bytes={"load": [[16, limit]], "store": []},
        )
        return predicted

    predicted = [
        row("m/f/reference", 4e6, 1e6, 4e6, 1e6 / 4),  # fp32, 4 elements a lane: 16 sectors a request
        row("m/g/reference", 4e6, 1e6, 4e6, 1e6 / 4),  # its tiles copied by TMA: the LSU sees few loads
        row("m/h/reference", 4e6, 1e6, 4e6, 1e6 / 4, "contiguity or alignment"),  # the GPU narrows them further
    ]
    measured = [
        _measured("m/f/reference", 100e6, 100e6, 4e6, 1e6 / 4, 0.1),
        _measured("m/g/reference", 100e6, 100e6, 2e3, 1e3, 0.1),
        _measured("m/h/reference", 100e6, 100e6, 4e6, 1e6 / 2, 0.1),
    ]
    summary = "\n".join(tvh.compare(predicted, measured).summary())
    assert (
        "coalesced loads (predicted excess 1.0): sectors/request exact 0 of 3 (0%) at one element a lane, 1 of 3 "
        "(33%) at the width the GPU issues" in summary
    )
    assert "    1 with under half the predicted sectors in the LSU counters (TMA or cp.async" in summary
    assert "    1 with lanes narrowed by unaligned or strided rows" in summary and "m/h/reference" in summary
    assert (
        "coalesced stores (predicted excess 1.0): sectors/request exact 0 of 3 (0%) at one element a lane, 3 of 3 "
        "(100%) at the width the GPU issues" in summary
    )
    table = tvh.compare(predicted, measured).table().splitlines()
    assert table[2].split()[-7:-1] == ["4.0", "16.0", "16.0", "4.0", "16.0", "16.0"]  # before the time


def _with_roofline(row, programs, **flops):
    return {**row, **dict.fromkeys(tvh.DOT_COUNTS, 0), **flops, "programs_launched": {"at_full_shape": programs}}


def test_one_program_walking_a_vector_is_predicted_slower_than_many_moving_the_same_bytes():
    walker = tvh.Pair(_with_roofline(_predicted("m/f/starting", "starting", 128e6, 4, 4e6, 1e6), 1), {})
    spread = tvh.Pair(_with_roofline(_predicted("m/f/reference", "reference", 128e6, 4, 4e6, 1e6), 8192), {})
    assert walker.predicted_sector_bytes() == spread.predicted_sector_bytes()
    # 8e6 sectors of 32 bytes: at 3.35 TB/s for the many, at a multiprocessor's share (1/132) for one
    assert spread.roofline_ms() == pytest.approx(1e3 * 256e6 / 3.35e12)
    assert walker.roofline_ms() == pytest.approx(132 * spread.roofline_ms())
    assert walker.roofline_ms(programs=False) == spread.roofline_ms(), "without the program count, a tie"
    assert tvh.ROOFLINE.bandwidth(66) == pytest.approx(3.35e12 / 2) and tvh.ROOFLINE.bandwidth(1000) == 3.35e12


def test_a_matmul_sized_flop_count_makes_a_variant_compute_bound():
    row = _predicted("m/f/reference", "reference", 100e6, 30e6, 4e6, 1e6)
    bytes_only = tvh.Pair(_with_roofline(row, 132), {})
    matmul = tvh.Pair(_with_roofline(row, 132, dot_flops=2 * 4096**3), {})
    fp32 = tvh.Pair(_with_roofline(row, 132, dot_flops_ieee=2 * 4096**3), {})
    assert bytes_only.roofline_ms() == pytest.approx(1e3 * 32 * 8e6 / 3.35e12)
    assert matmul.roofline_ms() == pytest.approx(1e3 * 2 * 4096**3 / 989.4e12)
    assert matmul.roofline_ms() > 1.5 * bytes_only.roofline_ms()
    assert matmul.roofline_ms(flops=False) == bytes_only.roofline_ms()
    assert fp32.roofline_ms() == pytest.approx(matmul.roofline_ms() * 989.4 / 66.9), "the CUDA cores' peak"
    assert tvh.Pair(row, {}).roofline_ms() is None, "a prediction without program counts has no roofline"


def _dot_kernel():
    @triton.jit
    def dot_kernel(a, b, c, N: tl.constexpr):
        i = tl.arange(0, N)
        x = tl.load(a + i[:, None] * N + i[None, :])
        y = tl.load(b + i[:, None] * N + i[None, :])
        tl.store(c + i[:, None] * N + i[None, :], tl.dot(x, y))

    return dot_kernel


@interpreter_only
def test_dot_flops_are_counted_by_the_operands_width():
    dot_kernel = _dot_kernel()
    a16, b16 = torch.ones(16, 16, dtype=torch.float16), torch.ones(16, 16, dtype=torch.float16)
    with tvh.dot_counter() as flops:
        dot_kernel[(3,)](a16, b16, torch.empty(16, 16, dtype=torch.float32), N=16)
    assert flops == {"dot_flops": 3 * 2 * 16**3, "dot_flops_tf32": 0, "dot_flops_ieee": 0}
    a32, b32 = a16.float(), b16.float()
    with tvh.dot_counter() as flops:
        dot_kernel[(1,)](a32, b32, torch.empty(16, 16), N=16)
    assert flops["dot_flops_tf32"] == 2 * 16**3 and flops["dot_flops"] == 0


@interpreter_only
def test_the_programs_at_the_full_shape_follow_the_grid(listed):
    from grader.core.loading import load_kernel

    walker = next(v for v in listed if v.name == "optimization/03-shared-memory/vector_sum/starting")
    spread = next(v for v in listed if v.name == "optimization/03-shared-memory/vector_sum/reference")
    spec = tvh._spec(walker.family.module, walker.family.spec_name)
    point = {"n": 8192}
    starting = tvh.programs_at_full(load_kernel(tvh._module(walker.module), "learner"), spec, walker.family, point)
    assert starting["at_prediction"] == starting["at_full_shape"] == 1, "one program walks the vector at any n"
    reference = tvh.programs_at_full(load_kernel(tvh._module(spread.module), "solutions"), spec, spread.family, point)
    full = spread.family.full["n"]
    assert reference["at_full_shape"] == reference["at_prediction"] * full // point["n"] > tvh.GPU_SMS
    persistent = next(v for v in listed if v.name == "optimization/05-advanced-optimizations/matmul/reference")
    kernel = load_kernel(tvh._module(persistent.module), "solutions")
    spec = tvh._spec(persistent.module, persistent.family.spec_name)
    launched = tvh.programs_at_full(kernel, spec, persistent.family, persistent.family.points[0])
    assert launched["at_full_shape"] == tvh.GPU_SMS, "one program per multiprocessor of the GPU, not the interpreter's"


def test_the_summary_prints_the_roofline_beside_the_bytes():
    predicted = [
        _with_roofline(_predicted("m/f/reference", "reference", 100e6, 100e6, 4e6, 1e6), 4096),
        _with_roofline(_predicted("m/f/starting", "starting", 100e6, 100e6, 4e6, 1e6), 1),
        _with_roofline(_predicted("m/f/mistake:more", "mistake", 200e6, 200e6, 8e6, 1e6), 4096),
    ]
    measured = [
        _measured("m/f/reference", 102e6, 101e6, 4e6, 1e6 / 4, 0.07),
        _measured("m/f/starting", 100e6, 100e6, 4e6, 1e6, 9.0),
        _measured("m/f/mistake:more", 200e6, 200e6, 8e6, 1e6, 0.14),
    ]
    summary = "\n".join(tvh.compare(predicted, measured).summary())
    assert "Spearman rank correlation with measured time, sector bytes: 0.000 over 3" in summary
    assert "Spearman rank correlation with measured time, roofline: max(that, dot FLOPs / peak): 1.000 over 3" in (
        summary
    )
    assert "sector bytes / DRAM bandwidth: 0.000 over 3" in summary
    assert "m/f/starting: predicted" in summary and "; 1 programs" in summary
    old = [{k: v for k, v in row.items() if k != "programs_launched"} for row in predicted]
    assert "roofline: the prediction file has no program counts" in "\n".join(tvh.compare(old, measured).summary())
