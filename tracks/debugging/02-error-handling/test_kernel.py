"""Public tests for 02-error-handling.  Run:  pytest tracks/debugging/02-error-handling

SPEC and CASES describe the result tests as data (the grader reads them too): softmax() is the
module's main function, and cases with spec=MATMUL call matmul(). The functions below are the
pytest tests, in three groups:

- results: softmax over any dim and layout, empty inputs included; matmul from a config too large
  for the GPU's shared memory, retried until one fits;
- refusals: each bad input must raise the right error, with a message that says what to do;
- recoveries: the fallbacks to PyTorch (warned once), the probe that decides where kernels run,
  the retry on OutOfResources (with Triton's own exception class), and the errors of
  catalogue.py, each triggered for real.
"""

import importlib.util
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from grader import device
from grader.cases import Case, Spec, Warns, matmul_bytes, matmul_flops, matmul_inputs, refusal
from grader.checks import check_case, expect_error, matmul_refusals

PYTEST_ONLY = {
    "test_rejects_a_tensor_where_kernels_do_not_run":
        "it passes a tensor on the meta device, and the grader's child receives every tensor on the device "
        "its kernels run on.",
    "test_an_empty_input_launches_nothing":
        "it monkeypatches the learner's softmax and probe kernels to count launches; the graded empty cases "
        "check the result's shape and values, not that no kernel was launched.",
    "test_rows_too_long_for_one_block_fall_back_with_one_warning":
        "the fallback's results and its one warning are graded by the case 'rows too long: fall back, warn "
        "once'; this test also counts the kernel's launches (none for rows it cannot hold), which needs "
        "kernel.py's kernels replaced by counters.",
    "test_no_backend_falls_back_with_one_warning":
        "it makes kernel.py believe that no kernel can run here (kernel_device patched to return None), "
        "which the grader cannot do to a submission in its sandbox.",
    "test_the_probe_reads_how_its_launch_ends":
        "it monkeypatches the probe kernel with a launch that fails as a machine without a driver does, and "
        "kernel_device() answers with a str, not a tensor.",
    "test_the_probe_finds_where_kernels_run_here":
        "it empties kernel.py's PROBED cache by monkeypatching, and kernel_device() answers with a str, which"
        " the grader's comparison (tensor outputs only) cannot judge.",
    "test_the_first_config_does_not_fit_in_an_h100":
        "shared_memory_bytes() takes a MatmulConfig and returns an int: the grader's comparison takes tensor "
        "outputs only, and a config sent to its child would arrive as a plain tuple.",
    "test_smaller_configs_shrink_until_the_smallest":
        "smaller_config() takes and returns a MatmulConfig (a named tuple), which the grader's comparison "
        "cannot judge: it takes tensor outputs only, and a config sent to its child would arrive as a plain "
        "tuple.",
    "test_matmul_reports_the_config_that_ran":
        "the config a call ran comes back as a MatmulConfig (a named tuple), which the grader's comparison "
        "cannot judge: it takes tensor outputs only, and a config sent to its child would arrive as a plain "
        "tuple; the product itself is graded by the matmul cases.",
    "test_a_config_that_fits_runs_as_given":
        "it passes matmul() a MatmulConfig and reads back the config that ran, both named tuples, which the "
        "grader cannot send to its child or compare (tensor outputs only); the product is graded by the "
        "matmul cases.",
    "test_the_retry_recovers_from_tritons_out_of_resources":
        "launch_with_retry() takes a Python function to launch (here a fake one that raises Triton's "
        "OutOfResources), and the grader sends its sandboxed child tensors and plain data only.",
    "test_the_retry_gives_up_with_the_out_of_resources_error":
        "launch_with_retry() takes a Python function to launch (here a fake one that raises Triton's "
        "OutOfResources), and the grader sends its sandboxed child tensors and plain data only.",
    "test_the_retry_lets_other_errors_through":
        "launch_with_retry() takes a Python function to launch (here a fake one that raises Triton's "
        "OutOfResources), and the grader sends its sandboxed child tensors and plain data only.",
    "test_the_retry_ends_even_if_the_shrink_does_not_shrink":
        "launch_with_retry() takes Python functions to launch and to shrink a config (here a fake launch that "
        "raises Triton's OutOfResources), and the grader sends its sandboxed child tensors and plain data "
        "only.",
    "test_the_first_config_raises_out_of_resources_on_the_gpu":
        "it calls launch_matmul() with a MatmulConfig on a GPU and expects Triton's OutOfResources, which is "
        "not a builtin exception (a refusal case names builtin ones); the retried product is graded by the "
        "matmul cases.",
    "test_the_catalogue_has_the_errors_the_readme_lists":
        "it checks that catalogue.py, code the course gives rather than the submission's, lists the errors of "
        "the README, so there is nothing of the learner's to grade.",
    "test_catalogue_under_the_interpreter":
        "it runs the examples of catalogue.py, code the course gives rather than the submission's, so there "
        "is nothing of the learner's to grade.",
    "test_catalogue_compiled":
        "it runs the examples of catalogue.py, code the course gives rather than the submission's, so there "
        "is nothing of the learner's to grade.",
    "test_the_estimate_is_what_the_compiler_allots":
        "it compares shared_memory_bytes(), an int computed from a MatmulConfig, with what the compiler "
        "reported for a catalogue example; the grader's comparison takes tensor outputs only.",
    "test_catalogue_on_the_gpu":
        "it runs the examples of catalogue.py, code the course gives rather than the submission's, so there "
        "is nothing of the learner's to grade.",
}


