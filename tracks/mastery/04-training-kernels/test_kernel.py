"""Public tests for 04-training-kernels.  Run:  pytest tracks/mastery/04-training-kernels

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. Every differentiable function is tested through its backward: a case builds the
inputs and an upstream gradient dy, the harness runs the forward, then torch.autograd.grad with
dy, and compares the output and every gradient with float64 PyTorch (protocol Backward). Dropout
is random, so its cases are judged by statistics instead (every element 0 or x / (1 - p), the
keep rate within 6 standard deviations of 1 - p, the backward's mask the forward's). Each function
also passes torch.autograd.gradcheck in float64 on tiny inputs.

rms_norm() is the module's main function (SPEC); cases with spec=LAYER_NORM call layer_norm(),
and so on.
"""

import functools
import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.gradcheck import GradcheckError
from torch.optim.adamw import adamw as functional_adamw
from torch.optim.sgd import sgd as functional_sgd

from grader import device
from grader.cases import Backward, Calls, Case, Part, Spec, Steps, refusal
from grader.checks import autograd_reference, check_case, explained

# The public tests that are not graded cases, and why the grader does not run them.
PYTEST_ONLY = {
    "test_gradcheck_in_float64": "torch.autograd.gradcheck compares each backward with finite differences of the "
                                 "learner's own forward, calling it on many perturbed inputs; float64 inputs of the "
                                 "same shapes are graded by the 'float64' cases against float64 PyTorch, at a "
                                 "tolerance float32 arithmetic fails (dropout's by its own judge)",
    "test_dropout_same_seed_same_mask": "the same property (one seed gives one mask whatever the values, another "
                                        "seed another mask) is graded by the cases labelled 'the mask: the seed's "
                                        "alone', three calls each; this test shows it first on seeds 42 and 43",
    "test_dropout_backward_regenerates_the_forward_mask": "the DROPOUT cases of CASES grade the same property: "
                                                          "their judge fails a dx that drops other elements "
                                                          "than y; this test states it alone, on one call",
    "test_dropout_with_mask_backward_uses_the_saved_mask": "the DROPOUT_WITH_MASK cases grade the same values (dx "
                                                           "is dy / (1 - p) exactly where the returned mask is "
                                                           "True); this test also asks that the mask not require "
                                                           "grad, which the Backward protocol does not check",
    "test_norm_backward_needs_no_m_by_n_temporary": "it needs a CUDA GPU and reads torch.cuda.max_memory_allocated "
                                                    "around the backward in the test's own process; the grader "
                                                    "judges outputs, launches and time, and has no protocol that "
                                                    "measures the memory a call allocates",
    "test_adamw_is_one_launch_per_dtype": "it counts the Triton launches of one adamw() call with the grader's "
                                          "in-process monitor and asks for one per parameter dtype; no Spec field "
                                          "or protocol states a launch count, so the grader cannot grade it (on a "
                                          "GPU the speed of ADAMW's many-tensor benchmark is graded instead)",
    "test_unscale_grads_of_no_gradients": "with an empty list there is no tensor to launch a kernel on, so "
                                          "unscale_grads returns torch.zeros(1) without a launch, which the "
                                          "grader's evidence would judge as 'no Triton kernel ran'",
    "test_selective_scan_gradcheck_float64": "torch.autograd.gradcheck compares the reverse scan with finite "
                                             "differences of the learner's own forward scan; float64 inputs of "
                                             "the same shape are graded by the 'float64' SCAN case against "
                                             "float64 PyTorch, at a tolerance float32 arithmetic fails",
    "test_training_loop_follows_pytorch": "it runs training_loop.py, given code beside this file that no "
                                          "submission holds, chaining rms_norm, LoopLinear, silu_and_mul, "
                                          "unscale_grads and adamw with PyTorch's loss and casts in between for 30 "
                                          "steps against the same loop in PyTorch; a graded case calls one function "
                                          "of kernel.py, and rms_norm, silu_and_mul, unscale_grads and adamw are "
                                          "each graded by CASES (LoopLinear is given code)",
}

# A learner's wrapper builds a torch.autograd.Function; the grader's static policy allows that.
AUTOGRAD = frozenset({"autograd.Function"})


# ----------------------------------------------------------------------------------------------
# RMSNorm and LayerNorm
# ----------------------------------------------------------------------------------------------

def norm_x_and_dy(case, rand):
    """x (its layout from params) and the upstream gradient dy (its layout from params)."""
    params = case.params
    shape = params["shape"]
    n_cols = shape[-1]
    layout = params.get("layout", "contiguous")

    def values(*dims):
        return (rand.randn(*dims) * params.get("scale", 1.0) + params.get("offset", 0.0)).to(case.dtype)

    if layout == "constant":
        # every row holds one small integer: mean exact, variance exactly 0 (rstd = 1 / sqrt(eps))
        x = rand.uniform(*shape[:-1], 1, low=-4, high=4).round().expand(*shape).to(case.dtype).contiguous()
    elif layout == "zeros":
        x = torch.zeros(shape, dtype=case.dtype, device=rand.device)
    elif layout == "transposed":
        x = values(n_cols, *shape[:-1]).t()  # a row's elements are not adjacent in memory
    elif layout == "row-strided":
        x = values(*shape[:-1], n_cols + 16)[..., :n_cols]  # rows N + 16 elements apart
    else:
        x = values(*shape)
    dy_layout = params.get("dy", "contiguous")
    if dy_layout == "broadcast":
        # one row repeated (row stride 0), as autograd hands over the gradient of y.sum(0)
        dy = rand.randn(n_cols, dtype=case.dtype).expand(*shape)
    elif dy_layout == "transposed":
        dy = rand.randn(n_cols, *shape[:-1], dtype=case.dtype).t()
    else:
        dy = rand.randn(*shape, dtype=case.dtype)
    return x, dy


def norm_kwargs(case):
    return {"eps": case.params["eps"]} if "eps" in case.params else {}


def rms_norm_inputs(case, rand):
    """(x, weight, dy), and eps when the case sets one."""
    x, dy = norm_x_and_dy(case, rand)
    weight = rand.randn(x.shape[-1], dtype=case.dtype)
    return (x, weight, dy), norm_kwargs(case)


def layer_norm_inputs(case, rand):
    """(x, weight, bias, dy), and eps when the case sets one."""
    x, dy = norm_x_and_dy(case, rand)
    weight = rand.randn(x.shape[-1], dtype=case.dtype)
    bias = rand.randn(x.shape[-1], dtype=case.dtype)
    return (x, weight, bias, dy), norm_kwargs(case)


