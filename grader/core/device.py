"""Pick where kernels run: natively on a CUDA GPU, else on the CPU through Triton's interpreter.

``select()`` must run before any learner ``kernel.py`` is imported, because ``@triton.jit``
reads ``TRITON_INTERPRET`` when it decorates a function. Importing the ``grader`` package calls
it, so ``from grader import ...`` at the top of a script is enough.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

_mode: str | None = None


def _cuda_usable() -> bool:
    return os.environ.get("GRADER_DEVICE", "").lower() != "cpu" and torch.cuda.is_available()


def select() -> str:
    """Choose the mode once per process and return it: ``"cuda"`` or ``"interpreter"``, or
    ``"compile"`` where ``GRADER_DEVICE=compile`` asks for kernels that are compiled for a GPU
    and never run (``grader.core.gpu_compile``'s process: ``@triton.jit`` then gives the
    compiler's kernels, not the interpreter's)."""
    global _mode
    if _mode is None:
        if os.environ.get("GRADER_DEVICE", "").lower() == "compile":
            os.environ.pop("TRITON_INTERPRET", None)
            _mode = "compile"
        elif _cuda_usable() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
            _mode = "cuda"
            if os.environ.get("GRADER_AUTOTUNE", "").lower() == "first":
                run_first_autotune_config()  # a correctness run: see the docstring
        else:
            os.environ["TRITON_INTERPRET"] = "1"
            _mode = "interpreter"
            run_first_autotune_config()
            _make_masked_loads_strict()
            _make_bf16_arithmetic_exact()
            _let_wrap_triton_take_interpreted_kernels()
    return _mode


def mode() -> str:
    return select()


def is_cuda() -> bool:
    return select() == "cuda"


def torch_device() -> torch.device:
    """Where tensors for kernels live: the GPU natively, host memory under the interpreter."""
    return torch.device("cuda" if is_cuda() else "cpu")


def synchronize() -> None:
    if is_cuda():
        torch.cuda.synchronize()


def describe() -> str:
    if is_cuda():
        return f"CUDA ({torch.cuda.get_device_name()})"
    return "CPU (Triton interpreter)"


def run_first_autotune_config() -> None:
    """Make ``@triton.autotune`` apply its first config instead of tuning (for the kernels
    decorated from now on).

    Under the interpreter the autotuner asks the GPU driver for a benchmarker, which the
    interpreter does not have, and there is nothing to tune anyway. The grader's correctness
    runs on a GPU use it too: tuning changes speed, not results, and only the timed run needs
    it. So does a native process started with ``GRADER_AUTOTUNE=first`` (the correctness pass of
    ``make verify-gpu``), which would otherwise compile and time every config for every new
    shape. The config's meta-parameters become keyword arguments of every launch.
    """
    import triton

    if getattr(triton.autotune, "_interpreter_shim", False):
        return

    def autotune(configs, key=None, prune_configs_by=None, **_ignored):
        def decorate(kernel):
            return _FirstConfig(kernel, configs, key or [], prune_configs_by or {})

        return decorate

    autotune._interpreter_shim = True
    triton.autotune = autotune


def retuning() -> Callable[[], None]:
    """Keep track of every ``@triton.autotune`` kernel decorated from now on, and return a
    function that makes them all tune again at their next launch.

    The grader's timed child warms up (compiles, and tunes) while other processes share the GPU,
    so that compiling costs no exclusive GPU time; the choices made then were timed beside other
    work, so they are forgotten once the GPU is the child's alone. The compiled configs stay in
    memory: tuning again only times them. A tuning kept on disk (``cache_results``) is not read
    back, since it was made beside other work too."""
    from triton.runtime.autotuner import Autotuner

    made: list = []
    original = Autotuner.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    Autotuner.__init__ = init

    def forget() -> None:
        for tuner in made:
            if isinstance(getattr(tuner, "cache", None), dict):
                tuner.cache.clear()
            tuner.cache_results = False

    return forget


# Which of an autotuned kernel's configs (those its pruning keeps, in order) the stand-in for the
# autotuner launches first: 0, the first (what a correctness run uses); k > 0, the k-th (modulo
# their number). A tuner may pick any config on some GPU, so a result that is right only for the
# first (a grid computed from a fixed tile size instead of the config's) is a bug the course's
# suite finds by running the cases under each (tests/course/test_autotune_configs.py).
FORCED_CONFIG = 0


class _FirstConfig:
    """Stands in for triton's Autotuner: launches with the first config that the kernel's own
    ``early_config_prune`` keeps (configs[0] without one), the config a GPU could launch. A config
    that fails to compile for lack of resources (shared memory, registers) is passed over for the
    next one, as the autotuner passes it over by timing it as infinitely slow. It keeps what the
    decorator was given (configs, key, pruning) for tests to inspect."""

    def __init__(self, kernel, configs, keys, prune_configs_by):
        self.fn = kernel
        self.config = configs[0]
        self.best_config = configs[0]
        self.configs = list(configs)
        self.keys = list(keys)
        self.prune_configs_by = dict(prune_configs_by)
        # (config, argument dtypes) pairs that failed to compile: a tile that fits for fp16 data
        # may not for fp32, and a prune function may build its configs afresh on every call
        self._unfit: set[tuple] = set()

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            named = {**dict(zip(self.fn.arg_names, args)), **kwargs}
            prune = self.prune_configs_by.get("early_config_prune")
            candidates = (list(prune(self.configs, named)) or self.configs) if prune else self.configs
            dtypes = tuple(str(value.dtype) for value in named.values() if hasattr(value, "dtype"))
            fitting = [c for c in candidates if (_config_key(c), dtypes) not in self._unfit]
            if fitting and FORCED_CONFIG:  # start from another config: each must give right results
                shift = FORCED_CONFIG % len(fitting)
                fitting = fitting[shift:] + fitting[:shift]
            for config in fitting[:-1]:
                try:
                    return self._launch(config, grid, named, args, kwargs)
                except _resource_errors():
                    self._unfit.add((_config_key(config), dtypes))
            return self._launch((fitting or candidates)[-1], grid, named, args, kwargs)

        return launch

    def _launch(self, config, grid, named, args, kwargs):
        self.best_config = config
        meta = {**config.kwargs, **kwargs}
        if getattr(config, "pre_hook", None):  # e.g. zeroing an output that atomics add to
            config.pre_hook({**named, **meta})
        for option in ("num_warps", "num_stages"):
            if getattr(config, option, None) is not None and option not in meta:
                meta[option] = getattr(config, option)
        launch_grid = grid(meta) if callable(grid) else grid
        return self.fn[launch_grid](*args, **meta)

    def __getattr__(self, name):
        return getattr(self.fn, name)


def _config_key(config) -> tuple:
    """What a config compiles to: its meta-parameters and launch options."""
    return (
        tuple(sorted(config.kwargs.items())),
        getattr(config, "num_warps", None),
        getattr(config, "num_stages", None),
    )


@functools.cache
def _resource_errors() -> tuple[type[BaseException], ...]:
    """The compile errors after which the autotuner tries the next config (Triton 3.x names)."""
    found = []
    for module, name in (
        ("triton.runtime.errors", "OutOfResources"),
        ("triton.runtime.errors", "PTXASError"),
        ("triton.compiler.errors", "CompileTimeAssertionFailure"),
    ):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(found)


def _let_wrap_triton_take_interpreted_kernels() -> None:
    """Under the interpreter ``@triton.jit`` gives an ``InterpretedFunction``, which
    ``torch.library.wrap_triton`` refuses before PyTorch 2.13 ("wrap_triton only works on functions
    annotated with triton.jit"); later versions hand such a kernel back unchanged, to run as it is.
    Older PyTorch is made to do the same, so that a custom operator's launcher (mastery/05) runs
    on a CPU with every supported PyTorch."""
    import torch.library

    original = getattr(torch.library, "wrap_triton", None)
    if original is None or getattr(original, "_takes_interpreted", False):
        return
    try:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # another Triton layout: keep PyTorch's own behaviour
        return

    def wrap_triton(triton_kernel):
        inner = triton_kernel.fn if isinstance(triton_kernel, Autotuner) else triton_kernel
        if isinstance(inner, InterpretedFunction):
            return triton_kernel
        return original(triton_kernel)

    wrap_triton._takes_interpreted = True
    wrap_triton.__doc__ = original.__doc__
    torch.library.wrap_triton = wrap_triton


def _make_bf16_arithmetic_exact() -> None:
    """Compute the interpreter's element-wise bfloat16 arithmetic on the values, not their bits.

    The interpreter keeps bfloat16 as raw 16-bit patterns in uint16 arrays and hands them to NumPy
    as they are, so 0.5 + 0.75 in bfloat16 gives about 6.4e37 (the patterns added as integers),
    and a kernel that computes in bfloat16 looks as if it overflowed. A GPU computes such an
    operation in float32 and rounds the result to bfloat16 (to nearest, ties to even); so does
    this patch, for the binary and unary operators and fused multiply-adds of bfloat16 values.
    Comparisons get the float32 values too. Reductions are left alone (the course's kernels
    reduce in float32).
    """
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import InterpreterBuilder, TensorHandle
    except ImportError:
        return
    binary, unary, fma = (getattr(InterpreterBuilder, name, None) for name in ("binary_op", "unary_op", "create_fma"))
    if binary is None or unary is None or getattr(binary, "_bf16_exact", False):
        return

    def is_bf16(handle) -> bool:
        return getattr(handle.dtype, "scalar", handle.dtype) == tl.bfloat16 and handle.data.dtype == np.uint16

    def widened(handle):
        bits = np.asarray(handle.data).astype(np.uint32) << np.uint32(16)
        return TensorHandle(bits.view(np.float32), tl.float32)

    def rounded(handle):
        bits = np.asarray(handle.data, dtype=np.float32).view(np.uint32)
        nan = np.isnan(handle.data)
        ties_to_even = (bits >> np.uint32(16)) & np.uint32(1)
        bits = ((bits + np.uint32(0x7FFF) + ties_to_even) >> np.uint32(16)).astype(np.uint16)
        return TensorHandle(np.where(nan, np.uint16(0x7FC0), bits), tl.bfloat16)

    def binary_op(self, lhs, rhs, op):
        if not (is_bf16(lhs) or is_bf16(rhs)):
            return binary(self, lhs, rhs, op)
        out = binary(self, widened(lhs) if is_bf16(lhs) else lhs, widened(rhs) if is_bf16(rhs) else rhs, op)
        if out.data.dtype == np.float32:
            return rounded(out)
        return TensorHandle(out.data, lhs.dtype.scalar)  # a comparison's booleans

    def unary_op(self, arg, op):
        if not is_bf16(arg):
            return unary(self, arg, op)
        out = unary(self, widened(arg), op)
        return rounded(out) if out.data.dtype == np.float32 else TensorHandle(out.data, arg.dtype.scalar)

    def create_fma(self, x, y, z):
        if not is_bf16(z):
            return fma(self, x, y, z)
        product = np.multiply(widened(x).data, widened(y).data, dtype=np.float64)
        total = np.add(product, widened(z).data, dtype=np.float64).astype(np.float32)
        return rounded(TensorHandle(total, tl.float32))

    binary_op._bf16_exact = True
    InterpreterBuilder.binary_op, InterpreterBuilder.unary_op = binary_op, unary_op
    if fma is not None:
        InterpreterBuilder.create_fma = create_fma


def _make_masked_loads_strict() -> None:
    """Give masked-off lanes of a float ``tl.load`` without ``other=`` the value NaN.

    Triton leaves those lanes undefined; the interpreter quietly fills them with 0, which hides a
    missing ``other=`` in a reduction (a max over padding, a sum in a dot product) until the
    kernel runs on a GPU. NaN makes the mistake show up on the CPU too.
    """
    try:
        import numpy as np
        from triton.runtime.interpreter import InterpreterBuilder, TensorHandle, _get_np_dtype
    except ImportError:  # another Triton layout: keep the interpreter's own behaviour
        return
    original = getattr(InterpreterBuilder, "create_masked_load", None)
    if original is None or getattr(original, "_strict", False):
        return

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        element = ptrs.get_element_ty()
        if other is None and element.is_floating():
            # The interpreter keeps bfloat16 as raw 16-bit patterns; 0x7FC0 is its quiet NaN.
            nan = 0x7FC0 if element.is_bf16() else np.nan
            other = TensorHandle(np.full(ptrs.data.shape, nan, dtype=_get_np_dtype(element)), element)
        return original(self, ptrs, mask, other, *args, **kwargs)

    create_masked_load._strict = True
    InterpreterBuilder.create_masked_load = create_masked_load
