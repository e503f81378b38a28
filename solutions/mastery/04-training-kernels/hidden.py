"""Hidden grading cases for 04-training-kernels: shapes, layouts, seeds and probabilities the public
tests do not show, for every function of each of its three parts (CASES: Part 1, the backward
passes; TRAINING_STATE_CASES: Part 2, the optimizer step, and Part 3, the selective scan)."""

import torch

from grader.cases import Case, public_spec

MODULE = "mastery/04-training-kernels"
LAYER_NORM = public_spec(MODULE, "layer_norm")
SWIGLU = public_spec(MODULE, "swiglu")
SILU_AND_MUL = public_spec(MODULE, "silu_and_mul")
RELU = public_spec(MODULE, "relu")
DROPOUT = public_spec(MODULE, "DROPOUT")
DROPOUT_WITH_MASK = public_spec(MODULE, "DROPOUT_WITH_MASK")
DROPOUT_SEEDS = public_spec(MODULE, "DROPOUT_SEEDS")
DROPOUT_WITH_MASK_SEEDS = public_spec(MODULE, "DROPOUT_WITH_MASK_SEEDS")

CASES = [
    Case({"shape": (2, 1)}, torch.float16, label="N = 1"),
    Case({"shape": (45, 129)}, label="one past a power of two, rows shared unevenly"),
    Case({"shape": (4, 3, 127)}, torch.bfloat16, label="3-D, one short of a power of two"),
    Case({"shape": (11, 77), "layout": "row-strided", "dy": "transposed"}, torch.float16,
         label="strided x, transposed dy"),
    Case({"shape": (7, 300), "eps": 1e-2, "scale": 0.05}, label="eps larger than the mean square"),
    Case({"shape": (1, 1000)}, label="one long row"),
    Case({"shape": (13, 64), "layout": "zeros"}, torch.bfloat16, label="zero rows"),
    Case({"shape": (3000, 5000)}, torch.bfloat16, label="large, uneven", cuda_only=True),

    Case({"shape": (3, 1)}, spec=LAYER_NORM, label="N = 1",
         tolerances={torch.float32: (1e-4, 1e-4)}),  # see N_EQUALS_ONE in test_kernel.py
    Case({"shape": (41, 100), "dy": "broadcast"}, spec=LAYER_NORM, label="dy with row stride 0, rows shared"),
    Case({"shape": (9, 257)}, torch.bfloat16, spec=LAYER_NORM, label="one past a power of two"),
    Case({"shape": (6, 50), "layout": "constant"}, torch.float16, spec=LAYER_NORM, label="constant rows"),
    Case({"shape": (12, 96), "eps": 0.1, "scale": 0.2}, spec=LAYER_NORM, label="eps matters"),
    Case({"shape": (1, 4, 37)}, spec=LAYER_NORM, label="3-D, one batch"),
    Case({"shape": (8192, 1536)}, torch.float16, spec=LAYER_NORM, label="large", cuda_only=True),

    Case({"shape": (1,)}, spec=SWIGLU, label="one element"),
    Case({"shape": (1025,)}, torch.bfloat16, spec=SWIGLU, label="one past a block"),
    Case({"shape": (20, 30), "layout": "row-strided", "scale": 50.0}, torch.float16, spec=SWIGLU,
         label="strided, saturated"),
    Case({"shape": (2048, 5504)}, torch.float16, spec=SWIGLU, label="large", cuda_only=True),

    Case({"shape": (0, 6)}, spec=SILU_AND_MUL, label="no rows"),
    Case({"shape": (7, 2050)}, torch.bfloat16, spec=SILU_AND_MUL, label="H = 1025, one past a block"),
    Case({"shape": (30, 24), "layout": "transposed"}, spec=SILU_AND_MUL, label="non-contiguous"),
    Case({"shape": (4096, 2 * 5504)}, torch.float16, spec=SILU_AND_MUL, label="large", cuda_only=True),

    Case({"shape": (1,)}, spec=RELU, label="one element, x = 0"),
    Case({"shape": (3, 1025)}, spec=RELU, label="one past a block"),
    Case({"shape": (0, 3)}, torch.float16, spec=RELU, label="empty"),
    Case({"shape": (3, 1025), "nan": True}, torch.float16, spec=RELU, label="NaN entries, one past a block"),

    Case({"shape": (20_000,), "p": 0.5, "seed": 2**40 + 3}, spec=DROPOUT, label="p = 0.5, a 64-bit seed"),
    Case({"shape": (37, 61), "p": 0.05, "seed": 0}, torch.bfloat16, spec=DROPOUT, label="seed 0, small p"),
    Case({"shape": (8, 9, 10), "p": 0.9, "seed": 99}, torch.float16, spec=DROPOUT, label="p = 0.9"),
    Case({"shape": (50, 40), "p": 0.4, "seed": 1, "layout": "row-strided"}, spec=DROPOUT,
         label="strided rows, seed 1"),
    Case({"shape": (1 << 22,), "p": 0.2, "seed": 31337}, torch.float16, spec=DROPOUT, label="large",
         cuda_only=True),

    Case({"shape": (4000,), "p": 0.35, "seed": 77}, spec=DROPOUT_WITH_MASK, label="p = 0.35"),
    Case({"shape": (300,), "p": 1.0, "seed": 77}, torch.float16, spec=DROPOUT_WITH_MASK, label="p = 1"),
    Case({"shape": (0, 5), "p": 0.5, "seed": 77}, spec=DROPOUT_WITH_MASK, label="empty"),
    Case({"shape": (1 << 22,), "p": 0.2, "seed": 31337}, torch.bfloat16, spec=DROPOUT_WITH_MASK,
         label="large", cuda_only=True),
    Case({"shape": (25, 90), "p": 0.3, "layout": "row-strided"}, spec=DROPOUT_SEEDS,
         label="the mask: the seed's alone, strided rows"),
    Case({"shape": (2100,), "p": 0.6}, torch.float16, spec=DROPOUT_WITH_MASK_SEEDS,
         label="the returned mask: the seed's alone, a tail past two blocks"),
]

