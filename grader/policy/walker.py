"""The policy gate's walker: an ``ast`` visitor that reads a kernel file and reports, line by
line, what the allowlists (``grader.policy.allowlists``) refuse, with the reason."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import string
import types
from collections.abc import Iterable

from grader.policy.allowlists import (
    _ALLOWED_DUNDER_NAMES,
    _ALLOWED_DUNDER_STRINGS,
    _BANNED_BUILTINS,
    _BASE_ONLY,
    _CALLED_WHERE_NAMED,
    _COLLISION_HINTS,
    _FILE_ATTRIBUTES,
    _FORMAT_FIELD_PARTS,
    _HOOK_PARTS,
    _HOOK_TAKERS,
    _HOOKS,
    _INSPECTING_BUILTINS,
    _INTROSPECTION,
    _KERNEL_BUILTINS,
    _PLAIN_PARAMETERS,
    _STREAM_METHODS,
    _STREAMS,
    _TENSOR_ESCAPES,
    _TORCH_ESCAPES,
    _TORCH_INTERNALS,
    Policy,
    Violation,
)


@functools.cache
def _tensor_attributes() -> frozenset[str]:
    import torch  # lazily: the gate itself must stay importable cheaply

    return frozenset(n for n in dir(torch.Tensor) if not n.startswith("_"))


@functools.cache
def _kernel_value_attributes() -> frozenset[str]:
    """Public attributes of Triton's language classes: what kernel values (blocks, dtypes,
    pointers, constexprs) legitimately have, even where torch.Tensor has the same name."""
    import triton.language as tl

    names = {"shape", "dtype", "type", "numel", "element_ty", "value"}  # set in __init__
    for obj in vars(tl).values():
        if isinstance(obj, type):
            names.update(n for n in dir(obj) if not n.startswith("_"))
    return frozenset(names)


@functools.cache
def _positional_parameters(callee: str) -> tuple[str, ...] | None:
    """The names of ``callee``'s positional parameters in the installed Triton, in order; None
    if they cannot be read."""
    module, _, name = callee.rpartition(".")
    try:
        value = getattr(importlib.import_module(module), name)
        cls = isinstance(value, type)
        parameters = list(inspect.signature(value.__init__ if cls else value).parameters.values())
    except (ImportError, AttributeError, TypeError, ValueError):  # no signature to read
        return None
    names = []
    for parameter in parameters[1 if cls else 0 :]:
        if parameter.kind not in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            break  # *args: what follows cannot be named
        names.append(parameter.name)
    return tuple(names)


@functools.cache
def _lookup(module: str, name: str, root: str) -> tuple[str, object]:
    """(kind, detail) of module.name for an open module: ("module", its __name__),
    ("foreign", the module a callable comes from) or ("value", None)."""
    try:
        mod = importlib.import_module(module)
        value = getattr(mod, name)
    except Exception:  # a missing name fails when the file runs, with Python's own message
        return "value", None
    if isinstance(value, types.ModuleType):
        return "module", value.__name__
    if name in getattr(mod, "__all__", ()):
        return "value", None
    origin = getattr(value, "__module__", None)
    if callable(value) and isinstance(origin, str) and not (origin == root or origin.startswith(root + ".")):
        return "foreign", origin
    return "value", None


def _and_list(items: list[str]) -> str:
    """a, b and c"""
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else "".join(items)


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """The base expression and attribute names of a.b.c (base a, ["b", "c"])."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return node, attrs[::-1]


def _root(node: ast.AST) -> ast.AST:
    """The base of a target such as a.b[i].c: descend through attributes and subscripts."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _stored_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Names a function body binds: assignment targets, loop and with variables, except/match names."""
    out = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                out.add(node.id)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                out.add(node.name)
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
                out.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                out.add(node.rest)
    return out


def _arg_names(args: ast.arguments) -> list[ast.arg]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    return every


