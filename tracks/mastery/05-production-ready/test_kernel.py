"""Public tests for 05-production-ready.  Run:  pytest tracks/mastery/05-production-ready

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. They check an operator the way PyTorch's users will use it:

- cases: forward and backward against float64 PyTorch (protocol Backward), on edge cases: one
  element per row, zero rows, non-power-of-two rows, strided and transposed inputs, a broadcast
  upstream gradient, fp16, bf16, a large eps, rows far from zero;
- validation: every bad input raises a ValueError or TypeError whose message says what to do
  (layer_norm_gelu's are cases of CASES, labelled "refuses ...");
- torch.library: the schema, torch.library.opcheck (schema, autograd registration, fake tensors;
  the AOT-dispatch check needs a GPU, see test_opcheck_aot_dispatch), meta tensors, gradcheck;
- torch.compile(fullgraph=True) on a small model built from both operators: no graph break;
  Inductor compiling the Triton kernels needs a GPU;
- properties (Hypothesis): on inputs drawn from the input space kernel.py declares, the operator
  matches PyTorch; shifting a row changes nothing; the input space reaches every edge case.

layer_norm_gelu() is the module's main function (SPEC); cases with spec=LAYER_NORM_GELU_X_ONLY call
it with weight or bias left out (None), so that only x's gradient is compared. bias_gelu_residual(),
complete in the learner's file, has its cases in BIAS_GELU_RESIDUAL_CASES: tested, not graded.
attention(), given complete in attention_op.py beside kernel.py, is tested here too (not graded):
that file is loaded once per session, whatever --impl says, since nobody submits it.
"""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from torch.autograd.gradcheck import GradcheckError

from grader import device
from grader.catalog import find_module
from grader.cases import Backward, Case, Spec, Suspect, refusal
from grader.checks import autograd_reference, check_case, expect_error, explained
from grader.loading import LoadedKernel

# The public tests that are not graded cases, and why the grader does not run them. Two reasons
# recur: bias_gelu_residual and attention are given complete (the worked example in the learner's
# file, and mastery/03's kernels as an operator in attention_op.py beside it), so grading them would
# give points for code the learner did not write; and the grader's child only calls an API function on tensors of the device
# under test and hands back what it returns or raises, so what needs the test's own process
# (torch.library, torch.compile, Hypothesis, meta tensors) stays here.
PYTEST_ONLY = {
    "test_bias_gelu_residual_matches_reference": "bias_gelu_residual is the worked example, complete in the file "
                                                 "the learner gets, so its cases (BIAS_GELU_RESIDUAL_CASES) would "
                                                 "grade code the learner did not write; they run here to show it works",
    "test_validation_names_the_device": "it needs a tensor on another device than the kernels' (a CPU tensor on a "
                                        "GPU, a meta tensor under the interpreter), and the grader's child receives "
                                        "every tensor on the device under test",
    "test_bias_gelu_residual_rejects_bad_inputs": "bias_gelu_residual's validation is part of the worked example, "
                                                  "complete in the learner's file, so as graded refusals it would "
                                                  "earn points for code the learner did not write",
    "test_operator_is_registered_with_its_schema": "it reads each operator's schema from torch.ops in the test's own "
                                                   "process; a graded case judges only what an API function returns "
                                                   "or raises, and the child hands back tensors, not the registry",
    "test_opcheck": "torch.library.opcheck runs the operator on fake tensors and through autograd's and the "
                    "dispatcher's own checks in the test's process, while the grader's child can only call an API "
                    "function on real tensors and hand back its results",
    "test_opcheck_aot_dispatch": "it needs a CUDA GPU and traces the operator with AOTAutograd through opcheck in the "
                                 "test's own process, which no protocol of the grader's child can do",
    "test_meta_tensors_get_their_shape_from_the_fake": "it calls layer_norm_gelu on meta tensors to reach the fake, "
                                                       "and the grader's child receives every tensor on the device "
                                                       "under test, never a meta tensor",
    "test_gradcheck_in_float64": "torch.autograd.gradcheck compares each backward with finite differences of its own "
                                 "forward on many perturbed inputs; layer_norm_gelu's float64 inputs of the same "
                                 "shapes are graded by its 'float64' case at a tolerance float32 arithmetic fails, "
                                 "and bias_gelu_residual and attention are given code",
    "test_residual_gradient_is_the_upstream_gradient": "it checks bias_gelu_residual, the worked example complete in "
                                                       "the learner's file, which the grade leaves out so that it "
                                                       "counts only what the learner writes",
    "test_no_graph_is_recorded_without_grad": "it calls layer_norm_gelu under torch.no_grad() on inputs that require "
                                              "grad and reads requires_grad on the result; the grader's child hands "
                                              "back plain tensors, so no case can see whether a graph was recorded",
    "test_attention_matches_sdpa": "attention is mastery/03's FlashAttention given complete in attention_op.py as "
                                   "an operator (no TODO), so its results would grade code the learner did not write; "
                                   "mastery/03 grades those kernels",
    "test_attention_rejects_bad_inputs": "attention's validation is given complete in attention_op.py with the "
                                         "rest of the operator, so as graded refusals it would earn points for code "
                                         "the learner did not write",
    "test_attention_compiles_without_graph_break": "it compiles a function calling attention with torch.compile and "
                                                   "inspects Dynamo's graph in the test's own process, which no "
                                                   "grader protocol can do; attention is given code besides",
    "test_compiles_without_graph_break": "it runs torch.compile(fullgraph=True) on a model built from both operators "
                                         "and inspects Dynamo's captured graph in the test's own process; a graded "
                                         "case calls one API function and judges only its outputs",
    "test_compiles_with_inductor": "it needs a CUDA GPU and compiles a model built from both operators with Inductor "
                                   "in the test's own process against eager, which no grader protocol can do",
    "test_input_space_reaches_every_edge": "it draws 300 examples from the learner's Hypothesis strategy (TODO 8) in "
                                           "the test's own process; a strategy is not a tensor the grader's child "
                                           "could hand back, so no protocol can judge it",
    "test_property_layer_norm_gelu_matches_pytorch": "Hypothesis draws its inputs from the learner's strategy in the "
                                                     "test's own process, which the grader's child cannot do; every "
                                                     "edge case it must reach (EDGES) is already a fixed case of CASES",
    "test_property_shifting_a_row_changes_nothing": "Hypothesis draws the rows and their shifts in the test's own "
                                                    "process, which the grader's child cannot do; rows near 1000 are "
                                                    "graded by the 'rows far from 0' case against float64 PyTorch",
    "test_property_bias_gelu_residual_matches_pytorch": "it tests bias_gelu_residual, the worked example whose fixed "
                                                        "cases are not graded either, with Hypothesis drawing inputs "
                                                        "in the test's own process, which the grader's child cannot do",
    "test_property_attention_matches_sdpa": "attention is given code, graded as mastery/03's kernels, and "
                                            "Hypothesis draws its shapes in the test's own process, which the "
                                            "grader's child cannot do",
}

# What a learner's kernel.py may use besides the course-wide allowlist: the torch.library functions
# that register an operator, its fake and its autograd formula, and wrap its kernel launches.
LIBRARY = frozenset({"library.triton_op", "library.wrap_triton", "library.custom_op", "library.register_fake",
                     "library.register_autograd"})
