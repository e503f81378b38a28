"""What the operator costs: the custom op against its bare kernel launch and against PyTorch eager.

Run from the repository root, on a machine with an NVIDIA GPU:

    python tracks/mastery/05-production-ready/benchmark.py                   # your kernel.py
    python tracks/mastery/05-production-ready/benchmark.py --impl solutions  # the reference

For each operator (layer_norm_gelu, bias_gelu_residual, attention) and each size it times three
ways to compute the same forward result, all from one process, on the same inputs (attention comes
from attention_op.py beside kernel.py, given code, whatever --impl says):

    PyTorch eager   what a user writes without this module: F.gelu(F.layer_norm(...)),
                    residual + F.gelu(x + bias) (two and three kernels), or
                    F.scaled_dot_product_attention (PyTorch's fastest attention backend)
    bare launch     the kernel launched directly: allocate the outputs, kernel[grid](...), nothing
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
import importlib.util
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.language as tl

from grader import device
from grader.catalog import REPO_ROOT, find_module
from grader.loading import LoadError, load_kernel

MODULE_ID = "mastery/05-production-ready"
TARGET = 1.05  # custom op time / bare launch time, at realistic sizes
ROW_SIZES = {"realistic": [((32768, 4096), torch.bfloat16), ((16384, 8192), torch.float16),
                            ((8192, 4096), torch.float32), ((65536, 1024), torch.bfloat16)],
             "tiny": [((1, 64), torch.float32), ((8, 256), torch.float16), ((64, 1024), torch.bfloat16)]}
# attention shapes are (batch, heads, sequence, head dim)
ATTENTION_SIZES = {"realistic": [((4, 16, 4096, 64), torch.bfloat16), ((2, 16, 4096, 128), torch.float16)],
                   "tiny": [((1, 1, 16, 64), torch.float32), ((1, 2, 128, 64), torch.bfloat16)]}
HOST_CALLS = 1000
WARMUP_CALLS = 20  # first calls fill caches (the dispatcher's, the allocator's, Triton's launch path)


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


def given_attention():
    """attention_op.py of this folder, loaded once per process (test_kernel.py loads it under the
    same name): the attention operator is given code, the same whatever --impl is."""
    name = "production_ready_attention_op"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("attention_op.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def attention_variants(kernels, q, k, v):
    """name -> a function of no arguments that computes softmax(q k^T / sqrt(D)) v, by attention_op.py's
    kernel and operator (``kernels``, the kernel.py under test, holds no attention)."""
    kernels = given_attention()
    batch, heads, seq, head_dim = q.shape
    tiles = kernels.attention_tiles(q, "forward")
    grid = (-(-seq // tiles["BLOCK_M"]), batch * heads)
    scale = head_dim ** -0.5

    def bare():
        o = torch.empty_like(q)
        lse = torch.empty((batch, heads, seq), device=q.device, dtype=torch.float32)
        kernels.attention_forward_kernel[grid](q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                                               heads, 1, seq, seq, scale * kernels.LOG2E, HEAD_DIM=head_dim,
                                               CAUSAL=False, COMPUTE_DTYPE=tl.float32, **tiles)
        return o

    return {"PyTorch eager": lambda: F.scaled_dot_product_attention(q, k, v),
            "bare launch": bare,
            "custom op": lambda: kernels.attention(q, k, v)}


def row_inputs(op, shape, dtype, where):
    rows, n_cols = shape
    x = torch.randn(rows, n_cols, device=where, dtype=dtype)
    if op == "layer_norm_gelu":
        return x, torch.randn(n_cols, device=where, dtype=dtype), torch.randn(n_cols, device=where, dtype=dtype)
    return x, torch.randn(n_cols, device=where, dtype=dtype), torch.randn_like(x)


def attention_inputs(op, shape, dtype, where):
    return tuple(torch.randn(shape, device=where, dtype=dtype) for _ in range(3))


# operator -> (its three variants, how to make its inputs, its sizes)
OPERATORS = {"layer_norm_gelu": (layer_norm_gelu_variants, row_inputs, ROW_SIZES),
             "bias_gelu_residual": (bias_gelu_residual_variants, row_inputs, ROW_SIZES),
             "attention": (attention_variants, attention_inputs, ATTENTION_SIZES)}


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
    for _ in range(WARMUP_CALLS):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def measure(kernels, scale, timer, where="cuda", operators=tuple(OPERATORS)):
    """Rows of (op, shape, dtype, {variant: value}) for each of ``operators`` at its sizes of
    ``scale`` ("realistic" or "tiny"), timed by ``timer``."""
    rows = []
    for op in operators:
        variants, inputs, sizes = OPERATORS[op]
        for shape, dtype in sizes[scale]:
            fns = variants(kernels, *inputs(op, shape, dtype, where))
            check_agreement({name: fn() for name, fn in fns.items()}, dtype)
            rows.append((op, shape, dtype, {name: timer(fn) for name, fn in fns.items()}))
    return rows


def short(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


def host_bound_notes(realistic, tiny) -> list[str]:
    """A note for each missed row whose bare kernel runs shorter than the operator's host work per
    call measured at tiny sizes in this run: there the GPU finishes before the CPU has issued the
    next launch, so GPU time per call becomes host time per call."""
    host = {}
    for op, _, _, us in tiny:
        host[op] = min(host.get(op, float("inf")), us["custom op"])
    notes = []
    for op, shape, dtype, ms in realistic:
        kernel_us = ms["bare launch"] * 1000
        if ms["custom op"] / ms["bare launch"] > TARGET and kernel_us < host.get(op, 0.0):
            notes.append(f"Note: {op} {shape} {short(dtype)} runs {kernel_us:.0f} us on the GPU, less than the "
                         f"{host[op]:.0f} us of host work per call through the operator (tiny sizes below): "
                         "the GPU waits for the CPU. CUDA graphs (torch.compile(mode=\"reduce-overhead\")) "
                         "or fewer, larger calls remove that wait.")
    return notes


def table(realistic, tiny) -> str:
    lines = [f"{device.describe()}, torch {torch.__version__}",
             "", "Realistic sizes: GPU time per call (median ms); target: custom op / bare launch <= "
                 f"{TARGET}",
             f"{'operator':<20} {'shape':<18} {'dtype':<5} {'eager ms':>9} {'bare ms':>9} {'op ms':>9} "
             f"{'op / bare':>9} {'eager / op':>10}"]
    for op, shape, dtype, ms in realistic:
        ratio = ms["custom op"] / ms["bare launch"]
        mark = "ok" if ratio <= TARGET else "MISSED"
        lines.append(f"{op:<20} {str(shape):<18} {short(dtype):<5} {ms['PyTorch eager']:9.3f} "
                     f"{ms['bare launch']:9.3f} {ms['custom op']:9.3f} {ratio:9.3f} "
                     f"{ms['PyTorch eager'] / ms['custom op']:10.2f}  {mark}")
    lines += ["", f"Tiny sizes: host time per call (microseconds, {HOST_CALLS} calls back to back)",
              f"{'operator':<20} {'shape':<18} {'dtype':<5} {'eager us':>9} {'bare us':>9} {'op us':>9} "
              f"{'op - bare':>9}"]
    for op, shape, dtype, us in tiny:
        lines.append(f"{op:<20} {str(shape):<18} {short(dtype):<5} {us['PyTorch eager']:9.1f} "
                     f"{us['bare launch']:9.1f} {us['custom op']:9.1f} {us['custom op'] - us['bare launch']:9.1f}")
    notes = host_bound_notes(realistic, tiny)
    return "\n".join(lines + ([""] + notes if notes else []))


def plot(realistic, tiny, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["PyTorch eager", "bare launch", "custom op"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5))
    for ax, rows, unit, title in ((left, realistic, "GPU time / bare launch time", "realistic sizes (GPU time)"),
                                  (right, tiny, "host microseconds per call", "tiny sizes (launch overhead)")):
        labels = [f"{op}\n{'x'.join(map(str, shape))} {short(dtype)}" for op, shape, dtype, _ in rows]
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
    realistic = measure(kernels, "realistic", gpu_ms)
    tiny = measure(kernels, "tiny", host_us)
    print(table(realistic, tiny))
    plot(realistic, tiny, Path(args.plot))
    print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
