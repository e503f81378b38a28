"""Turn a wrong output into a sentence a learner can act on.

``diagnose`` compares an output with its float64 reference and, when they differ, says how many
elements are wrong, where the first one is, how large the error is, and which pattern the wrong
elements form ("only the tail", "every other row", "columns from 64 on"), with what that pattern
usually means in a Triton kernel.
"""

from __future__ import annotations

import torch


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if shape else ()


def _runs(indices: torch.Tensor) -> bool:
    """True when sorted indices are one contiguous run."""
    return indices.numel() > 0 and int(indices[-1] - indices[0]) + 1 == indices.numel()


def _pattern(bad: torch.Tensor, unwritten: torch.Tensor) -> str | None:
    """Name the shape of the wrong region, with its usual cause (``unwritten``: still NaN)."""
    flat = bad.flatten()
    total = flat.numel()
    where = flat.nonzero().flatten()
    n_bad = where.numel()
    if n_bad == total:
        return ("every element is wrong: the computation itself is off (check the loads, the "
                "formula and which tensor each pointer points to).")
    row_length = bad.shape[-1] if bad.dim() >= 2 else total
    if int(where[-1]) == total - 1 and _runs(where) and (bad.dim() < 2 or n_bad % row_length):
        return (f"only the last {n_bad} element(s) are wrong (from flat index {int(where[0])} on): "
                "the tail past the last full block. The grid probably rounds down (use "
                "triton.cdiv) or the mask that guards the last block is wrong.")
    if bad.dim() < 2:
        if _runs(where):
            return (f"one contiguous stretch is wrong (flat indices {int(where[0])}..{int(where[-1])}): "
                    "look at the program(s) that handle that stretch, and at the offsets.")
        return None
    rows = bad.reshape(-1, bad.shape[-1])
    bad_rows = rows.any(dim=1).nonzero().flatten()
    bad_cols = rows.any(dim=0).nonzero().flatten()
    n_rows, n_cols = rows.shape
    if bad_rows.numel() > 1 and bool((bad_rows % 2 == bad_rows[0] % 2).all()) and \
            bad_rows.numel() >= (n_rows - int(bad_rows[0])) // 2:
        return ("every other row is wrong: the row stride is probably wrong (use the tensor's "
                "stride, e.g. x.stride(0), not the row length).")
    if bad_cols.numel() < n_cols and int(bad_cols[-1]) == n_cols - 1 and _runs(bad_cols):
        return (f"only columns {int(bad_cols[0])}..{n_cols - 1} are wrong: the block does not "
                "cover the whole row, or the column mask cuts it short.")
    if bad_rows.numel() < n_rows and int(bad_rows[-1]) == n_rows - 1 and _runs(bad_rows):
        rows_text = f"only rows {int(bad_rows[0])}..{n_rows - 1} are wrong"
        if bool(unwritten.reshape(rows.shape)[bad_rows].all()):
            return f"{rows_text}, and never written: the grid launches too few programs."
        return (f"{rows_text} while the rows before are right: the row offset is probably wrong "
                "(row i starts at i * the tensor's row stride, e.g. x.stride(0)).")
    if bad_cols.numel() < n_cols and _runs(bad_cols) and bad_rows.numel() == n_rows:
        return (f"columns {int(bad_cols[0])}..{int(bad_cols[-1])} are wrong in every row: check the "
                "column offsets of the block that covers them.")
    if bad_rows.numel() < n_rows and bool(rows[bad_rows].all()):
        return (f"{bad_rows.numel()} whole row(s) are wrong, the others right: check how a program "
                "finds its row (program_id and the row stride).")
    return None


def diagnose(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
             name: str = "output") -> str | None:
    """None when ``out`` matches ``ref`` within ``atol + rtol * |ref|``, else the diagnosis."""
    if tuple(out.shape) != tuple(ref.shape):
        return (f"{name} has shape {tuple(out.shape)} but should have shape {tuple(ref.shape)}: "
                "allocate it with the shape the function documents.")
    if out.numel() == 0:
        return None
    got = out.detach().to("cpu", torch.float64)
    want = ref.detach().to("cpu", torch.float64)
    error = (got - want).abs()
    finite_ref = torch.isfinite(want)
    nan_out = torch.isnan(got) & ~torch.isnan(want)
    bad = nan_out | (torch.isinf(got) & finite_ref) | (finite_ref & ~(error <= atol + rtol * want.abs()))
    bad |= ~finite_ref & (got != want) & ~(torch.isnan(got) & torch.isnan(want))
    if not bool(bad.any()):
        return None

    n_bad, total = int(bad.sum()), bad.numel()
    first = _index(int(bad.flatten().nonzero()[0]), tuple(bad.shape))
    lines = [f"{name}: {n_bad} of {total} elements are wrong ({100.0 * n_bad / total:.3g}%). "
             f"First at index {first}: got {got[first].item():.6g}, expected {want[first].item():.6g}."]
    finite_bad = bad & torch.isfinite(got) & finite_ref
    if bool(finite_bad.any()):
        lines.append(f"Largest error {error[finite_bad].max().item():.3g} "
                     f"(allowed: {atol:g} + {rtol:g} x |expected|).")
    n_nan = int(nan_out.sum())
    if n_nan and n_nan < total:  # (all NaN: the pattern below says it once)
        lines.append(f"{n_nan} element(s) are NaN. Outputs are filled with NaN before the call, so "
                     "these were probably never written: check the mask and that the grid covers "
                     "every element. (Or NaN was read from outside an input by a load missing its "
                     "mask or other=, or computed, e.g. exp of -inf minus -inf.)")
    if n_nan == total:
        pattern = ("nothing was written: check that the kernel is launched, that its store runs, "
                   "and that the store's mask is not always False (or NaN came from reading "
                   "outside an input: a load missing its mask).")
    else:
        pattern = _pattern(bad, nan_out)
    if pattern:
        lines.append("Pattern: " + pattern)
    return "\n".join(lines)