# ----------------------------------------------------------------------------------------------
# softmax
# ----------------------------------------------------------------------------------------------

def softmax_inputs(case, rand):
    """x of ``shape`` laid out as ``layout`` says, and dim when the case sets one."""
    params = case.params
    shape = params["shape"]
    layout = params.get("layout", "contiguous")
    scale = params.get("scale", 1.0)
    if layout == "transposed":  # the transpose of a contiguous tensor: a row's elements are apart
        x = rand.randn(*reversed(shape), dtype=case.dtype, scale=scale).permute(*reversed(range(len(shape))))
    elif layout == "row-strided":  # the first N columns of wider rows: rows N + 16 elements apart
        x = rand.randn(*shape[:-1], shape[-1] + 16, dtype=case.dtype, scale=scale)[..., :shape[-1]]
    elif layout == "sliced":  # every other column: neighbours 2 elements apart
        x = rand.randn(*shape[:-1], 2 * shape[-1], dtype=case.dtype, scale=scale)[..., ::2]
    elif layout == "broadcast":  # one row repeated: the rows are 0 elements apart
        x = rand.randn(1, *shape[1:], dtype=case.dtype, scale=scale).expand(*shape)
    else:
        x = rand.randn(*shape, dtype=case.dtype, scale=scale)
    if params.get("minus_inf"):
        x = x.clone()
        x[..., 1::3] = float("-inf")  # masked positions, as in attention; column 0 stays finite
    return (x,), ({"dim": params["dim"]} if "dim" in params else {})


def reference(x, dim=-1):
    return torch.softmax(x, dim)


def elements(case):
    return torch.Size(case.params["shape"]).numel()


SPEC = Spec(
    api="softmax",
    make_inputs=softmax_inputs,
    reference=reference,
    row_wise=True,
    bytes_moved=lambda case: 2 * elements(case) * case.dtype.itemsize,
    torch_baseline=reference,
    bench_cases=tuple(Case({"shape": (32768, 4096)}, dtype) for dtype in (torch.float32, torch.float16)),
    ceiling="copy",
    target=0.85,
    # The fallbacks compute with torch.softmax (only where the kernel cannot run: no case does).
    allowed_torch_names=frozenset({"softmax"}),
)

EMPTY = ("an empty input: the result is an empty tensor of the same shape, and there is nothing to "
         "launch.")
OTHER_DIM = ("softmax over a dimension that is not the last: in memory, the elements of one softmax "
             "are x.stride(dim) elements apart, not side by side.")
LARGE_VALUES = "values near 100: exp() overflows float32 above 88."
K_STEPS = ("K is longer than the BLOCK_K of every config, so the loop takes several K-steps: each moves A's "
           "pointers BLOCK_K columns on (BLOCK_K * stride_ak) and B's BLOCK_K rows down (BLOCK_K * stride_bk).")

