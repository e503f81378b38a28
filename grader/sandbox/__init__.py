"""Running untrusted submissions: everything between the grader and a learner's kernel.py.

- ``policy``: the static gate: what a kernel.py may contain, checked before anything of it runs;
- ``isolation``: the ``Sandbox``, the entry point the rest of the grader imports: start a child
  process with every protection the platform allows and talk to it over pipes. Its parts, each
  importing only parts listed before it (and ``files``):
  - ``errors``: the sandbox's own failures (``SandboxError``, ``UnsafeSandbox``);
  - ``limits``: ``Limits``, what one child may use;
  - ``boot``: the stdlib-only script that locks a new child in before it runs Python code of the
    grader (namespaces, a private file-system view, resource limits, a dedicated uid, a
    system-call filter);
  - ``slots``: worker slots, a dedicated uid (with its lock file) and a GPU each;
  - ``scratch``: the scratch folders children live in, and removing ones killed graders left;
  - ``process``: ``Child``, a running child as the parent sees it (orders, events, kill, cleanup);
- ``child``: what runs inside it: import the submission, then call its API on each trial's
  inputs as they arrive;
- ``wire``: the size-checked byte format tensors travel in, both ways (never pickle);
- ``files``: reading and removing what a child left behind without following, blocking on or
  recursing into anything it planted.

Nothing here decides a grade: the parent (``grader.grade.runphase``) judges what the child hands back,
treating every byte of it as forged.
"""
