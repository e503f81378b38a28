"""Public tests for 02-fused-operations.  Run:  pytest tracks/mastery/02-fused-operations

SPEC and CASES describe the correctness tests as data (the grader reads them too); TRAFFIC holds
the memory-traffic bars, which the interpreter checks on a CPU (on a GPU the speed is measured
instead): one per function, each the bytes that fusion saves. layer_norm_act() is the module's
main function; cases with spec=LINEAR call linear_bias_act(), and with spec=LN_LINEAR
layer_norm_linear(). Every function is checked against the unfused PyTorch sequence in float64.
"""

import pytest
import torch
import torch.nn.functional as F

from grader.cases import Case, Spec, Suspect, refusal
from grader.checks import check_case
from grader.traffic import TrafficBar, check_bar

PYTEST_ONLY = {
    "test_memory_traffic":
        "the bars read the interpreter's record of every load and store, made in the process that runs the "
        "kernel, where a submission could alter it; the grader's child keeps no such record, and on a GPU the "
        "grader times the three functions instead (their bench_cases).",
    "test_offsets_past_two_to_the_31":
        "Inputs of more than 2**31 elements take about 13 GB of GPU memory, more than the grader gives one "
        "correctness process beside the others; make check runs it on a GPU with the memory free.",
}

ACTIVATIONS = {
    "gelu": F.gelu,  # exact: 0.5 x (1 + erf(x / sqrt(2))), F.gelu's default
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
}


# ---- inputs ------------------------------------------------------------------------------------

def _values(rand, shape, params, dtype):
    """Random values of ``shape``: normal, times params["scale"], plus params["offset"]."""
    values = rand.randn(*shape) * params.get("scale", 1.0) + params.get("offset", 0.0)
    return values.to(dtype)


def _laid_out(values, layout):
    """A copy of the 2-D float32 ``values`` stored as ``layout`` says: "row-major";
    "transposed" (the transpose of a row-major matrix: neighbours along a row are far apart);
    "row-strided" (the first columns of wider rows); "padded" (the corner of a larger matrix whose
    other elements are NaN, so that a load missing its mask brings NaN into the result)."""
    rows, cols = values.shape
    if layout == "transposed":
        return values.t().contiguous().t()
    if layout == "row-strided":
        wide = torch.zeros(rows, cols + 16, dtype=values.dtype, device=values.device)
        wide[:, :cols] = values
        return wide[:, :cols]
    if layout == "padded":
        padded = torch.full((rows + 16, cols + 16), float("nan"), dtype=values.dtype, device=values.device)
        padded[:rows, :cols] = values
        return padded[:rows, :cols]
    if layout != "row-major":
        raise ValueError(f"unknown layout {layout!r}")
    return values


def _vector(rand, n, dtype, params, scale=1.0):
    """n random values (a weight or a bias): with params["vectors"] = "strided", every other
    element of a tensor twice as long, a view whose stride is 2."""
    if params.get("vectors") == "strided":
        return rand.randn(2 * n, dtype=dtype, scale=scale)[::2]
    return rand.randn(n, dtype=dtype, scale=scale)


def layer_norm_act_inputs(case, rand):
    """x (shape and layout from params), weight and bias (or None), and activation and eps where the
    params set them."""
    params = case.params
    shape = params["shape"]
    n_cols = shape[-1]
    layout = params.get("layout", "row-major")
    if layout == "constant":
        # row r holds value[r % len(value)] in every column: variance 0, so y must be act(bias)
        values = params["value"]
        n_rows = torch.Size(shape[:-1]).numel()
        per_row = torch.tensor([values[r % len(values)] for r in range(n_rows)], device=rand.device)
        x = per_row.reshape(*shape[:-1], 1).expand(*shape).to(case.dtype).contiguous()
    elif len(shape) == 2:
        x = _laid_out(_values(rand, shape, params, case.dtype), layout)
    else:
        x = _values(rand, shape, params, case.dtype)
    affine = params.get("affine", "both")
    weight = _vector(rand, n_cols, case.dtype, params, params.get("weight_scale", 1.0)) if affine == "both" else None
    bias = _vector(rand, n_cols, case.dtype, params) if affine in ("both", "bias") else None
    kwargs = {"activation": params["activation"]} if "activation" in params else {}  # none: the default
    if "eps" in params:
        kwargs["eps"] = params["eps"]
    return (x, weight, bias), kwargs


