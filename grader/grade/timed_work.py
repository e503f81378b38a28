"""What is timed is what was judged: the timed calls held to the evidence of a judged call.

The timed loop rotates over a few input sets, so a submission could recognise a set it has seen
and skip the work, or do the work in its own kernel only where it is judged and hand the timed
calls to a library. The loop therefore runs under the GPU's kernel trace, and right after it, with
the GPU still alone, the child makes one more call on inputs it has never seen (the audit call),
judged like any case. The timed calls must then show the audit call's work on every call: no
kernel that is not the submission's own (or plain data movement), the same launches of each of
its kernels, and about the same time on the GPU. Remembering, skipping or swapping work in the
timed calls shows up as fewer launches, other kernels or less GPU time per call; none of it is
visible to the submission, which cannot tell a timed call from the audit call before it returns.
"""

from __future__ import annotations

from grader.core.evidence import foreign_kernels

# A timed call's own kernels must run at least this share of their time in the audit call. The two
# run the same kernels on inputs of the same shape with the GPU alone; the margin allows for the
# audit call's inputs being partly in the L2 cache (they were just written) and for clock ramps.
# The 17 timed references measured 0.94 to 1.01 on an H200; remembering work can gain at most 1.25 x.
MIN_BUSY_SHARE = 0.8


def timed_work_problem(
    reps: int, window: dict, audit: dict, own_kernels: set[str], moves_data: bool = False
) -> tuple[str, str] | None:
    """(kind, learner-facing message) when the timed calls did not do the audit call's work, else
    None. ``window``: the trace of the ``reps`` timed calls (``counts``: launches per kernel name,
    ``times_us``: GPU time per kernel name); ``audit``: the child's report of the one judged call
    on fresh inputs (``kernel_counts``, ``kernel_us``); ``own_kernels``: the submission's
    @triton.jit names; ``moves_data``: moving data is the exercise, so copy kernels count as foreign."""
    window_counts, audit_counts = window.get("counts"), audit.get("kernel_counts")
    if not isinstance(window_counts, dict) or not isinstance(audit_counts, dict):
        return "untraced", (
            "the timed calls could not be traced (no CUPTI trace on this machine), so their "
            "work could not be verified; performance is not graded without it."
        )
    foreign = foreign_kernels([str(name) for name in window_counts], own_kernels, moves_data)
    if foreign:
        shown = ", ".join(name[:80] for name in foreign[:3])
        return "timed_foreign", (
            f"the timed calls ran GPU kernels that are not your Triton kernels ({shown}). Every "
            "call must do its work in your own kernel, the timed ones too."
        )
    own = sorted(own_kernels.intersection({*window_counts, *audit_counts}))
    expected = {name: reps * int(audit_counts.get(name, 0)) for name in own}
    launched = {name: int(window_counts.get(name, 0)) for name in own}
    if launched != expected:
        differing = [name for name in own if launched[name] != expected[name]][:3]
        detail = "; ".join(
            f"{name}: {launched[name]} launches in {reps} timed calls, {audit_counts.get(name, 0)} in one judged call"
            for name in differing
        )
        return "timed_skipped", (
            f"the timed calls did not launch your kernels as a judged call does ({detail}). "
            "Every call must compute its result; remembering results or work from earlier "
            "calls is not allowed."
        )
    # The submission's own kernels' GPU time: data movement differs between a judged call (whose
    # outputs the harness may fill beforehand) and a timed one, and is not the exercise's work.
    per_call, audit_us = own_gpu_us(reps, window, audit, own_kernels).values()
    if audit_us > 0 and per_call < MIN_BUSY_SHARE * audit_us:
        return "timed_skipped", (
            f"your kernels ran on the GPU for {per_call:.1f} us per timed call, and for "
            f"{audit_us:.1f} us in a judged call on fresh inputs of the same shape: the timed "
            "calls did less work. Every call must compute its result; remembering results or "
            "work from earlier calls is not allowed."
        )
    return None


def windows_work_problem(
    reps: int, windows: list[dict], audit: dict, own_kernels: set[str], moves_data: bool = False
) -> tuple[str, str, dict] | None:
    """``timed_work_problem`` of the first of several timed windows (each of ``reps`` calls) that
    has one, with that window's trace; None when every window did the audit call's work. The
    grade takes the fastest window, so each one must be held to the judged work on its own."""
    for window in windows:
        found = timed_work_problem(reps, window, audit, own_kernels, moves_data)
        if found is not None:
            return (*found, window)
    return None


def own_gpu_us(reps: int, window: dict, audit: dict, own_kernels: set[str]) -> dict:
    """The submission's own kernels' GPU time in microseconds: per timed call, and in the audit call."""

    def own_time(times) -> float:
        return sum(float(us) for name, us in (times or {}).items() if name in own_kernels)

    return {
        "timed": round(own_time(window.get("times_us")) / max(reps, 1), 2),
        "judged": round(own_time(audit.get("kernel_us")), 2),
    }
