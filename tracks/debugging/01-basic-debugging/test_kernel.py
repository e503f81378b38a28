"""Public tests for 01-basic-debugging.  Run:  pytest tracks/debugging/01-basic-debugging

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. row_max() is the module's main function (SPEC); cases with spec=ROW_MEAN call
row_mean(), those with spec=TRANSPOSE call transpose().

The row lengths are a boundary sweep around a block of 64 lanes, boundary_sizes(64) = 1, 61, 63,
64, 65, 67 (and the same around the row kernels' largest block, 4096), so that every mask meets a
row that ends exactly at a block's end, one lane before it and one lane after it. Memory around
the inputs is NaN: a contiguous x is the front of a longer buffer whose tail is NaN, and "padded"
rows are the corner of a wider buffer whose other columns are NaN. A kernel that reads past the
end of a row or of x therefore meets NaN, not a plausible number.

The tests report what is wrong in the results (which rows, which values, how they differ from the
expected ones), never which line of kernel.py is at fault: finding that is the exercise.
"""

from dataclasses import replace

import hypothesis
import hypothesis.strategies as st
import torch

from grader.cases import Case, Spec, refusal
from grader.checks import check_case, compare

PYTEST_ONLY = {
    "test_boundary_sizes_cover_the_edges_of_a_block":
        "boundary_sizes() returns a list of Python ints and more than one sweep is right (the test checks "
        "properties, not one answer); the grader compares tensor outputs against one reference only.",
    "test_first_mismatch_finds_a_planted_difference":
        "first_mismatch() returns a sentence (a str), which the grader cannot compare: its comparison takes "
        "tensor outputs only, so the sentence's parts are checked here, on differences hypothesis plants.",
    "test_first_mismatch_is_quiet_when_nothing_is_wrong":
        "first_mismatch() answers None or a str, not a tensor, and the grader's comparison takes tensor "
        "outputs only.",
    "test_first_mismatch_uses_the_tolerances_it_is_given":
        "first_mismatch() answers None or a str, not a tensor, and the grader's comparison takes tensor "
        "outputs only.",
    "test_first_mismatch_reports_different_shapes":
        "first_mismatch() answers with a str naming both shapes, and the grader's comparison takes tensor "
        "outputs only.",
}

GUARD = 16  # NaN elements after x's last element, and between "padded" rows
TILE = 64  # transpose() moves tiles of TILE x TILE (TILE in kernel.py)


def _values(case, rand, *dims):
    """Random values of the case's dtype: standard normal, or shifted and scaled by the params."""
    params = case.params
    if params.get("values") == "negative":  # every value below -1
        return (rand.randn(*dims) * 0.5 - 3.0).clamp(max=-1.0).to(case.dtype)
    return (rand.randn(*dims) * params.get("scale", 1.0) + params.get("offset", 0.0)).to(case.dtype)


def row_inputs(case, rand):
    """x for row_max and row_mean: its shape, layout and values from the params."""
    shape = case.params["shape"]
    *leading, n_cols = shape
    layout = case.params.get("layout", "contiguous")
    if layout == "padded":  # rows N + GUARD elements apart, NaN in between
        wide = torch.full((*leading, n_cols + GUARD), float("nan"), dtype=case.dtype, device=rand.device)
        wide[..., :n_cols] = _values(case, rand, *shape)
        x = wide[..., :n_cols]
    elif layout == "transposed":  # a row's elements are x.shape[0] apart in memory
        x = _values(case, rand, n_cols, *leading).movedim(0, -1)
    else:  # contiguous, at the front of a buffer whose last GUARD elements are NaN
        values = _values(case, rand, *shape)
        buffer = torch.full((values.numel() + GUARD,), float("nan"), dtype=case.dtype, device=rand.device)
        buffer[:values.numel()] = values.flatten()
        x = buffer[:values.numel()].view(shape)
    if case.params.get("nan_rows"):  # a NaN in every other row: those rows' results are NaN
        x[::2, ..., n_cols // 2] = float("nan")
    return (x,), {}


def transpose_inputs(case, rand):
    M, N = case.params["shape"]
    return (rand.matrix(M, N, case.params.get("layout", "row-major"), case.dtype),), {}


def _tolerance(spec, case):
    return spec.tolerance(case.dtype, case, spec.output_names[0])


def _wrong(out, ref, spec, case):
    """Which rows' results are wrong, as a flat boolean tensor (NaN is right only where expected)."""
    atol, rtol = _tolerance(spec, case)
    got, want = out.detach().double().flatten().cpu(), ref.detach().double().flatten().cpu()
    return ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True), got, want


