"""How a module describes what to test: a ``Spec`` (the API, inputs, reference, tolerances, cost
model) and a list of ``Case`` s (sizes and dtypes).

Public cases live in the module's ``test_kernel.py`` as ``SPEC`` and ``CASES``; hidden ones in
``solutions/<module>/hidden.py`` as ``CASES``. Both are plain data and functions, so the test
suite, the learner's ``check`` and the grader all read them without pytest.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from grader.core import device
from grader.core.catalog import Module
from grader.core.protocols import Backward, Calls, Raises, Steps, Warns

# (atol, rtol): an output element passes when |out - ref| <= atol + rtol * |ref|.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
SHORT_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}


@dataclass(frozen=True)
class Case:
    """One input configuration: ``params`` go to the spec's ``make_inputs``."""

    params: dict[str, Any]
    dtype: torch.dtype = torch.float32
    label: str = ""  # why the case exists: "tail", "size 1", "non-contiguous"
    cuda_only: bool = False  # too large for the interpreter, or a dtype it cannot run
    # dtype -> (atol, rtol) for this case only, where its inputs make rounding larger than usual
    tolerances: dict | None = None
    # What this case exists to catch, shown when it fails ("values near 1000: E[x^2] - mean^2
    # cancels"): the learner then knows what the case probes, even when the pattern is unclear.
    hint: str = ""
    # The Spec of the function this case calls, in a module with several (01-tiling: transpose and
    # matmul); None: the module's SPEC. ``spec_for`` resolves it.
    spec: Any = None

    @property
    def name(self) -> str:
        prefix = f"{self.spec.api}: " if self.spec is not None else ""
        if self.spec is not None and isinstance(self.spec.protocol, Raises):
            return f"{prefix}{self.label}"  # a refusal's inputs are its label: no sizes, no dtype
        values = ",".join(f"{k}={v}" for k, v in self.params.items())
        prefix += f"{self.label}: " if self.label else ""
        return f"{prefix}{values} {SHORT_DTYPE.get(self.dtype, str(self.dtype))}"

    def seed(self, secret: int = 0) -> int:
        digest = hashlib.sha256(f"{secret}:{self.name}".encode()).digest()
        return int.from_bytes(digest[:6], "little")