class _Function:
    """What the walker knows about the function it is in."""

    def __init__(self, node: ast.AST, kernel: bool):
        self.kernel = kernel
        self.name = getattr(node, "name", "<lambda>")
        body = node.body if isinstance(node.body, list) else [node.body]
        declared_global = {n for top in body for s in ast.walk(top) if isinstance(s, ast.Global) for n in s.names}
        self.locals = ({a.arg for a in _arg_names(node.args)} | _stored_names(body)) - declared_global
        # Locals that merely name a global object (k = add_kernel; for k in KERNELS): setting
        # their attributes changes that object, not one this function created.
        self.borrowed = set()
        for top in body:
            for s in ast.walk(top):
                if isinstance(s, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and s.value is not None:
                    targets, source = (s.targets if isinstance(s, ast.Assign) else [s.target]), s.value
                elif isinstance(s, (ast.For, ast.AsyncFor, ast.comprehension)):
                    targets, source = [s.target], s.iter
                else:
                    continue
                base = _root(source)
                if isinstance(base, ast.Name) and base.id not in self.locals:
                    self.borrowed |= _stored_names(targets)


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, policy: Policy):
        self.policy = policy
        self.found: dict[tuple[int, str, str], tuple[int, Violation]] = {}
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.modules: dict[str, str] = {}  # name -> dotted module it is bound to
        self.members: dict[str, str] = {}  # name -> dotted module member it is bound to
        self._collect_imports(tree)
        # Every name the file binds anywhere: such a name (print, isinstance) is not the builtin.
        self.bound = _stored_names([tree]) | set(self.modules) | set(self.members)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                self.bound.update(a.arg for a in _arg_names(node.args))
        # Names a class or function may bind: a hook name makes an object Triton calls during the
        # launch (a config of one's own with a pre_hook method), unless the module allows that hook.
        self.hook_names = frozenset(_HOOKS - policy.hooks - {p for h in policy.hooks for p in _HOOK_PARTS.get(h, ())})
        self.aliases = self._collect_aliases(tree)  # names that hold a module's member
        self.jit_functions = {
            s.name for s in ast.walk(tree) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._is_jit(s)
        }
        self.constants = self._collect_constants(tree)
        self.functions: list[_Function] = []
        self.heuristics_depth = 0
        # Module-level functions handed to @triton.heuristics run during the launch, like lambdas.
        defs = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.heuristics_functions = {
            n.id
            for call in ast.walk(tree)
            if isinstance(call, ast.Call) and self._dotted(call.func) == "triton.heuristics"
            for arg in [*call.args, *(kw.value for kw in call.keywords)]
            for n in ast.walk(arg)
            if isinstance(n, ast.Name) and n.id in defs
        }

    # --- reporting -------------------------------------------------------------------------

    def report(self, node: ast.AST, rule: str, message: str) -> None:
        line = getattr(node, "lineno", 1)
        key = (line, rule, message)
        if key not in self.found:
            self.found[key] = (getattr(node, "col_offset", 0), Violation(line, rule, message))

    def violations(self) -> list[Violation]:
        ordered = sorted(self.found.values(), key=lambda cv: (cv[1].line, cv[0], cv[1].rule))
        return [v for _, v in ordered]

    # --- what names are ----------------------------------------------------------------------

    def _collect_imports(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.modules[alias.asname] = alias.name
                    else:
                        first = alias.name.split(".")[0]
                        self.modules[first] = first
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    dotted = f"{node.module}.{alias.name}"
                    bound = alias.asname or alias.name
                    if self._is_namespace(dotted):
                        self.modules[bound] = dotted
                    else:
                        self.members[bound] = dotted

    def _collect_aliases(self, tree: ast.Module) -> set[str]:
        """Names assigned a module's member (T = torch.Tensor), transitively: writing their
        attributes changes the module."""
        aliases = set(self.members)
        pairs = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                pairs += [(t.id, node.value) for t in targets if isinstance(t, ast.Name)]
        changed = True
        while changed:
            changed = False
            for name, value in pairs:
                if name in aliases:
                    continue
                base, attrs = _chain(value)
                if isinstance(base, ast.Name) and ((attrs and base.id in self.modules) or base.id in aliases):
                    aliases.add(name)
                    changed = True
        return aliases

    def _is_namespace(self, dotted: str) -> bool:
        p = self.policy
        if dotted in p.imports or dotted in p._prefixes or dotted in p.open_modules:
            return True
        root = self._open_root(dotted)
        if root is None:
            return False
        module, _, name = dotted.rpartition(".")
        return _lookup(module, name, root)[0] == "module"

    def _open_root(self, dotted: str) -> str | None:
        for root in self.policy.open_modules:
            if dotted == root or dotted.startswith(root + "."):
                return root
        return None

    def _importable(self, module: str) -> bool:
        return module in self.policy.imports or self._open_root(module) is not None

    def _dotted(self, node: ast.AST) -> str | None:
        """torch.finfo for `torch.finfo` or for `finfo` imported from torch; else None."""
        base, attrs = _chain(node)
        if not isinstance(base, ast.Name):
            return None
        if base.id in self.modules:
            return ".".join([self.modules[base.id], *attrs])
        if base.id in self.members:
            return ".".join([self.members[base.id], *attrs])
        return None

    def _builtin(self, func: ast.AST, names: frozenset[str]) -> bool:
        """Whether ``func`` is one of the builtins ``names``, not a name the file binds itself."""
        return isinstance(func, ast.Name) and func.id in names and func.id not in self.bound

    def _called(self, node: ast.AST) -> bool:
        parent = self.parents.get(node)
        return isinstance(parent, ast.Call) and parent.func is node

    def _outer(self, node: ast.AST) -> tuple[ast.AST, list[str]]:
        """The outermost attribute of the chain ``node`` starts (s.a.b for s) and its names ([a, b])."""
        attrs = []
        while isinstance(self.parents.get(node), ast.Attribute) and self.parents[node].value is node:
            node = self.parents[node]
            attrs.append(node.attr)
        return node, attrs

    def _passed_on(self, node: ast.AST) -> tuple[ast.AST, ast.AST | None]:
        """The expression whose value ``node``'s value becomes (a if c else b, a or b), and its parent."""
        child, parent = node, self.parents.get(node)
        while isinstance(parent, ast.BoolOp) or (isinstance(parent, ast.IfExp) and parent.test is not child):
            child, parent = parent, self.parents.get(parent)
        return child, parent

    def _inspected_only(self, node: ast.AST) -> bool:
        """Whether the value of ``node`` is only compared, printed, checked against (isinstance)
        or written in an annotation, so that nothing can call it or keep it."""
        child, parent = node, self.parents.get(node)
        while isinstance(parent, (ast.Subscript, ast.Tuple, ast.List, ast.BinOp)):  # Optional[T], T | None
            child, parent = parent, self.parents.get(parent)
        if (
            isinstance(parent, ast.arg)
            and parent.annotation is child
            or isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef))
            and parent.returns is child
            or isinstance(parent, ast.AnnAssign)
            and parent.annotation is child
        ):
            return True
        child, parent = self._passed_on(node)
        if (
            isinstance(parent, ast.Compare)
            or (isinstance(parent, ast.FormattedValue) and parent.value is child)
            or (isinstance(parent, ast.MatchClass) and parent.cls is child)
        ):
            return True
        if isinstance(parent, ast.Tuple):  # isinstance(x, (A, B))
            child, parent = parent, self.parents.get(parent)
        if isinstance(parent, ast.Call) and any(arg is child for arg in parent.args):
            return self._builtin(parent.func, _INSPECTING_BUILTINS) or (
                self._dotted(parent.func) == "typing.cast" and parent.args[0] is child
            )
        return False

    def _is_jit(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if self._dotted(target) == "triton.jit":
                return True
        return False

    def _collect_constants(self, tree: ast.Module) -> set[str]:
        """Module-level names a kernel may read: literals, arithmetic on them, tl.* values and
        tl.constexpr(...). A name bound any other way anywhere at module level (or declared
        `global` in a function) is not a constant."""
        constants: set[str] = set()
        spoiled = {n for s in ast.walk(tree) if isinstance(s, ast.Global) for n in s.names}

        def const(expr: ast.AST) -> bool:
            if isinstance(expr, ast.Constant):
                return True
            if isinstance(expr, ast.Name):
                return expr.id in constants
            if isinstance(expr, (ast.Tuple, ast.List)):
                return all(const(e) for e in expr.elts)
            if isinstance(expr, ast.UnaryOp):
                return const(expr.operand)
            if isinstance(expr, ast.BinOp):
                return const(expr.left) and const(expr.right)
            if isinstance(expr, ast.BoolOp):
                return all(const(e) for e in expr.values)
            if isinstance(expr, ast.Compare):
                return const(expr.left) and all(const(e) for e in expr.comparators)
            if isinstance(expr, ast.Call):
                return self._dotted(expr.func) in ("triton.language.constexpr", "triton.constexpr")
            dotted = self._dotted(expr) if isinstance(expr, ast.Attribute) else None
            return dotted is not None and dotted.startswith(("triton.language.", "math."))

        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                good = const(stmt.value)
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if good and isinstance(target, ast.Name):
                        constants.add(target.id)
                    else:
                        spoiled |= _stored_names([target])
            else:
                spoiled |= _stored_names([stmt])
        return constants - spoiled

    @property
    def kernel(self) -> _Function | None:
        """The @triton.jit function whose body is being walked, if any."""
        for fn in reversed(self.functions):
            if fn.kernel:
                return fn
        return None

    # --- messages ---------------------------------------------------------------------------

    def _importable_text(self) -> str:
        first = ["torch", "triton", "triton.language", "math", "typing", "sys", "warnings", "__future__"]
        allowed = [m for m in first if m in self.policy.imports]
        allowed += sorted(m for m in self.policy.imports if m not in first)
        return _and_list(allowed)

    def _import_message(self, what: str) -> str:
        return f"`{what}` is not allowed in kernel.py: it may import only {self._importable_text()}."

    def _kernel_message(self, name: str) -> str:
        return (
            f"`{name}` cannot be used inside the @triton.jit kernel `{self.kernel.name}`: a kernel "
            "may only use tl.*, its arguments, module-level constants and other @triton.jit "
            "functions (on a GPU anything else does not compile; the grader refuses it everywhere)."
        )

    def _refuse_member(self, node: ast.AST, dotted: str) -> None:
        module, _, name = dotted.rpartition(".")
        if module == "torch":
            if name in _TORCH_ESCAPES:
                self.report(
                    node,
                    "tensor-escape",
                    f"`{dotted}` moves tensor values between PyTorch and NumPy, DLPack, Python "
                    "objects or files, which kernel.py may not do: tensor values must stay on "
                    "the device and be computed by your @triton.jit kernel.",
                )
            elif name in _TORCH_INTERNALS:
                self.report(
                    node,
                    "torch-internals",
                    f"`{dotted}` reaches PyTorch's machinery, which no exercise needs: kernel.py "
                    "may use torch only to allocate tensors, name dtypes and devices, and query "
                    "the GPU (torch.cuda).",
                )
            else:
                self.report(
                    node,
                    "torch-compute",
                    f"`{dotted}` computes with PyTorch, which kernel.py may not do: compute inside "
                    "your @triton.jit kernel; around the launch only allocate, reshape and copy tensors.",
                )
        elif module.startswith("torch"):
            self.report(
                node,
                "torch-internals",
                f"`{dotted}` is not allowed in kernel.py: from {module} it may use only "
                + self._allowed_list(module)
                + ".",
            )
        elif module.startswith("triton"):
            self.report(
                node,
                "triton-internals",
                f"`{dotted}` is not needed by any exercise: kernel.py may use tl.* and, from "
                f"triton, only {self._allowed_list('triton')}.",
            )
        else:
            self.report(
                node,
                "module-member",
                f"`{dotted}` is not allowed in kernel.py: from {module} it may use only "
                + self._allowed_list(module)
                + ".",
            )

    def _allowed_list(self, module: str) -> str:
        names = sorted(
            m[len(module) + 1 :]
            for m in self.policy._members
            if m.startswith(module + ".") and "." not in m[len(module) + 1 :]
        )
        return _and_list([f"{module}.{n}" for n in names]) or "nothing (no exercise needs it)"

    # --- module members: torch.X, tl.X, sys.X ----------------------------------------------

    def _step(self, node: ast.AST, module: str, name: str) -> str | None:
        """Check module.name; return the dotted name to keep walking if it is a namespace,
        "" if it is an allowed value, None if it was refused."""
        dotted = f"{module}.{name}"
        if name.startswith("_"):
            self.report(node, "private", f"`{dotted}` is private: kernel.py may use only public names.")
            return None
        root = self._open_root(module)
        if root is not None:
            kind, detail = _lookup(module, name, root)
            if kind == "module":
                if detail == root or detail.startswith(root + "."):
                    return detail
                self.report(
                    node,
                    "import",
                    f"`{dotted}` is the module {detail}, which kernel.py may not "
                    f"use: it may import only {self._importable_text()}.",
                )
                return None
            if kind == "foreign":
                self.report(
                    node,
                    "module-member",
                    f"`{dotted}` comes from {detail}, not from {root}: kernel.py may use only {root}'s own names.",
                )
                return None
            return ""
        p = self.policy
        if dotted in p._members or dotted in p.imports:
            # A module named here opens only what is listed under it (torch_names={"autograd"}
            # allows the name torch.autograd; torch.autograd.Function needs "autograd.Function").
            return dotted if self._is_namespace(dotted) or self._is_module(module, name) else ""
        if dotted in p._prefixes:
            return dotted
        self._refuse_member(node, dotted)
        return None

    def _is_module(self, module: str, name: str) -> bool:
        """Whether module.name is a module, asking only packages the policy imports anyway."""
        if module.split(".")[0] not in {m.split(".")[0] for m in self.policy.imports}:
            return False
        return _lookup(module, name, module)[0] == "module"

    def _module_chain(self, node: ast.Attribute, base: ast.Name, attrs: list[str]) -> None:
        module = self.modules[base.id]
        kernel = self.kernel
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.report(
                node,
                "module-attribute-write",
                f"`{base.id}.{'.'.join(attrs)}` belongs to {module.split('.')[0]}: kernel.py must not "
                "change other modules; define your own names instead.",
            )
            return
        if kernel is not None and not (module.split(".")[0] == "triton" or module == "math"):
            self.report(node, "kernel-body", self._kernel_message(base.id))
            return
        if self.heuristics_depth and module.split(".")[0] == "torch":
            self._heuristics_torch(node, f"{base.id}.{'.'.join(attrs)}")
            return
        if not self._is_namespace(module):
            return  # its import is refused already; one reason is enough
        current = module
        for i, name in enumerate(attrs):
            step = self._step(node, current, name)
            if step is None:
                return
            if step == "":
                dotted = f"{current}.{name}"
                if dotted in _STREAMS:
                    self._stream(node, attrs[i + 1 :])
                    return
                if dotted in _CALLED_WHERE_NAMED and i == len(attrs) - 1:
                    self._called_where_named(node, f"{base.id}.{'.'.join(attrs)}", dotted)
                if dotted in _BASE_ONLY and i == len(attrs) - 1:
                    self._base_only(node, f"{base.id}.{'.'.join(attrs)}")
                for rest in attrs[i + 1 :]:
                    self._attribute(node, rest, value=None)
                return
            current = step
        self.report(
            node,
            "module-object",
            f"`{base.id}.{'.'.join(attrs)}` is a module: kernel.py may use a module only to reach "
            "its members (write the full name, e.g. torch.empty(...)), not as a value.",
        )

    # --- attributes on values -----------------------------------------------------------------

    def _attribute(self, node: ast.AST, name: str, value: ast.AST | None) -> None:
        if name.startswith("_"):
            self.report(
                node,
                "private",
                f"`.{name}` is private: kernel.py may use only public attributes (Python "
                "internals and private APIs are off limits).",
            )
            return
        if name in _INTROSPECTION:
            self.report(
                node,
                "introspection",
                f"`.{name}` inspects frames, code or classes, which kernel.py may not do: use "
                "only the values you are given.",
            )
            return
        if name in _FILE_ATTRIBUTES:
            self.report(
                node,
                "stream",
                f"`.{name}` leads from a stream to the file beneath it, which kernel.py may not touch: "
                "to print, use print(..., file=sys.stderr).",
            )
            return
        kernel = self.kernel
        if kernel is None and name in _HOOKS and name not in self.policy.hooks:
            self.report(
                node,
                "hook",
                f"`.{name}` installs or reaches a Python hook that Triton runs during the launch, "
                "which kernel.py may not use: put the work in your @triton.jit kernel.",
            )
            return
        if kernel is not None and name == "handle":
            self.report(
                node,
                "kernel-body",
                f"`.handle` is the interpreter's internal storage of a block: kernel "
                f"`{kernel.name}` may use only tl.* operations on its values.",
            )
            return
        if name not in _tensor_attributes():
            return
        if self.heuristics_depth and name.endswith("_"):
            self.report(
                node,
                "heuristics",
                f"`.{name}` writes into a tensor from a @triton.heuristics function, which Triton "
                "runs during the launch: heuristics may only compute launch parameters.",
            )
            return
        if name in self.policy.tensor_methods:
            return
        if kernel is not None and name in _kernel_value_attributes() and name not in _TENSOR_ESCAPES:
            return
        if (
            value is not None
            and name in ("max", "min", "dtype", "bits", "eps", "tiny", "resolution")
            and isinstance(value, ast.Call)
            and self._dotted(value.func) in ("torch.finfo", "torch.iinfo")
        ):
            return
        if name in _TENSOR_ESCAPES:
            self.report(
                node,
                "tensor-escape",
                f"`.{name}` takes values out of a tensor (into Python, NumPy or raw storage), "
                "which kernel.py may not do: tensor values must stay on the device and be "
                "computed by your @triton.jit kernel.",
            )
        else:
            self.report(
                node,
                "torch-compute",
                f"`.{name}` is a PyTorch tensor operation{_COLLISION_HINTS.get(name, '')}, "
                "which kernel.py may not use: compute inside your @triton.jit kernel; around "
                "the launch only allocate, reshape and copy tensors.",
            )

    def _heuristics_torch(self, node: ast.AST, what: str) -> None:
        self.report(
            node,
            "heuristics",
            f"`{what}` is used in a @triton.heuristics function, which Triton runs on the "
            "kernel's arguments during the launch: heuristics may compute launch parameters "
            "from sizes and strides only, without torch.",
        )

    def _attribute_write(self, node: ast.Attribute | ast.Subscript) -> None:
        base = _root(node)
        if isinstance(base, ast.Name):
            if base.id in self.modules or base.id in self.aliases:
                owner = self.modules.get(base.id) or (self.members.get(base.id) or "another module")
                self.report(
                    node,
                    "module-attribute-write",
                    f"`{ast.unparse(node)}` changes {owner.split('.')[0]}: kernel.py must not change "
                    "other modules; define your own names instead.",
                )
                return
            fn = self.functions[-1] if self.functions else None
            if isinstance(node, ast.Subscript) or (
                fn is not None and base.id in fn.locals and base.id not in fn.borrowed
            ):
                return  # items of containers, attributes of the function's own objects
        elif isinstance(node, ast.Subscript):
            return
        self.report(
            node,
            "attribute-write",
            f"`{ast.unparse(node)} = ...` sets an attribute of an object kernel.py did not create "
            "in this function: set attributes only on your own local objects.",
        )

    # --- classes, streams and the arguments of hook-taking calls ------------------------------

    def _class_value(self, node: ast.AST, what: str) -> None:
        """`type` or `type(x)`: a class, which may only be looked at."""
        if not self._inspected_only(node):
            self.report(
                node,
                "class-object",
                f"`{what}` is a class, which kernel.py may only compare or print (type(x) is T, "
                'f"{type(x)}"): called, stored or passed on, a class builds objects the grader never '
                "sees, such as open files. To check a type, use isinstance(x, T).",
            )

    def _called_where_named(self, node: ast.AST, what: str, dotted: str) -> None:
        """A member whose calls are checked where they are written: called there, or only looked at."""
        parent = self.parents.get(node)
        if (
            self._called(node)
            or self._inspected_only(node)
            or (
                dotted == "triton.jit"
                and isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef))
                and any(dec is node for dec in parent.decorator_list)
            )
        ):
            return
        if dotted == "torch.Tensor":
            self.report(
                node,
                "class-object",
                f"`{what}` may only be named in annotations and in isinstance(x, {what}): stored, passed "
                "on or subclassed, it builds tensors the grader cannot see being built.",
            )
            return
        self.report(
            node,
            "class-object",
            f"`{what}` may only be called where it is named ({what}(...)): the grader checks what "
            "each call passes, so kernel.py may not store it, pass it on or subclass it.",
        )

    def _base_only(self, node: ast.AST, what: str) -> None:
        """typing.NamedTuple: a base of a class statement, or only looked at."""
        parent = self.parents.get(node)
        if (isinstance(parent, ast.ClassDef) and any(base is node for base in parent.bases)) or self._inspected_only(
            node
        ):
            return
        self.report(
            node,
            "class-object",
            f"`{what}` may only be the base of a class statement (class Point({what}): ...), where "
            "the grader can read the fields: kernel.py may not call it, store it or pass it on.",
        )

    def _bind(self, node: ast.AST, name: str) -> None:
        """A name bound by kernel.py: not one of the hooks Triton calls on objects during a launch."""
        if name in self.hook_names:
            self.report(
                node,
                "hook",
                f"`{name}` is the name of a Python hook that Triton calls during the launch (on a "
                "config, for one), so kernel.py may not define it: choose another name.",
            )

    def _stream(self, node: ast.AST, rest: list[str]) -> None:
        """sys.stdout or sys.stderr as ``node``, followed by the attributes ``rest``: printed to only."""
        parent = self._passed_on(node)[1]
        if (
            not rest
            and isinstance(parent, ast.keyword)
            and parent.arg == "file"
            and self._builtin(self.parents[parent].func, frozenset({"print"}))
        ):
            return
        if len(rest) == 1 and rest[0] in _STREAM_METHODS and self._called(node):
            return
        self.report(
            node,
            "stream",
            f"`{ast.unparse(node)}`: kernel.py may use sys.stdout and sys.stderr only to print "
            "(print(..., file=sys.stderr) or sys.stderr.write(...)); as objects, they lead to the "
            "process's open files.",
        )

    def _hook_arguments(self, node: ast.Call, callee: str) -> None:
        """Positional and unpacked arguments of a Triton callable that takes hooks: each must fill
        a parameter known to be a plain value, or a hook the module allows."""
        names = _positional_parameters(callee)
        if names is None:
            names = _HOOK_TAKERS[callee]
        allowed = _PLAIN_PARAMETERS | self.policy.hooks
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                self.report(
                    arg,
                    "hook",
                    f"`*{ast.unparse(arg.value)}` in `{callee}(...)` hides which parameters it fills, "
                    "and some of them take Python hooks: write the arguments out.",
                )
                break
            name = names[i] if i < len(names) else None
            if name in allowed or isinstance(arg, ast.Constant):  # a literal (None) is never a hook
                continue
            if name in _HOOKS:
                self.report(
                    arg,
                    "hook",
                    f"argument {i + 1} of `{callee}(...)` is its `{name}`, a Python hook that Triton "
                    "runs on the kernel's tensors during the launch, which kernel.py may not use: put "
                    "the work in your @triton.jit kernel.",
                )
            else:
                self.report(
                    arg,
                    "hook",
                    f"argument {i + 1} of `{callee}(...)` is not one the grader knows to be a plain "
                    "value: pass it by keyword (name=value), or leave it out.",
                )
        for kw in node.keywords:
            if kw.arg is None:
                self.report(
                    kw,
                    "hook",
                    f"`**{ast.unparse(kw.value)}` in `{callee}(...)` passes keywords the grader cannot "
                    "read, and some of them take Python hooks: write each keyword out (name=value).",
                )

    # --- visitors -------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        if self.kernel is not None:
            self.report(node, "kernel-body", self._kernel_message("import"))
        for alias in node.names:
            if not self._importable(alias.name):
                self.report(node, "import", self._import_message(f"import {alias.name}"))
            if alias.asname:
                self._bind(node, alias.asname)
            if alias.asname and _is_dunder(alias.asname):
                self.report(node, "private", f"`{alias.asname}` is a Python internal name: choose another.")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self.kernel is not None:
            self.report(node, "kernel-body", self._kernel_message("import"))
        if node.level:
            self.report(
                node,
                "import",
                f"Relative imports are not allowed in kernel.py: it may import only {self._importable_text()}.",
            )
            return
        if not self._importable(node.module):
            self.report(node, "import", self._import_message(f"from {node.module} import ..."))
            return
        for alias in node.names:
            if alias.name == "*":
                self.report(
                    node,
                    "import",
                    f"`from {node.module} import *` is not allowed in kernel.py: import the names you use one by one.",
                )
                continue
            if node.module == "__future__":
                continue
            self._step(node, node.module, alias.name)
            if alias.asname:
                self._bind(node, alias.asname)
            if alias.asname and _is_dunder(alias.asname):
                self.report(node, "private", f"`{alias.asname}` is a Python internal name: choose another.")

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in _BANNED_BUILTINS:
            self.report(
                node,
                "builtin",
                f"`{name}` is not allowed in kernel.py: it runs, reads or reaches code and files "
                "outside your kernel, which no exercise needs.",
            )
            return
        if _is_dunder(name) and name not in _ALLOWED_DUNDER_NAMES:
            self.report(node, "private", f"`{name}` is a Python internal, which kernel.py may not use.")
            return
        if name in self.modules:
            if isinstance(node.ctx, ast.Load):
                what = "used as a value"
            else:
                what = "rebound"
            self.report(
                node,
                "module-object",
                f"`{name}` is a module and may not be {what}: kernel.py may use a module only to "
                f"reach its members (write {name}.something).",
            )
            return
        kernel = self.kernel
        if kernel is not None and isinstance(node.ctx, ast.Load):
            allowed = (
                name in kernel.locals
                or name in _KERNEL_BUILTINS
                or name in self.jit_functions
                or name in self.constants
                or (name in self.members and self.members[name].split(".")[0] in ("triton", "math"))
            )
            if not allowed:
                self.report(node, "kernel-body", self._kernel_message(name))
                return
        if isinstance(node.ctx, ast.Load):
            if name == "type" and not self._called(node):
                self._class_value(node, name)
            member = self.members.get(name)
            if member in _STREAMS:
                self._stream(*self._outer(node))
            elif member in _CALLED_WHERE_NAMED and not isinstance(self.parents.get(node), ast.Attribute):
                self._called_where_named(node, name, member)
            elif member in _BASE_ONLY and not isinstance(self.parents.get(node), ast.Attribute):
                self._base_only(node, name)
        else:
            self._bind(node, name)
        if self.heuristics_depth and name in self.members and self.members[name].split(".")[0] == "torch":
            self._heuristics_torch(node, name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base, attrs = _chain(node)
        if isinstance(base, ast.Name) and base.id in self.modules:
            parent = self.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                return  # checked with the outermost attribute of the chain
            self._module_chain(node, base, attrs)
            return
        if isinstance(base, ast.Name) and self.members.get(base.id) in _STREAMS:
            self.generic_visit(node)  # stderr.buffer (from sys import stderr): checked whole at the name
            return
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._attribute_write(node)
        self._attribute(node, node.attr, node.value)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._attribute_write(node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        if re.fullmatch(r"__\w+__", node.value) and node.value not in _ALLOWED_DUNDER_STRINGS:
            self.report(
                node, "private", f"the string {node.value!r} names a Python internal, which kernel.py may not use."
            )
        elif "{" in node.value:
            self._format_fields(node, node.value)

    def _format_fields(self, node: ast.AST, text: str) -> None:
        """str.format walks attributes named in its fields ("{0.__class__}"): check them as code."""
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError:
            return
        for _, field, spec, _ in parsed:
            for attr, key in _FORMAT_FIELD_PARTS.findall(field or ""):
                if attr:
                    self._attribute(node, attr, None)
                elif _is_dunder(key):
                    self.report(
                        node,
                        "private",
                        f"the format field {{{field}}} names a Python internal, which kernel.py may not use.",
                    )
            if spec and "{" in spec:
                self._format_fields(node, spec)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        # `case object(gi_frame=f)` reads the attribute gi_frame: the same rules as `.gi_frame`.
        for name in node.kwd_attrs:
            self._attribute(node, name, None)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        for kw in node.keywords:
            if kw.arg is None:
                continue
            if "__" in kw.arg:
                self.report(
                    kw, "private", f"the keyword `{kw.arg}` names a Python internal, which kernel.py may not use."
                )
            elif kw.arg in _HOOKS and kw.arg not in self.policy.hooks:
                self.report(
                    kw,
                    "hook",
                    f"`{kw.arg}=` installs a Python hook that Triton runs on the kernel's tensors "
                    "during the launch, which kernel.py may not use: put the work in your "
                    "@triton.jit kernel.",
                )
        callee = self._dotted(node.func)
        if callee == "torch.Tensor":
            self.report(
                node,
                "tensor-escape",
                "`torch.Tensor(...)` builds a tensor from Python values, which kernel.py may not "
                "do: allocate with torch.empty/torch.zeros and compute in your @triton.jit kernel.",
            )
        if isinstance(node.func, ast.Name) and node.func.id == "type":
            if len(node.args) == 3:
                self.report(
                    node,
                    "metaclass",
                    "`type(name, bases, namespace)` creates a class at run time, which no exercise "
                    "needs: write a plain class statement.",
                )
            else:
                text = ast.unparse(node)
                self._class_value(node, text if len(text) <= 40 else "type(...)")
        if callee in _HOOK_TAKERS:
            self._hook_arguments(node, callee)
        self.visit(node.func)
        heuristics = callee == "triton.heuristics"
        self.heuristics_depth += heuristics
        try:
            for arg in node.args:
                self.visit(arg)
            for kw in node.keywords:
                self.visit(kw.value)
        finally:
            self.heuristics_depth -= heuristics

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        name = getattr(node, "name", None)
        if self.kernel is not None:
            what = "a lambda" if name is None else f"a nested function `{name}`"
            self.report(
                node,
                "kernel-body",
                f"{what} cannot be defined inside the @triton.jit kernel `{self.kernel.name}`: "
                "define it at module level as another @triton.jit function.",
            )
        if name is not None and _is_dunder(name):
            self.report(node, "private", f"`def {name}` defines a Python or PyTorch hook, which kernel.py may not do.")
        if name is not None:
            self._bind(node, name)
        for arg in _arg_names(node.args):
            self._bind(arg, arg.arg)
            if _is_dunder(arg.arg):
                self.report(arg, "private", f"the argument `{arg.arg}` names a Python internal; rename it.")
            if arg.arg in self.modules:
                self.report(
                    arg,
                    "module-object",
                    f"the argument `{arg.arg}` hides the module {self.modules[arg.arg]}; rename it.",
                )
        # Decorators, defaults and annotations run as Python where the function is defined.
        for dec in getattr(node, "decorator_list", []):
            self.visit(dec)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        for arg in _arg_names(node.args):
            if arg.annotation is not None:
                self.visit(arg.annotation)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)
        kernel = name is not None and self._is_jit(node)
        heuristics = not self.functions and name in self.heuristics_functions
        self.functions.append(_Function(node, kernel=kernel or self.kernel is not None))
        self.heuristics_depth += heuristics
        try:
            for stmt in node.body if isinstance(node.body, list) else [node.body]:
                self.visit(stmt)
        finally:
            self.functions.pop()
            self.heuristics_depth -= heuristics

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if self.kernel is not None:
            self.report(
                node, "kernel-body", f"a class cannot be defined inside the @triton.jit kernel `{self.kernel.name}`."
            )
        if _is_dunder(node.name):
            self.report(node, "private", f"`class {node.name}` uses a Python internal name; rename it.")
        self._bind(node, node.name)
        for kw in node.keywords:
            self.report(
                node,
                "metaclass",
                f"`{kw.arg}=` in a class statement customises class creation, which no exercise "
                "needs: write a plain class.",
            )
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node, node.name)
        self.generic_visit(node)

    def _match_name(self, node: ast.MatchAs | ast.MatchStar | ast.MatchMapping) -> None:
        name = node.rest if isinstance(node, ast.MatchMapping) else node.name
        if name:
            self._bind(node, name)
        self.generic_visit(node)

    visit_MatchAs = visit_MatchStar = visit_MatchMapping = _match_name

    def visit_Global(self, node: ast.Global) -> None:
        if self.kernel is not None:
            self.report(node, "kernel-body", self._kernel_message("global"))
        for name in node.names:
            if name in self.modules:
                self.report(
                    node,
                    "module-object",
                    f"`global {name}` would let this function rebind the module {self.modules[name]}; "
                    "use another name.",
                )

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        if self.kernel is not None:
            self.report(node, "kernel-body", self._kernel_message("nonlocal"))