def linear_inputs(case, rand):
    """x (M rows of K, or params["batch"] leading dimensions), weight (N, K), bias (or None).
    Entries of size K ** -0.25 in x and weight make each product about 1 in size whatever K is;
    params["scale"] makes the activation's inputs larger."""
    M, N, K = case.params["mnk"]
    layout_x, layout_w = case.params.get("layouts", ("row-major", "row-major"))
    scale = max(K, 1) ** -0.25
    x = _laid_out(_values(rand, (M, K), {"scale": scale * case.params.get("scale", 1.0)}, case.dtype), layout_x)
    if "batch" in case.params:
        x = x.reshape(*case.params["batch"], K)
    weight = _laid_out(_values(rand, (N, K), {"scale": scale}, case.dtype), layout_w)
    bias = _vector(rand, N, case.dtype, case.params) if case.params.get("bias", True) else None
    return (x, weight, bias), {"activation": case.params["activation"]}


def layer_norm_linear_inputs(case, rand):
    """x (M rows of K, params["offset"] and ["scale"] setting its mean and spread), ln_weight and
    ln_bias (or None), weight (N, K) with entries of size K ** -0.5, bias (or None)."""
    M, N, K = case.params["mnk"]
    layout_x, layout_w = case.params.get("layouts", ("row-major", "row-major"))
    x = _laid_out(_values(rand, (M, K), case.params, case.dtype), layout_x)
    if "batch" in case.params:
        x = x.reshape(*case.params["batch"], K)
    affine = case.params.get("affine", True)
    ln_weight = _vector(rand, K, case.dtype, case.params) if affine else None
    ln_bias = _vector(rand, K, case.dtype, case.params) if affine else None
    weight = _laid_out(_values(rand, (N, K), {"scale": max(K, 1) ** -0.5}, case.dtype), layout_w)
    bias = _vector(rand, N, case.dtype, case.params) if case.params.get("bias", True) else None
    kwargs = {"eps": case.params["eps"]} if "eps" in case.params else {}
    return (x, ln_weight, ln_bias, weight, bias), kwargs


# ---- the unfused PyTorch sequences: the references (in float64) and the baselines ---------------

def layer_norm_act_unfused(x, weight, bias, activation="gelu", eps=1e-5):
    """Two kernels: the layer norm writes its result, the activation reads it back."""
    return ACTIVATIONS[activation](F.layer_norm(x, x.shape[-1:], weight, bias, eps))


def linear_bias_act_unfused(x, weight, bias=None, activation="gelu"):
    """A matmul with the bias (addmm), then the activation reading its result back."""
    return ACTIVATIONS[activation](F.linear(x, weight, bias))


def layer_norm_linear_unfused(x, ln_weight, ln_bias, weight, bias=None, eps=1e-5):
    """The layer norm writes the normalised x, the matmul reads it back."""
    return F.linear(F.layer_norm(x, x.shape[-1:], ln_weight, ln_bias, eps), weight, bias)


# ---- typical wrong computations, which the diagnosis names when the outputs equal one of them ----

OTHER_GELU = {"gelu": "gelu_tanh", "gelu_tanh": "gelu"}


def layer_norm_act_other_gelu(x, weight, bias, activation="gelu", eps=1e-5):
    """The two GELUs swapped: the tanh approximation for "gelu", the exact erf form for "gelu_tanh"."""
    return layer_norm_act_unfused(x, weight, bias, OTHER_GELU.get(activation, activation), eps)


def linear_bias_act_other_gelu(x, weight, bias=None, activation="gelu"):
    return linear_bias_act_unfused(x, weight, bias, OTHER_GELU.get(activation, activation))


def layer_norm_act_eps_outside(x, weight, bias, activation="gelu", eps=1e-5):
    """rstd = 1 / (sqrt(var) + eps): eps added to the standard deviation, not to the variance."""
    centred = x - x.mean(dim=-1, keepdim=True)
    y = centred / ((centred * centred).mean(dim=-1, keepdim=True).sqrt() + eps)
    y = y if weight is None else y * weight
    return ACTIVATIONS[activation](y if bias is None else y + bias)


