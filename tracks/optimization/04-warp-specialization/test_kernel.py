"""Public tests for 04-warp-specialization.  Run:  pytest tracks/optimization/04-warp-specialization

SPEC and CASES describe the correctness tests as data (the grader reads them too); TRAFFIC holds
the memory-traffic bars, which the interpreter checks on a CPU (on a GPU the speed is measured
instead): one for the fused epilogue, one for the grouped program order.
"""

import pytest
import torch
import torch.nn.functional as F

from grader.cases import Case, Spec, matmul_bytes, matmul_flops, matmul_inputs, refusal
from grader.checks import check_case
from grader.traffic import TrafficBar, check_bar

PYTEST_ONLY = {
    "test_offsets_past_two_to_the_31": (
        "Inputs of more than 2**31 elements take about 13 GB of GPU memory, more than the grader gives one "
        "correctness process beside the others; make check runs it on a GPU with the memory free."),
    "test_memory_traffic": (
        "The traffic report is counted by hooks in Triton's interpreter inside the process that runs "
        "the learner's kernel, where a submission could patch or switch them off, so it cannot decide "
        "points; the speed it predicts is graded on a GPU instead."),
}


def make_inputs(case, rand):
    (a, b), _ = matmul_inputs(case, rand)
    N = case.params["mnk"][1]
    if case.params.get("strided_bias"):  # every other element of a longer vector
        bias = rand.randn(2 * N, dtype=case.dtype)[::2]
    else:
        bias = rand.randn(N, dtype=case.dtype)
    return (a, b, bias), {}


def reference(a, b, bias):
    return F.gelu(a @ b + bias, approximate="tanh")


SPEC = Spec(
    api="matmul_bias_gelu",
    make_inputs=make_inputs,
    reference=reference,
    # tl.dot rounds float32 operands to TF32 on a GPU; the interpreter multiplies exactly.
    tolerances={torch.float32: (5e-3, 5e-3)},
    interpreter_tolerances={torch.float32: (1e-4, 1e-4)},
    flops=matmul_flops,
    bytes_moved=lambda case: matmul_bytes(case) + case.params["mnk"][1] * case.dtype.itemsize,  # and the bias
    torch_baseline=reference,  # unfused: a matmul, an add and a GELU, three kernels
    # First (the graded one), a wide output and a short K: the epilogue's extra trips through memory
    # are a large share. 16384 rows, not 8192: at 8192 a call's GPU work (0.15 ms) was barely longer
    # than its host work, and the wall clock partly timed the CPU. Then 8192^3, whose operands
    # overflow L2, where the program order shows.
    bench_cases=(Case({"mnk": (16384, 8192, 512)}, torch.float16), Case({"mnk": (8192, 8192, 8192)}, torch.float16),
                 Case({"mnk": (4096, 4096, 4096)}, torch.float16)),
    ceiling="torch",
    target=1.2,
    learner_threshold=0.9,
    # Measured on an H100 (Triton 3.6), timed as the grader times, on the graded case: the starting
    # kernel ran at 0.71 to 0.74 x the reference, and the reference against itself at 0.98 to 1.02
    # (at 8192 rows: 0.71 to 0.81, and 0.86 to 1.11), so the band of partial credit is narrow.
    learner_floor=0.85,
)

GROUPS = ("tiles in several rows and columns: with GROUP_M rows of tiles per group, the last group "
          "has only the rows that are left (tl.minimum(tiles_m - first_row, GROUP_M)).")

GELU_FORMULA = ("one output, so the whole formula shows: c = gelu(a @ b + bias) with the tanh "
                "approximation 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), equal to "
                "x / (1 + 2^(-2 log2(e) sqrt(2 / pi) (x + 0.044715 x^3))); the bias goes in before the GELU.")
K_STEPS = ("K = 200 takes seven k-steps of 32, the last one partial: each step adds its tl.dot to the "
           "accumulator, and its k mask compares with what is left of K (K - k).")

