"""The memory-traffic report against a GPU's own counters: what ``grader.core.traffic`` predicts
under the interpreter, set beside what Nsight Compute measures on an H100 or H200.

The report (``make check`` on a CPU, the optimization modules' ``TRAFFIC`` bars) counts the bytes a
call asks of global memory, the 32-byte sectors per warp-wide access and the warp-wide requests.
A GPU's caches, vector loads and its TMA engine all stand between that and the DRAM, so this tool
measures how far the prediction goes, on a list of variants: each module's reference, its slow
starting kernel (where the stub runs: the missing-elements stubs do not), every typical mistake a
GPU can run without faulting (``grader.authoring.mistakes.for_module``) and debugging/03's planted
performance bugs, each on one input shape of tens of MB.

    python -m grader.authoring.traffic_vs_hardware --list
    python -m grader.authoring.traffic_vs_hardware --predict pred.jsonl [--jobs N]   (CPU, interpreter)
    python -m grader.authoring.traffic_vs_hardware --measure meas.jsonl [--changed-only pred.jsonl]
                                                                                 (GPU, ncu on PATH)
    python -m grader.authoring.traffic_vs_hardware --compare pred.jsonl meas.jsonl [meas2.jsonl ...]
    python -m grader.authoring.traffic_vs_hardware --run DIR      (on a GPU machine: all three)

``--only TEXT`` (repeatable) keeps the variants whose names contain TEXT ("=NAME": exactly NAME).
Most typical mistakes change values, not traffic: ``--predict`` marks those whose predicted
traffic equals their reference's (``same_as_reference``), and ``--run`` (``--changed-only``)
measures the others, the references and the starting kernels only (``--all-mistakes``: all).

``--predict`` cannot run a shape of tens of MB under the interpreter (minutes a variant), so each
variant is predicted at one or two small shapes of the same structure (the same tiles, the same
row length) and scaled analytically; every output line says how (``scaling``):

- element-wise and row-wise work (a transpose, softmax, a sum, bias_act): every count grows with
  the number of elements, so it is multiplied by full elements / predicted elements;
- matmuls: predicted at (m, n, k) and (m, n, 2k); each count is a + b k for the m x n problem (the
  epilogue and the stores do not grow with K, the k-loop's loads do), extrapolated to the full K,
  then multiplied by (M N) / (m n). Exact while m and n are whole tiles, as they are here.

Sectors per request do not scale. What the scaling cannot know: an autotuner picks its first
config under the interpreter and its fastest on a GPU, so a tuned kernel's tiles may differ there.

What a GPU's counters see that the report does not, and the other way round: ncu's
``l1tex__t_*_op_ld`` counts loads through the LSU only, so a tile that Hopper's TMA engine
loads (optimization/05's descriptor path, 04's Hopper kernel) or that a pipelined ``tl.dot``
copies with ``cp.async`` shows few or no load sectors there (``--extra-metrics`` can add the
``..._op_ldgsts`` counters where the installed ncu has them); a lane that loads 16 bytes at once
puts 4 times the report's sectors (of fp32) into one request, so ``--predict`` also counts the
requests at the width the GPU issues (``VectorModel``: 16 bytes a lane where the block holds that
many elements a thread and the addresses are contiguous and aligned; the ``*_vector_*`` fields and
``lane_bytes``), and the summary compares sectors per request both ways and total sectors, which
vector width does not change; L2 hits leave DRAM bytes below the report's bytes (a matmul
re-reads its tiles from L2); and the report cannot see that one program walking a whole vector
(03's starting vector_sum) leaves all but one multiprocessor idle: same bytes, far slower.
So ``--predict`` also records the programs of the largest launch at the full shape (its grid,
evaluated without running a program) and the ``tl.dot`` FLOPs, and ``--compare`` ranks a roofline
of those counts and an H100's datasheet figures (``Roofline``: nothing fitted to measured times).

``--measure`` runs two passes of one driver (this file, ``--drive``) on the GPU: one times each
variant with ``triton.testing.do_bench``; one runs under a single ``ncu`` process, which profiles
only what lies between ``cudaProfilerStart`` and ``cudaProfilerStop`` (``--profile-from-start
off``): per variant, a marker kernel (``traffic_vs_hardware_marker``, its grid the variant's
number) and then one call, after an unprofiled warm-up call that compiles and autotunes. The
parser maps every row after a marker to that marker's variant, whatever other kernels (a fill of
torch.zeros) the call launched; only the module's own Triton kernels count towards the totals.
A variant that faults on the GPU loses the driver's CUDA context: the driver writes its line
(``fault``) and exits, and each pass starts a fresh driver on the variants after it. A variant
that loads or stores outside its tensors under the interpreter's bounds guard is marked
``out_of_bounds`` by ``--predict`` and left out of ``--changed-only``.

Element-wise shapes are chosen for their outputs to dwarf the 50 MiB L2: it writes back, so lines
stored near a kernel's end may still be dirty in it when the kernel ends (ncu flushes caches
before a kernel, not after), and at 64 MB outputs the DRAM writes fell 15-35 % short of the
stores. ``--compare`` judges reads and writes apart, names the variants where caches dominate
(matmuls, uncoalesced loads) and compares matmuls' DRAM bytes with the problem's minimum.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import functools
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "traffic_vs_hardware_marker"
METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "gpu__time_duration.sum",
)
# What a metric's value counts, by its name, in the measured JSON lines.
METRIC_FIELDS = {
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "load_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "store_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "load_requests",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "store_requests",
    "gpu__time_duration.sum": "ncu_time_ns",
}
# Units Nsight Compute prints (``--print-units auto`` scales with decimal prefixes; we ask for
# ``base``, but a CSV from another run may carry either), to bytes, nanoseconds or counts.
UNIT_SCALE = {
    "": 1.0,
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "kibyte": 1024.0,
    "mibyte": 1024.0**2,
    "gibyte": 1024.0**3,
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "ns": 1.0,
    "us": 1e3,
    "ms": 1e6,
    "s": 1e9,
    "sector": 1.0,
    "request": 1.0,
    "cycle": 1.0,
}
TOLERANCE = 0.10  # "within 10 %" of the measured DRAM bytes
# Why a typical mistake is left out: a read or write past a tensor that only the interpreter's
# memory checker survives. On a GPU it may fault, and a fault loses the CUDA context of the one
# process that measures every variant.
UNSAFE_ON_A_GPU = ("past the end", "past the row", "illegal address", "access past")
# Mistakes whose traffic does not grow with the problem's size the way --predict scales it, by
# the mistake's name: their predicted counts are not a prediction at the full shape.
UNSCALABLE = {
    "persistent loop steps by 1, not by NUM_SMS": (
        "program p computes tiles p, p + 1, ... to the last: the work grows with programs x tiles "
        "(the interpreter's program count, not the GPU's 132), not with M x N"
    ),
}
# The L2 cache of the GPUs measured (H100 SXM and H200: 50 MB). It writes back: lines a kernel
# stored may still sit in it, dirty, when the kernel ends, and ncu's cache control flushes caches
# before a kernel, not after, so the kernel's DRAM writes can fall short of its stores by this much.
L2_BYTES = 50 * 1024 * 1024


# ----------------------------------------------------------------------------------------------
# The variants
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One function of a module at one input shape: the shape a GPU measures, the smaller ones
    the interpreter predicts at, and how the counts scale between them."""

    module: str  # "optimization/01-tiling"
    key: str  # "transpose": names the family inside its module
    api: str
    spec_name: str  # the Spec's name in the module's test_kernel.py ("SPEC", "MATMUL")
    full: dict  # the case's params on a GPU
    points: tuple[dict, ...]  # params the interpreter predicts at
    dtype: str = "float32"
    scaling: str = "elements"  # "elements" or "matmul" (see the module's docstring)
    starting_points: tuple[dict, ...] = ()  # the starting kernel's own, where its tiles differ
    tiny: tuple[dict, ...] = ()  # the fewest elements that still run every path (the tests)
    # Which of the module's mistakes run on this family: "all", "planted" (debugging's planted bugs)
    # or "none" (a second dtype or layout, there for the reference and the starting kernel).
    mistakes: str = "all"

    def points_for(self, impl: str, tiny: bool = False) -> tuple[dict, ...]:
        if tiny and self.tiny:
            chosen = self.tiny
        elif impl == "starting" and self.starting_points:
            chosen = self.starting_points
        else:
            chosen = self.points
        return tuple({**self.extras, **point} for point in chosen)

    @property
    def extras(self) -> dict:
        """The case's params besides its size (a layout, a strided bias): every point has them too."""
        return {key: value for key, value in self.full.items() if key not in SIZE_KEYS}


SIZE_KEYS = ("shape", "mnk", "n")


def _mm(m: int, n: int, k: int) -> tuple[dict, dict]:
    return {"mnk": (m, n, k)}, {"mnk": (m, n, 2 * k)}