def rms_norm_forward(x, weight, eps=1e-6):
    """RMSNorm in plain PyTorch (the reference differentiates it in float64)."""
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def layer_norm_forward(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def torch_rms_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def torch_layer_norm(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def norm_bytes(n_params):
    """Forward: read x, write y. Backward: read x and dy, write dx. Plus the parameters (read twice,
    and their gradients written) and the float32 statistics (written, read back)."""
    def bytes_moved(case):
        *leading, n_cols = case.params["shape"]
        n_rows = math.prod(leading)
        statistics = n_params * n_rows * 4  # rstd (and mean) for each row
        return (5 * n_rows * n_cols + 3 * n_params * n_cols) * case.dtype.itemsize + 2 * statistics
    return bytes_moved


# dweight (and dbias) add up M products in float32: the rounding error of such a sum grows like
# sqrt(M) x 1e-7 x the terms' size (about 6e-5 at M = 32768 rows, more in an unlucky order), while
# the sum itself can be small (the products cancel). PyTorch's own LayerNorm backward was 3.8e-4
# off at 32768 x 4096 on an H100. The default float32 tolerance (1e-5 absolute) is for one rounding;
# the mistakes these outputs catch (a lost or overwritten partial sum) are off by whole terms.
SUM_OVER_ROWS = {torch.float32: (1e-3, 1e-4)}


def norm_bench_cases():
    # The last case has twice the rows of a 16384 x 8192 step: there the GPU's work (about 1 ms)
    # outweighs the host's (Python, autograd and three launches, 0.3 to 0.6 ms), which the smaller
    # bf16 steps do not (README, "Measured on a GPU").
    return tuple(Case({"shape": (32768, 4096)}, dtype) for dtype in (torch.float32, torch.bfloat16)) + \
        (Case({"shape": (16384, 8192)}, torch.bfloat16), Case({"shape": (32768, 8192)}, torch.bfloat16))


# One layer's sizes in training, where the host's share of a call is largest: `make bench` only.
TRAINING_SHAPES = tuple(Case({"shape": shape}, dtype) for dtype in (torch.bfloat16, torch.float32)
                        for shape in ((8192, 4096), (4096, 1024)))


def liger(function, **options):
    """Liger-Kernel's version of an API (``liger_kernel.transformers.functional``), an optional
    comparison of `make bench AGAINST=liger` (`pip install liger-kernel`); its loader raises
    ImportError where the package is not installed. ``options`` fill in what our API defaults
    (eps) and Liger's does not."""

    def load():
        from liger_kernel.transformers import functional

        return functools.partial(getattr(functional, function), **options)

    return load


ROWS_SHARED = ("more rows than backward programs (four under the interpreter, a few per multiprocessor "
               "on a GPU): each program walks several rows and must add all of them into its partial "
               "row of dweight.")
RMS_GRAD_X = "dx: the chain rule through rstd, which depends on the whole row (the correction term)"
WEIGHT_SUM = "the partial sums of dy * x_hat over each program's rows, and their final sum over programs"

SPEC = Spec(
    api="rms_norm",
    make_inputs=rms_norm_inputs,
    reference=autograd_reference(rms_norm_forward, wrt=(0, 1)),
    protocol=Backward(wrt=(0, 1)),
    output_names=("y", "grad_x", "grad_weight"),
    output_notes={"y": "the forward kernel", "grad_x": RMS_GRAD_X, "grad_weight": WEIGHT_SUM},
    output_tolerances={"grad_weight": SUM_OVER_ROWS},
    row_wise=True,
    bytes_moved=norm_bytes(1),
    torch_baseline=torch_rms_norm,
    # in_place=False: Liger's default writes dx over dy, which PyTorch and the course leave intact
    library_baselines={"Liger-Kernel": liger("liger_rms_norm", eps=1e-6, in_place=False)},
    bench_cases=norm_bench_cases(),
    bench_only_cases=TRAINING_SHAPES,
    ceiling="copy",
    target=0.70,
    allowed_torch_names=AUTOGRAD | {"tensor"},
)

LAYER_NORM = Spec(
    api="layer_norm",
    make_inputs=layer_norm_inputs,
    reference=autograd_reference(layer_norm_forward, wrt=(0, 1, 2)),
    protocol=Backward(wrt=(0, 1, 2)),
    output_names=("y", "grad_x", "grad_weight", "grad_bias"),
    output_notes={"y": "the forward kernel",
                  "grad_x": "dx: the chain rule through the mean and through rstd (two correction terms)",
                  "grad_weight": WEIGHT_SUM,
                  "grad_bias": "the partial sums of dy over each program's rows, and their final sum"},
    output_tolerances={"grad_weight": SUM_OVER_ROWS, "grad_bias": SUM_OVER_ROWS},
    row_wise=True,
    bytes_moved=norm_bytes(2),
    torch_baseline=torch_layer_norm,
    library_baselines={"Liger-Kernel": liger("liger_layer_norm", eps=1e-5)},
    bench_cases=norm_bench_cases(),
    bench_only_cases=TRAINING_SHAPES,
    ceiling="copy",
    target=0.70,
    allowed_torch_names=AUTOGRAD,
)


# ----------------------------------------------------------------------------------------------
# SwiGLU and SiLU-and-mul
# ----------------------------------------------------------------------------------------------

def strided(rand, shape, dtype, scale, layout):
    """A random tensor of ``shape`` stored as ``layout`` says (2-D layouts need a 2-D shape)."""
    if layout == "transposed":
        return rand.randn(shape[1], shape[0], dtype=dtype, scale=scale).t()
    if layout == "row-strided":
        return rand.randn(*shape[:-1], shape[-1] + 8, dtype=dtype, scale=scale)[..., :shape[-1]]
    return rand.randn(*shape, dtype=dtype, scale=scale)


def swiglu_inputs(case, rand):
    """(gate, up, dy): gate's spread from params["scale"] (large values saturate the sigmoid)."""
    shape, layout = case.params["shape"], case.params.get("layout", "contiguous")
    gate = strided(rand, shape, case.dtype, case.params.get("scale", 1.0), layout)
    up = strided(rand, shape, case.dtype, 1.0, layout)
    return (gate, up, rand.randn(*shape, dtype=case.dtype)), {}


def silu_and_mul_inputs(case, rand):
    """(x, dy) with x of last dimension 2H (gate, then up) and dy of last dimension H."""
    shape, layout = case.params["shape"], case.params.get("layout", "contiguous")
    x = strided(rand, shape, case.dtype, case.params.get("scale", 1.0), layout)
    return (x, rand.randn(*shape[:-1], shape[-1] // 2, dtype=case.dtype)), {}


def swiglu_forward(gate, up):
    return F.silu(gate) * up


def silu_and_mul_forward(x):
    half = x.shape[-1] // 2
    return F.silu(x[..., :half]) * x[..., half:]


def elementwise_bytes(accesses):
    """``accesses`` full-size tensors read or written, forward and backward together."""
    return lambda case: accesses * math.prod(case.params["shape"]) * case.dtype.itemsize


SILU_GRAD = "d silu(g) / dg = sigmoid(g) * (1 + g * (1 - sigmoid(g))), times dy * up"

SWIGLU = Spec(
    api="swiglu",
    make_inputs=swiglu_inputs,
    reference=autograd_reference(swiglu_forward, wrt=(0, 1)),
    protocol=Backward(wrt=(0, 1)),
    output_names=("y", "grad_gate", "grad_up"),
    output_notes={"grad_gate": SILU_GRAD, "grad_up": "dup = dy * silu(gate)"},
    # forward: read gate and up, write y; backward: read dy, gate and up, write dgate and dup
    bytes_moved=elementwise_bytes(8),
    torch_baseline=swiglu_forward,
    library_baselines={"Liger-Kernel": liger("liger_swiglu")},
    bench_cases=(Case({"shape": (8192, 14336)}, torch.bfloat16), Case({"shape": (1 << 26,)})),
    bench_only_cases=TRAINING_SHAPES,
    ceiling="copy",
    target=0.85,
    allowed_torch_names=AUTOGRAD,
)

SILU_AND_MUL = Spec(
    api="silu_and_mul",
    make_inputs=silu_and_mul_inputs,
    reference=autograd_reference(silu_and_mul_forward, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    output_names=("y", "grad_x"),
    output_notes={"grad_x": "dgate (first half of each row of dx) and dup (second half)"},
    # forward: read x (2H), write y (H); backward: read dy (H) and x (2H), write dx (2H)
    bytes_moved=lambda case: 4 * math.prod(case.params["shape"]) * case.dtype.itemsize,
    torch_baseline=silu_and_mul_forward,
    bench_cases=(Case({"shape": (8192, 2 * 14336)}, torch.bfloat16),),
    ceiling="copy",
    target=0.85,
    allowed_torch_names=AUTOGRAD,
)


# ----------------------------------------------------------------------------------------------
# ReLU
# ----------------------------------------------------------------------------------------------

def relu_inputs(case, rand):
    """(x, dy), with every fifth element of x exactly 0 (where PyTorch's gradient is 0) and, with
    params["nan"], every seventh (from the fourth) NaN, which torch.relu keeps."""
    shape = case.params["shape"]
    x = strided(rand, shape, case.dtype, 1.0, case.params.get("layout", "contiguous"))
    x = x.clone()  # keeps the layout
    index = torch.arange(x.numel(), device=rand.device)
    x[(index % 5 == 0).reshape(shape)] = 0
    if case.params.get("nan"):
        x[(index % 7 == 3).reshape(shape)] = float("nan")
    return (x, rand.randn(*shape, dtype=case.dtype)), {}


RELU = Spec(
    api="relu",
    make_inputs=relu_inputs,
    reference=autograd_reference(torch.relu, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    output_names=("y", "grad_x"),
    output_notes={"grad_x": "the mask from the saved output: dy where y > 0, else 0 (0 at x = 0 too)"},
    bytes_moved=elementwise_bytes(5),  # read x, write y; read dy and y, write dx
    torch_baseline=torch.relu,
    bench_cases=(Case({"shape": (1 << 28,)}, torch.bfloat16),),
    ceiling="copy",
    allowed_torch_names=AUTOGRAD,
)

RELU_NAN = ("NaN at every seventh element: torch.relu keeps it (NaN in, NaN out) and passes dy back there, as "
            "for x > 0. tl.maximum(x, 0.0) and tl.where(x > 0, x, 0.0) both turn it into 0; "
            "tl.where(x <= 0, 0.0, x) keeps it, since every comparison with NaN is False.")


# ----------------------------------------------------------------------------------------------
# Dropout: judged by statistics
# ----------------------------------------------------------------------------------------------

def dropout_inputs(case, rand):
    """(x, dy) and the keywords p and seed. x and dy have no zeros (randn), so every element shows
    whether it was kept (x / (1 - p)) or dropped (0)."""
    shape = case.params["shape"]
    x = strided(rand, shape, case.dtype, 1.0, case.params.get("layout", "contiguous"))
    return (x, rand.randn(*shape, dtype=case.dtype)), {"p": case.params["p"], "seed": case.params["seed"]}


def dropout_expectation(x, p=0.5, seed=0):
    """Not what dropout returns (it is random) but its expectation: the judge below decides, and
    this only fixes the number of outputs."""
    return x * 1.0


def dropout_with_mask_expectation(x, p=0.5, seed=0):
    return x * 1.0, torch.ones(x.shape, dtype=torch.bool, device=x.device)


def torch_dropout(x, p=0.5, seed=0):
    return F.dropout(x, p, training=True)


def torch_dropout_with_mask(x, p=0.5, seed=0):
    return torch.ops.aten.native_dropout(x, p, True)


# A correct kernel fails a 6-sigma bound with probability 2e-9 per check.
SIGMAS = 6.0


def _outside(count: int, n: int, prob: float, variance: float) -> bool:
    return abs(count - n * prob) > SIGMAS * math.sqrt(max(variance, 0.0)) + 0.5


def _scaled_or_zero(out, source, scale, dtype):
    """(kept, dropped, neither) masks: out equals source * scale, out is 0, or out is something else."""
    got, want = out.detach().double().flatten(), (source.detach().double() * scale).flatten()
    atol, rtol = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}.get(dtype, (1e-6, 1e-5))
    kept = (got - want).abs() <= atol + rtol * want.abs()
    dropped = got == 0
    return kept & ~dropped, dropped, ~(kept | dropped)


def _first(mask) -> int:
    return int(mask.nonzero()[0, 0])


def judge_dropout(outputs, references, args, kwargs, case):
    """The problems of a dropout result (y, [mask,] grad_x) given x and dy, p and seed."""
    x, dy = args[0], args[-1]
    p = kwargs.get("p", 0.5)
    y, grad = outputs[0], outputs[-1]
    mask = outputs[1] if len(outputs) == 3 else None
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    problems = []
    for name, out in (("y", y), ("grad_x", grad)):
        if out.shape != x.shape or out.dtype != x.dtype:
            problems.append(f"{name} has shape {tuple(out.shape)} and dtype {out.dtype}; expected x's, "
                            f"{tuple(x.shape)} and {x.dtype}.")
    if mask is not None and (mask.shape != x.shape or mask.dtype != torch.bool):
        problems.append(f"mask has shape {tuple(mask.shape)} and dtype {mask.dtype}; expected x's shape "
                        "and torch.bool (True where the element is kept).")
    if problems or x.numel() == 0:
        return problems

    kept_y, dropped_y, neither_y = _scaled_or_zero(y, x, scale, x.dtype)
    kept_g, dropped_g, neither_g = _scaled_or_zero(grad, dy, scale, x.dtype)
    for name, neither, source in (("y", neither_y, "x"), ("grad_x", neither_g, "dy")):
        if bool(neither.any()):
            i = _first(neither)
            got = (y if name == "y" else grad).flatten()[i].item()
            problems.append(f"{name} holds {int(neither.sum())} element(s) that are neither 0 nor "
                            f"{source} / (1 - p) = {source} * {scale:g} (first at flat index {i}: {got:g}). "
                            "Keep an element as x / (1 - p), drop it as 0.")
    if problems:
        return problems

    # Where x or dy is 0 (or too small to tell), kept and dropped look alike: leave those out.
    known = (kept_y | dropped_y) & (kept_g | dropped_g) & (x.detach().flatten() != 0) \
        & (dy.detach().flatten() != 0)
    keep = kept_y & known
    differ = known & (kept_y != kept_g)
    if bool(differ.any()):
        problems.append(f"the backward dropped other elements than the forward: {int(differ.sum())} of "
                        f"{int(known.sum())} positions differ (first at flat index {_first(differ)}). "
                        "dx must use the very mask of y: the same seed and the same offset for each "
                        "element, regenerated (or saved).")
    if mask is not None:
        flat_mask = mask.detach().flatten()
        wrong = known & (flat_mask != kept_y)
        if bool(wrong.any()):
            problems.append(f"mask disagrees with y at {int(wrong.sum())} position(s) (first at flat index "
                            f"{_first(wrong)}): it must be True exactly where y kept x.")
    n, kept = int(known.sum()), int(keep.sum())
    q = 1.0 - p
    if n and _outside(kept, n, q, n * p * q):
        problems.append(f"the keep rate is {kept / n:.4f} ({kept} of {n} elements kept), but with p = {p} it "
                        f"should be 1 - p = {q:.4f} within {SIGMAS:g} standard deviations "
                        f"({SIGMAS * math.sqrt(n * p * q) / n:.4f}). Keep an element when its uniform "
                        "number is >= p: then it is kept with probability 1 - p.")
    if problems:
        return problems
    problems += _dependence(keep, known, p)
    return problems


def _dependence(keep, known, p):
    """Problems when the keep decisions of nearby elements are not independent: neighbours kept
    together too often, or the whole pattern repeating every few elements (offsets that restart
    in each block, or a seed that stands in for the offset)."""
    q = 1.0 - p
    if not 0.02 < p < 0.98:
        return []
    pairs = known[:-1] & known[1:]
    n_pairs = int(pairs.sum())
    both = int((keep[:-1] & keep[1:] & pairs).sum())
    # overlapping pairs: Var = n (q^2 - q^4) + 2 n (q^3 - q^4)
    if n_pairs > 100 and _outside(both, n_pairs, q * q, n_pairs * ((q * q - q ** 4) + 2 * (q ** 3 - q ** 4))):
        return [f"neighbouring elements are kept together {both / n_pairs:.4f} of the time; independent "
                f"decisions give (1 - p)^2 = {q * q:.4f}. Each element needs its own random number: "
                "tl.rand(seed, offsets) with the element's own offset."]
    period = 16
    while period <= keep.numel() // 2:
        same = known[:-period] & known[period:]
        n_same = int(same.sum())
        if n_same >= 256:
            agree = int(((keep[:-period] == keep[period:]) & same).sum()) / n_same
            if agree > 0.99:
                return [f"the mask repeats every {period} elements ({agree:.1%} of the decisions equal the "
                        f"one {period} elements earlier): the random numbers restart in each block. Draw "
                        "with the element's global offset (program start + lane), not the lane alone."]
        period *= 2
    return []


DROPOUT = Spec(
    api="dropout",
    make_inputs=dropout_inputs,
    reference=autograd_reference(dropout_expectation, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    judge=judge_dropout,
    output_names=("y", "grad_x"),
    bytes_moved=elementwise_bytes(4),  # read x, write y; read dy, write dx: no mask in memory
    torch_baseline=torch_dropout,
    bench_cases=(Case({"shape": (1 << 28,), "p": 0.1, "seed": 1234}, torch.bfloat16),),
    ceiling="copy",
    allowed_torch_names=AUTOGRAD,
)

DROPOUT_WITH_MASK = Spec(
    api="dropout_with_mask",
    make_inputs=dropout_inputs,
    reference=autograd_reference(dropout_with_mask_expectation, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    judge=judge_dropout,
    output_names=("y", "mask", "grad_x"),
    # read x, write y and the 1-byte mask; read dy and the mask, write dx
    bytes_moved=lambda case: (4 * case.dtype.itemsize + 2) * math.prod(case.params["shape"]),
    torch_baseline=torch_dropout_with_mask,
    bench_cases=(Case({"shape": (1 << 28,), "p": 0.1, "seed": 1234}, torch.bfloat16),),
    ceiling="copy",
    allowed_torch_names=AUTOGRAD,
)


# The mask itself: a function of (seed, element offset) alone. Cases with these specs call the
# function three times: on x with a seed, on other values of the same shape with the same seed
# (the same elements must be dropped: the mask does not depend on the data), and on x with
# another seed (a mask about as different as two independent ones). The seeds come from the
# case's random numbers, so no seed is special.

def dropout_calls_inputs(case, rand):
    """Three calls' (args, kwargs): (x, seed), (other values, seed), (x, another seed), with p."""
    shape, layout, p = case.params["shape"], case.params.get("layout", "contiguous"), case.params["p"]
    x = strided(rand, shape, case.dtype, 1.0, layout)
    other = strided(rand, shape, case.dtype, 1.0, layout)
    seed = int(rand.uniform(1, low=0.0, high=2.0 ** 31).item())
    another = seed + 1 + int(rand.uniform(1, low=0.0, high=2.0 ** 20).item())
    return tuple(((values,), {"p": p, "seed": drawn}) for values, drawn in
                 ((x, seed), (other, seed), (x, another))), {}


def dropout_calls_expectation(*calls):
    """The expectation of each call's outputs (the judge decides): it fixes their number."""
    return tuple(args[0] * 1.0 for args, _ in calls)


def dropout_with_mask_calls_expectation(*calls):
    return tuple(out for args, _ in calls for out in dropout_with_mask_expectation(args[0]))


def judge_dropout_calls(outputs, references, args, kwargs, case):
    """The problems of three dropout calls (``dropout_calls_inputs``): each a dropout (0 or
    x / (1 - p), the keep rate near 1 - p, a mask that agrees with y), the same seed dropping the
    same elements of other values, another seed dropping other elements."""
    per_call = len(outputs) // len(args)
    problems, keeps = [], []
    for index, ((x,), call_kwargs) in enumerate(args):
        y = outputs[index * per_call]
        mask = outputs[index * per_call + 1] if per_call == 2 else None
        p = call_kwargs["p"]
        scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
        kept, dropped, neither = _scaled_or_zero(y, x, scale, x.dtype)
        call = f"call {index + 1} (seed {call_kwargs['seed']})"
        if bool(neither.any()):
            problems.append(f"y of {call} holds {int(neither.sum())} element(s) that are neither 0 nor x / (1 - p) "
                            f"(first at flat index {_first(neither)}). Keep an element as x / (1 - p), drop it as 0.")
            continue
        known = (kept | dropped) & (x.detach().flatten() != 0)
        keep = kept & known
        n, n_kept, q = int(known.sum()), int(keep.sum()), 1.0 - p
        if n and _outside(n_kept, n, q, n * p * q):
            problems.append(f"{call} kept {n_kept} of {n} elements ({n_kept / n:.4f}); with p = {p} about 1 - p = "
                            f"{q:.4f} should be kept. Keep an element when its uniform number is >= p.")
        if mask is not None and bool((known & (mask.detach().flatten() != keep)).any()):
            problems.append(f"the mask of {call} disagrees with its y: it must be True exactly where y kept x.")
        keeps.append((keep, known))
    if problems:
        return problems
    (first, known_first), (same_seed, known_same), (other_seed, known_other) = keeps
    seed, another = args[0][1]["seed"], args[2][1]["seed"]
    both = known_first & known_same
    differ = both & (first != same_seed)
    if bool(differ.any()):
        problems.append(f"with the same seed ({seed}), x and other values of its shape lost different elements: "
                        f"{int(differ.sum())} of {int(both.sum())} positions differ (first at flat index "
                        f"{_first(differ)}). The mask must be "
                        "a function of the seed and each element's offset alone, never of the values: keep where "
                        "tl.rand(seed, offsets) >= p.")
    both = known_first & known_other
    n, n_differ = int(both.sum()), int((both & (first != other_seed)).sum())
    p = args[0][1]["p"]
    chance = 2 * p * (1 - p)  # two independent masks differ at an element with this probability
    if n and _outside(n_differ, n, chance, n * chance * (1 - chance)):
        problems.append(f"seeds {seed} and {another} gave masks that differ at {n_differ} of {n} elements "
                        f"({n_differ / n:.4f}); two independent masks differ at about 2p(1 - p) = {chance:.4f} of "
                        "them. Pass the seed itself to tl.rand: another seed must give another mask.")
    return problems


DROPOUT_SEEDS = Spec(
    api="dropout",
    make_inputs=dropout_calls_inputs,
    reference=dropout_calls_expectation,
    protocol=Calls(),
    judge=judge_dropout_calls,
    output_names=("y", "y_other_values", "y_other_seed"),
    torch_baseline=torch_dropout,
    allowed_torch_names=AUTOGRAD,
)

DROPOUT_WITH_MASK_SEEDS = Spec(
    api="dropout_with_mask",
    make_inputs=dropout_calls_inputs,
    reference=dropout_with_mask_calls_expectation,
    protocol=Calls(),
    judge=judge_dropout_calls,
    output_names=("y", "mask", "y_other_values", "mask_other_values", "y_other_seed", "mask_other_seed"),
    torch_baseline=torch_dropout_with_mask,
    allowed_torch_names=AUTOGRAD,
)


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------

VARIANCE_ZERO = ("every row is constant, so x_hat = 0, rstd = 1 / sqrt(eps) (about 316) and any error "
                 "in the saved statistics is multiplied by it.")
SATURATED = ("gate values up to about +-150: exp() overflows float32 past 88. 1 / (1 + exp(-g)) still "
             "gives 0 or 1; exp(g) / (1 + exp(g)) gives inf / inf = NaN.")
SEED_ONLY = ("three calls: x with a seed, other values with the same seed (the same elements must be dropped), "
             "and x with another seed (other elements): the mask comes from the seed and the element's offset "
             "alone, never from the values.")
STATISTICS = ("dropout is random, so it is judged by statistics: every element 0 or x / (1 - p), the keep "
              "rate near 1 - p, each element decided on its own, and the backward dropping exactly the "
              "elements the forward dropped.")

# LayerNorm with N = 1: dx = rstd * (g - mean(g) - ...) is exactly 0, but rstd = 1 / sqrt(eps) = 316
# multiplies the rounding of g - mean(g): a GPU fuses g = weight * dy into that subtraction (one
# FMA, no rounding of the product), which leaves about half an ulp of g, so dx ~ 2e-5 * |g|.
N_EQUALS_ONE = {torch.float32: (1e-4, 1e-4)}

CASES = [
    Case({"shape": (16, 100)}, label="masked lanes, rows shared", hint=ROWS_SHARED),
    # With N = 1, dx = rstd * g * eps / (x^2 + eps): at the default eps (1e-6) a difference of two
    # nearly equal terms, whose float32 rounding rstd (up to 1000) magnifies past the tolerance.
    # A larger eps keeps the case about one-element rows, not about that cancellation.
    Case({"shape": (5, 1), "eps": 0.5}, label="N = 1"),
    Case({"shape": (1, 7)}, label="one short row"),
    Case({"shape": (8, 64)}, label="power of two"),
    Case({"shape": (3, 4, 33)}, label="3-D, rows shared", hint=ROWS_SHARED),
    Case({"shape": (37, 48)}, torch.float16, label="rows shared unevenly", hint=ROWS_SHARED),
    Case({"shape": (19, 130)}, torch.bfloat16, label="bf16, masked lanes", hint=ROWS_SHARED),
    Case({"shape": (0, 16)}, label="no rows: dweight = 0",
         hint="no rows, so dx is empty and dweight is a sum of nothing: zeros, written by a kernel."),
    Case({"shape": (6, 80), "layout": "zeros"}, label="zero rows: rstd = 1 / sqrt(eps)",
         hint="x = 0, so rstd = 1 / sqrt(eps) = 1000 and dx = rstd * weight * dy exactly."),
    Case({"shape": (12, 96), "eps": 0.1, "scale": 0.2}, label="eps matters"),
    Case({"shape": (20, 70), "layout": "row-strided"}, label="strided rows"),
    Case({"shape": (24, 40), "layout": "transposed"}, torch.float16, label="non-contiguous x"),
    Case({"shape": (10, 50), "dy": "transposed"}, label="non-contiguous dy",
         hint="dy is a transpose: read it with its own strides, or make it contiguous first."),
    Case({"shape": (9, 36), "dy": "broadcast"}, label="dy with row stride 0",
         hint="dy is one row repeated (stride 0), as autograd hands over the gradient of y.sum(0)."),
    Case({"shape": (64, 1000)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (6000, 96)}, label="many short rows", cuda_only=True, hint=ROWS_SHARED),
    Case({"shape": (2500, 2000)}, torch.float16, label="many rows", cuda_only=True, hint=ROWS_SHARED),
    Case({"shape": (4096, 4096)}, label="large", cuda_only=True),
    Case({"shape": (2048, 16384)}, torch.float16, label="long rows", cuda_only=True),
    Case({"shape": (64, 65536)}, label="longest row", cuda_only=True),

    Case({"shape": (16, 100)}, spec=LAYER_NORM, label="masked lanes, rows shared", hint=ROWS_SHARED),
    Case({"shape": (5, 1)}, spec=LAYER_NORM, label="N = 1: x_hat = 0", tolerances=N_EQUALS_ONE),
    Case({"shape": (8, 64)}, spec=LAYER_NORM, label="power of two"),
    Case({"shape": (2, 3, 5, 48)}, torch.float16, spec=LAYER_NORM, label="4-D, rows shared", hint=ROWS_SHARED),
    Case({"shape": (19, 130)}, torch.bfloat16, spec=LAYER_NORM, label="bf16, masked lanes", hint=ROWS_SHARED),
    Case({"shape": (0, 16)}, spec=LAYER_NORM, label="no rows: dweight = dbias = 0"),
    Case({"shape": (10, 33), "layout": "constant"}, spec=LAYER_NORM, label="constant rows", hint=VARIANCE_ZERO),
    Case({"shape": (16, 300), "offset": 3.0}, spec=LAYER_NORM, label="mean far from 0",
         hint="the rows' mean is 3: dx must subtract the mean of grad_x_hat, dbias is the sum of dy."),
    Case({"shape": (20, 70), "layout": "row-strided"}, torch.float16, spec=LAYER_NORM, label="strided rows"),
    Case({"shape": (24, 40), "layout": "transposed", "dy": "transposed"}, spec=LAYER_NORM,
         label="non-contiguous x and dy"),
    Case({"shape": (6000, 100)}, spec=LAYER_NORM, label="many short rows", cuda_only=True, hint=ROWS_SHARED),
    Case({"shape": (4096, 4096)}, torch.bfloat16, spec=LAYER_NORM, label="large", cuda_only=True),
    Case({"shape": (512, 16384)}, spec=LAYER_NORM, label="long rows", cuda_only=True),

    Case({"shape": (1000,)}, spec=SWIGLU, label="1-D, a partial block"),
    Case({"shape": (7, 300)}, torch.float16, spec=SWIGLU, label="2-D"),
    Case({"shape": (3, 5, 70), "scale": 3.0}, torch.bfloat16, spec=SWIGLU, label="3-D"),
    Case({"shape": (0, 8)}, spec=SWIGLU, label="empty"),
    Case({"shape": (40, 30), "scale": 50.0}, spec=SWIGLU, label="saturated sigmoid", hint=SATURATED),
    Case({"shape": (30, 40), "layout": "transposed"}, spec=SWIGLU, label="non-contiguous"),
    Case({"shape": (4096, 11008)}, torch.bfloat16, spec=SWIGLU, label="large", cuda_only=True),

    Case({"shape": (6, 200)}, spec=SILU_AND_MUL, label="H = 100"),
    Case({"shape": (1, 2)}, spec=SILU_AND_MUL, label="H = 1"),
    Case({"shape": (3, 4, 2100)}, torch.float16, spec=SILU_AND_MUL, label="3-D, two column blocks"),
    Case({"shape": (9, 90), "scale": 50.0}, torch.bfloat16, spec=SILU_AND_MUL, label="saturated sigmoid",
         hint=SATURATED),
    Case({"shape": (5, 64), "layout": "row-strided"}, spec=SILU_AND_MUL, label="strided rows"),
    Case({"shape": (2048, 2 * 11008)}, torch.bfloat16, spec=SILU_AND_MUL, label="large", cuda_only=True),

    Case({"shape": (1000,)}, spec=RELU, label="1-D, exact zeros",
         hint="x = 0 exactly at every fifth element, where the gradient is 0 (as in PyTorch)."),
    Case({"shape": (33, 65)}, torch.float16, spec=RELU, label="2-D"),
    Case({"shape": (30, 40), "layout": "transposed"}, torch.bfloat16, spec=RELU, label="non-contiguous"),
    Case({"shape": (1000,), "nan": True}, spec=RELU, label="NaN entries", hint=RELU_NAN),
    Case({"shape": (33, 65), "nan": True}, torch.float16, spec=RELU, label="NaN entries", hint=RELU_NAN),
    Case({"shape": (30, 40), "layout": "transposed", "nan": True}, torch.bfloat16, spec=RELU,
         label="NaN entries, non-contiguous", hint=RELU_NAN),
    Case({"shape": (1 << 24,)}, spec=RELU, label="large", cuda_only=True),

    Case({"shape": (64, 100), "p": 0.3, "seed": 11}, spec=DROPOUT, label="p = 0.3", hint=STATISTICS),
    Case({"shape": (10_000,), "p": 0.1, "seed": 2}, torch.float16, spec=DROPOUT, label="p = 0.1",
         hint=STATISTICS),
    Case({"shape": (3, 50, 70), "p": 0.75, "seed": 12345678901}, torch.bfloat16, spec=DROPOUT,
         label="p = 0.75, a 64-bit seed", hint=STATISTICS),
    Case({"shape": (0,), "p": 0.5, "seed": 1}, spec=DROPOUT, label="empty"),
    Case({"shape": (500,), "p": 0.0, "seed": 3}, spec=DROPOUT, label="p = 0 keeps everything",
         hint="p = 0: y must be x exactly, whatever the random numbers (tl.rand can return 0.0)."),
    Case({"shape": (500,), "p": 1.0, "seed": 3}, spec=DROPOUT, label="p = 1 drops everything",
         hint="p = 1: y must be all zeros, with no 0 * inf = NaN from 1 / (1 - p)."),
    Case({"shape": (70, 60), "p": 0.5, "seed": 5, "layout": "transposed"}, spec=DROPOUT,
         label="non-contiguous", hint=STATISTICS),
    Case({"shape": (4096, 8192), "p": 0.1, "seed": 7}, torch.bfloat16, spec=DROPOUT, label="large",
         cuda_only=True),

    Case({"shape": (64, 100), "p": 0.3, "seed": 11}, spec=DROPOUT_WITH_MASK, label="p = 0.3",
         hint=STATISTICS),
    Case({"shape": (5000,), "p": 0.6, "seed": 9}, torch.float16, spec=DROPOUT_WITH_MASK, label="p = 0.6",
         hint=STATISTICS),
    Case({"shape": (300,), "p": 0.0, "seed": 3}, spec=DROPOUT_WITH_MASK, label="p = 0 keeps everything"),
    Case({"shape": (40, 50), "p": 0.2, "seed": 4, "layout": "transposed"}, torch.bfloat16,
         spec=DROPOUT_WITH_MASK, label="non-contiguous", hint=STATISTICS),
    Case({"shape": (4096, 8192), "p": 0.1, "seed": 7}, torch.bfloat16, spec=DROPOUT_WITH_MASK, label="large",
         cuda_only=True),

    Case({"shape": (40, 50), "p": 0.5}, spec=DROPOUT_SEEDS, label="the mask: the seed's alone", hint=SEED_ONLY),
    Case({"shape": (3000,), "p": 0.2}, torch.float16, spec=DROPOUT_SEEDS, label="the mask: the seed's alone",
         hint=SEED_ONLY),
    Case({"shape": (30, 70), "p": 0.4, "layout": "transposed"}, torch.bfloat16, spec=DROPOUT_WITH_MASK_SEEDS,
         label="the mask: the seed's alone", hint=SEED_ONLY),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


# ----------------------------------------------------------------------------------------------
# gradcheck: each backward against finite differences of its own forward, in float64
# ----------------------------------------------------------------------------------------------

def _leaf(*shape):
    return torch.randn(*shape, dtype=torch.float64, device=device.torch_device(), requires_grad=True)


GRADCHECKS = {
    "rms_norm": lambda k: (k.api("rms_norm"), (_leaf(3, 5), _leaf(5))),
    "layer_norm": lambda k: (k.api("layer_norm"), (_leaf(3, 5), _leaf(5), _leaf(5))),
    "swiglu": lambda k: (k.api("swiglu"), (_leaf(2, 7), _leaf(2, 7))),
    "silu_and_mul": lambda k: (k.api("silu_and_mul"), (_leaf(3, 8),)),
    "relu": lambda k: (k.api("relu"), (_leaf(4, 5),)),
    "dropout": lambda k: (lambda x: k.api("dropout")(x, 0.4, 1234), (_leaf(4, 6),)),
    "dropout_with_mask": lambda k: (lambda x: k.api("dropout_with_mask")(x, 0.4, 1234)[0], (_leaf(4, 6),)),
}


@pytest.mark.parametrize("api", list(GRADCHECKS))
def test_gradcheck_in_float64(kernel, api):
    torch.manual_seed(0)
    fn, inputs = GRADCHECKS[api](kernel)
    with explained(kernel, f"gradcheck of {api}()"):
        try:
            torch.autograd.gradcheck(fn, inputs, fast_mode=True)
        except GradcheckError as error:
            raise AssertionError(
                f"{api}: the gradients of your backward differ from finite differences of your forward "
                f"(float64 inputs: the kernels must compute in float64 when given float64, see "
                f"compute_dtype).\n{str(error)[:600]}") from None


# ----------------------------------------------------------------------------------------------
# Dropout's mask: the same seed, the same mask; the backward's mask, the forward's
# ----------------------------------------------------------------------------------------------

def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, device=device.torch_device())


def test_dropout_same_seed_same_mask(kernel):
    dropout = kernel.api("dropout")
    x = _x(40, 50)
    with explained(kernel, "dropout()"):
        first, again, other = dropout(x, 0.5, seed=42), dropout(x, 0.5, seed=42), dropout(x, 0.5, seed=43)
    if not torch.equal(first != 0, again != 0):
        raise AssertionError("two calls with the same seed dropped different elements: the mask must be "
                             "a function of (seed, element offset) only, so that it can be regenerated.")
    differ = float(((first != 0) != (other != 0)).float().mean())
    if differ < 0.3:
        raise AssertionError(f"seeds 42 and 43 gave masks that differ at only {differ:.0%} of the elements "
                             "(about 50% expected): pass the seed to tl.rand.")


def test_dropout_backward_regenerates_the_forward_mask(kernel):
    x, dy = _x(30, 70).requires_grad_(True), _x(30, 70)
    with explained(kernel, "dropout() and its backward"):
        y = kernel.api("dropout")(x, 0.25, seed=7)
        (grad,) = torch.autograd.grad(y, x, dy)
    expected = torch.where(y.detach() != 0, dy / 0.75, torch.zeros_like(dy))
    if not torch.allclose(grad, expected, rtol=1e-5, atol=1e-6):
        raise AssertionError("dx is not dy / (1 - p) on the elements the forward kept and 0 elsewhere: the "
                             "backward must regenerate the forward's mask (same seed, same offsets).")


def test_dropout_with_mask_backward_uses_the_saved_mask(kernel):
    x, dy = _x(30, 70).requires_grad_(True), _x(30, 70)
    with explained(kernel, "dropout_with_mask() and its backward"):
        y, mask = kernel.api("dropout_with_mask")(x, 0.25, seed=7)
        if mask.requires_grad:
            raise AssertionError("the mask requires grad: mark it non-differentiable "
                                 "(ctx.mark_non_differentiable(mask)).")
        (grad,) = torch.autograd.grad(y, x, dy)
    expected = torch.where(mask, dy / 0.75, torch.zeros_like(dy))
    if not torch.allclose(grad, expected, rtol=1e-5, atol=1e-6):
        raise AssertionError("dx is not dy / (1 - p) where the mask is True and 0 elsewhere.")


@pytest.mark.skipif(not device.is_cuda(), reason="measures GPU memory; needs a CUDA GPU")
@pytest.mark.parametrize("api", ["rms_norm", "layer_norm"])
def test_norm_backward_needs_no_m_by_n_temporary(kernel, api):
    n_rows, n_cols = 16384, 1024
    x = _x(n_rows, n_cols, dtype=torch.float16).requires_grad_(True)
    params = [_x(n_cols, dtype=torch.float16).requires_grad_(True) for _ in range(2 if api == "layer_norm" else 1)]
    y = kernel.api(api)(x, *params)
    dy = torch.randn_like(y)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    torch.autograd.grad(y, [x, *params], dy)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    allowed = x.numel() * x.element_size() + x.numel() * 2  # dx, plus half an fp32 M x N tensor
    assert extra <= allowed, (
        f"the backward allocated {extra / 2**20:.0f} MiB beside its inputs; dx needs "
        f"{x.numel() * x.element_size() / 2**20:.0f} MiB. Keep the weight gradient's partial sums in "
        "registers, one partial row per program, not an M x N tensor of products.")


# ------------------------------------------------------------------------------------------------
# Optimizers
# ------------------------------------------------------------------------------------------------


def optimizer_inputs(case, rand):
    """params (case.dtype), one list of gradients per step, and float32 states.

    params: "sizes" (one shape per tensor), "steps", "param_scale", "grad_scale", "state"
    ("zeros", or "resumed": states as after earlier steps), and the hyperparameters."""
    p = case.params
    sizes, steps = p["sizes"], p.get("steps", 3)
    params = [rand.randn(*size, dtype=case.dtype, scale=p.get("param_scale", 1.0)) for size in sizes]
    grads = [[rand.randn(*size, dtype=case.dtype, scale=p.get("grad_scale", 1.0)) for size in sizes]
             for _ in range(steps)]
    if case.spec is SGD:
        # what a buffer holds before the first step must not matter: PyTorch starts from the gradient
        buffers = [rand.randn(*size, scale=100.0) for size in sizes]
        kwargs = {name: p.get(name, default) for name, default in
                  (("lr", 0.05), ("momentum", 0.0), ("dampening", 0.0), ("nesterov", False), ("weight_decay", 0.0))}
        return (params, grads, buffers), kwargs
    resumed = p.get("state") == "resumed"
    exp_avgs = [rand.randn(*size, scale=0.1) if resumed else torch.zeros(size, device=rand.device)
                for size in sizes]
    exp_avg_sqs = [rand.uniform(*size, low=0.0, high=0.01) if resumed else torch.zeros(size, device=rand.device)
                   for size in sizes]
    kwargs = {name: p.get(name, default) for name, default in
              (("lr", 1e-2), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("weight_decay", 0.0))}
    return (params, grads, exp_avgs, exp_avg_sqs), kwargs


def adamw_reference(params, grads, exp_avgs, exp_avg_sqs, *, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.AdamW, every step, on the float64 copies (its state is the copies themselves)."""
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), eps=eps,
                                  weight_decay=weight_decay, foreach=False)
    for param, exp_avg, exp_avg_sq in zip(params, exp_avgs, exp_avg_sqs):
        optimizer.state[param] = {"step": torch.tensor(0.0), "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    for step_grads in grads:
        for param, grad in zip(params, step_grads):
            param.grad = grad
        optimizer.step()


def sgd_reference(params, grads, momentum_buffers, *, lr, momentum, dampening, nesterov, weight_decay):
    """torch.optim.SGD, every step, on the float64 copies; its buffers are copied back at the end."""
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening,
                                nesterov=nesterov, weight_decay=weight_decay, foreach=False)
    for step_grads in grads:
        for param, grad in zip(params, step_grads):
            param.grad = grad
        optimizer.step()
    if momentum:
        for param, buffer in zip(params, momentum_buffers):
            buffer.copy_(optimizer.state[param]["momentum_buffer"])


def torch_adamw(params, grads, exp_avgs, exp_avg_sqs, *, step, lr, beta1, beta2, eps, weight_decay):
    """PyTorch's AdamW with the same contract: its fused kernel (what torch.optim.AdamW(fused=True)
    runs) on a GPU, without the optimizer object's Python bookkeeping. PyTorch keeps the state in the
    parameter's dtype, so 16-bit parameters are updated through float32 copies."""
    where = params[0].device if params else torch.device("cpu")
    params32 = [p if p.dtype == torch.float32 else p.float() for p in params]
    grads32 = [g if g.dtype == torch.float32 else g.float() for g in grads]
    steps = list(torch.full((len(params),), float(step - 1), device=where).unbind())  # one launch
    functional_adamw(params32, grads32, exp_avgs, exp_avg_sqs, [], steps, fused=where.type == "cuda",
                     amsgrad=False, beta1=beta1, beta2=beta2, lr=lr, weight_decay=weight_decay, eps=eps,
                     maximize=False)
    for param, param32 in zip(params, params32):
        if param32 is not param:
            param.copy_(param32)


def torch_sgd(params, grads, momentum_buffers, *, lr, momentum, dampening, nesterov, weight_decay, step):
    """PyTorch's SGD step with the same contract (foreach kernels on a GPU); 16-bit parameters go
    through float32 copies, since the buffers are float32."""
    params32 = [p if p.dtype == torch.float32 else p.float() for p in params]
    grads32 = [g if g.dtype == torch.float32 else g.float() for g in grads]
    buffers = [None if step == 1 else b for b in momentum_buffers]
    functional_sgd(params32, grads32, buffers, lr=lr, momentum=momentum, dampening=dampening,
                   nesterov=nesterov, weight_decay=weight_decay, maximize=False)
    for param, param32 in zip(params, params32):
        if param32 is not param:
            param.copy_(param32)
    for given, buffer in zip(momentum_buffers, buffers):
        if momentum and buffer is not given:
            given.copy_(buffer)


def _numel(size):
    return math.prod(size)


def adamw_bytes(case):
    """Per step: read p, g, m, v and write p, m, v."""
    elements = sum(_numel(s) for s in case.params["sizes"])
    return elements * (3 * case.dtype.itemsize + 4 * 4)


def sgd_bytes(case):
    elements = sum(_numel(s) for s in case.params["sizes"])
    return elements * (3 * case.dtype.itemsize + (8 if case.params.get("momentum") else 0))


# A transformer block's parameters: two 4096 x 4096 and two 4096 x 11008 matrices, biases and norms.
MIXED_SIZES = [(4096, 4096), (4096,), (4096, 4096), (4096,), (11008, 4096), (4096, 11008), (4096,), (4096,)] * 2

BIAS_CORRECTION = ("the first steps from m = v = 0: the moments are too small by a factor 1 - beta ** step, "
                   "which the bias corrections divide out (step_size = lr / (1 - beta1 ** step), and "
                   "sqrt(v) / sqrt(1 - beta2 ** step)); without them m is 10 x and sqrt(v) 30 x too small at step 1, "
                   "and the first step is about 3 x too large.")
DECOUPLED = ("weight_decay = 0.1 on large parameters: AdamW's decay is decoupled, p * (1 - lr * weight_decay) "
             "on the parameter alone; added to the gradient (Adam's L2 penalty) it would pass through the "
             "moments and change exp_avg and exp_avg_sq too.")

# Under the interpreter a float32 -> bfloat16 cast truncates (Triton's interpreter drops the low
# bits) where a GPU rounds to nearest: each step's store of a bf16 parameter may lose up to one
# ulp, 2^-7 of the value, instead of half of one. The bf16 cases run up to three steps: 3 x 2^-7 =
# 2.3e-2. On a GPU the course's bf16 default (1.6e-2) holds: three half-ulps are 1.2e-2.
TRUNCATING_BF16 = {torch.bfloat16: (3e-2, 3e-2)}

ADAMW = Spec(
    api="adamw",
    make_inputs=optimizer_inputs,
    reference=adamw_reference,
    output_names=(),
    mutates=(0, 2, 3),
    protocol=Steps(per_step=1, counter="step"),
    bytes_moved=adamw_bytes,
    torch_baseline=torch_adamw,
    bench_cases=(Case({"sizes": MIXED_SIZES, "steps": 1}),),
    ceiling="torch",
    target=1.0,
    allowed_torch_names=frozenset({"tensor"}),  # the launch table is built from Python ints
    interpreter_tolerances=TRUNCATING_BF16,
)

# The second AdamW target: large tensors at the copy bandwidth (28 bytes per fp32 parameter).
ADAMW_LARGE = Spec(
    api="adamw",
    make_inputs=optimizer_inputs,
    reference=adamw_reference,
    output_names=(),
    mutates=(0, 2, 3),
    protocol=Steps(per_step=1, counter="step"),
    bytes_moved=adamw_bytes,
    torch_baseline=torch_adamw,
    bench_cases=(Case({"sizes": [(1 << 26,), (1 << 26,)], "steps": 1}),
                 Case({"sizes": [(1 << 26,), (1 << 26,)], "steps": 1}, torch.bfloat16)),
    ceiling="copy",
    target=0.90,
    allowed_torch_names=frozenset({"tensor"}),
)

SGD = Spec(
    api="sgd",
    make_inputs=optimizer_inputs,
    reference=sgd_reference,
    output_names=(),
    mutates=(0, 2),
    protocol=Steps(per_step=1, counter="step"),
    bytes_moved=sgd_bytes,
    torch_baseline=torch_sgd,
    bench_cases=(Case({"sizes": MIXED_SIZES, "steps": 2, "momentum": 0.9}),),
    ceiling="torch",
    target=1.0,
    allowed_torch_names=frozenset({"tensor"}),
    interpreter_tolerances=TRUNCATING_BF16,
)

SMALL = [(7,), (33, 17), (1,), (130,)]  # mixed sizes, none a multiple of a block
NESTEROV = ("Nesterov momentum: the step is grad + momentum * buffer (a look ahead along the buffer), "
            "not the buffer alone.")
FIRST_STEP = ("the buffers hold garbage before the first step: PyTorch sets buffer = grad at step 1 (no "
              "dampening, nothing read), and only from step 2 on buffer = momentum * buffer + (1 - dampening) * grad.")

OPTIMIZER_CASES = [
    Case({"sizes": SMALL, "steps": 1}, spec=ADAMW, label="one step from zero state", hint=BIAS_CORRECTION),
    Case({"sizes": SMALL, "steps": 4}, spec=ADAMW, label="four steps", hint=BIAS_CORRECTION),
    Case({"sizes": SMALL, "steps": 12, "weight_decay": 0.05}, spec=ADAMW, label="twelve steps",
         hint="twelve steps in a row: an error in the moments or the bias correction that one step hides "
              "grows with every step."),
    Case({"sizes": [(3, 5), (2000,), (1,)], "steps": 3, "lr": 1e-3}, torch.bfloat16, spec=ADAMW,
         label="bf16 parameters, fp32 state", hint=BIAS_CORRECTION),
    Case({"sizes": [(40, 50), (9,)], "steps": 2, "param_scale": 20.0, "weight_decay": 0.1}, spec=ADAMW,
         label="strong weight decay", hint=DECOUPLED),
    Case({"sizes": [(300,), (17, 3)], "steps": 3, "param_scale": 10.0, "weight_decay": 0.5, "lr": 0.05},
         torch.float16, spec=ADAMW, label="strong weight decay, fp16", hint=DECOUPLED),
    Case({"sizes": [(64, 64), (5,)], "steps": 2, "state": "resumed", "param_scale": 5.0, "weight_decay": 0.2},
         spec=ADAMW, label="resumed state, weight decay", hint=DECOUPLED),
    Case({"sizes": [(100,), (7,)], "steps": 2, "grad_scale": 1e-4, "eps": 1e-3}, spec=ADAMW,
         label="gradients smaller than eps",
         hint="eps = 1e-3 next to gradients of 1e-4: eps goes after the square root and the bias correction, "
              "denom = sqrt(v) / sqrt(1 - beta2 ** step) + eps."),
    Case({"sizes": [(20000,), (0,), (3,), (16384,)], "steps": 2}, spec=ADAMW,
         label="tensors of several chunks, and an empty one"),
    Case({"sizes": [(2,)] * 40, "steps": 2}, spec=ADAMW, label="forty tiny tensors"),
    Case({"sizes": MIXED_SIZES[:4], "steps": 3}, spec=ADAMW, label="a transformer block's sizes", cuda_only=True),
    Case({"sizes": [(1 << 24,), (4096,)], "steps": 2}, torch.bfloat16, spec=ADAMW_LARGE, label="large, bf16",
         cuda_only=True),
    Case({"sizes": SMALL, "steps": 3}, spec=SGD, label="no momentum"),
    Case({"sizes": SMALL, "steps": 4, "momentum": 0.9}, spec=SGD, label="momentum", hint=FIRST_STEP),
    Case({"sizes": SMALL, "steps": 10, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, spec=SGD,
         label="ten steps, Nesterov", hint=NESTEROV),
    Case({"sizes": SMALL, "steps": 3, "momentum": 0.9, "dampening": 0.5}, spec=SGD, label="dampening",
         hint=FIRST_STEP),
    Case({"sizes": SMALL, "steps": 1, "momentum": 0.9, "dampening": 0.9}, spec=SGD,
         label="one step with dampening: the buffer is the gradient", hint=FIRST_STEP),
    Case({"sizes": [(50,), (3, 3)], "steps": 2, "momentum": 0.5, "dampening": 0.3}, torch.bfloat16, spec=SGD,
         label="dampening, bf16", hint=FIRST_STEP),
    Case({"sizes": SMALL, "steps": 3, "momentum": 0.9, "nesterov": True}, spec=SGD, label="Nesterov",
         hint=NESTEROV),
    Case({"sizes": [(200,), (1,)], "steps": 1, "momentum": 0.8, "nesterov": True}, torch.float16, spec=SGD,
         label="Nesterov, one step", hint=NESTEROV),
    # The buffers see weight_decay * p, and p is rounded to bf16 after every step (the float64
    # reference keeps it exact): 0.1 x |p| x 2^-9 per step, which the float32 tolerance must allow.
    Case({"sizes": [(31, 7), (64,)], "steps": 3, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
         torch.bfloat16, spec=SGD, label="Nesterov with weight decay, bf16", hint=NESTEROV,
         tolerances={torch.float32: (5e-3, 5e-3)}),
    Case({"sizes": [(20000,), (0,), (5,)], "steps": 2, "momentum": 0.9, "weight_decay": 0.01}, spec=SGD,
         label="tensors of several chunks, and an empty one"),
    Case({"sizes": MIXED_SIZES[:4], "steps": 3, "momentum": 0.9, "nesterov": True}, spec=SGD,
         label="a transformer block's sizes", cuda_only=True),
]

# ------------------------------------------------------------------------------------------------
# Unscaling gradients
# ------------------------------------------------------------------------------------------------

GRAD_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def unscale_inputs(case, rand):
    """grads (one dtype per tensor: "dtypes", else case.dtype), with "specials" written in:
    (tensor, flat index, value) for inf and NaN; inv_scale a one-element float32 tensor, or a
    Python float with "inv_scale_as": "float"."""
    p = case.params
    dtypes = [GRAD_DTYPES[d] for d in p.get("dtypes", ["fp32"] * len(p["sizes"]))]
    grads = [rand.randn(*size, dtype=dtype, scale=p.get("grad_scale", 1.0))
             for size, dtype in zip(p["sizes"], dtypes)]
    for tensor, index, value in p.get("specials", ()):
        grads[tensor].view(-1)[index] = value
    inv_scale = p.get("inv_scale", 1.0 / 1024)
    if p.get("inv_scale_as") != "float":
        inv_scale = torch.full((1,), inv_scale, device=rand.device)
    return (grads, inv_scale), {}


def unscale_reference(grads, inv_scale):
    found_inf = any(not bool(torch.isfinite(g).all()) for g in grads)
    for grad in grads:
        grad.mul_(inv_scale)
    return torch.tensor([float(found_inf)], dtype=torch.float64)


def torch_unscale(grads, inv_scale):
    found_inf = torch.zeros(1, device=inv_scale.device)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
    return found_inf


UNSCALE = Spec(
    api="unscale_grads",
    make_inputs=unscale_inputs,
    reference=unscale_reference,
    output_names=("found_inf",),
    output_dtypes={"found_inf": torch.float32},  # whatever the gradients' dtypes
    output_notes={"found_inf": "the check for inf and NaN"},
    mutates=(0,),
    bytes_moved=lambda case: 2 * sum(_numel(s) * GRAD_DTYPES[d].itemsize for s, d in
                                      zip(case.params["sizes"], case.params.get("dtypes", ["fp32"] * 99))),
    torch_baseline=torch_unscale,
    bench_cases=(Case({"sizes": MIXED_SIZES, "specials": [(9, 5, float("inf"))]}),),
    ceiling="copy",
    target=0.85,
    allowed_torch_names=frozenset({"tensor"}),
)

NAN = ("a NaN gradient: found_inf must be 1.0 for NaN too, and NaN compares unequal to everything, "
       "inf included; test for 'not finite' (|g| < inf is False for both).")
FOUND_INF = ("found_inf must end 1.0 when any tensor, of any dtype, held inf or NaN: each program (and each "
             "launch, one per dtype) may only set it to 1.0, never write 0.0 over what another found.")

UNSCALE_CASES = [
    Case({"sizes": SMALL}, spec=UNSCALE, label="all finite"),
    Case({"sizes": SMALL, "specials": [(0, 3, float("inf"))]}, spec=UNSCALE,
         label="an inf in the first tensor, finite ones after it", hint=FOUND_INF),
    Case({"sizes": [(300,), (12,)], "dtypes": ["fp32", "bf16"], "specials": [(0, 5, float("nan"))]},
         spec=UNSCALE, label="a NaN in the first dtype's tensor, a finite dtype after it", hint=FOUND_INF),
    Case({"sizes": [(40,), (7,), (90,)], "dtypes": ["fp16", "fp32", "bf16"], "specials": [(0, 39, float("inf"))]},
         spec=UNSCALE, label="an inf in the first of three dtypes", hint=FOUND_INF),
    Case({"sizes": [(5,), (64,), (8,)], "dtypes": ["bf16", "fp16", "bf16"], "specials": [(2, 7, -float("inf"))]},
         spec=UNSCALE, label="-inf in the last tensor, of the dtype met first", hint=FOUND_INF),
    Case({"sizes": SMALL, "specials": [(1, 40, float("inf"))]}, spec=UNSCALE, label="an inf"),
    Case({"sizes": SMALL, "specials": [(3, 129, float("nan"))]}, spec=UNSCALE, label="a NaN", hint=NAN),
    Case({"sizes": [(17000,), (5,)], "dtypes": ["fp16", "fp16"], "specials": [(0, 16999, float("nan"))]},
         spec=UNSCALE, label="a NaN in the last chunk, fp16", hint=NAN),
    Case({"sizes": [(9, 9), (100,)], "dtypes": ["fp32", "fp16"], "specials": [(0, 0, float("nan")),
                                                                             (1, 7, float("nan"))]},
         spec=UNSCALE, label="NaN only, two dtypes", hint=NAN),
    Case({"sizes": [(300,), (12,), (40,)], "dtypes": ["fp32", "fp16", "bf16"],
          "specials": [(2, 39, -float("inf"))]}, spec=UNSCALE, label="-inf in a bf16 tensor, three dtypes"),
    Case({"sizes": [(600,), (6,)], "dtypes": ["fp16", "bf16"], "grad_scale": 1e4, "inv_scale": 1e-4},
         spec=UNSCALE, label="large but finite", hint="values near 1e4 are large, but finite: found_inf stays 0."),
    Case({"sizes": [(33,), (1,)], "inv_scale": 0.5, "inv_scale_as": "float"}, spec=UNSCALE,
         label="inv_scale a Python float"),
    Case({"sizes": MIXED_SIZES[:4], "specials": [(2, 123456, float("inf"))]}, spec=UNSCALE, label="large",
         cuda_only=True),
]

# ------------------------------------------------------------------------------------------------
# The selective scan
# ------------------------------------------------------------------------------------------------


def sequential_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """The selective scan, one step at a time, in the inputs' dtype (mamba's selective_scan_ref
    for B and C of shape (batch, dstate, L))."""
    if delta_bias is not None:
        delta = delta + delta_bias[:, None]
    if delta_softplus:
        delta = F.softplus(delta)
    batch, dim, length = u.shape
    h = u.new_zeros(batch, dim, A.shape[1])
    ys = []
    for t in range(length):
        h = torch.exp(delta[:, :, t, None] * A) * h + (delta[:, :, t] * u[:, :, t])[:, :, None] * B[:, None, :, t]
        ys.append((h * C[:, None, :, t]).sum(-1))
    out = torch.stack(ys, dim=2) if ys else u.new_zeros(batch, dim, 0)
    if D is not None:
        out = out + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    return out


def torch_selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """The PyTorch sequential reference a Mamba user would compare with: float32 math, u's dtype out."""
    as32 = [t.float() if t is not None else None for t in (u, delta, A, B, C, D, z, delta_bias)]
    return sequential_scan(*as32, delta_softplus=delta_softplus).to(u.dtype)


def scan_inputs(case, rand):
    """u, delta, z in case.dtype; A, D, delta_bias float32 (float64 for float64 cases); B, C in
    case.dtype (float32 with "bc": "fp32"); delta in [0, 0.5) (or in the range params["delta"]) and
    A in (-1, -0.05] as in Mamba's tests. The optional inputs are those of "with"; a Backward spec
    gets the upstream gradient last."""
    p = case.params
    batch, dim, length, n_state = p["shape"]
    weights = torch.float64 if case.dtype == torch.float64 else torch.float32
    bc_dtype = torch.float32 if p.get("bc") == "fp32" else case.dtype
    if p.get("layout") == "transposed":  # (batch, L, dim) in memory
        u = rand.randn(batch, length, dim, dtype=case.dtype).transpose(1, 2)
    else:
        u = rand.randn(batch, dim, length, dtype=case.dtype)
    low, high = p.get("delta", (0.0, 0.5))
    delta = rand.uniform(batch, dim, length, low=low, high=high, dtype=case.dtype)
    A = -rand.uniform(dim, n_state, low=0.05, high=1.0, dtype=weights)
    B = rand.randn(batch, n_state, length, dtype=bc_dtype)
    C = rand.randn(batch, n_state, length, dtype=bc_dtype)
    given = p.get("with", ("D", "z", "delta_bias"))
    D = rand.randn(dim, dtype=weights) if "D" in given else None
    z = rand.randn(batch, dim, length, dtype=case.dtype) if "z" in given else None
    delta_bias = rand.uniform(dim, low=-1.0, high=0.5, dtype=weights) if "delta_bias" in given else None
    kwargs = {"delta_softplus": p.get("softplus", True)}
    if case.spec is SCAN_FORWARD:
        return (u, delta, A, B, C, D, z, delta_bias), kwargs
    upstream = rand.randn(batch, dim, length, dtype=case.dtype)
    if case.spec is SCAN_BASIC:
        return (u, delta, A, B, C, upstream), kwargs
    return (u, delta, A, B, C, D, z, delta_bias, upstream), kwargs


def scan_bytes(case):
    """Forward and backward: read u, delta, z (twice: forward, backward) and the upstream gradient;
    write out, du, ddelta, dz; B and C read and their gradients written once per channel block."""
    batch, dim, length, n_state = case.params["shape"]
    size = case.dtype.itemsize
    return batch * dim * length * size * 11 + 4 * batch * n_state * length * size


REVERSE_SCAN = ("the backward pass: dh = dloss/dh_t collects dy * C at step t and passes dh * exp(dt * A) on "
                "to step t - 1; the gradients of u, delta, A and B all come from it.")
LARGE_DELTA = ("delta up to 150: softplus(x) = log(1 + exp(x)) computed as written overflows float32 above 88 "
               "(exp(x) = inf, so dt = inf and the state inf or NaN). Write it as max(x, 0) + log(1 + exp(-|x|)): "
               "exp of a number <= 0 never overflows, and softplus(x) is x for large x.")
SCAN_OUTPUTS = ("out", "grad_u", "grad_delta", "grad_A", "grad_B", "grad_C", "grad_D", "grad_z", "grad_delta_bias")
SCAN_NOTES = {"out": "the forward recurrence", "grad_z": "the gate silu(z)",
              "grad_C": "y = sum(h * C): dy times the state", "grad_D": "the skip term D * u"}
# grad_A sums dstate-wide products over every batch and step (values of 1e3): float32 rounding of
# that many terms reaches 1e-6 of the total.
# The recurrence itself runs over up to L = 2048 steps in float32: on an H100 the output of a
# (4, 1536, 2048, 16) scan differed from float64 by up to 1.7e-5 on values of 0.026 (6.5e-4
# relative), and the gradients that flow back through the same recurrence do alike.
_LONG_SCAN = {torch.float32: (3e-5, 1e-3)}
# grad_A, grad_delta_bias and grad_D sum over every batch and step: at (4, 1536, 2048, 16) grad_A
# was off by 1.25e-3 of its value on an H100.
SCAN_TOLERANCES = {"grad_A": {torch.float32: (1e-3, 2e-3)}, "grad_delta_bias": {torch.float32: (1e-4, 2e-3)},
                   "grad_D": {torch.float32: (1e-4, 2e-3)},
                   **{name: _LONG_SCAN for name in ("out", "grad_u", "grad_delta", "grad_B", "grad_C")}}

SCAN = Spec(
    api="selective_scan",
    make_inputs=scan_inputs,
    reference=autograd_reference(sequential_scan, wrt=(0, 1, 2, 3, 4, 5, 6, 7)),
    output_names=SCAN_OUTPUTS,
    output_notes=SCAN_NOTES,
    output_tolerances=SCAN_TOLERANCES,
    protocol=Backward(wrt=(0, 1, 2, 3, 4, 5, 6, 7), upstream=1),
    bytes_moved=scan_bytes,
    torch_baseline=torch_selective_scan,
    bench_cases=(Case({"shape": (2, 768, 1024, 16)}, torch.bfloat16), Case({"shape": (4, 1536, 2048, 16)})),
    ceiling="torch",
    target=50.0,
    allowed_torch_names=frozenset({"autograd.Function", "tensor"}),
)

SCAN_BASIC = Spec(
    api="selective_scan",
    make_inputs=scan_inputs,
    reference=autograd_reference(sequential_scan, wrt=(0, 1, 2, 3, 4)),
    output_names=SCAN_OUTPUTS[:6],
    output_notes=SCAN_NOTES,
    output_tolerances=SCAN_TOLERANCES,
    protocol=Backward(wrt=(0, 1, 2, 3, 4), upstream=1),
    torch_baseline=torch_selective_scan,
    allowed_torch_names=frozenset({"autograd.Function", "tensor"}),
)

SCAN_FORWARD = Spec(
    api="selective_scan",
    make_inputs=scan_inputs,
    reference=sequential_scan,
    output_names=("out",),
    torch_baseline=torch_selective_scan,
    allowed_torch_names=frozenset({"autograd.Function", "tensor"}),
)

SCAN_CASES = [
    Case({"shape": (1, 4, 1, 3)}, spec=SCAN, label="one step", hint=REVERSE_SCAN),
    Case({"shape": (2, 5, 9, 4)}, spec=SCAN, label="several chunks", hint=REVERSE_SCAN),
    Case({"shape": (1, 20, 6, 5)}, spec=SCAN, label="three channel blocks, dstate 5", hint=REVERSE_SCAN),
    Case({"shape": (2, 3, 12, 16), "softplus": False}, spec=SCAN, label="no softplus", hint=REVERSE_SCAN),
    Case({"shape": (1, 6, 10, 8)}, torch.bfloat16, spec=SCAN, label="bf16, B and C bf16", hint=REVERSE_SCAN),
    Case({"shape": (2, 4, 7, 4), "bc": "fp32"}, torch.float16, spec=SCAN, label="fp16, B and C float32",
         hint=REVERSE_SCAN),
    Case({"shape": (2, 7, 8, 4), "layout": "transposed"}, spec=SCAN_BASIC, label="no D, z, delta_bias; u a transpose",
         hint=REVERSE_SCAN),
    Case({"shape": (1, 9, 17, 2), "softplus": False}, spec=SCAN_BASIC, label="no D, z, delta_bias, no softplus",
         hint=REVERSE_SCAN),
    Case({"shape": (2, 17, 13, 3), "with": ("D",)}, spec=SCAN_FORWARD, label="forward, D only"),
    Case({"shape": (1, 3, 11, 6), "with": ("z",), "softplus": False}, torch.float16, spec=SCAN_FORWARD,
         label="forward, z only"),
    Case({"shape": (1, 2, 0, 4)}, spec=SCAN_FORWARD, label="L = 0"),
    Case({"shape": (2, 5, 9, 4), "delta": (50.0, 150.0)}, spec=SCAN_FORWARD, label="forward, large delta",
         hint=LARGE_DELTA),
    Case({"shape": (1, 6, 8, 4), "delta": (50.0, 150.0)}, spec=SCAN, label="large delta", hint=LARGE_DELTA),
    Case({"shape": (1, 4, 6, 3), "delta": (80.0, 120.0)}, torch.bfloat16, spec=SCAN, label="bf16, large delta",
         hint=LARGE_DELTA),
    Case({"shape": (2, 64, 300, 16)}, spec=SCAN, label="longer sequences", cuda_only=True),
    Case({"shape": (2, 256, 2048, 16)}, torch.bfloat16, spec=SCAN, label="Mamba-like, bf16", cuda_only=True),
]

CASES = CASES + OPTIMIZER_CASES + UNSCALE_CASES + SCAN_CASES

# Three exercises, each graded on its own cases and timed on its own function, with its share of
# the module's points: the backward passes (timed: RMSNorm forward + backward against the copy
# bandwidth's reference), the optimizer step (AdamW over many tensors), the selective scan
# (forward + backward). `make check K=optimizer` runs one part's tests.
PARTS = (
    Part("backward", "the backward passes",
         ("rms_norm", "layer_norm", "swiglu", "silu_and_mul", "relu", "dropout", "dropout_with_mask"),
         timed=SPEC, weight=0.4),
    Part("optimizer", "the optimizer step", ("adamw", "sgd", "unscale_grads"), timed=ADAMW, weight=0.3),
    Part("scan", "the selective scan", ("selective_scan",), timed=SCAN, weight=0.3),
)

# ------------------------------------------------------------------------------------------------
# float64: the inputs torch.autograd.gradcheck gives (the shapes of the gradchecks below)
# ------------------------------------------------------------------------------------------------

FLOAT64 = ("float64 inputs, as torch.autograd.gradcheck gives: the kernels must compute in float64 (compute_dtype) "
           "and return the output and the gradients in float64; float32 arithmetic is off by about 1e-7 here.")
# Tight enough that float32 arithmetic fails (1e-8 to 1e-6 off on these cases), loose enough for
# the references' float64 (at most 2e-12 off, under the interpreter and on an H200). Dropout is
# judged by its own rule (every element 0 or x / (1 - p)), not by these tolerances.
F64 = {torch.float64: (1e-10, 1e-9)}
CASES += [
    Case({"shape": (3, 5)}, torch.float64, label="float64", tolerances=F64, hint=FLOAT64),
    Case({"shape": (3, 5)}, torch.float64, spec=LAYER_NORM, label="float64", tolerances=F64, hint=FLOAT64),
    Case({"shape": (2, 7)}, torch.float64, spec=SWIGLU, label="float64", tolerances=F64, hint=FLOAT64),
    Case({"shape": (3, 8)}, torch.float64, spec=SILU_AND_MUL, label="float64", tolerances=F64, hint=FLOAT64),
    Case({"shape": (4, 5)}, torch.float64, spec=RELU, label="float64", tolerances=F64, hint=FLOAT64),
    Case({"shape": (4, 6), "p": 0.4, "seed": 1234}, torch.float64, spec=DROPOUT, label="float64", hint=FLOAT64),
    Case({"shape": (4, 6), "p": 0.4, "seed": 1234}, torch.float64, spec=DROPOUT_WITH_MASK, label="float64",
         hint=FLOAT64),
    Case({"shape": (1, 3, 5, 2)}, torch.float64, spec=SCAN, label="float64", tolerances=F64, hint=FLOAT64),
]

# ------------------------------------------------------------------------------------------------
# Refusals: every function checks its inputs before launching a kernel, with a message that says
# what is wrong (graded like the results)
# ------------------------------------------------------------------------------------------------

BAD = (ValueError, TypeError)


def _lists(rand, *sizes, count=4, dtype=torch.float32):
    """``count`` lists of tensors of ``sizes``: an optimizer's params, grads and states."""
    return tuple([rand.randn(size, dtype=dtype) for size in sizes] for _ in range(count))


def _adamw_inputs(change=None, **kwargs):
    """adamw's inputs (two float32 tensors per list, step 1), with ``change`` applied to the lists."""
    def inputs(rand):
        lists = _lists(rand, 4, 8)
        return (change(lists) if change else lists), {"step": 1, **kwargs}
    return inputs


def _scan_inputs(change):
    """selective_scan's (u, delta, A, B, C) for batch 2, dim 4, L 6, dstate 3, with ``change``
    applied to them."""
    def inputs(rand):
        u, A, BC = rand.randn(2, 4, 6), -torch.ones(4, 3, device=rand.device), rand.randn(2, 3, 6)
        return change(u, A, BC), {}
    return inputs


EPS_VALUES = {"nan": float("nan"), "inf": float("inf"), "negative": -1e-5, "a string": "1e-5"}
CASES += [
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), rand.randn(7)), {}), BAD, r"shape",
            why="say that weight must have the shape of x's last dimension",
            label="refuses a weight of another length"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8, dtype=torch.int32), rand.randn(8, dtype=torch.int32)), {}), BAD,
            r"dtype", why="name the dtype it got and the ones it supports", label="refuses integer tensors"),
    refusal(SPEC, lambda rand: ((rand.randn(2, 65537), rand.randn(65537)), {}), BAD, r"at most",
            why="say how long a row may be at most", label="refuses rows longer than one block"),
    refusal(LAYER_NORM, lambda rand: ((rand.randn(4, 8), rand.randn(8), rand.randn(8, dtype=torch.float16)), {}), BAD,
            r"dtype", why="say that bias has another dtype than x", label="refuses a bias of another dtype"),
    *(refusal(SPEC, lambda rand, eps=eps: ((rand.randn(4, 8), rand.randn(8), eps), {}), BAD, r"eps",
              why="name eps and say it must be a finite number >= 0", label=f"refuses eps {name}")
      for name, eps in EPS_VALUES.items()),
    *(refusal(LAYER_NORM, lambda rand, eps=eps: ((rand.randn(4, 8), rand.randn(8), rand.randn(8), eps), {}), BAD,
              r"eps", why="name eps and say it must be a finite number >= 0", label=f"refuses eps {name}")
      for name, eps in EPS_VALUES.items()),
    refusal(SWIGLU, lambda rand: ((rand.randn(4, 8), rand.randn(4, 9)), {}), BAD, r"shape",
            why="say that gate and up must have the same shape", label="refuses gate and up of two shapes"),
    refusal(SILU_AND_MUL, lambda rand: ((rand.randn(4, 7),), {}), BAD, r"even",
            why="say that the last dimension must be even (gate, then up)", label="refuses an odd last dimension"),
    *(refusal(spec, lambda rand, p=p: ((rand.randn(10), p), {"seed": 0}), BAD, r"\bp\b",
              why="name p and say it must be a probability in [0, 1]", label=f"refuses p = {p}")
      for spec, p in ((DROPOUT, 1.5), (DROPOUT_WITH_MASK, -0.1), (DROPOUT, float("nan")),
                      (DROPOUT_WITH_MASK, float("inf")))),
    refusal(DROPOUT, lambda rand: ((rand.randn(10), 0.5), {"seed": 0.5}), BAD, r"seed",
            why="name seed and say it must be an integer", label="refuses a seed that is not an integer"),
    refusal(ADAMW, _adamw_inputs(lambda lists: (lists[0], lists[1][:1], *lists[2:])), BAD, r"tensors but",
            why="say that the lists hold different numbers of tensors", label="refuses lists of two lengths"),
    refusal(ADAMW, _adamw_inputs(lambda lists: (lists[0], [g.half() for g in lists[1]], *lists[2:])), BAD,
            r"dtype", why="say that the gradients' dtype is not the parameters'",
            label="refuses grads of another dtype"),
    refusal(ADAMW, _adamw_inputs(lambda lists: tuple([t.half() for t in tensors] for tensors in lists)), BAD,
            r"float32", why="say that the optimizer's state must be float32", label="refuses a float16 state"),
    refusal(ADAMW, _adamw_inputs(step=0), BAD, r"step", why="say that step counts from 1", label="refuses step 0"),
    refusal(ADAMW, _adamw_inputs(beta2=1.0), BAD, r"beta", why="say that beta2 must be below 1",
            label="refuses beta2 = 1"),
    refusal(ADAMW, _adamw_inputs(eps=float("nan")), BAD, r"eps", why="name eps and say it must be a finite number",
            label="refuses eps nan"),
    refusal(ADAMW, _adamw_inputs(lr=float("inf")), BAD, r"lr", why="name lr and say it must be a finite number",
            label="refuses lr inf"),
    refusal(ADAMW, lambda rand: (([rand.randn(4, 6)[:, :3]], [rand.randn(4, 3)], [rand.randn(4, 3)],
                                  [rand.randn(4, 3)]), {"step": 1}), BAD, r"contiguous",
            why="say that a tensor updated in place must be contiguous", label="refuses a non-contiguous parameter"),
    refusal(SGD, lambda rand: (_lists(rand, 5, count=3), {"lr": 0.1, "nesterov": True}), BAD, r"momentum",
            why="say that Nesterov momentum needs momentum > 0", label="refuses Nesterov without momentum"),
    refusal(UNSCALE, lambda rand: ((rand.randn(4), 0.5), {}), BAD, r"list",
            why="say that grads must be a list of tensors", label="refuses a tensor for the list of grads"),
    refusal(UNSCALE, lambda rand: (([rand.randn(4, 6)[:, :3]], 0.5), {}), BAD, r"contiguous",
            why="say that a gradient unscaled in place must be contiguous", label="refuses a non-contiguous gradient"),
    refusal(UNSCALE, lambda rand: (([rand.randn(4, dtype=torch.int32)], 0.5), {}), BAD, r"dtype",
            why="name the dtype it got and the ones it supports", label="refuses an integer gradient"),
    refusal(UNSCALE, lambda rand: (([rand.randn(4)], rand.randn(2)), {}), BAD, r"one value",
            why="say that inv_scale must hold one value", label="refuses an inv_scale of two values"),
    refusal(SCAN, _scan_inputs(lambda u, A, BC: (u, u, A[:3], BC, BC)), BAD, r"A must have shape",
            why="say which shape A must have", label="refuses A of the wrong shape"),
    refusal(SCAN, _scan_inputs(lambda u, A, BC: (u, u, A, BC[:, :2], BC)), BAD, r"B must have shape",
            why="say which shape B must have", label="refuses B of the wrong shape"),
    refusal(SCAN, _scan_inputs(lambda u, A, BC: (u, u[:, :, :5], A, BC, BC)), BAD, r"delta has shape",
            why="say that delta's shape is not u's", label="refuses delta of another shape than u"),
    refusal(SCAN, _scan_inputs(lambda u, A, BC: (u, u, A, BC, BC, torch.ones(5, device=u.device))), BAD,
            r"D must have shape", why="say which shape D must have", label="refuses D of the wrong shape"),
    refusal(SCAN, _scan_inputs(lambda u, A, BC: (u.int(), u.int(), A, BC, BC)), BAD, r"dtype",
            why="name the dtype it got and the ones it supports", label="refuses integer u and delta"),
    refusal(SCAN, _scan_inputs(lambda u, A, BC: (u, u, A.half(), BC, BC)), BAD, r"dtype",
            why="say that A must be float32", label="refuses a float16 A"),
]

# ------------------------------------------------------------------------------------------------
# Test functions (the cases above run through test_matches_reference, with check_case)
# ------------------------------------------------------------------------------------------------


def test_adamw_is_one_launch_per_dtype(kernel):
    from grader.evidence import shared_monitor

    adamw = kernel.api("adamw")
    monitor = shared_monitor()
    for dtypes, launches in (([torch.float32] * 6, 1), ([torch.float32, torch.bfloat16] * 3, 2)):
        params = [torch.randn(n, device=device.torch_device(), dtype=dtype)
                  for n, dtype in zip((5, 3000, 1, 64, 7, 200), dtypes)]
        grads = [torch.randn_like(p) for p in params]
        states = [[torch.zeros(p.shape, device=p.device) for p in params] for _ in range(2)]
        monitor.watching(adamw)(params, grads, *states, step=1)
        got = monitor.report()["launches"]
        assert got == launches, (
            f"adamw() launched {got} kernels for {len(params)} tensors of {len(set(dtypes))} dtype(s); "
            f"expected {launches}: one launch per parameter dtype, over every tensor of that dtype.")


def test_unscale_grads_of_no_gradients(kernel):
    found_inf = kernel.api("unscale_grads")([], torch.ones(1, device=device.torch_device()))
    assert found_inf.dtype == torch.float32 and tuple(found_inf.shape) == (1,) and float(found_inf) == 0.0, (
        f"unscale_grads([]) returned {found_inf!r}; expected a float32 tensor holding 0.0, of shape (1,).")


def test_selective_scan_gradcheck_float64(kernel):
    """torch.autograd.gradcheck compares the backward pass with finite differences of the forward
    pass, in float64, on a case small enough to differentiate numerically."""
    scan = kernel.api("selective_scan")
    rand = torch.Generator().manual_seed(0)
    batch, dim, length, n_state = 1, 3, 5, 2
    shapes = [(batch, dim, length), (batch, dim, length), (dim, n_state), (batch, n_state, length),
              (batch, n_state, length), (dim,), (batch, dim, length), (dim,)]
    inputs = [torch.randn(s, generator=rand, dtype=torch.float64) for s in shapes]
    inputs[1] = inputs[1].abs() * 0.5  # delta
    inputs[2] = -inputs[2].abs() - 0.1  # A
    inputs = [t.to(device.torch_device()).requires_grad_(True) for t in inputs]
    assert torch.autograd.gradcheck(lambda *args: scan(*args, delta_softplus=True), inputs,
                                    eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True)


def _training_loop():
    """training_loop.py, beside this file (given code that the notebook runs too)."""
    path = Path(__file__).with_name("training_loop.py")
    spec = importlib.util.spec_from_file_location("_training_loop_" + str(abs(hash(path))), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOOP_STEPS = 30
LOOP_TOLERANCE = 0.03  # largest relative gap of the loss at any step


def test_training_loop_follows_pytorch(kernel):
    """30 steps of bf16 training with fp32 master weights: this module's kernels against the same
    loop in PyTorch, from the same weights and batches. The two compute in bf16 with different
    summation orders, so the losses drift apart a little (1.3 % at most here); AdamW without bias
    correction moves them by 29 %, weight decay through the gradient by 9 %."""
    loop = _training_loop()
    ours = loop.train_tiny_mlp(kernel.namespace, steps=LOOP_STEPS, where=device.torch_device())
    theirs = loop.train_tiny_mlp(None, steps=LOOP_STEPS, where=device.torch_device())
    gap = loop.relative_gap(ours, theirs)
    assert gap <= LOOP_TOLERANCE, (
        f"The loss of the loop built from your kernels is {100 * gap:.2g} % away from PyTorch's at some step "
        f"(allowed: {100 * LOOP_TOLERANCE:g} %). Losses (yours, PyTorch's) at steps 1, 10, 20, 30: "
        + ", ".join(f"({ours[i]:.4f}, {theirs[i]:.4f})" for i in (0, 9, 19, 29)))
    assert ours[-1] < 0.8 * ours[0], f"the loss did not go down: {ours[0]:.4f} -> {ours[-1]:.4f}"
