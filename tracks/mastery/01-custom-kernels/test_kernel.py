"""Public tests for 01-custom-kernels.  Run:  pytest tracks/mastery/01-custom-kernels

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. Every operation has two Specs: a forward one (call the function, compare its
output) and a backward one (protocol=Backward: the harness makes the inputs leaves that require
grad, calls the function, backpropagates the case's upstream gradient through it with
torch.autograd.grad, and compares the output and every input gradient with PyTorch's, computed
in float64). silu() is the module's main function, the one that is timed; cases with another
spec= call poly_act(), glu() or complex_mul().

The cases cover one element, sizes that leave a partial last block, several dimensions, fp16,
bf16 and float64 (gradcheck's dtype), strided inputs, upstream gradients that are not contiguous
(a transpose, a slice, one value expanded as .sum() gives it), GLU split along every dimension,
and complex data in both of its layouts, (..., 2N) and (..., N, 2); then the inputs each function
must refuse, with a message that says what is wrong.
"""

import torch
import torch.nn.functional as F

from grader import device
from grader.cases import Backward, Case, Spec, refusal
from grader.checks import autograd_reference, check_case

PYTEST_ONLY = {
    "test_gradcheck_in_float64":
        "the README names this test; the same derivatives are graded by the float64 Backward cases of CASES "
        "(forward and gradients against float64 autograd, at a tolerance float32 arithmetic fails), while "
        "gradcheck compares them with finite differences in this process.",
    "test_backward_through_a_sum":
        "the README names this test; the same upstream gradient, one value expanded to the output's shape "
        "(every stride 0), is graded by the Backward cases of CASES labelled 'one value expanded'.",
}

# Each public function wraps a torch.autograd.Function: the grader's static check must let
# kernel.py name torch.autograd.Function.
AUTOGRAD = frozenset({"autograd", "autograd.Function"})


# --- inputs ---------------------------------------------------------------------------------------


def _tensor(rand, shape, dtype, layout="contiguous", scale=1.0):
    """A random tensor of ``shape`` stored as ``layout`` says: "contiguous"; "transposed" (its
    dimensions reversed in memory); "sliced" (every other element of a last dimension twice as
    long); "row-strided" (the first columns of wider rows: packed rows they are not); "expanded"
    (one value expanded to the shape, every stride 0: the upstream gradient of f(x).sum())."""
    if layout == "transposed":
        return rand.randn(*reversed(shape), dtype=dtype, scale=scale).permute(*reversed(range(len(shape))))
    if layout == "sliced":
        return rand.randn(*shape[:-1], 2 * shape[-1], dtype=dtype, scale=scale)[..., ::2]
    if layout == "row-strided":
        return rand.randn(*shape[:-1], shape[-1] + 6, dtype=dtype, scale=scale)[..., :shape[-1]]
    if layout == "expanded":  # one value seen at every position: all strides 0, as .sum() backpropagates
        return rand.randn(1, dtype=dtype, scale=scale).expand(*shape)
    if layout != "contiguous":
        raise ValueError(f"unknown layout {layout!r}")
    return rand.randn(*shape, dtype=dtype, scale=scale)


def _with_upstream(make_inputs, forward):
    """make_inputs for a Backward spec: the forward inputs, then the upstream gradient, shaped
    like the forward's output and stored as params["upstream"] says (default: contiguous)."""
    def make(case, rand):
        args, kwargs = make_inputs(case, rand)
        with torch.no_grad():
            out = forward(*args, **kwargs)
        upstream = _tensor(rand, tuple(out.shape), case.dtype, case.params.get("upstream", "contiguous"))
        return (*args, upstream), kwargs

    return make


def x_inputs(case, rand):
    """x for silu."""
    p = case.params
    return (_tensor(rand, p["shape"], case.dtype, p.get("layout", "contiguous"), p.get("scale", 1.0)),), {}


def poly_inputs(case, rand):
    """x and the coefficients (a tuple of Python floats) for poly_act."""
    (x,), _ = x_inputs(case, rand)
    return (x, tuple(case.params.get("coeffs", CUBIC))), {}


def glu_inputs(case, rand):
    """x, and dim when the case sets one."""
    (x,), _ = x_inputs(case, rand)
    return (x,), ({"dim": case.params["dim"]} if "dim" in case.params else {})


