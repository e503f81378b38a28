"""How a module's grade is computed: every scoring rule in one place, as pure functions.

A module's points come in three parts (``points``): the share of its public cases that pass, the
share of its hidden cases that pass, and performance, graded on a GPU once every case passes,
by a linear credit curve of the speed against the reference (``credit``). An integrity finding (a
way around the exercise: computing with PyTorch, faking the timed work, a file the policy gate
refused) withholds every part (``withheld``). A part that was not graded (performance without a
GPU) is said to be left out, never counted as failed; so is, without a GPU, a part whose every case
the module's starting kernel already passes (``shows_no_work``): there correctness cannot tell an
untouched file from a finished one, only speed can. A module made of several exercises
(``grader.core.cases.Part``, mastery/04) weighs each exercise's share of cases by its points
(``parts_share``) and times each on its own function, its performance credit the weighted
mean of theirs (``grader.grade.timing.combined``).

The run phase writes records (``grader.grade.results``); the record phase turns them into points
with these functions (``grader.grade.record``); the tables and the notebooks' text name them.
"""

from __future__ import annotations

POINTS = {"public": 4, "hidden": 4, "performance": 2}
# The optimization track is about speed: most of its points are.
TRACK_POINTS = {"optimization": {"public": 2, "hidden": 2, "performance": 6}}
PARTS = tuple(POINTS)
# A record's performance entry where no CUDA GPU graded speed (left out of the total, ``no_gpu``).
PERFORMANCE_NOT_GRADED = {"graded": False, "reason": "not graded: needs a CUDA GPU"}
# What a module graded without a GPU, whose starting kernel already passes every case, shows in
# place of its total, and why (``shows_no_work``).
NOT_GRADED_HERE = "not graded: needs a GPU"


def no_work_reason(which: str = "") -> str:
    """Why correctness is not graded where the starting kernel passes every case (``which``: "public
    " or "hidden " for one part only), and what to do, as a clause."""
    return (
        f"the starting kernel already passes every {which}case, so only speed shows the work, and speed "
        "is graded on a CUDA GPU: grade this module on a GPU"
    )


def points(track: str) -> dict[str, int]:
    """The points of each part of a module of ``track`` (every module is out of 10)."""
    return TRACK_POINTS.get(track, POINTS)


def credit(ratio: float, threshold: float, floor: float) -> float:
    """Performance credit in [0, 1] for running at ``ratio`` x the reference's speed: none at or
    below ``floor``, all from ``threshold``, linear in between (``Spec.floor``)."""
    if ratio >= threshold:
        return 1.0
    if ratio <= floor:
        return 0.0
    return round((ratio - floor) / (threshold - floor), 4)


def part_points(share: float, out_of: float) -> float:
    """The points for passing ``share`` (0 to 1) of a part worth ``out_of``, to the hundredth."""
    return min(float(out_of), round(float(out_of) * max(0.0, share), 2))


def case_share(rows: list[dict], visibility: str) -> tuple[int, int]:
    """(passed, total) of a record's case rows of ``visibility`` ("public" or "hidden")."""
    chosen = [row for row in rows if row["visibility"] == visibility]
    return sum(bool(row["passed"]) for row in chosen), len(chosen)


def withheld(record: dict) -> str | None:
    """Why every part of ``record`` scores 0 (its integrity finding's message), else None."""
    integrity = record.get("integrity")
    return integrity["message"] if integrity else None


def performance_share(performance: dict, threshold: float, floor: float) -> float | None:
    """The share of the performance points a record's performance entry earns; None when
    performance was not graded (left out, not failed)."""
    if not performance.get("graded"):
        return None
    if "credit" in performance:
        return float(performance["credit"])
    return credit(float(performance.get("ratio") or 0.0), threshold, floor)