FAMILIES: tuple[Family, ...] = (
    Family("optimization/01-tiling", "transpose", "transpose", "SPEC", {"shape": (16384, 16384)},
           ({"shape": (256, 1024)},), tiny=({"shape": (64, 64)},)),
    Family("optimization/01-tiling", "matmul", "matmul", "MATMUL", {"mnk": (2048, 2048, 1024)}, _mm(256, 256, 128),
           "float16", "matmul", starting_points=_mm(16, 16, 64), tiny=_mm(4, 4, 64)),
    Family("optimization/02-pipelining", "matmul", "matmul", "SPEC", {"mnk": (4096, 4096, 4096)}, _mm(256, 512, 128),
           "float16", "matmul", tiny=_mm(64, 64, 64)),
    Family("optimization/03-shared-memory", "softmax-rows", "softmax", "SPEC", {"shape": (65536, 4096)},
           ({"shape": (16, 4096)},), tiny=({"shape": (2, 512)},)),
    Family("optimization/03-shared-memory", "softmax-long", "softmax", "SPEC", {"shape": (1024, 262144)},
           ({"shape": (2, 262144)},), tiny=({"shape": (1, 8200)},)),
    Family("optimization/03-shared-memory", "vector_sum", "vector_sum", "VECTOR_SUM", {"n": 1 << 25},
           ({"n": 1 << 16},), tiny=({"n": 8192},)),
    Family("optimization/04-warp-specialization", "matmul_bias_gelu", "matmul_bias_gelu", "SPEC",
           {"mnk": (8192, 8192, 512)}, _mm(1024, 512, 128), "float16", "matmul", tiny=_mm(64, 64, 64)),
    Family("optimization/05-advanced-optimizations", "matmul", "matmul", "SPEC", {"mnk": (4096, 4096, 4096)},
           _mm(1024, 512, 128), "float16", "matmul", tiny=_mm(64, 64, 64)),
    Family("missing-elements/01-vector-add", "add", "add", "SPEC", {"shape": (1 << 28,)},
           ({"shape": (1 << 14,)},), tiny=({"shape": (2048,)},)),
    Family("missing-elements/02-matrix-mul", "matmul", "matmul", "SPEC", {"mnk": (4096, 4096, 4096)},
           _mm(256, 512, 128), "float16", "matmul", tiny=_mm(64, 64, 64)),
    Family("missing-elements/03-softmax", "softmax", "softmax", "SPEC", {"shape": (65536, 4096)},
           ({"shape": (16, 4096)},), tiny=({"shape": (2, 512)},)),
    Family("debugging/03-performance-profiling", "bias_act", "bias_act", "SPEC", {"shape": (32768, 8192)},
           ({"shape": (64, 512)},), tiny=({"shape": (32, 256)},)),
    # Other dtypes and layouts: the sectors per request change with the element's size and with
    # which axis is contiguous, and the mistakes that take a stride for granted change the traffic.
    Family("optimization/01-tiling", "transpose-fp16", "transpose", "SPEC", {"shape": (16384, 16384)},
           ({"shape": (256, 1024)},), "float16", tiny=({"shape": (64, 64)},), mistakes="none"),
    Family("optimization/01-tiling", "transpose-x-transposed", "transpose", "SPEC",
           {"shape": (16384, 16384), "layout": "transposed"}, ({"shape": (256, 1024)},), tiny=({"shape": (64, 64)},),
           mistakes="none"),
    Family("optimization/01-tiling", "transpose-x-sliced", "transpose", "SPEC",
           {"shape": (16384, 16384), "layout": "sliced"}, ({"shape": (256, 1024)},), tiny=({"shape": (64, 64)},)),
    Family("optimization/01-tiling", "matmul-b-transposed", "matmul", "MATMUL",
           {"mnk": (2048, 2048, 1024), "layouts": ("row-major", "transposed")}, _mm(256, 256, 128), "float16",
           "matmul", starting_points=_mm(16, 16, 64), tiny=_mm(4, 4, 64)),
    Family("optimization/02-pipelining", "matmul-b-transposed", "matmul", "SPEC",
           {"mnk": (4096, 4096, 4096), "layouts": ("row-major", "transposed")}, _mm(256, 512, 128), "float16",
           "matmul", tiny=_mm(64, 64, 64)),
    Family("optimization/03-shared-memory", "softmax-x-transposed", "softmax", "SPEC",
           {"shape": (65536, 4096), "layout": "transposed"}, ({"shape": (16, 4096)},), tiny=({"shape": (2, 512)},),
           mistakes="none"),
    Family("optimization/03-shared-memory", "vector_sum-strided", "vector_sum", "VECTOR_SUM",
           {"n": 1 << 25, "layout": "strided"}, ({"n": 1 << 16},), tiny=({"n": 8192},)),
    Family("optimization/04-warp-specialization", "matmul_bias_gelu-strided-bias", "matmul_bias_gelu", "SPEC",
           {"mnk": (8192, 8192, 512), "strided_bias": True}, _mm(1024, 512, 128), "float16", "matmul",
           tiny=_mm(64, 64, 64)),
    Family("optimization/05-advanced-optimizations", "matmul-b-transposed", "matmul", "SPEC",
           {"mnk": (4096, 4096, 4096), "layouts": ("row-major", "transposed")}, _mm(1024, 512, 128), "float16",
           "matmul", tiny=_mm(64, 64, 64)),
    Family("missing-elements/01-vector-add", "add-fp16", "add", "SPEC", {"shape": (1 << 28,)},
           ({"shape": (1 << 14,)},), "float16", tiny=({"shape": (2048,)},), mistakes="none"),
    Family("missing-elements/01-vector-add", "add-strided", "add", "SPEC", {"shape": (1 << 28,), "layout": "strided"},
           ({"shape": (1 << 14,)},), tiny=({"shape": (2048,)},)),
    Family("missing-elements/02-matrix-mul", "matmul-b-transposed", "matmul", "SPEC",
           {"mnk": (4096, 4096, 4096), "layouts": ("row-major", "transposed")}, _mm(256, 512, 128), "float16",
           "matmul", tiny=_mm(64, 64, 64)),
    Family("missing-elements/03-softmax", "softmax-fp16", "softmax", "SPEC", {"shape": (65536, 4096)},
           ({"shape": (16, 4096)},), "float16", tiny=({"shape": (2, 512)},), mistakes="none"),
    Family("missing-elements/03-softmax", "softmax-row-strided", "softmax", "SPEC",
           {"shape": (65536, 4096), "layout": "row-strided"}, ({"shape": (16, 4096)},), tiny=({"shape": (2, 512)},)),
    Family("missing-elements/03-softmax", "softmax-column-strided", "softmax", "SPEC",
           {"shape": (65536, 4096), "layout": "column-strided"}, ({"shape": (16, 4096)},),
           tiny=({"shape": (2, 512)},), mistakes="none"),
    Family("debugging/03-performance-profiling", "bias_act-fp16", "bias_act", "SPEC", {"shape": (65536, 8192)},
           ({"shape": (64, 512)},), "float16", tiny=({"shape": (32, 256)},), mistakes="planted"),
    Family("debugging/03-performance-profiling", "bias_act-x-transposed", "bias_act", "SPEC",
           {"shape": (32768, 8192), "layout": "transposed"}, ({"shape": (64, 512)},), tiny=({"shape": (32, 256)},),
           mistakes="planted"),
    Family("debugging/03-performance-profiling", "bias_act-strided-bias", "bias_act", "SPEC",
           {"shape": (32768, 8192), "bias": "strided"}, ({"shape": (64, 512)},), tiny=({"shape": (32, 256)},)),
)  # fmt: skip
# Modules whose starting kernel (the learner's stub) runs: elsewhere its TODOs leave it incomplete.
STARTING_RUNS = frozenset(
    {
        "optimization/01-tiling",
        "optimization/02-pipelining",
        "optimization/03-shared-memory",
        "optimization/04-warp-specialization",
        "optimization/05-advanced-optimizations",
        "debugging/03-performance-profiling",
    }
)


@dataclass(frozen=True)
class Variant:
    name: str  # "optimization/01-tiling/transpose/reference"
    family: Family
    impl: str  # "reference", "starting" or "mistake"
    mistake: str = ""  # the mistake's name, for impl "mistake"
    note: str = ""

    @property
    def module(self) -> str:
        return self.family.module

    @property
    def group(self) -> str:
        """The family's name: the variants compared with each other."""
        return f"{self.family.module}/{self.family.key}"


def _slug(text: str, limit: int = 60) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].rstrip("-")


def _module(module_id: str):
    from grader.core.catalog import find_module

    return find_module(module_id)


def safe_on_a_gpu(mistake) -> bool:
    """Whether a GPU can run the mistake without faulting (planted bugs always can)."""
    reason = mistake.interpreter_only.lower()
    return not any(words in reason for words in UNSAFE_ON_A_GPU) or mistake.name.startswith("planted bug")


def mistake_apis(source: str, before: str, apis: tuple[str, ...]) -> tuple[str, ...]:
    """The module's functions (``apis``) whose code reaches the text ``before``: the top-level
    function that holds it, and every function calling it, directly or through others."""
    tree = ast.parse(source)
    offset = source.find(before)
    line = source.count("\n", 0, offset) + 1 if offset >= 0 else 0
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    holder = next(
        (name for name, node in functions.items() if node.lineno <= line <= (node.end_lineno or node.lineno)), None
    )
    if holder is None:  # at module level (a constant, a decorator's configs): every function may use it
        return apis
    uses = {
        name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in functions} - {name}
        for name, node in functions.items()
    }

    @functools.cache
    def reaches(name: str, seen: frozenset = frozenset()) -> bool:
        if name == holder:
            return True
        return any(reaches(used, seen | {name}) for used in uses.get(name, ()) if used not in seen)

    found = tuple(api for api in apis if api in functions and reaches(api))
    return found or apis


def variants() -> list[Variant]:
    """Every variant to measure, in a stable order: per family the reference, the starting kernel,
    then the module's mistakes that reach the family's function and a GPU can run."""
    from grader.authoring import mistakes

    listed: list[Variant] = []
    by_module: dict[str, list] = {}
    for family in FAMILIES:
        module = _module(family.module)
        base = f"{family.module}/{family.key}"
        listed.append(Variant(f"{base}/reference", family, "reference"))
        if family.module in STARTING_RUNS:
            listed.append(Variant(f"{base}/starting", family, "starting"))
        if family.module not in by_module:
            by_module[family.module] = mistakes.for_module(module)
        source = (module.solution_dir / "kernel.py").read_text()
        apis = tuple(dict.fromkeys(f.api for f in FAMILIES if f.module == family.module))
        seen: set[str] = set()
        for mistake in by_module[family.module]:
            planted_bug = mistake.name.startswith("planted bug")
            if family.mistakes == "none" or (family.mistakes == "planted" and not planted_bug):
                continue
            if not safe_on_a_gpu(mistake):
                continue
            if len(apis) > 1 and family.api not in mistake_apis(source, mistake.before, apis):
                continue
            slug = _slug(mistake.name)
            while slug in seen:
                slug += "-2"
            seen.add(slug)
            listed.append(Variant(f"{base}/mistake:{slug}", family, "mistake", mistake.name))
    return listed