def _element_after_each_row(x):
    """The value stored in memory right after the last element of each row of x (x[i + 1, 0] for a
    packed row i; NaN after the last row, in these tests), or None when x's rows are not a view."""
    n_cols = x.shape[-1]
    rows = x.reshape(-1, n_cols)
    storage = x.untyped_storage()
    if rows.numel() == 0 or rows.stride(-1) != 1 or rows.untyped_storage().data_ptr() != storage.data_ptr():
        return None
    last = rows.storage_offset() + (rows.shape[0] - 1) * rows.stride(0) + n_cols
    if (last + 1) * rows.element_size() > storage.nbytes():
        return None
    after = torch.as_strided(rows, (rows.shape[0],), (rows.stride(0),), rows.storage_offset() + n_cols)
    return after.detach().double().cpu()


def _rows_note(bad):
    """"Row 0 is right, rows 1..5 are all wrong" when the wrong rows are the last ones, in a run."""
    wrong_rows = bad.nonzero().flatten()
    n_rows = bad.numel()
    if wrong_rows.numel() == 0:
        return []
    first = int(wrong_rows[0])
    if first == 0 or wrong_rows.numel() != n_rows - first:
        return []
    right = "Row 0 is" if first == 1 else f"Rows 0..{first - 1} are"
    return [f"{right} right, rows {first}..{n_rows - 1} are all wrong (one result per row of x, its "
            "leading dimensions flattened)."]


def row_max_notes(x, out, ref, spec, case):
    """What the wrong maxima have in common, in words."""
    bad, got, want = _wrong(out, ref, spec, case)
    rows = x.detach().reshape(-1, x.shape[-1]).double().cpu()
    notes = _rows_note(bad)
    nan_without_nan = bad & torch.isnan(got) & ~torch.isnan(rows).any(dim=-1)
    if bool(nan_without_nan.any()):
        first = int(nan_without_nan.nonzero()[0, 0])
        notes.append(f"{int(nan_without_nan.sum())} of the wrong maxima are NaN although their rows hold "
                     f"no NaN (the first: row {first}). The NaN came from somewhere other than x's values.")
    zero_above = bad & (got == 0) & (rows.amax(dim=-1) < 0)
    if bool(zero_above.any()):
        first = int(zero_above.nonzero()[0, 0])
        notes.append(f"{int(zero_above.sum())} of the wrong maxima are exactly 0, above every value of "
                     f"their rows, which are all negative (the first: row {first}, whose largest value is "
                     f"{float(rows[first].max()):.4g}). A 0 that is not in x took part in the maximum.")
    return notes


def row_mean_notes(x, out, ref, spec, case):
    """Whether each wrong mean is off by exactly one extra element: the one just past its row."""
    bad, got, want = _wrong(out, ref, spec, case)
    after = _element_after_each_row(x)
    notes = _rows_note(bad)
    if after is None or not bool(bad.any()):
        return notes
    n_cols = x.shape[-1]
    atol, rtol = _tolerance(spec, case)
    excess = (got - want) * n_cols  # what each row's sum holds beyond the right sum
    matches = ((excess - after).abs() <= 2 * n_cols * (atol + rtol * want.abs()) + 1e-6) | \
        (torch.isnan(got) & torch.isnan(after))
    if not bool(matches[bad].all()):
        return notes
    return notes + [
        f"Each wrong mean is off by exactly 1/{n_cols} of the element stored just past the end of its "
        "row (x[i + 1, 0] for row i; past the last row, the memory after x, which holds NaN here): "
        "every wrong row's sum took in one element too many."]