def complex_inputs(case, rand):
    """x and y: interleaved (real, imag) pairs along the last dimension. Layout "pairs apart"
    stores a (..., N, 2) tensor with its real parts together and its imaginary parts together,
    so a pair's two values are not adjacent in memory."""
    p = case.params
    shape, layout = p["shape"], p.get("layout", "contiguous")
    if layout == "pairs apart":
        def make():
            return rand.randn(*shape[:-2], 2, shape[-2], dtype=case.dtype).transpose(-1, -2)
        return (make(), make()), {}
    return (_tensor(rand, shape, case.dtype, layout), _tensor(rand, shape, case.dtype, layout)), {}


# --- references (float64, from the harness's copies of the inputs) ---------------------------------
# The Backward specs' references come from these plain PyTorch forwards through autograd. Each
# one's last parameter only names the upstream gradient, which Backward cases pass last: the
# harness hands it to autograd (never to the forward), and messages then say "grad_y", not "input 2".


def silu_reference(x, grad_y=None):
    return F.silu(x)


def poly_reference(x, coeffs, grad_y=None):
    c0, c1, c2, c3 = (tuple(coeffs) + (0.0, 0.0, 0.0))[:4]
    return c0 + c1 * x + c2 * x ** 2 + c3 * x ** 3


def glu_reference(x, grad_y=None, dim=-1):
    return F.glu(x, dim=dim)


def complex_reference(x, y, grad_z=None):
    """(x_re + i x_im)(y_re + i y_im) on interleaved pairs, in real arithmetic: any strides."""
    x_re, x_im, y_re, y_im = x[..., 0::2], x[..., 1::2], y[..., 0::2], y[..., 1::2]
    return torch.stack((x_re * y_re - x_im * y_im, x_re * y_im + x_im * y_re), dim=-1).flatten(-2)


# --- what a PyTorch user would write (benchmarks; notebooks while a kernel is unfinished) -----------


def torch_poly_act(x, coeffs):
    return poly_reference(x, coeffs)


def torch_complex_mul(x, y):
    """Through torch.view_as_complex: complex64 for fp32, complex128 for fp64. fp16 and bf16 data
    go through complex64 and back (bf16 has no complex type, and rounding the products to 16 bits
    before adding them loses accuracy)."""
    complex_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    as_complex = [torch.view_as_complex(t.to(complex_dtype).contiguous().view(*t.shape[:-1], -1, 2)) for t in (x, y)]
    return torch.view_as_real(as_complex[0] * as_complex[1]).view(x.shape).to(x.dtype)


# --- cost model --------------------------------------------------------------------------------------


def _elements(case):
    return torch.Size(case.params["shape"]).numel()


def _bytes(elements_moved):
    """bytes_moved from the number of elements an operation reads plus writes."""
    return lambda case: int(elements_moved * _elements(case)) * case.dtype.itemsize


BENCH = tuple(Case({"shape": (8192, 16384)}, dtype) for dtype in (torch.float32, torch.float16, torch.bfloat16))

SPEC = Spec(
    api="silu",
    make_inputs=x_inputs,
    reference=silu_reference,
    bytes_moved=_bytes(2),  # read x, write y
    torch_baseline=F.silu,
    bench_cases=BENCH,
    ceiling="copy",
    target=0.90,
    allowed_torch_names=AUTOGRAD,
)

