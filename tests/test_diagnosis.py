import torch

from grader.core.diagnosis import diagnose

ATOL, RTOL = 1e-6, 1e-6


def test_matching_outputs_have_no_diagnosis():
    ref = torch.randn(100, dtype=torch.float64)
    assert diagnose(ref.float(), ref, 1e-5, 1e-5) is None


def test_unwritten_tail_is_called_a_tail():
    ref = torch.randn(1000, dtype=torch.float64)
    out = ref.clone()
    out[992:] = float("nan")
    text = diagnose(out, ref, ATOL, RTOL)
    assert "8 of 1000" in text and "index (992,)" in text
    assert "never written" in text and "last, partial block is" in text and "triton.cdiv" in text


def test_every_other_row_points_at_the_stride():
    ref = torch.randn(16, 32, dtype=torch.float64)
    out = ref.clone()
    out[1::2] += 1
    assert "every other row" in diagnose(out, ref, ATOL, RTOL)


def test_columns_past_the_block_point_at_the_column_mask():
    ref = torch.randn(8, 100, dtype=torch.float64)
    out = ref.clone()
    out[:, 64:] = 0
    assert "only columns 64..99" in diagnose(out, ref, ATOL, RTOL)


def test_unwritten_last_rows_point_at_the_grid():
    ref = torch.randn(10, 4, dtype=torch.float64)
    out = ref.clone()
    out[7:] = float("nan")
    assert "only rows 7..9 are wrong, and never written: the grid" in diagnose(out, ref, ATOL, RTOL)


def test_wrong_later_rows_point_at_the_row_offset():
    ref = torch.randn(10, 4, dtype=torch.float64)
    out = ref.clone()
    out[1:] = 0
    assert "rows before are right: the row offset" in diagnose(out, ref, ATOL, RTOL)


def test_nothing_written():
    ref = torch.randn(5, 5, dtype=torch.float64)
    assert "nothing was written" in diagnose(torch.full((5, 5), float("nan")), ref, ATOL, RTOL)


def test_wrong_shape_and_largest_error():
    ref = torch.zeros(4, 4, dtype=torch.float64)
    assert "should have shape (4, 4)" in diagnose(torch.zeros(4, 5), ref, ATOL, RTOL)
    out = ref.clone()
    out[2, 3] = 0.5
    text = diagnose(out, ref, ATOL, RTOL)
    assert "Largest error 0.5" in text and "index (2, 3)" in text


def test_inf_where_reference_is_finite_is_wrong():
    ref = torch.ones(3, dtype=torch.float64)
    out = ref.clone()
    out[1] = float("inf")
    assert "1 of 3" in diagnose(out, ref, ATOL, RTOL)


def test_the_sliced_check_on_a_device_agrees_with_the_full_diagnosis(monkeypatch):
    # On a GPU the grader decides right/wrong where the reference lives, in slices; it must say
    # "right" exactly when the full diagnosis finds nothing.
    from grader.core import diagnosis

    monkeypatch.setattr(diagnosis, "_CHUNK", 7)
    generator = torch.Generator().manual_seed(3)
    want = torch.randn(10, 9, generator=generator)
    want[0, 0], want[1, 1], want[2, 2] = float("nan"), float("inf"), -float("inf")
    variants = {"exact": want.clone()}
    for index, value in {"off": 0.5, "nan": float("nan"), "inf": float("inf"), "tail": 1e-3}.items():
        got = want.clone()
        got.view(-1)[-1 if index == "tail" else 40] += value
        variants[index] = got
    lost_nan = want.clone()
    lost_nan[0, 0] = 0.0
    variants["lost nan"] = lost_nan
    for name, got in variants.items():
        expected = diagnosis.diagnose(got, want, 1e-2, 1e-2) is None
        assert diagnosis._all_close_on(torch.device("cpu"), got, want, 1e-2, 1e-2) == expected, name
    assert diagnosis._all_close_on(torch.device("cpu"), variants["exact"], want, 1e-2, 1e-2)
    assert not diagnosis._all_close_on(torch.device("cpu"), variants["tail"], want, 0.0, 0.0)


def test_a_nan_that_pytorch_keeps_and_the_kernel_drops_is_named():
    """ReLU written as tl.maximum(x, 0.0) gives 0 where x is NaN: the wrong elements are exactly
    the NaN results, which is no rounding (the relative error is NaN) and no missing store."""
    ref = torch.tensor([1.0, float("nan"), 3.0, float("nan"), 0.0])
    out = torch.tensor([1.0, 0.0, 3.0, 0.0, 0.0])
    message = diagnose(out, ref, 1e-5, 1e-5)
    assert "dropped the NaN" in message and "tl.where(x < 0, 0, x)" in message
    assert "rounding" not in message


# ---- crashes ------------------------------------------------------------------------------

def test_a_memory_crash_points_first_to_the_interpreters_memory_checker():
    """Most learners have no GPU: the command that names the faulty line on a CPU comes first, and
    compute-sanitizer only as the GPU's route."""
    from grader.core import crashes

    text = crashes.explain(-11, "missing-elements/01-vector-add")
    assert "check every mask" in text and "make check M=missing-elements/01-vector-add" in text
    assert text.index("make check") < text.index("compute-sanitizer")
    assert "On a GPU, `python -m grader sanitize kernel.py`" in text
    assert "compute-sanitizer python kernel.py" not in text
    assert "make check M=<track>/<module>" in crashes.check_message(139)
    assert crashes.explain(1) == "" and crashes.explain(-15) == ""  # no memory error: nothing to say


def test_an_error_after_memory_damage_is_called_a_consequence_not_a_mistake():
    from grader.core import crashes

    raised = "add() raised TypeError: new_empty(): argument 'size' (position 1) must be tuple of ints"
    text = crashes.follow_on(raised, -6)
    assert text.startswith(raised) and "probably a consequence of the memory error" in text
    assert "not a separate mistake" in text and "TypeError" in text.splitlines()[-1]
    assert crashes.follow_on(raised, 0) == raised  # a clean exit: the error is the learner's own
    assert crashes.follow_on("output: 3 of 8 elements are wrong", -11).startswith("output: 3 of 8")
    assert crashes.follow_on("output: 3 of 8 elements are wrong", -11) == "output: 3 of 8 elements are wrong"
    assert "consequence of the same memory error" in crashes.check_message(-11)