CASES = [
    Case({"shape": (4, 0)}, label="empty rows", hint=EMPTY),
    Case({"shape": (0, 16)}, label="no rows", hint=EMPTY),
    Case({"shape": (3, 0)}, torch.float16, label="empty rows", hint=EMPTY),
    Case({"shape": (2, 0, 5), "dim": 1}, label="empty along dim", hint=EMPTY),
    Case({"shape": (0,)}, label="empty vector", hint=EMPTY),
    Case({"shape": (1, 1)}, label="one element"),
    Case({"shape": (300,)}, label="1-D: one row"),
    Case({"shape": (8, 64)}, label="a power of two"),
    Case({"shape": (16, 100)}, label="masked lanes"),
    Case({"shape": (9, 257)}, torch.float16, label="just past a power of two"),
    Case({"shape": (6, 77)}, torch.bfloat16, label="bf16"),
    Case({"shape": (6, 300), "scale": 100.0}, label="large values", hint=LARGE_VALUES),
    Case({"shape": (5, 129), "scale": 100.0}, torch.float16, label="large values, fp16", hint=LARGE_VALUES),
    Case({"shape": (50, 7), "scale": 100.0, "dim": 0}, label="large values along dim 0", hint=LARGE_VALUES),
    Case({"shape": (4, 200), "minus_inf": True}, label="-inf entries"),
    Case({"shape": (6, 10), "dim": 0}, label="dim 0", hint=OTHER_DIM),
    Case({"shape": (4, 6, 5), "dim": 1}, label="the middle dim", hint=OTHER_DIM),
    Case({"shape": (3, 5, 6), "dim": 0}, torch.float16, label="dim 0 of 3", hint=OTHER_DIM),
    Case({"shape": (20, 70), "layout": "row-strided"}, label="strided rows"),
    Case({"shape": (9, 130), "layout": "row-strided"}, torch.float16, label="strided rows"),
    Case({"shape": (33, 64), "layout": "row-strided"}, label="strided rows"),
    Case({"shape": (24, 40), "layout": "transposed"}, torch.float16, label="non-contiguous"),
    Case({"shape": (12, 50), "layout": "sliced"}, label="every other column"),
    Case({"shape": (7, 30), "layout": "transposed", "dim": 0}, label="dim 0 of a transpose",
         hint="x is a transpose, so along dim 0 its elements are side by side after all."),
    Case({"shape": (2, 32768)}, label="the longest row one block holds"),
    Case({"shape": (5, 8), "dim": -2}, label="dim -2", hint=OTHER_DIM),
    Case({"shape": (64, 1000)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"shape": (4096, 4096)}, label="large", cuda_only=True),
    Case({"shape": (1024, 32768)}, torch.float16, label="the longest rows", cuda_only=True),
    Case({"shape": (32, 64, 512), "dim": 1}, torch.float16, label="the middle dim, large", cuda_only=True,
         hint=OTHER_DIM),
]


# ----------------------------------------------------------------------------------------------
# matmul
# ----------------------------------------------------------------------------------------------

MATMUL = Spec(
    api="matmul",
    make_inputs=matmul_inputs,
    reference=lambda a, b: a @ b,
    # tl.dot rounds float32 operands to TF32 on a GPU; the interpreter multiplies exactly.
    tolerances={torch.float32: (5e-3, 5e-3)},
    interpreter_tolerances={torch.float32: (1e-4, 1e-4)},
    flops=matmul_flops,
    bytes_moved=matmul_bytes,
    torch_baseline=torch.matmul,
)

RETRIED = ("the first config needs more shared memory than an H100 has (384 KiB of tiles in fp16, 768 KiB "
           "in fp32; 227 KiB available), so the result comes from a smaller config, tried after the first "
           "failed.")
ALIGNED = ("sizes that are multiples of 16: the compiler pipelines the loads, the first config raises "
           "OutOfResources on the GPU itself, and a smaller one must run.")

CASES += [
    Case({"mnk": (1, 1, 1)}, spec=MATMUL, label="1 x 1 x 1", hint=RETRIED),
    Case({"mnk": (16, 16, 16)}, spec=MATMUL, label="one 16 x 16 tile", hint=RETRIED),
    Case({"mnk": (10, 12, 0)}, spec=MATMUL, label="K = 0: all zeros"),
    Case({"mnk": (0, 10, 5)}, spec=MATMUL, label="no rows: nothing to launch"),
    Case({"mnk": (9, 20, 40)}, spec=MATMUL, label="odd sizes", hint=RETRIED),
    Case({"mnk": (130, 90, 64)}, torch.float16, spec=MATMUL, label="two tile rows", hint=RETRIED),
    Case({"mnk": (20, 300, 30), "layouts": ("transposed", "sliced")}, spec=MATMUL,
         label="non-contiguous a and b", hint=RETRIED),
    Case({"mnk": (40, 150, 33)}, spec=MATMUL, label="C wider than the tile that runs", hint=RETRIED),
    Case({"mnk": (20, 24, 300)}, spec=MATMUL, label="several K-steps", hint=K_STEPS),
    Case({"mnk": (33, 40, 257)}, torch.float16, spec=MATMUL, label="several K-steps, K odd", hint=K_STEPS),
    Case({"mnk": (100, 200, 70)}, torch.float16, spec=MATMUL, label="C wider than the tile that runs",
         hint=RETRIED),
    Case({"mnk": (256, 512, 128)}, torch.float16, spec=MATMUL, label="aligned", cuda_only=True, hint=ALIGNED),
    Case({"mnk": (512, 256, 512)}, spec=MATMUL, label="aligned", cuda_only=True, hint=ALIGNED),
    Case({"mnk": (1024, 1024, 1024)}, torch.float16, spec=MATMUL, label="aligned, large", cuda_only=True,
         hint=ALIGNED),
    Case({"mnk": (768, 512, 256)}, torch.bfloat16, spec=MATMUL, label="aligned bf16", cuda_only=True,
         hint=ALIGNED),
    Case({"mnk": (2048 + 5, 1024 - 3, 512 + 1)}, spec=MATMUL, label="large, odd", cuda_only=True),
]