SILU_BACKWARD = Spec(
    api="silu",
    make_inputs=_with_upstream(x_inputs, silu_reference),
    reference=autograd_reference(silu_reference, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    output_names=("y", "grad_x"),
    output_notes={"grad_x": "the derivative of x * sigmoid(x), which needs the product rule: "
                            "sigmoid(x) + x * sigmoid(x) * (1 - sigmoid(x)), times grad_y"},
    bytes_moved=_bytes(2 + 3),  # forward: read x, write y; backward: read x and grad_y, write grad_x
    allowed_torch_names=AUTOGRAD,
)

POLY_ACT = Spec(
    api="poly_act",
    make_inputs=poly_inputs,
    reference=poly_reference,
    bytes_moved=_bytes(2),
    torch_baseline=torch_poly_act,
    bench_cases=(Case({"shape": (8192, 16384)}),),
    ceiling="copy",
    target=0.90,
    allowed_torch_names=AUTOGRAD,
)

POLY_ACT_BACKWARD = Spec(
    api="poly_act",
    make_inputs=_with_upstream(poly_inputs, poly_reference),
    reference=autograd_reference(poly_reference, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    output_names=("y", "grad_x"),
    output_notes={"grad_x": "the derivative c1 + 2 c2 x + 3 c3 x^2 (the power rule: d/dx x^k = k x^(k-1)), "
                            "times grad_y"},
    bytes_moved=_bytes(2 + 3),
    allowed_torch_names=AUTOGRAD,
)

GLU = Spec(
    api="glu",
    make_inputs=glu_inputs,
    reference=glu_reference,
    bytes_moved=_bytes(1 + 0.5),  # read x, write y (half of x)
    torch_baseline=F.glu,
    bench_cases=(Case({"shape": (8192, 16384)}), Case({"shape": (8192, 16384)}, torch.bfloat16)),
    ceiling="copy",
    target=0.90,
    allowed_torch_names=AUTOGRAD,
)

GLU_BACKWARD = Spec(
    api="glu",
    make_inputs=_with_upstream(glu_inputs, glu_reference),
    reference=autograd_reference(glu_reference, wrt=(0,)),
    protocol=Backward(wrt=(0,)),
    output_names=("y", "grad_x"),
    output_notes={"grad_x": "grad_a = grad_y * sigmoid(b) and grad_b = grad_y * a * s * (1 - s), "
                            "each stored where its half of x came from"},
    bytes_moved=_bytes(1.5 + 2.5),  # forward: x, y; backward: read x and grad_y, write grad_x
    allowed_torch_names=AUTOGRAD,
)

COMPLEX_MUL = Spec(
    api="complex_mul",
    make_inputs=complex_inputs,
    reference=complex_reference,
    output_names=("z",),
    bytes_moved=_bytes(3),  # read x and y, write z
    torch_baseline=torch_complex_mul,
    bench_cases=(Case({"shape": (8192, 16384)}), Case({"shape": (8192, 16384)}, torch.bfloat16)),
    ceiling="copy",
    target=0.90,
    allowed_torch_names=AUTOGRAD,
)

COMPLEX_MUL_BACKWARD = Spec(
    api="complex_mul",
    make_inputs=_with_upstream(complex_inputs, complex_reference),
    reference=autograd_reference(complex_reference, wrt=(0, 1)),
    protocol=Backward(wrt=(0, 1)),
    output_names=("z", "grad_x", "grad_y"),
    output_notes={"grad_x": "grad_z times the conjugate of y (not y itself)",
                  "grad_y": "grad_z times the conjugate of x (not x itself)"},
    bytes_moved=_bytes(3 + 5),  # forward: x, y, z; backward: read x, y, grad_z, write grad_x, grad_y
    allowed_torch_names=AUTOGRAD,
)

CUBIC = (0.5, -1.0, 0.25, 0.1)
SATURATED = ("|x| up to about 60: sigmoid(x) is 0 or 1 to float32 precision there, and exp(-x) "
             "overflows to inf for x < -88. sigmoid = 1 / (1 + exp(-x)) still gives 0, not NaN.")
PAST_EXP = ("|x| well past 88, where exp(x) is inf in float32: sigmoid written with exp(-x), 1 / (1 + exp(-x)), "
            "gives 0 or 1 there; exp(x) / (1 + exp(x)) gives inf / inf = NaN.")
UPSTREAM = ("the upstream gradient grad_y is not contiguous (a transpose or a slice: whatever the "
            "next operation produced). A kernel that walks it as packed memory reads it in the wrong "
            "order: call grad_y.contiguous() before passing it to the kernel.")
EXPANDED = ("the upstream gradient is one value expanded to the output's shape (every stride 0), as "
            "f(x).sum().backward() passes it: a kernel that reads it as packed memory reads past its one "
            "element. Make it contiguous before the launch.")
FLOAT64 = ("float64 inputs, the dtype torch.autograd.gradcheck needs: the forward and every gradient must stay "
           "float64 (rounding them to float32 is off by 1e-8 and more).")
# Tight enough that float32 arithmetic fails, loose enough for float64's (about 1e-16).
F64 = {torch.float64: (1e-10, 1e-9)}
EXACT_CUBIC = (0.5, -1.0, 0.25, 0.125)  # exact in float32 too: Triton passes a Python float as fp32 on a GPU
GLU_DIM = ("glu along a dimension that is not the last: a row's halves a and b are "
           "(size of dim // 2) * (product of the later sizes) elements apart, not size // 2.")

CASES = [
    # silu, forward
    Case({"shape": (1,)}, label="one element"),
    Case({"shape": (3000,)}, label="a partial last block"),
    Case({"shape": (4, 1024)}, label="whole blocks"),
    Case({"shape": (7, 129)}, torch.float16, label="fp16"),
    Case({"shape": (5, 300)}, torch.bfloat16, label="bf16"),
    Case({"shape": (2, 3, 4, 25)}, label="4-D"),
    Case({"shape": (64, 50), "scale": 20.0}, label="saturated sigmoid", hint=SATURATED),
    Case({"shape": (32, 40), "scale": 60.0}, label="x past exp's float32 range", hint=PAST_EXP),
    Case({"shape": (9, 70), "scale": 60.0}, torch.float16, label="fp16, x past exp's float32 range", hint=PAST_EXP),
    Case({"shape": (30, 40), "layout": "transposed"}, label="x a transpose"),
    Case({"shape": (9, 100), "layout": "sliced"}, torch.float16, label="x every other element"),
    Case({"shape": (0, 5)}, label="no elements"),
    Case({"shape": (1 << 24,)}, label="large", cuda_only=True),
    Case({"shape": (4096, 4097)}, torch.bfloat16, label="large", cuda_only=True),
    # silu, backward
    Case({"shape": (1,)}, spec=SILU_BACKWARD, label="backward, one element"),
    Case({"shape": (3000,)}, spec=SILU_BACKWARD, label="backward, a partial last block"),
    Case({"shape": (6, 200)}, torch.float16, spec=SILU_BACKWARD, label="backward, fp16"),
    Case({"shape": (8, 100)}, torch.bfloat16, spec=SILU_BACKWARD, label="backward, bf16"),
    Case({"shape": (20, 50), "scale": 20.0}, spec=SILU_BACKWARD, label="backward, saturated sigmoid", hint=SATURATED),
    Case({"shape": (20, 30), "scale": 60.0}, spec=SILU_BACKWARD, label="backward, x past exp's float32 range",
         hint=PAST_EXP),
    Case({"shape": (30, 20), "layout": "transposed"}, torch.float16, spec=SILU_BACKWARD, label="backward, x a transpose"),
    Case({"shape": (24, 40), "upstream": "transposed"}, spec=SILU_BACKWARD, label="backward, grad_y a transpose",
         hint=UPSTREAM),
    Case({"shape": (10, 300), "upstream": "sliced"}, spec=SILU_BACKWARD, label="backward, grad_y every other element",
         hint=UPSTREAM),
    Case({"shape": (4, 5, 60), "upstream": "transposed"}, torch.float16, spec=SILU_BACKWARD,
         label="backward, grad_y a 3-D transpose", hint=UPSTREAM),
    Case({"shape": (7, 90), "upstream": "row-strided"}, torch.bfloat16, spec=SILU_BACKWARD,
         label="backward, grad_y rows not packed", hint=UPSTREAM),
    Case({"shape": (1 << 24,)}, spec=SILU_BACKWARD, label="backward, large", cuda_only=True),
    Case({"shape": (2048, 4096), "upstream": "transposed"}, torch.bfloat16, spec=SILU_BACKWARD,
         label="backward, large, grad_y a transpose", cuda_only=True),
    Case({"shape": (3, 5)}, torch.float64, spec=SILU_BACKWARD, label="backward, float64", tolerances=F64,
         hint=FLOAT64),
    Case({"shape": (6, 50), "upstream": "expanded"}, spec=SILU_BACKWARD, label="backward, grad_y one value expanded",
         hint=EXPANDED),
    # poly_act, forward
    Case({"shape": (1000,), "coeffs": CUBIC}, spec=POLY_ACT, label="cubic"),
    Case({"shape": (7, 33), "coeffs": (0.0, 1.0)}, spec=POLY_ACT, label="identity: only c1 = 1"),
    Case({"shape": (5, 40), "coeffs": (2.5,)}, spec=POLY_ACT, label="constant: only c0"),
    Case({"shape": (300,), "coeffs": CUBIC}, torch.float16, spec=POLY_ACT, label="fp16"),
    Case({"shape": (16, 20), "coeffs": (1.0, -2.0, 0.5, -0.25), "scale": 3.0}, spec=POLY_ACT,
         label="larger x"),
    Case({"shape": (20, 30), "coeffs": CUBIC, "layout": "transposed"}, torch.bfloat16, spec=POLY_ACT,
         label="x a transpose"),
    Case({"shape": (1 << 24,), "coeffs": CUBIC}, torch.float16, spec=POLY_ACT, label="large", cuda_only=True),
    # poly_act, backward
    Case({"shape": (1000,), "coeffs": CUBIC}, spec=POLY_ACT_BACKWARD, label="backward, cubic"),
    Case({"shape": (5, 40), "coeffs": (2.5,)}, spec=POLY_ACT_BACKWARD, label="backward, constant: the gradient is 0"),
    Case({"shape": (6, 77), "coeffs": CUBIC}, torch.float16, spec=POLY_ACT_BACKWARD, label="backward, fp16"),
    Case({"shape": (16, 20), "coeffs": (1.0, -2.0, 0.5, -0.25), "scale": 3.0}, spec=POLY_ACT_BACKWARD,
         label="backward, larger x"),
    Case({"shape": (12, 30), "coeffs": (0.0, 0.0, 1.0), "upstream": "transposed"}, spec=POLY_ACT_BACKWARD,
         label="backward, x^2, grad_y a transpose", hint=UPSTREAM),
    Case({"shape": (1 << 24,), "coeffs": CUBIC}, torch.bfloat16, spec=POLY_ACT_BACKWARD, label="backward, large",
         cuda_only=True),
    Case({"shape": (2, 7), "coeffs": EXACT_CUBIC}, torch.float64, spec=POLY_ACT_BACKWARD, label="backward, float64",
         tolerances=F64, hint=FLOAT64),
    Case({"shape": (6, 50), "coeffs": CUBIC, "upstream": "expanded"}, spec=POLY_ACT_BACKWARD,
         label="backward, grad_y one value expanded", hint=EXPANDED),
    # glu, forward
    Case({"shape": (4, 6)}, spec=GLU, label="last dim"),
    Case({"shape": (3, 2)}, spec=GLU, label="halves of one element"),
    Case({"shape": (3, 3000)}, spec=GLU, label="rows longer than one block"),
    Case({"shape": (6, 10), "dim": 0}, spec=GLU, label="dim 0", hint=GLU_DIM),
    Case({"shape": (3, 8, 5), "dim": 1}, spec=GLU, label="dim 1 of 3", hint=GLU_DIM),
    Case({"shape": (4, 6, 5), "dim": -3}, torch.float16, spec=GLU, label="dim -3", hint=GLU_DIM),
    Case({"shape": (7, 2, 3), "dim": 1}, torch.bfloat16, spec=GLU, label="dim of size 2", hint=GLU_DIM),
    Case({"shape": (10, 12), "layout": "transposed"}, spec=GLU, label="x a transpose"),
    Case({"shape": (8192, 8192)}, torch.bfloat16, spec=GLU, label="large", cuda_only=True),
    Case({"shape": (64, 512, 128), "dim": 1}, torch.float16, spec=GLU, label="large, dim 1", hint=GLU_DIM,
         cuda_only=True),
    # glu, backward
    Case({"shape": (4, 6)}, spec=GLU_BACKWARD, label="backward, last dim"),
    Case({"shape": (8, 10), "dim": 0}, spec=GLU_BACKWARD, label="backward, dim 0", hint=GLU_DIM),
    Case({"shape": (3, 8, 5), "dim": 1}, torch.float16, spec=GLU_BACKWARD, label="backward, dim 1 of 3", hint=GLU_DIM),
    Case({"shape": (2, 3000)}, torch.bfloat16, spec=GLU_BACKWARD, label="backward, rows longer than one block"),
    Case({"shape": (12, 16), "upstream": "transposed"}, spec=GLU_BACKWARD, label="backward, grad_y a transpose",
         hint=UPSTREAM),
    Case({"shape": (4096, 8192)}, torch.bfloat16, spec=GLU_BACKWARD, label="backward, large", cuda_only=True),
    Case({"shape": (3, 4)}, torch.float64, spec=GLU_BACKWARD, label="backward, float64", tolerances=F64,
         hint=FLOAT64),
    Case({"shape": (4, 3), "dim": 0}, torch.float64, spec=GLU_BACKWARD, label="backward, float64, dim 0",
         tolerances=F64, hint=FLOAT64),
    Case({"shape": (6, 50), "dim": 0, "upstream": "expanded"}, spec=GLU_BACKWARD,
         label="backward, dim 0, grad_y one value expanded", hint=EXPANDED),
    # complex_mul, forward
    Case({"shape": (1, 2)}, spec=COMPLEX_MUL, label="one complex number"),
    Case({"shape": (4, 16)}, spec=COMPLEX_MUL, label="(..., 2N)"),
    Case({"shape": (3, 5, 2)}, spec=COMPLEX_MUL, label="(..., N, 2), view_as_real's layout"),
    Case({"shape": (2, 1400)}, torch.float16, spec=COMPLEX_MUL, label="rows longer than one block"),
    Case({"shape": (6, 10)}, torch.bfloat16, spec=COMPLEX_MUL, label="bf16"),
    Case({"shape": (8, 12), "layout": "row-strided"}, spec=COMPLEX_MUL, label="rows not packed"),
    Case({"shape": (20, 2), "layout": "pairs apart"}, spec=COMPLEX_MUL,
         label="real and imaginary parts not adjacent"),
    Case({"shape": (4096, 8192)}, spec=COMPLEX_MUL, label="large", cuda_only=True),
    # complex_mul, backward
    Case({"shape": (4, 16)}, spec=COMPLEX_MUL_BACKWARD, label="backward, (..., 2N)"),
    Case({"shape": (3, 5, 2)}, torch.float16, spec=COMPLEX_MUL_BACKWARD, label="backward, (..., N, 2)"),
    Case({"shape": (2, 1400)}, spec=COMPLEX_MUL_BACKWARD, label="backward, rows longer than one block"),
    Case({"shape": (6, 8), "upstream": "transposed"}, spec=COMPLEX_MUL_BACKWARD, label="backward, grad_z a transpose",
         hint=UPSTREAM.replace("grad_y", "grad_z")),
    Case({"shape": (5, 12), "layout": "row-strided"}, torch.bfloat16, spec=COMPLEX_MUL_BACKWARD,
         label="backward, rows not packed"),
    Case({"shape": (2048, 8192)}, torch.bfloat16, spec=COMPLEX_MUL_BACKWARD, label="backward, large", cuda_only=True),
    Case({"shape": (2, 6)}, torch.float64, spec=COMPLEX_MUL_BACKWARD, label="backward, float64", tolerances=F64,
         hint=FLOAT64),
    Case({"shape": (6, 50), "upstream": "expanded"}, spec=COMPLEX_MUL_BACKWARD,
         label="backward, grad_z one value expanded", hint=EXPANDED.replace("gradient", "gradient grad_z")),
]


# Refusals: the right error, and a message that says what to do (graded like the results).
CASES += [
    refusal(SPEC, lambda rand: ((torch.ones(8, dtype=torch.int32, device=rand.device),), {}), (ValueError, TypeError),
            r"dtype", why="name x's dtype and say that the kernel does not support it", label="refuses integers"),
    *(refusal(POLY_ACT, lambda rand, coeffs=coeffs: ((rand.randn(8), coeffs), {}), (ValueError, TypeError), r"1 to 4",
              why="say that coeffs holds 1 to 4 numbers", label=label)
      for coeffs, label in (((1.0, 2.0, 3.0, 4.0, 5.0), "refuses 5 coefficients"), ((), "refuses no coefficients"))),
    refusal(POLY_ACT, lambda rand: ((rand.randn(8), (1.0, float("nan"))), {}), (ValueError, TypeError), r"finite",
            why="say that each coefficient must be finite", label="refuses a NaN coefficient"),
    refusal(POLY_ACT, lambda rand: ((rand.randn(8), (1.0, torch.ones((), device=rand.device))), {}),
            (ValueError, TypeError), r"float", why="say that the coefficients must be Python numbers (floats)",
            label="refuses a tensor coefficient"),
    refusal(GLU, lambda rand: ((rand.randn(4, 5),), {}), (ValueError, TypeError), r"odd",
            why="say that the dimension it splits has an odd size, so it has no two equal halves",
            label="refuses an odd split"),
    refusal(GLU, lambda rand: ((rand.randn(4, 5),), {"dim": 2}), (ValueError, TypeError), r"range",
            why="say that dim is out of range for x", label="refuses dim=2 of a 2-D x"),
    refusal(COMPLEX_MUL, lambda rand: ((rand.randn(3, 4), rand.randn(4, 4)), {}), (ValueError, TypeError), r"shape",
            why="say that x and y have different shapes", label="refuses two shapes"),
    refusal(COMPLEX_MUL, lambda rand: ((rand.randn(3, 5), rand.randn(3, 5)), {}), (ValueError, TypeError), r"even",
            why="say that interleaved (real, imag) pairs need an even last dimension",
            label="refuses an odd last dimension"),
    refusal(COMPLEX_MUL, lambda rand: ((rand.randn(3, 4), rand.randn(3, 4, dtype=torch.float16)), {}),
            (ValueError, TypeError), r"dtype", why="say that x and y have different dtypes",
            label="refuses mixed dtypes"),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


def _calls(kernel):
    """Each function with tiny float64 inputs, as torch.autograd.gradcheck takes them."""
    where = device.torch_device()

    def leaf(*shape):
        return torch.randn(*shape, dtype=torch.float64, device=where, generator=generator).requires_grad_()

    generator = torch.Generator(device=where).manual_seed(1)
    return {
        "silu": (kernel.api("silu"), (leaf(3, 5),)),
        "poly_act": (lambda x: kernel.api("poly_act")(x, CUBIC), (leaf(2, 7),)),
        "glu along the last dim": (kernel.api("glu"), (leaf(3, 4),)),
        "glu along dim 0": (lambda x: kernel.api("glu")(x, dim=0), (leaf(4, 3),)),
        "complex_mul": (kernel.api("complex_mul"), (leaf(2, 6), leaf(2, 6))),
    }


def _problem_for(kernel, what: str, error: BaseException) -> AssertionError:
    todos = f"\n{len(kernel.todos)} TODO(s) still open in kernel.py, starting with {kernel.todos[0]}." \
        if kernel.todos else ""
    return AssertionError(f"{what}: {type(error).__name__}: {str(error).strip()[:1500]}{todos}")


def test_gradcheck_in_float64(kernel):
    """torch.autograd.gradcheck compares each backward() with finite differences of forward()
    (float64, where finite differences are accurate enough to tell a wrong derivative)."""
    for name, (fn, inputs) in _calls(kernel).items():
        try:
            torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)
        except Exception as error:
            raise _problem_for(kernel, f"gradcheck of {name} failed (your backward() disagrees with "
                                       "finite differences of your forward())", error) from None


def test_backward_through_a_sum(kernel):
    """loss = f(x).sum(); loss.backward(): the upstream gradient of .sum() is one value expanded
    to the output's shape (stride 0), the least contiguous tensor there is."""
    where = device.torch_device()
    generator = torch.Generator(device=where).manual_seed(2)
    for name, fn, reference, shapes in (
            ("silu", kernel.api("silu"), silu_reference, [(6, 50)]),
            ("poly_act", lambda x: kernel.api("poly_act")(x, CUBIC), lambda x: poly_reference(x, CUBIC), [(6, 50)]),
            ("glu", lambda x: kernel.api("glu")(x, dim=0), lambda x: glu_reference(x, dim=0), [(6, 50)]),
            ("complex_mul", kernel.api("complex_mul"), complex_reference, [(6, 50), (6, 50)])):
        inputs = [torch.randn(*shape, device=where, generator=generator).requires_grad_() for shape in shapes]
        try:
            fn(*inputs).sum().backward()
        except Exception as error:
            raise _problem_for(kernel, f"{name}(...).sum().backward() raised", error) from None
        exact = [t.detach().double().requires_grad_() for t in inputs]
        reference(*exact).sum().backward()
        for position, (got, want) in enumerate(zip(inputs, exact)):
            if got.grad is None or not torch.allclose(got.grad.double(), want.grad, atol=1e-5, rtol=1e-4):
                error = "no gradient" if got.grad is None else \
                    f"largest error {(got.grad.double() - want.grad).abs().max().item():.3g}"
                raise AssertionError(
                    f"{name}(...).sum().backward(): the gradient of input #{position + 1} is wrong ({error}). "
                    "The upstream gradient of .sum() is a single value expanded to the output's shape: "
                    "its strides are all 0, so a kernel that reads it as packed memory reads past its "
                    "one element. Make the upstream gradient contiguous before the launch.")
