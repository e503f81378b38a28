"""What the policy gate allows, as data: the ``Policy`` (modules, names, methods and hooks a
kernel file may use, widened per module by its ``Spec``) and the fixed vocabularies no exercise
needs widened (builtins, introspection, hooks, streams, PyTorch's and Triton's internals). The
walker (``grader.policy.walker``) reads them; nothing here reads source code."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Violation:
    """One refused construct: the line it is on, a short rule id, and a learner-facing sentence."""

    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class Policy:
    """What a kernel.py may use. Every field is an allowlist; ``widen`` adds to it deliberately.

    imports:         modules that may be imported, as exact dotted names (submodules of an open
                     module, such as triton.language.extra, may be imported too).
    torch_names:     torch.X allowed in Python code (X is the first attribute after torch; a
                     dotted "autograd.Function" allows that member of a torch submodule and no other).
    torch_cuda_names: torch.cuda.Y allowed.
    triton_names:    triton.Z allowed (tl.* is governed by open_modules).
    tensor_methods:  public torch.Tensor attributes allowed in Python code; the others compute.
    module_members:  "module.name" allowed for the other modules whose members are restricted
                     (typing, sys, warnings, the grader's helpers).
    open_modules:    modules whose public members are all allowed (triton.language, math), except
                     other modules and functions they merely re-export from elsewhere.
    hooks:           the Python hooks Triton runs during a launch that a module may install
                     (none by default; module 05 teaches ``prune_configs_by``). The call monitor
                     still watches what a hook does, since it runs inside the call.
    """

    imports: frozenset[str]
    torch_names: frozenset[str]
    torch_cuda_names: frozenset[str]
    triton_names: frozenset[str]
    tensor_methods: frozenset[str]
    module_members: frozenset[str]
    open_modules: frozenset[str]
    hooks: frozenset[str] = frozenset()

    def widen(self, **extra: Iterable[str]) -> Policy:
        """A copy with ``extra`` names added, field by field (e.g. ``torch_names={"autograd"}``)."""
        known = {f.name for f in fields(self)}
        unknown = set(extra) - known
        if unknown:
            raise TypeError(f"Policy has no field(s) {sorted(unknown)}; fields: {sorted(known)}")
        for name, values in extra.items():
            if isinstance(values, str):  # widen(imports="numpy") would add n, u, m, ...
                raise TypeError(f"widen({name}=...) takes a collection of names, not the string {values!r}")
        return replace(self, **{name: getattr(self, name) | frozenset(values) for name, values in extra.items()})

    @functools.cached_property
    def _members(self) -> frozenset[str]:
        """Every allowed restricted member as a dotted name."""
        return (
            frozenset(f"torch.{n}" for n in self.torch_names)
            | frozenset(f"torch.cuda.{n}" for n in self.torch_cuda_names)
            | frozenset(f"triton.{n}" for n in self.triton_names)
            | self.module_members
        )

    @functools.cached_property
    def _prefixes(self) -> frozenset[str]:
        """Dotted names that are namespaces: parents of an allowed member or an importable module."""
        out = set()
        for dotted in self._members | self.imports | self.open_modules:
            parts = dotted.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts)))
        return frozenset(out)


DEFAULT_POLICY = Policy(
    imports=frozenset(
        {
            "torch",
            "triton",
            "triton.language",
            "math",
            "typing",
            "__future__",
            "grader.validation",
            "grader.check",
            # A tensor descriptor only describes a tensor (base, shape, strides, block) for TMA loads
            # and stores; it reaches no memory a kernel's own pointers could not.
            "triton.tools.tensor_descriptor",
            # print(..., file=sys.stderr) and warnings.warn(...) are how learners debug (see the
            # "noisy" example); only those members are allowed.
            "sys",
            "warnings",
        }
    ),
    torch_names=frozenset(
        {
            "Tensor",
            "Size",
            "device",
            "dtype",
            "empty",
            "empty_like",
            "empty_strided",
            "zeros",
            "zeros_like",
            "ones",
            "ones_like",
            "full",
            "full_like",
            "float16",
            "float32",
            "float64",
            "bfloat16",
            "half",
            "float",
            "double",
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "bool",
            "long",
            "int",
            "short",
            "channels_last",
            "contiguous_format",
            "preserve_format",
            "is_tensor",
            "is_floating_point",
            "finfo",
            "iinfo",
            "cuda",
        }
    ),
    torch_cuda_names=frozenset(
        {
            "is_available",
            "current_device",
            "device_count",
            "get_device_properties",
            "get_device_capability",
            "get_device_name",
            "synchronize",
            "Stream",
            "stream",
            "current_stream",
        }
    ),
    triton_names=frozenset(
        {
            "jit",
            "autotune",
            "heuristics",
            "Config",
            "cdiv",
            "next_power_of_2",
            "language",
            "constexpr",
        }
    ),
    tensor_methods=frozenset(
        {
            # metadata
            "shape",
            "dtype",
            "device",
            "ndim",
            "size",
            "stride",
            "dim",
            "numel",
            "nelement",
            "element_size",
            "itemsize",
            "nbytes",
            "is_contiguous",
            "is_cuda",
            "is_floating_point",
            "is_signed",
            "is_complex",
            "storage_offset",
            "data_ptr",
            "requires_grad",
            "is_leaf",
            # views and layout
            "contiguous",
            "view",
            "view_as",
            "reshape",
            "flatten",
            "unflatten",
            "unsqueeze",
            "squeeze",
            "t",
            "T",
            "mT",
            "transpose",
            "permute",
            "expand",
            "expand_as",
            "narrow",
            "select",
            "unbind",
            "chunk",
            "split",
            "movedim",
            # allocation, conversion, copies
            "new_empty",
            "new_zeros",
            "new_ones",
            "new_full",
            "to",
            "cpu",
            "cuda",
            "float",
            "half",
            "bfloat16",
            "double",
            "type",
            "clone",
            "detach",
            "copy_",
            "zero_",
            "fill_",
            # Names Tensor shares with other types that wrapper code uses (the full list of
            # collisions and the decision for each is at _COLLISION_HINTS below):
            "index",  # device.index, tuple.index / str.index (Tensor.index needs functorch Dims)
            "values",  # dict.values (Tensor.values is for sparse tensors only)
        }
    ),
    module_members=frozenset(
        {
            "sys.stderr",
            "sys.stdout",
            "warnings.warn",
            "grader.validation.check_tensors",
            "grader.check.self_check",
            "triton.tools.tensor_descriptor.TensorDescriptor",
            # typing: annotations only. Not get_type_hints (it evals strings) nor ForwardRef.
            *(
                f"typing.{n}"
                for n in (
                    "Any",
                    "Callable",
                    "Dict",
                    "Final",
                    "Iterable",
                    "Iterator",
                    "List",
                    "Literal",
                    "Mapping",
                    "NamedTuple",
                    "Optional",
                    "Sequence",
                    "Tuple",
                    "TypeVar",
                    "Union",
                    "TYPE_CHECKING",
                    "cast",
                    "overload",
                )
            ),
        }
    ),
    open_modules=frozenset({"triton.language", "math", "__future__"}),
)


# --- fixed vocabularies (not part of a policy: nothing legitimate needs them widened) ---------

_BANNED_BUILTINS = frozenset(
    {
        "exec",
        "eval",
        "compile",
        "__import__",
        "open",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "breakpoint",
        "input",
        "exit",
        "quit",
        "help",
        "memoryview",
        "__builtins__",
    }
)
_ALLOWED_DUNDER_NAMES = frozenset({"__name__", "__file__"})
_ALLOWED_DUNDER_STRINGS = frozenset({"__main__"})

# Frames, code objects and the class hierarchy: the ways from a value back into the harness.
_INTROSPECTION = frozenset(
    {
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "ag_frame",
        "ag_code",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "f_trace",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "co_names",
        "mro",
    }
)

# Python callables that Triton runs on the kernel's tensors during a launch, outside the kernel.
_HOOKS = frozenset(
    {
        "pre_hook",
        "post_hook",
        "prune_configs_by",
        "early_config_prune",
        "perf_model",
        "reset_to_zero",
        "restore_value",
        "do_bench",
        "ir_override",
        "add_pre_run_hook",
        "pre_run_hooks",
        # triton.jit's: called at every launch with the kernel's arguments once a launch hook is set
        # (the grader sets one on a GPU), and at compile time.
        "launch_metadata",
        "repr",
    }
)

# Triton's callables that take hooks, with the parameters known to be plain values in every
# version: a positional argument is resolved to its parameter name from the installed Triton's
# signature; without one, only these leading positions are allowed.
_HOOK_TAKERS = {
    "triton.Config": ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg"),
    "triton.autotune": ("configs", "key"),
    "triton.heuristics": ("values",),
    "triton.jit": ("fn",),
}
_PLAIN_PARAMETERS = frozenset(
    {
        *(name for names in _HOOK_TAKERS.values() for name in names),
        "warmup",
        "rep",
        "use_cuda_graph",
        "cache_results",
        "version",
        "do_not_specialize",
        "do_not_specialize_on_alignment",
        "debug",
        "noinline",
    }
)
# Members whose calls are checked where they are written (their arguments, a kernel's body):
# stored, passed on or subclassed, they would be called where the gate cannot see.
_CALLED_WHERE_NAMED = frozenset({"torch.Tensor", *_HOOK_TAKERS})

# Hooks that name a part of an allowed hook (prune_configs_by={"early_config_prune": f}).
_HOOK_PARTS = {"prune_configs_by": frozenset({"early_config_prune", "perf_model"})}
# Classes that build classes: only a class statement's base, where the fields are written out
# (NamedTuple("C", [("pre_hook", object)]) would give an object a hook under a computed name).
_BASE_ONLY = frozenset({"typing.NamedTuple"})

# Open file objects that kernel.py may print to, and nothing else.
_STREAMS = frozenset({"sys.stdout", "sys.stderr"})
_STREAM_METHODS = frozenset({"write", "flush"})
# Attributes that lead from a stream to its buffer, raw file or descriptor.
_FILE_ATTRIBUTES = frozenset({"buffer", "raw", "fileno"})
# Builtins that only look at a class: its value cannot be called or kept through them.
_INSPECTING_BUILTINS = frozenset({"isinstance", "issubclass", "print", "str", "repr"})

# What Triton's code generator resolves as a builtin inside a kernel (getattr/hasattr aside).
_KERNEL_BUILTINS = frozenset({"range", "min", "max", "int", "float", "len", "isinstance", "print", "list"})

# Tensor attributes that hand values to Python, NumPy or raw memory.
_TENSOR_ESCAPES = frozenset(
    {
        "numpy",
        "tolist",
        "item",
        "storage",
        "untyped_storage",
        "data",
        "set_",
        "share_memory_",
    }
)

# torch.X that move values in or out of PyTorch (Python data, NumPy, DLPack, files).
_TORCH_ESCAPES = frozenset(
    {
        "from_numpy",
        "from_dlpack",
        "frombuffer",
        "from_file",
        "as_tensor",
        "asarray",
        "tensor",
        "save",
        "load",
        "dlpack",
    }
)
# torch.X that reach PyTorch's machinery rather than compute.
_TORCH_INTERNALS = frozenset(
    {
        "utils",
        "library",
        "overrides",
        "multiprocessing",
        "compile",
        "jit",
        "autograd",
        "profiler",
        "testing",
        "fx",
        "export",
        "distributed",
        "backends",
        "futures",
        "hub",
        "package",
        "func",
        "compiler",
        "set_default_dtype",
        "set_default_device",
        "manual_seed",
        "seed",
        "use_deterministic_algorithms",
        "set_grad_enabled",
        "no_grad",
        "enable_grad",
        "inference_mode",
        "cpu",
        "mps",
        "xpu",
        "accelerator",
        "serialization",
        "storage",
        "UntypedStorage",
        "TypedStorage",
    }
)

# Public torch.Tensor names that other types share. Decisions (why, per name):
#   index      allowed (policy): device.index, tuple.index, str.index; Tensor.index needs functorch.
#   values     allowed (policy): dict.values; Tensor.values only exists for sparse tensors.
#   split      allowed (policy): str.split; Tensor.split only makes views.
#   type       allowed (policy): device.type; Tensor.type converts like .to().
#   itemsize, is_floating_point, is_signed, is_complex, dtype, numel: allowed (dtype, Size,
#              finfo share them; on a tensor they are metadata).
#   sort       refused: list.sort, but Tensor.sort computes; sorted(...) does for a list.
#   add        refused: set.add, but Tensor.add computes; s |= {v} does for a set.
#   max, min   refused: torch.finfo(...).max, but Tensor.max reduces; written directly on
#              torch.finfo(...)/torch.iinfo(...) they are allowed, and the builtins max()/min() work.
#   real, imag refused: int/float have them, no exercise uses them, on tensors they are complex ops.
_COLLISION_HINTS = {
    "sort": " (for a list, use sorted(...))",
    "add": " (for a set, use s |= {item})",
    "max": " (for numbers, use the builtin max(); for a dtype's limit, torch.finfo(dtype).max)",
    "min": " (for numbers, use the builtin min(); for a dtype's limit, torch.finfo(dtype).min)",
}

# The .attr and [key] parts of a str.format field name after its first part.
_FORMAT_FIELD_PARTS = re.compile(r"\.([^.\[]+)|\[([^\]]*)\]")

_DO_INSTEAD = "Compute inside your @triton.jit kernel; around the launch, only allocate, reshape and copy tensors."