# ----------------------------------------------------------------------------------------------
# Refusals: the right error, and a message that says what to do (graded like the results)
# ----------------------------------------------------------------------------------------------

CONVERT = r"\.float\(\)|\.to\("
CASES += [
    refusal(SPEC, lambda rand: (([1.0, 2.0, 3.0],), {}), (TypeError,), r"tensor", r"list",
            why="say that softmax() takes a tensor and what it was given instead", label="refuses a list"),
    refusal(SPEC, lambda rand: ((torch.arange(12, device=rand.device).reshape(3, 4),), {}), (TypeError,),
            r"int64", r"float32", CONVERT, label="refuses integers",
            why="name the dtype it got, the dtypes it supports, and how to convert (x.float() or x.to(...))"),
    refusal(SPEC, lambda rand: ((rand.randn(3, 4, dtype=torch.float64),), {}), (TypeError,), r"float64", CONVERT,
            why="name the dtype it got (the kernel computes in float32) and how to convert",
            label="refuses float64"),
    refusal(SPEC, lambda rand: ((torch.tensor(1.0, device=rand.device),), {}), (ValueError,), r"dimension",
            r"reshape", label="refuses a 0-d tensor",
            why="say that a 0-dimensional tensor has no dimension to normalise over, and how to give it one"),
    *(refusal(SPEC, lambda rand, dim=dim: ((rand.randn(3, 4),), {"dim": dim}), (IndexError,), rf"{dim}", r"-2",
              r"\b1\b", why="name the dim it got and the dims it can take (-2 to 1 for a 2-D x)",
              label=f"refuses dim={dim} of a 2-D x") for dim in (2, -3)),
    *matmul_refusals(MATMUL),
]

# ----------------------------------------------------------------------------------------------
# Recoveries, graded: rows too long for one block fall back to PyTorch, saying so once
# ----------------------------------------------------------------------------------------------

LONGEST = 32768  # kernel.py's MAX_COLUMNS: the longest row one block holds


def fallback_calls(case, rand):
    """Two calls of softmax over dim 0 of a (LONGEST + 1, 3) x: rows one element too long."""
    return tuple(((rand.randn(3, LONGEST + 1).t(),), {"dim": 0}) for _ in range(2)), {}


FALLBACK = Spec(
    api="softmax",
    make_inputs=fallback_calls,
    reference=lambda *calls: tuple(torch.softmax(args[0], **kwargs) for args, kwargs in calls),
    protocol=Warns((rf"{LONGEST + 1}", r"torch"), why=f"say why (the rows, {LONGEST + 1} long, are too long for "
                   "one block) and what computes the result instead (PyTorch)"),
    output_names=("y", "y of the second call"),
    fallback=True,
    allowed_ops=frozenset({"_softmax", "softmax"}),
    allowed_torch_names=frozenset({"softmax"}),
)

CASES += [Case({"rows": LONGEST + 1, "calls": 2}, spec=FALLBACK, label="rows too long: fall back, warn once")]


def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


# ----------------------------------------------------------------------------------------------
# Refusals: the right error, and a message that says what to do
# ----------------------------------------------------------------------------------------------

def refuses(call, error: type, *needles: str, why: str) -> None:
    """Assert that ``call()`` raises ``error`` whose message contains every regular expression in
    ``needles`` (case-insensitive); ``why`` says what the message must tell its reader."""
    expect_error(call, errors=(error,))
    try:
        call()
    except error as raised:
        message = str(raised)
        missing = [n for n in needles if not re.search(n, message, re.IGNORECASE)]
        if missing:
            raise AssertionError(f"The {error.__name__} says {message!r}. It should {why} (it lacks "
                                 f"{' and '.join(repr(n) for n in missing)}).") from None


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=device.torch_device()).to(dtype)


