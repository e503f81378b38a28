"""Import a module's ``kernel.py`` (the learner's, the reference, or a submission's) safely.

Every way a file can fail to load becomes a ``LoadError`` whose message tells the learner what
went wrong and what to do, instead of a traceback from deep inside Python or Triton.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from grader.core import device
from grader.core.catalog import Module
from grader.core.markers import Todo, open_todos


class LoadError(Exception):
    """kernel.py could not be imported, or lacks part of the module's API."""


def todo_summary(todos: list[Todo], limit: int = 5, track: str = "") -> str:
    """One short paragraph naming the open TODOs, for appending to any failure message. In the
    debugging track the TODOs are tools to write and the kernels' wrong results come from planted
    bugs, so there the TODOs are not called the likely cause."""
    if not todos:
        return ""
    shown = "\n".join(f"  - {todo}" for todo in todos[:limit])
    more = f"\n  ... and {len(todos) - limit} more" if len(todos) > limit else ""
    if track == "debugging":
        return (
            f"{len(todos)} TODO(s) still open in kernel.py (the tools this module asks you to write; "
            f"wrong results of the kernels come from the bugs planted in them, which no TODO marks):\n"
            f"{shown}{more}"
        )
    return (
        f"{len(todos)} TODO(s) still open in kernel.py, which is the likely cause:\n"
        f"{shown}{more}\nComplete them (and delete each `# TODO` line once done)."
    )


@dataclass
class LoadedKernel:
    module: Module
    path: Path
    namespace: ModuleType
    todos: list[Todo] = field(default_factory=list)

    def api(self, name: str):
        return getattr(self.namespace, name)


def kernel_path(module: Module, impl: str | Path = "learner") -> Path:
    """Where the kernel.py for ``impl`` lives.

    ``impl`` is ``"learner"`` (tracks/), ``"solutions"``, a kernel.py file, or a folder that holds
    the module as ``<track>/<slug>/kernel.py``, ``<slug>/kernel.py`` or ``kernel.py``.
    """
    if impl == "learner":
        return module.learner_dir / "kernel.py"
    if impl == "solutions":
        return module.solution_dir / "kernel.py"
    given = Path(impl)
    if given.is_file():
        return given
    for candidate in (
        given / module.track / module.slug / "kernel.py",
        given / module.slug / "kernel.py",
        given / "kernel.py",
    ):
        if candidate.is_file():
            return candidate
    return given / module.track / module.slug / "kernel.py"


def missing_kernel(module: Module, impl: str | Path, path: Path) -> str:
    """Why there is no kernel.py at ``path``, and what to try."""
    if impl == "solutions":
        return (
            f"There is no kernel.py at {path}: this copy of the course has no reference solutions "
            "(the learners' bundle leaves them out). Check your own kernel with IMPL=learner, the default."
        )
    if impl == "learner":
        if not (module.solution_dir / "kernel.py").is_file():  # the learners' bundle: no solutions to generate from
            return (
                f"There is no kernel.py at {path}. The starting file is also in "
                f"release/{module.track}-{module.slug}/kernel.py: copy it back to start again."
            )
        return (
            f"There is no kernel.py at {path}. `make stubs` recreates a missing learner file "
            "(it never overwrites one that holds your work)."
        )
    if not Path(impl).exists():
        return (
            f"There is no kernel.py at {path}: {str(impl)!r} is neither a file nor a folder here. IMPL "
            "takes learner (the default), solutions, a kernel.py, or a folder that holds "
            f"{module.track}/{module.slug}/kernel.py."
        )
    return (
        f"There is no kernel.py at {path}. The folder you gave should hold "
        f"{module.track}/{module.slug}/kernel.py, {module.slug}/kernel.py or kernel.py."
    )


def _unique_name(path: Path) -> str:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    return f"_learner_kernel_{digest}"


def _import_error_line(error: BaseException, path: Path) -> str:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == path]
    return f" (line {frames[-1].lineno}: `{(frames[-1].line or '').strip()}`)" if frames else ""


def load_kernel(module: Module, impl: str | Path = "learner") -> LoadedKernel:
    device.select()  # before @triton.jit runs in the learner's file
    path = kernel_path(module, impl).resolve()
    if not path.is_file():
        raise LoadError(missing_kernel(module, impl, path))
    source = path.read_text()
    todos = open_todos(source)
    hint = todo_summary(todos, track=module.track)
    try:
        compile(source, str(path), "exec")
    except SyntaxError as error:
        raise LoadError(
            f"kernel.py has a syntax error at line {error.lineno}: {error.msg}.\n"
            f"    {(error.text or '').rstrip()}\n"
            f"Fix that line (look at brackets, colons and indentation) and run again." + (f"\n{hint}" if hint else "")
        ) from None

    name = _unique_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    namespace = importlib.util.module_from_spec(spec)
    sys.modules[name] = namespace
    try:
        spec.loader.exec_module(namespace)
    except (Exception, SystemExit) as error:  # a learner's file may even call sys.exit
        sys.modules.pop(name, None)
        where = _import_error_line(error, path)
        raise LoadError(
            f"kernel.py raised {type(error).__name__} while being imported{where}: "
            f"{error}\nImporting must only define functions; fix the error above." + (f"\n{hint}" if hint else "")
        ) from None

    missing = [fn for fn in module.api if not callable(getattr(namespace, fn, None))]
    if missing:
        names = ", ".join(f"`{fn}`" for fn in missing)
        raise LoadError(
            f"kernel.py does not define {names}, which the tests call. "
            f"Keep the function names and signatures of the original file." + (f"\n{hint}" if hint else "")
        )
    return LoadedKernel(module, path, namespace, todos)