# The operators kernel.py registers. The call monitor logs each call of one as an operator (it
# does not look inside); their Triton launches are counted as usual.
OPERATORS = frozenset({"layer_norm_gelu", "layer_norm_gelu_backward", "bias_gelu_residual",
                       "bias_gelu_residual_backward"})
# The operators attention_op.py registers: their tests use that file, not kernel.py.
ATTENTION_OPERATORS = frozenset({"attention", "attention_backward"})
DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# ----------------------------------------------------------------------------------------------
# LayerNorm + GELU
# ----------------------------------------------------------------------------------------------

def strided(values, shape, layout):
    """A tensor of ``shape`` stored as ``layout`` says, its values from ``values(*dims)``:
    "contiguous"; "transposed" (the transpose of a contiguous (N, rows) tensor: 2-D shapes);
    "row-strided" (the first N columns of a tensor 16 columns wider); "broadcast" (one row repeated,
    row stride 0, as autograd hands over the gradient of y.sum(0))."""
    if layout == "transposed":
        return values(shape[-1], *shape[:-1]).t()
    if layout == "row-strided":
        return values(*shape[:-1], shape[-1] + 16)[..., :shape[-1]]
    if layout == "broadcast":
        return values(shape[-1]).expand(*shape)
    return values(*shape)


def layer_norm_gelu_inputs(case, rand):
    """(x, weight, bias, dy) and eps when the case sets one; weight or bias None as params["affine"]
    says ("both", "weight", "bias" or "none")."""
    params = case.params
    shape = params["shape"]
    n_cols = shape[-1]

    def values(*dims):
        return (rand.randn(*dims) * params.get("scale", 1.0) + params.get("offset", 0.0)).to(case.dtype)

    layout = params.get("layout", "contiguous")
    if layout == "constant":
        # every row holds one small integer: mean exact, variance 0, rstd = 1 / sqrt(eps)
        x = rand.uniform(*shape[:-1], 1, low=-4, high=4).round().expand(*shape).to(case.dtype).contiguous()
    else:
        x = strided(values, shape, layout)
    affine = params.get("affine", "both")
    weight = (1 + 0.5 * rand.randn(n_cols)).to(case.dtype) if affine in ("both", "weight") else None
    bias = (0.5 * rand.randn(n_cols)).to(case.dtype) if affine in ("both", "bias") else None
    dy = strided(lambda *dims: rand.randn(*dims, dtype=case.dtype), shape, params.get("dy", "contiguous"))
    kwargs = {"eps": params["eps"]} if "eps" in params else {}
    return (x, weight, bias, dy), kwargs


def layer_norm_gelu_torch(x, weight, bias, eps=1e-5):
    """What a PyTorch user writes: two kernels, the normalised x stored in between."""
    return F.gelu(F.layer_norm(x, (x.shape[-1],), weight, bias, eps))


def layer_norm_gelu_bytes(case):
    """Forward: read x, write y. Backward: read x and dy, write dx. Plus weight and bias (read
    twice, their gradients written): the fewest bytes fwd + bwd can move."""
    *leading, n_cols = case.params["shape"]
    return (5 * math.prod(leading) * n_cols + 6 * n_cols) * case.dtype.itemsize


# dweight and dbias add up one product per row in float32: the rounding of such a sum grows like
# sqrt(rows) x 1e-7 x the terms' size, while the sum itself can be small (the products cancel).
SUM_OVER_ROWS = {torch.float32: (1e-4, 1e-4)}
BACKWARD_NOTES = {
    "y": "the forward operator: layer_norm_gelu_forward and its kernel (given), reached through the "
         "operator you registered",
    "grad_x": "the backward: what setup_context saved (the input x, not the output: the backward "
              "recomputes each row's statistics from x) and the eps handed to the backward operator "
              "(the forward's, saved on ctx)",
    "grad_weight": "the second gradient backward() returns, in the order of the op's inputs (x, weight, "
                   "bias, eps): the sum over rows of dz * x_hat",
    "grad_bias": "the third gradient backward() returns, in the order of the op's inputs (x, weight, bias, "
                 "eps): the sum over rows of dz",
}

# Typical wrong backwards, which the diagnosis names when a kernel's outputs equal one of them. Each
# takes the reference's arguments (float64 copies of x, weight, bias and dy, and eps) and returns
# what the reference does, for the gradients of the inputs in ``wrt``.

def _backward_from_the_output(wrt):
    """setup_context saved the output: the backward kernel recomputes the statistics from y and
    returns the gradients at y instead of at x (the forward is right)."""
    reference = autograd_reference(layer_norm_gelu_torch, wrt=wrt)

    def compute(x, weight, bias, dy, eps=1e-5):
        y = layer_norm_gelu_torch(x, weight, bias, eps)
        return (y, *reference(y, weight, bias, dy, eps=eps)[1:])
    return compute


def _backward_with_the_default_eps(wrt):
    """The backward operator handed eps = 1e-5 (the public function's default) instead of the
    forward's eps (the forward is right)."""
    reference = autograd_reference(layer_norm_gelu_torch, wrt=wrt)

    def compute(x, weight, bias, dy, eps=1e-5):
        if eps == 1e-5:
            raise ValueError("the default eps: the mistake does not show")
        return (reference(x, weight, bias, dy, eps=eps)[0], *reference(x, weight, bias, dy, eps=1e-5)[1:])
    return compute


def _weight_and_bias_gradients_swapped(x, weight, bias, dy, eps=1e-5):
    y, grad_x, grad_weight, grad_bias = autograd_reference(layer_norm_gelu_torch, wrt=(0, 1, 2))(
        x, weight, bias, dy, eps=eps)
    return y, grad_x, grad_bias, grad_weight


def layer_norm_gelu_suspects(wrt):
    return (
        Suspect("the backward run on the output y instead of the input x (setup_context saving the output)",
                _backward_from_the_output(wrt),
                "setup_context must save the input: x, weight, bias, eps = inputs; ctx.save_for_backward(x, "
                "weight, bias). The backward kernel recomputes each row's mean and rstd from x."),
        Suspect("the backward with eps = 1e-5 (the default) instead of the forward's eps",
                _backward_with_the_default_eps(wrt),
                "keep the forward's eps in setup_context (ctx.eps = eps) and hand ctx.eps to "
                "layer_norm_gelu_backward_op."),
    )


SPEC = Spec(
    api="layer_norm_gelu",
    make_inputs=layer_norm_gelu_inputs,
    reference=autograd_reference(layer_norm_gelu_torch, wrt=(0, 1, 2)),
    protocol=Backward(wrt=(0, 1, 2)),
    suspects=(*layer_norm_gelu_suspects((0, 1, 2)),
              Suspect("a backward() that returns grad_bias in grad_weight's place and the reverse",
                      _weight_and_bias_gradients_swapped,
                      "backward() returns one gradient per input of the operator, in its order (x, weight, "
                      "bias, eps): (grad_x, grad_weight, grad_bias, None).")),
    output_names=("y", "grad_x", "grad_weight", "grad_bias"),
    output_notes=BACKWARD_NOTES,
    output_tolerances={"grad_weight": SUM_OVER_ROWS, "grad_bias": SUM_OVER_ROWS},
    row_wise=True,
    bytes_moved=layer_norm_gelu_bytes,
    torch_baseline=layer_norm_gelu_torch,
    bench_cases=(Case({"shape": (32768, 4096)}, torch.bfloat16), Case({"shape": (16384, 8192)}, torch.float16),
                 Case({"shape": (8192, 4096)})),
    ceiling="torch",
    target=1.0,
    allowed_ops=OPERATORS,
    allowed_torch_names=LIBRARY,
)