def test_rejects_a_tensor_where_kernels_do_not_run(kernel):
    where = device.torch_device().type
    refuses(lambda: kernel.api("softmax")(torch.ones(3, 4, device="meta")), ValueError, r"meta",
            rf"\.to\(['\"]?{where}",
            why=f"say where x is and how to move it where kernels run (x.to('{where}'))")


# ----------------------------------------------------------------------------------------------
# Recoveries: empty inputs, fallbacks, the probe
# ----------------------------------------------------------------------------------------------

class CountingLaunches:
    """Stands in for a @triton.jit kernel and counts its launches (kernel[grid](...))."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.fixture
def counted(kernel, monkeypatch):
    """The launches of kernel.py's softmax and probe kernels, counted from here on."""
    counters = {}
    for name in ("softmax_kernel", "probe_kernel"):
        counters[name] = CountingLaunches(getattr(kernel.namespace, name))
        monkeypatch.setattr(kernel.namespace, name, counters[name])
    return counters


def _launches(counters) -> int:
    return sum(counter.launches for counter in counters.values())


@pytest.mark.parametrize("shape", [(0, 16), (4, 0), (2, 0, 5)])
def test_an_empty_input_launches_nothing(kernel, counted, shape):
    try:
        y = kernel.api("softmax")(_x(*shape), dim=-1)
    except Exception as error:
        raise AssertionError(f"softmax() of an empty input of shape {shape} raised "
                             f"{type(error).__name__}: {error}") from None
    if tuple(y.shape) != shape:
        raise AssertionError(f"softmax() of an empty input of shape {shape} returned shape {tuple(y.shape)}.")
    if _launches(counted):
        raise AssertionError(f"softmax() of an empty input of shape {shape} launched {_launches(counted)} "
                             "kernel(s), but there is nothing to compute.")


@pytest.fixture
def fresh_warnings(kernel, monkeypatch):
    """kernel.py's record of the fallbacks it already warned about, emptied for this test."""
    monkeypatch.setattr(kernel.namespace, "WARNED", {})


def _fallback_warnings(call, times: int = 2) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(times):
            call()
    return [str(w.message) for w in caught]


def _one_warning(messages: list[str], calls: str) -> None:
    if not messages:
        raise AssertionError(f"{calls} gave no warning: a fallback must say that it happened, and why.")
    if len(messages) > 1:
        raise AssertionError(f"{calls} gave {len(messages)} warnings: {messages}. A fallback warns the first "
                             "time only: a warning in every call of a training loop buries everything else.")


def test_rows_too_long_for_one_block_fall_back_with_one_warning(kernel, counted, fresh_warnings):
    longest = kernel.namespace.MAX_COLUMNS
    x = _x(3, longest + 1)
    results = []
    messages = _fallback_warnings(lambda: results.append(kernel.api("softmax")(x.t(), dim=0)))
    _one_warning(messages, f"two calls with rows of {longest + 1} elements")
    if not (re.search(rf"{longest + 1}", messages[0]) and re.search(r"torch|pytorch", messages[0], re.I)):
        raise AssertionError(f"the warning {messages[0]!r} should say why (the rows, {longest + 1} long, are "
                             "too long for one block) and what computes the result instead (PyTorch).")
    torch.testing.assert_close(results[0], torch.softmax(x.t(), dim=0))
    if counted["softmax_kernel"].launches:
        raise AssertionError("the kernel was launched for rows longer than it can hold.")


def test_no_backend_falls_back_with_one_warning(kernel, counted, fresh_warnings, monkeypatch):
    monkeypatch.setattr(kernel.namespace, "kernel_device", lambda: None)
    x = _x(4, 9)
    results = []
    messages = _fallback_warnings(lambda: results.append(kernel.api("softmax")(x)))
    _one_warning(messages, "two calls where no kernel can run")
    if "TRITON_INTERPRET" not in messages[0]:
        raise AssertionError(f"the warning {messages[0]!r} should say how to get kernels running without a "
                             "GPU (TRITON_INTERPRET=1).")
    torch.testing.assert_close(results[0], torch.softmax(x, dim=-1))
    if counted["softmax_kernel"].launches:
        raise AssertionError("kernel_device() says no kernel can run here, yet the kernel was launched.")