def select(names: list[str] | None, listed: list[Variant] | None = None) -> list[Variant]:
    """The variants whose names contain any of ``names`` (all when none is given); a name that
    starts with "=" must match whole."""
    listed = variants() if listed is None else listed
    if not names:
        return listed
    return [v for v in listed if any(v.name == part[1:] if part.startswith("=") else part in v.name for part in names)]


def worth_measuring(predicted: list[dict]) -> list[str]:
    """Exact names ("=name") of the predicted variants a GPU run should measure: every reference
    and starting kernel, and the mistakes whose predicted traffic differs from their reference's,
    less those that load or store outside their tensors under the interpreter (``out_of_bounds``:
    on a GPU they may fault, and what they read there is no prediction's business)."""
    return [
        f"={row['variant']}"
        for row in predicted
        if "error" not in row and not row.get("same_as_reference") and not row.get("out_of_bounds")
    ]


# ----------------------------------------------------------------------------------------------
# Loading a variant's kernel and its inputs
# ----------------------------------------------------------------------------------------------


@functools.cache
def _spec(module_id: str, spec_name: str):
    from grader.core import cases

    return cases.public_spec(module_id, spec_name)


def case_of(family: Family, params: dict):
    import torch

    from grader.core.cases import Case

    return Case(dict(params), getattr(torch, family.dtype), spec=_spec(family.module, family.spec_name))


def load(variant: Variant, folder: Path):
    """The variant's kernel, loaded (a planted mistake is written into ``folder`` first)."""
    from grader.authoring import mistakes
    from grader.core.loading import load_kernel

    module = _module(variant.module)
    if variant.impl == "reference":
        return load_kernel(module, "solutions")
    if variant.impl == "starting":
        return load_kernel(module, "learner")
    mistake = next(m for m in mistakes.for_module(module) if m.name == variant.mistake)
    planted = Path(folder) / _slug(variant.name, 120) / "kernel.py"
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(mistake.apply((module.solution_dir / "kernel.py").read_text()))
    return load_kernel(module, planted)


def _jit_names(kernel) -> list[str]:
    """The names of the Triton kernels a loaded kernel.py defines (through any autotuner)."""
    names = []
    for value in vars(kernel.namespace).values():
        inner = value
        for _ in range(4):  # Autotuner -> Heuristics -> JITFunction
            if type(inner).__name__ in ("JITFunction", "InterpretedFunction"):
                break
            inner = getattr(inner, "fn", None)
        fn = getattr(inner, "fn", None) if inner is not None else None
        if type(inner).__name__ in ("JITFunction", "InterpretedFunction") and fn is not None:
            names.append(fn.__name__)
    return sorted(set(names))


# ----------------------------------------------------------------------------------------------
# --predict: the traffic report under the interpreter, scaled to the full shape
# ----------------------------------------------------------------------------------------------

COUNTS = (
    "read_bytes",
    "write_bytes",
    "load_sectors",
    "store_sectors",
    "load_requests",
    "store_requests",
    "load_ideal_sectors",
    "store_ideal_sectors",
    "atomic_requests",
)


def counts_of(traffic) -> dict[str, float]:
    """The report's totals for one call, named as in the predicted JSON lines. Stores and atomics
    are both writes; the sectors and requests of stores are plain stores only, as ncu's op_st."""
    return {
        "read_bytes": traffic.bytes_loaded,
        "write_bytes": traffic.bytes_stored,
        "load_sectors": traffic.total("load", "sectors"),
        "store_sectors": traffic.total("store", "sectors"),
        "load_requests": traffic.total("load", "warp_accesses"),
        "store_requests": traffic.total("store", "warp_accesses"),
        "load_ideal_sectors": traffic.total("load", "ideal_sectors"),
        "store_ideal_sectors": traffic.total("store", "ideal_sectors"),
        "atomic_requests": traffic.total("atomic", "warp_accesses"),
    }


def _elements(params: dict) -> int:
    for key in ("shape", "mnk"):
        if key in params:
            return math.prod(params[key])
    return int(params["n"])


def scale_counts(family: Family, points: tuple[dict, ...], measured: list[dict]) -> tuple[dict, str]:
    """The counts at ``family.full`` from those at ``points``, and how they were scaled."""
    optional = VECTOR_COUNTS + DOT_COUNTS
    names = COUNTS + tuple(name for name in optional if all(name in counts for counts in measured))
    if family.scaling == "matmul":
        (m, n, k1), (_, _, k2) = points[0]["mnk"], points[1]["mnk"]
        M, N, K = family.full["mnk"]
        factor = (M * N) / (m * n)
        out = {
            name: factor * (measured[0][name] + (measured[1][name] - measured[0][name]) * (K - k1) / (k2 - k1))
            for name in names
        }
        how = f"predicted at m,n,k = {m},{n},{k1} and k = {k2}; linear in K to {K}, then x {factor:g} for M x N"
        return out, how
    factor = _elements(family.full) / _elements(points[0])
    how = f"predicted at {points[0]}; every count x {factor:g} (the elements' ratio)"
    return {name: measured[0][name] * factor for name in names}, how


def per_request(sectors: float, requests: float) -> float:
    return sectors / requests if requests else 0.0


# What the GPU issues: Triton's compiler gives each lane up to 16 contiguous bytes of a block in one
# instruction where the addresses are contiguous and aligned, so one warp-wide request covers up to
# 32 x 16 bytes. The report counts one element a lane; this model counts the requests as issued.
LANE_BYTES = 16  # the widest global access one lane makes in one instruction (128 bits)
DEFAULT_WARPS = 4  # Triton's num_warps when a launch names none
VECTOR_COUNTS = ("load_vector_requests", "store_vector_requests", "load_vector_sectors", "store_vector_sectors")


@dataclass
class VectorLine:
    """One ``tl.load`` / ``tl.store`` line under the vector-width model: the widest vector (in
    elements a lane) every access of the line allows, why no wider, and the requests and sectors
    its accesses would take at each width."""

    kind: str
    itemsize: int
    width: int  # elements a lane moves in one instruction
    limit: str  # what bounds ``width``: "16 bytes", "elements per thread", "contiguity or alignment", ...
    requests: dict = field(default_factory=dict)  # width -> warp-wide requests
    sectors: dict = field(default_factory=dict)  # width -> sectors

    @property
    def lane_bytes(self) -> int:
        return self.width * self.itemsize


