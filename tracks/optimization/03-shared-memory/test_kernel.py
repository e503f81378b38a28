"""Public tests for 03-shared-memory.  Run:  pytest tracks/optimization/03-shared-memory

SPEC and CASES describe the correctness tests as data (the grader reads them too); TRAFFIC holds
the memory-traffic bars, which the interpreter checks on a CPU (on a GPU the speed is measured
instead). softmax() is the module's main function; cases with spec=VECTOR_SUM call vector_sum().
"""

import torch

from grader.cases import Case, Spec, refusal
from grader.checks import check_case
from grader.traffic import TrafficBar, check_bar

PYTEST_ONLY = {
    "test_memory_traffic": (
        "The traffic report is counted by hooks in Triton's interpreter inside the process that runs "
        "the learner's kernel, where a submission could patch or switch them off, so it cannot decide "
        "points; the speed it predicts is graded on a GPU instead."),
}


def softmax_inputs(case, rand):
    M, N = case.params["shape"]
    scale = case.params.get("scale", 1.0)
    layout = case.params.get("layout", "row-major")
    if layout == "transposed":  # neighbouring columns far apart in memory
        x = rand.randn(N, M, dtype=case.dtype, scale=scale).t()
    elif layout == "sliced":  # rows that are not packed: the first N columns of wider rows
        x = rand.randn(M, N + 7, dtype=case.dtype, scale=scale)[:, :N]
    else:
        x = rand.randn(M, N, dtype=case.dtype, scale=scale)
    if "offset" in case.params:  # every value near the offset: far below 0 with a negative one
        x = (x.float() + case.params["offset"]).to(case.dtype)
    if case.params.get("minus_inf"):
        x = x.clone()
        x[:, 1::3] = float("-inf")  # column 0 stays finite, so no row is all -inf
    return (x,), {}


