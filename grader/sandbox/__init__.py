"""Running untrusted submissions: everything between the grader and a learner's kernel.py.

- ``policy``: the static gate: what a kernel.py may contain, checked before anything of it runs;
- ``isolation``: start a child process with every protection the platform allows (namespaces,
  a private file-system view, resource limits, a system-call filter, a dedicated uid) and talk
  to it over pipes;
- ``child``: what runs inside it: import the submission, then call its API on each trial's
  inputs as they arrive;
- ``wire``: the size-checked byte format tensors travel in, both ways (never pickle);
- ``files``: reading and removing what a child left behind without following, blocking on or
  recursing into anything it planted.

Nothing here decides a grade: the parent (``grader.grade.runphase``) judges what the child hands back,
treating every byte of it as forged.
"""