def vector_width(addresses, active, itemsize: int, warps: int) -> tuple[int, str]:
    """The elements a lane loads or stores in one instruction, as Triton's compiler lays a block
    out, and what bounds it. The compiler gives each lane min(16 bytes / element size, the block's
    elements / (num_warps x 32)) elements, fewer where the addresses along the contiguous axis are
    not contiguous and aligned to the vector's size, or where a vector's lanes are not all masked
    alike. Here that is read from the addresses of one access (the compiler proves it from
    the arguments' divisibility: a stride not a multiple of 16 elements defeats it on a GPU even
    where the addresses happen to be aligned)."""
    import numpy as np

    from grader.core.traffic import WARP, lane_order

    addresses = np.atleast_1d(addresses)
    active = np.broadcast_to(np.atleast_1d(active), addresses.shape)
    axis = lane_order(addresses, itemsize)
    rows = np.moveaxis(addresses, axis, -1).astype(np.int64)
    on = np.moveaxis(active, axis, -1)
    along = rows.shape[-1]
    per_thread = max(addresses.size // (max(warps, 1) * WARP), 1)
    cap, limit = max(LANE_BYTES // itemsize, 1), "16 bytes"
    if per_thread < cap:
        cap, limit = per_thread, "elements per thread"
    if along < cap:
        cap, limit = along, "the block's contiguous extent"
    width = cap
    while width > 1:
        if along % width == 0:
            group = rows.reshape(-1, along // width, width)
            used = on.reshape(group.shape)
            some = used.any(axis=-1)
            alike = (used == used[..., :1]).all(axis=-1)
            contiguous = (np.diff(group, axis=-1) == itemsize).all(axis=-1)
            aligned = group[..., 0] % (width * itemsize) == 0
            if np.all(~some | (alike & contiguous & aligned)):
                break
        width //= 2
    return width, limit if width == cap else "contiguity or alignment"


def vector_requests(addresses, active, itemsize: int, width: int) -> tuple[int, int]:
    """(warp-wide requests, sectors) of one access when each lane moves ``width`` elements: a
    request is 32 x ``width`` consecutive elements along the contiguous axis (the block flattened
    with that axis last), counted where any of its lanes is active."""
    import numpy as np

    from grader.core.traffic import SECTOR, WARP, requests_of

    lanes, on = requests_of(addresses, active, itemsize, WARP * width)
    if not lanes.size:
        return 0, 0
    unused = np.iinfo(np.uint64).max
    first, last = lanes // SECTOR, (lanes + itemsize - 1) // SECTOR
    sectors = np.concatenate([np.where(on, first, unused), np.where(on, last, unused)], axis=1)
    sectors.sort(axis=1)
    distinct = (np.diff(sectors, axis=1) != 0) & (sectors[:, 1:] != unused)
    return int(lanes.shape[0]), int(distinct.sum() + np.count_nonzero(sectors[:, 0] != unused))


@dataclass
class VectorModel:
    """Listens to the interpreter's accesses (``grader.core.instrument``) and launches
    (``num_warps``, through ``grader.core.gpu_compile``'s seam) and counts the requests of each
    load and store line at the width the GPU would issue. Atomics are left out, as ncu's op_ld
    and op_st leave them out."""

    lines: dict = field(default_factory=dict)  # (kind, file, line, launch) -> VectorLine
    warps: int = DEFAULT_WARPS  # the launch under way
    # What the compiler specialises the launch under way on (``specialization``): a line compiled
    # twice (a stride of 1 in one launch, not in the next) may get a width in each.
    launch: tuple = ()

    def add(self, access) -> None:
        from grader.core.traffic import WARP

        if access.kind not in ("load", "store") or not access.active.any():
            return
        width, limit = vector_width(access.addresses, access.active, access.itemsize, self.warps)
        key = (access.kind, access.file, access.line, self.launch)
        line = self.lines.get(key)
        if line is None:
            line = self.lines[key] = VectorLine(access.kind, access.itemsize, width, limit)
        elif width < line.width:  # the compiler picks one width for every access of the line
            line.width, line.limit = width, limit
        size, candidate = max(access.addresses.size, 1), 1
        while candidate <= line.width:  # every width the line may still settle on
            requests, sectors = vector_requests(access.addresses, access.active, access.itemsize, candidate)
            # A block smaller than the launch's lanes is held by several warps at once, and each
            # of them loads it (a store keeps one copy: the compiler masks the others off).
            copies = max(1, WARP * self.warps * candidate // max(size, WARP * candidate))
            copies = copies if access.kind == "load" else 1
            line.requests[candidate] = line.requests.get(candidate, 0) + copies * requests
            line.sectors[candidate] = line.sectors.get(candidate, 0) + copies * sectors
            candidate *= 2

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(VECTOR_COUNTS, 0)
        for line in self.lines.values():
            out[f"{line.kind}_vector_requests"] += line.requests[line.width]
            out[f"{line.kind}_vector_sectors"] += line.sectors[line.width]
        return out

    def widths(self) -> dict[str, list]:
        """Per kind, each line's bytes a lane and what bounds them: [[16, "16 bytes"], ...]."""
        out: dict[str, list] = {"load": [], "store": []}
        for (kind, *_), line in sorted(self.lines.items(), key=lambda item: (item[0][0], item[0][2])):
            out[kind].append([line.lane_bytes, line.limit])
        return out


def specialization(value):
    """What Triton's compiler knows of a launch argument: an integer's being 1 or a multiple of
    16, a tensor's address being a multiple of 16 bytes, a constant's value."""
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        return 1 if value == 1 else 16 if value % 16 == 0 else 0
    pointer = getattr(value, "data_ptr", None)
    if callable(pointer):
        return ("pointer", pointer() % 16 == 0)
    return type(value).__name__


@contextlib.contextmanager
def vector_model():
    """``with vector_model() as model:`` around calls under the interpreter: ``model.counts()``."""
    from grader.core.gpu_compile import LaunchRecorder
    from grader.core.instrument import AccessRecorder

    model = VectorModel()

    class Warps(LaunchRecorder):
        def heard(self, interpreted, args: tuple, kwargs: dict) -> None:
            model.warps = int(kwargs.get("num_warps") or DEFAULT_WARPS)
            values = (*args, *(kwargs[name] for name in sorted(kwargs)))
            model.launch = (getattr(interpreted, "__name__", ""), *(specialization(value) for value in values))

    with Warps(), AccessRecorder(on_access=model.add):
        yield model


# The work of ``tl.dot``, by the units that do it on an H100: 16-bit (and 8-bit) operands on the
# tensor cores, 32-bit operands on them as TF32 (Triton's default input precision) or on the CUDA
# cores ("ieee"). Counted per call as 2 x M x N x K (one multiply and one add per term).
DOT_COUNTS = ("dot_flops", "dot_flops_tf32", "dot_flops_ieee")


@contextlib.contextmanager
def dot_counter():
    """``with dot_counter() as flops:`` around calls under the interpreter: ``flops`` holds the
    floating-point operations of every ``tl.dot``, by ``DOT_COUNTS``."""
    from triton.runtime.interpreter import InterpreterBuilder

    flops = dict.fromkeys(DOT_COUNTS, 0)
    original = vars(InterpreterBuilder)["create_dot"]

    def create_dot(builder, a, b, d, input_precision, *rest, **kwargs):
        *batch, m, k = a.data.shape
        work = 2 * math.prod(batch) * m * k * b.data.shape[-1]
        if max(a.dtype.primitive_bitwidth, b.dtype.primitive_bitwidth) <= 16:
            flops["dot_flops"] += work
        elif "ieee" in str(input_precision).lower():
            flops["dot_flops_ieee"] += work
        else:
            flops["dot_flops_tf32"] += work
        return original(builder, a, b, d, input_precision, *rest, **kwargs)

    InterpreterBuilder.create_dot = create_dot
    try:
        yield flops
    finally:
        InterpreterBuilder.create_dot = original


GPU_SMS = 132  # multiprocessors of an H100 SXM


def launched_programs(kernel, spec, case) -> int:
    """The most programs any one launch of a call at ``case`` starts (the product of its grid),
    found without running a program: the interpreter's launches only evaluate their grids. A
    kernel.py that sizes its grid by the multiprocessors it pretends to have under the
    interpreter (``INTERPRETER_SMS``) is told the GPU's count."""
    import inspect

    from triton.runtime.interpreter import GridExecutor

    from grader.core.cases import spec_for
    from grader.core.checks import build_inputs
    from grader.core.protocols import timed as timed_call

    spec = spec_for(case, spec)
    args, kwargs = build_inputs(spec, case)
    fn = timed_call(spec.protocol, kernel.api(spec.api), spec.api)
    grids: list[int] = []
    original = vars(GridExecutor)["__call__"]

    def grid_only(executor, *launch_args, **launch_kwargs):
        names = inspect.getfullargspec(executor.fn)
        launch_kwargs = {k: v for k, v in launch_kwargs.items() if k in names.args or k in names.kwonlyargs}
        bound = inspect.getcallargs(executor.fn, *launch_args, **launch_kwargs)
        grid = executor.grid(bound) if callable(executor.grid) else executor.grid
        grids.append(math.prod(int(size) for size in grid))

    namespace = kernel.namespace
    pretended = getattr(namespace, "INTERPRETER_SMS", None)
    GridExecutor.__call__ = grid_only
    try:
        if pretended is not None:
            namespace.INTERPRETER_SMS = GPU_SMS
        fn(*args, **kwargs)
    finally:
        GridExecutor.__call__ = original
        if pretended is not None:
            namespace.INTERPRETER_SMS = pretended
    return max(grids, default=0)


def doubled(family: Family, params: dict) -> dict:
    """``params`` with twice the work that the program count may follow: twice the rows (the
    first axis), twice n, or twice a matmul's m."""
    out = dict(params)
    if "mnk" in out:
        m, n, k = out["mnk"]
        out["mnk"] = (2 * m, n, k)
    elif "shape" in out:
        out["shape"] = (2 * out["shape"][0], *out["shape"][1:])
    else:
        out["n"] = 2 * int(out["n"])
    return out


def _work(family: Family, params: dict) -> int:
    """What a launch's program count may grow with: the output's m x n for a matmul, else the elements."""
    return math.prod(params["mnk"][:2]) if family.scaling == "matmul" else _elements(params)


def programs_at_full(kernel, spec, family: Family, point: dict) -> dict:
    """The most programs one launch starts at ``family.full``. A matmul's operands are small enough
    to build at the full shape, so its grid is evaluated there; an element-wise family's (a GB or
    more) are not: its grid is evaluated at ``point`` and at twice its work and extrapolated on the
    straight line through the two, so a grid that grows with the work grows, and a fixed grid (one
    program walking a vector) stays as it is."""
    first = launched_programs(kernel, spec, case_of(family, point))
    if family.scaling == "matmul":
        full = launched_programs(kernel, spec, case_of(family, {**point, **family.full}))
        return {"at_prediction": first, "at_full_shape": full, "how": "launched at the full shape"}
    second = doubled(family, point)
    twice = launched_programs(kernel, spec, case_of(family, second))
    w1, w2, wf = _work(family, point), _work(family, second), _work(family, {**point, **family.full})
    full = max(1, round(first + (twice - first) * (wf - w1) / (w2 - w1)))
    how = f"{first} at {point}, {twice} at twice the work: extrapolated"
    return {"at_prediction": first, "at_full_shape": full, "how": how}


def predict(variant: Variant, folder: Path, tiny: bool = False) -> dict:
    """One JSON line for ``variant``: the report's counts at the full shape (see ``scale_counts``)."""
    from grader.core import traffic

    started = time.monotonic()
    family = variant.family
    row: dict = {
        "variant": variant.name,
        "group": variant.group,
        "module": variant.module,
        "impl": variant.impl,
        "mistake": variant.mistake,
        "api": family.api,
        "dtype": family.dtype,
        "shape": family.full,
    }
    points = family.points_for(variant.impl, tiny)
    try:
        kernel = load(variant, folder)
        spec = _spec(family.module, family.spec_name)
        measured, kernels, programs, widths = [], set(), 0, {}
        for params in points:
            with vector_model() as model, dot_counter() as flops:
                result = traffic.traffic_of(kernel, spec, case_of(family, params))
            measured.append({**counts_of(result), **model.counts(), **flops})
            widths = model.widths()
            kernels |= {name for name, _ in result.programs}
            programs = max(programs, result.busiest_launch)
        full, how = scale_counts(family, points, measured)
        outside = bounds_fault(kernel, spec, case_of(family, points[0]))
        try:
            launched = programs_at_full(kernel, spec, family, points[0])
        except Exception as error:  # the row keeps its counts; the roofline leaves it out
            launched = f"{type(error).__name__}: {error}"[:300]
    except Exception as error:  # a mistake the interpreter refuses still gets its line
        row.update(error=f"{type(error).__name__}: {error}"[:500], seconds=round(time.monotonic() - started, 2))
        return row
    minimum = spec.bytes_moved(case_of(family, family.full)) if spec.bytes_moved else None
    row.update(
        kernels=sorted(kernels),
        predicted_at=list(points),
        scaling=how + (" (tiny shapes: a test of the tool, not a prediction)" if tiny else ""),
        **{name: round(value) for name, value in full.items()},
        minimum_bytes=minimum,
        load_sectors_per_request=round(per_request(full["load_sectors"], full["load_requests"]), 4),
        store_sectors_per_request=round(per_request(full["store_sectors"], full["store_requests"]), 4),
        load_ideal_per_request=round(per_request(full["load_ideal_sectors"], full["load_requests"]), 4),
        store_ideal_per_request=round(per_request(full["store_ideal_sectors"], full["store_requests"]), 4),
        load_vector_sectors_per_request=round(
            per_request(full["load_vector_sectors"], full["load_vector_requests"]), 4
        ),
        store_vector_sectors_per_request=round(
            per_request(full["store_vector_sectors"], full["store_vector_requests"]), 4
        ),
        lane_bytes=widths,
        programs_at_prediction=programs,
        seconds=round(time.monotonic() - started, 2),
    )
    if isinstance(launched, dict):
        row["programs_launched"] = launched
    else:
        row["programs_launched_error"] = launched
    if outside:
        row["out_of_bounds"] = outside
    unscalable = UNSCALABLE.get(variant.mistake)
    if unscalable:
        row["unscalable"] = unscalable
    return row


def bounds_fault(kernel, spec, case) -> str | None:
    """What the interpreter's bounds guard refuses in one call at ``case`` (a load or store
    outside every tensor the launch was given), or None. On a GPU such an access reads or
    writes whatever lies there, or faults and loses the process's CUDA context."""
    from grader.core import device, memcheck
    from grader.core.cases import spec_for
    from grader.core.checks import build_inputs
    from grader.core.protocols import timed as timed_call

    if device.is_cuda():
        return None
    spec = spec_for(case, spec)
    args, kwargs = build_inputs(spec, case)
    fn = timed_call(spec.protocol, kernel.api(spec.api), spec.api)
    guard = memcheck.BoundsGuard().install()
    try:
        guard.call(fn, args, kwargs)(*args, **kwargs)
    except Exception as error:  # the guard's MemoryFault, or what the refused access led to
        fault = guard.take_fault()
        if fault is not None:
            return str(fault)
        return str(error) if isinstance(error, memcheck.MemoryFault) else None
    finally:
        guard.uninstall()
    fault = guard.take_fault()
    return str(fault) if fault is not None else None


def mark_same_as_reference(rows: list[dict]) -> None:
    """Set ``same_as_reference`` on each mistake's row: whether its traffic equals its family's
    reference (within 0.5 %), so that a summary can leave out mistakes that change nothing."""
    references = {row["group"]: row for row in rows if row.get("impl") == "reference" and "error" not in row}
    for row in rows:
        reference = references.get(row.get("group"))
        if row.get("impl") != "mistake" or reference is None or "error" in row:
            continue
        row["same_as_reference"] = all(
            abs(row[name] - reference[name]) <= 0.005 * max(abs(reference[name]), 1)
            for name in ("read_bytes", "write_bytes", "load_sectors", "store_sectors")
        )


def _predict_named(name: str, tiny: bool) -> dict:
    """``predict`` for the variant called ``name``, in a worker process of ``run_predict``."""
    from grader.core import device

    device.select()
    with tempfile.TemporaryDirectory(prefix="traffic-vs-hardware-") as folder:
        return predict(select([f"={name}"], _listed())[0], Path(folder), tiny)


@functools.cache
def _listed() -> list[Variant]:
    return variants()


def run_predict(out: Path, names: list[str] | None = None, tiny: bool = False, jobs: int = 1, echo=print) -> list[dict]:
    """Predict every chosen variant (``jobs`` processes side by side) and write the JSON lines."""
    from grader.core import device

    if device.is_cuda():
        raise SystemExit("--predict runs the kernels under the interpreter: set GRADER_DEVICE=cpu")
    chosen = select(names)
    rows = []

    def report(number: int, row: dict) -> None:
        status = row.get("error") or f"{_mb(row['read_bytes'] + row['write_bytes'])} predicted"
        echo(f"[{number}/{len(chosen)}] {row['variant']}: {status} ({row['seconds']} s)")

    if jobs > 1 and len(chosen) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [pool.submit(_predict_named, variant.name, tiny) for variant in chosen]
            for number, future in enumerate(futures, start=1):
                rows.append(future.result())
                report(number, rows[-1])
    else:
        with tempfile.TemporaryDirectory(prefix="traffic-vs-hardware-") as folder:
            for number, variant in enumerate(chosen, start=1):
                rows.append(predict(variant, Path(folder), tiny))
                report(number, rows[-1])
    mark_same_as_reference(rows)
    _write_lines(out, rows)
    return rows


# ----------------------------------------------------------------------------------------------
# --measure: one timing pass and one ncu pass of the driver, on a GPU
# ----------------------------------------------------------------------------------------------


def _marker_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def traffic_vs_hardware_marker(ptr):
        tl.store(ptr + tl.program_id(0), 1)

    return traffic_vs_hardware_marker


def drive(mode: str, names: list[str] | None, out: Path, echo=print) -> None:
    """Run each variant natively on the GPU. ``mode`` "time": a warm-up call, then
    ``triton.testing.do_bench`` (the median, in ms); "profile" (under ncu): a warm-up call, then
    between cudaProfilerStart and Stop the marker kernel with grid (number + 1,) and one call.
    Writes a JSON line per variant (its Triton kernels' names, the time or the marker's number)."""
    import torch

    from grader.core import device
    from grader.core.checks import build_inputs
    from grader.core.protocols import timed

    device.select()
    if not device.is_cuda():
        raise SystemExit("--measure needs a CUDA GPU (GRADER_DEVICE must not be cpu)")
    marker = _marker_kernel()
    flag = torch.zeros(len(select(names)) + 1, dtype=torch.int32, device="cuda")
    marker[(1,)](flag)  # compiled before the first profiled range
    torch.cuda.synchronize()
    lines = open(out, "w")  # a line per variant as soon as it is done: a crash keeps what ran before it
    with lines, tempfile.TemporaryDirectory(prefix="traffic-vs-hardware-") as folder:
        for number, variant in enumerate(select(names)):
            family = variant.family
            row = {"variant": variant.name, "number": number}
            try:
                kernel = load(variant, Path(folder))
                spec = _spec(family.module, family.spec_name)
                case = case_of(family, family.full)
                args, kwargs = build_inputs(spec, case, on=torch.device("cuda"))
                fn = timed(spec.protocol, kernel.api(spec.api), spec.api)
                row["triton_kernels"] = _jit_names(kernel)
                fn(*args, **kwargs)  # compiles, and autotunes where the kernel does
                torch.cuda.synchronize()
                if mode == "time":
                    row["time_ms"] = _bench(fn, args, kwargs)
                else:
                    torch.cuda.nvtx.range_push(variant.name)
                    torch.cuda.profiler.start()
                    try:
                        marker[(number + 1,)](flag)
                        fn(*args, **kwargs)
                        torch.cuda.synchronize()
                    finally:
                        torch.cuda.profiler.stop()
                        torch.cuda.nvtx.range_pop()
                args = kwargs = None  # the next variant's inputs take their place
            except Exception as error:  # a mistake the compiler refuses: the others still run
                row["error"] = f"{type(error).__name__}: {error}"[:500]
                row["fault"] = is_device_fault(error)
                traceback.print_exc(limit=2)
            lines.write(json.dumps(row, default=str) + "\n")
            lines.flush()
            echo(f"[{mode} {number + 1}] {variant.name}: {row.get('error') or row.get('time_ms', 'profiled')}")
            if row.get("fault"):  # the CUDA context is lost: every later call would fail too
                lines.close()
                sys.stdout.flush()
                os._exit(FAULT_EXIT)  # no teardown: it would touch the lost context again
            torch.cuda.empty_cache()


FAULT_EXIT = 3  # the driver's exit status after a variant lost the CUDA context


def is_device_fault(error: BaseException) -> bool:
    """Whether ``error`` says the GPU faulted (an illegal address, a trap): after one, the
    process's CUDA context is lost and every later CUDA call fails with the same error."""
    text = f"{type(error).__name__}: {error}".lower()
    return any(words in text for words in DEVICE_FAULTS)


DEVICE_FAULTS = ("illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
                 "device-side assert", "acceleratorerror", "cuda error")  # fmt: skip


def _bench(fn, args, kwargs) -> float:
    import triton

    return triton.testing.do_bench(lambda: fn(*args, **kwargs), return_mode="median")


def run_all(folder: Path, all_mistakes: bool = False, jobs: int | None = None, ncu: str = "ncu") -> None:
    """The one command of a GPU machine: predict under the interpreter (in a process of its own,
    GRADER_DEVICE=cpu, on every core), measure natively, compare; every file lands in ``folder``.
    Mistakes whose predicted traffic equals their reference's are measured only with
    ``all_mistakes`` (they double the run and show only the measurement's noise)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pred, meas = folder / "pred.jsonl", folder / "meas.jsonl"
    here = [sys.executable, "-m", "grader.authoring.traffic_vs_hardware"]
    jobs = jobs or max(1, (os.cpu_count() or 2) - 1)
    subprocess.run(
        [*here, "--predict", str(pred), "--jobs", str(jobs)], check=True, env={**os.environ, "GRADER_DEVICE": "cpu"}
    )
    names = None if all_mistakes else worth_measuring(_read_lines(pred))
    run_measure(meas, names, ncu, keep=folder / "ncu")
    result = compare(_read_lines(pred), _read_lines(meas))
    text = result.table() + "\n\n" + "\n".join(result.summary()) + "\n"
    (folder / "compare.txt").write_text(text)
    print(text)


def ncu_command(
    manifest: Path, csv_path: Path, names: list[str] | None, ncu: str = "ncu", extra: tuple[str, ...] = ()
) -> list[str]:
    """The one ncu process over the driver: only the profiler's start/stop ranges are profiled,
    caches flushed before each kernel's replay (``--cache-control all``) and clocks at base, its
    CSV in base units (bytes, ns) written to ``csv_path``. ``extra`` metrics are collected too
    (say the sectors of cp.async, ``..._op_ldgsts``, where this ncu knows them)."""
    only = [arg for name in names or () for arg in ("--only", name)]
    return [
        ncu, "--csv", "--print-units", "base", "--profile-from-start", "off",
        "--cache-control", "all", "--clock-control", "base",
        "--metrics", ",".join((*METRICS, *extra)), "--log-file", str(csv_path),
        sys.executable, "-m", "grader.authoring.traffic_vs_hardware",
        "--drive", "profile", str(manifest), *only,
    ]  # fmt: skip


def run_measure(
    out: Path, names: list[str] | None = None, ncu: str = "ncu", keep: Path | None = None, extra: tuple[str, ...] = ()
) -> None:
    """Both passes, then the measured JSON lines: ncu's counters per variant and do_bench's time.
    Each pass runs the driver again on the variants left after one that faulted (``resumed``), so
    a mistake that loses its CUDA context costs its own line only."""
    if shutil.which(ncu) is None:
        raise SystemExit(f"{ncu} is not on PATH: install Nsight Compute or pass --ncu /path/to/ncu")
    work = Path(keep or tempfile.mkdtemp(prefix="traffic-vs-hardware-"))
    work.mkdir(parents=True, exist_ok=True)
    chosen = [variant.name for variant in select(names)]
    here = [sys.executable, "-m", "grader.authoring.traffic_vs_hardware"]

    def timing_pass(part: int, left: list[str]) -> int:
        only = [arg for name in left for arg in ("--only", f"={name}")]
        return subprocess.run([*here, "--drive", "time", str(work / f"timing-{part}.jsonl"), *only]).returncode

    def ncu_pass(part: int, left: list[str]) -> int:
        command = ncu_command(work / f"manifest-{part}.jsonl", work / f"ncu-{part}.csv",
                              [f"={name}" for name in left], ncu, extra)  # fmt: skip
        with open(work / f"ncu-{part}.stdout", "w") as stdout:  # the CSV, if --log-file keeps only ncu's messages
            return subprocess.run(command, stdout=stdout).returncode

    timing = [row for _, rows in resumed(chosen, timing_pass, work, "timing") for row in rows]
    parts = resumed(chosen, ncu_pass, work, "manifest")
    if not parts:
        raise SystemExit(f"the driver wrote nothing: see {work} and the output above")
    rows = []
    for part, manifest in parts:
        csv_path, stdout = work / f"ncu-{part}.csv", work / f"ncu-{part}.stdout"
        kernels = parse_ncu_csv(csv_path.read_text() if csv_path.is_file() else "")
        kernels = kernels or parse_ncu_csv(stdout.read_text() if stdout.is_file() else "")
        rows += measured_rows(manifest, kernels, timing)
    _write_lines(out, rows)
    print(f"{len(rows)} variants measured; ncu's CSV and the driver's lines are in {work}")


def resumed(chosen: list[str], run_pass, work: Path, stem: str, echo=print) -> list[tuple[int, list[dict]]]:
    """Run ``run_pass(part, names)`` (a driver process that writes ``work/{stem}-{part}.jsonl``, a
    line per variant in order) until every name of ``chosen`` has a line: after a process that
    ended early, again on the names it did not reach. The variant it was running when it died
    without writing its line gets one saying so (``fault``), and is not run again. Returns the
    lines of each part, by part."""
    left, parts, part, idle = list(chosen), [], 0, 0
    while left:
        status = run_pass(part, left)
        path = work / f"{stem}-{part}.jsonl"
        rows = _read_lines(path) if path.is_file() else []
        done = {row["variant"] for row in rows}
        still = [name for name in left if name not in done]
        idle = 0 if rows else idle + 1
        if status:
            echo(f"warning: the driver's {stem} pass ended with exit status {status}; {len(still)} variants left")
        if still and (not status or idle >= 2):  # it skipped them, or it cannot start: no more tries
            why = "the driver ended without running it" if not status else "the driver failed twice without a line"
            rows += [{"variant": name, "number": None, "error": why} for name in still]
            still = []
        elif still and not (rows and rows[-1].get("fault")):  # it died in the one it was running
            rows.append({"variant": still.pop(0), "number": None, "fault": True,
                         "error": f"the driver died (exit status {status}) while running it"})  # fmt: skip
        parts.append((part, rows))
        left, part = still, part + 1
    return parts


def _number(text: str) -> float | None:
    text = (text or "").strip().replace(",", "").replace("\u202f", "").replace(" ", "")
    if not text or text.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu's ``--csv`` details page (a row per kernel and metric) as a list of kernels in launch
    order: {"id", "kernel", "grid", "metrics": {metric name: value in base units}}. Lines before
    the header (ncu's own ``==PROF==`` messages, the program's output) are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.startswith('"')]
    kernels: dict[int, dict] = {}
    for record in csv.DictReader(io.StringIO("\n".join(body))):
        ident = _number(record.get("ID", ""))
        if ident is None:
            continue
        entry = kernels.setdefault(
            int(ident),
            {
                "id": int(ident),
                "kernel": record.get("Kernel Name", ""),
                "grid": record.get("Grid Size", ""),
                "metrics": {},
            },
        )
        value = _number(record.get("Metric Value", ""))
        if value is None or not record.get("Metric Name"):
            continue
        unit = (record.get("Metric Unit") or "").strip().lower()
        scale = UNIT_SCALE.get(unit)
        if scale is None:
            scale = UNIT_SCALE.get(unit.rstrip("s"), 1.0)  # "bytes", "sectors"
        entry["metrics"][record["Metric Name"]] = value * scale
    return [kernels[key] for key in sorted(kernels)]


def _base_name(kernel: str) -> str:
    """A kernel's function name, whatever ncu shows around it ("void f<...>(...)" or "f")."""
    name = kernel.split("(")[0].strip()
    name = name.split("<")[0].strip()
    return name.split()[-1] if name else ""


def _owned(name: str, own: set[str]) -> bool:
    """Whether ncu's kernel ``name`` is one of the Triton kernels ``own`` (older Tritons added a
    suffix of the specialisation to the name: "matmul_kernel_0d1d2d")."""
    return name in own or any(name.startswith(f"{kernel}_") for kernel in own)


def measured_rows(manifest: list[dict], kernels: list[dict], timing: list[dict]) -> list[dict]:
    """One measured line per variant of the manifest: the rows after its marker summed over the
    module's own Triton kernels (other kernels the call launched are listed apart), and the time."""
    times = {row["variant"]: row for row in timing}
    groups: dict[int, list[dict]] = {}
    current = None
    for kernel in kernels:
        if MARKER in kernel["kernel"]:
            found = re.search(r"\d+", kernel.get("grid") or "")  # "(3, 1, 1)": variant number 2
            current = int(found.group()) - 1 if found else len(groups)
            groups[current] = []
        elif current is not None:
            groups[current].append(kernel)
    rows = []
    for row in manifest:
        group = groups.get(row.get("number"))
        if group is None:
            continue
        own = set(row.get("triton_kernels", ()))
        counted = [k for k in group if _owned(_base_name(k["kernel"]), own)] if own else group
        out = {"variant": row["variant"], "kernels": [_base_name(k["kernel"]) for k in counted]}
        out["other_kernels"] = [k["kernel"] for k in group if k not in counted]
        for metric, name in METRIC_FIELDS.items():
            values = [k["metrics"][metric] for k in counted if metric in k["metrics"]]
            out[name] = sum(values) if values else None
        extra = sorted({metric for k in counted for metric in k["metrics"]} - set(METRIC_FIELDS))
        if extra:  # metrics asked for with --extra-metrics, summed over the same kernels
            out["extra_metrics"] = {m: sum(k["metrics"].get(m, 0.0) for k in counted) for m in extra}
        out["load_sectors_per_request"] = _ratio(out["load_sectors"], out["load_requests"])
        out["store_sectors_per_request"] = _ratio(out["store_sectors"], out["store_requests"])
        timed_row = times.get(row["variant"], {})
        out["time_ms"] = timed_row.get("time_ms")
        if "error" in timed_row:
            out["time_error"] = timed_row["error"]
            if timed_row.get("fault"):
                out["time_fault"] = True
        if "error" in row:  # it failed after its marker: its counters are partial
            out["error"] = row["error"]
            if row.get("fault"):
                out["fault"] = True
        rows.append(out)
    for row in manifest:
        if row.get("number") not in groups:
            missing = {"variant": row["variant"], "error": row.get("error", "no marker in ncu's CSV")}
            rows.append({**missing, "fault": True} if row.get("fault") else missing)
    return rows


def _ratio(a, b):
    return a / b if a is not None and b else None


# ----------------------------------------------------------------------------------------------
# --compare
# ----------------------------------------------------------------------------------------------


def ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            result[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return result


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rank correlation: Pearson's correlation of the ranks (ties averaged)."""
    if len(x) != len(y) or len(x) < 2:
        return None
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else None


def within(predicted: float, measured: float, tolerance: float = TOLERANCE) -> bool:
    return bool(measured) and abs(predicted - measured) <= tolerance * abs(measured)


def share(flags: list[bool]) -> str:
    return f"{sum(flags)} of {len(flags)} ({sum(flags) / len(flags):.0%})" if flags else "none to compare"


def _mb(count) -> str:
    return "-" if count is None else f"{count / 1e6:.1f} MB"


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@dataclass(frozen=True)
class Roofline:
    """A GPU's published peaks, for a time predicted from counts alone (nothing here is fitted to
    a measured time). Defaults: an H100 SXM (NVIDIA's H100 datasheet, dense, without sparsity)."""

    dram_bandwidth: float = 3.35e12  # bytes/s, HBM3
    multiprocessors: int = GPU_SMS
    tensor_16bit: float = 989.4e12  # FLOP/s, fp16/bf16 on the tensor cores
    tensor_tf32: float = 494.7e12  # FLOP/s, TF32 on the tensor cores
    cuda_fp32: float = 66.9e12  # FLOP/s, fp32 on the CUDA cores

    def bandwidth(self, programs: int | None) -> float:
        """The DRAM bandwidth ``programs`` programs can draw. A program runs on one multiprocessor,
        and the datasheet gives the bandwidth of all of them together: a launch of fewer programs
        than multiprocessors is taken to draw its programs' even shares (3.35 TB/s / 132, about
        25 GB/s each), a launch of more the whole of it. None: the whole of it."""
        if programs is None:
            return self.dram_bandwidth
        return self.dram_bandwidth * min(1.0, max(programs, 1) / self.multiprocessors)

    def compute_seconds(self, counts: dict) -> float:
        return (
            counts.get("dot_flops", 0) / self.tensor_16bit
            + counts.get("dot_flops_tf32", 0) / self.tensor_tf32
            + counts.get("dot_flops_ieee", 0) / self.cuda_fp32
        )

    def time_ms(self, moved: float, programs: int | None, counts: dict) -> float:
        """max(bytes / the bandwidth the programs draw, dot FLOPs / peak), in ms."""
        return 1e3 * max(moved / self.bandwidth(programs), self.compute_seconds(counts))


ROOFLINE = Roofline()
# The roofline's variants, each reported in the summary: (label, roofline_ms's arguments).
ROOFLINE_MODELS = (
    ("sector bytes / DRAM bandwidth", {"programs": False, "flops": False}),
    ("sector bytes / the bandwidth its programs draw", {"flops": False}),
    ("roofline: max(that, dot FLOPs / peak)", {}),
    ("roofline with the report's bytes in place of sector bytes", {"sector_bytes": False}),
)


@dataclass
class Pair:
    predicted: dict
    measured: dict

    @property
    def name(self) -> str:
        return self.predicted["variant"]

    def predicted_bytes(self) -> float:
        return self.predicted["read_bytes"] + self.predicted["write_bytes"]

    def predicted_sector_bytes(self) -> float:
        return 32.0 * (self.predicted["load_sectors"] + self.predicted["store_sectors"])

    def measured_bytes(self) -> float | None:
        read, write = self.measured.get("dram_read_bytes"), self.measured.get("dram_write_bytes")
        return None if read is None or write is None else read + write

    def time_ms(self) -> float | None:
        """do_bench's time, where the timing pass gave one (a fault or a refusal gives none)."""
        value = self.measured.get("time_ms")
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    def roofline_ms(self, sector_bytes: bool = True, programs: bool = True, flops: bool = True) -> float | None:
        """The time the report's own counts allow on an H100 SXM (``Roofline``): the bytes (32 x
        sectors, or the report's bytes) over the DRAM bandwidth the launched programs can draw,
        or the ``tl.dot`` work over its peak, whichever is longer. None where the prediction file
        has no program count (an older ``--predict``)."""
        launched = (self.predicted.get("programs_launched") or {}).get("at_full_shape")
        if launched is None or not all(name in self.predicted for name in DOT_COUNTS):
            return None
        moved = self.predicted_sector_bytes() if sector_bytes else self.predicted_bytes()
        return ROOFLINE.time_ms(moved, launched if programs else None, self.predicted if flops else {})

    def measured_per_request(self, kind: str) -> float | None:
        return self.measured.get(f"{kind}_sectors_per_request")

    def vector_per_request(self, kind: str) -> float | None:
        """Sectors per request at the width the GPU issues (``VectorModel``), or None where the
        prediction file predates the model."""
        return self.predicted.get(f"{kind}_vector_sectors_per_request")

    def vector_exact(self, kind: str) -> bool:
        return _close(self.vector_per_request(kind) or 0.0, self.measured_per_request(kind), 0.01)

    def vector_miss(self, kind: str) -> str:
        """Why sectors per request at the GPU's width miss the measured ones, in a few words."""
        sectors = self.measured.get(f"{kind}_sectors") or 0
        predicted = self.predicted.get(f"{kind}_vector_sectors") or 0
        if sectors < 0.5 * predicted:
            return "with under half the predicted sectors in the LSU counters (TMA or cp.async copies bypass them)"
        if sectors > (1 + TOLERANCE) * predicted:
            return "with more sectors measured than predicted (strided or sliced rows the GPU lays out otherwise)"
        limits = [limit for _, limit in (self.predicted.get("lane_bytes") or {}).get(kind, ())]
        if "contiguity or alignment" in limits:
            return (
                "with lanes narrowed by unaligned or strided rows (the compiler proves alignment; the model reads it)"
            )
        return "otherwise (the tiles or warps at the predicted shape may not be the full shape's)"

    def caches_dominate(self) -> str | None:
        """Why the DRAM counters cannot be the report's bytes for this variant, or None: a matmul
        re-reads its tiles from L2 (DRAM sees a fraction of the report's loads); uncoalesced loads
        whose extra sectors other warps use (L1 and L2 serve them: DRAM sees between the bytes
        and the sectors)."""
        if "mnk" in (self.predicted.get("shape") or {}):
            return "matmul: tiles re-read from L2"
        ideal = self.predicted.get("load_ideal_sectors") or 0
        if ideal and self.predicted["load_sectors"] > 1.01 * ideal:
            return "uncoalesced loads: DRAM reads lie between the bytes and the sector bytes"
        return None

    def reads_agree(self) -> bool:
        """DRAM reads against the report's loads: within 10 % of the loaded bytes where loads are
        coalesced; between 0.9 x the bytes and 1.1 x the sector bytes where they are not."""
        measured = self.measured.get("dram_read_bytes") or 0
        low, high = self.predicted["read_bytes"], 32.0 * self.predicted["load_sectors"]
        if high <= 1.01 * 32.0 * (self.predicted.get("load_ideal_sectors") or 0):
            return within(low, measured)
        return (1 - TOLERANCE) * low <= measured <= (1 + TOLERANCE) * high

    def writes_agree(self, residue: float = 0.0) -> bool:
        """DRAM writes within 10 % of the stored bytes, or below them by at most ``residue``
        bytes (``L2_BYTES``: lines still dirty in the write-back L2 when the kernel ended)."""
        predicted, measured = self.predicted["write_bytes"], self.measured.get("dram_write_bytes") or 0
        if within(predicted, measured) or abs(predicted - measured) <= TOLERANCE * predicted:
            return True
        return residue > 0 and 0 <= predicted - measured <= residue + TOLERANCE * predicted


@dataclass
class Comparison:
    pairs: list[Pair] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)

    def table(self) -> str:
        header = (
            f"{'variant':<78} {'pred DRAM':>10} {'meas DRAM':>10} {'ratio':>6} "
            f"{'ld s/r pred':>11} {'vec':>5} {'meas':>5} {'st s/r pred':>11} {'vec':>5} {'meas':>5} {'time ms':>8}"
        )
        lines = [header, "-" * len(header)]
        for pair in self.pairs:
            p, m = pair.predicted, pair.measured
            measured = pair.measured_bytes()
            ratio = pair.predicted_bytes() / measured if measured else None
            lines.append(
                f"{pair.name[:78]:<78} {_mb(pair.predicted_bytes()):>10} {_mb(measured):>10} {_fmt(ratio, 2):>6} "
                f"{_fmt(p['load_sectors_per_request']):>11} {_fmt(pair.vector_per_request('load')):>5} "
                f"{_fmt(m.get('load_sectors_per_request')):>5} "
                f"{_fmt(p['store_sectors_per_request']):>11} {_fmt(pair.vector_per_request('store')):>5} "
                f"{_fmt(m.get('store_sectors_per_request')):>5} "
                f"{_fmt(m.get('time_ms'), 3):>8}"
            )
        return "\n".join(lines)

    def summary(self) -> list[str]:
        pairs = [pair for pair in self.pairs if pair.measured_bytes() is not None]
        lines = [f"variants compared: {len(pairs)} (left out, no match or an error: {len(self.unmatched)})"]
        lines.append(
            "DRAM bytes within ±10 %: report's bytes "
            + share([within(p.predicted_bytes(), p.measured_bytes()) for p in pairs])
            + "; sector bytes (32 x sectors) "
            + share([within(p.predicted_sector_bytes(), p.measured_bytes()) for p in pairs])
            + "; the problem's minimum "
            + share([within(p.predicted.get("minimum_bytes") or 0, p.measured_bytes()) for p in pairs])
        )
        changed = [p for p in pairs if not p.predicted.get("same_as_reference")]
        lines.append(
            "  only variants whose traffic differs from their reference's: "
            + share([within(p.predicted_bytes(), p.measured_bytes()) for p in changed])
        )
        invalid = [p for p in pairs if p.predicted.get("unscalable") or p.predicted.get("out_of_bounds")]
        for pair in invalid:
            why = pair.predicted.get("unscalable") or "it loads or stores outside its tensors under the interpreter"
            lines.append(f"  not a prediction at the full shape: {pair.name} ({why})")
        valid = [p for p in pairs if p not in invalid]
        plain = [p for p in valid if p.caches_dominate() is None]
        lines.append(
            f"where caches do not dominate ({len(plain)} variants; coalesced loads, not a matmul): DRAM bytes "
            f"within ±10 % {share([within(p.predicted_bytes(), p.measured_bytes()) for p in plain])}; reads "
            f"{share([p.reads_agree() for p in plain])}; writes {share([p.writes_agree() for p in plain])}, or "
            f"short by no more than the L2 ({L2_BYTES >> 20} MiB, dirty at the kernel's end) "
            f"{share([p.writes_agree(L2_BYTES) for p in plain])}"
        )
        both = [within(p.predicted["read_bytes"] + p.measured.get("dram_write_bytes", 0), p.measured_bytes())
                for p in plain]  # fmt: skip
        lines.append(f"  reads alone decide (measured writes taken as they are): {share(both)}")
        uncoalesced = [p for p in valid if p.caches_dominate() and "uncoalesced" in p.caches_dominate()]
        lines.append(
            f"uncoalesced loads ({len(uncoalesced)} variants): DRAM reads between the report's bytes and "
            f"its sector bytes {share([p.reads_agree() for p in uncoalesced])}"
        )
        matmuls = [p for p in valid if p.caches_dominate() and "matmul" in p.caches_dominate()]
        ratios = sorted(
            p.measured_bytes() / p.predicted["minimum_bytes"] for p in matmuls if p.predicted.get("minimum_bytes")
        )
        if ratios:
            lines.append(
                f"matmuls ({len(matmuls)} variants, caches dominate): DRAM bytes / the problem's minimum from "
                f"{ratios[0]:.2f} to {ratios[-1]:.2f} (median {ratios[len(ratios) // 2]:.2f}); DRAM bytes / the "
                f"report's bytes median {_median([p.measured_bytes() / p.predicted_bytes() for p in matmuls]):.3f}"
            )
        for kind in ("load", "store"):
            lines += self.per_request(kind, pairs)
        timed = [p for p in pairs if p.time_ms() is not None]
        times = [p.time_ms() for p in timed]
        for label, values in (
            ("report's bytes", [p.predicted_bytes() for p in timed]),
            ("sector bytes", [p.predicted_sector_bytes() for p in timed]),
            ("measured DRAM bytes (for scale)", [p.measured_bytes() for p in timed]),
        ):
            rho = spearman(values, times)
            lines.append(f"Spearman rank correlation with measured time, {label}: {_fmt(rho, 3)} over {len(timed)}")
        lines += self.roofline(timed)
        lines += self.rankings(timed)
        return lines

    def per_request(self, kind: str, pairs: list[Pair]) -> list[str]:
        """Sectors per request of ``kind``, predicted against measured: one element a lane (the
        report's count) and at the width the GPU issues (``VectorModel``, where the prediction
        file has it), for the coalesced accesses; then at that width for every access measured,
        and why the ones that miss miss."""
        measured = [p for p in pairs if p.predicted[f"{kind}_requests"] and p.measured_per_request(kind) is not None]
        coalesced = [
            p for p in measured if p.predicted[f"{kind}_sectors"] <= 1.001 * p.predicted[f"{kind}_ideal_sectors"]
        ]
        exact = [
            _close(p.predicted[f"{kind}_sectors_per_request"], p.measured_per_request(kind), 0.01) for p in coalesced
        ]
        totals = [within(p.predicted[f"{kind}_sectors"], p.measured.get(f"{kind}_sectors") or 0) for p in coalesced]
        modelled = [p for p in coalesced if p.vector_per_request(kind) is not None]
        if not modelled:
            return [
                f"coalesced {kind}s (predicted excess 1.0): sectors/request exact {share(exact)} at one element a "
                f"lane, total sectors within ±10 % {share(totals)} (the prediction has no vector width: a lane "
                "that moves 16 bytes at once puts 4 x the sectors of fp32 in one request)"
            ]
        lines = [
            f"coalesced {kind}s (predicted excess 1.0): sectors/request exact {share(exact)} at one element a lane, "
            f"{share([p.vector_exact(kind) for p in modelled])} at the width the GPU issues (up to 16 bytes a lane "
            f"where contiguous and aligned); total sectors within ±10 % {share(totals)}"
        ]
        everything = [p for p in measured if p.vector_per_request(kind) is not None]
        misses: dict[str, list[str]] = {}
        for pair in everything:
            if not pair.vector_exact(kind):
                misses.setdefault(pair.vector_miss(kind), []).append(pair.name)
        exact_all = share([p.vector_exact(kind) for p in everything])
        lines.append(
            f"  every {kind} measured, at the width the GPU issues: exact {exact_all}"
            + ("; not exact:" if misses else "")
        )
        for why, names in misses.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            lines.append(f"    {len(names)} {why}: {shown}")
        return lines

    def roofline(self, timed: list[Pair], worst: int = 6) -> list[str]:
        """Spearman's rank correlation of each ``ROOFLINE_MODELS`` time with the measured time, and
        the variants the full roofline ranks furthest from where the measured time ranks them."""
        modelled = [p for p in timed if p.roofline_ms() is not None]
        if not modelled:
            return [
                "Spearman rank correlation with measured time, roofline: the prediction file has no program "
                "counts or dot FLOPs (programs_launched, dot_flops): predict again with this version"
            ]
        times = [p.time_ms() for p in modelled]
        lines = []
        for label, arguments in ROOFLINE_MODELS:
            rho = spearman([p.roofline_ms(**arguments) for p in modelled], times)
            lines.append(f"Spearman rank correlation with measured time, {label}: {_fmt(rho, 3)} over {len(modelled)}")
        # do_bench times the whole call, PyTorch's copies of a strided input included, which neither
        # the report nor ncu's totals count: ncu's duration of the module's own kernels is their time.
        own = [p for p in modelled if (p.measured.get("ncu_time_ns") or 0) > 0]
        rho = spearman([p.roofline_ms() for p in own], [p.measured["ncu_time_ns"] for p in own])
        lines.append(
            f"  the roofline against ncu's duration of the module's own kernels (base clocks, caches flushed): "
            f"{_fmt(rho, 3)} over {len(own)}"
        )
        predicted = ranks([p.roofline_ms() for p in modelled])
        measured = ranks(times)
        order = sorted(range(len(modelled)), key=lambda i: -abs(predicted[i] - measured[i]))
        lines.append(f"  ranked furthest from the measured time by the roofline (rank of {len(modelled)}):")
        for i in order[:worst]:
            pair = modelled[i]
            launched = pair.predicted["programs_launched"]["at_full_shape"]
            lines.append(
                f"    {pair.name}: predicted {pair.roofline_ms():.3f} ms (rank {predicted[i]:g}), measured "
                f"{pair.time_ms():.3f} ms (rank {measured[i]:g}); {launched} programs"
            )
        return lines

    def rankings(self, timed: list[Pair]) -> list[str]:
        """Per family: does the prediction put the starting kernel and each mistake that changes
        the traffic on the same side of the reference as the measured time does? A variant whose
        predicted sector bytes are within 2 % of the reference's is a predicted tie: it is shown
        with its measured time ratio and left out of the verdicts."""
        lines = ["slow-vs-fast ranking per family (predicted sector bytes against measured time):"]
        groups: dict[str, list[Pair]] = {}
        for pair in timed:
            groups.setdefault(pair.predicted["group"], []).append(pair)
        for group, members in groups.items():
            reference = next((p for p in members if p.predicted["impl"] == "reference"), None)
            if reference is None:
                continue
            base = reference.predicted_sector_bytes()
            verdicts, words = [], []
            for pair in members:
                if pair is reference or pair.predicted.get("same_as_reference"):
                    continue
                ratio = pair.time_ms() / reference.time_ms()
                if abs(pair.predicted_sector_bytes() - base) <= 0.02 * base:
                    if pair.predicted["impl"] == "starting":
                        words.append(f"starting kernel predicted a tie (measured {ratio:.2f} x the time)")
                    continue
                right = (pair.predicted_sector_bytes() > base) == (ratio > 1)
                verdicts.append((pair.predicted["impl"], right))
                if pair.predicted["impl"] == "starting":
                    words.append(f"starting kernel {'right' if right else 'WRONG'} (measured {ratio:.2f} x the time)")
            others = [right for impl, right in verdicts if impl != "starting"]
            if others:
                words.append(f"mistakes that change traffic ranked right: {share(others)}")
            lines.append(f"  {group}: {'; '.join(words) or 'nothing to rank'}")
        return lines


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def _close(a, b, tolerance: float) -> bool:
    return b is not None and abs(a - b) <= tolerance * max(abs(b), 1e-9)


def compare(predicted: list[dict], measured: list[dict]) -> Comparison:
    by_name = {row["variant"]: row for row in measured}
    result = Comparison()
    for row in predicted:
        other = by_name.get(row["variant"])
        if "error" in row or other is None or "error" in other:
            result.unmatched.append(row["variant"])
            continue
        result.pairs.append(Pair(row, other))
    return result


# ----------------------------------------------------------------------------------------------
# Files and the command line
# ----------------------------------------------------------------------------------------------


def _write_lines(path: Path, rows: list[dict]) -> None:
    Path(path).write_text("".join(json.dumps(row, default=str) + "\n" for row in rows))


def _read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.authoring.traffic_vs_hardware", description=__doc__.split("\n\n")[0]
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="print the variants, a line each")
    action.add_argument("--predict", metavar="OUT", help="predict under the interpreter (CPU), JSON lines")
    action.add_argument("--measure", metavar="OUT", help="time and profile with ncu (GPU), JSON lines")
    action.add_argument(
        "--compare", nargs="+", metavar="FILE", help="PRED MEAS [MEAS ...]: print the comparison (measured in parts)"
    )
    action.add_argument("--drive", nargs=2, metavar=("MODE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", help="variants whose names contain this (repeatable)")
    action.add_argument("--run", metavar="DIR", help="GPU: --predict, --measure and --compare, files in DIR")
    parser.add_argument("--tiny", action="store_true", help="--predict at the tiny shapes (a test of the tool)")
    parser.add_argument("--jobs", type=int, default=1, help="--predict: processes side by side")
    parser.add_argument("--changed-only", metavar="PRED", help="--measure: the variants of PRED worth measuring")
    parser.add_argument(
        "--all-mistakes", action="store_true", help="--run: measure the mistakes that change nothing too"
    )
    parser.add_argument("--ncu", default="ncu", help="the ncu executable (default: ncu on PATH)")
    parser.add_argument("--keep", metavar="DIR", help="--measure: keep ncu's CSV and the driver's lines here")
    parser.add_argument("--extra-metrics", metavar="M1,M2", help="--measure: more ncu metrics, summed per variant")
    args = parser.parse_args(argv)
    if args.list:
        chosen = select(args.only)
        counts: dict[str, int] = {}
        for variant in chosen:
            print(variant.name)
            counts[variant.module] = counts.get(variant.module, 0) + 1
        for module, count in counts.items():
            print(f"# {module}: {count}")
        print(f"# {len(chosen)} variants")
    elif args.predict:
        run_predict(Path(args.predict), args.only, args.tiny, args.jobs)
    elif args.measure:
        names = args.only
        if args.changed_only:
            worth = worth_measuring(_read_lines(Path(args.changed_only)))
            names = [v.name for v in select(args.only) if f"={v.name}" in worth] if args.only else worth
            names = [name if name.startswith("=") else f"={name}" for name in names]
        extra = tuple(m for m in (args.extra_metrics or "").split(",") if m)
        run_measure(Path(args.measure), names, args.ncu, Path(args.keep) if args.keep else None, extra)
    elif args.run:
        run_all(Path(args.run), args.all_mistakes, None, args.ncu)
    elif args.drive:
        mode, out = args.drive
        drive(mode, args.only, Path(out))
    else:
        if len(args.compare) < 2:
            parser.error("--compare takes the predicted file, then one or more measured files")
        measured = [row for path in args.compare[1:] for row in _read_lines(Path(path))]
        result = compare(_read_lines(Path(args.compare[0])), measured)
        print(result.table())
        print()
        print("\n".join(result.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