OTHER_GELU_WHAT = "the other GELU (the tanh approximation for 'gelu', the exact erf form for 'gelu_tanh')"
OTHER_GELU_ADVICE = ("activation='gelu' is the exact x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), which gaussian_cdf "
                     "computes; 'gelu_tanh' is x sigmoid(2u) with u = sqrt(2 / pi) (x + 0.044715 x^3).")


# ---- cost models: the fewest bytes each problem needs (fused), and what PyTorch moves (unfused) --

def _rows(shape):
    return torch.Size(shape[:-1]).numel()


def layer_norm_act_bytes(case):
    """Read x, write y, read weight and bias."""
    n_cols = case.params["shape"][-1]
    return (2 * _rows(case.params["shape"]) * n_cols + 2 * n_cols) * case.dtype.itemsize


def layer_norm_act_unfused_bytes(case):
    """The fused bytes, plus the normalised x written by the layer norm and read by the activation."""
    return layer_norm_act_bytes(case) + 2 * _rows(case.params["shape"]) * case.params["shape"][-1] * case.dtype.itemsize


def linear_bytes(case):
    """Read x, the weight and the bias, write y."""
    M, N, K = case.params["mnk"]
    return (M * K + N * K + M * N + N) * case.dtype.itemsize


def linear_unfused_bytes(case):
    """The fused bytes, plus x @ W^T + b written by the matmul and read by the activation."""
    M, N, _ = case.params["mnk"]
    return linear_bytes(case) + 2 * M * N * case.dtype.itemsize


def layer_norm_linear_bytes(case):
    """Read x, the weight, ln_weight, ln_bias and the bias, write y (the problem's minimum; the
    reference reads x a second time for its row statistics, and writes and reads 8 bytes a row)."""
    M, N, K = case.params["mnk"]
    return (M * K + N * K + M * N + 2 * K + N) * case.dtype.itemsize


def layer_norm_linear_unfused_bytes(case):
    """The minimum, plus the normalised x, written by the layer norm and read by the matmul."""
    M, _, K = case.params["mnk"]
    return layer_norm_linear_bytes(case) + 2 * M * K * case.dtype.itemsize


def matmul_flops(case):
    M, N, K = case.params["mnk"]
    return 2 * M * N * K


# ---- specs --------------------------------------------------------------------------------------

SPEC = Spec(
    api="layer_norm_act",
    make_inputs=layer_norm_act_inputs,
    reference=layer_norm_act_unfused,
    suspects=(Suspect(OTHER_GELU_WHAT, layer_norm_act_other_gelu, OTHER_GELU_ADVICE),
              Suspect("eps added outside the square root (1 / (sqrt(var) + eps))", layer_norm_act_eps_outside,
                      "eps belongs inside the square root: rstd = 1 / sqrt(var + eps).")),
    row_wise=True,
    bytes_moved=layer_norm_act_bytes,
    torch_baseline=layer_norm_act_unfused,
    bench_cases=(Case({"shape": (32768, 4096), "activation": "gelu"}, torch.float16),
                 Case({"shape": (32768, 4096), "activation": "gelu"}, torch.bfloat16),
                 Case({"shape": (32768, 4096), "activation": "silu"}, torch.float16),
                 Case({"shape": (32768, 4096), "activation": "gelu"}, torch.float32)),
    ceiling="copy",
    target=0.90,
)

# tl.dot rounds float32 operands to TF32 on a GPU (10-bit mantissa); the interpreter multiplies
# exactly, and only the order of the sums differs from the float64 reference.
TF32 = {torch.float32: (5e-3, 5e-3)}
EXACT_DOT = {torch.float32: (1e-4, 1e-4)}