def transpose_notes(x, out, ref, spec, case):
    """Which tiles of x never reached the output, when whole tiles are missing."""
    M, N = x.shape
    tiles_m, tiles_n = -(-M // TILE), -(-N // TILE)
    unwritten = (torch.isnan(out.detach()) & ~torch.isnan(ref.detach().to(out.device))).cpu()
    padded = torch.zeros(tiles_n * TILE, tiles_m * TILE, dtype=torch.bool)
    padded[:N, :M] = unwritten
    padded[N:, :] = True
    padded[:, M:] = True
    # never[i, j]: no element of x's tile (i, j) reached y (tile i down x's rows, j across its columns)
    never = padded.reshape(tiles_n, TILE, tiles_m, TILE).all(dim=3).all(dim=1).t()
    missing = [tuple(int(i) for i in tile) for tile in never.nonzero()]
    if not missing:
        return []
    shown = ", ".join(str(tile) for tile in missing[:6]) + (", ..." if len(missing) > 6 else "")
    tiles = "tile" if len(missing) == 1 else "tiles"
    others = tiles_m * tiles_n - len(missing)
    return [f"x is cut into {tiles_m} x {tiles_n} tiles of {TILE} x {TILE} (tile (i, j): rows i*{TILE}.., "
            f"columns j*{TILE}..), one program each. The elements of y that come from {tiles} {shown} of x "
            f"were never written (they are still NaN); those from the other {others} tile(s) were."]


def with_notes(spec, notes):
    """``spec`` judged as usual, then, when it fails, by ``notes``: what only these kernels' wrong
    results have in common, said in words the usual diagnosis cannot know."""
    def judge(outputs, references, args, kwargs, case):
        plain_case = replace(case, spec=spec, hint="")  # the case's own hint is added once, after
        problems = compare(spec, plain_case, outputs, references, (args, kwargs))
        if problems and isinstance(outputs[0], torch.Tensor) and outputs[0].shape == references[0].shape:
            problems += notes(args[0], outputs[0], references[0], spec, case)
        return problems
    return replace(spec, judge=judge)


def rows_read(case):
    """Read x once, write one value per row."""
    *leading, n_cols = case.params["shape"]
    n_rows = torch.Size(leading).numel()
    return (n_rows * n_cols + n_rows) * case.dtype.itemsize


LARGE = tuple(Case({"shape": (32768, 4096)}, dtype)
              for dtype in (torch.float32, torch.float16, torch.bfloat16))

SPEC = with_notes(Spec(
    api="row_max",
    make_inputs=row_inputs,
    reference=lambda x: x.amax(dim=-1),
    row_wise=True,
    bytes_moved=rows_read,
    torch_baseline=lambda x: torch.amax(x, dim=-1),
    bench_cases=LARGE,
    ceiling="copy",
    target=0.85,
    # first_mismatch() is a tool that compares tensors on the host, not a kernel: it may use
    # PyTorch's comparison and read the result back.
    allowed_torch_names=frozenset({"isclose"}),
    allowed_tensor_methods=frozenset({"nonzero", "tolist"}),
), row_max_notes)

ROW_MEAN = with_notes(Spec(
    api="row_mean",
    make_inputs=row_inputs,
    reference=lambda x: x.mean(dim=-1),
    row_wise=True,
    bytes_moved=rows_read,
    torch_baseline=lambda x: torch.mean(x, dim=-1),
    bench_cases=LARGE,
    ceiling="copy",
    target=0.85,
), row_mean_notes)

TRANSPOSE = with_notes(Spec(
    api="transpose",
    make_inputs=transpose_inputs,
    reference=lambda x: x.t(),
    bytes_moved=lambda case: 2 * case.params["shape"][0] * case.params["shape"][1] * case.dtype.itemsize,
    torch_baseline=lambda x: x.t().contiguous(),
    bench_cases=tuple(Case({"shape": (8192, 8192)}, dtype) for dtype in (torch.float32, torch.float16)),
    ceiling="copy",
    target=0.85,
    kernel_writes_outputs=True,  # moving the data is the exercise: no PyTorch copy may do it
), transpose_notes)

NEGATIVE = "every value is negative, so the maximum is negative too"
FP16_SUMS = ("values near 40 in float16: the row's sum passes 65504, the largest float16, although "
             "its mean (about 40) is far from it")
NOT_SQUARE = "the grid of 64 x 64 tiles has a different number of tiles along its two axes"

CASES = [
    # row_max: the sweep around a block of 64, negative rows and mixed ones
    Case({"shape": (4, 61), "values": "negative"}, label="largest prime below 63", hint=NEGATIVE),
    Case({"shape": (3, 1)}, label="rows of one element"),
    Case({"shape": (5, 63), "values": "negative"}, label="one lane short of a block", hint=NEGATIVE),
    Case({"shape": (5, 64), "values": "negative"}, label="exactly one block", hint=NEGATIVE),
    Case({"shape": (6, 65)}, label="one lane into the next block"),
    Case({"shape": (4, 67), "values": "negative"}, torch.float16, label="smallest prime above 65",
         hint=NEGATIVE),
    Case({"shape": (6, 61), "layout": "padded", "values": "negative"}, label="padded rows", hint=NEGATIVE),
    Case({"shape": (6, 64), "layout": "padded"}, label="padded rows"),
    Case({"shape": (5, 65), "layout": "padded"}, torch.float16, label="padded rows"),
    Case({"shape": (2, 3, 67), "layout": "padded"}, label="padded rows, 3-D"),
    Case({"shape": (7, 63), "layout": "transposed"}, label="x a transpose"),
    Case({"shape": (6, 65), "nan_rows": True}, label="a NaN in every other row",
         hint="torch.amax gives NaN for a row that holds a NaN"),
    Case({"shape": (4, 33), "nan_rows": True}, torch.float16, label="fp16, a NaN in every other row",
         hint="torch.amax gives NaN for a row that holds a NaN; so must the final reduction across the lanes"),
    Case({"shape": (3, 4101), "nan_rows": True}, label="a NaN in every other row, two chunks",
         hint="torch.amax gives NaN for a row that holds a NaN, in whichever chunk of the row it lies"),
    Case({"shape": (2, 3, 61)}, label="3-D"),
    Case({"shape": (5, 67)}, torch.bfloat16, label="bf16"),
    Case({"shape": (2, 4097), "values": "negative"}, label="one lane past the largest block", hint=NEGATIVE),
    Case({"shape": (0, 5)}, label="no rows"),
    Case({"shape": (64, 1000)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (4096, 4096)}, label="large", cuda_only=True),
    Case({"shape": (256, 100_003), "values": "negative"}, label="long rows", cuda_only=True),
    # row_mean
    Case({"shape": (4, 61)}, spec=ROW_MEAN, label="largest prime below 63"),
    Case({"shape": (3, 1)}, spec=ROW_MEAN, label="rows of one element"),
    Case({"shape": (5, 63)}, spec=ROW_MEAN, label="one lane short of a block"),
    Case({"shape": (5, 64)}, spec=ROW_MEAN, label="exactly one block"),
    Case({"shape": (6, 65)}, torch.float16, spec=ROW_MEAN, label="one lane into the next block"),
    Case({"shape": (4, 67), "layout": "padded"}, spec=ROW_MEAN, label="padded rows"),
    Case({"shape": (3, 2, 64), "layout": "transposed"}, spec=ROW_MEAN, label="x a transpose, 3-D"),
    Case({"shape": (3, 129)}, torch.bfloat16, spec=ROW_MEAN, label="bf16"),
    Case({"shape": (4, 2048), "offset": 40.0}, torch.float16, spec=ROW_MEAN, label="large fp16 sums",
         hint=FP16_SUMS),
    Case({"shape": (3, 4093), "offset": 40.0}, torch.float16, spec=ROW_MEAN, label="large fp16 sums",
         hint=FP16_SUMS),
    Case({"shape": (2, 4097), "offset": -40.0}, torch.float16, spec=ROW_MEAN,
         label="large fp16 sums, two chunks", hint=FP16_SUMS),
    Case({"shape": (2, 3, 1500), "offset": 50.0, "layout": "padded"}, torch.float16, spec=ROW_MEAN,
         label="large fp16 sums, padded rows", hint=FP16_SUMS),
    Case({"shape": (4, 3001), "offset": 40.0}, spec=ROW_MEAN, label="large sums in float32"),
    Case({"shape": (0, 3)}, spec=ROW_MEAN, label="no rows"),
    Case({"shape": (64, 1000)}, torch.bfloat16, spec=ROW_MEAN, label="bf16", cuda_only=True),
    Case({"shape": (4096, 4096), "offset": 40.0}, torch.float16, spec=ROW_MEAN, label="large",
         cuda_only=True),
    # transpose: tiles of 64 x 64, square grids and others
    Case({"shape": (1, 1)}, spec=TRANSPOSE, label="one element"),
    Case({"shape": (64, 65)}, spec=TRANSPOSE, label="grid 1 x 2", hint=NOT_SQUARE),
    Case({"shape": (65, 67)}, spec=TRANSPOSE, label="grid 2 x 2"),
    Case({"shape": (67, 1)}, spec=TRANSPOSE, label="grid 2 x 1", hint=NOT_SQUARE),
    Case({"shape": (63, 61)}, torch.float16, spec=TRANSPOSE, label="grid 1 x 1"),
    Case({"shape": (130, 61), "layout": "transposed"}, spec=TRANSPOSE, label="x a transpose, grid 3 x 1",
         hint=NOT_SQUARE),
    Case({"shape": (61, 129), "layout": "sliced"}, torch.float16, spec=TRANSPOSE,
         label="every other column, grid 1 x 3", hint=NOT_SQUARE),
    Case({"shape": (70, 130)}, torch.bfloat16, spec=TRANSPOSE, label="bf16, grid 2 x 3", hint=NOT_SQUARE),
    Case({"shape": (0, 7)}, spec=TRANSPOSE, label="no rows"),
    Case({"shape": (4096, 1000)}, spec=TRANSPOSE, label="large", cuda_only=True),
    Case({"shape": (999, 8192)}, torch.bfloat16, spec=TRANSPOSE, label="bf16", cuda_only=True),
]


# ---- refusals: the right error, and a message that says what to do (graded like the results) --

# boundary_sizes() is a tool on plain numbers: only its refusal is a case (refusal() makes the
# inputs, and a refusal has no result to compare).
BOUNDARY_SIZES = Spec(api="boundary_sizes", make_inputs=None, reference=None)

CASES += [
    *(refusal(spec, lambda rand: ((torch.ones(3, 4, dtype=torch.int32, device=rand.device),), {}),
              (ValueError, TypeError), r"dtype", why="name the dtype it got and say it is not one the kernel "
              "supports", label="refuses integers") for spec in (SPEC, ROW_MEAN)),
    *(refusal(spec, lambda rand: ((rand.randn(),), {}), (ValueError, TypeError), r"dimension",
              why="say that a 0-dimensional x has no last dimension to reduce over",
              label="refuses a 0-d tensor") for spec in (SPEC, ROW_MEAN)),
    *(refusal(spec, lambda rand: ((rand.randn(3, 0),), {}), (ValueError, TypeError), r"empty",
              why="say that x's rows are empty, so they have no maximum or mean",
              label="refuses empty rows") for spec in (SPEC, ROW_MEAN)),
    refusal(TRANSPOSE, lambda rand: ((rand.randn(2, 3, 4),), {}), (ValueError, TypeError), r"dimensions",
            why="say that x must have 2 dimensions", label="refuses a 3-D tensor"),
    refusal(BOUNDARY_SIZES, lambda rand: ((0,), {}), (ValueError, TypeError), r"block",
            why="say that block must be a positive number of lanes", label="refuses a block of 0"),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


# ---- the tools: boundary_sizes and first_mismatch -----------------------------------------

def _primes_near(block):
    """(the largest prime below block - 1 or None, the smallest prime above block + 1)."""
    def prime(n):
        return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))
    below = next((n for n in range(block - 2, 1, -1) if prime(n)), None)
    above = next(n for n in range(block + 2, 4 * block + 8) if prime(n))
    return below, above