class FailingLaunch:
    """A kernel whose launch raises ``error``, as a machine without a driver or a GPU driver
    refusing host memory does."""

    def __init__(self, error):
        self.error, self.launches = error, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
            raise self.error
        return launch


@pytest.mark.parametrize("error, answer", [
    # (a machine with a GPU cannot lack a driver: there the real launch will say what is wrong)
    (RuntimeError("0 active drivers ([]). There should only be one."), "cuda" if torch.cuda.is_available() else None),
    (ValueError("Pointer argument (at 0) cannot be accessed from Triton (cpu tensor?)"), "cuda"),
], ids=["no driver", "a GPU driver"])
def test_the_probe_reads_how_its_launch_ends(kernel, monkeypatch, error, answer):
    failing = FailingLaunch(error)
    monkeypatch.setattr(kernel.namespace, "probe_kernel", failing)
    monkeypatch.setattr(kernel.namespace, "PROBED", {})
    assert kernel.namespace.kernel_device() == answer
    assert kernel.namespace.kernel_device() == answer
    assert failing.launches == 1, "kernel_device() should probe once and remember the answer."


def test_the_probe_finds_where_kernels_run_here(kernel, monkeypatch):
    monkeypatch.setattr(kernel.namespace, "PROBED", {})
    assert kernel.namespace.kernel_device() == device.torch_device().type


# ----------------------------------------------------------------------------------------------
# Recoveries: out of shared memory, retried with smaller configs
# ----------------------------------------------------------------------------------------------

def pipelined_bytes(config, element_size: int = 2) -> int:
    """What the compiler allots to matmul_kernel's pipeline on an H100 (3 stages or more): a tile
    of A and a tile of B per stage."""
    return config.num_stages * (config.BLOCK_M + config.BLOCK_N) * config.BLOCK_K * element_size


def _configs_from_first(ns):
    """The configs smaller_config() leads through, from FIRST_CONFIG to the smallest."""
    ladder = [ns.FIRST_CONFIG]
    while (smaller := ns.smaller_config(ladder[-1])) is not None:
        ladder.append(smaller)
        assert len(ladder) < 64, "smaller_config() never returns None: the configs do not shrink."
    return ladder


def test_the_first_config_does_not_fit_in_an_h100(kernel):
    ns = kernel.namespace
    for element_size, expected in ((2, 393216), (4, 786432)):
        got = ns.shared_memory_bytes(ns.FIRST_CONFIG, element_size)
        assert got == expected, (f"shared_memory_bytes({ns.FIRST_CONFIG}, {element_size}) is {got}; 4 stages "
                                 f"of a 128 x 128 tile of A and a 128 x 256 tile of B are {expected} bytes.")
    assert ns.shared_memory_bytes(ns.FIRST_CONFIG, 2) > ns.H100_SHARED_MEMORY


def test_smaller_configs_shrink_until_the_smallest(kernel):
    ns = kernel.namespace
    ladder = _configs_from_first(ns)
    assert ladder[1:3] == [ns.MatmulConfig(128, 128, 128, 4, 8), ns.MatmulConfig(128, 128, 64, 4, 8)], (
        f"from {ladder[0]}, smaller_config() gave {ladder[1:3]}: halve the largest block dimension first "
        "(BLOCK_K among equals).")
    sizes = [pipelined_bytes(config) for config in ladder]
    assert all(later < earlier for earlier, later in zip(sizes, sizes[1:])), (
        f"each config must need less shared memory than the one before: {list(zip(ladder, sizes))}")
    last = ladder[-1]
    assert (last.BLOCK_M, last.BLOCK_N, last.BLOCK_K, last.num_stages) == (16, 16, 16, 1), (
        f"the smallest config should be 16 x 16 x 16 with one stage (tl.dot's minimum), got {last}.")


def _a_and_b(m, n, k, dtype=torch.float16):
    where = device.torch_device()
    return torch.randn(m, k, device=where).to(dtype), torch.randn(k, n, device=where).to(dtype)


def test_matmul_reports_the_config_that_ran(kernel):
    ns = kernel.namespace
    for dtype in (torch.float16, torch.float32):
        a, b = _a_and_b(64, 96, 48, dtype)
        c, ran = kernel.api("matmul")(a, b, return_config=True)
        torch.testing.assert_close(c.float(), (a.double() @ b.double()).float(), atol=2e-2, rtol=2e-2)
        assert ran != ns.FIRST_CONFIG, f"{str(dtype)}: the first config ran, but it cannot fit in an H100."
        if not device.is_cuda():  # the interpreter goes by the estimate; a GPU by what it allots
            fits = next(config for config in _configs_from_first(ns)
                        if pipelined_bytes(config, a.element_size()) <= ns.H100_SHARED_MEMORY)
            assert ran == fits, f"{str(dtype)}: {ran} ran, but the first config that fits is {fits}."


