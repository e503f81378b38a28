"""The memory-bug corpus under triton-viz's sanitizer, beside the course's memory checker.

triton-viz (``pip install triton-viz``) is a Triton visualiser whose tools also run on the
interpreter. Its sanitizer looks for out-of-bounds loads and stores: it runs a kernel symbolically
(every value a z3 expression, the program id a free variable bounded by the grid) and asks z3
whether any address that an unmasked lane can reach lies outside every tensor argument. It has no
race detector, no check of alignment and no check of unwritten memory (version 3.0), so on the
corpus it can only ever report ``out-of-bounds``; the table still lists every entry, so that what
neither kind of tool sees stays in view.

    python -m grader.authoring.viz_compare                  # every entry under both, timed against
                                                            # the plain interpreter
    python -m grader.authoring.viz_compare --only NAME,...  # some entries (names from --list of
                                                            # grader.authoring.memory_corpus)

How an entry runs under triton-viz. The corpus's launchers call their kernels by their module-level
names, so while an entry runs each ``@triton.jit`` kernel of ``memory_corpus`` is swapped for the
same kernel wrapped by ``triton_viz.trace`` (the corpus's source is untouched, and every kernel is
restored afterwards). The sanitizer is built with ``abort_on_error=False``, which makes it collect
its findings in ``records`` instead of printing one and leaving the process. triton-viz skips a
kernel that it has already checked in this process with the same grid and argument shapes; the
set that remembers them is emptied before every run, so that each entry (and each timed repeat)
is checked as in a fresh process: two entries share ``gather_kernel`` with equal shapes. The
sanitizer evaluates loads and stores symbolically rather than performing them, so an entry's
outputs are not computed under it, and it needs a single program for a launch unless an address
depends on loaded data (then it runs them all).

Triton 3.9. triton-viz 3.0, the newest release, was written against an older interpreter: as
released it does not import with Triton 3.9 (it looks up the block-pointer builder methods, which
3.9 removed), and its sanitizer passes a cache modifier and an eviction policy where 3.9's builder
takes one ``cache_policy`` argument, so that every unmasked load or store, and every load it
performs for a data-dependent address, fails with a TypeError. ``unavailable`` and ``_sanitizer``
fit it to this Triton where needed, without changing what it checks: placeholders that raise for
the four removed methods (no corpus kernel uses block pointers), and the arguments of those calls
rearranged (``ADAPTED`` lists what was done; the command prints it). The other tool-level effects
are kept apart so that each tool runs as in a process of its own (``_traced``).

The corpus places every tensor at a storage offset above 0 (``memory_corpus._fresh``), which
trips a triton-viz bound for strided views (``AT_OFFSET_0``): the command repeats the corpus's two
column slices on a fresh allocation after the main table.

The course's checker runs through ``memory_corpus.checked`` and the plain interpreter through
``memory_corpus.plain``: the same functions as ``python -m grader.authoring.memory_corpus``.
Reading triton-viz's records, the verdicts, the table and the totals are pure functions
(``tests/authoring/test_viz_compare.py``); triton-viz itself is imported only when a run needs it.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton

from grader.authoring import memory_corpus
from grader.authoring.memory_corpus import BUGS, Bug
from grader.authoring.text_table import aligned
from grader.core import device

INSTALL = "triton-viz is not installed: `pip install triton-viz` (it brings z3-solver), then run this again."
CORPUS_FILE = Path(memory_corpus.__file__).name
OUT_OF_BOUNDS = "out-of-bounds"  # the one kind triton-viz's sanitizer reports
BLOCK_POINTER_METHODS = (
    "create_make_block_ptr",
    "create_tensor_pointer_load",
    "create_tensor_pointer_store",
    "create_advance",
)
_VIZ_REWRITTEN: dict = {}  # the kernels as rewritten under triton-viz (see _traced)
ADAPTED: list[str] = []  # what was changed so that triton-viz runs on this Triton (see unavailable)
HEADINGS = (
    "name",
    "class",
    "planted",
    "checker",
    "line",
    "triton-viz",
    "line",
    "plain s",
    "checker",
    "viz",
    "triton-viz's first finding",
)  # the two time columns: each tool's seconds over the plain run's


# -- triton-viz's findings -------------------------------------------------------------------------


@dataclass(frozen=True)
class VizFinding:
    """One record of triton-viz's sanitizer, in the corpus's words."""

    op: str  # "load" or "store"
    tensor: str  # the argument the address was nearest to, as triton-viz names it
    element: int  # an offending address z3 found, as an element index of that tensor (may be < 0)
    line: int  # the kernel's line, 0 if the record names no line in the corpus
    kind: str = OUT_OF_BOUNDS

    def __str__(self) -> str:
        where = f" at line {self.line}" if self.line else ""
        return f"{self.op} of {self.tensor or '?'}[{self.element}]{where}"


def corpus_line(frames: Sequence[tuple[str, int]]) -> int:
    """The line of the deepest frame in the corpus's file (the kernel's access, below its launcher),
    from ``(filename, line)`` pairs listed outermost first; 0 if none is in the corpus's file."""
    lines = [line for filename, line in frames if Path(filename).name == CORPUS_FILE]
    return lines[-1] if lines else 0


