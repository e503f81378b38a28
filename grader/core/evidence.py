"""What a call of the learner's API did: Triton launches, PyTorch operators, values handed out,
and on a GPU the kernels that actually ran.

The ``Monitor`` runs in the same process as the learner's code: in the grader's child, and in
``make check`` and the public tests (through ``grader.core.checks``). It is evidence, not proof:
Python code in that process could switch it off or patch it. What keeps a submission from doing
so is the static policy gate (``grader.policy``), which refuses imports, private
attributes and introspection before anything runs. On CUDA the child also records the GPU's own
list of kernels that ran during the call (``KernelTrace``: CUPTI, through PyTorch's profiler),
which no Python-level patch of torch's dispatcher can hide; the parent checks every kernel name
against the submission's own ``@triton.jit`` functions (``triton_kernel_names``). The record
says which evidence a grade rests on (``EVIDENCE``). ``judge_evidence`` turns a report into the
learner-facing verdict, for the grader's parent and for ``make check`` alike.

Because the monitor can be switched off from inside, the child does not take its silence on
trust: after each call it runs a ``canary`` (a PyTorch operator and a Triton launch of the
grader's own, watched by the same monitor), and a report whose canary went unseen is judged as
tampering, whatever else it says.
"""

from __future__ import annotations

import ast

from grader.core import syntax
from grader.core.protocols import Raises

# PyTorch operators that do not compute anything from the inputs' values: allocating, filling,
# viewing, reshaping, copying and converting tensors, reading metadata. Any other operator run
# during the call (add, mul, mm, softmax, sum, exp, ...) means that PyTorch did the work. Reading
# a value into Python (`.item()`, `float(t)`, `bool(t)`: _local_scalar_dense, is_nonzero) is not
# here: a Python loop over such values computes outside the kernel just the same.
ALLOWED_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones
    ones_like new_ones full full_like new_full arange scalar_tensor lift_fresh lift_fresh_copy
    fill fill_ zero zero_ copy copy_ clone _to_copy to contiguous detach detach_ alias
    _copy_from _copy_from_and_resize resize_ set_ cat stack constant_pad_nd
    view _unsafe_view reshape _reshape_alias as_strided as_strided_ t t_ transpose transpose_
    permute expand expand_as unsqueeze unsqueeze_ squeeze squeeze_ select slice narrow split
    split_with_sizes unsafe_split chunk unbind flatten unflatten movedim view_as diagonal unfold
    view_as_real view_as_complex is_same_size record_stream
    sym_size sym_stride sym_numel sym_storage_offset _has_compatible_shallow_copy_type
    pin_memory _pin_memory is_pinned
