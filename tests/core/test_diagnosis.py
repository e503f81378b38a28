import pytest
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


def test_an_unwritten_end_of_a_matrix_also_names_a_mask_of_the_wrong_dimension():
    """A transpose whose 2-D mask tests rows against the number of columns leaves the end of its
    output unwritten, a pattern that in 1-D means overlapping programs: both causes are named."""
    ref = torch.randn(300, 33, dtype=torch.float64)
    out = ref.clone()
    out.view(-1)[1120:] = float("nan")
    text = diagnose(out, ref, ATOL, RTOL)
    assert "start offsets are not multiplied" in text and "uses one dimension where the other is meant" in text
    flat = torch.randn(9900, dtype=torch.float64)
    wrong = flat.clone()
    wrong[1120:] = float("nan")
    assert "one dimension where the other" not in diagnose(wrong, flat, ATOL, RTOL), "1-D: no tiles"


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
        assert diagnosis.matches(got, want, 1e-2, 1e-2) == expected, name
    assert diagnosis.matches(variants["exact"], want, 1e-2, 1e-2)
    assert not diagnosis.matches(variants["tail"], want, 0.0, 0.0)


def test_a_nan_that_pytorch_keeps_and_the_kernel_drops_is_named():
    """ReLU written as tl.maximum(x, 0.0) gives 0 where x is NaN: the wrong elements are exactly
    the NaN results, which is no rounding (the relative error is NaN) and no missing store."""
    ref = torch.tensor([1.0, float("nan"), 3.0, float("nan"), 0.0])
    out = torch.tensor([1.0, 0.0, 3.0, 0.0, 0.0])
    message = diagnose(out, ref, 1e-5, 1e-5)
    assert "dropped the NaN" in message and "tl.where(x < 0, 0, x)" in message
    assert "rounding" not in message


# ---- rows that go wrong by what their values hold ------------------------------------------


