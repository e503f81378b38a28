"""Public tests for 03-attention-kernels.  Run:  pytest tracks/mastery/03-attention-kernels

SPEC and CASES describe the correctness tests as data (the grader reads them too); the functions
below are the pytest tests. attention() is the module's main function (SPEC: its forward pass);
cases with spec=FORWARD_LSE call attention_forward(), which also returns the log-sum-exp; cases
with spec=NAIVE call naive_attention(); cases with spec=BACKWARD run attention() forward, then
backward with an upstream gradient dO, and compare o and the gradients of q, k and v with float64
PyTorch. Cases labelled "refuses ..." give a function bad inputs: it must raise a ValueError or
TypeError whose message says what is wrong. TRAFFIC holds the memory-traffic bar that shows, on a
CPU, whether a causal forward skips the key tiles above the diagonal. On a GPU, bigger cases run
too, and one test compares the kernels' error with that of PyTorch's scaled_dot_product_attention
at realistic sizes.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from grader import device
from grader.cases import Backward, Case, Spec, Suspect, refusal
from grader.checks import autograd_reference, check_case
from grader.traffic import TrafficBar, check_bar

# The public tests that are not graded cases, and why the grader does not run them.
PYTEST_ONLY = {
    "test_memory_traffic": "it counts the bytes the kernels load through the interpreter's memory instrumentation, "
                           "which make check runs in its own process; the grader has no traffic protocol, and on a "
                           "GPU it times the kernels against SDPA instead",
    "test_gradcheck_in_float64": "torch.autograd.gradcheck compares the backward with finite differences of the "
                                 "learner's own forward, calling it on many perturbed inputs; float64 inputs of the "
                                 "same shapes are graded by the 'backward, float64' cases against float64 PyTorch, at "
                                 "tolerances looser than gradcheck's",
    "test_lse_is_float32_per_query_row": "lse's float32 dtype and (B, Hq, Sq) shape are graded already by every "
                                         "FORWARD_LSE case of CASES (fp16 and bf16 ones included); this test only "
                                         "states that contract in one message before any value is compared",
    "test_as_accurate_as_sdpa": "it needs a CUDA GPU and allows twice the error of PyTorch's own "
                                "scaled_dot_product_attention measured in the same test, a bar relative to SDPA "
                                "that the grader's fixed tolerances against float64 cannot express",
}

# The wrapper builds a torch.autograd.Function, and the autotuner prunes its search space with a
# function of ours (both refused by the grader's static policy unless a module allows them).
ALLOWED_TORCH_NAMES = frozenset({"autograd.Function"})
ALLOWED_HOOKS = frozenset({"prune_configs_by"})


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------

def _head_tensor(rand, case, heads: int, seq: int, scale: float, layout: str | None = None) -> torch.Tensor:
    """A (B, heads, seq, D) tensor stored as ``layout`` (default params["layout"]) says:
    "contiguous"; "bshd", the (B, S, H, D) layout most models keep, viewed as (B, H, S, D) (heads
    and positions swap strides); "sliced", every other head of a tensor with twice as many."""
    batch, _, _, head_dim = case.params["shape"]
    layout = layout or case.params.get("layout", "contiguous")
    if layout == "bshd":
        return rand.randn(batch, seq, heads, head_dim, dtype=case.dtype, scale=scale).transpose(1, 2)
    if layout == "sliced":
        return rand.randn(batch, 2 * heads, seq, head_dim, dtype=case.dtype, scale=scale)[:, ::2]
    return rand.randn(batch, heads, seq, head_dim, dtype=case.dtype, scale=scale)


def attention_inputs(case, rand):
    """(q, k, v) and the keywords causal and sm_scale. params: "shape" (B, Hq, Sq, D), optional
    "kv_heads" (default Hq), "seq_k" (default Sq), "causal", "sm_scale", "layout", "v_layout" (v's
    own, where it differs from k's: a kernel must read each with its own strides), "scale", the
    spread of q (large values make a peaked softmax: scores of +-100 overflow exp unless the row
    maximum is subtracted), and "shift": a value c in the first feature of every query and -c in
    that of every key, which lowers every score by c * c (before sm_scale) and leaves the softmax as
    it was, every score of every row far below 0."""
    params = case.params
    _, q_heads, seq_q, _ = params["shape"]
    kv_heads, seq_k = params.get("kv_heads", q_heads), params.get("seq_k", seq_q)
    q = _head_tensor(rand, case, q_heads, seq_q, params.get("scale", 1.0))
    k = _head_tensor(rand, case, kv_heads, seq_k, 1.0)
    v = _head_tensor(rand, case, kv_heads, seq_k, 1.0, params.get("v_layout"))  # k's own layout, or not
    if "shift" in params:
        q[..., 0], k[..., 0] = params["shift"], -params["shift"]
    kwargs = {"causal": params.get("causal", False)}
    if "sm_scale" in params:
        kwargs["sm_scale"] = params["sm_scale"]
    return (q, k, v), kwargs


def backward_inputs(case, rand):
    """(q, k, v, do): attention_inputs and the upstream gradient dO, contiguous or, with
    params["do"] = "broadcast", one value repeated everywhere (all strides 0), as autograd hands
    over the gradient of o.sum()."""
    (q, k, v), kwargs = attention_inputs(case, rand)
    if case.params.get("do") == "broadcast":
        do = rand.randn(1, dtype=case.dtype).reshape(1, 1, 1, 1).expand(q.shape)
    else:
        do = rand.randn(*q.shape, dtype=case.dtype)
    return (q, k, v, do), kwargs


# ------------------------------------------------------------------------------------------------
# References (float64) and PyTorch baselines
# ------------------------------------------------------------------------------------------------

def _scores(q, k, causal, sm_scale):
    """sm_scale * q k^T with each query head reading its key head, -inf above the diagonal."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    scores = scale * (q @ k.transpose(-1, -2))
    if causal:  # query i sees keys 0..i: the lower triangle, top-left aligned
        visible = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~visible, float("-inf"))
    return scores