LINEAR = Spec(
    api="linear_bias_act",
    make_inputs=linear_inputs,
    reference=linear_bias_act_unfused,
    suspects=(Suspect(OTHER_GELU_WHAT, linear_bias_act_other_gelu, OTHER_GELU_ADVICE),),
    tolerances=TF32,
    interpreter_tolerances=EXACT_DOT,
    flops=matmul_flops,
    bytes_moved=linear_bytes,
    torch_baseline=linear_bias_act_unfused,
    # First (the graded one) an MLP's up-projection; then one with a short K, where the epilogue's
    # saved trips through memory are a large share of the time.
    bench_cases=(Case({"mnk": (8192, 8192, 4096), "activation": "gelu"}, torch.float16),
                 Case({"mnk": (8192, 8192, 4096), "activation": "gelu"}, torch.bfloat16),
                 Case({"mnk": (16384, 8192, 1024), "activation": "silu"}, torch.float16)),
    ceiling="torch",
    target=0.90,
)

LN_LINEAR = Spec(
    api="layer_norm_linear",
    make_inputs=layer_norm_linear_inputs,
    reference=layer_norm_linear_unfused,
    tolerances=TF32,
    # Rows near 1000 (the "large mean" cases): x - mean inherits the rounding of the float32 mean
    # (an ulp of 1000 is 6e-5), about 1e-4 in y; a tile that only has its rows' mean and rstd can do
    # no better. The mistakes these cases catch are off by 1e-2 and more.
    interpreter_tolerances={torch.float32: (3e-4, 1e-4)},
    flops=matmul_flops,
    bytes_moved=layer_norm_linear_bytes,
    torch_baseline=layer_norm_linear_unfused,
    # First (the graded one) an output one tile wide, a projection of 8192 features down to 256 (a
    # mixture-of-experts router over 256 experts, or a low-rank bottleneck): every element of x is
    # normalised once, and the unfused sequence's write and re-read of LayerNorm(x) is most of its
    # time. Then wider outputs, where the prologue is repeated for every column of output tiles and
    # costs more than it saves (README, "Where prologue fusion does not pay").
    bench_cases=(Case({"mnk": (16384, 256, 8192)}, torch.float16),
                 Case({"mnk": (16384, 256, 8192)}, torch.bfloat16),
                 Case({"mnk": (16384, 1024, 4096)}, torch.float16),
                 Case({"mnk": (16384, 4096, 4096)}, torch.float16)),
    ceiling="torch",
    target=1.2,
)

# ---- what the cases probe -------------------------------------------------------------------------

ORDER = ("N = 1: every row has variance 0, so x_hat = 0 and y = act(bias): the activation comes after "
         "the weight and bias, act(x_hat * weight + bias).")
GELU = ("activation='gelu' is the exact GELU, 0.5 x (1 + erf(x / sqrt(2))), F.gelu's default; the tanh "
        "approximation ('gelu_tanh') differs from it by up to 5e-4.")
MASKED = ("N is not a power of two, so the block has padding lanes: they must stay 0 in every sum "
          "(after each subtraction, tl.where(mask, ..., 0.0)).")
LARGE_MEAN = ("values near 1000 that differ by about 1: centre the row (shifted by its first element) "
              "before squaring; E[x^2] - mean^2 cancels catastrophically in float32.")
CONSTANT = ("every row is constant, at a magnitude float32 cannot represent exactly: y must be exactly "
            "act(bias), which needs x - mean = 0 exactly (shift by the row's first element, track 1 "
            "module 04).")
LARGE_INPUTS = ("the activation sees inputs of size 100 and more: exp(x) overflows float32 above 88, so "
                "write the sigmoid with exp(-|x|) only (inf / inf is NaN).")
EPILOGUE = ("the epilogue adds the bias to the accumulator, then applies the activation: "
            "act(x @ weight^T + bias).")
TRANSPOSE = ("weight is (out_features, in_features): element (k, n) of the tile of weight^T is "
             "weight[n, k], so n goes with stride_wn and k with stride_wk.")
EDGES = "NaN lies past the edges of x and weight: every load needs its mask (and other=0)."
PROLOGUE = ("the matmul's operand is LayerNorm(x): each tile of x is normalised as it is loaded, "
            "(x - mean) * rstd for its rows, then scaled by ln_weight and shifted by ln_bias for its k "
            "columns.")
STRIDED = ("the weight and bias vectors are every other element of longer tensors (stride 2): a kernel that "
           "reads them at ptr + offsets sees the wrong elements unless the wrapper copies them with "
           ".contiguous() first (or passes their stride to the kernel and uses it).")
