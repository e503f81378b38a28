"""nbgrader autograde with one notebook kernel for all the notebooks of a command.

nbgrader's ``Execute`` starts a Jupyter kernel for every notebook it autogrades and shuts it down
afterwards. That start-up (Python, IPython, ipykernel: 1.5 s on a 2-core machine), the first
cell's ``import grader`` (torch and triton: 2 s more) and the new client's handshake are nearly
all of the 3.6 s a notebook costs there (6 s when the machine is busy), for cells that then read
a record in a few hundredths of a second. ``SharedKernelExecute`` starts one kernel and keeps it,
and its client, for every notebook of the ``nbgrader autograde`` command (0.2 s per notebook
then; ``python -m grader.grade.bench_record`` measures both):

- before each notebook after the first, the kernel is reset as a fresh one would be: its
  namespace and output cache cleared, the execution count back to 1 (so the outputs, ``In [1]``
  included, are the same bytes as with a kernel of its own), and its current folder moved to the
  notebook's, where ``grader.grade.record.score`` looks for ``kernel.py``;
- a kernel that died, or whose notebook had a cell that failed or timed out (something went
  wrong in the grader itself: ``score`` never raises), is shut down, and the next notebook
  starts a new one, as it would have anyway;
- the kernel is shut down when the command ends.

Sharing is safe here, and only here: the notebooks are the course's own (the pipeline puts the
released copy beside every ``kernel.py``, and nbgrader restores the locked cells before running
them), their cells only call ``score``, which keeps no state between calls, and no learner code
is ever imported in the notebook kernel (the run phase's sandbox runs it, in other processes).
What a kernel keeps between notebooks is only what the grader imported, which is the point.

Why not lean notebooks instead, whose cells import neither torch nor triton: importing
``grader`` selects the device (``grader.core.device.select``, which needs torch to know whether
CUDA is there) so that no learner file is ever imported before ``TRITON_INTERPRET`` is decided,
and finding a record needs the device mode too (it is part of the record's name). Keeping that
guarantee while skipping torch would mean changing device selection for every user of the
package; with one kernel per command the import is paid once (about 2 s in the kernel, 3 s in
nbgrader's own process, which imports this module), not once per notebook, so it stays as it is.

``grader.grade.course.shared_kernel_arguments()`` turns it on for one ``nbgrader autograde``
command; without those arguments nbgrader runs as it always has.
"""

from __future__ import annotations

import atexit
import os

from nbclient.util import run_hook, run_sync
from nbgrader.preprocessors import Execute

from grader.grade.shared_kernel import RESET, stop

# The shared kernel, while it runs: "km" its manager, "kc" the client connected to it (a new
# client per notebook would cost a fifth of a second or more: jupyter_client waits that long for
# the kernel's messages to stop before it hands a new client over).
_shared: dict = {}


def shut_down(now: bool = False) -> None:
    """Stop the shared kernel, if there is one; the next notebook starts a new one."""
    stop(_shared.pop("kc", None), _shared.pop("km", None), now=now)


atexit.register(shut_down)


class SharedKernelExecute(Execute):
    """nbgrader's ``Execute``, with one kernel for every notebook of the process."""

    def preprocess(self, nb, resources=None, km=None):
        self._reused, self._failed = False, False
        if km is not None:  # the caller's own kernel: nothing to share
            return super().preprocess(nb, resources, km)
        shared = _shared.get("km")
        if shared is not None and run_sync(shared.is_alive)():
            self._reused = True
        else:
            shut_down(now=True)  # a dead one's leftovers
            self.nb, self.km = nb, None  # create_kernel_manager reads the notebook's kernel name
            _shared["km"] = shared = self.create_kernel_manager()
        try:
            # Given a manager it does not own, nbclient starts the kernel if the manager has none
            # and leaves it running afterwards.
            return super().preprocess(nb, resources, shared)
        except BaseException:
            self._failed = True
            raise
        finally:
            if self._failed:
                shut_down(now=True)
            elif self.kc is not None:
                _shared["kc"] = self.kc

    async def async_start_new_kernel_client(self):
        if not getattr(self, "_reused", False):
            return await super().async_start_new_kernel_client()
        kc = _shared.get("kc")
        if kc is None:
            kc = await super().async_start_new_kernel_client()
        else:
            self.kc = kc
            await run_hook(self.on_notebook_start, notebook=self.nb)  # as nbclient does for a new client
        # Where nbgrader would have started a kernel: the notebook's folder (a path relative to
        # nbgrader's own current folder, the course).
        path = os.path.abspath((self.resources.get("metadata") or {}).get("path") or ".")
        reply = await self.async_wait_for_reply(kc.execute(RESET.format(path=path), silent=True, store_history=False))
        if reply is None or reply["content"]["status"] != "ok":
            self._failed = True
            raise RuntimeError(
                "The shared notebook kernel could not be reset for the next notebook; "
                "run the grader again (finished notebooks are kept)."
            )
        return kc

    # nbclient's synchronous setup_kernel calls this name, bound to nbclient's own coroutine.
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def on_cell_executed(self, **kwargs):
        super().on_cell_executed(**kwargs)
        reply = kwargs.get("execute_reply") or {}
        if (reply.get("content") or {}).get("status") != "ok":
            self._failed = True  # the next notebook gets a kernel of its own