# weight or bias left out (None): only x's gradient is compared (None has no gradient).
LAYER_NORM_GELU_X_ONLY = Spec(
    api="layer_norm_gelu",
    make_inputs=layer_norm_gelu_inputs,
    reference=autograd_reference(layer_norm_gelu_torch, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    suspects=layer_norm_gelu_suspects((0,)),
    output_names=("y", "grad_x"),
    output_notes=BACKWARD_NOTES,
    row_wise=True,
    torch_baseline=layer_norm_gelu_torch,
    allowed_ops=OPERATORS,
    allowed_torch_names=LIBRARY,
)


# ----------------------------------------------------------------------------------------------
# bias + GELU + residual
# ----------------------------------------------------------------------------------------------

def bias_gelu_residual_inputs(case, rand):
    """(x, bias, residual, dy): x's spread from params["scale"] (large values saturate the GELU)."""
    params = case.params
    shape = params["shape"]
    x = strided(lambda *dims: rand.randn(*dims, dtype=case.dtype, scale=params.get("scale", 1.0)), shape,
                params.get("layout", "contiguous"))
    bias = rand.randn(shape[-1], dtype=case.dtype)
    residual = strided(lambda *dims: rand.randn(*dims, dtype=case.dtype), shape, params.get("residual", "contiguous"))
    dy = strided(lambda *dims: rand.randn(*dims, dtype=case.dtype), shape, params.get("dy", "contiguous"))
    return (x, bias, residual, dy), {}


def bias_gelu_residual_torch(x, bias, residual):
    return residual + F.gelu(x + bias)


BIAS_GELU_RESIDUAL = Spec(
    api="bias_gelu_residual",
    make_inputs=bias_gelu_residual_inputs,
    reference=autograd_reference(bias_gelu_residual_torch, wrt=(0, 1)),
    protocol=Backward(wrt=(0, 1)),
    output_names=("out", "grad_x", "grad_bias"),
    output_notes={"grad_x": "dx = dy * gelu'(x + bias), gelu'(z) = Phi(z) + z phi(z)",
                  "grad_bias": "the sum over rows of dx"},
    output_tolerances={"grad_bias": SUM_OVER_ROWS},
    # forward: read x and residual, write out; backward: read dy and x, write dx
    bytes_moved=lambda case: 5 * math.prod(case.params["shape"]) * case.dtype.itemsize,
    torch_baseline=bias_gelu_residual_torch,
    allowed_ops=OPERATORS,
    allowed_torch_names=LIBRARY,
)


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------

ROWS_SHARED = ("more rows than backward programs (4 under the interpreter, two per multiprocessor on a "
               "GPU): each program adds several rows into its partial sums of dweight and dbias.")
EPS = ("eps is as large as the variance here, in the forward and in the backward: the backward must "
       "use the forward's eps, saved on ctx in setup_context, not a default.")
ANY_LAYOUT = ("x is not contiguous. The operator takes any layout (as_rows copies only when a row is "
              "not unit-stride), so the validation must not refuse it: refusing a layout the kernel "
              "handles is a validation that is too strict.")
UPSTREAM = "dy is not contiguous: a transpose, or one row repeated with row stride 0 (the gradient of y.sum(0))."
NONE_GRAD = ("weight or bias is None: its gradient must be None too (autograd refuses a tensor as the "
             "gradient of an input that was not a tensor).")
# N = 1: x_hat = 0 and dx = rstd * (g - mean(g)) is 0, but rstd = 1 / sqrt(eps) = 316 multiplies the
# rounding of g - mean(g) where a GPU fuses g = dz * w into the subtraction (one FMA).
N_EQUALS_ONE = {torch.float32: (1e-4, 1e-4)}

CASES = [
    Case({"shape": (5, 1)}, label="N = 1: x_hat = 0", tolerances=N_EQUALS_ONE),
    Case({"shape": (16, 100)}, label="masked lanes, rows shared", hint=ROWS_SHARED),
    Case({"shape": (4, 60), "affine": "none"}, spec=LAYER_NORM_GELU_X_ONLY, label="no weight, no bias",
         hint=NONE_GRAD),
    Case({"shape": (12, 40), "layout": "transposed"}, label="x a transpose", hint=ANY_LAYOUT),
    Case({"shape": (8, 96), "eps": 0.1, "scale": 0.3}, label="eps matters", hint=EPS),
    Case({"shape": (3, 5, 20), "affine": "weight"}, torch.float16, spec=LAYER_NORM_GELU_X_ONLY,
         label="weight only", hint=NONE_GRAD),
    Case({"shape": (6, 70), "layout": "row-strided"}, label="strided rows", hint=ANY_LAYOUT),
    Case({"shape": (6, 50), "eps": 0.05, "scale": 0.2, "layout": "transposed"}, torch.float16,
         label="eps matters, x a transpose", hint=EPS),
    Case({"shape": (7, 33), "affine": "bias", "layout": "row-strided"}, spec=LAYER_NORM_GELU_X_ONLY,
         label="bias only, strided rows", hint=NONE_GRAD),
    Case({"shape": (6, 40), "layout": "constant", "eps": 1e-3}, label="constant rows: rstd = 1 / sqrt(eps)",
         hint=EPS),
    Case({"shape": (1, 7)}, label="one short row"),
    Case({"shape": (2, 3, 33)}, torch.float16, label="3-D, rows shared", hint=ROWS_SHARED),
    Case({"shape": (9, 130)}, torch.bfloat16, label="bf16, masked lanes"),
    Case({"shape": (0, 16)}, label="no rows: dweight = dbias = 0",
         hint="no rows: y and dx are empty, dweight and dbias are sums of nothing: zeros, written by a kernel."),
    Case({"shape": (8, 300), "offset": 1000.0}, label="rows far from 0",
         hint="rows near 1000 with a spread of 1: the statistics must come from the shifted row."),
    Case({"shape": (6, 50), "dy": "transposed"}, label="dy a transpose", hint=UPSTREAM),
    Case({"shape": (6, 36), "dy": "broadcast"}, torch.float16, label="dy with row stride 0", hint=UPSTREAM),
    Case({"shape": (64, 1000)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (2, 65536)}, label="the longest row supported",
         hint="N = 65536 = MAX_ROW is the longest row the operator takes: it must be accepted, and only "
              "longer rows refused (n_cols > MAX_ROW)."),
    Case({"shape": (6000, 100)}, label="many short rows", cuda_only=True, hint=ROWS_SHARED),
    Case({"shape": (4096, 4096)}, torch.bfloat16, label="large", cuda_only=True),
    Case({"shape": (1024, 16384)}, torch.float16, label="long rows", cuda_only=True),
    Case({"shape": (32, 65536)}, label="longest row", cuda_only=True),
    Case({"shape": (2048, 3000), "layout": "transposed", "dy": "transposed"}, torch.float16,
         label="large, transposed x and dy", cuda_only=True),
    Case({"shape": (2048, 2048), "affine": "none"}, torch.bfloat16, spec=LAYER_NORM_GELU_X_ONLY,
         label="no weight, no bias, large", cuda_only=True),
    # tolerances tight enough that float32 arithmetic fails (1e-7 off), loose enough for the
    # reference's float64 (at most 3e-12 off, under the interpreter and on an H200)
    Case({"shape": (3, 5)}, torch.float64, label="float64", tolerances={torch.float64: (1e-10, 1e-9)},
         hint="float64 inputs, as torch.autograd.gradcheck gives: the kernels must compute in float64 "
              "(compute_type) and return y and the gradients in float64; float32 arithmetic is off by about 1e-7."),
]

# Refusals: layer_norm_gelu() checks its inputs before launching a kernel (TODO 1 and 2), with a
# message that says what is wrong (graded like the results).
BAD = (ValueError, TypeError)
CASES += [
    refusal(SPEC, lambda rand: ((rand.randn(4, 8, dtype=torch.int32),), {}), BAD, r"dtype",
            why="name the dtype it got and the ones it supports", label="refuses an integer x"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), rand.randn(8, dtype=torch.float16)), {}), BAD, r"dtype",
            why="say that weight has another dtype than x", label="refuses a weight of another dtype"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), rand.randn(7)), {}), BAD, r"shape \(8,\)",
            why="give the shape weight must have, (8,) here", label="refuses a weight of another length"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 8), None, rand.randn(9)), {}), BAD, r"shape \(8,\)",
            why="give the shape bias must have, (8,) here", label="refuses a bias of another length"),
    refusal(SPEC, lambda rand: ((rand.randn(),), {}), BAD, r"dimension",
            why="say that a 0-d x has no last dimension to normalise", label="refuses a 0-d x"),
    refusal(SPEC, lambda rand: ((rand.randn(3, 0),), {}), BAD, r"at least one element",
            why="say that a row must hold at least one element", label="refuses rows of no element"),
    *(refusal(SPEC, lambda rand, eps=eps: ((rand.randn(4, 8),), {"eps": eps}), BAD, r"eps",
              why="name eps and say it must be a finite number >= 0", label=f"refuses eps {name}")
      for name, eps in (("negative", -1e-5), ("nan", float("nan")), ("inf", float("inf")))),
    refusal(SPEC, lambda rand: ((rand.randn(2, 65537),), {}), BAD, r"at most",
            why="say how long a row may be at most", label="refuses rows longer than one block"),
]