CASES = [
    Case({"mnk": (1, 1, 1)}, label="1 x 1 x 1", hint=GELU_FORMULA),
    # A single value can land where x^2 and x^3 agree within the tolerance; a tile of 256 cannot.
    Case({"mnk": (16, 16, 16)}, label="one 16 x 16 tile", hint=GELU_FORMULA),
    Case({"mnk": (33, 65, 17), "strided_bias": True}, label="odd sizes, strided bias"),
    Case({"mnk": (48, 40, 100), "layouts": ("sliced", "row-major")}, torch.float16,
         label="several k-steps, sliced a"),
    Case({"mnk": (20, 36, 50), "layouts": ("padded", "padded")}, label="NaN past the edges"),
    Case({"mnk": (40, 50, 70), "layouts": ("transposed", "sliced"), "strided_bias": True}, torch.float16,
         label="strided a, b and bias"),
    Case({"mnk": (300, 40, 24)}, label="tall: one column of tiles"),
    Case({"mnk": (300, 300, 16)}, label="several tiles each way", hint=GROUPS),
    Case({"mnk": (257, 520, 33), "strided_bias": True}, torch.float16, label="several tiles each way, strided bias",
         hint=GROUPS),
    Case({"mnk": (1100, 300, 16)}, label="more rows of tiles than a group", hint=GROUPS),
    Case({"mnk": (1030, 16, 16)}, label="more rows of tiles than a group, one column", hint=GROUPS),
    Case({"mnk": (1200, 40, 24)}, torch.float16, label="two groups of rows of tiles", hint=GROUPS),
    Case({"mnk": (16, 24, 200)}, label="several k-steps, packed inputs", hint=K_STEPS),
    Case({"mnk": (65, 33, 129)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"mnk": (2048 + 3, 3000, 512 + 5)}, torch.float16, label="large, odd", cuda_only=True),
    # Rows of a, b and c on 16-byte boundaries: on a Hopper GPU the persistent TMA kernel runs, with
    # partial tiles at every edge and a partial last k-step; the case above (K = 517) must not take it.
    Case({"mnk": (1024 + 7, 2048 + 40, 512 + 8)}, torch.float16, label="large, TMA-aligned rows", cuda_only=True),
    Case({"mnk": (512, 768, 256)}, torch.bfloat16, label="TMA-aligned, whole tiles, bf16", cuda_only=True),
]

# Refusals: bad inputs must raise a clear error before any kernel runs (graded like the results).
CASES += [
    refusal(SPEC, lambda rand: ((rand.randn(4, 5), rand.randn(5, 3), rand.randn(4)), {}), (ValueError, TypeError),
            r"bias", why="say that bias must have one value per column of the output (3, not 4)",
            label="refuses a bias of the wrong length"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 5), rand.randn(6, 3), rand.randn(3)), {}), (ValueError, TypeError),
            r"inner dimension", why="say that the inner dimensions of a and b differ",
            label="refuses mismatched inner dims"),
    refusal(SPEC, lambda rand: ((rand.randn(4, 5), rand.randn(5, 3), rand.randn(3, dtype=torch.float16)), {}),
            (ValueError, TypeError), r"dtype", why="say that bias's dtype differs from a's and b's",
            label="refuses mixed dtypes"),
]

TRAFFIC = [
    TrafficBar(Case({"mnk": (64, 64, 32)}, torch.float16), coalesced=(), max_bytes_over_minimum=1.2,
               todo="apply the epilogue",
               lesson="Apply the bias and GELU to the accumulator while it is in registers: then c is "
                      "stored once and never read back."),
    TrafficBar(Case({"mnk": (256, 4096, 32)}, torch.float16), coalesced=(), max_wave_bytes=200 << 10, wave=16,
               todo="group of GROUP_M rows",
               lesson="Order the programs in groups of GROUP_M rows of tiles: programs that run at the "
                      "same time then share their slabs of a and b (here 148 KiB per wave of 16 "
                      "instead of 264 KiB in row-major order), and fewer bytes compete for L2."),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


def test_memory_traffic(kernel, bar):
    check_bar(kernel, SPEC, bar)


@pytest.mark.cuda
def test_offsets_past_two_to_the_31(kernel):
    """Matmuls whose a, b or c holds more than 2**31 elements: an offset row * stride computed in int32
    wraps around to an address before the tensor (an illegal access, or wrong values). Make the row
    and column offsets tl.int64."""
    from grader import large_offsets

    if (why := large_offsets.why_not_here()) is not None:
        pytest.skip(why)

    def bias_and_gelu(b):  # a bias of one value per column of c, and the epilogue it gets
        bias = torch.randn(b.shape[1], dtype=torch.float16, device="cuda")
        return (bias,), lambda product, cols: F.gelu(product + bias[cols].float(), approximate="tanh")

    large_offsets.check_matmuls(kernel.api("matmul_bias_gelu"), bias_and_gelu)
