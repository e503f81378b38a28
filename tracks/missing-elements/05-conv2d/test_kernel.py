"""Public tests for 05-conv2d.  Run:  pytest tracks/missing-elements/05-conv2d

SPEC and CASES describe the tests as data (the grader reads them too); the functions below are
the pytest tests. The cases cover 1x1, 3x3 and 5x3 filters, strides and paddings given as ints
and as (h, w) pairs, non-square images, a filter as large as the image, channel counts past one
BLOCK_K chunk and output-channel counts past one BLOCK_N block, bias and no bias, and inputs that
are channels-last, non-contiguous views, or views inside a buffer of NaN (to expose a missing
mask: the NaN around the image and past the last channel must never be read).
"""

import pytest
import torch
import torch.nn.functional as F

from grader.cases import Case, Spec, refusal
from grader.checks import check_case, expect_error

PYTEST_ONLY = {
    "test_rejects_tensors_on_the_cpu": (
        "It needs x on the CPU while the kernels run on a GPU, and the grader's child receives "
        "every input on the device under test, so no graded case can carry a CPU tensor."),
}


def nan_padded(rand, shape, dtype, scale=1.0, border=2):
    """A (d0, d1, d2, d3) tensor stored channels-last inside a larger buffer of NaN: `border`
    extra elements on each side of d2 and d3 and 3 extra channels. The kernel reads channels-last
    tensors in place, so a load that strays into the padding of the image or past the last
    channel (a missing mask) brings NaN into the sums and shows in the result."""
    d0, d1, d2, d3 = shape
    buffer = torch.full((d0, d2 + 2 * border, d3 + 2 * border, d1 + 3), float("nan"),
                        dtype=dtype, device=rand.device)
    inside = buffer[:, border:border + d2, border:border + d3, :d1]
    inside.copy_(rand.randn(d0, d2, d3, d1, dtype=dtype, scale=scale))
    return inside.permute(0, 3, 1, 2)


def make_inputs(case, rand):
    p = case.params
    (n, c, h, w), (k, _, r, s) = p["x"], p["w"]
    # Filters scaled like a trained layer's, so that outputs are about as large as the inputs
    # and one set of tolerances fits every shape.
    scale = (c * r * s) ** -0.5
    layout = p.get("layout")
    if layout == "strided":
        # every other column of a wider image, and a filter bank viewed through a permutation
        x = rand.randn(n, c, h, 2 * w, dtype=case.dtype)[..., ::2]
        weight = rand.randn(r, s, c, k, dtype=case.dtype, scale=scale).permute(3, 2, 0, 1)
    elif layout == "nan-padded":
        x = nan_padded(rand, (n, c, h, w), case.dtype)
        weight = nan_padded(rand, (k, c, r, s), case.dtype, scale)
    else:
        x = rand.randn(n, c, h, w, dtype=case.dtype)
        weight = rand.randn(k, c, r, s, dtype=case.dtype, scale=scale)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    bias = rand.randn(k, dtype=case.dtype) if p.get("bias") else None
    return (x, weight), {"bias": bias, "stride": p.get("stride", 1), "padding": p.get("padding", 0)}


def output_size(case):
    p = case.params
    (n, _, h, w), (k, _, r, s) = p["x"], p["w"]
    (sh, sw), (ph, pw) = [(v, v) if isinstance(v, int) else v
                          for v in (p.get("stride", 1), p.get("padding", 0))]
    return n, k, (h + 2 * ph - r) // sh + 1, (w + 2 * pw - s) // sw + 1


def flops(case):
    n, k, oh, ow = output_size(case)
    _, c, r, s = case.params["w"]
    return 2 * n * k * oh * ow * c * r * s


def bytes_moved(case):
    (n, c, h, w), (k, _, r, s) = case.params["x"], case.params["w"]
    return (n * c * h * w + k * c * r * s + k + torch.Size(output_size(case)).numel()) * case.dtype.itemsize