# bias_gelu_residual is the worked example of kernel.py, complete in the file the learner gets: its
# cases run as a pytest test of their own (below), not in CASES, so that the grade counts only what
# the learner writes.
BIAS_GELU_RESIDUAL_CASES = [
    Case({"shape": (1000,)}, label="1-D: one row"),
    Case({"shape": (7, 300)}, torch.float16, label="fp16, a partial tile"),
    Case({"shape": (3, 5, 70)}, torch.bfloat16, label="bf16, 3-D"),
    Case({"shape": (3, 4, 5, 6)}, torch.float64, label="float64, 4-D"),
    Case({"shape": (9, 1)}, label="N = 1"),
    Case({"shape": (0, 8)}, label="empty: dbias = 0"),
    Case({"shape": (2, 0)}, label="rows of no element"),
    Case({"shape": (2, 2100)}, label="three column blocks"),
    Case({"shape": (40, 30), "scale": 30.0}, label="saturated GELU",
         hint="|x| up to about 100: exp(-z^2 / 2) underflows to 0, and gelu'(z) must be 0 or 1, not NaN."),
    Case({"shape": (20, 36), "layout": "transposed", "residual": "row-strided", "dy": "broadcast"},
         label="x a transpose, residual strided, dy broadcast"),
    Case({"shape": (600, 20)}, label="rows shared", hint=ROWS_SHARED),
    Case({"shape": (700, 3)}, torch.bfloat16, label="narrow rows, rows shared", hint=ROWS_SHARED),
    Case({"shape": (8192, 4096)}, torch.bfloat16, label="large", cuda_only=True),
    Case({"shape": (4096, 11008), "layout": "transposed"}, torch.float16, label="large, x a transpose",
         cuda_only=True),
    Case({"shape": (8192, 8192), "dy": "broadcast"}, torch.bfloat16, label="large, dy broadcast", cuda_only=True),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


@pytest.mark.parametrize("bias_case", [pytest.param(c, id=c.name, marks=[pytest.mark.cuda] if c.cuda_only else [])
                                       for c in BIAS_GELU_RESIDUAL_CASES])
def test_bias_gelu_residual_matches_reference(kernel, bias_case):
    check_case(kernel, BIAS_GELU_RESIDUAL, bias_case)


# ----------------------------------------------------------------------------------------------
# Helpers of the tests below
# ----------------------------------------------------------------------------------------------

def _x(*shape, dtype=torch.float32):
    return torch.randn(shape, dtype=dtype, device=device.torch_device())


@pytest.fixture(scope="session")
def attention_op():
    """attention_op.py of this folder, loaded once per session (benchmark.py loads it under the same
    name, so a session that runs both shares one copy): given code, the same whatever --impl is."""
    name = "production_ready_attention_op"
    path = Path(__file__).with_name("attention_op.py")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return LoadedKernel(find_module(str(path.parent)), path, sys.modules[name])


def _owner(request, name):
    """The loaded file that registers operator ``name``: attention_op.py or kernel.py."""
    return request.getfixturevalue("attention_op" if name in ATTENTION_OPERATORS else "kernel")


def _operator(kernel, name):
    """torch.ops.<the file's namespace>.<name>: the registered operator, looked up by name."""
    namespace = getattr(torch.ops, kernel.namespace.NAMESPACE)
    if not hasattr(namespace, name):
        raise AssertionError(f"no operator {kernel.namespace.NAMESPACE}::{name} is registered: "
                             f"register it with torch.library.triton_op(f\"{{NAMESPACE}}::{name}\", ...).")
    return getattr(namespace, name).default


# ----------------------------------------------------------------------------------------------
# Validation: every bad input raises an error that says what to do (layer_norm_gelu's in CASES)
# ----------------------------------------------------------------------------------------------

def test_validation_names_the_device(kernel):
    """A tensor on another device than the kernels': on a GPU, through the operator (a CPU tensor);
    under the interpreter the validation itself (a meta tensor, since meta tensors go to the fake)."""
    wrong = torch.device("cpu") if device.is_cuda() else torch.device("meta")
    x = torch.randn(4, 8, device=wrong)
    check = kernel.api("layer_norm_gelu") if device.is_cuda() else kernel.api("check_layer_norm_gelu_inputs")
    with explained(kernel, "the validation"):
        expect_error(check, x, None, None, 1e-5, match="move it")


def test_bias_gelu_residual_rejects_bad_inputs(kernel):
    bias_gelu_residual = kernel.api("bias_gelu_residual")
    x = _x(4, 8)
    with explained(kernel, "bias_gelu_residual()"):
        expect_error(bias_gelu_residual, x, _x(4), x, match=r"shape \(8,\)")
        expect_error(bias_gelu_residual, x, _x(8), _x(8), match="residual")
        expect_error(bias_gelu_residual, x, _x(8).half(), x, match="dtype")
        expect_error(bias_gelu_residual, _x(), _x(1), _x(), match="dimension")


# ----------------------------------------------------------------------------------------------
# torch.library: registration, fake, autograd
# ----------------------------------------------------------------------------------------------

SCHEMAS = {
    "layer_norm_gelu": "(Tensor x, Tensor? weight, Tensor? bias, float eps) -> Tensor",
    "layer_norm_gelu_backward": "(Tensor grad_y, Tensor x, Tensor? weight, Tensor? bias, float eps) "
                                "-> (Tensor, Tensor, Tensor)",
    "bias_gelu_residual": "(Tensor x, Tensor bias, Tensor residual) -> Tensor",
    "bias_gelu_residual_backward": "(Tensor grad_out, Tensor x, Tensor bias) -> (Tensor, Tensor)",
    "attention": "(Tensor q, Tensor k, Tensor v, bool causal, float sm_scale) -> (Tensor, Tensor)",
    "attention_backward": "(Tensor grad_o, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal, "
                          "float sm_scale) -> (Tensor, Tensor, Tensor)",
}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_operator_is_registered_with_its_schema(request, name):
    kernel = _owner(request, name)
    with explained(kernel, f"looking up {name}"):
        schema = str(_operator(kernel, name)._schema).split("::", 1)[1]
    assert schema == name + SCHEMAS[name], (
        f"{name} has the schema {schema!r}, expected {name + SCHEMAS[name]!r}. triton_op infers it from "
        "the type annotations of the function it registers: keep them as kernel.py gives them.")


def _leaf(*shape, dtype=torch.float32, transposed=False):
    t = _x(*reversed(shape), dtype=dtype).t() if transposed else _x(*shape, dtype=dtype)
    return t.requires_grad_(True)


# One or more sample inputs per operator, for opcheck: small (the interpreter runs each several
# times), with inputs that require grad (for the autograd check) and layouts whose output strides
# a careless fake gets wrong.
OPCHECK_SAMPLES = {
    "layer_norm_gelu": [
        lambda: (_leaf(3, 33), _leaf(33), _leaf(33), 1e-5),
        lambda: (_leaf(4, 6, dtype=torch.float16, transposed=True), None, None, 0.1),
    ],
    "layer_norm_gelu_backward": [lambda: (_x(2, 3, 20), _x(2, 3, 20), _x(20), None, 1e-5)],
    "bias_gelu_residual": [lambda: (_leaf(5, 7, transposed=True), _leaf(7), _leaf(5, 7))],
    "bias_gelu_residual_backward": [lambda: (_x(4, 9).t(), _x(9, 4), _x(4))],
    # grouped-query heads, a causal mask, a transposed q
    "attention": [lambda: (_leaf(1, 2, 16, 9).transpose(-1, -2), _leaf(1, 1, 7, 16), _leaf(1, 1, 7, 16), True, 0.3)],
    "attention_backward": [lambda: (_x(1, 2, 9, 16), _x(1, 2, 9, 16), _x(1, 1, 7, 16), _x(1, 1, 7, 16),
                                    _x(1, 2, 9, 16), _x(1, 2, 9), False, 0.25)],
}
CPU_OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor")
SAMPLES = [pytest.param(name, sample, id=f"{name}-{i}")
           for name, samples in OPCHECK_SAMPLES.items() for i, sample in enumerate(samples)]


@pytest.mark.parametrize("name, sample", SAMPLES)
def test_opcheck(request, name, sample):
    """torch.library.opcheck: the schema is honest (no input mutated, no output aliasing an input),
    autograd is registered where inputs require grad, and the fake gives the real output's shape,
    dtype, device and strides."""
    kernel = _owner(request, name)
    torch.manual_seed(0)
    with explained(kernel, f"opcheck of {name}"):
        torch.library.opcheck(_operator(kernel, name), sample(), test_utils=CPU_OPCHECKS)


@pytest.mark.cuda
@pytest.mark.parametrize("name, sample", SAMPLES)
def test_opcheck_aot_dispatch(request, name, sample):
    """opcheck's last check traces the operator with AOTAutograd, as torch.compile does, and runs the
    graph, forward and backward. triton_op then runs the launcher on fake tensors and wrap_triton
    records the kernel launch: under Triton's interpreter wrap_triton hands back the Python kernel,
    which cannot run on fake tensors, so this check needs a GPU."""
    kernel = _owner(request, name)
    torch.manual_seed(0)
    with explained(kernel, f"opcheck (test_aot_dispatch_dynamic) of {name}"):
        torch.library.opcheck(_operator(kernel, name), sample(), test_utils="test_aot_dispatch_dynamic")


def test_meta_tensors_get_their_shape_from_the_fake(kernel):
    """Meta tensors have a shape and no data: the operator answers with the fake, launching nothing,
    whatever the size. Its result must look like the real one: x's shape and dtype, contiguous."""
    layer_norm_gelu = kernel.api("layer_norm_gelu")
    x = torch.empty(4096, 1 << 20, device="meta", dtype=torch.bfloat16).t()  # a transpose: strides (1, 4096)
    with explained(kernel, "layer_norm_gelu() on meta tensors"):
        y = layer_norm_gelu(x, None, None)
    assert y.device.type == "meta" and y.shape == x.shape and y.dtype == x.dtype, (
        f"on a meta x of shape {tuple(x.shape)} ({x.dtype}) the operator returned {y.device} {tuple(y.shape)} "
        f"{y.dtype}: the fake must give x's shape and dtype, on x's device.")
    assert y.is_contiguous(), (
        f"on a transposed x the fake returned strides {y.stride()}, but the operator returns a contiguous "
        "tensor whatever x's layout: allocate with x.new_empty(x.shape), not torch.empty_like(x) (which "
        "copies x's strides).")


GRADCHECKS = {
    "layer_norm_gelu": lambda k: (k.api("layer_norm_gelu"), (_leaf(3, 5, dtype=torch.float64),
                                                             _leaf(5, dtype=torch.float64),
                                                             _leaf(5, dtype=torch.float64))),
    "bias_gelu_residual": lambda k: (k.api("bias_gelu_residual"), (_leaf(4, 3, dtype=torch.float64),
                                                                   _leaf(3, dtype=torch.float64),
                                                                   _leaf(4, 3, dtype=torch.float64))),
    "attention": lambda k: (lambda q, kk, v: k.api("attention")(q, kk, v, causal=True),
                            (_leaf(1, 2, 6, 16, dtype=torch.float64), _leaf(1, 1, 5, 16, dtype=torch.float64),
                             _leaf(1, 1, 5, 16, dtype=torch.float64))),
}


@pytest.mark.parametrize("name", list(GRADCHECKS))
def test_gradcheck_in_float64(request, name):
    """The backward against finite differences of the forward, in float64 (the kernels compute in
    float64 when given float64)."""
    kernel = _owner(request, name)
    torch.manual_seed(0)
    fn, inputs = GRADCHECKS[name](kernel)
    with explained(kernel, f"gradcheck of {name}()"):
        try:
            torch.autograd.gradcheck(fn, inputs, fast_mode=True)
        except GradcheckError as error:
            raise AssertionError(f"{name}: the backward's gradients differ from finite differences of the "
                                 f"forward.\n{str(error)[:600]}") from None


def test_residual_gradient_is_the_upstream_gradient(kernel):
    x, bias, residual = _leaf(6, 10), _leaf(10), _leaf(6, 10)
    dy = _x(6, 10)
    with explained(kernel, "bias_gelu_residual() and its backward"):
        out = kernel.api("bias_gelu_residual")(x, bias, residual)
        (grad_residual,) = torch.autograd.grad(out, residual, dy)
    assert torch.equal(grad_residual, dy), "the gradient of the residual must be the upstream gradient itself."


def test_no_graph_is_recorded_without_grad(kernel):
    x, weight = _leaf(4, 16), _leaf(16)
    with explained(kernel, "layer_norm_gelu() under torch.no_grad()"):
        with torch.no_grad():
            y = kernel.api("layer_norm_gelu")(x, weight, None)
    assert not y.requires_grad, "under torch.no_grad() the output must not require grad."


# ----------------------------------------------------------------------------------------------
# Attention: the FlashAttention kernels of mastery/03 as an operator, in attention_op.py (given)
# ----------------------------------------------------------------------------------------------

# (batch, q heads, kv heads, Sq, Sk, D, causal, dtype): lengths that are not multiples of a tile,
# more keys than queries and fewer, grouped-query heads; 16-bit ones on a GPU only as well.
ATTENTION_SHAPES = [
    pytest.param((1, 2, 2, 40, 40, 16, False, torch.float32), id="square"),
    pytest.param((2, 4, 2, 33, 47, 32, True, torch.float32), id="causal-gqa-more-keys"),
    pytest.param((1, 2, 1, 20, 9, 64, True, torch.float32), id="causal-fewer-keys"),
    pytest.param((1, 2, 2, 17, 9, 16, False, torch.bfloat16), id="bf16"),
    pytest.param((1, 2, 1, 24, 24, 128, True, torch.float16), id="fp16-d128"),
    pytest.param((2, 8, 2, 300, 300, 64, True, torch.bfloat16), id="bf16-longer", marks=pytest.mark.cuda),
    pytest.param((1, 4, 4, 257, 129, 128, False, torch.float16), id="fp16-d128-longer", marks=pytest.mark.cuda),
]
# (atol, rtol) against float64: float32 accumulates exactly enough; 16-bit inputs round p to 16 bits
ATTENTION_TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2)}


