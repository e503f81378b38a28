"""What grading one file of one module will do, fixed before anything of it runs (``Plan``), and
the options of the run phase that shape it (``Options``). ``grader.grade.grading`` runs a plan;
the ledger (``grader.grade.ledger``) records what happened."""

from __future__ import annotations

from dataclasses import dataclass, field

from grader.core import cases, device
from grader.core.cases import Case, Spec, spec_for, specs_of
from grader.core.catalog import Module
from grader.core.evidence import triton_kernel_names
from grader.core.protocols import order_of
from grader.grade.judging import Trial
from grader.policy import check_source, explain, policy_for
from grader.sandbox.isolation import Limits


@dataclass
class Options:
    """How the run phase grades; the defaults suit a course run on one machine."""

    workers: int | None = None  # default: one per GPU on CUDA, else min(4, CPUs)
    limits: Limits = field(default_factory=Limits)
    hide: tuple = ()  # more paths the child must not see (the nbgrader course folder, ...)
    expose: tuple = ()  # more read-only paths the child needs (a CUDA toolkit outside /usr, ...)
    allow_unsafe: bool = False  # grade even where fork bombs cannot be contained
    # CPU seconds for all the processes that grade one submission of one module (time-outs and
    # crashes each cost a process); default: startup_seconds + 4 x case_seconds. Correct code
    # uses a small fraction of it.
    module_seconds: float | None = None
    policy_gate: bool = True  # refuse what no exercise needs before running (off: tests of the layers behind it)
    gpu_memory_fraction: float = 0.9  # of each GPU's memory, for all the children on it (grader.grade.gpu_memory)
    # Gradings that check correctness side by side on one GPU (timing has the GPU alone).
    children_per_gpu: int = 4
    # A grading's public and hidden children at the same time (None: on a GPU).
    side_by_side: bool | None = None
    # Grade on a Ray cluster (grader.grade.cluster): its address, or "" for this machine's; None: locally.
    ray: str | None = None


@dataclass(frozen=True)
class Plan:
    """What grading one file of one module will do, fixed before anything of it runs: the cases
    and the order of their trials, the module's parts, the limits and the budget, and what the
    static gate found. Everything that runs reads it; nothing changes it."""

    module: Module
    source: bytes
    spec: Spec
    cases: tuple[tuple[Case, str], ...]  # (case, "public"/"hidden")
    trials: tuple[Trial, ...]
    parts: tuple[cases.Part, ...]  # the module's exercises, each timed on its own (``cases.parts``)
    limits: Limits
    budget: float  # CPU seconds for all the children of this grading (``Options.module_seconds``)
    refusal: str | None  # the static gate's reasons, when it refused the file before running it
    own_kernels: frozenset[str]  # the names of the Triton kernels the file defines

    @property
    def api(self) -> str:
        """The module's main function (the one that is timed)."""
        return self.spec.api

    def api_of(self, trial_id: int) -> str:
        """The function that trial ``trial_id`` calls (a module may have several)."""
        return self.spec_of(trial_id).api

    def spec_of(self, trial_id: int) -> Spec:
        return spec_for(self.cases[self.trials[trial_id].case_index][0], self.spec)

    def part_of(self, trial_id: int) -> cases.Part:
        """The module's part that trial ``trial_id`` belongs to (by the function it calls)."""
        return cases.part_of(self.parts, self.api_of(trial_id))

    def call_of(self, trial_id: int) -> dict:
        """How the child calls the API for trial ``trial_id`` (``grader.core.protocols``)."""
        spec = self.spec_of(trial_id)
        return order_of(spec.protocol, spec.mutates)

    def visibility(self, trial: Trial) -> str:
        return self.cases[trial.case_index][1]


def plan(module: Module, source: bytes, secret: int, options: Options) -> Plan:
    """The plan of grading ``source`` for ``module`` with this run's ``secret``: the public cases,
    then the hidden ones, the first case repeated with another secret right after it (before any
    hidden case has been seen); and the static gate's verdict (``Options.policy_gate`` turns it
    off only to test the layers behind it on their own)."""
    spec, public = cases.public(module)
    cuda = device.is_cuda()
    planned = [(c, "public") for c in cases.for_mode(public, cuda)] + [
        (c, "hidden") for c in cases.for_mode(cases.hidden(module), cuda)
    ]
    trials: list[Trial] = []
    for index in range(len(planned)):
        trials.append(Trial(len(trials), index, secret))
        if index == 0:
            trials.append(Trial(len(trials), index, secret + 1, repeat=True))
    text = source.decode(errors="replace")
    policy = policy_for(*specs_of(spec, [case for case, _ in planned]))
    violations = check_source(text, policy) if options.policy_gate else []
    limits = options.limits
    return Plan(
        module=module,
        source=source,
        spec=spec,
        cases=tuple(planned),
        trials=tuple(trials),
        parts=cases.parts(module),
        limits=limits,
        budget=options.module_seconds or limits.startup_seconds + 4 * limits.case_seconds,
        refusal=explain(violations) if violations else None,
        own_kernels=frozenset(triton_kernel_names(text)),
    )