class Rand:
    """Random tensors for one case, reproducible from its seed, made on the kernel's device."""

    def __init__(self, seed: int, device: torch.device):
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def randn(self, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
        values = torch.randn(shape, generator=self.generator, device=self.device, dtype=torch.float32)
        return (values * scale).to(dtype)

    def matrix(
        self, rows: int, cols: int, layout: str = "row-major", dtype: torch.dtype = torch.float32, scale: float = 1.0
    ) -> torch.Tensor:
        """A (rows, cols) random matrix stored as ``layout`` says: "row-major"; "transposed" (the
        transpose of a row-major (cols, rows) matrix); "sliced" (every other column of a matrix
        twice as wide); "padded" (the corner of a larger matrix whose other elements are NaN, so
        that reading past the edge shows)."""
        if layout == "transposed":
            return self.randn(cols, rows, dtype=dtype, scale=scale).t()
        if layout == "sliced":
            return self.randn(rows, 2 * cols, dtype=dtype, scale=scale)[:, ::2]
        if layout == "padded":
            padded = torch.full((rows + 16, cols + 16), float("nan"), dtype=dtype, device=self.device)
            padded[:rows, :cols] = self.randn(rows, cols, dtype=dtype, scale=scale)
            return padded[:rows, :cols]
        if layout != "row-major":
            raise ValueError(f"unknown matrix layout {layout!r}")
        return self.randn(rows, cols, dtype=dtype, scale=scale)

    def uniform(self, *shape: int, low: float, high: float, dtype: torch.dtype = torch.float32):
        values = torch.rand(shape, generator=self.generator, device=self.device, dtype=torch.float32)
        return (low + (high - low) * values).to(dtype)


Inputs = tuple[tuple, dict]


@dataclass(frozen=True)
class Suspect:
    """A typical wrong computation of a module's function. Where every wrong output of a failing
    case matches it (within the case's tolerance), the diagnosis names it: evidence from the
    numbers, not a guess from the pattern of the errors."""

    what: str  # the mistake, as a learner would say it: "K^T read with k's strides in their own order"
    compute: Callable[..., Any]  # like Spec.reference (float64 copies of the inputs), with the mistake made
    advice: str  # what to change


@dataclass(frozen=True)
class Spec:
    """Everything the harness needs to test and time one module's API function."""

    api: str
    make_inputs: Callable[[Case, Rand], Inputs]
    # Computes the expected result from float64 copies of the inputs (same args and kwargs).
    reference: Callable[..., Any]
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    # Tolerances under the interpreter, where they differ: there tl.dot is exact float32
    # arithmetic, while a GPU rounds float32 operands to TF32 (about 1e-3).
    interpreter_tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    output_names: tuple[str, ...] = ("output",)
    # For outputs that can be wrong while the others are right: what only that output depends on.
    output_notes: dict[str, str] = field(default_factory=dict)
    # Cost model for benchmarks: the fewest bytes moved through memory, and the FLOPs.
    bytes_moved: Callable[[Case], int] | None = None
    flops: Callable[[Case], int] | None = None
    # What a PyTorch user would write instead; benchmarks compare with it.
    torch_baseline: Callable[..., Any] | None = None
    # Other libraries' versions of the API, compared only on request (``make bench AGAINST=...``):
    # a name ("Liger-Kernel") -> a loader that returns the function, or None where the library is
    # not installed. torch.compile of ``torch_baseline`` needs no entry (grader.learn.speed).
    library_baselines: dict[str, Callable[[], Callable[..., Any] | None]] = field(default_factory=dict)
    bench_cases: tuple[Case, ...] = ()
    # Further sizes that only `make bench` times (no speed verdict in `make check`, no grading):
    # a layer's sizes in training, say, where the host's share of a call is the lesson.
    bench_only_cases: tuple[Case, ...] = ()
    ceiling: str = "copy"  # "copy": a fraction of copy bandwidth; "torch": a ratio to torch_baseline
    target: float = 0.0  # the reference solution's target, as a fraction of the ceiling
    learner_threshold: float = 0.8  # learner's full performance credit, as a fraction of the reference
    # No performance credit at or below this fraction of the reference (None: half the threshold).
    # The optimization track sets it above its slow starting kernel's speed.
    learner_floor: float | None = None
    # What this module's wrapper may do besides the course-wide allowlist (grader.policy
    # and grader.sandbox.evidence): extra PyTorch operators at run time, and for the static gate
    # extra torch names and tensor methods. Widen deliberately (an optimizer step, autograd).
    # The API works row by row over the last dimension (softmax, norms): diagnoses then compare
    # row lengths that are powers of two (a block's length) with the others.
    row_wise: bool = False
    allowed_ops: frozenset = frozenset()
    allowed_torch_names: frozenset = frozenset()
    allowed_tensor_methods: frozenset = frozenset()
    # Python hooks of Triton's launch the module may install (the static gate refuses them otherwise).
    allowed_hooks: frozenset = frozenset()
    # Training APIs (grader.core.protocols): the positions of the arguments the API updates in
    # place (compared after the returned outputs, read from the caller's very tensors, named after
    # the reference's parameters), and how a case calls it: None (once), Backward (forward, then
    # gradients), Steps (an optimizer) or Calls (several calls judged together: a seed's mask).
    mutates: tuple[int, ...] = ()
    protocol: Backward | Steps | Calls | Raises | Warns | None = None
    # judge(outputs, references, args, kwargs, case) -> problems: replaces the element-wise
    # comparison where the right answer is a distribution (dropout), not values.
    judge: Callable[..., list[str]] | None = None
    # Output name (a mutated list's name without its [k]) -> {dtype: (atol, rtol)}.
    output_tolerances: dict[str, dict] = field(default_factory=dict)
    # Moving data is the exercise (a transpose): the returned tensors must be written by the
    # submission's own kernels (grader.core.evidence.judge_evidence). Under the interpreter every
    # returned value must have been stored by its Triton kernels during the call (elements left at
    # zero excepted), not copied there by PyTorch (.t().contiguous(), .clone(), copy_); on a GPU
    # no copy kernel may run during the call, since the trace cannot tell which one produced the
    # output. (Not the default: some references cast a float32 result with .to(dtype).)
    kernel_writes_outputs: bool = False
    # The case's inputs are ones the API must hand to PyTorch instead of its kernel (a fallback,
    # rows too long for one block): its result is compared, not who computed it.
    fallback: bool = False
    # Output name -> the dtype it must have, or a function of the case giving it, where that is not
    # the rule of ``grader.core.checks.expected_dtypes`` (a float32 statistic of 16-bit inputs).
    output_dtypes: dict[str, Any] = field(default_factory=dict)
    # Typical wrong computations, tried only when a case fails (``Suspect``).
    suspects: tuple[Suspect, ...] = ()

    @property
    def floor(self) -> float:
        return self.learner_floor if self.learner_floor is not None else 0.5 * self.learner_threshold

    def tolerance(self, dtype: torch.dtype, case: Case | None = None, output: str = "") -> tuple[float, float]:
        if case is not None and case.tolerances and dtype in case.tolerances:
            return case.tolerances[dtype]
        per_output = self.output_tolerances.get(output.split("[")[0], {})
        if dtype in per_output:
            return per_output[dtype]
        if dtype in self.interpreter_tolerances and not device.is_cuda():
            return self.interpreter_tolerances[dtype]
        return self.tolerances.get(dtype, DEFAULT_TOLERANCES.get(dtype, (1e-5, 1e-4)))


def matmul_inputs(case: Case, rand: Rand) -> Inputs:
    """``(a, b)`` for a matmul case: ``params["mnk"] = (M, N, K)``, optional ``params["layouts"]``
    (of a and of b, see ``Rand.matrix``). Entries of size K ** -0.25 make every element of a @ b
    about 1 in size whatever K is, so one set of tolerances fits every shape; ``params["entry_scale"]``
    sets another (1.0: sums of K products of size 1, which a 16-bit accumulator cannot hold)."""
    M, N, K = case.params["mnk"]
    layout_a, layout_b = case.params.get("layouts", ("row-major", "row-major"))
    scale = case.params.get("entry_scale", max(K, 1) ** -0.25)
    return (rand.matrix(M, K, layout_a, case.dtype, scale), rand.matrix(K, N, layout_b, case.dtype, scale)), {}


def matmul_flops(case: Case) -> int:
    M, N, K = case.params["mnk"]
    return 2 * M * N * K


def matmul_bytes(case: Case) -> int:
    """Read a and b once, write c once."""
    M, N, K = case.params["mnk"]
    return (M * K + K * N + M * N) * case.dtype.itemsize


def refusal(
    spec: Spec,
    inputs: Callable[[Rand], Inputs],
    errors: tuple[type[Exception], ...],
    *needles: str,
    why: str,
    label: str,
) -> Case:
    """A case where ``spec``'s function must refuse the inputs that ``inputs(rand)`` makes: raise
    one of ``errors`` with a message matching every regular expression of ``needles`` (ignoring
    case); ``why`` says what the message must tell its reader, ``label`` what is wrong with the
    inputs ("refuses integer tensors"). Graded like any case, from the module's CASES."""
    refused = replace(
        spec,
        make_inputs=lambda case, rand: inputs(rand),
        reference=_refused,
        mutates=(),
        protocol=Raises(tuple(e.__name__ for e in errors), needles, why),
        judge=None,
        bench_cases=(),
        bench_only_cases=(),
        torch_baseline=None,
        library_baselines={},
    )  # nothing to time or compare with PyTorch
    return Case({}, label=label, spec=refused)


def _refused(*args, **kwargs) -> tuple:
    return ()  # a refusal returns nothing to compare


def spec_for(case: Case, module_spec: Spec) -> Spec:
    """The Spec that ``case`` is tested against: its own, else the module's."""
    return case.spec if case.spec is not None else module_spec


def specs_of(module_spec: Spec, cases: list[Case]) -> list[Spec]:
    """The module's Spec first, then each other Spec its cases call, once each."""
    found = [module_spec]
    for case in cases:
        if case.spec is not None and all(case.spec is not known for known in found):
            found.append(case.spec)
    return found


def for_mode(cases: list[Case], cuda: bool) -> list[Case]:
    return [case for case in cases if cuda or not case.cuda_only]


def _import_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def public(module: Module) -> tuple[Spec, list[Case]]:
    """The spec and public cases from the course's own copy of the module's test_kernel.py."""
    tests = _public_tests(module)
    return tests.SPEC, list(tests.CASES)


def _public_tests(module: Module):
    return _import_file(module.learner_dir / "test_kernel.py", _public_name(module))


def _public_name(module: Module) -> str:
    return f"_public_cases_{module.track}_{module.slug}".replace("-", "_")


def public_spec(module_id: str, name: str) -> Spec:
    """A Spec of the public tests of module ``module_id``, for hidden cases to name as their
    ``spec``: the one bound to ``name`` there (``"GLU_BACKWARD"``, where one function has several
    Specs), else the only one whose function is called ``name``."""
    from grader.core.catalog import find_module

    # The imported file itself, not sys.modules' entry for it: another thread importing the same
    # file at the same time replaces that entry with a module still being executed.
    tests = _public_tests(find_module(module_id))
    spec, public_cases = tests.SPEC, list(tests.CASES)
    named = getattr(tests, name, None)
    if isinstance(named, Spec):
        return named
    found = [
        candidate
        for candidate in specs_of(spec, public_cases)
        if candidate.api == name and not isinstance(candidate.protocol, (Raises, Warns))
    ]  # not a result
    if len(found) == 1:
        return found[0]
    if found:
        raise LookupError(
            f"{module_id}'s public tests have {len(found)} Specs for {name}(): name one by "
            "the variable it is bound to in test_kernel.py"
        )
    raise LookupError(f"{module_id}'s public tests have no Spec for {name}()")


@dataclass(frozen=True)
class Part:
    """One exercise of a module that holds several (``PARTS`` in its test_kernel.py): the
    functions it covers, the Spec whose first benchmark case times it, and its share of the
    module's points. Each part is graded on its own cases and timed on its own function, so that
    a part's work shows in its own points whatever the others' number of cases."""

    name: str  # what ``make check K=`` and the feedback call it: "optimizer"
    title: str  # "the optimizer step"
    functions: tuple[str, ...]
    timed: Spec
    weight: float = 1.0


def parts(module: Module) -> tuple[Part, ...]:
    """The module's parts: its ``PARTS``, else one part of every function, timed on ``SPEC``."""
    tests = _public_tests(module)
    declared = tuple(getattr(tests, "PARTS", ()))
    if declared:
        return declared
    apis = tuple(dict.fromkeys(spec.api for spec in specs_of(tests.SPEC, list(tests.CASES))))
    return (Part("", "", apis, tests.SPEC),)


def part_of(module_parts: tuple[Part, ...], api: str) -> Part:
    """The part whose functions include ``api`` (the first part when none names it)."""
    return next((part for part in module_parts if api in part.functions), module_parts[0])


def traffic_bars(module: Module) -> list:
    """The memory-traffic bars (``grader.core.traffic.TrafficBar``) of the module's public tests."""
    return list(getattr(_public_tests(module), "TRAFFIC", ()))


def hidden(module: Module) -> list[Case]:
    """The hidden grading cases; only instructors' checkouts have them."""
    path = module.solution_dir / "hidden.py"
    if not path.is_file():
        return []
    return list(_import_file(path, f"_hidden_cases_{module.track}_{module.slug}".replace("-", "_")).CASES)
