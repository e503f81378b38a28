"""Time one kernel wrongly in four common ways and once right, and place the course's kernels on a
roofline.  Run from the repository root:

    python tracks/debugging/03-performance-profiling/timing_pitfalls.py [--impl learner|solutions|DIR]
                                                                         [--plot roofline.png]

On a CUDA GPU it prints a table (the same bias_act() call timed with no synchronisation, with its
first call and so its compilation included, without flushing the L2 cache, as a mean that includes
the first call, and right), then times the course's kernels that work and writes a roofline plot.
On a CPU there is nothing to time: it says so and prints the memory-traffic report of bias_act()
instead, which is what a CPU can tell about speed.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# A fresh Triton cache, so that the first call below really compiles (before triton is imported).
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="timing-pitfalls-"))

import torch  # noqa: E402

from grader import device  # noqa: E402  (selects the device before triton is imported)
from grader import cases  # noqa: E402
from grader.catalog import REPO_ROOT, find_module  # noqa: E402
from grader.checks import build_inputs, run_case  # noqa: E402
from grader.loading import LoadError, load_kernel  # noqa: E402

MODULE = "debugging/03-performance-profiling"
SHAPE = (4096, 2048)  # 32 MiB of fp32 input and 32 MiB of output: together about an H100's L2 (50 MiB)
REPEATS = 100

# The vendor's datasheet roofs of an NVIDIA H100 SXM5, drawn next to the measured ones on an H100.
H100_DATASHEET = {"HBM3 (datasheet)": 3350.0, "dense BF16 (datasheet)": 989.4}

# FLOPs per element of the course's memory-bound kernels (what the roofline's x axis needs; the
# tests only count their bytes). Rough counts: an exp is one, a division one.
FLOPS_PER_ELEMENT = {
    "missing-elements/01-vector-add": 1,  # one addition
    "missing-elements/03-softmax": 5,  # max, subtract, exp, sum, divide
    "missing-elements/04-layer-norm": 8,  # sum, subtract, square, sum, scale, weight, bias, ...
    MODULE: 5,  # bias, then SiLU: negate, exp, add, divide
}


# ----------------------------------------------------------------------------------------------
# Five ways to time one call
# ----------------------------------------------------------------------------------------------

def first_call_ms(fn) -> float:
    """The first call in this process, host clock around it: compiling the kernel included."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) * 1e3


def unsynchronised_ms(fn) -> list[float]:
    """A host clock around the launch, no waiting: measures how long the launch takes to return."""
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1e3)
    torch.cuda.synchronize()
    return times


def events_ms(fn, flush) -> list[float]:
    """CUDA events around each call, the L2 cache flushed before each when ``flush`` is given."""
    times = []
    for _ in range(REPEATS):
        if flush is not None:
            flush()
        began, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began.record()
        fn()
        ended.record()
        ended.synchronize()
        times.append(began.elapsed_time(ended))
    return times


def pitfalls(fn, nbytes: int) -> list[tuple[str, float]]:
    """(what, milliseconds) for each way of timing ``fn``; ``fn`` must not have run yet."""
    first = first_call_ms(fn)
    for _ in range(10):  # warm-up, from here on
        fn()
    buffer = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    flushed = events_ms(fn, buffer.zero_)
    return [
        ("no synchronisation (host clock around the launch)", statistics.median(unsynchronised_ms(fn))),
        ("no warm-up: the first call, compilation included", first),
        ("no L2 flush between repetitions (median)", statistics.median(events_ms(fn, None))),
        (f"mean of {REPEATS + 1} calls including the first", statistics.mean([first] + flushed)),
        ("right: warm-up, L2 flush, CUDA events, median", statistics.median(flushed)),
    ]


def print_table(rows: list[tuple[str, float]], nbytes: int) -> None:
    right = rows[-1][1]
    print(f"{'how it was timed':<52} {'ms':>10} {'GB/s':>8} {'x right':>8}")
    print("-" * 81)
    for what, ms in rows:
        print(f"{what:<52} {ms:10.4f} {nbytes / ms / 1e6:8.0f} {ms / right:8.2f}")


# ----------------------------------------------------------------------------------------------
# The course's kernels on a roofline
# ----------------------------------------------------------------------------------------------

def copy_gbps() -> float:
    import triton.testing

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def matmul_tflops(n: int = 8192) -> float:
    import triton.testing

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return 2 * n ** 3 / triton.testing.do_bench(lambda: a @ b, return_mode="median") / 1e9