def _attention_like(seed: int = 0) -> torch.Tensor:
    """A (batch, heads, rows, features) reference, like attention's output."""
    return torch.randn(1, 2, 64, 16, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _scattered_rows(generator: torch.Generator) -> list[tuple[int, int]]:
    """(head, row) pairs at random rows from 16 on: the rows an online softmax without its rescale
    gets wrong (a row that fits one key block is right; a longer one only where a later block
    raised its maximum)."""
    rows = 16 + torch.randperm(48, generator=generator)[:20]
    return [(head, int(row)) for head in (0, 1) for row in rows[head * 10 : (head + 1) * 10]]


def test_rows_off_by_a_factor_of_their_own_point_at_a_running_sum_not_rescaled():
    """A running sum l not rescaled when the maximum grows is too large where a later block raised
    the maximum: o = acc / l is those rows times a factor below 1, the other rows right. Not a row
    offset, and not how a program finds its row."""
    generator = torch.Generator().manual_seed(1)
    ref = _attention_like()
    out = ref.clone()
    for head, row in _scattered_rows(generator):
        out[0, head, row] *= 0.3 + 0.6 * float(torch.rand(1, generator=generator))
    text = diagnose(out.float(), ref, 1e-5, 1e-4, "o")
    assert "each of the 20 wrong rows is the right row times a factor of its own" in text
    assert "running sum carried from one block of the row to the next is not rescaled" in text
    assert "row offset" not in text and "program_id" not in text
    everywhere = ref * torch.linspace(0.5, 0.9, 128, dtype=torch.float64).reshape(1, 2, 64, 1)
    assert "each row is the right row times a factor of its own (0.5 to 0.9)" in diagnose(everywhere, ref, 1e-5, 1e-4)


def test_rows_all_off_by_about_one_factor_point_at_a_count():
    """A mean of squares divided by BLOCK_N instead of N (RMSNorm): every row is scaled by about
    the same factor, which float16 rounding keeps from being exactly one."""
    ref = _attention_like(5)
    jitter = 1 + 2e-4 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    text = diagnose((ref * 1.15 * jitter).half(), ref, 2e-3, 2e-3)
    assert "each row is the right row times about the same factor (1.15)" in text
    assert "divide by the row length N, not by the block size" in text and "running sum" not in text


def test_scattered_wrong_rows_point_at_a_value_carried_from_block_to_block():
    """An accumulator not rescaled: the rows where a later block raised the maximum are wrong (not
    by a factor), scattered, none in the first block of rows; rows wrong by their position keep
    the message about how a program finds its row."""
    generator = torch.Generator().manual_seed(2)
    ref = _attention_like()
    out = ref.clone()
    for head, row in _scattered_rows(generator):
        out[0, head, row] += torch.randn(16, generator=generator, dtype=torch.float64)
    text = diagnose(out, ref, 1e-5, 1e-4, "o")
    assert "20 of the 128 rows are wrong, scattered in no regular order (none in the first" in text
    assert "rows of any matrix)" in text and "value carried from one block of the row to the next" in text
    assert "row offset" not in text and "program_id" not in text
    by_position = ref.clone()
    by_position[0, :, 4:8] += 1.0  # the same rows of each matrix: their position decides
    assert "whole row(s) are wrong, the others right: check how a program finds its row" in diagnose(
        by_position, ref, 1e-5, 1e-4
    )


def test_wrong_rows_from_a_block_boundary_on_name_both_causes():
    """Every row from 32 on wrong: the programs after the first start at the wrong row, or (causal
    attention) the rows longer than one block lose a carried value; not "the row offset"."""
    ref = torch.randn(64, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    out = ref.clone()
    out[32:] += torch.randn(32, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    text = diagnose(out, ref, 1e-5, 1e-4)
    assert "only rows 32..63 are wrong, the first 32 right, and 32 is a block boundary" in text
    assert "pid * BLOCK_M" in text and "the rows longer than one block are wrong" in text
    assert "row offset is probably wrong" not in text


# ---- across the cases of a run -------------------------------------------------------------


def _outcomes(*cases_and_verdicts, row_wise=False):
    from grader.core.cases import Case
    from grader.core.diagnosis import Outcome

    return [
        Outcome(Case(params, label=label), passed, row_wise=row_wise) for params, label, passed in cases_and_verdicts
    ]


def test_failing_exactly_past_one_k_step_names_the_accumulator():
    """acc = tl.dot(a, b) keeps only the last K-step: every case with K larger than one step
    fails, whatever M and N (the passing K = 45 is a case whose block along K is larger)."""
    from grader.core.diagnosis import across_cases

    text = across_cases(
        _outcomes(
            ({"mnk": (1, 1, 1)}, "1 x 1 x 1", True),
            ({"mnk": (16, 16, 16)}, "one tile", True),
            ({"mnk": (33, 65, 17)}, "odd sizes", True),
            ({"mnk": (3, 600, 24)}, "short and wide", True),
            ({"mnk": (37, 29, 45)}, "a transposed", True),
            ({"mnk": (48, 40, 100)}, "K not a multiple", False),
            ({"mnk": (300, 8, 40)}, "tall and skinny", False),
            ({"mnk": (257, 300, 65)}, "several tiles", False),
            ({"mnk": (31, 47, 53)}, "sliced", False),
        )
    )
    assert "every case that fails is one where K is larger than 24" in text
    assert "acc += tl.dot(a, b)" in text and "running maximum or sum not rescaled" in text
    exactly = across_cases(
        _outcomes(({"n": 100}, "", True), ({"n": 1024}, "", True), ({"n": 1025}, "", False), ({"n": 5000}, "", False))
    )
    assert "exactly the cases where n is larger than 1024 fail" in exactly


def test_passing_only_where_the_size_fills_its_blocks_names_the_division_by_the_block():
    """A mean divided by BLOCK_SIZE instead of N is right exactly where N is a power of two (the
    block is N's next power of two), or a multiple of a fixed block."""
    from grader.core.diagnosis import across_cases

    rows = across_cases(
        _outcomes(
            ({"shape": (8, 64)}, "", True),
            ({"shape": (5, 1)}, "", True),
            ({"shape": (16, 100)}, "", False),
            ({"shape": (1, 7)}, "", False),
            ({"shape": (3, 4, 33)}, "", False),
            row_wise=True,
        )
    )
    assert "exactly the cases where the rows are not a power of two long fail" in rows
    assert "divide by the real length N, not by the block size" in rows
    flat = across_cases(
        _outcomes(({"n": 4096}, "", True), ({"n": 1}, "", True), ({"n": 1000}, "", False), ({"n": 4097}, "", False))
    )
    assert "exactly the cases where n is not a power of two fail" in flat and "not by the block size" in flat
    blocks = across_cases(
        _outcomes(({"n": 1024}, "", True), ({"n": 3072}, "", True), ({"n": 1000}, "", False), ({"n": 2500}, "", False))
    )
    assert "exactly the cases where n is not a multiple of 1024 fail" in blocks
    assert "partial block" in blocks and "not by the block size" in blocks


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


def test_nan_in_a_tensor_updated_in_place_was_computed_not_left_unwritten():
    """An optimizer's parameters hold numbers before the call (no NaN fill): NaN there comes from
    the formula (the square root of a second moment that went negative), never a missed store."""
    ref = torch.randn(130, dtype=torch.float64)
    out = ref.clone()
    out[::2] = float("nan")
    text = diagnose(out, ref, ATOL, RTOL, name="params[3]", updated_in_place=True)
    assert "updates in place" in text and "square root" in text and "never written" not in text
    assert "never written" in diagnose(out, ref, ATOL, RTOL), "an output the call allocates: as before"


def test_a_float32_result_off_by_more_than_bfloat16_rounding_is_not_called_rounding():
    """AdamW with beta2 in place of beta1: every parameter about 1% off, more than any 16-bit
    rounding of a float32 value; the diagnosis must not send the learner after a conversion."""
    ref = torch.rand(64, dtype=torch.float64) + 1.0
    off = diagnose((ref * 1.0096).float(), ref, ATOL, RTOL)
    assert "16-bit rounding" not in off
    rounded = diagnose(ref.to(torch.bfloat16).float(), ref, ATOL, RTOL)
    assert "16-bit rounding" in rounded, "a real bfloat16 round trip still is"


def test_a_transposed_square_output_is_named():
    """A transpose that stores with y's strides swapped writes x itself: on a square matrix the
    output is the expected one transposed, its diagonal alone right."""
    ref = torch.randn(64, 64, dtype=torch.float64)
    text = diagnose(ref.t().contiguous().float(), ref, ATOL, RTOL)
    assert "expected matrix transposed" in text and "column stride" in text
    symmetric = ref + ref.t()
    assert "transposed" not in (diagnose((symmetric + 1).float(), symmetric, ATOL, RTOL) or "")


def test_only_some_parts_of_each_small_row_wrong_point_at_their_formula():
    """Pairs (real, imaginary) where every real part is wrong: the formula of that part, not a
    column offset, is the usual cause."""
    want = torch.randn(50, 2)
    got = want.clone()
    got[:, 0] += 1.0
    text = diagnose(got, want, 1e-5, 1e-4)
    assert "exactly the ones at 0 are wrong" in text and "real and imaginary" in text, text
    wide = torch.randn(50, 40)
    shifted = wide.clone()
    shifted[:, 10:20] += 1.0
    assert "exactly the ones at" not in diagnose(shifted, wide, 1e-5, 1e-4)


# ---- what a learner planting typical mistakes was told ---------------------------------------


def test_nan_with_the_sign_bit_set_was_computed_not_left_unwritten():
    """Outputs are filled with NaN before the call, with the sign bit clear; 0 / 0 or inf - inf
    computed on a CPU gives NaN with the sign bit set. A variance divided by N - 1 with N = 1, or
    a causal row that sees no key, stores such NaN: the diagnosis must not send the learner after
    a missing store."""
    ref = torch.randn(5, 4, dtype=torch.float64)
    computed = torch.zeros(5, 4) / torch.zeros(5, 4)
    assert bool(torch.signbit(computed).all()), "0 / 0 on a CPU: NaN with the sign bit set"
    text = diagnose(computed, ref, ATOL, RTOL)
    assert "computed" in text and "0 / 0" in text and "nothing was written" not in text
    partly = ref.float().clone()
    partly[0] = computed[0]
    text = diagnose(partly, ref, ATOL, RTOL)
    assert "4 element(s) are NaN" in text and "computed" in text and "never written" not in text
    unwritten = ref.float().clone()
    unwritten[0] = float("nan")  # the fill's NaN: sign bit clear
    assert "never written" in diagnose(unwritten, ref, ATOL, RTOL)
    assert "nothing was written" in diagnose(torch.full((5, 4), float("nan")), ref, ATOL, RTOL)


def test_whole_matrices_wrong_point_at_how_a_program_finds_its_head():
    """Grouped-query attention reading key/value head h % group instead of h // group: the heads
    that read the wrong input are wrong throughout, the others right. Not a row offset, not a
    block boundary within a matrix."""
    ref = torch.randn(1, 4, 37, 16, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    out = ref.clone()
    out[0, 1:3] = torch.randn(2, 37, 16, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    text = diagnose(out, ref, 1e-5, 1e-4, "o")
    assert "2 of the 4 matrices" in text and "(0, 1), (0, 2)" in text
    assert "h // group size" in text and "block boundary" not in text and "row offset" not in text
    one_head = torch.randn(1, 2, 64, 16, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    shifted = one_head.clone()
    shifted[0, 1] += 1.0
    assert "1 of the 2 matrices" in diagnose(shifted, one_head, 1e-5, 1e-4)


def test_the_same_unwritten_last_rows_of_every_matrix_point_at_a_grid_rounded_down():
    """A grid of seq // BLOCK_M query tiles: rows 32..49 of every head are never written."""
    ref = torch.randn(1, 2, 50, 16, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    out = ref.clone()
    out[:, :, 32:] = float("nan")
    text = diagnose(out.float(), ref, 1e-5, 1e-4, "o")
    assert "rows 32..49 of every matrix" in text and "triton.cdiv" in text
    assert "how a program finds its row" not in text


def test_small_errors_next_to_the_inputs_are_rounding_even_where_the_result_is_near_zero():
    """A mean of float16 values summed in float16: every mean is off by about 5e-4, which is
    float16 rounding of inputs near 4, although the means themselves are near 0."""
    generator = torch.Generator().manual_seed(11)
    ref = 0.02 * torch.randn(16, generator=generator, dtype=torch.float64)
    out = ref + 5e-4 * torch.randn(16, generator=generator, dtype=torch.float64).sign()
    text = diagnose(out.float(), ref, 1e-5, 1e-4, "mean", largest_input=4.0)
    assert "16-bit rounding" in text and "computation itself is off" not in text
    # A probability rounded to float16 before p @ v: attention's o a few 1e-4 off in most rows.
    o = torch.randn(1, 2, 64, 16, generator=generator, dtype=torch.float64) * 0.3
    rounded = o + 3e-4 * torch.randn(o.shape, generator=generator, dtype=torch.float64)
    assert "16-bit rounding" in diagnose(rounded.float(), o, 1e-5, 1e-4, "o", largest_input=3.5)
    # Errors as large as the inputs are no rounding.
    assert "16-bit rounding" not in diagnose((ref + 0.5).float(), ref, 1e-5, 1e-4, "mean", largest_input=4.0)
    # Nor is a normalised row 2% off (a variance divided by N - 1), however large the inputs.
    y = torch.randn(16, 64, generator=generator, dtype=torch.float64)
    off = y + 0.05 * torch.randn(y.shape, generator=generator, dtype=torch.float64).sign()
    assert "rounding" not in diagnose(off.float(), y, 1e-5, 1e-4, "y", largest_input=7.5)


def test_failing_in_every_wide_dtype_and_passing_in_16_bits_names_a_hard_coded_16_bit_type():
    """p.to(tl.float16) before p @ v: the float16 and bfloat16 cases pass, the float32 and float64
    ones fail (except those of another function); no single dtype splits them. The refusals of
    bad inputs pass too, float32 by default: they compute nothing and must not count."""
    from types import SimpleNamespace

    from grader.core.cases import Case
    from grader.core.diagnosis import Outcome, across_cases
    from grader.core.protocols import Raises

    def outcome(dtype, passed, label, spec=None):
        return Outcome(Case({"shape": (1, 2, 64, 16)}, dtype, label=label, spec=spec), passed)

    refusal = SimpleNamespace(api="attention", protocol=Raises(("ValueError",)))
    text = across_cases(
        [
            outcome(torch.float32, False, "several key tiles"),
            outcome(torch.float32, False, "causal"),
            outcome(torch.float64, False, "float64"),
            outcome(torch.float16, True, "tail"),
            outcome(torch.bfloat16, True, "bf16 layout"),
            outcome(torch.float32, True, "naive"),
        ]
        + [outcome(torch.float32, True, f"refuses {n}", refusal) for n in range(8)]
    )
    assert (
        "every case that fails is one where the dtype is float32 or float64 (" in text and "rounded to 16 bits" in text
    )


def test_failing_exactly_where_the_input_is_not_two_dimensional_names_the_row_count():
    """grid = (x.shape[0],) in a row-wise launcher: right for 2-D x only."""
    from grader.core.diagnosis import across_cases

    text = across_cases(
        _outcomes(
            ({"shape": (8, 64)}, "", True),
            ({"shape": (16, 100)}, "", True),
            ({"shape": (300,)}, "1-D", False),
            ({"shape": (4, 6, 80)}, "3-D", False),
            ({"shape": (2, 3, 5, 48)}, "4-D", False),
            row_wise=True,
        )
    )
    assert "exactly the cases where the input is not 2-D" in text and "x.numel() // N" in text


def test_a_factor_of_log2_e_names_the_base_of_the_logarithm():
    """lse = m + log2(l) without the factor ln 2: every value is log2(e) times the right one."""
    ref = torch.rand(2, 64, dtype=torch.float64) + 2.0
    text = diagnose((ref * 1.4426950408889634).float(), ref, 1e-5, 1e-4, "lse")
    assert "log2(e)" in text and "ln 2" in text


def test_the_first_row_of_every_matrix_right_names_the_scores_and_the_order_of_k_strides():
    """Causal attention whose K^T is read with k's strides in their own order: query 0 sees key 0
    alone, so row 0 of every head is v[0] and right whatever the scores; every other row is wrong."""
    generator = torch.Generator().manual_seed(12)
    ref = torch.randn(1, 2, 33, 16, generator=generator, dtype=torch.float64)
    out = ref.clone()
    out[:, :, 1:] += torch.randn(1, 2, 32, 16, generator=generator, dtype=torch.float64)
    text = diagnose(out.half(), ref, 2e-3, 2e-3, "o")
    assert "row 0 of every matrix (the last two dimensions) is right and every other row is wrong" in text
    assert "query 0 sees key 0 alone" in text and "row stride" in text
    assert "K^T's row stride is k.stride(3) and its column stride k.stride(2)" in text
    assert "computation itself is off" not in text and "value carried" not in text
    peaked = out.clone()
    peaked[0, 0, 5] = ref[0, 0, 5]  # a very peaked softmax can leave a few rows right by chance
    assert "most other rows are wrong (63 of 64)" in diagnose(peaked.half(), ref, 2e-3, 2e-3, "o")
    some_rows = ref.clone()
    some_rows[:, :, 20:] += 1.0  # row 0 right, but most rows too: not this pattern
    assert "row 0 of every matrix" not in diagnose(some_rows, ref, 1e-5, 1e-4, "o")
    # A batch of matrices (3-D, not attention's 4-D): the row stride alone, no word of scores.
    batched = diagnose(out[0].half(), ref[0], 2e-3, 2e-3, "c")
    assert "row 0 of every matrix" in batched and "row stride" in batched and "K^T" not in batched


def test_wrong_heads_of_a_statistic_per_head_point_at_the_head_mapping_not_the_row_offset():
    """Grouped-query attention reading key/value head h % group instead of h // group: the
    log-sum-exp (B, Hq, Sq) of the heads that read the wrong input is wrong throughout, the other
    heads right. A whole row of this 3-D output is a head: not a row offset, and not rounding
    either, where the values are so large that the error is a small fraction of them."""
    generator = torch.Generator().manual_seed(13)
    ref = torch.randn(1, 2, 64, generator=generator, dtype=torch.float64) + 4.0
    out = ref.clone()
    out[0, 1] += 0.1 + 0.5 * torch.rand(64, generator=generator, dtype=torch.float64)
    text = diagnose(out.float(), ref, 1e-5, 1e-4, "lse")
    assert "1 of the 2 rows along the last dimension (at (0, 1))" in text and "h // group size" in text
    assert "row offset" not in text
    four = torch.randn(1, 4, 24, generator=generator, dtype=torch.float64)
    two_wrong = four.clone()
    two_wrong[0, 1:3] += 1.0
    text = diagnose(two_wrong.float(), four, 1e-5, 1e-4, "lse")
    assert "2 of the 4 rows along the last dimension (at (0, 1), (0, 2))" in text and "row offset" not in text
    far_below = ref - 256.0
    shifted = far_below.clone()
    shifted[0, 1] += 0.1 + 0.5 * torch.rand(64, generator=generator, dtype=torch.float64)
    text = diagnose(shifted.float(), far_below, 1e-5, 1e-4, "lse")
    assert "h // group size" in text and "16-bit rounding" not in text
    every_other = torch.randn(1, 8, 16, generator=generator, dtype=torch.float64)
    strided = every_other.clone()
    strided[0, 1::2] += 1.0
    assert "every other row" in diagnose(strided, every_other, 1e-5, 1e-4)


def _planted_wrong_outputs() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A reference and outputs wrong in the ways the pattern search names."""
    generator = torch.Generator().manual_seed(5)
    want = torch.randn(96, 80, generator=generator, dtype=torch.float64)
    tail, scaled, rows, every = want.clone(), want.clone(), want.clone(), want + 1.0
    tail.view(-1)[-10:] = float("nan")
    scaled[7] *= 2.0
    rows[::2] = 0.0
    return want, {"tail": tail, "one row scaled": scaled, "every other row": rows, "everything": every}


def test_a_room_that_yields_a_device_gives_the_full_diagnosis_there():
    from contextlib import contextmanager

    from grader.core.diagnosis import DIAGNOSIS_BYTES_PER_ELEMENT

    asked = []

    @contextmanager
    def room(nbytes):
        asked.append(nbytes)
        yield torch.device("cpu")

    want, outputs = _planted_wrong_outputs()
    for name, got in outputs.items():
        assert diagnose(got.float(), want, ATOL, RTOL, room=room) == diagnose(got.float(), want, ATOL, RTOL), name
    assert asked == [DIAGNOSIS_BYTES_PER_ELEMENT * want.numel()] * len(outputs)


def test_an_output_too_large_for_the_room_gets_the_headline_computed_in_slices(monkeypatch):
    """A grader judging many files at once analyses a wrong output only where its room on the GPU
    holds it; beyond that it still says how many elements are wrong, the first and the largest
    error (the same numbers as the full diagnosis), and why the pattern is missing."""
    from contextlib import contextmanager

    from grader.core import diagnosis

    @contextmanager
    def no_room(nbytes):
        yield None

    monkeypatch.setattr(diagnosis, "_CHUNK", 1000)  # several slices, the first wrong one not the first
    want, outputs = _planted_wrong_outputs()
    for name, got in outputs.items():
        full = diagnose(got.float(), want, ATOL, RTOL).splitlines()
        short = diagnose(got.float(), want, ATOL, RTOL, room=no_room).splitlines()
        assert short[0] == full[0], name  # the count, the first wrong element and its values
        largest = [line for line in full if line.startswith("Largest error")]
        assert [line for line in short if line.startswith("Largest error")] == largest, name
        assert "too large for the grader to look for a pattern" in short[-1], name
        assert not any(line.startswith("Pattern:") for line in short), name
    assert diagnose(want.float(), want, ATOL, RTOL, room=no_room) is None


def test_a_hidden_case_is_decided_but_not_diagnosed(monkeypatch):
    """A hidden case's learner reads only that it failed: comparing without detail names the wrong
    output and spends nothing on the diagnosis or the suspects."""
    from grader.core import checks
    from grader.core.cases import Case, Spec, Suspect

    spec = Spec(
        api="double",
        make_inputs=None,
        reference=lambda x: x * 2,
        suspects=(Suspect("tripling", lambda x: x * 3, "double it"),),
    )
    x = torch.randn(64)
    references = checks.reference_outputs(spec, (x,), {})
    case = Case({}, torch.float32)
    monkeypatch.setattr(checks, "diagnose", lambda *a, **k: pytest.fail("diagnosed a hidden case"))
    monkeypatch.setattr(checks, "suspected", lambda *a, **k: pytest.fail("suspects tried for a hidden case"))
    assert checks.compare(spec, case, (x * 3,), references, ((x,), {}), detail=False) == ["output is wrong."]
    assert checks.compare(spec, case, (x * 2,), references, ((x,), {}), detail=False) == []
    assert checks.compare(spec, case, (x[:3] * 2,), references, ((x,), {}), detail=False)[0].startswith(
        "output has shape (3,)"
    )


@pytest.mark.cuda
def test_a_gpu_diagnoses_as_the_cpu_does():
    """On a GPU a wrong output is analysed there; the words and numbers are the CPU's."""
    want, outputs = _planted_wrong_outputs()
    for name, got in outputs.items():
        on_cpu = diagnose(got.float(), want, ATOL, RTOL)
        assert diagnose(got.float(), want.cuda(), ATOL, RTOL) == on_cpu, name
        assert diagnose(got.float().cuda(), want.cuda(), ATOL, RTOL) == on_cpu, name


def test_an_analysis_that_runs_out_of_memory_in_its_room_falls_back_to_the_headline(monkeypatch):
    from contextlib import contextmanager

    from grader.core import diagnosis

    @contextmanager
    def room(nbytes):
        yield torch.device("cpu")

    def out_of_memory(*args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    want, outputs = _planted_wrong_outputs()
    full = diagnose(outputs["tail"].float(), want, ATOL, RTOL)
    monkeypatch.setattr(diagnosis, "_diagnosed", out_of_memory)
    short = diagnose(outputs["tail"].float(), want, ATOL, RTOL, room=room)
    assert short.splitlines()[0] == full.splitlines()[0]
    assert "too large for the grader to look for a pattern" in short