def finding(
    op: str, tensor: str, address: int, base: int, element_size: int, frames: Sequence[tuple[str, int]]
) -> VizFinding:
    """A record's fields (its operation's class name, the tensor's name, the violating address, the
    tensor's first byte and element size, its traceback) as a ``VizFinding``."""
    return VizFinding(op.lower(), tensor, (address - base) // max(element_size, 1), corpus_line(frames))


def _from_record(record) -> VizFinding:
    """Read one of triton-viz's out-of-bounds records (its fields as version 3.0 names them)."""
    tensor = record.tensor
    frames = [(tb.filename, tb.lineno) for tb in record.user_code_tracebacks]
    return finding(
        record.op_type.__name__,
        record.tensor_name or "",
        record.violation_address,
        tensor.data_ptr(),
        tensor.element_size(),
        frames,
    )


@dataclass
class VizResult:
    bug: Bug
    findings: list[VizFinding] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""  # an exception raised while triton-viz ran the entry


def viz_verdict(kind: str, found_kinds: Sequence[str], error: str) -> str:
    """triton-viz's verdict on an entry planted with ``kind`` ("" for a clean control), given the
    kinds it reported, in the words ``memory_corpus.verdict`` uses for the checker."""
    if error:
        return f"ERROR {error}"
    if not kind:
        return "clean" if not found_kinds else f"FALSE ALARM ({found_kinds[0]})"
    if kind in found_kinds:
        return f"yes ({kind})"
    if found_kinds:
        return f"wrong kind ({found_kinds[0]})"
    return "missed"


def short_error(error: BaseException, limit: int = 70) -> str:
    """An exception as one short line for the table."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    line = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


# -- rows, table and totals ------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One entry under both tools: what each said, the line each named, and the seconds each took."""

    name: str
    kind: str  # the planted class, "" for a clean control
    planted: int  # the planted line, 0 for a clean control
    checker: str  # the checker's verdict (memory_corpus.verdict)
    checker_caught: bool
    checker_line: int
    viz: str  # triton-viz's verdict (viz_verdict)
    viz_caught: bool
    viz_line: int
    viz_detail: str = ""  # triton-viz's first finding, as it words it
    plain_s: float = 0.0
    checker_s: float = 0.0
    viz_s: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.kind

    @property
    def checker_alarm(self) -> bool:
        return self.clean and self.checker.startswith("FALSE ALARM")

    @property
    def viz_alarm(self) -> bool:
        return self.clean and self.viz.startswith("FALSE ALARM")


def row(checked: memory_corpus.Result, viz: VizResult, plain_s: float) -> Row:
    """One entry's ``Row`` from the checker's result and triton-viz's."""
    bug = checked.bug
    wanted = [f for f in viz.findings if f.kind == bug.kind] or viz.findings
    first = wanted[0] if wanted else None
    checker_finding = checked.finding
    return Row(
        name=bug.name,
        kind=bug.kind,
        planted=bug.line,
        checker=memory_corpus.verdict(checked),
        checker_caught=checked.caught,
        checker_line=(checker_finding.line or 0) if checker_finding else 0,
        viz=viz_verdict(bug.kind, [f.kind for f in viz.findings], viz.error),
        viz_caught=not viz.error and any(f.kind == bug.kind for f in viz.findings) and not bug.clean,
        viz_line=first.line if first else 0,
        viz_detail=str(first) if first else "",
        plain_s=plain_s,
        checker_s=checked.seconds,
        viz_s=viz.seconds,
    )


def _times(seconds: float, plain_s: float) -> str:
    return f"{seconds / plain_s:.1f}x" if plain_s > 0 else "-"


def table(rows: Sequence[Row]) -> str:
    """The entries side by side, one line each, columns aligned."""
    cells = [HEADINGS]
    for r in rows:
        cells.append(
            (
                r.name,
                r.kind or "clean",
                str(r.planted or "-"),
                r.checker,
                str(r.checker_line or "-"),
                r.viz,
                str(r.viz_line or "-"),
                f"{r.plain_s:.3f}",
                _times(r.checker_s, r.plain_s),
                _times(r.viz_s, r.plain_s),
                r.viz_detail,
            )
        )
    return aligned(cells)


def _names(rows: Sequence[Row]) -> str:
    return ", ".join(r.name for r in rows) or "none"


def totals(rows: Sequence[Row]) -> list[str]:
    """The counts under the table: bugs caught by each (by class and at the planted line), what
    each catches that the other does not, false alarms on the clean controls, entries triton-viz
    could not run, and the time of each against the plain interpreter."""
    bugs = [r for r in rows if not r.clean]
    clean = [r for r in rows if r.clean]
    text = [
        f"bugs caught: checker {sum(r.checker_caught for r in bugs)} of {len(bugs)}, "
        f"triton-viz {sum(r.viz_caught for r in bugs)} of {len(bugs)}"
    ]
    for kind in dict.fromkeys(r.kind for r in bugs):
        of_kind = [r for r in bugs if r.kind == kind]
        text.append(
            f"  {kind} ({len(of_kind)}): checker {sum(r.checker_caught for r in of_kind)}, "
            f"triton-viz {sum(r.viz_caught for r in of_kind)}"
        )
    at_line = lambda caught, line: sum(caught(r) and line(r) == r.planted for r in bugs if r.kind != "unwritten-output")
    text.append(
        "caught at the planted line (unwritten outputs have none): "
        f"checker {at_line(lambda r: r.checker_caught, lambda r: r.checker_line)}, "
        f"triton-viz {at_line(lambda r: r.viz_caught, lambda r: r.viz_line)}"
    )
    text.append(f"caught by triton-viz only: {_names([r for r in bugs if r.viz_caught and not r.checker_caught])}")
    text.append(f"caught by the checker only: {_names([r for r in bugs if r.checker_caught and not r.viz_caught])}")
    text.append(f"caught by neither: {_names([r for r in bugs if not r.checker_caught and not r.viz_caught])}")
    text.append(
        f"false alarms on the {len(clean)} clean controls: checker {sum(r.checker_alarm for r in clean)}"
        f" ({_names([r for r in clean if r.checker_alarm])}), "
        f"triton-viz {sum(r.viz_alarm for r in clean)} ({_names([r for r in clean if r.viz_alarm])})"
    )
    stopped = [r for r in rows if r.viz.startswith("ERROR")]
    text.append(f"entries triton-viz stopped on with an error: {_names(stopped)}")
    plain_s = sum(r.plain_s for r in rows)
    if plain_s > 0:
        checker_s, viz_s = sum(r.checker_s for r in rows), sum(r.viz_s for r in rows)
        text.append(
            f"time: plain interpreter {plain_s:.2f} s; checker {checker_s:.2f} s ({checker_s / plain_s:.2f} x); "
            f"triton-viz {viz_s:.2f} s ({viz_s / plain_s:.2f} x)"
        )
    return text


# -- running under triton-viz ----------------------------------------------------------------------


def _removed(name: str):
    def placeholder(*args, **kwargs):
        raise NotImplementedError(f"{name}: block pointers are not in Triton {triton.__version__}")

    return placeholder


def _fill_removed_builder_methods() -> list[str]:
    """triton-viz 3.0 looks up every builder method of Triton's interpreter that it wraps when it is
    imported, among them the block-pointer ones that Triton 3.9 removed (block pointers gave way to
    tensor descriptors), and fails with an AttributeError. Give the builder placeholders that raise
    for the missing ones, so that triton-viz imports; no kernel of the corpus uses block pointers.
    Returns the names filled in (empty on a Triton that still has them)."""
    from triton.runtime.interpreter import interpreter_builder

    missing = [name for name in BLOCK_POINTER_METHODS if not hasattr(interpreter_builder, name)]
    for name in missing:
        setattr(interpreter_builder, name, _removed(name))
    return missing


def _one_cache_policy() -> bool:
    """Whether this Triton's interpreter builder takes one ``cache_policy`` argument where
    triton-viz 3.0 passes a cache modifier and an eviction policy (as Triton 3.9's builder does)."""
    from triton.runtime.interpreter import InterpreterBuilder

    return "cache_policy" in inspect.signature(InterpreterBuilder.create_store).parameters


def _five_arguments(masked_load):
    """``masked_load`` (the builder's: pointers, mask, other, cache policy, volatile) called with
    the first five of the arguments it is given."""

    @functools.wraps(masked_load)
    def call(*args):
        return masked_load(*args[:5])

    return call


def _fit_concrete_loads() -> bool:
    """Where an address depends on loaded data, triton-viz performs that load with the builder's
    masked load, passing six arguments where Triton 3.9's takes five: have it call the builder's
    masked load through ``_five_arguments``. False if that was done already in this process."""
    from triton.runtime.interpreter import interpreter_builder
    from triton_viz.frontends.base import OPERATION_REGISTRY

    originals = OPERATION_REGISTRY["triton"].original_ops[interpreter_builder]
    if hasattr(originals["create_masked_load"], "__wrapped__"):
        return False
    originals["create_masked_load"] = _five_arguments(originals["create_masked_load"])
    return True


def unavailable() -> str:
    """Import triton-viz, fitted to this Triton where it needs to be (see ``ADAPTED``); why it cannot
    run here, "" if it can."""
    if importlib.util.find_spec("triton_viz") is None:
        return INSTALL
    filled = _fill_removed_builder_methods()
    try:
        import triton_viz  # noqa: F401
        from triton_viz.clients import Sanitizer  # noqa: F401
    except ImportError as error:
        if error.name in (None, "triton_viz"):
            return INSTALL
        return f"triton-viz cannot be imported ({error}): `pip install triton-viz` installs what it needs."
    if filled:
        ADAPTED.append(f"placeholders for the builder methods Triton {triton.__version__} removed: {', '.join(filled)}")
    if _one_cache_policy() and _fit_concrete_loads():
        _count_as_triton_viz()
        ADAPTED.append(
            "the sanitizer's unmasked loads and stores, and the loads it performs for data-dependent "
            "addresses, called with the arguments of Triton 3.9's builder (one cache policy)"
        )
    return ""


def _count_as_triton_viz() -> None:
    """Within a loop, triton-viz names the line of an access by the innermost frame outside its own
    code and Triton's: make it count the frames of this module's adapters (``_raw_load``,
    ``_raw_store``, ``_five_arguments``) as its own, so that it names the kernel's line."""
    from triton_viz.clients.sanitizer import report

    here = Path(__file__).as_posix()
    if here not in report._FRAMEWORK_PATHS:
        report._FRAMEWORK_PATHS.append(here)


def _raw_load(overrider):
    def load(ptr, cache_policy, is_volatile):  # Triton 3.9's create_load
        return overrider(ptr, cache_policy, None, is_volatile)

    return load


def _raw_store(overrider):
    def store(ptr, value, cache_policy):  # Triton 3.9's create_store
        return overrider(ptr, value, cache_policy, None)

    return store


def _sanitizer():
    """triton-viz's sanitizer, collecting its findings; on a Triton whose builder takes one cache
    policy, its overriders of unmasked loads and stores take that builder's arguments."""
    from triton_viz.clients import Sanitizer
    from triton_viz.core.data import RawLoad, RawStore

    sanitizer = Sanitizer(abort_on_error=False)
    if not _one_cache_policy():
        return sanitizer
    register = sanitizer.register_op_callback
    fitted = {RawLoad: _raw_load, RawStore: _raw_store}

    def register_fitted(op_type):
        callbacks = register(op_type)
        if op_type in fitted and callbacks.op_overrider is not None:
            callbacks.op_overrider = fitted[op_type](callbacks.op_overrider)
        return callbacks

    sanitizer.register_op_callback = register_fitted
    return sanitizer


def viz_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("triton-viz")
    except PackageNotFoundError:
        import triton_viz

        return getattr(triton_viz, "__version__", "unknown")


def _forget_checked_kernels() -> None:
    """Empty the set in which triton-viz remembers kernels it has checked (see the docstring)."""
    from triton_viz.clients.sanitizer import sanitizer

    remembered = getattr(sanitizer, "_fn_symbolic_cache_set", None)
    if remembered is not None:
        remembered.clear()


@contextmanager
def _traced(client) -> Iterator[None]:
    """Every kernel of the corpus traced by ``client`` while inside.

    Each tool runs as it would in a process of its own. Triton's interpreter keeps one cache of the
    kernels it has rewritten, and triton-viz rewrites loops its own way: inside, triton-viz has a
    cache of its own (``_VIZ_REWRITTEN``). On leaving, triton-viz leaves its references to the
    builder's methods on Triton's interpreter builder; the builder's attributes are put back as they
    were, with the corpus's kernels and the interpreter's cache, so that the plain and checked runs
    that follow see no trace of triton-viz."""
    import triton_viz
    from triton.runtime.interpreter import InterpretedFunction, interpreter_builder

    kernels = {
        name: value for name, value in vars(memory_corpus).items() if isinstance(value, triton.runtime.KernelInterface)
    }
    builder = dict(vars(interpreter_builder))
    rewritten = InterpretedFunction.rewritten_fn
    InterpretedFunction.rewritten_fn = _VIZ_REWRITTEN
    try:
        for name, kernel in kernels.items():
            setattr(memory_corpus, name, triton_viz.trace(client)(kernel))
        yield
    finally:
        for name, kernel in kernels.items():
            setattr(memory_corpus, name, kernel)
        InterpretedFunction.rewritten_fn = rewritten
        vars(interpreter_builder).clear()
        vars(interpreter_builder).update(builder)


def under_viz(bug: Bug) -> VizResult:
    """Run ``bug``'s launcher with its kernels under triton-viz's sanitizer; its records as findings."""
    problem = unavailable()  # imports triton-viz, fitted to this Triton, once per process
    if problem:
        raise RuntimeError(problem)
    torch.manual_seed(0)
    _forget_checked_kernels()
    sanitizer = _sanitizer()
    result = VizResult(bug)
    with _traced(sanitizer):
        start = time.perf_counter()
        try:
            bug.launch()
        except (Exception, SystemExit) as error:  # an entry triton-viz cannot run is a result too
            result.error = short_error(error)
        result.seconds = time.perf_counter() - start
    result.findings = [_from_record(record) for record in sanitizer.records]
    return result


def _view_gap_at_offset_0():
    base, out = torch.randn(8, 16), torch.zeros(8, 8)
    x = base[:, :8]  # as in wrong-stride-in-view-gap, but base is an allocation of its own
    memory_corpus.view_gap_kernel[(1,)](x, out, 8, 8, BLOCK_M=8, BLOCK_N=8)
    return {"out": out}


def _strided_view_at_offset_0():
    base, out = torch.randn(8, 16), torch.empty(8, 8)
    x = base[:, :8]
    memory_corpus.strided_copy_kernel[(1,)](x, out, x.stride(0), 8, BLOCK_M=8, BLOCK_N=8)
    return {"out": out}


# The corpus puts every tensor PAD elements into a larger block (memory_corpus._fresh), so its two
# column slices start at a storage offset above 0. triton-viz 3.0 bounds the rows of a strided view
# from its data pointer plus its storage offset, which counts the offset twice: these two entries
# repeat the corpus's pair on a fresh allocation (offset 0), where that does not arise.
AT_OFFSET_0 = [
    Bug(
        "wrong-stride-in-view-gap, offset 0",
        "out-of-bounds",
        memory_corpus.view_gap_kernel,
        _view_gap_at_offset_0,
        "wrong-stride-in-view-gap on a column slice of a fresh tensor",
        missed_by_checker=memory_corpus.named("wrong-stride-in-view-gap").missed_by_checker,
    ),
    Bug(
        "clean-strided-view, offset 0",
        "",
        memory_corpus.strided_copy_kernel,
        _strided_view_at_offset_0,
        "clean-strided-view on a column slice of a fresh tensor",
    ),
]


def compare(bug: Bug, repeat: int) -> Row:
    """``bug`` under the plain interpreter, the checker and triton-viz, each the fastest of ``repeat``."""
    memory_corpus.plain(bug)  # once untimed: the interpreter's first call of a kernel does extra work
    plain_s = min(memory_corpus.plain(bug)[0] for _ in range(repeat))
    checked = min((memory_corpus.checked(bug) for _ in range(repeat)), key=lambda r: r.seconds)
    viz = min((under_viz(bug) for _ in range(repeat)), key=lambda r: r.seconds)
    return row(checked, viz, plain_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.authoring.viz_compare",
        description="The memory-bug corpus under triton-viz's sanitizer and under the course's checker.",
    )
    parser.add_argument("--only", help="entry names, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each entry per tool (the fastest counts)")
    args = parser.parse_args(argv)
    problem = unavailable()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if device.is_cuda():
        print("both tools watch the interpreter: run this with GRADER_DEVICE=cpu", file=sys.stderr)
        return 2
    bugs = [memory_corpus.named(n.strip()) for n in args.only.split(",")] if args.only else BUGS
    repeat = max(args.repeat, 1)
    memory_corpus.checked(bugs[0])  # once untimed: the checker's first use imports torch._dynamo
    under_viz(bugs[0])  # and triton-viz's first run loads z3
    rows = []
    for bug in bugs:
        rows.append(compare(bug, repeat))
        print(f"  {bug.name}: checker {rows[-1].checker}; triton-viz {rows[-1].viz}", file=sys.stderr, flush=True)
    print(table(rows))
    print()
    print("\n".join(totals(rows)))
    if not args.only:
        print("\nThe corpus's two column slices again, on a fresh allocation (storage offset 0; see AT_OFFSET_0):")
        print(table([compare(bug, repeat) for bug in AT_OFFSET_0]))
    print(
        f"\ntriton-viz {viz_version()}, Triton {triton.__version__}, PyTorch {torch.__version__}, "
        f"{os.cpu_count()} CPU cores; fastest of {repeat} runs per entry and tool"
    )
    for change in ADAPTED:
        print(f"to run triton-viz on this Triton: {change}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