@hypothesis.settings(max_examples=60, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(block=st.one_of(st.integers(1, 70), st.sampled_from([127, 128, 1000, 1024, 4096])))
def test_boundary_sizes_cover_the_edges_of_a_block(kernel, block):
    sizes = kernel.api("boundary_sizes")(block)
    assert isinstance(sizes, list) and all(type(s) is int for s in sizes), (
        f"boundary_sizes({block}) returned {sizes!r}: it should return a list of ints.")
    assert sizes == sorted(set(sizes)), (
        f"boundary_sizes({block}) = {sizes}: sort the sizes and list each once.")
    assert all(s >= 1 for s in sizes), f"boundary_sizes({block}) = {sizes}: every size must be at least 1."
    below, above = _primes_near(block)
    required = {1, block - 1, block, block + 1, above} | ({below} if below else set())
    missing = sorted(s for s in required if s >= 1 and s not in sizes)
    assert not missing, (f"boundary_sizes({block}) = {sizes} lacks {missing}. For a block of {block} the "
                         f"sweep holds 1, {block - 1}, {block}, {block + 1}"
                         + (f", the prime {below} below" if below else "") + f" and the prime {above} above.")
    assert len(sizes) <= 32, (
        f"boundary_sizes({block}) lists {len(sizes)} sizes: a sweep is a handful, not every size.")


def _plant(ref, positions, value):
    """ref with ``value`` written at the given flat positions."""
    out = ref.clone()
    out.view(-1)[list(positions)] = value
    return out


@hypothesis.settings(max_examples=60, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(data=st.data(), shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
                  dtype=st.sampled_from([torch.float32, torch.float16]),
                  planted=st.sampled_from(["value", "nan"]))
def test_first_mismatch_finds_a_planted_difference(kernel, data, shape, dtype, planted):
    ref = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)
    total = ref.numel()
    positions = data.draw(st.sets(st.integers(0, total - 1), min_size=1, max_size=total), label="positions")
    value = float("nan") if planted == "nan" else 100.0
    out = _plant(ref, positions, value)
    first = min(positions)
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), tuple(shape)))
    said = kernel.api("first_mismatch")(out, ref)
    assert isinstance(said, str), (
        f"first_mismatch returned {said!r} for tensors of shape {tuple(shape)} that differ at "
        f"{len(positions)} element(s), the first at index {index}: it should describe them.")
    for expected, what in ((f"{len(positions)} of {total}", "how many elements are wrong, as 'k of n'"),
                           (f"index {index}", "the index of the first wrong element, as a tuple"),
                           (f"is {value:.6g} where", "the value found there")):
        assert expected in said, f"first_mismatch said {said!r}, which lacks {what}: {expected!r}."


