"""Public tests for 02-pipelining.  Run:  pytest tracks/optimization/02-pipelining

SPEC and CASES describe the correctness tests as data (the grader reads them too); TRAFFIC holds
the memory-traffic bar, which the interpreter checks on a CPU. Pipelining itself only shows on a
GPU (the speed bar); on a CPU, the tests check that the configuration your launcher picks fits
each GPU's shared memory with at least two stages in flight.
"""

import pytest
import torch

from grader.cases import Case, Spec, matmul_bytes, matmul_flops, matmul_inputs
from grader.checks import check_case, matmul_refusals
from grader.traffic import TrafficBar, check_bar

PYTEST_ONLY = {
    "test_offsets_past_two_to_the_31": (
        "Inputs of more than 2**31 elements take about 13 GB of GPU memory, more than the grader gives one "
        "correctness process beside the others; make check runs it on a GPU with the memory free."),
    "test_pipeline_keeps_two_or_more_stages_in_shared_memory": (
        "It reads what the learner's own helpers pipeline_config() and stage_bytes() return, which "
        "need not be what matmul() launches with, so it advises rather than proves; what the stages "
        "buy is graded as speed on a GPU."),
    "test_large_tiles_use_eight_warps": (
        "It reads the config that the learner's own helper pipeline_config() reports, which need not "
        "be what matmul() launches with, so it advises rather than proves; what the tile and the warps "
        "buy is graded as speed on a GPU."),
    "test_memory_traffic": (
        "The traffic report is counted by hooks in Triton's interpreter inside the process that runs "
        "the learner's kernel, where a submission could patch or switch them off, so it cannot decide "
        "points; the speed it predicts is graded on a GPU instead."),
}

SPEC = Spec(
    api="matmul",
    make_inputs=matmul_inputs,
    reference=lambda a, b: a @ b,
    # tl.dot rounds float32 operands to TF32 on a GPU; the interpreter multiplies exactly.
    tolerances={torch.float32: (5e-3, 5e-3)},
    interpreter_tolerances={torch.float32: (1e-4, 1e-4)},
    flops=matmul_flops,
    bytes_moved=matmul_bytes,
    torch_baseline=torch.matmul,
    bench_cases=(Case({"mnk": (4096, 4096, 4096)}, torch.float16), Case({"mnk": (4096, 4096, 4096)}, torch.bfloat16)),
    ceiling="torch",
    target=0.85,
    # The unpipelined start with small tiles runs at about a third of the reference's speed.
    # The reference timed against itself, as the grader times, gave 0.83 to 0.96 on an H100.
    learner_threshold=0.8,
    learner_floor=0.5,
)

K_STRIDES = ("a transposed has a k stride of M, not 1, and K takes several k-steps: after each "
             "step the pointers advance by BLOCK_K times their own k stride (stride_ak, stride_bk), "
             "and every index into b uses b's strides.")

CASES = [
    Case({"mnk": (1, 1, 1)}, label="1 x 1 x 1"),
    Case({"mnk": (16, 16, 16)}, label="one 16 x 16 tile"),
    Case({"mnk": (33, 65, 17)}, label="odd sizes"),
    Case({"mnk": (48, 40, 200)}, torch.float16, label="several k-steps, a partial last one"),
    Case({"mnk": (70, 90, 130), "layouts": ("padded", "padded")}, torch.float16,
         label="NaN past the edges"),
    Case({"mnk": (40, 50, 70), "layouts": ("row-major", "transposed")}, label="b transposed"),
    Case({"mnk": (37, 29, 45), "layouts": ("transposed", "sliced")}, torch.float16,
         label="a transposed, b sliced"),
    Case({"mnk": (300, 8, 40)}, label="tall and thin"),
    Case({"mnk": (257, 300, 65)}, label="several tiles each way"),
    Case({"mnk": (130, 600, 24)}, torch.float16, label="several tiles each way"),
    Case({"mnk": (20, 30, 40), "layouts": ("sliced", "row-major")}, label="a sliced"),
    Case({"mnk": (24, 20, 100), "layouts": ("transposed", "transposed")},
         label="both transposed, several k-steps", hint=K_STRIDES),
    Case({"mnk": (20, 24, 150), "layouts": ("transposed", "row-major")}, torch.float16,
         label="a transposed, several k-steps", hint=K_STRIDES),
    Case({"mnk": (65, 33, 129)}, torch.bfloat16, label="bf16", cuda_only=True),
    Case({"mnk": (1000, 1500, 700), "layouts": ("row-major", "transposed")}, torch.float16,
         label="large, b transposed", cuda_only=True),
    Case({"mnk": (4096, 4096, 4096)}, torch.float16, label="benchmark size", cuda_only=True),
]

# Refusals: bad inputs must raise a clear error before any kernel runs (graded like the results).
CASES += matmul_refusals(SPEC)

TRAFFIC = [
    TrafficBar(Case({"mnk": (256, 256, 128)}, torch.float16), coalesced=(), max_loads_per_output=2.0,
               todo="choose a large tile",
               lesson="Bigger tiles load less per output: a 128 x 256 tile needs 1.5 loads per output "
                      "here, a 64 x 64 tile 4."),
]

# Shared memory per program (the opt-in maximum) on some GPUs, in bytes.
GPUS = {"H100/H200": 227 * 1024, "A100": 163 * 1024, "RTX 4090 / L4": 99 * 1024}


@pytest.mark.parametrize("gpu", GPUS)
def test_pipeline_keeps_two_or_more_stages_in_shared_memory(kernel, gpu):
    module = kernel.namespace
    shared_memory = GPUS[gpu]
    config = module.pipeline_config(4096, 4096, 4096, torch.float16, shared_memory)
    per_stage = module.stage_bytes(config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], torch.float16)
    stages = config["num_stages"]
    assert stages >= 2, (
        f"On a GPU with {shared_memory // 1024} KiB of shared memory per program (like the {gpu}) your "
        f"launcher asks for {stages} stage(s): each tl.dot then waits for its own loads. Keep 2 to 4 "
        "k-steps in flight (the TODO on num_stages).")
    assert stages * per_stage <= shared_memory, (
        f"{stages} stages of {per_stage // 1024} KiB do not fit in the {shared_memory // 1024} KiB of shared "
        f"memory of a {gpu}: the kernel would fail to launch there. Use fewer stages or a narrower tile.")


def test_large_tiles_use_eight_warps(kernel):
    config = kernel.namespace.pipeline_config(4096, 4096, 4096, torch.float16, GPUS["H100/H200"])
    if config["BLOCK_M"] * config["BLOCK_N"] >= 128 * 256:
        assert config["num_warps"] == 8, (
            f"A {config['BLOCK_M']} x {config['BLOCK_N']} tile with {config['num_warps']} warps: each warp "
            "holds a quarter of the accumulator, too much for its registers. Use 8 warps (the TODO on warps).")
    else:
        pytest.fail(f"At 4096³ your launcher picks a {config['BLOCK_M']} x {config['BLOCK_N']} tile: each "
                    "program then loads more per output than a 128 x 256 tile (the TODO on the tile).")


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
    large_offsets.check_matmuls(kernel.api("matmul"))