ADAMW = public_spec(MODULE, "ADAMW")
SGD = public_spec(MODULE, "SGD")
UNSCALE = public_spec(MODULE, "UNSCALE")
# selective_scan has three public Specs: backward with every input, with the required ones, forward only
SCAN, SCAN_BASIC, SCAN_FORWARD = (public_spec(MODULE, name) for name in ("SCAN", "SCAN_BASIC", "SCAN_FORWARD"))

TRAINING_STATE_CASES = [
    Case({"sizes": [(1,)], "steps": 5, "lr": 0.1, "weight_decay": 0.05}, spec=ADAMW, label="one element, five steps"),
    Case({"sizes": [(100, 3), (2,)], "steps": 3, "state": "resumed", "weight_decay": 0.3, "param_scale": 4.0},
         torch.bfloat16, spec=ADAMW, label="bf16, resumed state, strong decay"),
    Case({"sizes": [(33000,), (5, 5)], "steps": 2, "weight_decay": 0.01}, torch.float16, spec=ADAMW,
         label="fp16, three chunks"),
    Case({"sizes": [(50,), (4, 4)], "steps": 3, "beta1": 0.0, "beta2": 0.99, "eps": 1e-6}, spec=ADAMW,
         label="beta1 = 0"),
    Case({"sizes": [(64,), (3,)], "steps": 2, "grad_scale": 0.0, "weight_decay": 0.1}, spec=ADAMW,
         label="zero gradients: only the decay moves p"),
    Case({"sizes": [(500,), (3, 3)], "steps": 4, "grad_scale": 1e-3, "eps": 1e-4}, spec=ADAMW,
         label="small gradients next to eps"),
    Case({"sizes": [(1 << 22,), (777,), (1 << 20,)], "steps": 2, "weight_decay": 0.1}, spec=ADAMW, label="large",
         cuda_only=True),
    # The buffers see weight_decay * p, and p is rounded to fp16 after every step while the float64
    # reference keeps it exact: 0.01 x |p| x 2^-11 per step, past the float32 atol of 1e-5.
    Case({"sizes": [(90,), (3, 7)], "steps": 3, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
         torch.float16, spec=SGD, label="fp16, dampening and decay", tolerances={torch.float32: (1e-4, 1e-4)}),
    Case({"sizes": [(1,)], "steps": 5, "momentum": 0.99, "nesterov": True}, spec=SGD, label="one element, Nesterov"),
    Case({"sizes": [(40,), (2, 2)], "steps": 1, "momentum": 0.9, "dampening": 0.9}, spec=SGD,
         label="one step: the buffer is the gradient"),
    Case({"sizes": [(25,), (16385,)], "steps": 2, "weight_decay": 0.1}, torch.bfloat16, spec=SGD,
         label="no momentum, decay, bf16"),
    Case({"sizes": [(17,), (2050,)], "steps": 3, "momentum": 0.5, "dampening": 0.5}, torch.float16, spec=SGD,
         label="fp16, dampening from the second step on"),
    Case({"sizes": [(1 << 22,), (1 << 20,)], "steps": 2, "momentum": 0.9}, spec=SGD, label="large", cuda_only=True),
    Case({"sizes": [(10,), (20,), (30,)], "dtypes": ["fp32", "fp16", "bf16"],
          "specials": [(0, 3, float("nan")), (2, 29, float("inf"))]}, spec=UNSCALE, label="NaN and inf"),
    Case({"sizes": [(16390,)], "specials": [(0, 16384, float("nan"))]}, spec=UNSCALE,
         label="a NaN first in the second chunk"),
    Case({"sizes": [(7,)] * 10, "dtypes": ["fp16"] * 10}, spec=UNSCALE, label="ten fp16 tensors, all finite"),
    Case({"sizes": [(5,), (6,)], "inv_scale": 2.0, "inv_scale_as": "float", "specials": [(1, 0, -float("inf"))]},
         spec=UNSCALE, label="scaling up, -inf"),
    # found_inf is one flag for every tensor and dtype: a program, or a launch, that saw none must leave it alone
    Case({"sizes": [(7,), (40,), (3,)], "specials": [(0, 2, float("inf"))]}, spec=UNSCALE,
         label="inf in the first of three tensors"),
    Case({"sizes": [(300,), (12,)], "dtypes": ["fp32", "bf16"], "specials": [(0, 5, float("nan"))]}, spec=UNSCALE,
         label="NaN in the first of two dtypes"),
    Case({"sizes": [(1 << 24,), (3,)], "dtypes": ["bf16", "fp32"], "specials": [(0, (1 << 24) - 1, float("nan"))]},
         spec=UNSCALE, label="large", cuda_only=True),
    Case({"shape": (3, 33, 5, 7)}, spec=SCAN, label="five channel blocks"),
    Case({"shape": (1, 1, 20, 1)}, spec=SCAN, label="one channel, one state"),
    Case({"shape": (2, 5, 6, 3), "bc": "fp32"}, torch.bfloat16, spec=SCAN, label="bf16, B and C float32"),
    Case({"shape": (2, 3, 1, 2)}, torch.float16, spec=SCAN_BASIC, label="L = 1, fp16"),
    Case({"shape": (1, 6, 9, 4), "with": ("delta_bias",)}, spec=SCAN_FORWARD, label="forward, delta_bias only"),
    Case({"shape": (0, 4, 5, 3)}, spec=SCAN_FORWARD, label="no batch"),
    Case({"shape": (2, 9, 10, 5), "delta": (30.0, 200.0)}, torch.float16, spec=SCAN, label="fp16, large delta"),
    Case({"shape": (2, 10, 12, 4), "layout": "transposed"}, torch.bfloat16, spec=SCAN, label="bf16, u a transpose"),
    Case({"shape": (1, 9, 70, 3), "softplus": False}, spec=SCAN_BASIC, label="five chunks, no softplus"),
    Case({"shape": (1, 512, 1000, 16), "bc": "fp32"}, torch.bfloat16, spec=SCAN, label="large", cuda_only=True),
]
CASES = CASES + TRAINING_STATE_CASES
