"""The static policy gate: legitimate kernel files pass untouched, escape tricks are refused with
the right rule on the right line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader.policy import DEFAULT_POLICY, Policy, Violation, check_source, explain, policy_for

ROOT = Path(__file__).resolve().parents[2]
COURSE_FILES = sorted([*ROOT.glob("solutions/*/*/kernel.py"), *ROOT.glob("tracks/*/*/kernel.py")])
EXAMPLES = ROOT / "grader" / "examples"


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_course_files_are_found():
    # Guards the parametrisation below against a glob that silently matches nothing.
    assert len([p for p in COURSE_FILES if "solutions" in p.parts]) >= 5
    assert len([p for p in COURSE_FILES if "tracks" in p.parts]) >= 5


@pytest.mark.parametrize("path", COURSE_FILES, ids=rel)
def test_reference_solutions_and_stubs_pass(path):
    from grader.core import cases
    from grader.core.catalog import find_module

    # The policy a submission is graded under: the union of what the module's Specs allow.
    specs = cases.specs_of(*cases.public(find_module(str(path.parent))))
    assert check_source(path.read_text(), policy_for(*specs)) == []


def test_a_hook_is_refused_unless_the_module_allows_it():
    source = textwrap.dedent("""
        import triton

        @triton.autotune(configs=[], key=["n"], prune_configs_by={"early_config_prune": lambda c, a, **k: c})
        @triton.jit
        def kernel(x_ptr, n):
            pass
    """)
    assert [v.rule for v in check_source(source)] == ["hook"]
    allowing = type("Spec", (), {"allowed_hooks": frozenset({"prune_configs_by"})})()
    assert check_source(source, policy_for(allowing)) == []
    assert [v.rule for v in check_source(source.replace("prune_configs_by", "pre_hook"), policy_for(allowing))] == [
        "hook"
    ]
    # Passed positionally, the same hook is the same decision.
    positional = source.replace('configs=[], key=["n"], prune_configs_by=', '[], ["n"], ')
    assert [v.rule for v in check_source(positional)] == ["hook"]
    assert check_source(positional, policy_for(allowing)) == []


def config_with_pre_hook_at_its_position() -> str:
    """triton.Config(...) with plain values up to pre_hook, placed where the installed Triton has it."""
    import inspect

    import triton

    names = list(inspect.signature(triton.Config.__init__).parameters)[1:]
    values = ['{"BLOCK": 1024}', "4", "3", "1", "None", "None", "None"][: names.index("pre_hook")]
    return whole(f"""
        CONFIGS = [triton.Config({", ".join([*values, "print"])})]  # <-
        """)


def test_a_positional_hook_is_found_by_the_installed_triton_s_parameter_names():
    source = config_with_pre_hook_at_its_position()
    [violation] = check_source(source)
    assert (violation.rule, violation.line) == ("hook", marked_line(source)) and "`pre_hook`" in violation.message


def test_without_triton_s_signature_only_the_known_plain_positions_are_allowed(monkeypatch):
    from grader.policy import walker

    monkeypatch.setattr(walker, "_positional_parameters", lambda callee: None)
    assert check_source(whole('CONFIGS = [triton.Config({"BLOCK": 1024}, 4, 3, 1, 128)]\n')) == []
    source = config_with_pre_hook_at_its_position()
    assert [(v.rule, v.line) for v in check_source(source)] == [("hook", marked_line(source))]


# Example students whose files use nothing the gate refuses: their misbehaviour (a wrong grid,
# returning an input, hogging memory, spinning) is the runtime's to judge.
PASSES_GATE = [
    "submissions/noisy",
    "submissions/partial",
    "submissions/caches-outputs",
    "submissions/returns-input",
    "submissions/mutates-input",
    "submissions/endless-loop",
    "submissions-gpu/twice-the-work",
    "submissions-gpu/gpu-endless-loop",
    "submissions-gpu/gpu-memory-hog",
    "submissions-gpu/illegal-memory-access",
]


def example(name: str) -> Path:
    path = EXAMPLES / name / "missing-elements" / "01-vector-add" / "kernel.py"
    if not path.is_file():
        pytest.skip(f"{name} is not in this checkout")
    return path


@pytest.mark.parametrize("name", PASSES_GATE)
def test_legitimate_example_submissions_pass(name):
    assert check_source(example(name).read_text()) == []


def test_side_stream_example_passes_the_gate():
    # It keeps a side stream busy with a Triton loop of its own: nothing in it breaks a rule, and
    # its work left running is the run phase's to judge (after a device-wide sync).
    source = example("submissions-gpu/side-stream").read_text()
    assert "torch.cuda.stream(" in source and check_source(source) == []


# Hand-written attacks under grader/examples: each is refused, for the reason its docstring gives.
REFUSED_EXAMPLES = {
    "computes-in-thread": "import",
    "computes-in-kernel-body": "kernel-body",
    "computes-at-import": "import",
    "computes-in-heuristics": "heuristics",
    "disables-dispatch": "import",
    "forges-channel": "private",
    "numpy-interop": "import",
    "patches-monitor": "import",
    "patches-checks": "module-attribute-write",
    "exits-at-import": "module-member",
    "os-exit-at-import": "import",
    "fork-bomb": "import",
    "opens-own-memory": "class-object",
    "positional-pre-hook": "hook",
}


@pytest.mark.parametrize("name,rule", sorted(REFUSED_EXAMPLES.items()))
def test_hostile_example_submissions_are_refused(name, rule):
    rules = {v.rule for v in check_source(example(f"submissions/{name}").read_text())}
    assert rule in rules


# --- a small, valid kernel.py to hide tricks in ---------------------------------------------

HEADER = """\
import torch
import triton
import triton.language as tl
"""

KERNEL = """

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
"""

LAUNCH = """
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
    return out