RESNET_LAYER = {"x": (32, 128, 56, 56), "w": (128, 128, 3, 3), "stride": 1, "padding": 1, "bias": True}
# The same layer at a training batch: the case the grader times. At batch 32 a call's GPU work
# (about 0.155 ms on an H100) is no longer than its Python and launch work, so the clock would
# time the host; at 128 the GPU's work is four times longer.
RESNET_LAYER_BATCH_128 = {**RESNET_LAYER, "x": (128, 128, 56, 56)}

SPEC = Spec(
    api="conv2d",
    make_inputs=make_inputs,
    reference=F.conv2d,
    # On a GPU, tl.dot multiplies float32 inputs in TF32 (10-bit mantissa, as cuDNN does for
    # PyTorch's float32 convolutions by default): relative errors around 1e-3.
    tolerances={torch.float32: (5e-3, 5e-3)},
    # Under the interpreter tl.dot is exact float32 arithmetic: only summation order differs.
    interpreter_tolerances={torch.float32: (1e-4, 1e-4)},
    flops=flops,
    bytes_moved=bytes_moved,
    torch_baseline=F.conv2d,
    bench_cases=(Case(RESNET_LAYER_BATCH_128, torch.float16), Case(RESNET_LAYER, torch.float16),
                 Case(RESNET_LAYER, torch.bfloat16)),
    ceiling="torch",
    target=0.5,
)

FILTER_TAPS = ("a filter that is not square (R rows, S columns, R != S): step t of the reduction is at "
               "filter row t // S and column t % S.")
CHANNEL_BLOCKS = ("more channels than one reduction step takes (BLOCK_K, 64 in the interpreter): each "
                  "filter tap takes cdiv(C, BLOCK_K) steps, so the loop runs R * S * cdiv(C, BLOCK_K) times.")

CASES = [
    Case({"x": (1, 3, 5, 5), "w": (4, 3, 1, 1), "bias": True}, label="1x1 filter"),
    Case({"x": (2, 4, 8, 8), "w": (8, 4, 3, 3), "padding": 1}, label="3x3, padding 1"),
    Case({"x": (1, 2, 3, 3), "w": (3, 2, 3, 3), "bias": True}, label="one output pixel"),
    Case({"x": (1, 5, 9, 11), "w": (6, 5, 3, 3), "stride": 2, "padding": 1, "bias": True},
         torch.float16, label="stride 2"),
    Case({"x": (2, 3, 10, 7), "w": (5, 3, 5, 3), "padding": (2, 0), "bias": True},
         label="5x3 filter, padding (2, 0)", hint=FILTER_TAPS),
    Case({"x": (1, 8, 12, 6), "w": (7, 8, 3, 3), "stride": (2, 1), "padding": (1, 2)},
         torch.float16, label="non-square, stride (2, 1)"),
    Case({"x": (2, 6, 2, 2), "w": (4, 6, 3, 3), "padding": 1, "bias": True}, torch.float16,
         label="filter larger than the image"),
    Case({"x": (2, 70, 12, 12), "w": (130, 70, 3, 3), "padding": 1, "bias": True},
         label="channel and output-channel tails"),
    Case({"x": (2, 4, 7, 9), "w": (5, 4, 3, 3), "padding": 1, "bias": True, "layout": "channels_last"},
         torch.float16, label="channels-last x"),
    Case({"x": (2, 5, 6, 7), "w": (4, 5, 3, 3), "padding": 1, "layout": "nan-padded"},
         label="NaN outside the image and channels"),
    Case({"x": (1, 3, 6, 8), "w": (4, 3, 3, 3), "stride": 2, "layout": "strided"},
         label="non-contiguous x and weight"),
    Case({"x": (1, 3, 6, 9), "w": (4, 3, 3, 5), "padding": (1, 2)}, label="3x5 filter, padding (1, 2)",
         hint=FILTER_TAPS),
    Case({"x": (2, 2, 7, 5), "w": (3, 2, 2, 3)}, torch.float16, label="2x3 filter", hint=FILTER_TAPS),
    Case({"x": (1, 80, 4, 4), "w": (3, 80, 3, 3), "padding": 1}, label="80 channels", hint=CHANNEL_BLOCKS),
    Case({"x": (1, 130, 3, 3), "w": (2, 130, 1, 1)}, torch.float16, label="130 channels, 1x1 filter",
         hint=CHANNEL_BLOCKS),
    Case({"x": (2, 16, 14, 14), "w": (32, 16, 3, 3), "padding": 1, "bias": True}, torch.bfloat16,
         label="bf16", cuda_only=True),
    Case({"x": (8, 64, 56, 56), "w": (128, 64, 3, 3), "stride": 2, "padding": 1}, torch.float16,
         label="downsampling layer", cuda_only=True),
    Case({"x": (4, 3, 224, 224), "w": (64, 3, 7, 7), "stride": 2, "padding": 3}, torch.float16,
         label="ResNet stem, 3 channels", cuda_only=True),
    Case({"x": (4, 96, 28, 28), "w": (192, 96, 3, 3), "padding": 1, "bias": True},
         label="fp32 (TF32)", cuda_only=True),
    Case(RESNET_LAYER, torch.float16, label="ResNet layer", cuda_only=True),
]


