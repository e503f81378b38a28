"""A catalogue of the errors Triton raises, each triggered by a small, real example.

Every example is a kernel (or a call) that goes wrong in one typical way, and each can be run in
up to four settings, because the same mistake reads differently in each:

- "interpreter": launched by Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, what the
  course uses without a GPU). The kernel runs as Python, so the error is Python's, wrapped in
  triton.runtime.errors.InterpreterError.
- "compiler": compiled for an H100 (sm_90) without a GPU: the compiler's front end runs on any
  machine, and reports CompilationError with the kernel's source and a caret under the culprit.
  Also the Python-side errors of a compiled @triton.jit function.
- "no-gpu": a compiled kernel launched on a machine with no GPU driver.
- "gpu": launched natively on a CUDA GPU.

Run it from the repository root:

    python tracks/debugging/02-error-handling/catalogue.py          # every setting this machine has
    python tracks/debugging/02-error-handling/catalogue.py --setting compiler --json

A setting runs in a fresh Python process of its own, with TRITON_INTERPRET set for the interpreter
and unset otherwise (it is read when triton is imported), and the examples marked `isolated` (the
GPU ones that wreck the CUDA context: an illegal address, a failed device assert) each run in a
process of their own.
This file does not import the course's grader, so that the native settings stay native.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
import triton
import triton.language as tl

SETTINGS = ("interpreter", "compiler", "no-gpu", "gpu")
H100 = (90, 32)  # compute capability 9.0, 32 threads per warp
H100_SHARED_MEMORY = 232448  # bytes a program may use on an H100 (227 KiB)
HERE = os.path.abspath(__file__)


# ----------------------------------------------------------------------------------------------
# The kernels. Plain functions: each setting makes its own @triton.jit object of them (the
# interpreter's or the compiler's), whatever TRITON_INTERPRET says.
# ----------------------------------------------------------------------------------------------

def arange_not_power_of_two(x_ptr):
    offsets = tl.arange(0, 10)  # 10 lanes: not a power of two
    tl.store(x_ptr + offsets, 1.0)


def arange_not_constexpr(x_ptr, n):
    offsets = tl.arange(0, n)  # n is a runtime value: the block size must be known when compiling
    tl.store(x_ptr + offsets, 1.0)


def float_bitwise_and(x_ptr):
    offsets = tl.arange(0, 16)
    x = tl.load(x_ptr + offsets)
    tl.store(x_ptr + offsets, x & 1)  # & is for integers; x is float32


def pointer_plus_float(x_ptr):
    tl.store(x_ptr + 1.5, 1.0)  # a pointer moves by whole elements only


def dot_too_small(a_ptr, c_ptr):
    rows = tl.arange(0, 16)
    inner = tl.arange(0, 8)  # K = 8: fp16 tensor cores need K >= 16
    a = tl.load(a_ptr + rows[:, None] * 8 + inner[None, :])
    b = tl.load(a_ptr + inner[:, None] * 16 + rows[None, :])
    tl.store(c_ptr + rows[:, None] * 16 + rows[None, :], tl.dot(a, b).to(tl.float16))


def dot_shape_mismatch(a_ptr, c_ptr):
    r16 = tl.arange(0, 16)
    r32 = tl.arange(0, 32)
    a = tl.load(a_ptr + r16[:, None] * 32 + r32[None, :])  # 16 x 32
    b = tl.load(a_ptr + r16[:, None] * 16 + r16[None, :])  # 16 x 16: K is 32 in a, 16 in b
    tl.store(c_ptr + r16[:, None] * 16 + r16[None, :], tl.dot(a, b))


def static_assert_fails(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 16, "BLOCK must be at least 16")
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


SCALE = 2.0  # a plain Python global, not a tl.constexpr


def global_not_constexpr(x_ptr):
    tl.store(x_ptr + tl.arange(0, 16), SCALE)


def torch_inside_kernel(x_ptr):
    tl.store(x_ptr + tl.arange(0, 16), torch.ones(16))  # PyTorch does not exist inside a kernel


def needs_block(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def device_assert_fails(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16))
    tl.device_assert(x > 0, "x must be positive")  # checked only with TRITON_DEBUG=1
    tl.store(x_ptr + tl.arange(0, 16), x + 1)


def store_far_past_the_end(x_ptr, start):
    offsets = start + tl.arange(0, 16)
    tl.store(x_ptr + offsets, 1.0)  # no mask, and start is 2^30: 4 GiB past the end of x


def pipelined_matmul(a_ptr, b_ptr, c_ptr, M, N, K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One tile of C = A @ B (row-major, M, N, K multiples of the blocks). Its K loop is
    software-pipelined: num_stages pairs of tiles of A and B live in shared memory at once."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))


FAR = 1 << 30  # elements: far past any allocation, so that a GPU faults rather than corrupts a neighbour

# The config the retry in kernel.py starts from: 4 stages of a 128 x 128 tile of A and a
# 128 x 256 tile of B, 384 KiB of fp16.
LARGE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128}
LARGE_OPTIONS = {"num_stages": 4, "num_warps": 8}


# ----------------------------------------------------------------------------------------------
# How each setting runs a kernel
# ----------------------------------------------------------------------------------------------

def interpreted(fn: Callable):
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(fn)


def compiled(fn: Callable):
    from triton.runtime.jit import JITFunction

    return JITFunction(fn)


def compile_for_h100(fn: Callable, signature: dict, constexprs: dict | None = None,
                     aligned: bool = False, **options):
    """Compile ``fn`` for an H100 here, GPU or not: the front end raises CompilationError for a
    kernel that cannot compile. ``aligned`` promises what a real launch finds out by itself:
    every pointer and integer argument a multiple of 16 (what lets the loads be pipelined)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = compiled(fn)
    constexprs = constexprs or {}
    attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]]
             for name in signature if aligned and name not in constexprs} if aligned else {}
    full = {**signature, **{name: "constexpr" for name in constexprs}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Triton 3.9 warns about an unset TRITON_DEFAULT_FP_FUSION
        return triton.compile(ASTSource(kernel, full, constexprs, attrs), target=GPUTarget("cuda", *H100),
                              options=options)


def _host(*sizes, dtype=torch.float32):
    return [torch.zeros(size, dtype=dtype) for size in sizes]


def _cuda(*sizes, dtype=torch.float32):
    return [torch.zeros(size, dtype=dtype, device="cuda") for size in sizes]


def launcher(fn: Callable, sizes: tuple, dtype=torch.float32, grid=(1,), scalars=(), **constexprs) -> dict:
    """The interpreter's and the GPU's way to launch ``fn`` on zero tensors of ``sizes``, then
    the ``scalars``."""
    def run(make, tensors):
        def go():
            make(fn)[grid](*tensors(*sizes, dtype=dtype), *scalars, **constexprs)
            if tensors is _cuda:
                torch.cuda.synchronize()  # a GPU reports a kernel's faults at the next sync
        return go

    return {"interpreter": run(interpreted, _host), "gpu": run(compiled, _cuda)}


def compiler(fn: Callable, signature: dict, **constexprs) -> Callable:
    return lambda: compile_for_h100(fn, signature, constexprs)


def out_of_resources_compiled():
    """Compile the large config for an H100 and apply the launcher's own check to the shared
    memory the compiler allotted (what CompiledKernel does before its first launch)."""
    from triton.runtime.errors import OutOfResources

    kernel = compile_for_h100(pipelined_matmul, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16",
                                                 "M": "i32", "N": "i32", "K": "i32"},
                              LARGE, aligned=True, **LARGE_OPTIONS)
    if kernel.metadata.shared > H100_SHARED_MEMORY:
        raise OutOfResources(kernel.metadata.shared, H100_SHARED_MEMORY, "shared memory")


