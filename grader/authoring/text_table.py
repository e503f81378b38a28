"""Rows of text cells as aligned columns, for the maintainers' tools' printed tables."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(rows: Sequence[Sequence[str]], ruled: bool = True) -> str:
    """``rows`` (the first one the heading) in columns two spaces apart; ``ruled``: a line of dashes
    under the heading."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if ruled:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
