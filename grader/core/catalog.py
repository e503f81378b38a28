"""The course catalog: every module of the four tracks, whether or not it is written yet.

The CLI, the progress table and the test suite read this list; a module becomes
"available" as soon as its folder under ``tracks/`` has a ``kernel.py``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TRACKS_DIR = REPO_ROOT / "tracks"
SOLUTIONS_DIR = REPO_ROOT / "solutions"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


@dataclass(frozen=True)
class Module:
    track: str
    number: int
    slug: str  # folder name, e.g. "01-vector-add"
    title: str
    api: tuple[str, ...]  # the public functions the tests call
    missing: int = 0  # how many TODO elements the stub promises (track 1)

    @property
    def id(self) -> str:
        return f"{self.track}/{self.slug}"

    @property
    def learner_dir(self) -> Path:
        return TRACKS_DIR / self.track / self.slug

    @property
    def solution_dir(self) -> Path:
        return SOLUTIONS_DIR / self.track / self.slug

    @property
    def notebook(self) -> Path:
        return NOTEBOOKS_DIR / f"{self.track}-{self.slug}.ipynb"

    @property
    def available(self) -> bool:
        return (self.learner_dir / "kernel.py").is_file()


def _track(track: str, *rows: tuple) -> list[Module]:
    return [
        Module(track, number, f"{number:02d}-{name}", title, api, *rest)
        for number, (name, title, api, *rest) in enumerate(rows, start=1)
    ]


MODULES: list[Module] = [
    *_track(
        "missing-elements",
        ("vector-add", "Vector addition", ("add",), 14),
        ("matrix-mul", "Matrix multiplication", ("matmul",), 21),
        ("softmax", "Row-wise softmax", ("softmax",), 16),
        ("layer-norm", "Layer normalization", ("layer_norm",), 17),
        ("conv2d", "2-D convolution as an implicit GEMM", ("conv2d",), 25),
    ),
    *_track(
        "optimization",
        ("tiling", "Tiling and coalescing", ("transpose", "matmul")),
        ("pipelining", "Software pipelining", ("matmul",)),
        ("shared-memory", "On-chip reuse and reductions", ("softmax", "vector_sum")),
        ("warp-specialization", "Swizzling and fused epilogues", ("matmul_bias_gelu",)),
        ("advanced-optimizations", "Autotuning and persistent kernels", ("matmul",)),
    ),
    *_track(
        "debugging",
        (
            "basic-debugging",
            "Finding wrong results",
            ("row_max", "row_mean", "transpose", "boundary_sizes", "first_mismatch"),
        ),
        ("error-handling", "Errors, validation and fallbacks", ("softmax", "matmul", "launch_with_retry")),
        (
            "performance-profiling",
            "Timing and profiling",
            (
                "bias_act",
                "bench",
                "WallClock",
                "quantile",
                "cache_flusher",
                "achieved_gbps",
                "achieved_tflops",
                "roofline",
            ),
        ),
        (
            "memory-debugging",
            "Memory errors and races",
            (
                "dot",
                "add_bias",
                "column_sum",
                "scale",
                "guarded_empty",
                "check_guards",
                "poisoned_empty",
                "never_written",
            ),
        ),
    ),
    *_track(
        "mastery",
        ("custom-kernels", "Custom element-wise kernels", ("silu", "poly_act", "glu", "complex_mul")),
        ("fused-operations", "Fused operations", ("layer_norm_act", "linear_bias_act", "layer_norm_linear")),
        ("attention-kernels", "FlashAttention", ("attention", "attention_forward", "naive_attention")),
        (
            "training-kernels",
            "Training kernels",
            (
                "rms_norm",
                "layer_norm",
                "swiglu",
                "silu_and_mul",
                "relu",
                "dropout",
                "dropout_with_mask",
                "adamw",
                "sgd",
                "unscale_grads",
                "selective_scan",
            ),
        ),
        ("production-ready", "Production-ready operators", ("layer_norm_gelu", "bias_gelu_residual")),
    ),
]


def available_modules() -> list[Module]:
    return [m for m in MODULES if m.available]


def find_module(name: str) -> Module:
    """Look a module up by id ("missing-elements/03-softmax"), slug, or a path inside it."""
    wanted = name.strip().rstrip("/")
    path = Path(wanted)
    if path.exists():
        resolved = path.resolve()
        for module in MODULES:
            for folder in (module.learner_dir, module.solution_dir):
                if resolved == folder or folder in resolved.parents:
                    return module
    for module in MODULES:
        if wanted in (module.id, module.slug, f"tracks/{module.id}", f"solutions/{module.id}"):
            return module
    matches = [m for m in MODULES if wanted in m.id]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise LookupError(
            f"{name!r} matches {len(matches)} modules: {', '.join(m.id for m in matches)}. Name one of them."
        )
    ids = [m.id for m in available_modules()]
    by_name = {**{m.slug: m.id for m in available_modules()}, **{i: i for i in ids}}
    close = difflib.get_close_matches(wanted, list(by_name), n=1, cutoff=0.6)
    if close:
        raise LookupError(
            f"No module matches {name!r}. Did you mean {by_name[close[0]]}? (`make progress` lists every module.)"
        )
    raise LookupError(
        f"No module matches {name!r}. Give a track and folder, such as "
        f"{ids[0]}, or a unique part of one; `make progress` lists every module."
    )