def test_first_mismatch_is_quiet_when_nothing_is_wrong(kernel):
    first_mismatch = kernel.api("first_mismatch")
    ref = torch.randn(5, 7)
    ref[1, 2] = float("nan")
    ref[3, 4] = float("-inf")
    close = ref + 1e-7 * ref.nan_to_num(0.0, 0.0, 0.0)  # well within float32's tolerance
    for out, what in ((ref.clone(), "equal tensors"), (close, "tensors within the tolerance"),
                      (torch.empty(0, 3), "empty tensors")):
        expected = ref if out.numel() else torch.empty(0, 3)
        said = first_mismatch(out, expected)
        assert said is None, (
            f"first_mismatch said {said!r} for {what} (NaN and -inf at the same places): expected None.")


def test_first_mismatch_uses_the_tolerances_it_is_given(kernel):
    first_mismatch = kernel.api("first_mismatch")
    ref = torch.ones(4, 4)
    out = ref + 1e-3
    assert first_mismatch(out, ref) is not None, (
        "first_mismatch(ref + 1e-3, ref) found nothing wrong: float32's default tolerance is "
        "atol 1e-5 + rtol 1e-4 x |ref|, so every element is wrong.")
    said = first_mismatch(out, ref, atol=1e-2, rtol=0.0)
    assert said is None, f"first_mismatch(ref + 1e-3, ref, atol=1e-2, rtol=0) said {said!r}: expected None."
    said = first_mismatch(out.half(), ref.half())
    assert said is None, (f"first_mismatch said {said!r} for float16 tensors 1e-3 apart: float16's default "
                          "tolerance is atol 2e-3 + rtol 2e-3 x |ref|.")


def test_first_mismatch_reports_different_shapes(kernel):
    said = kernel.api("first_mismatch")(torch.zeros(4), torch.zeros(5))
    assert isinstance(said, str) and "(4,)" in said and "(5,)" in said, (
        f"first_mismatch(zeros(4), zeros(5)) said {said!r}: it should name both shapes, (4,) and (5,).")
