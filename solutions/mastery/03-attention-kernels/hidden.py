"""Hidden grading cases for 03-attention-kernels: head dimensions, group sizes, layouts and edge
cases (no queries, a single key) the public tests do not show."""

import torch

from grader.cases import Case, public_spec

MODULE = "mastery/03-attention-kernels"
FORWARD_LSE = public_spec(MODULE, "FORWARD_LSE")
NAIVE = public_spec(MODULE, "NAIVE")
BACKWARD = public_spec(MODULE, "BACKWARD")

CASES = [
    Case({"shape": (1, 1, 20, 128)}, label="D = 128"),
    Case({"shape": (1, 8, 16, 16), "kv_heads": 1, "causal": True}, torch.float16, label="one key/value head for 8"),
    Case({"shape": (2, 2, 0, 16)}, label="no queries"),
    Case({"shape": (1, 2, 30, 16), "seq_k": 1, "causal": True}, label="a single key"),
    Case({"shape": (1, 3, 45, 32), "causal": True, "layout": "sliced"}, torch.float16, label="every other head"),
    Case({"shape": (1, 2, 17, 16), "seq_k": 50, "causal": True}, label="fewer queries than keys, causal"),
    Case({"shape": (1, 3, 45, 32), "layout": "sliced", "shift": 40.0}, torch.bfloat16,
         label="every other head, every score far below 0"),
    Case({"shape": (4, 32, 2048, 64), "causal": True}, torch.bfloat16, label="large", cuda_only=True),
    Case({"shape": (1, 4, 3000, 128), "kv_heads": 2, "seq_k": 4321}, torch.float16, label="long, uneven",
         cuda_only=True),

    Case({"shape": (1, 2, 70, 16), "seq_k": 33, "causal": True}, torch.bfloat16, spec=FORWARD_LSE,
         label="lse, more queries than keys"),
    # Scores up to about 100: rounding sm_scale * log2(e) * s to float32 moves the exponent by
    # |s| x 6e-8, so every probability by about 1e-5 of itself, past the default atol of 1e-5.
    Case({"shape": (1, 1, 40, 64), "scale": 30.0}, spec=FORWARD_LSE, label="lse of large scores",
         tolerances={torch.float32: (1e-4, 1e-4)}),

    Case({"shape": (1, 2, 24, 16), "causal": True, "layout": "bshd"}, torch.bfloat16, spec=NAIVE,
         label="naive, bf16, (B, S, H, D)"),
    Case({"shape": (2, 1, 5, 64)}, spec=NAIVE, label="naive, five queries"),

    Case({"shape": (1, 4, 20, 16), "kv_heads": 1, "causal": True, "do": "broadcast"}, spec=BACKWARD,
         label="backward, one key/value head, dO of stride 0"),
    Case({"shape": (1, 2, 17, 32), "seq_k": 45, "causal": True, "layout": "sliced"}, torch.float16,
         spec=BACKWARD, label="backward, fewer queries than keys, every other head"),
    Case({"shape": (1, 1, 0, 16), "seq_k": 8}, spec=BACKWARD, label="backward, no queries"),
    Case({"shape": (2, 16, 2048, 128), "causal": True}, torch.bfloat16, spec=BACKWARD, label="backward, large",
         cuda_only=True),
]