def test_a_config_that_fits_runs_as_given(kernel):
    ns = kernel.namespace
    small = ns.MatmulConfig(32, 32, 32, 2, 4)
    a, b = _a_and_b(40, 50, 60)
    c, ran = kernel.api("matmul")(a, b, small, return_config=True)
    assert ran == small, f"{small} fits, yet {ran} ran."
    torch.testing.assert_close(c.float(), (a.double() @ b.double()).float(), atol=2e-2, rtol=2e-2)


class OutOfSharedMemory:
    """A launch that raises Triton's own OutOfResources for every config needing more than
    ``limit`` bytes, as a GPU with that much shared memory does."""

    def __init__(self, limit: int):
        self.limit, self.tried = limit, []

    def __call__(self, config):
        from triton.runtime.errors import OutOfResources

        self.tried.append(config)
        required = pipelined_bytes(config)
        if required > self.limit:
            raise OutOfResources(required, self.limit, "shared memory")


@pytest.mark.parametrize("limit", [232448, 101376, 49152], ids=["H100", "99 KiB", "48 KiB"])
def test_the_retry_recovers_from_tritons_out_of_resources(kernel, limit):
    ns = kernel.namespace
    launch = OutOfSharedMemory(limit)
    ran = ns.launch_with_retry(launch, ns.FIRST_CONFIG)
    fits = next(c for c in _configs_from_first(ns) if pipelined_bytes(c) <= limit)
    assert ran == fits, f"with {limit} bytes of shared memory, {ran} ran; the first that fits is {fits}."
    assert launch.tried[-1] == ran and len(set(launch.tried)) == len(launch.tried), (
        f"the launches tried {launch.tried}: each retry should try a new, smaller config.")


def test_the_retry_gives_up_with_the_out_of_resources_error(kernel):
    from triton.runtime.errors import OutOfResources

    ns = kernel.namespace
    launch = OutOfSharedMemory(limit=0)  # nothing fits
    with pytest.raises(OutOfResources):
        ns.launch_with_retry(launch, ns.FIRST_CONFIG)
    assert launch.tried[-1] == _configs_from_first(ns)[-1], (
        f"the last config tried was {launch.tried[-1]}: give up only once nothing smaller is left.")


def test_the_retry_lets_other_errors_through(kernel):
    ns = kernel.namespace
    tried = []

    def launch(config):
        tried.append(config)
        raise ValueError("not a question of resources")

    with pytest.raises(ValueError, match="not a question of resources"):
        ns.launch_with_retry(launch, ns.FIRST_CONFIG)
    assert len(tried) == 1, f"a ValueError was retried {len(tried) - 1} time(s): only OutOfResources should be."


def test_the_retry_ends_even_if_the_shrink_does_not_shrink(kernel):
    ns = kernel.namespace
    launch = OutOfSharedMemory(limit=0)
    with pytest.raises(RuntimeError, match="out of resource"):
        ns.launch_with_retry(launch, ns.FIRST_CONFIG, shrink=lambda config: config, max_attempts=5)
    assert len(launch.tried) == 5


@pytest.mark.cuda
def test_the_first_config_raises_out_of_resources_on_the_gpu(kernel):
    from triton.runtime.errors import OutOfResources

    ns = kernel.namespace
    a, b = _a_and_b(512, 512, 512)
    c = torch.empty(512, 512, device="cuda", dtype=a.dtype)
    with pytest.raises(OutOfResources) as raised:
        ns.launch_matmul(a, b, c, ns.FIRST_CONFIG, ns.matmul_grid(512, 512, ns.FIRST_CONFIG))
    assert raised.value.required > raised.value.limit
    c, ran = kernel.api("matmul")(a, b, return_config=True)
    assert ran != ns.FIRST_CONFIG
    torch.testing.assert_close(c.float(), (a.double() @ b.double()).float(), atol=2e-2, rtol=2e-2)


# ----------------------------------------------------------------------------------------------
# The catalogue of Triton's errors (catalogue.py): each example triggered for real
# ----------------------------------------------------------------------------------------------

