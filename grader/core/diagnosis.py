"""Turn a wrong output into a sentence a learner can act on.

``diagnose`` compares one output with its float64 reference and, when they differ, says how many
elements are wrong, where the first one is, how large the error is, and which pattern the wrong
elements form ("only the tail", "every other row", "errors the size of float16 rounding", "rows
scattered in no order, each off by a factor of its own"), with what that pattern usually means in
a Triton kernel. Where a row goes wrong by its position (the grid, the offsets, a stride), the wrong
rows form runs and periods; where its values decide (a running maximum that a later block raises),
they do not. ``across_cases`` looks at which cases of a run fail and which pass ("only the
non-contiguous ones", "every row length that is not a power of two", "every K larger than 24") and
says what that split usually means.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass

import torch

# Block sizes are powers of two of at least this much, so a wrong region that starts at an index
# that is not a multiple of it does not start at a block boundary.
_SMALLEST_BLOCK = 16
# The largest relative error 16-bit rounding of a float32 value explains: two units in the last
# place of bfloat16 (Triton's interpreter truncates where a GPU rounds to nearest).
_BF16_ROUNDING = 2.0**-7
# exp() overflows float32 just above 88; inputs this large make any exponential suspect.
_OVERFLOW_INPUT = 64.0
# How many rows the search for a period of the wrong rows reads (a loop in Python).
_PERIOD_SEARCH = 4096
# Factors that are constants of a formula, with what finding one usually means.
_NAMED_FACTORS = {
    1 / math.log(2): "that is log2(e) = 1 / ln 2, the factor between a base-2 and a natural logarithm: "
    "a value kept in base 2 (exp2, log2) is probably not converted back (multiply it by ln 2).",
    math.log(2): "that is ln 2 = 1 / log2(e), the factor between a natural and a base-2 logarithm: a value "
    "is probably converted to base 2 once too often, or a natural log or exp is used where base 2 is meant.",
}


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if shape else ()


def _runs(indices: torch.Tensor) -> bool:
    """True when sorted indices are one contiguous run."""
    return indices.numel() > 0 and int(indices[-1] - indices[0]) + 1 == indices.numel()


def _tail(n_bad: int, start: int, unwritten: bool, tiles: bool = False) -> str | None:
    """The pattern of a wrong region that runs from ``start`` to the last element (``tiles``: the
    output has two or more dimensions, which a kernel may cover with 2-D tiles)."""
    where = f"from flat index {start} on"
    if n_bad <= 2:
        if start % _SMALLEST_BLOCK == 0:
            return (
                f"only the last {n_bad} element(s) are wrong ({where}): the mask is off by one "
                "(offsets < n, not n - 1), or the last, partial block is not launched (the grid "
                "must round up: triton.cdiv)."
            )
        return (
            f"only the last {n_bad} element(s) are wrong ({where}): the mask is probably off by "
            "one (keep offsets < n; not n - 1, not <=)."
        )
    if not unwritten:
        return None
    block = start & -start  # the largest power of two that divides start
    if start % _SMALLEST_BLOCK or n_bad >= block:
        return (
            f"the last {n_bad} elements were never written ({where}): more than one block "
            f"ending at index {start} could leave, so it is not just the last block missing. "
            "The usual cause: the programs' start offsets are not multiplied by the block size "
            "(program pid must start at pid times the block size), so the programs overlap and "
            "none reaches the end (or the grid has far too few programs)."
            + (
                " With 2-D tiles the same pattern comes from a mask or a grid that uses one "
                "dimension where the other is meant (rows tested against the number of columns)."
                if tiles
                else ""
            )
        )
    return (
        f"the last {n_bad} elements were never written ({where}): the last, partial block is "
        "probably not launched (the grid must round up: triton.cdiv(n, BLOCK_SIZE)) or its "
        "mask cuts it short."
    )


def _common_factor(got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor) -> float | None:
    """The factor f with got == f * want on every wrong element, if there is one (and f != 1)."""
    chosen = bad & (want.abs() > 1e-12) & torch.isfinite(got)
    if int(chosen.sum()) < 2 or int(chosen.sum()) < int(bad.sum()):
        return None
    ratios = got[chosen] / want[chosen]
    factor = float(ratios.median())
    # Rounding scatters the ratios; a wrong scale factor moves them all together, far from 1.
    if abs(factor - 1) < 1e-4 or abs(factor) < 1e-3 or not bool(((ratios - factor).abs() <= 1e-5 * abs(factor)).all()):
        return None
    return factor


def _row_factors(
    got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor, atol: float, rtol: float
) -> tuple[float, float] | None:
    """(smallest, largest) factor when every row (along the last dimension) that holds a wrong
    element is the right row times a positive factor of its own, within the tolerance; else None."""
    if got.dim() < 2 or got.shape[-1] < 4:
        return None  # too few values in a row to tell a factor from any other error
    rows_bad = bad.reshape(-1, bad.shape[-1]).any(1)
    rows_got = got.reshape(-1, got.shape[-1])[rows_bad]
    rows_want = want.reshape(-1, want.shape[-1])[rows_bad]
    if (
        not bool(torch.isfinite(rows_got).all())
        or not bool(torch.isfinite(rows_want).all())
        or not bool((rows_want.abs().amax(1) > 0).all())
    ):
        return None
    scale = (rows_got * rows_want).sum(1) / (rows_want * rows_want).sum(1)
    fits = (rows_got - scale[:, None] * rows_want).abs() <= atol + rtol * (scale[:, None] * rows_want).abs()
    if not bool(fits.all()) or float(scale.min()) < 1e-3:  # (a row of zeros is no normalisation problem)
        return None
    return float(scale.min()), float(scale.max())


def _transposed(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> bool:
    """True when square matrices (the last two dimensions) are each other's transposes, and not
    symmetric (then transposing would change nothing)."""
    if got.dim() < 2 or got.shape[-1] != got.shape[-2] or got.shape[-1] < 2:
        return False
    flipped = want.transpose(-1, -2)
    close = (got - flipped).abs() <= atol + rtol * flipped.abs()
    return bool(close.all()) and not bool(torch.allclose(want, flipped, atol=atol, rtol=rtol))


def _precision(
    got: torch.Tensor, want: torch.Tensor, bad: torch.Tensor, dtype: torch.dtype, scale: float | None = None
) -> str | None:
    """Every wrong element a little off: rounding somewhere, not a logic error. ``scale``: measure
    the errors against it (the largest magnitude in play) rather than against each value, for a
    result near 0 computed from much larger terms (a mean, a weighted sum)."""
    if not bool(torch.isfinite(got[bad]).all()) or not bool(torch.isfinite(want[bad]).all()):
        return None
    typical = float(want[torch.isfinite(want)].pow(2).mean().sqrt()) if bool(torch.isfinite(want).any()) else 1.0
    if scale is not None:
        # A few 16-bit units in the last place of the result's largest value or of the largest
        # input (2 ** -8, 2 ** -9), and not large next to the result's own values.
        largest_error = float((got - want).abs()[bad].max())
        peak = float(want[torch.isfinite(want)].abs().max()) if bool(torch.isfinite(want).any()) else 0.0
        if (
            not (0 < peak <= scale)
            or largest_error > max(2.0**-8 * peak, 2.0**-9 * scale)
            or largest_error > 3e-2 * peak
        ):
            return None
        relative = largest_error / peak  # (the lower bound below: more than float32 rounding)
        said = (
            f"every wrong element is off by at most {largest_error:.1g}, small next to the values in play "
            f"(up to {scale:.3g}, among the result and the inputs)"
        )
    else:
        relative = float(((got - want).abs()[bad] / want.abs()[bad].clamp_min(max(0.1 * typical, 1e-30))).max())
        said = f"every wrong element is off by at most {relative:.1g} of its value"
        if relative > 3e-2:
            return None
    if dtype in (torch.float32, torch.float64):
        # Beyond two bfloat16 units in the last place (2 ** -7, a truncating conversion's worst),
        # no 16-bit rounding explains it: a formula off by a little, reported as such.
        if relative < 1e-4 or (scale is None and relative > _BF16_ROUNDING):
            return None
        return (
            f"{said}: the size of "
            "16-bit rounding (float16 keeps 11 bits, about 5e-4; bfloat16 8 bits, about 4e-3). "
            "If a value is converted to a 16-bit type on the way (an operand of tl.dot, the "
            "accumulator, or the result before the store), keep float32 throughout; if none is, "
            "a term of the formula is slightly off (a constant, one coefficient for another)."
        )
    return (
        f"{said}: a few roundings "
        f"of {str(dtype).removeprefix('torch.')} adding up. Compute in float32 (x.to(tl.float32) "
        "after loading) and round once, when storing."
    )


def _periodic(flags: torch.Tensor, candidates: tuple[int, ...] = ()) -> bool:
    """True when ``flags`` repeats with some period of at most half its length: the smallest period
    of its first few thousand values (the prefix function), or one of ``candidates``."""
    head = flags[:_PERIOD_SEARCH].tolist()
    border = [0] * len(head)  # border[i]: the longest proper prefix of head[:i + 1] that is also its suffix
    for i in range(1, len(head)):
        k = border[i - 1]
        while k and head[i] != head[k]:
            k = border[k - 1]
        border[i] = k + (head[i] == head[k])
    periods = (len(head) - border[-1], *candidates) if head else candidates
    n = flags.numel()
    return any(0 < p <= n // 2 and bool(torch.equal(flags[:-p], flags[p:])) for p in periods)


def _scattered(row_bad: torch.Tensor, per_matrix: int) -> bool:
    """True when the wrong rows follow no pattern of position: three runs or more, with no period.
    (A row's position decides by the grid, the offsets or a stride, which give runs and periods;
    the row's values decide by what the data does, which gives no such order.)"""
    changes = int((row_bad[1:] != row_bad[:-1]).sum())
    runs = (changes + int(row_bad[0]) + int(row_bad[-1])) // 2
    return runs >= 3 and not _periodic(row_bad, (per_matrix,))


def _factors_text(factors: tuple[float, float], n_bad_rows: int, n_rows: int) -> str:
    which = "each row is" if n_bad_rows == n_rows else f"each of the {n_bad_rows} wrong rows is"
    low, high = (f"{f:.3g}" for f in factors)
    # One factor for many rows (rounding apart): a count, not the rows' data, is off.
    if n_bad_rows >= 4 and factors[1] <= 1.005 * factors[0]:
        return (
            f"{which} the right row times about the same factor ({low}): the values within a row are right "
            "and what the row is divided by is off by a constant, so probably a count: divide by the row "
            "length N, not by the block size (nor N - 1), and check for a missing or extra normalisation."
        )
    return (
        f"{which} the right row times a factor of its own ({low} to {high}): the values within a row are "
        "right, what the row is divided by (its sum) is not. Usually a running sum carried from one block of "
        "the row to the next is not rescaled when the maximum grows (multiply it by exp(old max - new max)); "
        "else masked lanes count in the sum (they must not change it)."
    )


def _matrices_pattern(bad: torch.Tensor, unwritten: torch.Tensor) -> str | None:
    """The pattern of an output of three dimensions or more whose matrices (the last two dimensions)
    go wrong as wholes: some wholly or mostly wrong and the others right, or the same last rows of
    every one never written."""
    if bad.dim() < 3 or bad.shape[-2] < 2:
        return None
    leading = tuple(bad.shape[:-2])
    matrices = bad.reshape(-1, bad.shape[-2], bad.shape[-1])
    count = matrices.shape[0]
    if count < 2:
        return None
    share = matrices.flatten(1).float().mean(1)
    wrong = share > 0
    if not bool(wrong.all()):
        if not bool((share[wrong] >= 0.5).all()):
            return None
        which = [_index(int(i), leading) for i in wrong.nonzero().flatten()]
        shown = ", ".join(str(w) for w in which[:4]) + (", ..." if len(which) > 4 else "")
        never = bool(unwritten.reshape(matrices.shape)[wrong].all())
        return (
            f"{len(which)} of the {count} matrices of the last two dimensions (at {shown}) "
            f"{'is' if len(which) == 1 else 'are'} {'never written' if never else 'wrong in most elements'}, "
            "the others right: the work within "
            "a matrix is probably right, and the choice of matrix is not. Check how a program finds its matrix "
            "(program_id split into batch and head or channel with // and %, and their strides) and, where heads "
            "share an input (grouped-query attention: head h reads h // group size), which one it reads."
        )
    rows = matrices.any(2)
    first = rows[0].nonzero().flatten()
    if (
        first.numel()
        and bool((rows == rows[0]).all())
        and int(first[-1]) == rows.shape[1] - 1
        and _runs(first)
        and int(first[0]) % _SMALLEST_BLOCK == 0
        and int(first[0]) > 0
        and bool(unwritten.reshape(matrices.shape)[:, first].all())
    ):
        return (
            f"rows {int(first[0])}..{rows.shape[1] - 1} of every matrix (the same in each) were never written: "
            "the last, partial block of rows is probably not launched (the grid must round up: "
            "triton.cdiv(rows, BLOCK_M)), or its mask cuts it short."
        )
    later = rows[:, 1:]
    if (
        rows.shape[1] >= 3
        and not bool(rows[:, 0].any())
        and 4 * int(later.sum()) >= 3 * later.numel()
        and float(matrices[:, 1:][later].float().mean()) >= 0.5
        and not bool(unwritten.reshape(matrices.shape)[matrices].all())
    ):
        others = (
            "every other row is wrong"
            if bool(later.all())
            else f"most other rows are wrong ({int(later.sum())} of {later.numel()})"
        )
        # The scores' half of the explanation is for attention's (batch, head, query, dim) outputs.
        cause = _FIRST_ROW_RIGHT if bad.dim() == 4 else _FIRST_ROW_RIGHT_READ
        return f"row 0 of every matrix (the last two dimensions) is right and {others}. " + cause
    return None


# Row 0 of every matrix right, (nearly) every other row wrong: the two usual ways to get there.
_FIRST_ROW_RIGHT_READ = (
    "The rows after the first are probably read or written in the wrong place: row 0 starts at offset 0 "
    "whatever the row stride, so a wrong row stride (or a row index scaled by the wrong length) spares it."
)
_FIRST_ROW_RIGHT = (
    "Either the rows after the first are read from the wrong place (an input's row stride: row 0 starts at "
    "offset 0 whatever the stride), or the result of row 0 does not depend on what is wrong: in causal "
    "attention query 0 sees key 0 alone, so its output is v[0] whatever its score, and then the scores "
    "S = sm_scale * Q K^T or their softmax are wrong while V is read right. For the scores, K^T is read "
    "through k's strides with the last two swapped: element (d, j) of K^T is k[.., j, d], so K^T's row "
    "stride is k.stride(3) and its column stride k.stride(2). k's strides in their own order read the "
    "head's memory as a (D, Sk) matrix that is not K^T."
)


def _every_other(bad_rows: torch.Tensor, n_rows: int) -> bool:
    """True when the wrong rows are every other row from the first wrong one on."""
    return (
        bad_rows.numel() > 1
        and bool((bad_rows % 2 == bad_rows[0] % 2).all())
        and bad_rows.numel() >= (n_rows - int(bad_rows[0])) // 2
    )


def _rows_of_leading_indices(
    bad: torch.Tensor, unwritten: torch.Tensor, got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float
) -> str | None:
    """The pattern of a 3-D output (a statistic per batch, head and query, for instance) whose rows
    along the last dimension go wrong as wholes: some wrong in most elements, the others right, where
    neither the rows' values (rows scattered in no order), a stride (every other row) nor a factor
    (what a row is divided by) explains it better."""
    if bad.dim() != 3 or bad.shape[-1] < 4 or _matrices_pattern(bad, unwritten):
        return None
    rows = bad.reshape(-1, bad.shape[-1])
    share = rows.float().mean(1)
    wrong = share > 0
    bad_rows = wrong.nonzero().flatten()
    if (
        bool(wrong.all())
        or not bool((share[wrong] >= 0.5).all())
        or bool(unwritten.reshape(rows.shape)[wrong].all())
        or _every_other(bad_rows, rows.shape[0])
        or _scattered(wrong, bad.shape[-2])
        or _row_factors(got, want, bad, atol, rtol) is not None
    ):
        return None
    which = [_index(int(i), tuple(bad.shape[:-1])) for i in bad_rows]
    shown = ", ".join(str(w) for w in which[:4]) + (", ..." if len(which) > 4 else "")
    return (
        f"{len(which)} of the {rows.shape[0]} rows along the last dimension (at {shown}) "
        f"{'is' if len(which) == 1 else 'are'} computed wrong in most elements, the others right: the work along "
        "a row is probably right, and the choice of the data a row is computed from is not. A row of a 3-D output "
        "is one index of each of the first two dimensions (batch and head, or batch and position): check how a "
        "program finds them (program_id split with // and %, each index times its own stride) and, where heads "
        "share an input (grouped-query attention: head h reads h // group size), which one it reads."
    )


def _rows_pattern(
    bad: torch.Tensor, unwritten: torch.Tensor, got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float
) -> str | None:
    """The pattern of the wrong rows (along the last dimension) of an output of two dimensions or more."""
    by_matrix = _matrices_pattern(bad, unwritten)
    if by_matrix:
        return by_matrix
    rows = bad.reshape(-1, bad.shape[-1])
    n_rows, n_cols = rows.shape
    row_bad = rows.any(dim=1)
    bad_rows = row_bad.nonzero().flatten()
    bad_cols = rows.any(dim=0).nonzero().flatten()
    if _every_other(bad_rows, n_rows):
        return (
            "every other row is wrong: the row stride is probably wrong (use the tensor's "
            "stride, e.g. x.stride(0), not the row length)."
        )
    if n_cols <= 4 and bad_cols.numel() < n_cols and bad_rows.numel() == n_rows:
        wrong = ", ".join(str(int(c)) for c in bad_cols)
        return (
            f"in every row of {n_cols} values, exactly the ones at {wrong} are wrong and the others right. "
            "Where the last dimension holds the parts of one value (a complex number's real and imaginary "
            "parts, a point's coordinates), the formula of those parts is off (a sign, a swapped term); "
            "a wrong column offset would usually spoil the other parts too."
        )
    if bad_cols.numel() < n_cols and int(bad_cols[-1]) == n_cols - 1 and _runs(bad_cols):
        return (
            f"only columns {int(bad_cols[0])}..{n_cols - 1} are wrong: the block does not "
            "cover the whole row, or the column mask cuts it short."
        )
    factors = _row_factors(got, want, bad, atol, rtol)
    if factors is not None:
        return _factors_text(factors, int(bad_rows.numel()), n_rows)
    if bad_rows.numel() < n_rows and int(bad_rows[-1]) == n_rows - 1 and _runs(bad_rows):
        first = int(bad_rows[0])
        rows_text = f"only rows {first}..{n_rows - 1} are wrong"
        if bool(unwritten.reshape(rows.shape)[bad_rows].all()):
            return (
                f"{rows_text}, and never written: the grid launches too few programs, or the "
                "programs are mapped to the wrong rows (which program_id axis is which)."
            )
        if first >= _SMALLEST_BLOCK and first % _SMALLEST_BLOCK == 0:
            return (
                f"{rows_text}, the first {first} right, and {first} is a block boundary: the programs "
                "after the first probably start at the wrong row (pid * BLOCK_M rows, each the row stride "
                "long). Or, where a row's work grows with its index (a causal mask: row i sees i + 1 keys), "
                "the rows longer than one block are wrong: a running value carried from one block to the next "
                "is probably not rescaled or not carried."
            )
        return (
            f"{rows_text} while the rows before are right: the row offset is probably wrong "
            "(row i starts at i * the tensor's row stride, e.g. x.stride(0))."
        )
    if bad_cols.numel() < n_cols and _runs(bad_cols) and bad_rows.numel() == n_rows:
        return (
            f"columns {int(bad_cols[0])}..{int(bad_cols[-1])} are wrong in every row: check the "
            "column offsets of the block that covers them."
        )
    per_matrix = bad.shape[-2] if bad.dim() >= 3 else n_rows
    if (
        bad_rows.numel() < n_rows
        and 2 * int(rows.sum()) >= bad_rows.numel() * n_cols
        and _scattered(row_bad, per_matrix)
    ):
        start = int((bad_rows % per_matrix).min())
        before = (
            f" (none in the first {start} rows of {'any matrix' if bad.dim() >= 3 else 'the output'})"
            if start >= _SMALLEST_BLOCK
            else ""
        )
        return (
            f"{bad_rows.numel()} of the {n_rows} rows are wrong, scattered in no regular order{before}: each "
            "row's values decide, not its position. Usually a value carried from one block of the row to the "
            "next (running maximum, sum or accumulator) is not rescaled when a later block raises the maximum, "
            "or not carried: rows that a later block changes go wrong, rows that fit one block stay right."
        )
    if bad_rows.numel() < n_rows and bool(rows[bad_rows].all()):
        return (
            f"{bad_rows.numel()} whole row(s) are wrong, the others right: check how a program "
            "finds its row (program_id and the row stride)."
        )
    if bool(unwritten[bad].all()):
        return (
            "a block-shaped region was never written: the grid launches too few programs "
            "along one axis, or the program_id axes are swapped (axis 0 is the grid's first "
            "number)."
        )
    return None


def _magnitude(want: torch.Tensor, largest_input: float) -> float:
    """The largest magnitude in play: of the expected result, or of the inputs it is computed from."""
    finite = want[torch.isfinite(want)]
    return max(float(finite.abs().max()) if finite.numel() else 0.0, largest_input)


def _pattern(
    bad: torch.Tensor,
    unwritten: torch.Tensor,
    got: torch.Tensor,
    want: torch.Tensor,
    dtype: torch.dtype,
    atol: float,
    rtol: float,
    largest_input: float = 0.0,
) -> str | None:
    """Name the shape of the wrong region, with its usual cause (``unwritten``: still NaN)."""
    flat = bad.flatten()
    total = flat.numel()
    where = flat.nonzero().flatten()
    n_bad = where.numel()
    row_length = bad.shape[-1] if bad.dim() >= 2 else total
    start = int(where[0])
    if start and int(where[-1]) == total - 1 and _runs(where) and (bad.dim() < 2 or n_bad % row_length):
        text = _tail(n_bad, start, bool(unwritten.flatten()[where].all()), tiles=bad.dim() >= 2)
        if text:
            return text
    if _transposed(got, want, atol, rtol):
        return (
            "the output is the expected matrix transposed (only its diagonal is right): a load or "
            "a store pairs the row index with the column stride and the column index with the row "
            "stride."
        )
    factor = _common_factor(got, want, bad)
    if factor is not None:
        named = _NAMED_FACTORS.get(next((f for f in _NAMED_FACTORS if abs(factor / f - 1) < 1e-4), 0.0))
        return f"every wrong element is the right value times {factor:.6g}: " + (
            named
            or "a scale factor is off (a division by the wrong count, N - 1 instead of N, or a missing or extra "
            "normalisation)."
        )
    # Before rounding: rounding spoils rows alike, not some rows wholly and the others not at all.
    by_row = _rows_of_leading_indices(bad, unwritten, got, want, atol, rtol)
    if by_row:
        return by_row
    precision = _precision(got, want, bad, dtype)
    if precision:
        return precision
    if bad.dim() >= 2 and n_bad < total:
        # Failing that, errors small next to the values in play (a result near 0 from large terms).
        return _rows_pattern(bad, unwritten, got, want, atol, rtol) or _precision(
            got, want, bad, dtype, _magnitude(want, largest_input)
        )
    if n_bad == total:
        factors = _row_factors(got, want, bad, atol, rtol) if bad.dim() >= 2 else None
        if factors is not None:
            return _factors_text(factors, n_bad // row_length, n_bad // row_length)
        return _precision(got, want, bad, dtype, _magnitude(want, largest_input)) or (
            "every element is wrong: the computation itself is off (check the loads, the "
            "formula and which tensor each pointer points to)."
        )
    if _runs(where):
        return (
            f"one contiguous stretch is wrong (flat indices {start}..{int(where[-1])}): "
            "look at the program(s) that handle that stretch, and at the offsets."
        )
    return None


def _wrong(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float):
    """(|got - want|, NaN where ``want`` is not, the wrong elements) for float64 ``got``, ``want``."""
    error = (got - want).abs()
    finite_ref = torch.isfinite(want)
    nan_out = torch.isnan(got) & ~torch.isnan(want)
    bad = nan_out | (torch.isinf(got) & finite_ref) | (finite_ref & ~(error <= atol + rtol * want.abs()))
    bad |= ~finite_ref & (got != want) & ~(torch.isnan(got) & torch.isnan(want))
    return error, nan_out, bad


_CHUNK = 1 << 23  # elements per step of the check on a GPU: bounds its float64 temporaries


def matches(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> bool:
    """Whether every element of ``out`` is right (same shape assumed), computed where ``ref`` lies,
    in slices."""
    got, want = out.detach().reshape(-1), ref.detach().reshape(-1)
    for start in range(0, want.numel(), _CHUNK):
        piece = slice(start, start + _CHUNK)
        _, _, bad = _wrong(got[piece].to(want.device, torch.float64), want[piece].to(torch.float64), atol, rtol)
        if bool(bad.any()):
            return False
    return True


def diagnose(
    out: torch.Tensor,
    ref: torch.Tensor,
    atol: float,
    rtol: float,
    name: str = "output",
    largest_input: float = 0.0,
    inf_elsewhere: bool = False,
    updated_in_place: bool = False,
    room=None,
) -> str | None:
    """None when ``out`` matches ``ref`` within ``atol + rtol * |ref|``, else the diagnosis.

    ``largest_input`` (the largest finite magnitude among the case's inputs) and ``inf_elsewhere``
    (another output of the call holds inf where its result is finite) tell NaN that was computed
    from NaN that was never written: the poison fill writes NaN, never inf. ``updated_in_place``:
    ``out`` is an input the call updates (an optimizer's parameters), which held numbers before
    it, so its NaN was computed.

    A wrong output is analysed where ``ref`` lies: on a GPU that is a hundred times faster than
    the CPU (a 16M-element output took seconds there). ``room`` (a grader judging many files at
    once): called with the bytes the analysis needs on that GPU, a context manager that holds them
    and yields the device to use, or None where they can never fit: then only the count, the first
    wrong element and the largest error are given, computed in slices. Without ``room`` a GPU that
    runs out of memory hands the analysis to the CPU.
    """
    if tuple(out.shape) != tuple(ref.shape):
        return (
            f"{name} has shape {tuple(out.shape)} but should have shape {tuple(ref.shape)}: "
            "allocate it with the shape the function documents."
        )
    if out.numel() == 0:
        return None
    if ref.device.type != "cpu" and matches(out, ref, atol, rtol):
        return None  # the usual case on a GPU: decided there, without copying to the CPU
    facts = (atol, rtol, name, largest_input, inf_elsewhere, updated_in_place)
    if room is not None:
        with room(DIAGNOSIS_BYTES_PER_ELEMENT * out.numel()) as given:
            try:
                if given is not None:
                    return _diagnosed(out, ref, given, *facts)
            except torch.cuda.OutOfMemoryError:  # more than the estimate: the slices need little
                pass
            return _headline(out, ref, atol, rtol, name)
    try:
        return _diagnosed(out, ref, ref.device, *facts)
    except torch.cuda.OutOfMemoryError:  # a GPU's own (a CPU raises none of these)
        return _diagnosed(out, ref, torch.device("cpu"), *facts)


# What the analysis of a wrong output holds at most, per element: float64 copies of both tensors
# and the masks and differences of the pattern search (about 65 bytes measured on a CPU).
DIAGNOSIS_BYTES_PER_ELEMENT = 96


def _headline(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, name: str) -> str | None:
    """The first lines of a diagnosis (how many elements are wrong, the first, the largest error),
    computed in slices on ``ref``'s device, for an output too large to analyse whole."""
    got, want = out.detach().reshape(-1), ref.detach().reshape(-1)
    n_bad, n_nan, first, largest = 0, 0, None, None
    for start in range(0, want.numel(), _CHUNK):
        piece = slice(start, start + _CHUNK)
        g, w = got[piece].to(want.device, torch.float64), want[piece].to(torch.float64)
        error, nan_out, bad = _wrong(g, w, atol, rtol)
        n_bad, n_nan = n_bad + int(bad.sum()), n_nan + int(nan_out.sum())
        if first is None and bool(bad.any()):
            at = int(bad.nonzero()[0])
            first = (start + at, float(g[at]), float(w[at]))
        finite_bad = bad & torch.isfinite(g) & torch.isfinite(w)
        if bool(finite_bad.any()):
            worst = float(error[finite_bad].max())
            largest = worst if largest is None else max(largest, worst)
    if first is None:  # right after all (NaN where NaN is expected)
        return None
    total = want.numel()
    index, value, expected = first
    lines = [_count_line(name, n_bad, total, _index(index, tuple(ref.shape)), value, expected)]
    if largest is not None:
        lines.append(_largest_line(largest, atol, rtol))
    if n_nan:
        lines.append(f"{n_nan} element(s) are NaN where the result is not.")
    lines.append(
        f"At {total} elements this output is too large for the grader to look for a pattern in the "
        "wrong elements: the smaller cases' messages name it."
    )
    return "\n".join(lines)


def _count_line(name: str, n_bad: int, total: int, first: tuple, value: float, expected: float) -> str:
    return (
        f"{name}: {n_bad} of {total} elements are wrong ({100.0 * n_bad / total:.3g}%). "
        f"First at index {first}: got {value:.6g}, expected {expected:.6g}."
    )


def _largest_line(largest: float, atol: float, rtol: float) -> str:
    return f"Largest error {largest:.3g} (allowed: {atol:g} + {rtol:g} x |expected|)."


def _diagnosed(
    out: torch.Tensor,
    ref: torch.Tensor,
    where: torch.device,
    atol: float,
    rtol: float,
    name: str,
    largest_input: float,
    inf_elsewhere: bool,
    updated_in_place: bool,
) -> str | None:
    """``diagnose``'s analysis, on device ``where``."""
    got = out.detach().to(where, torch.float64)
    want = ref.detach().to(where, torch.float64)
    error, nan_out, bad = _wrong(got, want, atol, rtol)
    finite_ref = torch.isfinite(want)
    if not bool(bad.any()):
        return None

    n_bad, total = int(bad.sum()), bad.numel()
    first = _index(int(bad.flatten().nonzero()[0]), tuple(bad.shape))
    lines = [_count_line(name, n_bad, total, first, got[first].item(), want[first].item())]
    finite_bad = bad & torch.isfinite(got) & finite_ref
    if bool(finite_bad.any()):
        lines.append(_largest_line(error[finite_bad].max().item(), atol, rtol))
    n_nan = int(nan_out.sum())
    non_finite = bool((~torch.isfinite(got) & finite_ref).any())
    large = largest_input >= _OVERFLOW_INPUT
    if non_finite and updated_in_place:
        lines.append(
            "Pattern: inf or NaN where the result is finite, in a tensor the call updates in place "
            "(it held numbers before the call), so computed: the square root or log of a negative "
            "number, a division by zero, inf - inf, or an overflow. Check each formula's terms "
            "(a square left out, a sign, a running average that cannot go negative)."
        )
        return "\n".join(lines)
    if non_finite and (large or inf_elsewhere or bool((torch.isinf(got) & finite_ref).any())):
        why = f"this case's inputs reach {largest_input:.4g}, so " if large else ""
        lines.append(
            f"Pattern: inf or NaN where the result is finite, and computed rather than left "
            f"unwritten: {why}an intermediate value probably overflowed or was divided by "
            "zero (exp() overflows float32 above about 88; 1 / sqrt(0) is inf, and inf - inf "
            "or 0 * inf is NaN)."
        )
        return "\n".join(lines)
    dropped = bad & torch.isnan(want) & torch.isfinite(got)
    if bool(dropped.any()) and bool(dropped.eq(bad).all()):
        lines.append(
            "Pattern: the wrong elements are exactly those whose result is NaN (PyTorch keeps NaN "
            "through), and yours are numbers there: an operation dropped the NaN. tl.maximum, "
            "tl.minimum and selects by comparison (tl.where(x > 0, x, 0)) turn NaN into a number, "
            "since every comparison with NaN is False; write the formula so that NaN goes through "
            "(for ReLU, tl.where(x < 0, 0, x))."
        )
        return "\n".join(lines)
    # Outputs are filled with NaN whose sign bit is clear; 0 / 0, inf - inf and the like computed
    # on a CPU give NaN with it set. Such NaN was stored by the call, never left unwritten.
    computed_nan = bool(nan_out.any()) and bool(torch.signbit(got[nan_out]).all())
    if n_nan == total and computed_nan:
        pattern = (
            "every element is NaN, with its sign bit set, which the NaN that outputs are filled with before "
            f"the call never has: {_COMPUTED_NAN}"
        )
    elif n_nan == total:
        pattern = (
            "every element is NaN, which is what outputs hold before the call. Most often "
            "nothing was written: check that the kernel is launched with at least one "
            "program (a grid computed with // is 0 for inputs smaller than a block: use "
            "triton.cdiv), that its store runs, and that the store's mask is not always "
            "False (an off-by-one such as offsets < n - 1 is False everywhere when n is 1). "
            "Otherwise the NaN came in through a load: one missing its mask reads outside an "
            "input, and masked-off lanes loaded without `other=` hold no defined value, which "
            "a reduction such as tl.max then takes in."
        )
    else:
        pattern = _pattern(bad, nan_out, got, want, out.dtype, atol, rtol, largest_input)
    if n_nan and n_nan < total and computed_nan:
        lines.append(
            f"{n_nan} element(s) are NaN with the sign bit set, which the NaN that outputs are filled with "
            f"before the call never has: {_COMPUTED_NAN}"
        )
    elif n_nan and n_nan < total and not (pattern and "never written" in pattern):  # (else the pattern says it)
        lines.append(
            f"{n_nan} element(s) are NaN. Outputs are filled with NaN before the call, so "
            "these were probably never written: check the mask and that the grid covers "
            "every element. (Or NaN was read from outside an input by a load missing its "
            "mask or other=, or computed, e.g. exp of -inf minus -inf.)"
        )
    if pattern:
        lines.append("Pattern: " + pattern)
    return "\n".join(lines)


_COMPUTED_NAN = (
    "the call stored them, so they were computed, not left unwritten. Look for 0 / 0 (a sum or a "
    "count that is 0), inf - inf or 0 * inf (a row whose every entry is masked to -inf), or the square "
    "root or log of a negative number."
)


def gist(message: str) -> str:
    """A failure message without its numbers: two cases with the same gist have the same problem."""
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", message)


# ---- across the cases of one run ----------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What ``across_cases`` needs to know of one case: its parameters, inputs and verdict."""

    case: object  # grader.core.cases.Case
    passed: bool
    non_contiguous: frozenset = frozenset()  # names of the inputs that are not contiguous
    row_wise: bool = False  # the API works row by row (grader.core.cases.Spec.row_wise)


def input_names(reference) -> list[str]:
    """The names of the reference's positional parameters: the API's input names."""
    try:
        return [
            p.name
            for p in inspect.signature(reference).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return []


def non_contiguous_inputs(args: tuple, names: list[str]) -> frozenset:
    return frozenset(
        names[i] if i < len(names) else f"input {i + 1}"
        for i, arg in enumerate(args)
        if isinstance(arg, torch.Tensor) and not arg.is_contiguous()
    )


def _power_of_two(n) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# What failing exactly where a size does not fill its last block usually means.
_PARTIAL_BLOCK = (
    "A block is a power of two long, so what differs is the lanes past the end: mask them and pad "
    "them (other=) with a value that cannot change the result (-inf for a maximum, 0 for a sum), "
    "and divide by the real length N, not by the block size (they are equal only when N fills "
    "the block). Or the last, partial block is never run: a count of blocks rounded down (N // BLOCK "
    "where triton.cdiv(N, BLOCK) is meant, in the grid or in the size of a buffer of partial results)."
)


def _sizes(outcome: Outcome) -> dict[str, int]:
    """A case's sizes, by the names a learner knows them by: "the row length" and "the number of
    rows" of a row-wise API, "the length" of a 1-D shape, shape[i] otherwise, the letters of a size
    tuple named by them ("mnk": M, N and K), and whole-number parameters ("seq_k", "n")."""
    sizes: dict[str, int] = {}
    for key, value in outcome.case.params.items():
        if _is_size(value) and "seed" not in key:
            sizes[key] = value
        elif not (isinstance(value, tuple) and value and all(_is_size(v) for v in value)):
            continue
        elif key == "shape" and len(value) == 1:
            sizes["the length"] = value[0]
        elif key == "shape" and outcome.row_wise:
            sizes["the row length"] = value[-1]
            sizes["the number of rows"] = math.prod(value[:-1])
        elif key == "shape":
            sizes.update((f"shape[{i}]", v) for i, v in enumerate(value))
        elif key.isalpha() and len(key) == len(value):
            sizes.update(zip(key.upper(), value))
    return sizes


def _size_features(outcomes: list[Outcome]) -> list[dict[str, str]]:
    """Conditions on the cases' sizes, for each outcome, that only the whole run can define: a size
    larger than the largest one that passes below every failing one, a size that is not a power of
    two, one that is not a multiple of the largest power of two (16 or more) that divides every
    passing one."""
    sizes = [_sizes(o) for o in outcomes]
    found: list[dict[str, str]] = [{} for _ in outcomes]
    names = list(dict.fromkeys(name for sized in sizes for name in sized))
    for name in names:
        values = [sized.get(name) for sized in sizes]
        failing = [v for v, o in zip(values, outcomes) if not o.passed]
        passing = [v for v, o in zip(values, outcomes) if o.passed and v is not None]
        if not failing or None in failing:
            continue
        below = [v for v in passing if v < min(failing)]
        if below and max(below) > 1:  # (larger than 1 would say no more than "not a single element")
            limit = max(below)
            for conditions, value in zip(found, values):
                if value is not None and value > limit:
                    conditions[f"{name} is larger than {limit}"] = (
                        f"Up to {limit} the work fits in one block (or one loop step); past it, it takes several, "
                        "so look at what happens from the second on: the grid, the loop's pointer steps, and "
                        "values carried from one step to the next (an accumulator overwritten instead of added "
                        "to, acc = tl.dot(a, b) where acc += tl.dot(a, b) is meant; a running maximum or sum not "
                        "rescaled when a later block changes it)."
                    )
        if name != "the row length":  # (a row-wise API's rows have their own condition above)
            for conditions, value in zip(found, values):
                if value and not _power_of_two(value):  # (an empty case has no block to fill)
                    conditions[f"{name} is not a power of two"] = _PARTIAL_BLOCK
        block = min((v & -v for v in passing if v), default=0)  # the largest power of two dividing them all
        if block >= _SMALLEST_BLOCK:
            for conditions, value in zip(found, values):
                if value is not None and value % block:
                    conditions[f"{name} is not a multiple of {block}"] = (
                        f"Those sizes end in a partial block (of {block} or a divisor of it): mask the lanes past "
                        "the end and pad them (other=) with a value that cannot change the result, and divide "
                        "by the real length N, not by the block size. Or that last block is never run: a count "
                        "of blocks rounded down (N // BLOCK where triton.cdiv(N, BLOCK) is meant, in the grid "
                        "or in the size of a buffer of partial results)."
                    )
    return found


def _features(outcome: Outcome) -> dict[str, str]:
    """Conditions a case can meet, each with what failing exactly where it holds usually means."""
    case = outcome.case
    found: dict[str, str] = {}
    for name in sorted(outcome.non_contiguous):
        found[f"{name} is not contiguous"] = (
            f"Step through {name} with its own strides ({name}.stride(0), ...) rather than assuming "
            "packed rows, or make it contiguous in the launcher."
        )
    if outcome.non_contiguous:
        found["the inputs are not contiguous (non-contiguous inputs)"] = (
            "Step through each input with its own strides (x.stride(0), ...) rather than assuming "
            "packed rows, or make the inputs contiguous in the launcher (x.contiguous())."
        )
    shape = case.params.get("shape")
    if outcome.row_wise and isinstance(shape, tuple) and shape and not _power_of_two(shape[-1]):
        found["the rows are not a power of two long"] = _PARTIAL_BLOCK
    if outcome.row_wise and isinstance(shape, tuple) and shape and len(shape) != 2:
        found["the input is not 2-D (1-D, or 3-D and more)"] = (
            "A row-wise launcher must make rows of every leading dimension (x.reshape(-1, N)) and count them "
            "as x.numel() // N, for the grid and the outputs alike: x.shape[0] counts the rows of a 2-D x only."
        )
    short = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
    if case.dtype in short:
        found[f"the dtype is {short[case.dtype]}"] = (
            "Look at what depends on the dtype: the output's dtype, a conversion, or precision "
            "(compute in float32, round once when storing)."
        )
    if case.dtype in (torch.float32, torch.float64):
        found["the dtype is float32 or float64"] = (
            "Where the 16-bit cases pass and the wider ones fail, something is probably rounded to 16 bits "
            "whatever the input (a hard-coded tl.float16 or tl.bfloat16 in a conversion, an operand of tl.dot or "
            "an accumulator): convert to the input's own dtype. Where it is the reverse, compute in float32 and "
            "round once, when storing."
        )
    for key, value in case.params.items():
        if key != "shape":
            found[f"{key} is set"] = "Look at what these cases do that the others do not."
            found[f"{key}={value!r}"] = "Look at what these cases do that the others do not."
    return found


def _refusal(outcome: Outcome) -> bool:
    """A case whose call must refuse its inputs: it computes nothing, so it says nothing of how the
    output cases split (and its dtype is only the default)."""
    from grader.core.protocols import Raises

    return isinstance(getattr(outcome.case.spec, "protocol", None), Raises)


def across_cases(outcomes: list[Outcome]) -> str | None:
    """What splits the failing cases from the passing ones, when one condition does exactly."""
    outcomes = [o for o in outcomes if not _refusal(o)]
    failing = [o for o in outcomes if not o.passed]
    passing = [o for o in outcomes if o.passed]
    if len(failing) < 2 or not passing:
        return None
    features = [_features(o) for o in outcomes]
    order: list[str] = []
    for found in features:
        order += [key for key in found if key not in order]
    for found, extra in zip(features, _size_features(outcomes)):  # tried after the others
        order += [key for key in extra if key not in order and key not in found]
        for key, text in extra.items():
            found.setdefault(key, text)

    def advice(key):
        return next(found[key] for found in features if key in found)

    def labels(group):
        names = sorted({o.case.label for o in group if o.case.label})
        return f" ({'; '.join(names[:4])})" if names else ""

    for key in order:
        have = [key in found for found in features]
        for verdict, group in (("fail", failing), ("pass", passing)):
            if len(group) < 2:  # a condition that singles out one case only names that case
                continue
            if all(h == (o in group) for h, o in zip(have, outcomes)):
                return f"Across the cases: exactly the cases where {key} {verdict}{labels(group)}. {advice(key)}"
    # Weaker: every failure has it, and most cases that have it fail; the condition whose cases
    # fail most often first.
    weak = []
    for key in order:
        with_it = [o for found, o in zip(features, outcomes) if key in found]
        if (
            all(key in found for found, o in zip(features, outcomes) if not o.passed)
            and 2 * len(failing) >= len(with_it)
            and len(with_it) < len(outcomes)
        ):
            weak.append((-len(failing) / len(with_it), len(weak), key))
    if weak:
        key = min(weak)[2]
        return (
            f"Across the cases: every case that fails is one where {key}{labels(failing)}, "
            f"and every case where it does not hold passes. {advice(key)}"
        )
    return None