def out_of_resources_gpu():
    a, b, c = _cuda(512 * 512, 512 * 512, 512 * 512, dtype=torch.float16)
    grid = (512 // LARGE["BLOCK_M"], 512 // LARGE["BLOCK_N"])
    compiled(pipelined_matmul)[grid](a, b, c, 512, 512, 512, **LARGE, **LARGE_OPTIONS)
    torch.cuda.synchronize()


def out_of_resources_interpreter():
    a, b, c = _host(256 * 256, 256 * 256, 256 * 256, dtype=torch.float32)
    interpreted(pipelined_matmul)[(2, 1)](a, b, c, 256, 256, 256, **LARGE, **LARGE_OPTIONS)


def call_from_python(make: Callable) -> Callable:
    return lambda: make(needs_block)(torch.zeros(16), BLOCK=16)  # no [grid]: a plain call


def defined_without_a_file(make: Callable) -> Callable:
    def go():
        namespace = {"tl": tl}
        exec("def generated(x_ptr):\n    tl.store(x_ptr, 1.0)\n", namespace)  # no source file to read
        make(namespace["generated"])
    return go


def no_gpu_driver():
    compiled(needs_block)[(1,)](torch.zeros(16), BLOCK=16)


def cpu_tensor_on_gpu():
    compiled(needs_block)[(1,)](torch.zeros(16), BLOCK=16)


def past_the_end_checked():
    """The course's memory checker watches the interpreter's accesses (grader.memcheck)."""
    from grader.memcheck import MemoryChecker

    with MemoryChecker():
        interpreted(store_far_past_the_end)[(1,)](torch.zeros(16), FAR)


# ----------------------------------------------------------------------------------------------
# The catalogue
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Example:
    name: str
    title: str  # what the code does wrong
    meaning: str  # what the error means, and what to do
    # setting -> the function that triggers it
    triggers: dict = field(default_factory=dict)
    # setting -> (exception class name, a fragment of its message), or None: no error there
    expected: dict = field(default_factory=dict)
    # settings where the example must run in a process of its own: it wrecks the CUDA context,
    # or leaves the interpreter's stand-ins for triton.language in place
    isolated: tuple = ()


def _example(name, title, meaning, triggers, expected, isolated=()):
    return Example(name, title, meaning, triggers, expected, isolated)


EXAMPLES = [
    _example(
        "arange-not-power-of-two", "tl.arange(0, 10): a block whose length is not a power of two",
        "Blocks have power-of-two lengths. Round the length up (triton.next_power_of_2) and mask the "
        "extra lanes.",
        {**launcher(arange_not_power_of_two, (16,)),
         "compiler": compiler(arange_not_power_of_two, {"x_ptr": "*fp32"})},
        {"interpreter": ("InterpreterError", "arange's range must be a power of 2"),
         "compiler": ("CompilationError", "arange's range must be a power of 2"),
         "gpu": ("CompilationError", "arange's range must be a power of 2")}),
    _example(
        "arange-not-constexpr", "tl.arange(0, n) with n a runtime argument",
        "A block's length is fixed when the kernel compiles: pass it as a `tl.constexpr` parameter "
        "(BLOCK: tl.constexpr) and mask with the runtime n.",
        {**launcher(arange_not_constexpr, (16,), scalars=(16,)),
         "compiler": compiler(arange_not_constexpr, {"x_ptr": "*fp32", "n": "i32"})},
        {"interpreter": ("InterpreterError", "arange's arguments must be of type tl.constexpr"),
         "compiler": ("CompilationError", "arange's arguments must be of type tl.constexpr")}),
    _example(
        "type-error", "x & 1 on a float32 block",
        "An operation whose operand types do not fit. Convert first (x.to(tl.int32)) or use the "
        "operation meant for floats.",
        {**launcher(float_bitwise_and, (16,)), "compiler": compiler(float_bitwise_and, {"x_ptr": "*fp32"})},
        {"interpreter": ("InterpreterError", "invalid operands of type triton.language.float32"),
         "compiler": ("CompilationError", "invalid operands of type triton.language.float32"),
         "gpu": ("CompilationError", "invalid operands of type")}),
    _example(
        "pointer-plus-float", "x_ptr + 1.5: a pointer moved by a float",
        "Offsets are integers (element counts): an offset computed with / is a float, use //.",
        {**launcher(pointer_plus_float, (16,)), "compiler": compiler(pointer_plus_float, {"x_ptr": "*fp32"})},
        {"interpreter": ("InterpreterError", "invalid operands of type pointer<fp32>"),
         "compiler": ("CompilationError", "invalid operands of type pointer<fp32>")}),
    _example(
        "dot-too-small", "tl.dot of fp16 blocks with K = 8",
        "Tensor cores need K >= 16 for 16-bit inputs (8 for fp32, M and N can be small): make the "
        "blocks at least that large and mask the padding with other=0.",
        {**launcher(dot_too_small, (256, 256), dtype=torch.float16),
         "compiler": compiler(dot_too_small, {"a_ptr": "*fp16", "c_ptr": "*fp16"})},
        {"interpreter": None,  # numpy multiplies any shapes: only a compiled kernel refuses
         "compiler": ("CompilationError", "Input shapes should have"),
         "gpu": ("CompilationError", "Input shapes should have")}),
    _example(
        "dot-shape-mismatch", "tl.dot of a 16 x 32 block by a 16 x 16 block",
        "The inner dimensions of tl.dot must be equal: check which offsets built each block.",
        {**launcher(dot_shape_mismatch, (512, 256)),
         "compiler": compiler(dot_shape_mismatch, {"a_ptr": "*fp32", "c_ptr": "*fp32"})},
        {"interpreter": ("InterpreterError", "input and other must have equal reduction dimensions"),
         "compiler": ("CompilationError", "input and other must have equal reduction dimensions")}),
    _example(
        "static-assert", "tl.static_assert(BLOCK >= 16, ...) with BLOCK = 8",
        "A check on constexpr values, made when compiling: the message is yours. "
        "CompileTimeAssertionFailure is a CompilationError.",
        {**launcher(static_assert_fails, (16,), BLOCK=8),
         "compiler": compiler(static_assert_fails, {"x_ptr": "*fp32"}, BLOCK=8)},
        {"interpreter": ("InterpreterError", "BLOCK must be at least 16"),
         "compiler": ("CompilationError", "BLOCK must be at least 16")}),
    _example(
        "global-not-constexpr", "a kernel reads a module-level Python float",
        "A kernel may read only globals made with tl.constexpr(...): write SCALE = tl.constexpr(2.0), "
        "or pass the value as an argument. The interpreter runs plain Python and lets it pass.",
        {**launcher(global_not_constexpr, (16,)), "compiler": compiler(global_not_constexpr, {"x_ptr": "*fp32"})},
        {"interpreter": None,
         "compiler": ("CompilationError", "Cannot access global variable SCALE")}),
    _example(
        "torch-inside-kernel", "torch.ones(16) inside a kernel",
        "A kernel is compiled to GPU code: only tl.*, its arguments and constexpr globals exist "
        "there. Build the values with tl (tl.full((16,), 1.0, tl.float32)).",
        {**launcher(torch_inside_kernel, (16,)), "compiler": compiler(torch_inside_kernel, {"x_ptr": "*fp32"})},
        {"interpreter": ("InterpreterError", "cannot convert"),
         "compiler": ("RuntimeError", "Unsupported function referenced")}),
    _example(
        "missing-argument", "a launch that leaves out a constexpr argument",
        "Pass every parameter of the kernel, constexprs included (by keyword: BLOCK=...).",
        {"interpreter": lambda: interpreted(needs_block)[(1,)](torch.zeros(16)),
         "gpu": lambda: compiled(needs_block)[(1,)](torch.zeros(16, device="cuda"))},
        {"interpreter": ("TypeError", "missing 1 required positional argument: 'BLOCK'"),
         "gpu": ("TypeError", "missing 1 required positional argument: 'BLOCK'")}),
    _example(
        "call-from-python", "a @triton.jit function called like a Python function, without [grid]",
        "A kernel is launched as kernel[grid](...); a @triton.jit helper is called from another "
        "kernel only. The interpreter runs the body as Python and fails somewhere inside it, with a "
        "message that depends on the body.",
        {"interpreter": call_from_python(interpreted), "compiler": call_from_python(compiled)},
        {"interpreter": ("InterpreterError", ""),
         "compiler": ("RuntimeError", "Cannot call @triton.jit'd outside of the scope of a kernel")},
        isolated=("interpreter",)),
    _example(
        "no-source-file", "@triton.jit on a function made by exec() (no source file)",
        "The compiler reads the kernel's source from its file: define kernels in a .py file.",
        {"interpreter": defined_without_a_file(interpreted), "compiler": defined_without_a_file(compiled)},
        {"interpreter": None, "compiler": ("ValueError", "@jit functions should be defined in a Python file")}),
    _example(
        "out-of-resources", "a config that needs more shared memory than the GPU has",
        "Smaller blocks, or fewer stages (num_stages): kernel.py's launch_with_retry does it for you. "
        "The interpreter has no shared memory and never raises it.",
        {"interpreter": out_of_resources_interpreter, "compiler": out_of_resources_compiled,
         "gpu": out_of_resources_gpu},
        {"interpreter": None,
         "compiler": ("OutOfResources", "out of resource: shared memory, Required: 393216, Hardware limit: 232448"),
         "gpu": ("OutOfResources", "out of resource: shared memory")}),
    _example(
        "no-gpu-driver", "a compiled kernel launched on a machine without a GPU",
        "Nothing can run it: use a GPU, or set TRITON_INTERPRET=1 before triton is imported.",
        {"no-gpu": no_gpu_driver},
        {"no-gpu": ("RuntimeError", "0 active drivers")}),
    _example(
        "cpu-tensor-on-gpu", "a CPU tensor passed to a kernel launched on a GPU",
        "Move the tensor to the GPU first (x.cuda()); validate devices in the wrapper.",
        {"gpu": cpu_tensor_on_gpu},
        {"gpu": ("ValueError", "cannot be accessed from Triton (cpu tensor?)")}),
    _example(
        "device-assert", "tl.device_assert(x > 0, ...) on zeros",
        "With TRITON_DEBUG=1 a GPU prints the message, the program and the lane, and the launch fails "
        "at the next sync; the process's CUDA context is then unusable. Without TRITON_DEBUG=1, and "
        "in Triton 3.9's interpreter whatever the setting, the assert does nothing.",
        launcher(device_assert_fails, (16,)),
        {"interpreter": None, "gpu": ("", "device-side assert triggered")},
        isolated=("gpu",)),
    _example(
        "illegal-memory-access", "a store 4 GiB past the end of a tensor",
        "A GPU reports it at the next sync and the process's CUDA context is then unusable; run "
        "compute-sanitizer to find the line. The interpreter does not notice (it may corrupt host "
        "memory); the course's memory checker refuses the access and names the line and the lane.",
        {"interpreter": past_the_end_checked, "gpu": launcher(store_far_past_the_end, (16,), scalars=(FAR,))["gpu"]},
        {"interpreter": ("MemoryFault", "past the end"),
         # measured on an H100 (torch 2.11, Triton 3.6): "CUDA error: operation not supported on
         # global/shared address space"
         "gpu": ("", "CUDA error")},
        isolated=("gpu",)),
]

BY_NAME = {example.name: example for example in EXAMPLES}


@dataclass(frozen=True)
class Outcome:
    """What running one example did: None for the error when it raised nothing."""
    example: str
    setting: str
    error: str | None = None  # the exception's class name
    classes: tuple = ()  # the names of its class and base classes, for isinstance-like checks
    message: str = ""

    def matches(self, expected) -> bool:
        if expected is None:
            return self.error is None
        name, fragment = expected
        return self.error is not None and (not name or name in self.classes) and fragment in self.message


def run(example: Example, setting: str) -> Outcome:
    """Trigger ``example`` in ``setting``, in this process, and say what it raised."""
    try:
        example.triggers[setting]()
    except Exception as error:  # the point of the catalogue: whatever it raises
        classes = tuple(cls.__name__ for cls in type(error).__mro__)
        return Outcome(example.name, setting, type(error).__name__, classes, str(error))
    return Outcome(example.name, setting)


def run_elsewhere(settings: list[str], names: list[str] | None = None, debug: bool = False) -> list[Outcome]:
    """Run the examples of ``settings`` (all native, or just the interpreter) in a fresh Python
    process set up for them (see the module docstring): every example they have, or ``names``."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    if "interpreter" in settings:
        env["TRITON_INTERPRET"] = "1"
    if debug:
        env["TRITON_DEBUG"] = "1"
    command = [sys.executable, HERE, "--json", "--here", "--setting", *settings]
    if names:
        command += ["--only", *names]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    try:
        rows = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        # the process died (a wrecked CUDA context can abort it): its stderr is the message
        return [Outcome(name, setting, "", ("",), done.stderr[-2000:])
                for setting in settings for name in names or [e.name for e in runnable(setting)]]
    return [Outcome(**{**row, "classes": tuple(row["classes"])}) for row in rows]


def runnable(setting: str, isolated: bool | None = None) -> list[Example]:
    """The examples ``setting`` has; only the isolated ones (True) or only the others (False)."""
    return [example for example in EXAMPLES if setting in example.triggers
            and (isolated is None or (setting in example.isolated) == isolated)]


def available_settings() -> list[str]:
    gpu = torch.cuda.is_available()
    return ["interpreter", "compiler", "gpu" if gpu else "no-gpu"]


def collect(setting: str) -> list[Outcome]:
    """Every example of ``setting``, each isolated one in a process of its own."""
    together = [e.name for e in runnable(setting, isolated=False)]
    outcomes = run_elsewhere([setting], together) if together else []
    for example in runnable(setting, isolated=True):
        outcomes += run_elsewhere([setting], [example.name], debug=example.name == "device-assert")
    return outcomes


def trim(message: str, width: int = 96) -> str:
    lines = [line for line in message.strip().splitlines() if line.strip()]
    return textwrap.shorten(" | ".join(lines), width, placeholder=" ...") if lines else ""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Trigger the errors Triton raises, one small example each.")
    parser.add_argument("--setting", nargs="*", choices=SETTINGS,
                        help="only these settings (default: all this machine has)")
    parser.add_argument("--only", nargs="*", help="only these examples")
    parser.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    parser.add_argument("--here", action="store_true", help="run in this process (the setting's own)")
    args = parser.parse_args(argv)
    if args.here:
        outcomes = [run(example, setting) for setting in args.setting for example in runnable(setting)
                    if not args.only or example.name in args.only]
        print(json.dumps([{"example": o.example, "setting": o.setting, "error": o.error,
                           "classes": list(o.classes), "message": o.message} for o in outcomes]), flush=True)
        return
    settings = args.setting or available_settings()
    outcomes = [o for setting in settings for o in collect(setting) if not args.only or o.example in args.only]
    if args.json:
        print(json.dumps([o.__dict__ for o in outcomes], default=list))
        return
    for outcome in outcomes:
        expected = BY_NAME[outcome.example].expected.get(outcome.setting)
        verdict = "as expected" if outcome.matches(expected) else f"EXPECTED {expected}"
        raised = f"{outcome.error}: {trim(outcome.message)}" if outcome.error is not None else "no error"
        print(f"[{outcome.setting:11}] {outcome.example:24} {raised}  ({verdict})")


if __name__ == "__main__":
    main()