def _per_batch(fn, q, k, v):
    """fn on one batch element at a time, concatenated: at the benchmark's sizes the float64 scores
    of every head at once would take 8 GiB, and autograd keeps the probabilities."""
    if q.shape[0] <= 1:
        return fn(q, k, v)
    parts = [fn(q[b:b + 1], k[b:b + 1], v[b:b + 1]) for b in range(q.shape[0])]
    if isinstance(parts[0], tuple):
        return tuple(torch.cat(column) for column in zip(*parts))
    return torch.cat(parts)


def attention_reference(q, k, v, causal=False, sm_scale=None):
    """softmax(sm_scale * q k^T) v, with k and v repeated for grouped-query attention."""
    def one(q, k, v):
        group = q.shape[1] // k.shape[1]
        return torch.softmax(_scores(q, k, causal, sm_scale), dim=-1) @ v.repeat_interleave(group, dim=1)

    return _per_batch(one, q, k, v)


def attention_lse_reference(q, k, v, causal=False, sm_scale=None):
    """(o, lse): lse is the natural log of the sum of exp(score) over each query's keys."""
    def one(q, k, v):
        return attention_reference(q, k, v, causal, sm_scale), torch.logsumexp(_scores(q, k, causal, sm_scale), -1)

    return _per_batch(one, q, k, v)


# Typical wrong scales, which the diagnosis names when the outputs equal attention computed with them.

def _attention_exp2_unscaled(q, k, v, causal=False, sm_scale=None):
    """exp2 of the raw scores, qk_scale left out: exp2(s) = exp(ln(2) * s), a softmax scale of ln 2."""
    return attention_reference(q, k, v, causal, math.log(2.0))


def _attention_lse_exp2_unscaled(q, k, v, causal=False, sm_scale=None):
    return attention_lse_reference(q, k, v, causal, math.log(2.0))


def _attention_unscaled(q, k, v, causal=False, sm_scale=None):
    """softmax(q k^T) v: sm_scale left out."""
    return attention_reference(q, k, v, causal, 1.0)


EXP2_UNSCALED_WHAT = "the scores exponentiated without qk_scale (exp2(s - m) instead of exp2(qk_scale * s - m))"
EXP2_UNSCALED_ADVICE = ("qk_scale = sm_scale * log2(e) goes into both the running maximum and the exponent: "
                        "m_new = max(m_i, max(s) * qk_scale), p = exp2(qk_scale * s - m_new).")


def _sdpa(q, k, v, causal, sm_scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale,
                                          enable_gqa=q.shape[1] != k.shape[1])


def torch_attention(q, k, v, causal=False, sm_scale=None):
    """PyTorch's own naive attention, in three steps: scores, softmax, and the values."""
    group = q.shape[1] // k.shape[1]
    probabilities = torch.softmax(_scores(q, k, causal, sm_scale).float(), dim=-1).to(q.dtype)
    return probabilities @ v.repeat_interleave(group, dim=1)


_FASTEST: dict = {}