@pytest.mark.parametrize("shape", ATTENTION_SHAPES)
def test_attention_matches_sdpa(attention_op, shape):
    """Output and gradients against F.scaled_dot_product_attention computed in float64."""
    batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, dtype = shape
    torch.manual_seed(0)
    q, k, v = (_leaf(batch, h, s, head_dim, dtype=dtype) for h, s in ((heads, seq_q), (kv_heads, seq_k), (kv_heads, seq_k)))
    do = _x(batch, heads, seq_q, head_dim, dtype=dtype)
    with explained(attention_op, "attention() and its backward"):
        o = attention_op.api("attention")(q, k, v, causal=causal)
        grads = torch.autograd.grad(o, (q, k, v), do)
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o64 = F.scaled_dot_product_attention(*exact, is_causal=causal, enable_gqa=True)
    exact_grads = torch.autograd.grad(o64, exact, do.double())
    atol, rtol = ATTENTION_TOLERANCES[dtype]
    assert o.dtype == dtype and o.shape == q.shape and o.is_contiguous()
    for name, got, want in zip(("o", "dq", "dk", "dv"), (o, *grads), (o64, *exact_grads)):
        error = (got.double() - want).abs().max().item()
        assert torch.allclose(got.double(), want, atol=atol, rtol=rtol), (
            f"attention {name} differs from SDPA's in float64 by up to {error:.3g} ({tuple(q.shape)} q, "
            f"{tuple(k.shape)} k, causal={causal}, {dtype}).")