def course_points(impl: str) -> list[tuple[str, float, float]]:
    """(label, FLOPs per byte, achieved TFLOP/s) of each course kernel that loads and passes its
    benchmark case's check; the others are skipped with the reason."""
    import triton.testing

    wanted = ["missing-elements/01-vector-add", "missing-elements/03-softmax", "missing-elements/04-layer-norm",
              "missing-elements/02-matrix-mul", MODULE]
    points = []
    for module_id in wanted:
        module = find_module(module_id)
        try:
            kernel = load_kernel(module, impl)
        except LoadError as error:
            print(f"  {module_id}: skipped ({str(error).splitlines()[0]})")
            continue
        spec, _ = cases.public(module)
        case = spec.bench_cases[0]
        result = run_case(kernel.api(spec.api), spec, case)
        if not result.passed:
            print(f"  {module_id}: skipped, its {case.name} case fails ({result.message.splitlines()[0]})")
            continue
        args, kwargs = build_inputs(spec, case)
        fn = kernel.api(spec.api)
        ms = triton.testing.do_bench(lambda: fn(*args, **kwargs), return_mode="median")
        nbytes = spec.bytes_moved(case)
        if spec.flops is not None:
            flops = spec.flops(case)
        else:
            elements = math.prod(next(t for t in args if isinstance(t, torch.Tensor)).shape)
            flops = FLOPS_PER_ELEMENT.get(module_id, 1) * elements
        label = f"{module.slug} {case.name}"
        points.append((label, flops / nbytes, flops / ms / 1e9))
        print(f"  {label:<48} {ms:9.4f} ms  {nbytes / ms / 1e6:7.0f} GB/s  {flops / ms / 1e9:8.2f} TFLOP/s")
    return points


def plot_roofline(points, peak_gbps: float, peak_tflops: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    intensities = [10 ** (k / 20) for k in range(-40, 81)]  # 0.01 to 10^4 FLOPs per byte
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.loglog(intensities, [min(peak_tflops, i * peak_gbps / 1e3) for i in intensities], "k-",
              label=f"measured roofs: copy {peak_gbps:.0f} GB/s, bf16 matmul {peak_tflops:.0f} TFLOP/s")
    if "H100" in torch.cuda.get_device_name():
        bandwidth, compute = H100_DATASHEET.values()
        ax.loglog(intensities, [min(compute, i * bandwidth / 1e3) for i in intensities], "k:",
                  label="H100 SXM datasheet roofs")
    for label, intensity, tflops in points:
        ax.loglog([intensity], [tflops], "o", label=label)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"the course's kernels on {torch.cuda.get_device_name()}")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------

def on_cpu(impl: str) -> int:
    from grader.traffic import describe, measure

    print("This script times kernels on a CUDA GPU, and there is none here (the kernels run in Triton's "
          "interpreter, whose times say nothing about a GPU's).\nWhat a CPU can tell is the memory "
          "traffic: here is the report of one bias_act() call on a 64 x 100 float32 matrix.\n")
    kernel = load_kernel(find_module(MODULE), impl)
    x, bias = torch.randn(64, 100), torch.randn(100)
    minimum = (2 * x.numel() + bias.numel()) * x.element_size()
    print(describe(measure(lambda: kernel.api("bias_act")(x, bias), minimum), REPO_ROOT))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", default="learner", help="learner (default), solutions, or a folder")
    parser.add_argument("--plot", default="roofline.png", help="where to write the roofline plot")
    args = parser.parse_args()
    if not device.is_cuda():
        return on_cpu(args.impl)

    kernel = load_kernel(find_module(MODULE), args.impl)
    x = torch.randn(SHAPE, device="cuda")
    bias = torch.randn(SHAPE[1], device="cuda")
    nbytes = (2 * x.numel() + bias.numel()) * x.element_size()
    print(f"bias_act() on {SHAPE[0]} x {SHAPE[1]} float32 ({nbytes / 2 ** 20:.0f} MiB moved), "
          f"{device.describe()}, {REPEATS} repetitions:\n")
    print_table(pitfalls(lambda: kernel.api("bias_act")(x, bias), nbytes), nbytes)

    print("\nThe course's kernels (triton.testing.do_bench medians):")
    points = course_points(args.impl)
    peak_gbps, peak_tflops = copy_gbps(), matmul_tflops()
    print(f"  copy: {peak_gbps:.0f} GB/s; torch.matmul bf16 8192^3: {peak_tflops:.0f} TFLOP/s")
    plot_roofline(points, peak_gbps, peak_tflops, Path(args.plot))
    print(f"\nRoofline plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
