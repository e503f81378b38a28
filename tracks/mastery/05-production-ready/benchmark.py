"""What the operator costs: the custom op against its bare kernel launch and against PyTorch eager.

Run from the repository root, on a machine with an NVIDIA GPU:

    python tracks/mastery/05-production-ready/benchmark.py                   # your kernel.py
    python tracks/mastery/05-production-ready/benchmark.py --impl solutions  # the reference

For each operator (layer_norm_gelu, bias_gelu_residual) and each size it times three ways to
compute the same forward result, all from one process, on the same inputs:

    PyTorch eager   what a user writes without this module: F.gelu(F.layer_norm(...)), or
                    residual + F.gelu(x + bias) (two and three kernels)
    bare launch     the kernel launched directly: allocate the output, kernel[grid](...), nothing
                    else (no validation, no dispatcher, no autograd)
    custom op       the public function: validation, torch.ops dispatch, the autograd layer, the
                    same allocation and launch

Realistic sizes are timed on the GPU (triton.testing.do_bench medians, the L2 cache flushed before
each call): there the custom op must cost no more than its bare launch, op / bare <= 1.05. Tiny
sizes measure the launch overhead instead: the host time per call, in microseconds, of 1000 calls
back to back (then the GPU waits for the CPU, and the time is the Python and dispatch work). It
prints a table and writes a plot to bench-results/mastery-05-production-ready.png.

This is given code, not part of what you submit. Under Triton's interpreter kernels run in Python
on the CPU, so timings say nothing about a GPU: on a CPU the script says so and stops.
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from grader import device
from grader.core.catalog import REPO_ROOT, find_module
from grader.core.loading import LoadError, load_kernel

MODULE_ID = "mastery/05-production-ready"
TARGET = 1.05  # custom op time / bare launch time, at realistic sizes
REALISTIC = [((32768, 4096), torch.bfloat16), ((16384, 8192), torch.float16), ((8192, 4096), torch.float32),
             ((65536, 1024), torch.bfloat16)]
TINY = [((1, 64), torch.float32), ((8, 256), torch.float16), ((64, 1024), torch.bfloat16)]
HOST_CALLS = 1000


def layer_norm_gelu_variants(kernels, x, weight, bias):
    """name -> a function of no arguments that computes gelu(layer_norm(x) * weight + bias)."""
    n_cols = x.shape[-1]
    block_n, num_warps = kernels.row_config(n_cols)

    def bare():
        y = torch.empty_like(x)
        kernels.layer_norm_gelu_kernel[(x.shape[0],)](x, y, weight, bias, n_cols, n_cols, n_cols, 1e-5,
                                                      BLOCK_N=block_n, num_warps=num_warps)
        return y

    return {"PyTorch eager": lambda: F.gelu(F.layer_norm(x, (n_cols,), weight, bias, 1e-5)),
            "bare launch": bare,
            "custom op": lambda: kernels.layer_norm_gelu(x, weight, bias, 1e-5)}


def bias_gelu_residual_variants(kernels, x, bias, residual):
    """name -> a function of no arguments that computes residual + gelu(x + bias)."""
    n_rows, n_cols = x.shape
    block_m, block_n = kernels.tile_config(n_cols)
    grid = (-(-n_rows // block_m), -(-n_cols // block_n))

    def bare():
        out = torch.empty_like(x)
        kernels.bias_gelu_residual_kernel[grid](x, bias, residual, out, n_rows, n_cols, n_cols, n_cols, n_cols,
                                                BLOCK_M=block_m, BLOCK_N=block_n)
        return out

    return {"PyTorch eager": lambda: residual + F.gelu(x + bias),
            "bare launch": bare,
            "custom op": lambda: kernels.bias_gelu_residual(x, bias, residual)}


def inputs(op, shape, dtype, where):
    rows, n_cols = shape
    x = torch.randn(rows, n_cols, device=where, dtype=dtype)
    if op == "layer_norm_gelu":
        return x, torch.randn(n_cols, device=where, dtype=dtype), torch.randn(n_cols, device=where, dtype=dtype)
    return x, torch.randn(n_cols, device=where, dtype=dtype), torch.randn_like(x)


VARIANTS = {"layer_norm_gelu": layer_norm_gelu_variants, "bias_gelu_residual": bias_gelu_residual_variants}


def check_agreement(results: dict, dtype: torch.dtype) -> None:
    """The three variants must agree before any of them is timed."""
    want = results["PyTorch eager"].float()
    tolerance = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype]
    for name, got in results.items():
        error = (got.float() - want).abs().max().item() if got.numel() else 0.0
        if error > tolerance * (1 + want.abs().max().item()):
            raise SystemExit(f"{name} differs from PyTorch eager by {error:.3g}: fix the kernel before timing it.")


def gpu_ms(fn) -> float:
    from grader.bench import time_ms
    return time_ms(fn)


def host_us(fn, calls: int = HOST_CALLS) -> float:
    """Microseconds per call of ``calls`` calls back to back, the GPU synchronised before and after:
    for tiny inputs, the host's work per call (Python, dispatch, launch)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def measure(kernels, sizes, timer, where="cuda"):
    """Rows of (op, shape, dtype, {variant: value}) for every operator and size, timed by ``timer``."""
    rows = []
    for op, variants in VARIANTS.items():
        for shape, dtype in sizes:
            fns = variants(kernels, *inputs(op, shape, dtype, where))
            check_agreement({name: fn() for name, fn in fns.items()}, dtype)
            rows.append((op, shape, dtype, {name: timer(fn) for name, fn in fns.items()}))
    return rows


