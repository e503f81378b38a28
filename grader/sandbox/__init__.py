"""Running untrusted submissions: everything between the grader and a learner's kernel.py.

- ``isolation``: start a child process with every protection the platform allows (namespaces,
  a private file-system view, resource limits, a dedicated uid) and talk to it over pipes;
- ``child``: what runs inside it: import the submission, then call its API on each trial's
  inputs as they arrive;

Nothing here decides a grade: the parent (``grader.runphase``) judges what the child hands back,
treating every byte of it as forged.
"""