def test_attention_rejects_bad_inputs(attention_op):
    attention = attention_op.api("attention")
    q, k = _x(1, 2, 8, 16), _x(1, 1, 8, 16)
    with explained(attention_op, "attention()"):
        expect_error(attention, q, k, _x(1, 1, 9, 16), match="same shape")
        expect_error(attention, q, _x(1, 3, 8, 16), _x(1, 3, 8, 16), match="multiple")
        expect_error(attention, _x(1, 2, 8, 24), _x(1, 1, 8, 24), _x(1, 1, 8, 24), match="Pad")
        expect_error(attention, q, k, k.half(), match="dtype")
        expect_error(attention, q[0], k[0], k[0], match="dimension")
        expect_error(attention, q, k, k, causal=1, match="True or False")
        expect_error(attention, q, k, k, sm_scale=-1.0, match="positive")
        expect_error(attention, q, _x(1, 1, 0, 16), _x(1, 1, 0, 16), match="no keys")


def test_attention_compiles_without_graph_break(attention_op):
    """torch.compile(fullgraph=True) of a function that calls attention(): one operator node, and
    the compiled output and gradients equal eager's."""
    attention = attention_op.api("attention")
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.manual_seed(0)
    inputs = (_x(1, 2, 12, 16), _x(1, 1, 10, 16), _x(1, 1, 10, 16))
    torch.compiler.reset()
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, causal=True), fullgraph=True, backend=recording)
    results = []
    with explained(attention_op, "torch.compile(attention, fullgraph=True)", memory_checked=False):
        for fn in (lambda q, k, v: attention(q, k, v, causal=True), compiled):
            leaves = [t.clone().requires_grad_() for t in inputs]
            out = fn(*leaves)
            results.append((out.detach(), torch.autograd.grad(out.sum(), leaves)))
    called = [str(node.target).split(".")[-2] for graph in graphs for node in graph.graph.nodes
              if node.op == "call_function" and attention_op.namespace.NAMESPACE in str(node.target)]
    assert called == ["attention"], f"the compiled graph calls {called}; expected the attention operator once."
    (eager, eager_grads), (got, got_grads) = results
    assert torch.allclose(got, eager, atol=1e-6, rtol=1e-5)
    for a, b in zip(got_grads, eager_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------------------------
# torch.compile: a small model built from both operators
# ----------------------------------------------------------------------------------------------

class TinyBlock(torch.nn.Module):
    """x + gelu(W gelu(layer_norm(x)) + b): a pre-norm residual block made of the two operators and
    one matmul."""

    def __init__(self, ops, dim=32):
        super().__init__()
        self.ops = ops
        generator = torch.Generator().manual_seed(0)
        self.norm_weight = torch.nn.Parameter(1 + 0.1 * torch.randn(dim, generator=generator))
        self.norm_bias = torch.nn.Parameter(0.1 * torch.randn(dim, generator=generator))
        self.proj = torch.nn.Linear(dim, dim, bias=False)
        self.proj_bias = torch.nn.Parameter(0.1 * torch.randn(dim, generator=generator))

    def forward(self, x):
        h = self.ops.layer_norm_gelu(x, self.norm_weight, self.norm_bias)
        return self.ops.bias_gelu_residual(self.proj(h), self.proj_bias, x)


def _compiled_against_eager(kernel, backend=None):
    """([(output, gradients) of the eager model, the same of the compiled one], the graphs Dynamo
    captured). backend None records Dynamo's graph and runs it as it is (like backend="eager")."""
    where = device.torch_device()
    torch.manual_seed(0)
    model = TinyBlock(kernel.namespace).to(where)
    x = torch.randn(2, 5, 32, device=where)
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compiler.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend or recording)
    results = []
    for fn in (model, compiled):
        inputs = x.clone().requires_grad_(True)
        out = fn(inputs)
        grads = torch.autograd.grad(out, [inputs, *model.parameters()], torch.ones_like(out))
        results.append((out.detach(), grads))
    return results, graphs