"""


def in_add(body: str, imports: str = "", extra: str = "") -> str:
    """A kernel.py whose add() runs ``body`` (indented for you) before launching the kernel."""
    body = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    return (
        HEADER
        + textwrap.dedent(imports)
        + KERNEL
        + textwrap.dedent(extra)
        + "\n\ndef add(x, y):\n    out = torch.empty_like(x)\n"
        + body
        + LAUNCH
    )


def whole(source: str, kernel: bool = False) -> str:
    """A kernel.py made of the header, optionally the carrier kernel, and ``source``."""
    return HEADER + (KERNEL if kernel else "") + textwrap.dedent(source)


def test_the_carrier_file_itself_passes():
    assert check_source(in_add("pass")) == []


MARK = "# <-"

HOSTILE = {
    # rule 1: imports
    "threading": ("import", in_add("threading.Thread(target=print).start()", "import threading  # <-\n")),
    "_thread": ("import", in_add("pass", "import _thread  # <-\n")),
    "concurrent": ("import", in_add("pass", "from concurrent.futures import ThreadPoolExecutor  # <-\n")),
    "multiprocessing": ("import", in_add("pass", "import multiprocessing as mp  # <-\n")),
    "ctypes": ("import", in_add("pass", "import ctypes  # <-\n")),
    "numpy": (
        "import",
        in_add("np.add(np.from_dlpack(x), np.from_dlpack(y), out=np.from_dlpack(out))", "import numpy as np  # <-\n"),
    ),
    "os": ("import", in_add("pass", "import os  # <-\n")),
    "subprocess": ("import", in_add("pass", "import subprocess  # <-\n")),
    "signal": ("import", in_add("pass", "import signal  # <-\n")),
    "socket": ("import", in_add("pass", "import socket  # <-\n")),
    "gc": ("import", in_add("pass", "import gc  # <-\n")),
    "inspect": ("import", in_add("pass", "import inspect  # <-\n")),
    "traceback": ("import", in_add("pass", "import traceback  # <-\n")),
    "importlib": ("import", in_add("pass", "import importlib  # <-\n")),
    "builtins": ("import", in_add("pass", "import builtins  # <-\n")),
    "pickle": ("import", in_add("pass", "import pickle  # <-\n")),
    "io": ("import", in_add("pass", "from io import BytesIO  # <-\n")),
    "pathlib": ("import", in_add("pass", "from pathlib import Path  # <-\n")),
    "shutil": ("import", in_add("pass", "import shutil  # <-\n")),
    "tempfile": ("import", in_add("pass", "import tempfile  # <-\n")),
    "time": ("import", in_add("pass", "import time  # <-\n")),
    "import-in-function": ("import", in_add("import os  # <-\nos.getpid()")),
    "relative-import": ("import", in_add("pass", "from . import helpers  # <-\n")),
    "star-import": ("import", in_add("pass", "from triton.language import *  # <-\n")),
    "triton.runtime": ("import", in_add("pass", "from triton.runtime import driver  # <-\n")),
    "private-module-import": (
        "import",
        in_add(
            "with _disable_current_modes():\n    out = x + y",
            "from torch.utils._python_dispatch import _disable_current_modes  # <-\n",
        ),
    ),
    "from-torch-import-add": ("torch-compute", in_add("pass", "from torch import add  # <-\n")),
    # rule 2: builtins
    "__import__": ("builtin", in_add('__import__("os").system("id")  # <-')),
    "exec": ("builtin", in_add('exec("out.copy_(x + y)")  # <-')),
    "eval": ("builtin", in_add('out = eval("x + y")  # <-')),
    "compile": ("builtin", in_add('code = compile("x + y", "f", "eval")  # <-')),
    "open": ("builtin", in_add('open("/tmp/leak", "w").write("x")  # <-')),
    "getattr": ("builtin", in_add('getattr(torch, "add")(x, y, out=out)  # <-')),
    "vars": ("builtin", in_add("vars(torch)  # <-")),
    "breakpoint": ("builtin", in_add("breakpoint()  # <-")),
    # rule 3: private attributes, introspection, dunder definitions
    "torch._C": ("private", in_add("with torch._C._DisableTorchDispatch():  # <-\n    out = x + y")),
    "python_dispatch": (
        "torch-internals",
        in_add("with torch.utils._python_dispatch._disable_current_modes():  # <-\n    out = x + y"),
    ),
    "sys._getframe": ("private", in_add("frame = sys._getframe(1)  # <-", "import sys\n")),
    "__globals__": ("private", in_add("g = (lambda: 0).__globals__  # <-")),
    "__subclasses__": ("private", in_add("classes = ().__class__.__bases__[0].__subclasses__()  # <-")),
    "gi_frame": ("introspection", in_add("g = (i for i in ())\nharness = g.gi_frame.f_back.f_globals  # <-")),
    "tb_frame": (
        "introspection",
        in_add("try:\n    raise ValueError\nexcept ValueError as e:\n    f = e.with_traceback(None).tb_frame  # <-"),
    ),
    "__traceback__": (
        "private",
        in_add("try:\n    raise ValueError\nexcept ValueError as e:\n    f = e.__traceback__.tb_frame  # <-"),
    ),
    "def __torch_function__": (
        "private",
        whole(
            kernel=True,
            source="""
        class Sneaky(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):  # <-
                return func(*args, **(kwargs or {}))
        """,
        ),
    ),
    "format-string-attributes": ("private", in_add('leak = "{0.__class__.__init__}".format(x)  # <-')),
    "match-class-attributes": (
        "introspection",
        in_add("g = (i for i in ())\nmatch g:\n    case object(gi_frame=frame):  # <-\n        pass"),
    ),
    "dunder-keyword": ("private", in_add("d = dict(__class__=1)  # <-")),
    "dunder-string": ("private", in_add('T = type("T", (torch.Tensor,), {"__torch_function__": None})  # <-')),
    "metaclass": (
        "metaclass",
        whole(
            kernel=True,
            source="""
        class Meta(type):
            pass


        class Config(metaclass=Meta):  # <-
            pass
        """,
        ),
    ),
    # rule 4: modules are not values, and other modules are not ours to change
    "module-assigned": ("module-object", in_add("t = torch  # <-\nout = t.add(x, y)")),
    "module-passed": ("module-object", in_add("helper(torch)  # <-", extra="\n\ndef helper(m):\n    return m\n")),
    "module-in-list": ("module-object", in_add("mods = [tl]  # <-")),
    "global-module": ("module-object", in_add("global torch  # <-")),
    "patch-torch.empty": ("module-attribute-write", in_add("pass", extra="\ntorch.empty = print  # <-\n")),
    "del-triton.jit": ("module-attribute-write", in_add("pass", extra="\ndel triton.jit  # <-\n")),
    "patch-Tensor.view": ("module-attribute-write", in_add("torch.Tensor.view = print  # <-")),
    "patch-alias": ("module-attribute-write", in_add("T = torch.Tensor\nT.view = print  # <-")),
    "patch-via-type": ("attribute-write", in_add("type(x).view = print  # <-")),
    "patch-through-local-alias": ("attribute-write", in_add("k = add_kernel\nk.fn = print  # <-")),
    "torch.Tensor-constructor": ("tensor-escape", in_add("out = torch.Tensor([1.0, 2.0])  # <-")),
    "type-three-args": ("metaclass", in_add('T = type("T", (torch.Tensor,), {})  # <-')),
    "patch-kernel-object": ("attribute-write", in_add("pass", extra="\nadd_kernel.fn = print  # <-\n")),
    # rule 5: torch, triton and other modules' members
    "torch.add": ("torch-compute", in_add("out = torch.add(x, y)  # <-")),
    "torch.nn.functional": ("torch-compute", in_add("out = torch.nn.functional.softmax(x, dim=-1)  # <-")),
    "torch.ops.aten": ("torch-compute", in_add("out = torch.ops.aten.add(x, y)  # <-")),
    "torch.from_numpy": ("tensor-escape", in_add("out = torch.from_numpy(x.cpu().numpy())  # <-")),
    "torch.from_dlpack": ("tensor-escape", in_add("out = torch.from_dlpack(x)  # <-")),
    "torch.tensor": ("tensor-escape", in_add("out = torch.tensor([1.0, 2.0])  # <-")),
    "torch.multiprocessing": ("torch-internals", in_add("torch.multiprocessing.spawn(print)  # <-")),
    "torch.cuda._sleep": ("private", in_add("torch.cuda._sleep(1000)  # <-")),
    "triton.knobs": ("triton-internals", in_add("runtime = triton.knobs.runtime  # <-")),
    "patch-triton.knobs": ("module-attribute-write", in_add("triton.knobs.runtime.launch_enter_hook = None  # <-")),
    "triton.testing": ("triton-internals", in_add("ms = triton.testing.do_bench(lambda: None)  # <-")),
    "sys.modules": ("module-member", in_add('child = sys.modules["grader"]  # <-', "import sys\n")),
    "warnings.catch_warnings": (
        "module-member",
        in_add("with warnings.catch_warnings():  # <-\n    pass", "import warnings\n"),
    ),
    "typing.get_type_hints": ("module-member", in_add("typing.get_type_hints(add)  # <-", "import typing\n")),
    "typing.sys": ("module-member", in_add("m = typing.sys.modules  # <-", "import typing\n")),
    "tl.core.builtins": ("import", in_add('tl.core.builtins.exec("out.copy_(x + y)")  # <-')),
    "tl.core.knobs": ("import", in_add("runtime = tl.core.knobs.runtime  # <-")),
    # rule 6: tensor methods in Python code
    "x.add": ("torch-compute", in_add("out = x.add(y)  # <-")),
    "x.sum": ("torch-compute", in_add("total = x.sum()  # <-")),
    "bound-method": ("torch-compute", in_add("m = x.exp  # <-")),
    "x.masked_fill": ("torch-compute", in_add("out = x.masked_fill(x > 0, 0.0)  # <-")),
    "list.sort-collision": ("torch-compute", in_add("sizes = [3, 1]\nsizes.sort()  # <-")),
    "x.numpy": ("tensor-escape", in_add("a = x.numpy()  # <-")),
    "x.tolist": ("tensor-escape", in_add("values = x.tolist()  # <-")),
    "x.item": ("tensor-escape", in_add("first = x.item()  # <-")),
    "x.data": ("tensor-escape", in_add("raw = x.data  # <-")),
    "x.untyped_storage": ("tensor-escape", in_add("s = x.untyped_storage()  # <-")),
    # rule 7: kernel bodies
    "kernel-torch": (
        "kernel-body",
        whole("""
        PARKED = {}


        @triton.jit
        def add_kernel(n):
            torch.add(PARKED["x"], PARKED["y"], out=PARKED["out"])  # <-
        """),
    ),
    "kernel-helper": (
        "kernel-body",
        whole("""
        def helper(a, b):
            return a + b


        @triton.jit
        def add_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, helper(tl.load(x_ptr + offs), 1))  # <-
        """),
    ),
    "kernel-lambda": (
        "kernel-body",
        whole("""
        @triton.jit
        def add_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            f = lambda v: v + 1  # <-
            tl.store(out_ptr + offs, f(tl.load(x_ptr + offs)))
        """),
    ),
    "kernel-import": (
        "kernel-body",
        whole("""
        @triton.jit
        def add_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            import torch  # <-
            offs = tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs))
        """),
    ),
    "kernel-grader-helper": (
        "kernel-body",
        whole("""
        from grader.validation import check_tensors


        @triton.jit
        def add_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            check_tensors(("x", x_ptr))  # <-
        """),
    ),
    "kernel-interpreter-handle": (
        "kernel-body",
        whole("""
        @triton.jit
        def add_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            values = tl.load(x_ptr + offs).handle  # <-
        """),
    ),
    "kernel-constexpr-tensor-escape": (
        "tensor-escape",
        whole("""
        @triton.jit
        def add_kernel(out_ptr, X: tl.constexpr, BLOCK: tl.constexpr):
            v = X.value.numpy()  # <-
        """),
    ),
    # rule 8: hooks and heuristics
    "config-pre_hook": (
        "hook",
        whole("""
        def fill(args):
            args["out_ptr"].copy_(args["x_ptr"])


        CONFIGS = [triton.Config({"BLOCK": 1024}, pre_hook=fill)]  # <-
        """),
    ),
    "autotune-prune": (
        "hook",
        whole("""
        @triton.autotune(configs=[triton.Config({"BLOCK": 1024})], key=["n"],
                         prune_configs_by={"early_config_prune": print})  # <-
        @triton.jit
        def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
            pass
        """),
    ),
    "add_pre_run_hook": ("hook", in_add("pass", extra="\nadd_kernel.add_pre_run_hook(print)  # <-\n")),
    "heuristics-torch": (
        "heuristics",
        whole("""
        @triton.heuristics({"DONE": lambda args: torch.add(args["x_ptr"], args["y_ptr"], out=args["out_ptr"]) is None})  # <-
        @triton.jit
        def add_kernel(x_ptr, y_ptr, out_ptr, DONE: tl.constexpr):
            pass
        """),
    ),
    "heuristics-method": (
        "torch-compute",
        whole("""
        @triton.heuristics({"DONE": lambda args: args["out_ptr"].add(1) is None})  # <-
        @triton.jit
        def add_kernel(out_ptr, DONE: tl.constexpr):
            pass
        """),
    ),
    "heuristics-function-writes": (
        "heuristics",
        whole("""
        def done(args):
            args["out_ptr"].copy_(args["x_ptr"] + args["y_ptr"])  # <-
            return 1


        @triton.heuristics({"DONE": done})
        @triton.jit
        def add_kernel(x_ptr, y_ptr, out_ptr, DONE: tl.constexpr):
            pass
        """),
    ),
    # rule 9: classes are only compared or printed; file objects are out of reach
    "type-result-opens-a-file": (
        "class-object",
        in_add('mem = type(sys.stdout.buffer.raw)("/proc/self/mem", "rb")  # <-', "import sys\n"),
    ),
    "type-result-called": ("class-object", in_add("t = type(x)(3)  # <-")),
    "type-result-assigned": ("class-object", in_add("make = type(x)  # <-\nt = make(3)")),
    "type-result-in-a-container": ("class-object", in_add("makers = [type(x)]  # <-\nt = makers[0](3)")),
    "type-result-on-an-attribute": (
        "class-object",
        in_add("class Box:\n    pass\n\nbox = Box()\nbox.make = type(x)  # <-\nt = box.make(3)"),
    ),
    "type-result-passed-on": (
        "class-object",
        in_add("t = call(type(x))  # <-", extra="\n\ndef call(make):\n    return make(3)\n"),
    ),
    "type-result-in-a-walrus": ("class-object", in_add("if (make := type(x)) is not None:  # <-\n    t = make(3)")),
    "type-as-a-value": ("class-object", in_add("kind_of = type  # <-\nt = kind_of(x)(3)")),
    "type-mapped": ("class-object", in_add("makers = list(map(type, [x]))  # <-")),
    "type-of-an-exception": (
        "class-object",
        in_add("try:\n    pass\nexcept Exception as e:\n    again = type(e)  # <-"),
    ),
    "Tensor-alias": ("class-object", in_add("T = torch.Tensor  # <-\nout = T([1.0, 2.0])")),
    "Tensor-subclass": (
        "class-object",
        in_add(
            "pass",
            extra="""
        class Values(torch.Tensor):  # <-
            pass
        """,
        ),
    ),
    "Config-alias": ("class-object", in_add("pass", extra="\nConfig = triton.Config  # <-\n")),
    "Config-imported-then-stored": (
        "class-object",
        in_add("pass", "from triton import Config\n", extra="\nMAKERS = [Config]  # <-\n"),
    ),
    "Config-subclass": (
        "class-object",
        in_add(
            "pass",
            extra="""
        class Quiet(triton.Config):  # <-
            pass
        """,
        ),
    ),
    "heuristics-alias": ("class-object", in_add("pass", extra="\nchoose = triton.heuristics  # <-\n")),
    "jit-alias": ("class-object", in_add("pass", extra="\ncompile_kernel = triton.jit  # <-\n")),
    "sys.stdout-stored": ("stream", in_add("stream = sys.stdout  # <-", "import sys\n")),
    "sys.stdout.buffer": ("stream", in_add("sys.stdout.buffer.write(b'x')  # <-", "import sys\n")),
    "sys.stderr.buffer.raw": ("stream", in_add("raw = sys.stderr.buffer.raw  # <-", "import sys\n")),
    "sys.stderr.fileno": ("stream", in_add("fd = sys.stderr.fileno()  # <-", "import sys\n")),
    "sys.stderr-passed-on": (
        "stream",
        in_add("log(sys.stderr)  # <-", "import sys\n", extra="\n\ndef log(stream):\n    return stream\n"),
    ),
    "from-sys-import-stderr": ("stream", in_add("raw = stderr.buffer  # <-", "from sys import stderr\n")),
    "sys.stderr-to-a-print-of-its-own": (
        "stream",
        whole("""
        import sys


        def print(*values, file=None):
            return file


        def add(x, y):
            stream = print(x, file=sys.stderr)  # <-
        """),
    ),
    "raw-attribute": ("stream", in_add("handle = x.raw  # <-")),
    # rule 10: hooks passed positionally or unpacked
    "config-positional-pre_hook": (
        "hook",
        whole("""
        def fill(args):
            args["out_ptr"].copy_(args["x_ptr"])


        CONFIGS = [triton.Config({"BLOCK": 1024}, 4, 3, 1, None, fill)]  # <-
        """),
    ),
    "config-past-its-parameters": (
        "hook",
        in_add("pass", extra='\nCONFIGS = [triton.Config({"BLOCK": 1024}, 4, 3, 1, None, None, None, print)]  # <-\n'),
    ),
    "config-star-args": (
        "hook",
        in_add(
            "pass", extra='\nARGS = ({"BLOCK": 1024}, 4, 3, 1, None, print)\nCONFIGS = [triton.Config(*ARGS)]  # <-\n'
        ),
    ),
    "config-dict-splat": (
        "hook",
        in_add("pass", extra='\nCONFIGS = [triton.Config({"BLOCK": 1024}, **{"pre_hook": print})]  # <-\n'),
    ),
    "config-splat-through-a-helper": (
        "hook",
        in_add(
            "pass",
            extra="""
        def config(**options):
            return triton.Config({"BLOCK": 1024}, **options)  # <-
        """,
        ),
    ),
    "autotune-positional-pre_hook": (
        "hook",
        whole("""
        @triton.autotune([triton.Config({"BLOCK": 1024})], ["n"], None, None, None, print)  # <-
        @triton.jit
        def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
            pass
        """),
    ),
    "autotune-positional-prune": (
        "hook",
        whole("""
        @triton.autotune([triton.Config({"BLOCK": 1024})], ["n"], {"early_config_prune": print})  # <-
        @triton.jit
        def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
            pass
        """),
    ),
    "autotune-dict-splat": (
        "hook",
        whole("""
        HOOKS = {"post_hook": print}


        @triton.autotune(configs=[triton.Config({"BLOCK": 1024})], key=["n"], **HOOKS)  # <-
        @triton.jit
        def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
            pass
        """),
    ),
    "config-of-its-own-with-a-pre_hook": (
        "hook",
        in_add(
            "pass",
            extra="""
        class MyConfig:
            kwargs, num_warps, num_stages, num_ctas, maxnreg, ir_override = {"BLOCK": 1024}, 4, 3, 1, None, None

            def all_kwargs(self):
                return self.kwargs

            def pre_hook(self, args):  # <-
                args["out_ptr"].copy_(args["x_ptr"])
        """,
        ),
    ),
    "pre_hook-as-a-class-attribute": (
        "hook",
        in_add(
            "pass",
            extra="""
        class MyConfig:
            pre_hook = print  # <-
        """,
        ),
    ),
    "NamedTuple-with-computed-fields": (
        "class-object",
        in_add(
            "pass",
            "from typing import NamedTuple\n",
            extra="""
        Base = NamedTuple("Base", [("pre_" + "hook", object)])  # <-
        """,
        ),
    ),
    "NamedTuple-stored": (
        "class-object",
        in_add("pass", "import typing\n", extra="\nMAKE = typing.NamedTuple  # <-\n"),
    ),
    "jit-launch_metadata": (
        "hook",
        whole("""
        def metadata(grid, kernel, args):
            args["out_ptr"].copy_(args["x_ptr"])
            return {}


        @triton.jit(launch_metadata=metadata)  # <-
        def add_kernel(x_ptr, out_ptr):
            pass
        """),
    ),
}


def marked_line(source: str) -> int:
    lines = [i for i, text in enumerate(source.splitlines(), 1) if text.rstrip().endswith(MARK)]
    assert len(lines) == 1, "each hostile snippet marks exactly one line"
    return lines[0]


def test_enough_hostile_snippets():
    assert len(HOSTILE) >= 40


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_snippet_is_refused_on_its_line(name):
    rule, source = HOSTILE[name]
    line = marked_line(source)
    violations = check_source(source)
    assert any(v.rule == rule and v.line == line for v in violations), (
        f"expected {rule!r} on line {line}, got:\n" + "\n".join(f"{v.rule}: {v}" for v in violations)
    )


LEGITIMATE = {
    "shape-helpers": in_add(
        """
        rows, cols = rows_and_cols(x)
        block = triton.next_power_of_2(cols)
        if x.shape[-1] != y.shape[-1] or x.dim() != 2:
            raise ValueError(f"shapes {tuple(x.shape)} and {tuple(y.shape)} differ; got {x.dtype}")
        """,
        extra='''

        def rows_and_cols(t):
            """Leading dimensions flattened into rows."""
            cols = t.shape[-1]
            return t.numel() // max(cols, 1), cols
        ''',
    ),
    "strides-and-copies": in_add("""
        x = x.contiguous()
        if y.stride(-1) != 1:
            y = y.contiguous(memory_format=torch.contiguous_format)
        z = torch.empty_like(x)
        w = torch.empty((x.shape[0], 4), dtype=torch.float32, device=x.device)
        v = x.reshape(-1, x.shape[-1]).view(x.shape).to(torch.float16).t().unsqueeze(0)
        n = x.stride(0) * x.element_size() + x.storage_offset()
        K, _, R, S = (1, 2, 3, 4)
        kind, index = x.device.type, x.device.index
        big = torch.finfo(x.dtype).max
        """),
    "grid-lambda-autotune-heuristics": whole("""
        CONFIGS = [triton.Config({"BLOCK": 128}, num_warps=4, num_stages=3)]


        @triton.autotune(configs=CONFIGS, key=["n"])
        @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
        @triton.jit
        def scale_kernel(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


        def scale(x):
            n = x.numel()
            grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
            scale_kernel[grid](x, n)
            return x
        """),
    "jit-calls-jit-and-constants": whole("""
        from typing import Optional

        BLOCK = 1024
        HALF = BLOCK // 2
        SCALE = tl.constexpr(2)
        DTYPE = tl.float32


        @triton.jit
        def twice(v):
            return v * SCALE


        @triton.jit
        def kernel(x_ptr, c_ptr, n, eps, BLOCK_N: tl.constexpr = BLOCK):
            offs = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
            total = tl.sum(x, axis=0) + x.sum(axis=0) + tl.max(x, axis=0)
            acc = tl.zeros((BLOCK,), dtype=DTYPE)
            for i in range(0, min(n, HALF)):
                acc += twice(x) / tl.sqrt(total + eps)
            if isinstance(n, int):
                print("n", n)
            tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


        def run(x: torch.Tensor, c: Optional[torch.Tensor] = None) -> torch.Tensor:
            c = torch.empty_like(x) if c is None else c
            kernel[(triton.cdiv(x.numel(), BLOCK),)](x, c, x.numel(), 1e-5)
            return c
        """),
    "libdevice": whole("""
        from triton.language.extra import libdevice


        @triton.jit
        def kernel(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, libdevice.exp(tl.load(x_ptr + offs)))
        """),
    "device-queries-and-debug-output": in_add(
        """
        props = torch.cuda.get_device_properties(x.device).shared_memory_per_block_optin
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        print("add called", file=sys.stderr)
        warnings.warn("slow path")
        configs = {"a": 1}
        for key, value in sorted(configs.items()):
            names = ",".join(str(v) for v in configs.values()).split(",")
        """,
        "from __future__ import annotations\nimport math\nimport sys\nimport warnings\n",
    ),
    "main-block": in_add(
        "pass",
        extra="""
        if __name__ == "__main__":
            from grader.check import self_check

            self_check(__file__)
        """,
    ),
    "module-level-cache-and-global": in_add(
        """
        global CALLS
        CALLS += 1
        CACHE[tuple(x.shape)] = out
        """,
        extra="\nCACHE = {}\nCALLS = 0\n",
    ),
    "types-compared-and-printed": in_add(
        """
        if type(x) is not torch.Tensor or type(y) != type(x) or type(x) in (list, tuple):
            raise TypeError(f"expected tensors, got {type(x)} and {type(y)!r}")
        if not isinstance(y, type(x)) or not issubclass(type(y), (torch.Tensor, list)):
            print("types:", type(x), str(type(y)), repr(type(y)), file=sys.stderr)
        """,
        "import sys\n",
    ),
    "streams-for-printing": in_add(
        """
        print("add called", file=sys.stdout)
        sys.stderr.write("add called\\n")
        sys.stdout.flush()
        print("add called", file=stderr)
        print("add called", file=sys.stderr if x.is_cuda else sys.stdout)
        """,
        "import sys\nfrom sys import stderr\n",
    ),
    "tensor-annotations-and-checks": in_add(
        """
        pair: Tuple[torch.Tensor, Optional[torch.Tensor]] = (x, None)
        if not isinstance(y, torch.Tensor) or isinstance(x, (torch.Tensor, list)):
            y = cast(torch.Tensor, y)
        """,
        "from typing import Optional, Tuple, cast\n",
        extra="""

        def first(tensors: "list[torch.Tensor]", default: Optional[torch.Tensor] = None) -> torch.Tensor | None:
            return tensors[0] if tensors else default
        """,
    ),
    "positional-numbers-for-config-and-autotune": whole("""
        CONFIGS = [triton.Config({"BLOCK": 128}, 4, 3), triton.Config({"BLOCK": 64}, 8, 2, 1, 128)]


        @triton.autotune(CONFIGS, ["n"])
        @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
        @triton.jit(do_not_specialize=["n"])
        def scale_kernel(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
        """),
}


@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_legitimate_snippet_passes(name):
    assert check_source(LEGITIMATE[name]) == []


def test_syntax_errors_are_left_to_the_loader():
    assert check_source("def broken(:\n    pass\n") == []


def test_a_file_too_deep_to_walk_is_refused_not_waved_through():
    deep = "x = " + "+".join(["1"] * 20000) + "\n"
    assert [v.rule for v in check_source(in_add("pass", extra=deep))] == ["syntax"]


def test_one_violation_per_line_rule_and_name_sorted_by_line():
    source = in_add("a = x.sum() + x.sum()\nimport os\nb = x.sum()")
    violations = check_source(source)
    assert [v.line for v in violations] == sorted(v.line for v in violations)
    sums = [v for v in violations if "`.sum`" in v.message]
    assert len(sums) == 2 and sums[0].line != sums[1].line


def test_violation_reads_as_a_learner_facing_line():
    [violation] = check_source(in_add("pass", "import threading\n"))
    assert violation == Violation(4, "import", violation.message)
    assert str(violation).startswith("line 4: `import threading` is not allowed in kernel.py")


AUTOGRAD = whole(
    kernel=True,
    source="""

    class Add(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.n = x.numel()
            out = torch.empty_like(x)
            add_kernel[(triton.cdiv(ctx.n, 1024),)](x, y, out, ctx.n, BLOCK=1024)
            return out
    """,
)


def test_widen_opens_exactly_what_it_names():
    assert {v.rule for v in check_source(AUTOGRAD)} == {"torch-internals"}
    wider = DEFAULT_POLICY.widen(torch_names={"autograd.Function"})
    assert isinstance(wider, Policy) and check_source(AUTOGRAD, wider) == []
    # The rest of torch.autograd stays closed, and the default policy is unchanged.
    grad = in_add("g = torch.autograd.grad(out, x)")
    assert {v.rule for v in check_source(grad, wider)} == {"torch-internals"}
    assert "autograd.Function" not in DEFAULT_POLICY.torch_names
    # Naming a submodule opens the name, not the submodule's members.
    assert {v.rule for v in check_source(AUTOGRAD, DEFAULT_POLICY.widen(torch_names={"autograd"}))} == {
        "torch-internals"
    }
    assert check_source(in_add("pass", "import numpy\n"), DEFAULT_POLICY.widen(imports={"numpy"})) == []
    assert check_source(in_add("total = x.sum()"), DEFAULT_POLICY.widen(tensor_methods={"sum"})) == []


def test_policy_for_widens_by_the_modules_spec():
    class Spec:  # the fields of grader.core.cases.Spec that the gate reads
        allowed_torch_names = frozenset({"autograd.Function"})
        allowed_tensor_methods = frozenset({"sum"})

    assert check_source(AUTOGRAD + "\n\ndef total(x):\n    return x.sum()\n", policy_for(Spec())) == []
    assert policy_for(object()) == DEFAULT_POLICY


def test_widen_rejects_unknown_fields_and_bare_strings():
    with pytest.raises(TypeError):
        DEFAULT_POLICY.widen(torch_functions={"add"})
    with pytest.raises(TypeError):
        DEFAULT_POLICY.widen(imports="numpy")


def test_explain_lists_a_few_violations_and_what_to_do():
    violations = [Violation(i, "import", f"refused {i}.") for i in range(1, 8)]
    text = explain(violations, limit=5)
    lines = text.splitlines()
    assert lines[0] == "The grader refuses this kernel.py before running it:"
    assert lines[1:6] == [f"  line {i}: refused {i}." for i in range(1, 6)]
    assert lines[6] == "  ... and 2 more"
    assert lines[7].startswith("Compute inside your @triton.jit kernel")
    assert "... and" not in explain(violations[:2])


def test_pytest_says_what_grading_would_refuse(tmp_path):
    """A learner who runs pytest directly hears what the policy gate refuses, as make check says
    it: the tests still run, and the end of the session names the line."""
    import shutil
    import subprocess
    import sys

    from grader.core.catalog import REPO_ROOT, find_module

    module = find_module("missing-elements/01-vector-add")
    folder = tmp_path / module.track / module.slug
    folder.mkdir(parents=True)
    shutil.copy(module.solution_dir / "kernel.py", folder / "kernel.py")
    with open(folder / "kernel.py", "a") as handle:
        handle.write(
            "\n\ndef _sizes(xs):\n    sizes = set()\n    for x in xs:\n        sizes.add(x)\n    return sizes\n"
        )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--impl={tmp_path}",
            str(module.learner_dir / "test_kernel.py"),
            "-k",
            "matches_reference",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    assert "what grading would refuse" in run.stdout and "`.add` is a PyTorch tensor operation" in run.stdout
    assert "scores 0" in run.stdout
    clean = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--impl=solutions",
            str(module.learner_dir / "test_kernel.py"),
            "-k",
            "matches_reference",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    assert clean.returncode == 0 and "what grading would refuse" not in clean.stdout