def short(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


def table(realistic, tiny) -> str:
    lines = [f"{device.describe()}, torch {torch.__version__}",
             "", "Realistic sizes: GPU time per call (median ms); target: custom op / bare launch <= "
                 f"{TARGET}",
             f"{'operator':<20} {'shape':<14} {'dtype':<5} {'eager ms':>9} {'bare ms':>9} {'op ms':>9} "
             f"{'op / bare':>9} {'eager / op':>10}"]
    for op, shape, dtype, ms in realistic:
        ratio = ms["custom op"] / ms["bare launch"]
        mark = "ok" if ratio <= TARGET else "MISSED"
        lines.append(f"{op:<20} {str(shape):<14} {short(dtype):<5} {ms['PyTorch eager']:9.3f} "
                     f"{ms['bare launch']:9.3f} {ms['custom op']:9.3f} {ratio:9.3f} "
                     f"{ms['PyTorch eager'] / ms['custom op']:10.2f}  {mark}")
    lines += ["", f"Tiny sizes: host time per call (microseconds, {HOST_CALLS} calls back to back)",
              f"{'operator':<20} {'shape':<14} {'dtype':<5} {'eager us':>9} {'bare us':>9} {'op us':>9} "
              f"{'op - bare':>9}"]
    for op, shape, dtype, us in tiny:
        lines.append(f"{op:<20} {str(shape):<14} {short(dtype):<5} {us['PyTorch eager']:9.1f} "
                     f"{us['bare launch']:9.1f} {us['custom op']:9.1f} {us['custom op'] - us['bare launch']:9.1f}")
    return "\n".join(lines)


def plot(realistic, tiny, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["PyTorch eager", "bare launch", "custom op"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5))
    for ax, rows, unit, title in ((left, realistic, "GPU time / bare launch time", "realistic sizes (GPU time)"),
                                  (right, tiny, "host microseconds per call", "tiny sizes (launch overhead)")):
        labels = [f"{op}\n{shape[0]}x{shape[1]} {short(dtype)}" for op, shape, dtype, _ in rows]
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            values = [v[name] / (v["bare launch"] if rows is realistic else 1.0) for _, _, _, v in rows]
            ax.bar([k + i * width for k in range(len(rows))], values, width, label=name)
        if rows is realistic:
            ax.axhline(TARGET, color="black", linestyle="--", linewidth=1, label=f"target for the op ({TARGET})")
        ax.set_xticks([k + width for k in range(len(rows))])
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"custom op vs bare launch vs PyTorch eager on {device.describe()}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="learner", help="learner (default), solutions, or a folder")
    parser.add_argument("--plot", default=str(REPO_ROOT / "bench-results" / "mastery-05-production-ready.png"))
    args = parser.parse_args(argv)
    if not device.is_cuda():
        print("This benchmark needs a CUDA GPU. Here kernels run in Triton's interpreter on the CPU, where a "
              "timing says nothing about a GPU (and the op's dispatch would look free next to the Python "
              "kernel). Run it on a GPU machine; the tests check correctness here.")
        return 0
    try:
        kernels = load_kernel(find_module(MODULE_ID), args.impl).namespace
    except LoadError as error:
        print(error)
        return 1
    if not callable(getattr(kernels, "layer_norm_gelu_op", None)):
        print("kernel.py does not register layer_norm_gelu_op yet: complete its TODOs first "
              f"(make check M={MODULE_ID}).")
        return 1
    realistic = measure(kernels, REALISTIC, gpu_ms)
    tiny = measure(kernels, TINY, host_us)
    print(table(realistic, tiny))
    plot(realistic, tiny, Path(args.plot))
    print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