""".split()
)

# Tensor methods that hand the values to NumPy or Python, where they could be computed unseen.
ESCAPES = frozenset({"numpy", "tolist", "__array__", "__dlpack__"})


class Monitor:
    """Counts Triton kernel launches and logs PyTorch operators while a watched call runs.

    Triton's interpreter (3.6-3.9) does not fire ``knobs.runtime.launch_enter_hook``, so launches
    are counted by wrapping the launch entry points (``InterpretedFunction.run`` under the
    interpreter, ``JITFunction.run`` natively); the launch hook, where Triton has one, also
    catches compiled kernels launched directly. Operators are logged everywhere during the call,
    inside launches too (a heuristics function, or under the interpreter the kernel body, is
    Python that could call PyTorch); only the autotuner's own benchmarking is left out, since it
    summarises its timings with PyTorch.
    """

    def __init__(self):
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        self.allowed_ops = ALLOWED_OPS
        self.launches = 0
        self.hook_launches = 0
        self.benchmarking = 0
        self.active = False
        self.ops: dict[str, int] = {}
        self.escapes: set[str] = set()
        monitor = self

        class OpLog(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if monitor.active and not monitor.benchmarking:
                    name = func.overloadpacket.__name__
                    if name not in monitor.allowed_ops:
                        monitor.ops[name] = monitor.ops.get(name, 0) + 1
                    if _opens_up(func):
                        # A custom operator (torch.library) runs Python of its own: run its
                        # kernel with this log back on the stack (a mode is off it while it
                        # handles an operator), so that what it computes inside is logged too.
                        with self:
                            return func.redispatch(_below_python(args, kwargs), *args, **(kwargs or {}))
                return func(*args, **(kwargs or {}))

        class EscapeLog(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name in ESCAPES and monitor.active and not monitor.benchmarking:
                    monitor.escapes.add(name)
                return func(*args, **(kwargs or {}))

        self._modes = (OpLog, EscapeLog)
        self._install_launch_counters()

    def _install_launch_counters(self) -> None:
        import importlib

        import triton

        for module_name, class_name in (
            ("triton.runtime.interpreter", "InterpretedFunction"),
            ("triton.runtime.jit", "JITFunction"),
        ):
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError):
                continue
            if "run" in vars(cls):
                cls.run = self._counting(vars(cls)["run"])
        try:
            from triton.runtime.autotuner import Autotuner
        except ImportError:
            Autotuner = None
        if Autotuner is not None and "_bench" in vars(Autotuner):
            Autotuner._bench = self._benchmarking(vars(Autotuner)["_bench"])

        runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
        chain = getattr(runtime, "launch_enter_hook", None)
        if hasattr(chain, "add"):  # Triton >= 3.5: a chain of hooks
            chain.add(self._launch_hook)
        elif runtime is not None and chain is None:
            runtime.launch_enter_hook = self._launch_hook

    def _counting(self, original):
        monitor = self

        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False) and monitor.active:
                monitor.launches += 1
            return original(self, *args, **kwargs)

        run.__wrapped__ = original
        return run

    def _benchmarking(self, original):
        monitor = self

        def bench(self, *args, **kwargs):
            monitor.benchmarking += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                monitor.benchmarking -= 1

        bench.__wrapped__ = original
        return bench

    def _launch_hook(self, *args, **kwargs):
        if self.active:
            self.hook_launches += 1

    def watching(self, fn, allowed_ops: frozenset = ALLOWED_OPS):
        """``fn`` wrapped so that its call is counted and logged; ``allowed_ops`` are the
        operators that do not count as computing."""
        monitor, (op_log, escape_log) = self, self._modes

        def watched(*args, **kwargs):
            monitor.allowed_ops = allowed_ops
            monitor.launches = monitor.hook_launches = 0
            monitor.ops, monitor.escapes = {}, set()
            monitor.active = True
            try:
                with escape_log(), op_log():
                    return fn(*args, **kwargs)
            finally:
                monitor.active = False

        return watched

    def report(self) -> dict:
        return {
            "launches": max(self.launches, self.hook_launches),
            "ops": dict(sorted(self.ops.items())),
            "escapes": sorted(self.escapes),
        }


# Operator namespaces of PyTorch itself, whose operators are named and judged as a whole; an
# operator of any other namespace (a torch.library custom op) is looked into.
_TORCH_NAMESPACES = frozenset({"aten", "prim", "prims"})


def _opens_up(func) -> bool:
    import torch

    return isinstance(func, torch._ops.OpOverload) and func.namespace not in _TORCH_NAMESPACES


def _below_python(args, kwargs):
    """The dispatch keys to run an operator's own kernel with: those of its tensor arguments after
    the Python key (where a dispatch mode is called), else the CPU's."""
    import torch

    after = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)
    keys = None
    for value in [*args, *(kwargs or {}).values()]:
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, torch.Tensor):
                found = torch._C._dispatch_keys(item) & after
                keys = found if keys is None else keys | found
    return keys if keys is not None else torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def canary(monitor: Monitor):
    """A function that checks ``monitor`` still sees what it must: it runs, watched by the same
    monitor, one PyTorch operator (``add``) and one launch of the grader's own Triton kernel, and
    returns whether the report holds both. Bind it before the learner's file is imported (it
    keeps its own references to PyTorch's functions and its kernel) and call it after each
    watched call has been reported: a submission that switched the monitor off for good, popped
    its dispatch modes, replaced its counters or its report cannot pass it."""
    import torch
    import triton
    import triton.language as tl

    from grader.core import device

    @triton.jit
    def canary_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)

    add, ones, empty_like, on = torch.add, torch.ones, torch.empty_like, device.torch_device()

    def probe(times: int):
        x = ones(8, device=on)
        out = empty_like(x)
        for _ in range(times):
            canary_kernel[(1,)](x, out, 8, BLOCK=8)
            out = add(x, out)
        return out

    def seen() -> bool:
        # The monitor's methods are looked up as the child's own call looks them up: a
        # replaced ``report`` or ``watching`` fails the canary as it would fool the child. Two
        # watched calls, of one launch and addition and then of none, so that a report left
        # over from before (a monitor that no longer starts afresh) cannot pass.
        try:
            for times in (1, 0):
                monitor.watching(probe, ALLOWED_OPS)(times)
                found = monitor.report()
                if found.get("launches") != times or (found.get("ops") or {}).get("add", 0) != times:
                    return False
            return True
        except BaseException:  # the learner's code broke something the canary needs
            return False

    return seen


