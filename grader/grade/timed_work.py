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

# A timed call must keep the GPU busy for at least this share of the audit call's time. The two
# run the same kernels on inputs of the same shape with the GPU alone; the margin allows for the
# audit call's inputs being partly in the L2 cache (they were just written) and for clock ramps.
MIN_BUSY_SHARE = 0.7


def timed_work_problem(reps: int, window: dict, audit: dict, own_kernels: set[str]) -> tuple[str, str] | None:
    """(kind, learner-facing message) when the timed calls did not do the audit call's work, else
    None. ``window``: the trace of the ``reps`` timed calls (``counts``: launches per kernel name,
    ``busy_us``: their summed GPU time); ``audit``: the same for the one judged call on fresh
    inputs; ``own_kernels``: the submission's @triton.jit names."""
    window_counts, audit_counts = window.get("counts"), audit.get("kernel_counts")
    if not isinstance(window_counts, dict) or not isinstance(audit_counts, dict):
        return "untraced", ("the timed calls could not be traced (no CUPTI trace on this machine), so their "
                            "work could not be verified; performance is not graded without it.")
    foreign = foreign_kernels([str(name) for name in window_counts], own_kernels)
    if foreign:
        shown = ", ".join(name[:80] for name in foreign[:3])
        return "timed_foreign", (f"the timed calls ran GPU kernels that are not your Triton kernels ({shown}). Every "
                                 "call must do its work in your own kernel, the timed ones too.")
    own = sorted(own_kernels.intersection({*window_counts, *audit_counts}))
    expected = {name: reps * int(audit_counts.get(name, 0)) for name in own}
    launched = {name: int(window_counts.get(name, 0)) for name in own}
    if launched != expected:
        differing = [name for name in own if launched[name] != expected[name]][:3]
        detail = "; ".join(f"{name}: {launched[name]} launches in {reps} timed calls, "
                           f"{audit_counts.get(name, 0)} in one judged call" for name in differing)
        return "timed_skipped", (f"the timed calls did not launch your kernels as a judged call does ({detail}). "
                                 "Every call must compute its result; remembering results or work from earlier "
                                 "calls is not allowed.")
    window_busy, audit_busy = float(window.get("busy_us") or 0.0), float(audit.get("busy_us") or 0.0)
    per_call = window_busy / max(reps, 1)
    if audit_busy > 0 and per_call < MIN_BUSY_SHARE * audit_busy:
        return "timed_skipped", (f"each timed call kept the GPU busy for {per_call:.1f} us, a judged call on fresh "
                                 f"inputs of the same shape for {audit_busy:.1f} us: the timed calls did less work. "
                                 "Every call must compute its result; remembering results or work from earlier "
                                 "calls is not allowed.")
    return None