def _sdpa_backends():
    from torch.nn.attention import SDPBackend
    return [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


def _fastest_backend(q, k, v, causal, sm_scale):
    """The SDPA backend that runs these inputs fastest on this GPU (forward, and backward too when
    the inputs require grad), timed once per shape; prints what it measured."""
    import triton.testing
    from torch.nn.attention import sdpa_kernel

    timings = {}
    upstream = torch.randn(q.shape, dtype=q.dtype, device=q.device)
    for backend in _sdpa_backends():
        def run(backend=backend):
            with sdpa_kernel(backend):
                o = _sdpa(q, k, v, causal, sm_scale)
                if q.requires_grad:
                    torch.autograd.grad(o, (q, k, v), upstream)
        try:
            timings[backend] = triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")
        except RuntimeError:  # this backend does not take these inputs
            continue
    if not timings:
        raise RuntimeError("no scaled_dot_product_attention backend runs these inputs")
    best = min(timings, key=timings.get)
    shown = ", ".join(f"{backend.name} {ms:.3f} ms" for backend, ms in timings.items())
    print(f"SDPA backends for {tuple(q.shape)} {q.dtype} causal={causal}"
          f"{' forward + backward' if q.requires_grad else ''}: {shown}; fastest {best.name}")
    return best


def sdpa_fastest(q, k, v, causal=False, sm_scale=None):
    """scaled_dot_product_attention with its fastest backend for these inputs on this GPU (each
    available backend is timed on the first call for a shape); on a CPU, its default."""
    if not q.is_cuda:
        return _sdpa(q, k, v, causal, sm_scale)
    from torch.nn.attention import sdpa_kernel

    key = (tuple(q.shape), tuple(k.shape), q.dtype, causal, sm_scale, q.requires_grad)
    if key not in _FASTEST:
        _FASTEST[key] = _fastest_backend(q, k, v, causal, sm_scale)
    with sdpa_kernel(_FASTEST[key]):
        return _sdpa(q, k, v, causal, sm_scale)


def sdpa_flash2(q, k, v, causal=False, sm_scale=None):
    """scaled_dot_product_attention with its FlashAttention-2 backend (the default elsewhere)."""
    if not q.is_cuda:
        return _sdpa(q, k, v, causal, sm_scale)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return _sdpa(q, k, v, causal, sm_scale)


# ------------------------------------------------------------------------------------------------
# Cost model
# ------------------------------------------------------------------------------------------------

def _sizes(case):
    batch, q_heads, seq_q, head_dim = case.params["shape"]
    kv_heads, seq_k = case.params.get("kv_heads", q_heads), case.params.get("seq_k", seq_q)
    return batch, q_heads, kv_heads, seq_q, seq_k, head_dim


def attention_flops(case):
    """Two matrix products of 2 * Sq * Sk * D each per head; a causal mask halves the work."""
    batch, q_heads, _, seq_q, seq_k, head_dim = _sizes(case)
    flops = 4 * batch * q_heads * seq_q * seq_k * head_dim
    return flops // 2 if case.params.get("causal") else flops


def attention_bytes(case):
    """Read q, k and v once, write o (and one float32 log-sum-exp per query row)."""
    batch, q_heads, kv_heads, seq_q, seq_k, head_dim = _sizes(case)
    elements = 2 * batch * q_heads * seq_q * head_dim + 2 * batch * kv_heads * seq_k * head_dim
    return elements * case.dtype.itemsize + 4 * batch * q_heads * seq_q


def training_flops(case):
    """Forward and backward: the backward's five products (one recomputes the scores) cost 2.5 times
    the forward's two, as FlashAttention counts them."""
    return attention_flops(case) * 7 // 2


def training_bytes(case):
    """The forward's bytes, then the backward's: read q, k, v, o, dO and lse, write dq, dk, dv."""
    batch, q_heads, kv_heads, seq_q, seq_k, head_dim = _sizes(case)
    queries, keys = batch * q_heads * seq_q * head_dim, batch * kv_heads * seq_k * head_dim
    return attention_bytes(case) + (3 * queries + 2 * keys + queries + 2 * keys) * case.dtype.itemsize \
        + 4 * batch * q_heads * seq_q


def _bench(*shapes):
    return tuple(Case({"shape": shape, "causal": causal}, torch.bfloat16)
                 for shape in shapes for causal in (True, False))


# The graded case comes first: causal, head dimension 128, 64 heads of 4096 queries in all.
BENCH = _bench((4, 16, 4096, 128), (4, 32, 4096, 64))


# ------------------------------------------------------------------------------------------------
# Specs
# ------------------------------------------------------------------------------------------------

ROWS_SPAN_TILES = ("each query row spans several key tiles (16 keys each under the interpreter): when a tile "
                   "raises a row's running maximum m, the sum l and the accumulator acc, both kept relative "
                   "to the old maximum, must be rescaled by alpha = exp2(m_old - m_new) before the tile's "
                   "share is added.")
CAUSAL = ("causal: query i sees keys 0..i, the diagonal included (top-left aligned, as SDPA's is_causal). "
          "Key tiles wholly above the diagonal are skipped; those it crosses are masked.")
TAIL = ("the sequences are not multiples of the tiles: the last key tile holds padding columns past "
        "seq_k, whose scores must be -inf before the maximum and the sum, and the padding query rows "
        "past seq_q must not be stored.")
GQA = "grouped-query attention: query head h reads key/value head h // (Hq // Hkv)."
STRIDES = ("v is stored unlike k (another layout, other strides): read each tensor with its own strides "
           "(stride_vn and stride_vd for v, not k's).")
NEGATIVE_SCORES = ("every score of every row is -250 or lower (after sm_scale): the running maximum must start at "
                   "-inf. One that starts at 0 stays 0, so exp2(qk_scale * s - m) underflows to 0 for every key, "
                   "the sum l is 0 and o = acc / l is 0 / 0.")
NAIVE_LARGE_SCORES = ("scores of +-100 and more: exp(s) passes float32's largest value once s > 88, so the "
                      "softmax must subtract each row's maximum before exponentiating (exp(s - max) <= 1).")
BROADCAST_DO = ("loss = o.sum(): autograd hands the backward a dO with all strides 0 (one value expanded), "
                "which the kernels must read through its strides, or copy first.")
FLOAT64 = ("float64 inputs, as torch.autograd.gradcheck gives: the kernels take them (compute_dtype makes the "
           "statistics and accumulators float64 too) and return o and the gradients in float64.")
BACKWARD_HINT = ("the backward recomputes P = exp(sm_scale * S - lse) tile by tile: dV = P^T dO, "
                 "dS = P * (dP - D) with dP = dO V^T and D = rowsum(dO * O), dQ = sm_scale * dS K, "
                 "dK = sm_scale * dS^T Q.")

SPEC = Spec(
    api="attention",
    make_inputs=attention_inputs,
    reference=attention_reference,
    suspects=(Suspect(EXP2_UNSCALED_WHAT, _attention_exp2_unscaled, EXP2_UNSCALED_ADVICE),),
    output_names=("o",),
    flops=attention_flops,
    bytes_moved=attention_bytes,
    torch_baseline=sdpa_fastest,
    bench_cases=BENCH,
    ceiling="torch",
    target=0.80,
    allowed_torch_names=ALLOWED_TORCH_NAMES,
    allowed_hooks=ALLOWED_HOOKS,
)

# The same forward, against SDPA's FlashAttention-2 backend alone.
FLASH2 = Spec(
    api="attention",
    make_inputs=attention_inputs,
    reference=attention_reference,
    suspects=(Suspect(EXP2_UNSCALED_WHAT, _attention_exp2_unscaled, EXP2_UNSCALED_ADVICE),),
    output_names=("o",),
    flops=attention_flops,
    bytes_moved=attention_bytes,
    torch_baseline=sdpa_flash2,
    bench_cases=BENCH,
    ceiling="torch",
    target=1.0,
    allowed_torch_names=ALLOWED_TORCH_NAMES,
    allowed_hooks=ALLOWED_HOOKS,
)

FORWARD_LSE = Spec(
    api="attention_forward",
    make_inputs=attention_inputs,
    reference=attention_lse_reference,
    suspects=(Suspect(EXP2_UNSCALED_WHAT, _attention_lse_exp2_unscaled, EXP2_UNSCALED_ADVICE),),
    output_names=("o", "lse"),
    # lse is float32 whatever q's dtype (float64 for float64 inputs): the backward recomputes P from it
    output_dtypes={"lse": lambda case: torch.promote_types(case.dtype, torch.float32)},
    output_notes={"o": "the final division of acc by l, and the rescaling of acc when the maximum grows",
                  "lse": "the saved log-sum-exp: the natural log of the sum of exp(sm_scale * s) over the row; "
                         "m and log2(l) are base 2, so lse = (m + log2(l)) * ln 2"},
    torch_baseline=lambda q, k, v, causal=False, sm_scale=None: attention_lse_reference(q, k, v, causal, sm_scale),
    allowed_torch_names=ALLOWED_TORCH_NAMES,
    allowed_hooks=ALLOWED_HOOKS,
)

def _k_transposed_read_unswapped(k):
    """What pass 1 reads as K^T when it is given k's strides in their own order: element (d, j) at
    d * k.stride(2) + j * k.stride(3) of each head, as a (B, Hkv, Sk, D) tensor whose transpose it
    is. Reads that would run past k's memory (Sk < D) meet zeros here."""
    batch, heads, seq_k, dim = k.shape
    spare = torch.zeros(k.numel() + dim * dim, dtype=k.dtype, device=k.device)
    spare[: k.numel()] = k.contiguous().flatten()
    contiguous = (heads * seq_k * dim, seq_k * dim, dim, 1)
    read = torch.as_strided(spare, (batch, heads, dim, seq_k), contiguous)
    return read.transpose(-1, -2)


def _attention_k_unswapped(q, k, v, causal=False, sm_scale=None):
    return attention_reference(q, _k_transposed_read_unswapped(k), v, causal, sm_scale)


NAIVE_SUSPECTS = (
    Suspect("the softmax without sm_scale (softmax(q k^T))", _attention_unscaled,
            "pass 2 scales the scores before the softmax: tl.where(visible, sm_scale * s, -inf)."),
    Suspect(
        "pass 1 with k's strides in their own order (K^T read as k's memory laid out (D, Sk))",
        _attention_k_unswapped,
        "K^T needs k's last two strides swapped: element (d, j) of K^T is k[.., j, d], so its row "
        "stride is k.stride(3) and its column stride k.stride(2).",
    ),
)

NAIVE = Spec(
    api="naive_attention",
    make_inputs=attention_inputs,
    reference=attention_reference,
    suspects=NAIVE_SUSPECTS,
    output_names=("o",),
    flops=attention_flops,
    bytes_moved=attention_bytes,
    torch_baseline=torch_attention,
    bench_cases=(Case({"shape": (1, 16, 2048, 64)}, torch.bfloat16),),
    ceiling="torch",
    allowed_torch_names=ALLOWED_TORCH_NAMES,
    allowed_hooks=ALLOWED_HOOKS,
)

# Each gradient element sums many products of rounded probabilities (P and dS go to 16 bits for the
# tensor cores): twice the course's fp16 and bf16 defaults. A rough emulation of the GPU's rounding
# used 0.76 of the default bf16 tolerance on a causal case of 1000 positions; the mistakes these
# cases catch are off by 10 % and more.
LARGE_SCORES_FP32 = {torch.float32: (1e-4, 1e-4)}
GRADIENT_TOLERANCES = {torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}

BACKWARD = Spec(
    api="attention",
    make_inputs=backward_inputs,
    reference=autograd_reference(attention_reference, wrt=(0, 1, 2)),
    protocol=Backward(wrt=(0, 1, 2), upstream=1),
    output_names=("o", "grad_q", "grad_k", "grad_v"),
    output_notes={"o": "the forward kernel",
                  "grad_v": "dV = P^T dO, with P recomputed from the scores and the saved lse",
                  "grad_q": "dQ = sm_scale * dS K, with dS = P * (dP - D) and D = rowsum(dO * O)",
                  "grad_k": "dK = sm_scale * dS^T Q, with dS = P * (dP - D) and D = rowsum(dO * O)"},
    output_tolerances={name: GRADIENT_TOLERANCES for name in ("grad_q", "grad_k", "grad_v")},
    flops=training_flops,
    bytes_moved=training_bytes,
    torch_baseline=sdpa_fastest,
    bench_cases=BENCH,
    ceiling="torch",
    target=0.60,
    allowed_torch_names=ALLOWED_TORCH_NAMES,
    allowed_hooks=ALLOWED_HOOKS,
)

CASES = [
    # attention_forward(): o and the log-sum-exp
    Case({"shape": (1, 2, 64, 16)}, spec=FORWARD_LSE, label="lse, several key tiles", hint=ROWS_SPAN_TILES),
    Case({"shape": (1, 2, 50, 16), "causal": True}, torch.float16, spec=FORWARD_LSE, label="lse, causal, tail",
         hint=CAUSAL),
    Case({"shape": (1, 4, 24, 32), "kv_heads": 1}, spec=FORWARD_LSE, label="lse, one key/value head", hint=GQA),
    Case({"shape": (2, 8, 1000, 128), "causal": True}, torch.bfloat16, spec=FORWARD_LSE, label="lse, realistic",
         cuda_only=True),
    # attention() backward
    Case({"shape": (1, 2, 48, 16)}, spec=BACKWARD, label="backward", hint=BACKWARD_HINT),
    Case({"shape": (1, 2, 40, 16), "causal": True}, spec=BACKWARD, label="backward, causal, tail",
         hint=BACKWARD_HINT),
    Case({"shape": (1, 4, 32, 16), "kv_heads": 2, "causal": True}, torch.float16, spec=BACKWARD,
         label="backward, grouped-query", hint=BACKWARD_HINT),
    Case({"shape": (1, 2, 24, 16), "seq_k": 40}, spec=BACKWARD, label="backward, more keys than queries",
         hint=BACKWARD_HINT),
    Case({"shape": (1, 2, 33, 32), "causal": True, "layout": "bshd"}, torch.bfloat16, spec=BACKWARD,
         label="backward, bf16, (B, S, H, D) layout", hint=BACKWARD_HINT),
    Case({"shape": (2, 8, 1000, 64), "causal": True}, torch.bfloat16, spec=BACKWARD, label="backward, realistic",
         cuda_only=True),
    Case({"shape": (1, 16, 1024, 128), "kv_heads": 4}, torch.float16, spec=BACKWARD,
         label="backward, grouped-query, D = 128", cuda_only=True),
    # attention(): the forward pass
    Case({"shape": (1, 2, 64, 16)}, label="several key tiles", hint=ROWS_SPAN_TILES),
    Case({"shape": (1, 2, 64, 16), "causal": True}, label="causal", hint=CAUSAL),
    Case({"shape": (1, 4, 37, 32), "kv_heads": 2, "causal": True}, torch.float16, label="grouped-query, causal, tail",
         hint=TAIL),
    Case({"shape": (1, 2, 48, 16), "seq_k": 75}, torch.float16, label="more keys than queries", hint=TAIL),
    Case({"shape": (1, 1, 80, 16), "seq_k": 40, "causal": True}, label="more queries than keys, causal",
         hint=TAIL),
    Case({"shape": (1, 2, 40, 32), "causal": True, "layout": "bshd"}, torch.bfloat16,
         label="bf16, (B, S, H, D) layout", hint=CAUSAL),
    Case({"shape": (1, 1, 24, 16), "scale": 40.0}, torch.float16, label="large scores",
         hint="scores of +-100: exp overflows unless each row's maximum is subtracted first (m starts at -inf)."),
    Case({"shape": (1, 2, 20, 64), "sm_scale": 0.3}, label="sm_scale given, D = 64", hint=ROWS_SPAN_TILES),
    Case({"shape": (1, 2, 1, 16)}, label="one query, one key"),
    Case({"shape": (2, 8, 1000, 64), "causal": True}, torch.bfloat16, label="realistic, causal", cuda_only=True),
    Case({"shape": (1, 8, 2048, 128)}, torch.float16, label="realistic, D = 128", cuda_only=True),
    Case({"shape": (2, 16, 1024, 128), "kv_heads": 4, "causal": True}, torch.bfloat16, label="grouped-query",
         cuda_only=True),
    Case({"shape": (4, 4, 500, 64), "seq_k": 1531}, torch.float16, label="more keys than queries", cuda_only=True),
    Case({"shape": (2, 4, 777, 64), "causal": True}, spec=FLASH2, label="against FlashAttention-2",
         cuda_only=True),
    # naive_attention()
    Case({"shape": (1, 2, 20, 16)}, spec=NAIVE, label="naive"),
    Case({"shape": (1, 2, 33, 16), "causal": True}, torch.float16, spec=NAIVE, label="naive, causal", hint=CAUSAL),
    Case({"shape": (1, 4, 17, 32), "kv_heads": 2, "seq_k": 9}, spec=NAIVE, label="naive, grouped-query", hint=GQA),
    Case({"shape": (1, 1, 24, 16), "scale": 40.0}, torch.float16, spec=NAIVE, label="naive, large scores",
         hint=NAIVE_LARGE_SCORES),
    # float32 scores of several hundred carry rounding errors of ~4e-5 into the exponent, so an
    # output of a correct kernel may be 2e-5 off (seen on an H100): atol 1e-4 here. Forgetting the
    # maximum still gives inf or NaN.
    Case({"shape": (1, 2, 33, 16), "scale": 40.0, "causal": True}, spec=NAIVE, label="naive, causal, large scores",
         hint=NAIVE_LARGE_SCORES, tolerances=LARGE_SCORES_FP32),
    Case({"shape": (1, 4, 17, 32), "kv_heads": 2, "scale": 40.0}, spec=NAIVE,
         label="naive, grouped-query, large scores", hint=NAIVE_LARGE_SCORES, tolerances=LARGE_SCORES_FP32),
    Case({"shape": (2, 8, 512, 64), "causal": True}, torch.bfloat16, spec=NAIVE, label="naive, realistic",
         cuda_only=True),
    # every score far below 0: the softmax is as usual, a running maximum that starts at 0 is not
    Case({"shape": (1, 2, 50, 16), "shift": 32.0}, torch.float16, label="every score far below 0",
         hint=NEGATIVE_SCORES),
    Case({"shape": (1, 4, 37, 32), "kv_heads": 2, "causal": True, "shift": 45.0}, torch.float16,
         label="grouped-query, causal, every score far below 0", hint=NEGATIVE_SCORES),
    Case({"shape": (1, 2, 40, 16), "shift": 32.0}, torch.bfloat16, spec=FORWARD_LSE,
         label="lse, every score far below 0", hint=NEGATIVE_SCORES),
    # the backward as autograd and gradcheck call it: dO of o.sum(), float64 inputs. The float64
    # cases keep the default tolerances: on a GPU the reference itself is 4e-8 off (Triton passes
    # the Python float sm_scale to the kernel as float32), too near float32 arithmetic's 5e-7 to
    # tell the two apart safely.
    Case({"shape": (1, 2, 24, 16), "causal": True, "do": "broadcast"}, spec=BACKWARD,
         label="backward through a sum: dO of stride 0", hint=BROADCAST_DO),
    *(Case({"shape": (1, 2, 18, 16), "kv_heads": 1, "seq_k": 20, "causal": causal}, torch.float64, spec=BACKWARD,
           label=f"backward, float64{', causal' if causal else ''}", hint=FLOAT64) for causal in (False, True)),
    # Last, so that the cases a learner reads first stay the ones that show the usual mistakes.
    Case({"shape": (1, 2, 33, 16), "causal": True, "v_layout": "bshd"}, torch.float16, spec=FORWARD_LSE,
         label="lse, causal, v stored unlike k", hint=STRIDES),
    Case({"shape": (1, 2, 24, 16), "v_layout": "bshd"}, spec=BACKWARD, label="backward, v stored unlike k",
         hint=STRIDES),
    Case({"shape": (1, 2, 40, 16), "v_layout": "bshd"}, label="v stored unlike k", hint=STRIDES),
]

# ------------------------------------------------------------------------------------------------
# Refusals: every function checks its inputs before launching a kernel, with a message that says
# what is wrong (graded like the results)
# ------------------------------------------------------------------------------------------------

def _qkv(rand, q_shape=(1, 2, 8, 16), kv_shape=(1, 2, 8, 16), dtype=torch.float32):
    return tuple(rand.randn(*shape, dtype=dtype) for shape in (q_shape, kv_shape, kv_shape))


def _one_dtype_off(rand):
    q, k, v = _qkv(rand)
    return q, k.half(), v


def _v_shorter(rand):
    q, k, v = _qkv(rand)
    return q, k, v[:, :, :5]


def _no_keys(rand):
    q, k, v = _qkv(rand)
    return q, k[:, :, :0], v[:, :, :0]


# (what is wrong, the inputs, what the message must contain, what it must tell its reader)
BAD_INPUTS = [
    ("a head dimension of 48", lambda rand: (_qkv(rand, (1, 2, 8, 48), (1, 2, 8, 48)), {}), r"head dimension",
     "name the head dimension and the ones the kernels support"),
    ("3 query heads for 2 key/value heads", lambda rand: (_qkv(rand, (1, 3, 8, 16)), {}), r"multiple",
     "say that the query heads must be a multiple of the key/value heads"),
    ("k and v of two shapes", lambda rand: (_v_shorter(rand), {}), r"same shape",
     "say that k and v must have the same shape"),
    ("k of another dtype", lambda rand: (_one_dtype_off(rand), {}), r"dtype",
     "say that q, k and v must share one dtype"),
    ("3-D tensors", lambda rand: (tuple(t[0] for t in _qkv(rand)), {}), r"dimensions",
     "say how many dimensions q, k and v must have"),
    ("two batch sizes", lambda rand: (_qkv(rand, (2, 2, 8, 16)), {}), r"batch",
     "say that q and k must have the same batch size"),
    ("no keys", lambda rand: (_no_keys(rand), {}), r"no keys",
     "say that k and v hold no keys, so there is nothing to attend to"),
    ("a negative sm_scale", lambda rand: (_qkv(rand), {"sm_scale": -1.0}), r"sm_scale",
     "name sm_scale and say it must be a positive number"),
    ("a causal that is not a bool", lambda rand: (_qkv(rand), {"causal": "yes"}), r"causal",
     "say that causal must be True or False"),
    ("integer tensors", lambda rand: (_qkv(rand, dtype=torch.int32), {}), r"dtype",
     "name the dtype it got and the dtypes the kernels support"),
]
CASES += [refusal(spec, inputs, (ValueError, TypeError), needle, why=why, label=f"refuses {what}")
          for spec in (SPEC, FORWARD_LSE, NAIVE) for what, inputs, needle, why in BAD_INPUTS]

# A causal forward reads each key tile only for the query tiles that see it: about half the key
# and value bytes of a non-causal one. Under the interpreter (query tiles of 32, key tiles of 16),
# 128 queries need 1.74 x the bytes of q, k, v and o; visiting every key tile needs 2.48 x. The
# backward's dK/dV kernel likewise starts at the first query tile that sees its keys: forward and
# backward together move 2.19 x their minimum that way, 2.45 x from the first query tile on. Four
# query tiles make four programs: a bar that sees fewer saw no kernel at all.
TRAFFIC = [
    TrafficBar(Case({"shape": (1, 1, 128, 16), "causal": True}), coalesced=(), max_bytes_over_minimum=2.0,
               min_programs=4, todo="stop at the last key tile",
               lesson="With a causal mask, the key tiles wholly above the diagonal contribute nothing: end the "
                      "loop over key tiles at the query tile's last row instead of masking them."),
    TrafficBar(Case({"shape": (1, 1, 128, 16), "causal": True}, spec=BACKWARD), coalesced=(),
               max_bytes_over_minimum=2.3, min_programs=4, todo="the first query tile that sees",
               lesson="With a causal mask, the query tiles before key start_n see none of the keys start_n on: "
                      "start the dK/dV loop at the query tile of row start_n instead of masking the earlier ones."),
]


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------

def test_matches_reference(kernel, case):
    check_case(kernel, SPEC, case)


def test_memory_traffic(kernel, bar):
    check_bar(kernel, SPEC, bar)


def _problem(kernel, what: str, error: BaseException) -> AssertionError:
    todos = f"\n{len(kernel.todos)} TODO(s) still open in kernel.py, starting with {kernel.todos[0]}." \
        if kernel.todos else ""
    return AssertionError(f"{what}: {type(error).__name__}: {str(error).strip()[:1500]}{todos}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradcheck_in_float64(kernel, causal):
    """torch.autograd.gradcheck compares the backward kernels with finite differences of the forward
    kernel, in float64, on a grouped-query case whose sequences span several tiles."""
    attention = kernel.api("attention")
    generator = torch.Generator(device=device.torch_device()).manual_seed(3)

    def leaf(*shape):
        return torch.randn(*shape, dtype=torch.float64, device=device.torch_device(),
                           generator=generator).requires_grad_()

    inputs = (leaf(1, 2, 18, 16), leaf(1, 1, 20, 16), leaf(1, 1, 20, 16))
    try:
        torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, causal=causal), inputs,
                                 eps=1e-6, atol=1e-5, rtol=1e-4, fast_mode=True)
    except Exception as error:
        raise _problem(kernel, "gradcheck of attention() failed (the backward disagrees with finite "
                               "differences of the forward)", error) from None