def cancelling(n, dtype, rand):
    """n integers of magnitude up to about 30 (exact in float16 and bfloat16), positive in the first
    half and the same magnitudes negated in the second, plus a little noise: the halves cancel, so
    the exact sum is small (a few hundred at most) while a chunk of 4096 sums to tens of thousands."""
    half = (rand.randn(n // 2).abs() * 10.0).round() + 1.0
    big = torch.cat([half, -half.flip(0), torch.ones(n % 2, device=rand.device)])
    return (big + rand.randn(n).round()).to(dtype)


def vector_inputs(case, rand):
    n = case.params["n"]
    if case.params.get("values") == "cancelling":
        return (cancelling(n, case.dtype, rand),), {}
    if case.params.get("layout") == "strided":
        return (rand.randn(2 * n, dtype=case.dtype)[::2],), {}
    return (rand.randn(n, dtype=case.dtype),), {}


def elements(case):
    shape = case.params["shape"]
    return shape[0] * shape[1]


SPEC = Spec(
    api="softmax",
    make_inputs=softmax_inputs,
    reference=lambda x: torch.softmax(x, dim=-1),
    bytes_moved=lambda case: 2 * elements(case) * case.dtype.itemsize,
    torch_baseline=lambda x: torch.softmax(x, dim=-1),
    bench_cases=(Case({"shape": (32768, 4096)}), Case({"shape": (256, 262144)})),
    ceiling="copy",
    target=0.95,
    # The three-pass starting kernel reads x three times: about half the reference's speed.
    learner_threshold=0.9,
    learner_floor=0.6,
    row_wise=True,
)

VECTOR_SUM = Spec(
    api="vector_sum",
    make_inputs=vector_inputs,
    reference=lambda x: x.sum(),
    bytes_moved=lambda case: case.params["n"] * case.dtype.itemsize,
    torch_baseline=torch.sum,
    bench_cases=(Case({"n": 1 << 28}),),
    ceiling="copy",
    target=0.90,
)

LARGE_VALUES = "values near 100: exp() overflows float32 above 88 unless the row's maximum is subtracted first."
NEGATIVE_ROWS = ("every value near the offset, far below 0: the online kernel's running maximum must start at "
                 "-inf; one that starts at 0 stays 0, so exp(x - 0) underflows to 0 for every element and the "
                 "row's sum is 0.")
CANCELLING = ("large values that cancel: the first half positive, the second half the same magnitudes negated, "
              "so each chunk of 4096 sums to tens of thousands while the whole vector sums to a few hundred at "
              "most. The partial sums must stay float32: a sum near 37000 rounded to float16 (11 significant "
              "bits) can be off by 16, rounded to bfloat16 (8 bits) by 128, errors that survive the cancellation.")
MINUS_INF_LANES = ("a lane of the online kernel can see only -inf during a whole chunk, and exp(-inf - (-inf)) "
                   "is NaN: the rescale and the new exponentials must give a -inf entry weight 0 "
                   "(tl.where), not compute exp of it.")
STRIDED_SUM = ("x is every other element of a buffer (stride 2): step through it with its stride, "
               "offsets * stride, not as if it were packed.")
ONLINE = ("rows longer than 8192 go through the online kernel: its running sum must be rescaled by "
          "exp(old max - new max) whenever the running maximum grows, and the lanes combined the same way.")

CASES = [
    Case({"shape": (1, 1)}, label="one element"),
    Case({"shape": (3, 7)}, label="short rows"),
    Case({"shape": (4, 128)}, label="a power of two"),
    Case({"shape": (5, 1000)}, torch.float16, label="not a power of two"),
    Case({"shape": (6, 300), "scale": 100.0}, label="large values", hint=LARGE_VALUES),
    Case({"shape": (3, 64), "scale": 100.0}, torch.float16, label="large values", hint=LARGE_VALUES),
    Case({"shape": (2, 5000), "scale": 100.0}, label="large values, long rows on chip", hint=LARGE_VALUES),
    Case({"shape": (4, 200), "minus_inf": True}, label="-inf entries"),
    Case({"shape": (30, 40), "layout": "transposed"}, label="x a transpose"),
    Case({"shape": (9, 300), "layout": "sliced"}, torch.float16, label="rows not packed"),
    Case({"shape": (2, 8192)}, label="the longest row kept on chip"),
    Case({"shape": (2, 8193)}, label="one past it: the online kernel", hint=ONLINE),
    Case({"shape": (3, 20000), "scale": 100.0}, label="long rows, large values", hint=ONLINE),
    Case({"shape": (2, 12000), "minus_inf": True}, torch.float16, label="long rows, -inf entries", hint=ONLINE),
    Case({"shape": (3, 9000), "minus_inf": True}, label="long rows, -inf entries", hint=MINUS_INF_LANES),
    Case({"shape": (1, 16385), "minus_inf": True}, label="long row, -inf entries, five chunks",
         hint=MINUS_INF_LANES),
    Case({"shape": (4, 10000), "scale": 3.0}, label="long rows", hint=ONLINE),
    Case({"shape": (2, 8193), "offset": -200.0}, label="long rows, every value near -200", hint=NEGATIVE_ROWS),
    Case({"shape": (1, 9000), "offset": -1000.0, "scale": 10.0}, torch.float16,
         label="long rows, every value near -1000", hint=NEGATIVE_ROWS),
    Case({"shape": (3, 8200), "offset": -120.0, "layout": "transposed"}, label="long rows, x a transpose, "
         "every value near -120", hint=NEGATIVE_ROWS),
    Case({"shape": (3, 300), "offset": -500.0}, label="every value near -500", hint=NEGATIVE_ROWS),
    Case({"shape": (64, 1000)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (4096, 4096)}, label="large", cuda_only=True),
    Case({"shape": (16, 262144)}, label="very long rows", cuda_only=True),
    Case({"n": 1}, spec=VECTOR_SUM, label="one element"),
    Case({"n": 7}, spec=VECTOR_SUM, label="shorter than a chunk"),
    Case({"n": 4096}, spec=VECTOR_SUM, label="exactly one chunk"),
    Case({"n": 4097}, spec=VECTOR_SUM, label="one past a chunk"),
    Case({"n": 100_003}, spec=VECTOR_SUM, label="many chunks"),
    Case({"n": 30_001}, torch.float16, spec=VECTOR_SUM, label="many chunks"),
    Case({"n": 5000, "layout": "strided"}, spec=VECTOR_SUM, label="every other element"),
    Case({"n": 9000, "layout": "strided"}, torch.float16, spec=VECTOR_SUM, label="every other element",
         hint=STRIDED_SUM),
    Case({"n": 4097, "layout": "strided"}, spec=VECTOR_SUM, label="every other element, one past a chunk",
         hint=STRIDED_SUM),
    Case({"n": 0}, spec=VECTOR_SUM, label="empty: the sum of nothing is 0"),
    Case({"n": 12_288, "values": "cancelling"}, torch.float16, spec=VECTOR_SUM, label="large values that cancel",
         hint=CANCELLING),
    Case({"n": 9001, "values": "cancelling"}, torch.bfloat16, spec=VECTOR_SUM, label="large values that cancel",
         hint=CANCELLING),
    Case({"n": 20_000, "values": "cancelling"}, torch.float16, spec=VECTOR_SUM,
         label="large values that cancel, five chunks", hint=CANCELLING),
    Case({"n": (1 << 24) + 5}, spec=VECTOR_SUM, label="large", cuda_only=True),
]

# Refusals: bad inputs must raise a clear error before any kernel runs (graded like the results).
CASES += [
    refusal(SPEC, lambda rand: ((rand.randn(5),), {}), (ValueError, TypeError), r"dimensions",
            why="say that softmax() takes a 2-D tensor of rows (x here is a vector)", label="refuses a vector"),
    refusal(VECTOR_SUM, lambda rand: ((rand.randn(3, 4),), {}), (ValueError, TypeError), r"dimensions",
            why="say that vector_sum() takes a 1-D tensor (x here is a matrix)", label="refuses a matrix"),
    refusal(VECTOR_SUM, lambda rand: ((torch.ones(5, dtype=torch.int32, device=rand.device),), {}),
            (ValueError, TypeError), r"dtype", why="say that the dtype (int32) is not one the kernel supports",
            label="refuses integers"),
]

TRAFFIC = [
    TrafficBar(Case({"shape": (16, 1000)}), coalesced=("load", "store"), max_bytes_over_minimum=1.1,
               todo="compute its softmax from that one copy",
               lesson="A row that fits in one block can stay on chip: load it once, and compute the "
                      "maximum, the sum and the output from that copy (one read, one write)."),
    TrafficBar(Case({"shape": (2, 20000)}), coalesced=("load", "store"), max_bytes_over_minimum=1.6,
               todo="running maximum",
               lesson="A row longer than a block needs two reads, not three: keep a running maximum "
                      "and rescale the running sum when it grows (the online softmax), then normalise."),
    TrafficBar(Case({"n": 1 << 15}, spec=VECTOR_SUM), coalesced=("load",), min_programs=8,
               todo="two stages",
               lesson="Let many programs each add up one chunk, then add their partial sums in a "
                      "second, small launch."),
]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


def test_memory_traffic(kernel, bar):
    check_bar(kernel, SPEC, bar)