_shared: Monitor | None = None


def shared_monitor() -> Monitor:
    """The process's one monitor: it wraps Triton's launch entry points, which must happen once."""
    global _shared
    if _shared is None:
        _shared = Monitor()
    return _shared


EVIDENCE = {
    "cuda": "the GPU's kernel trace (CUPTI) and the PyTorch operator log, recorded in the child; "
    "the policy gate keeps kernel.py from reaching either",
    "cuda-no-trace": "the PyTorch operator log, recorded in the child (no kernel trace: CUPTI was not "
    "available); the policy gate keeps kernel.py from reaching it",
    "interpreter": "the PyTorch operator log, recorded in the child; under the interpreter the kernel "
    "is Python too, so the policy gate is what keeps kernel.py from reaching the log",
}

# What the wrapper may run around its launch: copy-engine transfers and ATen kernels that only
# fill or copy (torch.zeros, .contiguous(), .to(dtype), torch.cat). Names as CUPTI reports them.
_DATA_MOVEMENT = ("Memcpy ", "Memset ", "FillFunctor", "copy_kernel", "CatArrayBatchedCopy", "direct_copy_kernel")


class KernelTrace:
    """The CUDA kernels launched while the ``with`` block runs (CUPTI activity records, collected
    by PyTorch's profiler): their names, how often each ran, and their summed GPU time. These stay
    None where no trace could be taken, so that a missing trace is never read as "nothing ran"."""

    def __init__(self):
        self.names: list[str] | None = None
        self.counts: dict[str, int] | None = None  # launches of each kernel
        self.times_us: dict[str, float] | None = None  # each kernel's summed time on the GPU
        self.busy_us: float | None = None  # all of the kernels' time on the GPU
        self._profile = None

    def __enter__(self):
        # torch.autograd.profiler's profile, CUDA activity only: torch.profiler.profile wraps
        # it, but its first start in a process also imports torch._inductor (to ask about CUDA
        # graphs), about 4 s in every fresh child on an H100.
        try:
            from torch.autograd.profiler import profile

            self._profile = profile(use_device="cuda", use_cpu=False, use_kineto=True)
            self._profile.__enter__()
        except Exception:
            self._profile = None
        return self

    def __exit__(self, *exc):
        if self._profile is None:
            return False
        try:
            import torch

            torch.cuda.synchronize()
            self._profile.__exit__(None, None, None)
            events = [
                event
                for event in self._profile.function_events
                if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA
            ]
            self.names = sorted({event.name for event in events})[:200]
            counts: dict[str, int] = {}
            times: dict[str, float] = {}
            for event in events:
                counts[event.name] = counts.get(event.name, 0) + 1
                times[event.name] = times.get(event.name, 0.0) + _duration_us(event)
            self.counts = dict(sorted(counts.items())[:200])
            self.times_us = {name: round(times[name], 2) for name in self.counts}
            self.busy_us = sum(times.values())
        except Exception:
            self.names = self.counts = self.times_us = self.busy_us = None
        return False


def _duration_us(event) -> float:
    """A kernel's time on the GPU, from its CUPTI record's interval."""
    interval = getattr(event, "time_range", None)
    return float(interval.end - interval.start) if interval is not None else 0.0


def triton_kernel_names(source: str) -> set[str]:
    """The names of the ``@triton.jit`` functions defined in ``source``: the only kernels the
    submission itself can launch (Triton names a compiled kernel after its function)."""
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):
        return set()

    def is_jit(decorator) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
            isinstance(target, ast.Name) and target.id == "jit"
        )

    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any(is_jit(d) for d in node.decorator_list)
    }


# Fills carry none of the inputs' values: allowed even where moving data is the exercise.
_FILLS = ("Memset ", "FillFunctor")