def test_compiles_without_graph_break(kernel):
    """torch.compile(fullgraph=True) raises at the first graph break, whatever the backend. The
    backend here runs Dynamo's graph as it is (like backend="eager"), after recording it: the
    graph must call both operators as single nodes. (AOTAutograd and Inductor need a GPU: see
    test_compiles_with_inductor.)"""
    with explained(kernel, "torch.compile(TinyBlock, fullgraph=True)", memory_checked=False):
        ((eager, eager_grads), (compiled, compiled_grads)), graphs = _compiled_against_eager(kernel)
    called = {str(node.target).split(".")[-2] for graph in graphs for node in graph.graph.nodes
              if node.op == "call_function" and kernel.namespace.NAMESPACE in str(node.target)}
    assert called == {"layer_norm_gelu", "bias_gelu_residual"}, (
        f"the compiled graph calls these operators of kernel.py: {sorted(called)}; expected layer_norm_gelu and "
        "bias_gelu_residual, each one node (the public functions must call the registered operators).")
    assert torch.allclose(compiled, eager, atol=1e-6, rtol=1e-5), "the compiled block's output differs from eager's."
    for got, want in zip(compiled_grads, eager_grads):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), "the compiled block's gradients differ from eager's."


@pytest.mark.cuda
def test_compiles_with_inductor(kernel):
    """The default backend: AOTAutograd traces forward and backward, triton_op decomposes each
    operator into its wrapped kernel launches, and Inductor compiles them with the rest."""
    with explained(kernel, "torch.compile(TinyBlock, fullgraph=True) with Inductor", memory_checked=False):
        ((eager, eager_grads), (compiled, compiled_grads)), _ = _compiled_against_eager(kernel, "inductor")
    assert torch.allclose(compiled, eager, atol=1e-4, rtol=1e-4), "the compiled block's output differs from eager's."
    for got, want in zip(compiled_grads, eager_grads):
        assert torch.allclose(got, want, atol=1e-3, rtol=1e-3), "the compiled block's gradients differ from eager's."


# ----------------------------------------------------------------------------------------------
# Properties (Hypothesis): what must hold for every input, not only for the cases above
# ----------------------------------------------------------------------------------------------

# Few examples (the interpreter runs every one), no time limit per example, the same examples on
# every run (a test suite must not flicker), no example database written to the disk, and when a
# property fails: shrink the first failure found to a minimal input, but skip the "explain" phase,
# which traces every line run and makes the interpreter ten times slower.
PROPERTY = settings(max_examples=15, deadline=None, derandomize=True, database=None, report_multiple_bugs=False,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much])
# What a property test draws from kernel.py's input space must reach each of these.
EDGES = {
    "rows of one element (N = 1)": lambda p: p["n"] == 1,
    "a row length that is not a power of two, above 64": lambda p: p["n"] > 64 and p["n"] & (p["n"] - 1),
    "no rows at all (a 0 among the leading dimensions)": lambda p: 0 in p["leading"],
    "a 3-D x (two leading dimensions)": lambda p: len(p["leading"]) >= 2,
    "float16": lambda p: p["dtype"] == "float16",
    "bfloat16": lambda p: p["dtype"] == "bfloat16",
    "a transposed x": lambda p: p["layout"] == "transposed",
    "rows that are not packed (row-strided)": lambda p: p["layout"] == "row-strided",
    "rows whose mean is 1000 or more": lambda p: abs(p["offset"]) >= 1000,
    "weight and bias both left out": lambda p: p["affine"] == "none",
    "only one of weight and bias": lambda p: p["affine"] in ("weight", "bias"),
    "an eps of 0.1 or more": lambda p: p["eps"] >= 0.1,
}
KEYS = {"leading", "n", "dtype", "layout", "offset", "affine", "eps"}


def _input_space(kernel):
    space = kernel.api("layer_norm_gelu_input_space")(st)
    if not isinstance(space, st.SearchStrategy):
        raise AssertionError(f"layer_norm_gelu_input_space(st) returned {type(space).__name__}, not a Hypothesis "
                             "strategy: build it from st (st.fixed_dictionaries, st.integers, ...).")
    return space


def _tensors_from(params, seed):
    """(x, weight, bias, eps) as one dict of the input space describes them."""
    rand = torch.Generator().manual_seed(seed)
    dtype = DTYPE_NAMES[params["dtype"]]
    shape = (*params["leading"], params["n"])

    def values(*dims):
        return torch.randn(dims, generator=rand) + params["offset"]

    x = strided(values, shape, params["layout"]).to(dtype)
    weight = (1 + 0.5 * torch.randn(params["n"], generator=rand)).to(dtype)
    bias = (0.5 * torch.randn(params["n"], generator=rand)).to(dtype)
    weight = weight if params["affine"] in ("both", "weight") else None
    bias = bias if params["affine"] in ("both", "bias") else None
    where = device.torch_device()
    return [t.to(where) if t is not None else None for t in (x, weight, bias)] + [params["eps"]]


def _expect_close(name, got, want, dtype, looser=False, where=""):
    """Fail unless got matches the float64 want within dtype's tolerance (the cases' defaults;
    ``looser`` for sums over rows and rows far from 0, whose float32 rounding is larger)."""
    atol, rtol = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}.get(dtype, (1e-5, 1e-4))
    if looser and dtype == torch.float32:
        atol = 1e-4
    error = (got.detach().cpu().double() - want.detach().cpu()).abs()
    bad = error > atol + rtol * want.detach().cpu().abs()
    if bool(bad.any()) or got.shape != want.shape:
        raise AssertionError(f"{name} differs from float64 PyTorch's at {int(bad.sum())} of {bad.numel()} elements, "
                             f"by up to {error.max().item():.3g} (allowed: {atol:g} + {rtol:g} x |expected|){where}.")


