"""The two ways the sandbox itself fails, as opposed to the learner's code failing.

A ``SandboxError`` means the grader could not run a child as it should (no free uid, a boot step
that broke, Python that does not start in the view): nothing about the submission is known, so
nothing may be recorded for it. ``UnsafeSandbox`` is the refusal to run without a protection the
shared machine relies on. They live apart from the machinery so that every layer can raise them
and callers (grader.grade, grader.cli) can catch them without depending on any of it.
"""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the learner's code): nothing should be recorded."""


class UnsafeSandbox(SandboxError):
    """A protection that the shared machine relies on is missing (see ``allow_unsafe``)."""