def foreign_kernels(kernels: list[str], own: set[str], moves_data: bool = False) -> list[str]:
    """The traced kernels that are neither the submission's Triton kernels nor data movement.
    ``moves_data``: moving data is the exercise (a Spec's ``kernel_writes_outputs``): a copy
    kernel may have produced the output, so only fills are let through."""
    allowed = _FILLS if moves_data else _DATA_MOVEMENT
    return [name for name in kernels if name not in own and not any(marker in name for marker in allowed)]


def judge_evidence(
    api: str, report: dict, produced_output: bool, own_kernels: set[str] | None = None, spec=None
) -> tuple[str, str] | None:
    """(kind, learner-facing message) when the call went around the exercise, else None.

    ``produced_output``: the call returned at least one non-empty tensor (an empty result needs
    no launch). ``own_kernels``: the submission's @triton.jit names, to read a CUDA kernel
    trace (``report["kernels"]``) against; without a trace only the in-process log counts.
    ``spec``: the case's Spec; its ``kernel_writes_outputs`` asks that the submission's own
    kernels wrote the outputs (``report["unwritten_by_kernel"]`` under the interpreter, no copy
    kernel in a CUDA trace).
    A report that carries a canary (the grader's child) counts only if the canary was seen."""
    if "canary" in report and report["canary"] is not True:
        return "tampered", (
            f"the grader's monitor was tampered with: after {api}() returned, the grader's own "
            "PyTorch operation and Triton launch went unseen. kernel.py must not change the "
            "grader, PyTorch or Triton; compute in your Triton kernel."
        )
    if getattr(spec, "fallback", False) or isinstance(getattr(spec, "protocol", None), Raises):
        # A fallback's result is PyTorch's by design; a refusal returns nothing, and formatting its
        # message (a tensor shown in it) may run PyTorch kernels that compute no result.
        return None
    moves_data = bool(getattr(spec, "kernel_writes_outputs", False))
    kernels = report.get("kernels")
    if own_kernels is not None and isinstance(kernels, list):
        foreign = foreign_kernels([str(k) for k in kernels], own_kernels, moves_data)
        if foreign:
            shown = ", ".join(name[:80] for name in foreign[:3])
            if moves_data and not foreign_kernels([str(k) for k in kernels], own_kernels):
                return "moved", (
                    f"{api}() ran GPU copy kernels that are not your Triton kernels ({shown}): "
                    "moving the data is this exercise, so the output must be written by your "
                    "kernel's tl.store, not copied or rearranged with PyTorch (.t(), .contiguous(), "
                    ".clone(), copy_)."
                )
            return "torch", (
                f"{api}() ran GPU kernels that are not your Triton kernels ({shown}): it "
                "computed with PyTorch. Around the launch, only allocate, reshape and copy tensors."
            )
        if produced_output and not own_kernels.intersection(kernels):
            return "no_launch", (
                f"no Triton kernel ran on the GPU: {api}() returned without launching one "
                "of the @triton.jit kernels of kernel.py."
            )
    ops = report.get("ops") or {}
    if ops:
        names = ", ".join(f"aten.{name}" for name in list(ops)[:6])
        return "torch", (
            f"{api}() computed with PyTorch ({names}) instead of a Triton kernel. Around the "
            "launch, only allocate, reshape and copy tensors; printing a tensor or reading "
            "its values (.item(), float(t)) counts too."
        )
    if report.get("escapes"):
        return "torch", (
            f"{api}() handed tensor values to NumPy or Python ({', '.join(report['escapes'])}); "
            "compute them in the Triton kernel instead."
        )
    if not report.get("launches") and produced_output:
        return "no_launch", (
            f"no Triton kernel ran: {api}() returned without launching one. The work must "
            "happen in your @triton.jit kernel, launched as kernel[grid](...)."
        )
    unwritten = report.get("unwritten_by_kernel")
    if moves_data and unwritten and isinstance(unwritten, list):
        names = list(getattr(spec, "output_names", ()) or ())
        shown = (
            ", ".join(
                names[i] if 0 <= i < len(names) else f"output #{i + 1}" for i in unwritten[:4] if isinstance(i, int)
            )
            or "an output"
        )
        return "moved", (
            f"{api}() returned values that no Triton kernel of yours stored ({shown}): the output "
            "must be written by your kernel's tl.store, not copied or rearranged with PyTorch "
            "(.t(), .contiguous(), .clone(), copy_, .to()) after or instead of the launch."
        )
    return None
