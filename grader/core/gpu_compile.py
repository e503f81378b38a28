"""Would a GPU compile it? The kernels a CPU run launched, compiled for an NVIDIA GPU without one.

Triton's interpreter runs a kernel's Python body, so it accepts much that the compiler refuses: a
``tl.arange`` whose length is not a power of two, a ``tl.dot`` on blocks smaller than 16, a block
too large for a GPU's shared memory, operations the GPU's instructions do not take. A kernel
that passes every test on a laptop then fails on its first GPU run. Triton compiles for a GPU it
does not have (the compiler and ``ptxas`` ship in its wheel), so each distinct specialisation
that a CPU run launched (its argument types, its constexpr values, its warps and stages) is
compiled for the course's GPU, an H100 (sm_90), and the shared memory it needs is held to that
GPU's limit.

Under the interpreter ``@triton.jit`` gives the interpreter's kernels, Triton's own library
functions included, which the compiler cannot read; so ``LaunchRecorder`` only records the
launches, and ``compile_launches`` compiles them in a fresh process whose kernels are the
compiler's (``GRADER_DEVICE=compile``): ``python -m grader.core.gpu_compile`` reads the kernel
file and the launches as JSON on stdin and prints one finding per line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

# The course's GPU: an H100 (compute capability 9.0, 32 lanes a warp), whose blocks may use up to
# 227 KiB of shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin).
TARGET = ("cuda", 90, 32)
TARGET_NAME = "an H100 (sm_90)"
MAX_SHARED_BYTES = 232448
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@dataclass
class Launch:
    """One specialisation of a kernel as a CPU run launched it (JSON-ready)."""

    name: str  # the kernel's name in its file
    signature: dict  # argument name -> Triton type ("*fp32", "i32", "constexpr")
    constexprs: dict  # argument name -> encoded value (see ``_encode``)
    options: dict  # num_warps, num_stages, ...

    @property
    def key(self) -> str:
        return json.dumps([self.name, self.signature, self.constexprs, self.options], sort_keys=True)

    def describe(self) -> str:
        shown = {**{k: _shown(v) for k, v in self.constexprs.items()}, **self.options}
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in shown.items())})"


@dataclass
class Finding:
    launch: Launch
    problem: str  # one learner-facing sentence or two


class Unencodable(ValueError):
    """A constexpr value this check cannot hand to another process."""


def _encode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    name = getattr(value, "name", None)
    if type(value).__name__ == "dtype" and isinstance(name, str):
        return {"$dtype": name}
    inner = getattr(value, "fn", value)
    if callable(inner) and getattr(inner, "__name__", None):
        return {"$kernel": inner.__name__}
    raise Unencodable(repr(value))


def _shown(value) -> str:
    if isinstance(value, dict):
        return str(next(iter(value.values())))
    return repr(value) if isinstance(value, str) else str(value)


@dataclass
class LaunchRecorder:
    """Records the distinct specialisations launched under the interpreter while active."""

    launches: dict = field(default_factory=dict)  # key -> Launch, in launch order
    skipped: int = 0  # launches whose constexprs could not be encoded
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> LaunchRecorder:
        _install_listener_seam()
        with _listeners_lock:
            _listeners.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _listeners_lock:
            _listeners.remove(self)

    def heard(self, interpreted, args: tuple, kwargs: dict) -> None:
        try:
            self._record(interpreted, args, kwargs)
        except Exception:  # recording must never change what the launch does
            with self._lock:
                self.skipped += 1

    def _record(self, interpreted, args: tuple, kwargs: dict) -> None:
        from triton.runtime.jit import mangle_type

        fn = interpreted.fn
        names = list(interpreted.arg_names)
        constexpr_names = {n for n, annotation in fn.__annotations__.items() if "constexpr" in str(annotation)}
        values = dict(zip(names, args))
        values.update({k: v for k, v in kwargs.items() if k in names})
        signature, constexprs = {}, {}
        for name in names:
            value = values.get(name)
            if name in constexpr_names or value is None:
                signature[name] = "constexpr"
                constexprs[name] = _encode(value)
            else:
                signature[name] = mangle_type(value)
        options = {k: kwargs[k] for k in LAUNCH_OPTIONS if isinstance(kwargs.get(k), int)}
        launch = Launch(fn.__name__, signature, constexprs, options)
        with self._lock:
            self.launches.setdefault(launch.key, launch)


_listeners: list[LaunchRecorder] = []
_listeners_lock = threading.Lock()
_seam_installed = False


def _install_listener_seam() -> None:
    """Wrap the interpreter's launch entry once for the process, and never take the wrapper off:
    other wrappers put on top later (the grader's launch counter) must stay where they are."""
    from triton.runtime.interpreter import InterpretedFunction

    global _seam_installed
    with _listeners_lock:
        if _seam_installed:
            return
        _seam_installed = True
        original = vars(InterpretedFunction)["run"]

        def run(interpreted, *args, **kwargs):
            if _listeners and not kwargs.get("warmup", False):
                for listener in list(_listeners):
                    listener.heard(interpreted, args, kwargs)
            return original(interpreted, *args, **kwargs)

        run.__wrapped__ = original
        InterpretedFunction.run = run


def chosen(launches: list[Launch], limit: int) -> list[Launch]:
    """At most ``limit`` launches, one per kernel and constexpr setting first (those decide what
    compiles), then the ones that differ only in their argument types."""
    first, seen = [], set()
    for launch in launches:
        key = json.dumps([launch.name, launch.constexprs, launch.options], sort_keys=True)
        if key not in seen:
            seen.add(key)
            first.append(launch)
    rest = [launch for launch in launches if launch not in first]
    return (first + rest)[:limit]


@dataclass
class Compiled:
    findings: list  # Finding: what would not run on the GPU
    checked: int  # specialisations compiled
    chosen: int  # specialisations chosen (those of kernels made inside functions are not checked)


def compile_launches(kernel_file: Path, launches: list[Launch], limit: int = 16, timeout: float = 600) -> Compiled:
    """What of ``launches`` (from ``kernel_file``) would not run on the course's GPU, compiled
    in a fresh process (see the module's doc); at most ``limit`` specialisations."""
    todo = chosen(launches, limit)
    if not todo:
        return Compiled([], 0, 0)
    request = {"kernel": str(kernel_file), "launches": [launch.__dict__ for launch in todo]}
    env = {**os.environ, "GRADER_DEVICE": "compile"}
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run(
        [sys.executable, "-m", "grader.core.gpu_compile"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    findings, checked = [], 0
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            checked += bool(entry["checked"])
            if entry["problem"]:
                findings.append(Finding(todo[entry["index"]], entry["problem"]))
    if result.returncode != 0 and not checked:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the GPU compile check could not run: {tail}")
    return Compiled(findings, checked, len(todo))


# ----------------------------------------------------------------------------------------------
# The compiling process
# ----------------------------------------------------------------------------------------------


def _decode(value, namespace: dict):
    if isinstance(value, dict) and "$dtype" in value:
        import triton.language as tl

        return tl.dtype(value["$dtype"])
    if isinstance(value, dict) and "$kernel" in value:
        return namespace[value["$kernel"]]
    return value


def _kernel(namespace: dict, name: str):
    """The JITFunction called ``name`` at the top of the kernel file (under its autotuner or
    heuristics, if any), else None."""
    kernel = namespace.get(name)
    while type(kernel).__name__ in ("Autotuner", "Heuristics"):
        kernel = kernel.fn
    return kernel if type(kernel).__name__ == "JITFunction" else None


def compile_one(namespace: dict, launch: Launch) -> str | None:
    """Why ``launch`` would not run on the course's GPU, else None (in the compiling process)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = _kernel(namespace, launch.name)
    if kernel is None:
        return None  # not a kernel of the file's own namespace (made in a function): not checked
    try:
        constexprs = {k: _decode(v, namespace) for k, v in launch.constexprs.items()}
        source = ASTSource(kernel, launch.signature, constexprs)
        compiled = triton.compile(source, target=GPUTarget(*TARGET), options=dict(launch.options))
    except Exception as error:  # the compiler's refusal is the finding
        return _compile_error(error, _def_line(kernel.fn), Path(kernel.fn.__code__.co_filename).name)
    shared = int(getattr(compiled.metadata, "shared", 0) or 0)
    if shared > MAX_SHARED_BYTES:
        return (
            f"it needs {shared} bytes of shared memory per program, and {TARGET_NAME} has at most "
            f"{MAX_SHARED_BYTES}: a GPU refuses to launch it (OutOfResources). Use smaller blocks or fewer "
            "num_stages."
        )
    return None


def _def_line(fn) -> int | None:
    """The file line of ``fn``'s ``def`` (its decorators and the comments above come first)."""
    import inspect

    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    return next((start + i for i, line in enumerate(lines) if re.match(r"\s*def\s", line)), None)


# What some of the compiler's refusals mean for a kernel that the interpreter ran.
MEANINGS = (
    (
        r"Loop-carried variable",
        "a value updated in a loop must keep one dtype: create it with the type "
        "the loop gives it (for example tl.zeros(..., dtype=tl.float32))",
    ),
    (r"power of 2", "block sizes given to tl.arange must be powers of two: round up and mask the extra lanes"),
    (
        r"AST node type: (Break|Continue)",
        "a kernel's loops cannot break or continue: compute a mask or use tl.where instead",
    ),
    (
        r"expected accumulator dtype",
        "a tl.dot accumulator must be float32 here (tl.zeros(..., dtype=tl.float32)): a 16-bit "
        "accumulator also loses the small terms of a long sum",
    ),
    (
        r"Expected dtype \[.*fp32.*\] but got (fp16|bf16)",
        "math functions such as tl.exp take float32 or float64 on a GPU: convert 16-bit values first "
        "(x.to(tl.float32)) and the result back when you store it",
    ),
)


# Some of Triton's checks are bare asserts: the error carries no message, only the line.
SILENT = "one of Triton's own checks failed on this line without saying which"
# What a silent check on such a line usually is (matched against the line's source).
SILENT_MEANINGS = (
    (
        r"tl\.dot\([^,]+,[^,]+,|acc\s*=",
        "a tl.dot accumulator must be float32 here (tl.zeros(..., dtype=tl.float32)) and have the "
        "result tile's shape: tl.dot checks both on its accumulator argument",
    ),
)


@dataclass(frozen=True)
class CompilerRefusal:
    """What a Triton ``CompilationError`` says: its message, the line of the kernel it points at
    (counted from the kernel's ``def``, as its "at L:C" does) and that line's source."""

    message: str
    line_in_kernel: int | None
    source_line: str

    @property
    def meaning(self) -> str:
        """What the message usually means for a learner's kernel ("" where the course has no word)."""
        if self.message == SILENT:
            return next((m for pattern, m in SILENT_MEANINGS if re.search(pattern, self.source_line)), "")
        return next((m for pattern, m in MEANINGS if re.search(pattern, self.message)), "")


def compiler_refusal(error: BaseException) -> CompilerRefusal:
    """Split a compile error's text: "at L:C:", the kernel's source up to the line at fault, a line
    that marks the column with ``^``, then the message (the part a learner needs)."""
    lines = str(error).strip().splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() == "^"]
    message = " ".join(line.strip() for line in lines[marks[-1] + 1 :]) if marks else (lines[-1] if lines else "")
    wrapped = re.fullmatch(r"\w+\((['\"])(.*)\1\)", message, re.S)
    message = wrapped[2] if wrapped else message
    if not message and error.__cause__ is not None:
        # A failure inside a @triton.jit function that this line calls: Triton points at the call
        # and chains the callee's own error, which says why.
        cause = error.__cause__
        message = compiler_refusal(cause).message if type(cause).__name__ == "CompilationError" else str(cause)
    message = message.strip() or (SILENT if marks else type(error).__name__)
    where = re.match(r"at (\d+):(\d+)", lines[0]) if lines else None
    source = lines[marks[-1] - 1].strip() if marks and marks[-1] > 0 else ""
    return CompilerRefusal(message, int(where[1]) if where else None, source)


def _compile_error(error: Exception, first_line: int | None, file_name: str) -> str:
    """The compiler's own message, where, and what it usually means."""
    refusal = compiler_refusal(error)
    message = refusal.message
    where = refusal.line_in_kernel
    line = f" (line {first_line + where - 1} of {file_name})" if where and first_line else ""
    meaning = refusal.meaning
    return (
        f"Triton's compiler refuses it for {TARGET_NAME}{line}: {message.rstrip('.')}."
        + (f" That means {meaning}." if meaning else "")
        + " The interpreter runs such a kernel on a CPU; a GPU does not."
    )


def _main() -> int:
    request = json.loads(sys.stdin.read())
    path = Path(request["kernel"])
    spec = importlib.util.spec_from_file_location(f"_gpu_compile_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    namespace = vars(module)
    for index, fields in enumerate(request["launches"]):
        launch = Launch(**fields)
        checked = _kernel(namespace, launch.name) is not None
        problem = compile_one(namespace, launch) if checked else None
        print(json.dumps({"index": index, "checked": checked, "problem": problem}), flush=True)
    return 0


if __name__ == "__main__":
    import grader  # noqa: F401  (selects the device: GRADER_DEVICE=compile, before the kernel file's import)

    sys.exit(_main())