def _catalogue():
    """catalogue.py, beside this file (given code the README's table comes from)."""
    path = Path(__file__).with_name("catalogue.py")
    spec = importlib.util.spec_from_file_location("_error_catalogue", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


CATALOGUE = _catalogue()
IN_PROCESS = [e.name for e in CATALOGUE.runnable("interpreter", isolated=False)]
NATIVE = [(e.name, s) for s in ("compiler", "no-gpu") for e in CATALOGUE.runnable(s)]
ON_GPU = [e.name for e in CATALOGUE.runnable("gpu")]


def _interpreter_lacks_numpy_support() -> bool:
    """Triton 3.6's interpreter turns a 1-element array into a loop bound with int(), which
    numpy 2.4 and later refuse."""
    import triton

    major_minor = tuple(int(part) for part in triton.__version__.split(".")[:2])
    return major_minor < (3, 7) and tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 4)


def _check(outcome, expected):
    wanted = "no error" if expected is None else f"{expected[0] or 'an error'} containing {expected[1]!r}"
    got = "no error" if outcome.error is None else f"{outcome.error}: {outcome.message[:500]}"
    assert outcome.matches(expected), f"{outcome.example} ({outcome.setting}): expected {wanted}, got {got}"


def test_the_catalogue_has_the_errors_the_readme_lists():
    wanted = {"arange-not-power-of-two", "arange-not-constexpr", "type-error", "dot-too-small",
              "dot-shape-mismatch", "out-of-resources", "device-assert", "illegal-memory-access",
              "call-from-python", "no-gpu-driver"}
    assert wanted <= set(CATALOGUE.BY_NAME)


@pytest.fixture(scope="module")
def interpreter_outcomes():
    """On a GPU machine this process is native: the interpreter's examples run in one of their own."""
    if not device.is_cuda():
        return None
    return {o.example: o for o in CATALOGUE.run_elsewhere(["interpreter"], IN_PROCESS)}


@pytest.mark.parametrize("name", IN_PROCESS)
def test_catalogue_under_the_interpreter(name, interpreter_outcomes):
    if _interpreter_lacks_numpy_support():
        pytest.skip("Triton 3.6's interpreter needs numpy below 2.4 for kernels with "
                    "runtime-length loops (the course's install pins it); this environment has "
                    f"numpy {np.__version__}")
    example = CATALOGUE.BY_NAME[name]
    outcome = interpreter_outcomes[name] if interpreter_outcomes else CATALOGUE.run(example, "interpreter")
    _check(outcome, example.expected["interpreter"])


@pytest.fixture(scope="module")
def native_outcomes():
    """The compiler's examples (and, without a GPU, the no-driver one), run in one native process."""
    settings = ["compiler"] if device.is_cuda() else ["compiler", "no-gpu"]
    return {(o.example, o.setting): o for o in CATALOGUE.run_elsewhere(settings)}


@pytest.mark.parametrize("name, setting", NATIVE, ids=[f"{s}: {n}" for n, s in NATIVE])
def test_catalogue_compiled(name, setting, native_outcomes):
    if setting == "no-gpu" and device.is_cuda():
        pytest.skip("this machine has a GPU driver")
    _check(native_outcomes[(name, setting)], CATALOGUE.BY_NAME[name].expected[setting])


def test_the_estimate_is_what_the_compiler_allots(kernel, native_outcomes):
    """The catalogue compiled a matmul with FIRST_CONFIG's tiles and stages for an H100; the
    shared memory the compiler gave it is what shared_memory_bytes() predicts."""
    ns = kernel.namespace
    message = native_outcomes[("out-of-resources", "compiler")].message
    required = int(re.search(r"Required: (\d+)", message).group(1))
    assert required == ns.shared_memory_bytes(ns.FIRST_CONFIG, 2), (
        f"the compiler allots {required} bytes to 4 stages of 128 x 128 and 128 x 256 fp16 tiles; "
        f"shared_memory_bytes() says {ns.shared_memory_bytes(ns.FIRST_CONFIG, 2)}.")


@pytest.fixture(scope="module")
def gpu_outcomes():
    return {o.example: o for o in CATALOGUE.collect("gpu")}


@pytest.mark.cuda
@pytest.mark.parametrize("name", ON_GPU)
def test_catalogue_on_the_gpu(name, gpu_outcomes):
    # A launch on a GPU compiles natively: unless an example says otherwise, it fails as the
    # compiler does.
    expected = CATALOGUE.BY_NAME[name].expected
    _check(gpu_outcomes[name], expected.get("gpu", expected.get("compiler")))