def no_gpu(performance: dict) -> bool:
    """Whether performance was left out because the run had no CUDA GPU (and not, say, because
    this checkout has no reference to time against)."""
    return not performance.get("graded") and performance.get("reason") == PERFORMANCE_NOT_GRADED["reason"]


def shows_no_work(record: dict, visibility: str) -> bool:
    """Whether the ``visibility`` cases of ``record`` cannot show work here: speed was not graded
    for want of a GPU and the module's starting kernel passes every one of them (``given``, from
    ``record.with_given``), so the untouched file and a finished one pass them alike. Never under
    an integrity finding, which withholds every part. A part with no cases here (hidden cases in
    a learner's checkout) shows no work where the starting kernel passes every case there is."""
    every = list(record.get("cases") or ())
    rows = [row for row in every if row["visibility"] == visibility] or every
    given = set(record.get("given") or ())
    return (
        bool(rows)
        and not withheld(record)
        and no_gpu(record.get("performance") or {})
        and all(row["name"] in given for row in rows)
    )


def graded_parts(record: dict | None, track: str) -> dict[str, int]:
    """The parts of ``record`` that were graded, with their points: what its total is out of.
    Performance that was left out (no GPU, or not reached) is not among them, nor, without a GPU,
    cases that show no work (``shows_no_work``), unless an integrity finding withholds
    everything, which counts every part as failed. No record: every part. Empty: the module is
    not graded on this machine (``not_graded_here``)."""
    parts = points(track)
    if record is None or withheld(record) or (record.get("performance") or {}).get("graded"):
        return dict(parts)
    return {part: out_of for part, out_of in parts.items() if part != "performance" and not shows_no_work(record, part)}


def not_graded_here(record: dict | None, track: str) -> bool:
    """Whether no part of ``record`` was graded on this machine: its total is 0 of 0, shown as
    ``NOT_GRADED_HERE`` (the starting kernel passes every case and speed needs a GPU)."""
    return record is not None and not graded_parts(record, track)


def work_share(rows: list[dict], given: set[str] | None = None) -> tuple[float, int, int]:
    """(share of the part's points, cases that count, of those passed) for a record's case rows
    of one visibility. ``given``: the names of the cases the module's starting kernel passes (it
    does in the debugging track, where only some cases meet a planted bug, and wherever input
    validation is given code). Those show no work, so the share counts the other cases, and a
    given case that now fails takes one back: an untouched file scores 0, a finished one 1.
    Where the starting kernel passes every case (the optimization track's correct but slow
    kernels) or is unknown, every case counts."""
    given = given or set()
    work = [row for row in rows if row["name"] not in given]
    if not rows:
        return 0.0, 0, 0
    if not work or len(work) == len(rows):
        passed = sum(bool(row["passed"]) for row in rows)
        return passed / len(rows), len(rows), passed
    earned = sum(bool(row["passed"]) for row in work)
    broken = sum(not row["passed"] for row in rows if row["name"] in given)
    return max(0, earned - broken) / len(work), len(work), earned


def parts_share(
    rows: list[dict], given: set[str] | None = None, weights: dict[str, float] | None = None
) -> tuple[float, int, int]:
    """``work_share`` for a module of several parts (``weights``: each part's share of the
    module's points, by name; each row names its ``part``): every part's share weighted as its
    points, so that a part's work counts the same whatever its number of cases. Parts without
    rows here drop out of the weights. Without weights, ``work_share`` itself."""
    if not weights:
        return work_share(rows, given)
    by_part: dict[str, list[dict]] = {}
    for row in rows:
        by_part.setdefault(row.get("part", ""), []).append(row)
    total = sum(weights.get(part, 0.0) for part in by_part)
    if total <= 0:
        return work_share(rows, given)
    shares = {part: work_share(part_rows, given) for part, part_rows in by_part.items()}
    share = sum(weights.get(part, 0.0) * found[0] for part, found in shares.items()) / total
    return share, sum(found[1] for found in shares.values()), sum(found[2] for found in shares.values())