def test_lse_is_float32_per_query_row(kernel):
    where = device.torch_device()
    q = torch.randn(2, 4, 20, 16, device=where, dtype=torch.float16)
    k = torch.randn(2, 2, 24, 16, device=where, dtype=torch.float16)
    o, lse = kernel.api("attention_forward")(q, k, k)
    assert o.dtype == torch.float16 and tuple(o.shape) == (2, 4, 20, 16), \
        f"o has dtype {o.dtype} and shape {tuple(o.shape)}: it should be shaped and typed like q."
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (2, 4, 20), (
        f"lse has dtype {lse.dtype} and shape {tuple(lse.shape)}; expected float32 of shape (B, Hq, Sq) = "
        "(2, 4, 20): one statistic per query row, kept in float32 for the backward pass.")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype, causal, head_dim", [(torch.bfloat16, True, 128), (torch.bfloat16, False, 64),
                                                      (torch.float16, True, 64), (torch.float16, False, 128)],
                         ids=["bf16-causal-128", "bf16-full-64", "fp16-causal-64", "fp16-full-128"])
def test_as_accurate_as_sdpa(kernel, dtype, causal, head_dim):
    """At realistic sizes, in 16 bits: o and the three gradients are no further from a float32
    reference than PyTorch's scaled_dot_product_attention is (twice its error, plus a little)."""
    generator = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(4, 8, 1024, head_dim, device="cuda", generator=generator, dtype=dtype).requires_grad_()
               for _ in range(3))
    do = torch.randn(q.shape, device="cuda", generator=generator, dtype=dtype)

    def outputs(fn, *tensors):
        o = fn(*tensors, causal=causal)
        return (o, *torch.autograd.grad(o, tensors, do.to(o.dtype)))

    exact = outputs(attention_reference, *(t.detach().float().requires_grad_() for t in (q, k, v)))
    ours = outputs(kernel.api("attention"), q, k, v)
    theirs = outputs(lambda *t, causal: F.scaled_dot_product_attention(*t, is_causal=causal), q, k, v)
    for name, mine, sdpa, want in zip(("o", "grad_q", "grad_k", "grad_v"), ours, theirs, exact):
        error, sdpa_error = ((t.float() - want).abs().max().item() for t in (mine, sdpa))
        assert error <= 2 * sdpa_error + 1e-3, (
            f"{name}: largest error {error:.3g} against a float32 reference, where scaled_dot_product_attention's "
            f"is {sdpa_error:.3g}.")