def _tensors(rand, *shapes, dtype=torch.float32) -> tuple:
    return tuple(rand.randn(*shape, dtype=dtype) for shape in shapes)


def _ints(rand, *shapes) -> tuple:
    return tuple(torch.ones(shape, dtype=torch.int32, device=rand.device) for shape in shapes)


BAD_STRIDES_AND_PADDINGS = [(0, 0, "stride"), ((1, -1), 0, "stride"), (1, -1, "padding"), (1, (0, -2), "padding"),
                            (1.5, 0, "stride"), (1, (1, 1, 1), "padding")]

# Refusals: bad inputs must raise a clear error before any kernel runs (graded like the results).
CASES += [
    refusal(SPEC, lambda rand: (_tensors(rand, (1, 3, 8, 8), (4, 5, 3, 3)), {}), (ValueError, TypeError),
            r"channels", why="say that x's channels (3) differ from those weight expects (5)",
            label="refuses mismatched channels"),
    refusal(SPEC, lambda rand: (_tensors(rand, (3, 8, 8), (4, 3, 3, 3)), {}), (ValueError, TypeError), r"4-D",
            why="say that x must be 4-D (N, C, H, W)", label="refuses a 3-D input"),
    refusal(SPEC, lambda rand: (_tensors(rand, (1, 3, 8, 8), (4, 3, 3, 3), (3,)), {}), (ValueError, TypeError),
            r"bias", why="say that bias must have one value per output channel (4, not 3)",
            label="refuses a bias of the wrong shape"),
    refusal(SPEC, lambda rand: ((*_tensors(rand, (1, 3, 8, 8)), *_tensors(rand, (4, 3, 3, 3), dtype=torch.float16)),
                                {}), (ValueError, TypeError), r"dtype",
            why="say that x and weight have different dtypes", label="refuses mixed dtypes"),
    refusal(SPEC, lambda rand: (_ints(rand, (1, 3, 8, 8), (4, 3, 3, 3)), {}), (ValueError, TypeError), r"dtype",
            why="say that the dtype (int32) is not one the kernel supports", label="refuses integer tensors"),
    *(refusal(SPEC, lambda rand, stride=stride, padding=padding: (
                  _tensors(rand, (1, 3, 8, 8), (4, 3, 3, 3)), {"stride": stride, "padding": padding}),
              (ValueError, TypeError), needle,
              why=f"say that the {needle} is not valid: a positive int or a pair of them for the stride, a "
                  "non-negative int or a pair of them for the padding",
              label=f"refuses stride={stride!r}, padding={padding!r}")
      for stride, padding, needle in BAD_STRIDES_AND_PADDINGS),
    refusal(SPEC, lambda rand: (_tensors(rand, (1, 3, 4, 4), (4, 3, 5, 5)), {"padding": 0}), (ValueError, TypeError),
            r"larger", why="say that the filter is larger than the padded input, so the output would be empty",
            label="refuses a filter larger than the padded input"),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


@pytest.mark.cuda
def test_rejects_tensors_on_the_cpu(kernel):
    x, weight = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3, device="cuda")
    expect_error(kernel.api("conv2d"), x, weight, match="cuda")