K_ONE = ("K = 1: every row has variance 0, so LayerNorm(x) is exactly ln_bias and y = weight @ ln_bias "
         "+ bias: x - mean must be 0, and ln_bias added after ln_weight.")

LONG_K = ("K in the thousands: the accumulator must be float32 (tl.zeros(..., dtype=tl.float32)); a 16-bit one "
          "rounds every partial sum to 11 significant bits (fp16), and the rounding adds up over K.")

CASES = [
    # layer_norm_act: one program per row
    Case({"shape": (5, 1), "activation": "gelu"}, label="N = 1, variance 0", hint=ORDER),
    Case({"shape": (1, 7), "activation": "silu"}, label="one short row", hint=MASKED),
    Case({"shape": (8, 64), "activation": "gelu"}, label="power of two", hint=GELU),
    Case({"shape": (8, 64)}, label="no activation named: the default, exact GELU", hint=GELU),
    Case({"shape": (16, 100), "activation": "gelu"}, label="masked lanes", hint=MASKED),
    Case({"shape": (9, 257), "activation": "gelu_tanh"}, label="just past a power of two", hint=MASKED),
    Case({"shape": (16, 200), "activation": "silu"}, torch.float16, label="masked lanes"),
    Case({"shape": (12, 300), "activation": "gelu"}, torch.bfloat16, label="bf16"),
    Case({"shape": (300,), "activation": "gelu_tanh"}, label="1-D: one row"),
    Case({"shape": (4, 6, 80), "activation": "silu"}, label="3-D"),
    Case({"shape": (2, 3, 5, 48), "activation": "gelu"}, torch.float16, label="4-D"),
    Case({"shape": (16, 300), "offset": 1000.0, "affine": "none", "activation": "gelu"}, label="large mean",
         tolerances={torch.float32: (5e-4, 1e-4)}, hint=LARGE_MEAN),  # x - mean is ~1e-4 off near 1000
    Case({"shape": (4, 1000), "layout": "constant", "value": (12345.6, -271828.18), "activation": "silu"},
         label="constant rows of large magnitude", hint=CONSTANT),
    Case({"shape": (12, 96), "affine": "none", "activation": "gelu_tanh"}, label="no weight, no bias"),
    Case({"shape": (12, 96), "eps": 0.1, "scale": 0.2, "activation": "silu"}, label="eps matters",
         hint="eps = 0.1 is as large as the variance here: rstd = 1 / sqrt(var + eps)."),
    Case({"shape": (6, 50), "eps": 0.5, "scale": 0.5, "activation": "gelu"}, torch.float16,
         label="eps matters, fp16", hint="eps = 0.5 is twice the variance here: rstd = 1 / sqrt(var + eps)."),
    Case({"shape": (3, 4, 33), "eps": 1.0, "scale": 0.3, "activation": "gelu_tanh"}, label="eps matters, 3-D",
         hint="eps = 1.0 is ten times the variance here: rstd = 1 / sqrt(var + eps)."),
    Case({"shape": (20, 70), "layout": "row-strided", "activation": "gelu"}, label="strided rows"),
    Case({"shape": (24, 40), "layout": "transposed", "activation": "gelu_tanh"}, torch.float16,
         label="non-contiguous",
         hint="x is a transpose: its rows are not packed (x.stride(-1) is not 1), so a kernel that reads a "
              "row as consecutive elements needs the launcher to hand it contiguous rows (x.contiguous()), "
              "or to step along a row with the column stride."),
    Case({"shape": (8, 200), "weight_scale": 60.0, "activation": "silu"}, label="large activation inputs",
         hint=LARGE_INPUTS),
    Case({"shape": (8, 200), "weight_scale": 60.0, "activation": "gelu_tanh"}, torch.float16,
         label="large activation inputs", hint=LARGE_INPUTS),
    Case({"shape": (6, 50), "vectors": "strided", "activation": "gelu"}, label="weight and bias strided",
         hint=STRIDED),
    Case({"shape": (3, 4, 33), "vectors": "strided", "activation": "silu"}, torch.float16,
         label="weight and bias strided, 3-D", hint=STRIDED),
    Case({"shape": (5, 64), "vectors": "strided", "affine": "bias", "activation": "gelu_tanh"}, torch.bfloat16,
         label="bias strided, no weight", hint=STRIDED),
    Case({"shape": (64, 1000), "activation": "silu"}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (4096, 4096), "activation": "gelu"}, label="large", cuda_only=True),
    Case({"shape": (512, 16384), "activation": "gelu_tanh"}, torch.float16, label="long rows", cuda_only=True),
    Case({"shape": (16, 65536), "activation": "silu"}, label="longest row", cuda_only=True),

    # linear_bias_act: a tiled matmul with the bias and activation in its epilogue
    Case({"mnk": (1, 1, 1), "activation": "gelu"}, spec=LINEAR, label="1 x 1 x 1", hint=EPILOGUE),
    Case({"mnk": (16, 16, 16), "activation": "silu"}, spec=LINEAR, label="one 16 x 16 tile", hint=EPILOGUE),
    Case({"mnk": (33, 65, 17), "activation": "gelu_tanh"}, spec=LINEAR, label="odd sizes", hint=EPILOGUE),
    Case({"mnk": (48, 40, 100), "activation": "gelu"}, torch.float16, spec=LINEAR, label="several k-steps"),
    Case({"mnk": (20, 36, 50), "layouts": ("padded", "padded"), "activation": "silu"}, spec=LINEAR,
         label="NaN past the edges", hint=EDGES),
    Case({"mnk": (40, 50, 70), "layouts": ("transposed", "transposed"), "activation": "gelu"}, torch.float16,
         spec=LINEAR, label="x and weight transposed", hint=TRANSPOSE),
    Case({"mnk": (31, 47, 53), "layouts": ("row-strided", "row-strided"), "activation": "gelu_tanh"},
         spec=LINEAR, label="rows not packed", hint=TRANSPOSE),
    Case({"mnk": (24, 40, 32), "bias": False, "activation": "gelu"}, spec=LINEAR, label="no bias", hint=GELU),
    Case({"mnk": (10, 24, 40), "batch": (2, 5), "activation": "silu"}, torch.float16, spec=LINEAR,
         label="3-D x"),
    Case({"mnk": (300, 300, 16), "activation": "gelu"}, spec=LINEAR, label="several tiles each way"),
    Case({"mnk": (16, 32, 2048), "activation": "gelu"}, torch.float16, spec=LINEAR, label="long K, fp16", hint=LONG_K),
    Case({"mnk": (12, 16, 8192), "activation": "silu"}, torch.float16, spec=LINEAR, label="longer K, fp16",
         hint=LONG_K),
    Case({"mnk": (8, 40, 4096), "bias": False, "activation": "gelu"}, torch.float16, spec=LINEAR,
         label="long K, no bias", hint=LONG_K),
    Case({"mnk": (1100, 40, 16), "activation": "silu"}, torch.float16, spec=LINEAR,
         label="more rows of tiles than a group",
         hint="9 rows of tiles, one more than a group of GROUP_M = 8: the last group is short."),
    # fp16: the operands are exact, so the float64 reference differs only by the output's rounding (float32
    # operands go through TF32 on a GPU, and activation inputs of 100 would make that 0.05).
    Case({"mnk": (20, 24, 32), "scale": 40.0, "activation": "silu"}, torch.float16, spec=LINEAR,
         label="large activation inputs", hint=LARGE_INPUTS),
    Case({"mnk": (20, 36, 24), "vectors": "strided", "activation": "gelu"}, spec=LINEAR, label="bias strided",
         hint=STRIDED),
    Case({"mnk": (33, 17, 40), "vectors": "strided", "activation": "silu"}, torch.float16, spec=LINEAR,
         label="bias strided", hint=STRIDED),
    Case({"mnk": (10, 24, 16), "batch": (2, 5), "vectors": "strided", "activation": "gelu_tanh"}, spec=LINEAR,
         label="bias strided, 3-D x", hint=STRIDED),
    Case({"mnk": (65, 33, 129), "activation": "gelu"}, torch.bfloat16, spec=LINEAR, label="bf16", cuda_only=True),
    Case({"mnk": (2048 + 3, 3000, 512 + 5), "activation": "gelu"}, torch.float16, spec=LINEAR,
         label="large, odd", cuda_only=True),
    # rows of x, weight and y on 16-byte boundaries: on a Hopper GPU the TMA kernel runs, with partial
    # tiles at every edge and a partial last k-step
    Case({"mnk": (2048 + 3, 3000, 512 + 8), "activation": "gelu_tanh"}, torch.float16, spec=LINEAR,
         label="large, TMA-aligned rows", cuda_only=True),
    Case({"mnk": (1000, 1500, 700), "layouts": ("row-major", "transposed"), "activation": "silu"},
         spec=LINEAR, label="large fp32, weight transposed", cuda_only=True),

    # layer_norm_linear: row statistics first, then a matmul that normalises each tile of x
    Case({"mnk": (1, 1, 1)}, spec=LN_LINEAR, label="K = 1, variance 0", hint=K_ONE),
    Case({"mnk": (16, 16, 16)}, spec=LN_LINEAR, label="one 16 x 16 tile", hint=PROLOGUE),
    Case({"mnk": (33, 40, 100)}, spec=LN_LINEAR, label="K not a power of two", hint=PROLOGUE),
    Case({"mnk": (24, 48, 64)}, torch.float16, spec=LN_LINEAR, label="fp16", hint=PROLOGUE),
    Case({"mnk": (16, 24, 300), "offset": 1000.0}, spec=LN_LINEAR, label="large mean", hint=LARGE_MEAN),
    Case({"mnk": (12, 20, 96), "affine": False, "bias": False}, spec=LN_LINEAR,
         label="no ln_weight, ln_bias or bias"),
    Case({"mnk": (20, 36, 50), "layouts": ("padded", "padded")}, spec=LN_LINEAR, label="NaN past the edges",
         hint=EDGES),
    Case({"mnk": (24, 40, 40), "layouts": ("transposed", "transposed")}, torch.float16, spec=LN_LINEAR,
         label="x and weight transposed"),
    Case({"mnk": (14, 24, 64), "batch": (2, 7), "scale": 3.0, "offset": -2.0}, spec=LN_LINEAR, label="3-D x"),
    Case({"mnk": (16, 20, 48), "vectors": "strided"}, spec=LN_LINEAR, label="ln_weight, ln_bias and bias strided",
         hint=STRIDED),
    Case({"mnk": (9, 33, 70), "vectors": "strided"}, torch.float16, spec=LN_LINEAR,
         label="ln_weight, ln_bias and bias strided", hint=STRIDED),
    Case({"mnk": (12, 8, 30), "vectors": "strided", "bias": False}, spec=LN_LINEAR,
         label="ln_weight and ln_bias strided, no bias", hint=STRIDED),
    Case({"mnk": (64, 1000, 700)}, torch.bfloat16, spec=LN_LINEAR, label="bf16", cuda_only=True),
    Case({"mnk": (2048 + 3, 1024 - 5, 1024 + 7), "offset": 100.0}, torch.float16, spec=LN_LINEAR,
         label="large, odd", cuda_only=True),
    Case({"mnk": (1000 + 3, 1536, 1024 + 8), "offset": 100.0}, torch.bfloat16, spec=LN_LINEAR,
         label="large, TMA-aligned rows", cuda_only=True),
    Case({"mnk": (1000, 1500, 700), "layouts": ("transposed", "row-major")}, spec=LN_LINEAR,
         label="large fp32, x transposed", cuda_only=True),
]

