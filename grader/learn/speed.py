"""Speed reports on a CUDA GPU: the learner's kernel against the reference solution, PyTorch and
the memory/compute ceiling, all measured in the same run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from grader.core import bench, cases
from grader.core.catalog import Module
from grader.core.loading import load_kernel

COMPILED = "torch.compile"


def implementations(
    module: Module, impl: str | Path, spec: cases.Spec, against=(), out=sys.stdout
) -> dict[str, Callable]:
    """The learner's (or the reference's) function, the reference beside a learner's, PyTorch's
    baseline, and the further comparisons ``against`` names (see ``comparisons``)."""
    label = "reference" if impl == "solutions" else "yours"
    found = {label: load_kernel(module, impl).api(spec.api)}
    if (module.solution_dir / "kernel.py").is_file() and impl != "solutions":
        found["reference"] = load_kernel(module, "solutions").api(spec.api)
    if spec.torch_baseline:
        found["pytorch"] = spec.torch_baseline
    found.update(comparisons(spec, against, out))
    return found


def offered(spec: cases.Spec) -> dict[str, Callable[[], Callable | None]]:
    """The comparisons a function offers beyond eager PyTorch: torch.compile of PyTorch's baseline,
    and the libraries its module names (``Spec.library_baselines``), each as a loader."""
    found = {}
    # Not for optimizers' steps: a step count passed as a Python int would recompile every step.
    if spec.torch_baseline is not None and (spec.protocol is None or isinstance(spec.protocol, cases.Backward)):
        baseline = spec.torch_baseline
        found[COMPILED] = lambda: _compiled(baseline)
    found.update(spec.library_baselines)
    return found


def _compiled(fn: Callable) -> Callable:
    import torch

    return torch.compile(fn, dynamic=False)  # one graph per benchmark shape, as a training job has


def asked(name: str, against) -> bool:
    """Whether a word of ``against`` ("all", "compile", "liger", ...) names the comparison ``name``."""
    return any(word == "all" or word.lower() in name.lower() for word in against)


def comparisons(spec: cases.Spec, against, out=sys.stdout) -> dict[str, Callable]:
    """The offered comparisons that ``against`` asks for and that load here; a library that is not
    installed (or fails to load) is left out with a line that says so."""
    found = {}
    for name, load in offered(spec).items():
        if not asked(name, against):
            continue
        try:
            fn = load()
        except Exception as failed:  # not installed, or a version that does not fit this one
            why = str(failed) if isinstance(failed, ImportError) else f"{type(failed).__name__}: {failed}"
            print(f"{name} is left out of {spec.api}()'s table: it does not load here ({why}).", file=out)
            continue
        found[name] = fn
    return found


def report_speed(module: Module, impl: str | Path, out=sys.stdout) -> bool | None:
    """A speed verdict per benchmark case of the module's main function: the learner's time, the
    ratios to the reference and to PyTorch, and whether the course's bar is met. The first case
    is the one the grader times. Returns whether every case meets the bar (None: nothing was
    compared with a reference, as when the reference itself is checked)."""
    spec, _ = cases.public(module)
    copy_gbs = bench.copy_bandwidth_gbs() if spec.bench_cases else None
    impls = implementations(module, impl, spec)
    verdicts = [_report_case(spec, case, impls, copy_gbs, out) for case in spec.bench_cases]
    compared = [v for v in verdicts if v is not None]
    return all(compared) if compared else None


def _report_case(spec: cases.Spec, case: cases.Case, impls: dict, copy_gbs: float, out) -> bool | None:
    rows = bench.measure(spec, case, impls)
    print(f"\nSpeed on {case.name}:", file=out)
    print(bench.format_table(spec, rows, copy_gbs), file=out)
    yours = rows[0]
    reference = next((r for r in rows[1:] if r.impl == "reference"), None)
    pytorch = next((r for r in rows[1:] if r.impl == "pytorch"), None)
    if reference:
        ratio = reference.ms / yours.ms
        verdict = "meets" if ratio >= spec.learner_threshold else "is below"
        versus = f" ({pytorch.ms / yours.ms:.2f} x PyTorch's)" if pytorch else ""
        print(
            f"Your kernel runs at {ratio:.2f} x the reference speed{versus}: it {verdict} the course's "
            f"bar of {spec.learner_threshold:.2f} x (no performance credit at or below {spec.floor:.2f} x).",
            file=out,
        )
        return ratio >= spec.learner_threshold
    ratio = bench.ceiling_ratio(spec, yours, rows, copy_gbs)
    goal = spec.target * spec.learner_threshold
    print(f"Your kernel reaches {ratio:.2f} of the ceiling; the course asks for about {goal:.2f}.", file=out)
    return None


def run_bench(
    module: Module, impl: str | Path, out_dir: Path, out=sys.stdout, host: bool = False, against=()
) -> list[Path]:
    """Benchmark every bench case of every function of the module; print a table and write a PNG
    plot per function. Returns the plot paths. ``host``: add each call's host and GPU time;
    ``against``: also time the comparisons these words name (torch.compile, other libraries)."""
    module_spec, public = cases.public(module)
    timed = [spec for spec in cases.specs_of(module_spec, public) if spec.bench_cases]
    unmatched = [w for w in against if not any(asked(name, [w]) for spec in timed for name in offered(spec))]
    if unmatched:
        names = sorted({name for spec in timed for name in offered(spec)})
        print(
            f"{module.id} offers no comparison named {', '.join(unmatched)}; it offers "
            f"{', '.join(names) or 'none'} (or `all`).",
            file=out,
        )
    copy_gbs = bench.copy_bandwidth_gbs()
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = []
    for spec in timed:
        impls = implementations(module, impl, spec, against, out)
        # a bench case belongs to the Spec that lists it (its inputs may depend on which one)
        bound = [
            case if case.spec is not None or spec is module_spec else replace(case, spec=spec)
            for case in spec.bench_cases + spec.bench_only_cases
        ]
        failed: list[str] = []  # baselines that raised: left out of the table, said under it
        rows = [row for case in bound for row in bench.measure(spec, case, impls, host=host, failed=failed)]
        print(f"\n{spec.api}():\n{bench.format_table(spec, rows, copy_gbs)}", file=out)
        for line in failed:
            print(line, file=out)
        suffix = "" if spec is module_spec else f"-{spec.api}"
        png = out_dir / f"{module.track}-{module.slug}{suffix}.png"
        for n in range(2, 100):  # two Specs of one function (fp32 lists and large tensors)
            if png not in pngs:
                break
            png = out_dir / f"{module.track}-{module.slug}{suffix}-{n}.png"
        bench.plot(spec, rows, copy_gbs, f"{module.title}: {spec.api}()", png)
        print(f"Plot written to {png}", file=out)
        pngs.append(png)
    return pngs