def _draws(space, count=300):
    """``count`` examples of ``space``, as Hypothesis generates them (no shrinking: the first ones
    are kept as they are)."""
    drawn = []

    @settings(max_examples=count, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(space)
    def collect(example):
        drawn.append(example)

    collect()
    return drawn


def test_input_space_reaches_every_edge(kernel):
    """A property test is only as good as what it draws. Every dict the input space draws must be a
    valid input, and among 300 draws each edge case above must come up."""
    with explained(kernel, "layer_norm_gelu_input_space(st)"):
        drawn = _draws(_input_space(kernel))
    wrong = [example for example in drawn if not isinstance(example, dict) or set(example) != KEYS]
    assert not wrong, (f"the input space draws {wrong[0]!r}; each example must be a dict with exactly the keys "
                       f"{sorted(KEYS)}.")
    invalid = [p for p in drawn if not (1 <= p["n"] <= 65536 and p["dtype"] in DTYPE_NAMES and p["eps"] >= 0
                                        and all(d >= 0 for d in p["leading"])
                                        and (p["layout"] != "transposed" or len(p["leading"]) == 1))]
    assert not invalid, (f"the input space draws {invalid[0]!r}, which is not a valid input (N from 1 to 65536, "
                         "a dtype of float32, float16 or bfloat16, eps >= 0, a transposed x 2-D).")
    missing = [edge for edge, holds in EDGES.items() if not any(holds(p) for p in drawn)]
    assert not missing, ("in 300 draws the input space never gave " + "; ".join(missing) + ". The validation "
                         "accepts these inputs, so the property tests must try them.")


def _layer_norm_gelu_against_pytorch(fn, params):
    """Run fn (the operator) forward and backward on the input ``params`` describes, and compare y
    and every gradient with float64 PyTorch's."""
    x, weight, bias, eps = _tensors_from(params, seed=params["n"])
    given = [t is not None for t in (x, weight, bias)]
    leaves = [t.detach().requires_grad_(True) for t in (x, weight, bias) if t is not None]
    exact = [t.detach().double().requires_grad_(True) for t in leaves]

    def arguments(tensors):
        found = iter(tensors)
        return [next(found) if present else None for present in given]

    y = fn(*arguments(leaves), eps=eps)
    want = layer_norm_gelu_torch(*arguments(exact), eps)
    dy = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(want.device)
    grads = torch.autograd.grad(y, leaves, dy.to(y)) if y.numel() else [torch.zeros_like(t) for t in leaves]
    want_grads = torch.autograd.grad(want, exact, dy) if want.numel() else [torch.zeros_like(t) for t in exact]
    far = abs(params["offset"]) >= 100
    _expect_close("y", y, want, x.dtype, looser=far)
    names = [name for name, present in zip(("grad_x", "grad_weight", "grad_bias"), given) if present]
    for name, got, expected in zip(names, grads, want_grads):
        _expect_close(name, got, expected, x.dtype, looser=far or name != "grad_x")


def test_property_layer_norm_gelu_matches_pytorch(kernel):
    """For every input of the input space kernel.py declares, the forward and the gradients match
    float64 PyTorch. When it fails, Hypothesis shrinks the input to a minimal one that still fails."""
    with explained(kernel, "layer_norm_gelu_input_space(st)"):
        space = _input_space(kernel)
    fn = kernel.api("layer_norm_gelu")

    @PROPERTY
    @given(params=space)
    def matches_pytorch(params):
        assume(math.prod(params["leading"]) * params["n"] <= 8192)  # keep the interpreter quick
        with explained(kernel, f"layer_norm_gelu() on {params}"):
            _layer_norm_gelu_against_pytorch(fn, params)

    matches_pytorch()


def test_property_shifting_a_row_changes_nothing(kernel):
    """layer_norm_gelu(x + c) = layer_norm_gelu(x) for a constant c per row: the normalisation
    removes the mean. x holds multiples of 1/8 below 8 in magnitude and c integers up to 1000, so
    x + c is exact in float32 and any difference comes from the kernel."""
    fn = kernel.api("layer_norm_gelu")
    where = device.torch_device()

    @PROPERTY
    @given(n=st.integers(1, 200), shifts=st.lists(st.integers(-1000, 1000), min_size=1, max_size=6))
    def shift_invariant(n, shifts):
        generator = torch.Generator().manual_seed(n)
        x = (torch.randn(len(shifts), n, generator=generator) * 16).round().clamp(-63, 63) / 8
        weight, bias = torch.randn(n, generator=generator), torch.randn(n, generator=generator)
        shifted = x + torch.tensor(shifts, dtype=torch.float32)[:, None]
        with explained(kernel, "layer_norm_gelu()"):
            y = fn(x.to(where), weight.to(where), bias.to(where))
            y_shifted = fn(shifted.to(where), weight.to(where), bias.to(where))
        worst = (y - y_shifted).abs().max().item()
        assert worst <= 1e-5, (f"shifting the rows by {shifts} moved the output by up to {worst:.3g}: the "
                               "statistics must not depend on the rows' mean.")

    shift_invariant()


def test_property_bias_gelu_residual_matches_pytorch(kernel):
    fn = kernel.api("bias_gelu_residual")
    where = device.torch_device()

    @PROPERTY
    @given(leading=st.lists(st.integers(0, 8), max_size=2).map(tuple), n=st.integers(1, 300),
           dtype=st.sampled_from(sorted(DTYPE_NAMES)), scale=st.sampled_from((0.1, 1.0, 10.0, 60.0)))
    def matches_pytorch(leading, n, dtype, scale):
        dtype = DTYPE_NAMES[dtype]
        generator = torch.Generator().manual_seed(n)
        x = (torch.randn(*leading, n, generator=generator) * scale).to(dtype)
        bias = torch.randn(n, generator=generator).to(dtype)
        residual = torch.randn(*leading, n, generator=generator).to(dtype)
        with explained(kernel, "bias_gelu_residual()"):
            out = fn(x.to(where), bias.to(where), residual.to(where))
        assert out.shape == x.shape and out.dtype == dtype, f"out is {tuple(out.shape)} {out.dtype}, expected x's"
        _expect_close("out", out, bias_gelu_residual_torch(x.double(), bias.double(), residual.double()), dtype)

    matches_pytorch()


def test_property_attention_matches_sdpa(attention_op):
    """For every shape in a small space (one query or key, lengths around the tile sizes, more
    queries than keys under a causal mask, grouped-query heads) and a softmax scale large enough
    to make the scores spiky: o and the gradients match SDPA's in float64."""
    fn = attention_op.api("attention")
    where = device.torch_device()

    @PROPERTY
    @given(seq_q=st.integers(1, 70), seq_k=st.integers(1, 70), head_dim=st.sampled_from((16, 32)),
           heads=st.sampled_from(((1, 1), (2, 1), (4, 2))), causal=st.booleans(),
           sm_scale=st.sampled_from((None, 0.05, 1.0)))
    def matches_sdpa(seq_q, seq_k, head_dim, heads, causal, sm_scale):
        generator = torch.Generator().manual_seed(seq_q * 100 + seq_k)
        q_heads, kv_heads = heads
        q = torch.randn(1, q_heads, seq_q, head_dim, generator=generator)
        k = torch.randn(1, kv_heads, seq_k, head_dim, generator=generator)
        v = torch.randn(1, kv_heads, seq_k, head_dim, generator=generator)
        do = torch.randn(1, q_heads, seq_q, head_dim, generator=generator)
        leaves = [t.to(where).requires_grad_() for t in (q, k, v)]
        with explained(attention_op, "attention() and its backward"):
            o = fn(*leaves, causal=causal, sm_scale=sm_scale)
            grads = torch.autograd.grad(o, leaves, do.to(where))
        exact = [t.double().requires_grad_() for t in (q, k, v)]
        o64 = F.scaled_dot_product_attention(*exact, is_causal=causal, scale=sm_scale, enable_gqa=True)
        exact_grads = torch.autograd.grad(o64, exact, do.double())
        for name, got, want in zip(("o", "dq", "dk", "dv"), (o, *grads), (o64, *exact_grads)):
            assert torch.allclose(got.double().cpu(), want, atol=2e-4, rtol=2e-4), (
                f"attention {name} differs from SDPA's by up to {(got.double().cpu() - want).abs().max().item():.3g}")

    matches_sdpa()