TRAFFIC = [
    TrafficBar(Case({"shape": (1, 8192), "activation": "gelu"}, torch.float16), coalesced=("load", "store"),
               max_bytes_over_minimum=1.1, todo="then apply the activation",
               lesson="Apply the activation to the normalised row while it is in registers: x is read "
                      "once and y written once, with nothing in between going to memory (one row, so "
                      "weight and bias are read once too)."),
    TrafficBar(Case({"mnk": (64, 64, 32), "activation": "gelu"}, torch.float16, spec=LINEAR), coalesced=(),
               max_bytes_over_minimum=1.2, todo="the fused epilogue",
               lesson="Add the bias and apply the activation to the accumulator before the store: then "
                      "y is stored once and never read back."),
    TrafficBar(Case({"mnk": (64, 64, 32)}, torch.float16, spec=LN_LINEAR), coalesced=(),
               max_bytes_over_minimum=1.45, todo="normalise the tile",
               lesson="Normalise each tile of x as the matmul loads it, from the rows' mean and rstd: "
                      "LayerNorm(x) then never goes to memory (only the statistics do, 8 bytes a row)."),
]


# ---- refusals: the right error, and a message that says what to do (graded like the results) -----

CASES += [
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), None, None), {"activation": "relu"}), (ValueError, TypeError),
            r"activation", why="name the activations it knows", label="refuses an unknown activation"),
    refusal(SPEC, lambda rand: ((torch.ones(4, 8, dtype=torch.int32, device=rand.device), None, None), {}),
            (ValueError, TypeError), r"dtype", why="name x's dtype and say that the kernel does not support it",
            label="refuses integers"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), rand.randn(7), rand.randn(8)), {}), (ValueError, TypeError),
            r"shape", why="name the shape weight must have, one value per element of a row",
            label="refuses a weight of the wrong length"),
    refusal(SPEC, lambda rand: ((rand.randn(2, 65537), None, None), {}), (ValueError, TypeError), r"at most",
            why="say how long a row one block holds at most", label="refuses rows too long for one block"),
    refusal(LINEAR, lambda rand: ((rand.randn(4, 8), rand.randn(8, 3), rand.randn(3)), {}), (ValueError, TypeError),
            r"out_features, in_features", why="say that weight is (out_features, in_features), nn.Linear's layout",
            label="refuses a weight in the other layout"),
    refusal(LINEAR, lambda rand: ((rand.randn(4, 8), rand.randn(3, 8), rand.randn(8)), {}), (ValueError, TypeError),
            r"bias", why="say that the bias needs one value per output feature",
            label="refuses a bias of the wrong length"),
    refusal(LINEAR, lambda rand: ((rand.randn(4, 8), rand.randn(3, 8, dtype=torch.float16), None), {}),
            (ValueError, TypeError), r"dtype", why="say that x and weight have different dtypes",
            label="refuses mixed dtypes"),
    refusal(LINEAR, lambda rand: ((rand.randn(4, 8), rand.randn(3, 8), None), {"activation": "tanh"}),
            (ValueError, TypeError), r"activation", why="name the activations it knows",
            label="refuses an unknown activation"),
    refusal(LN_LINEAR, lambda rand: ((rand.randn(4, 8), rand.randn(6), None, rand.randn(3, 8)), {}),
            (ValueError, TypeError), r"ln_weight", why="say that ln_weight needs one value per feature of x",
            label="refuses an ln_weight of the wrong length"),
    refusal(LN_LINEAR, lambda rand: ((rand.randn(4, 8), None, None, rand.randn(3, 6)), {}), (ValueError, TypeError),
            r"in_features", why="say that weight's in_features must match x's last dimension",
            label="refuses a weight that does not match x"),
]


# ---- tests ----------------------------------------------------------------------------------------

def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


def test_memory_traffic(kernel, bar):
    check_bar(kernel, SPEC, bar)


def test_offsets_past_two_to_the_31(kernel):
    """linear_bias_act on operands of more than 2**31 elements (x's rows, the weight's rows, y's
    rows past 2**31 in turn): an offset row * stride computed in int32 wraps around there. The
    weights are transposed views, so the pointer kernel runs, on a Hopper GPU too."""
    from grader import large_offsets

    if (why := large_offsets.why_not_here()) is not None:
        pytest.skip(why)
    linear = kernel.api("linear_bias_act")

    def bias_and_gelu(b):  # b is weight^T, (in_features, out_features): one bias value per column of y
        bias = torch.randn(b.shape[1], dtype=torch.float16, device="cuda")
        return (bias,), lambda product, cols: F.gelu(product + bias[cols].float())

    large_offsets.check_matmuls(lambda a, b, bias: linear(a, b.t(), bias, "gelu"), bias_and_gelu)
