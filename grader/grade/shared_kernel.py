"""One Jupyter kernel for several notebooks: what it runs between two of them, and how it stops.

``grader.grade.autograde`` shares a kernel across the notebooks of an ``nbgrader autograde``
command; the course's own tests share one across the study notebooks they run. Both reset the
kernel with ``RESET`` before each notebook after the first. This module needs only nbclient
(the ``[notebooks]`` extra), not nbgrader.
"""

from __future__ import annotations

from nbclient.util import run_sync

# Run (silently, outside the history) in a kernel that ran an earlier notebook, before the next:
# IPython's own reset, as a new kernel would start, but for the full garbage collection that
# reset runs (a quarter of a second with torch imported, while the cells leave almost nothing
# to collect; Python's collector still runs as it does anyway); then the notebook's folder.
RESET = """\
def _reset(path):
    import gc, os
    collect, gc.collect = gc.collect, lambda generation=2: 0
    try:
        get_ipython().reset(new_session=True)
    finally:
        gc.collect = collect
    os.chdir(path)
_reset({path!r})
"""


def stop(kc, km, now: bool = False) -> None:
    """Close the client ``kc`` and shut down the kernel of the manager ``km`` (either may be None)."""
    if kc is not None:
        kc.stop_channels()
    if km is None:
        return
    try:
        if run_sync(km.is_alive)():
            run_sync(km.shutdown_kernel)(now=now)
    finally:
        run_sync(km.cleanup_resources)()
