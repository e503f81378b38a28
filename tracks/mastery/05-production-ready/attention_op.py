"""attention(q, k, v, causal, sm_scale) as a PyTorch operator: given code, complete, to read.

The FlashAttention forward and backward kernels of mastery/03-attention-kernels, wrapped with the
same steps as kernel.py's two operators: kernels; a launcher that validates, allocates and
launches through wrap_triton; triton_op; a fake; a backward operator with its own fake;
setup_context and backward; register_autograd; and the public function with its docstring. Read it
after your own kernel.py: every piece here has its counterpart there, for a forward operator that
returns two tensors (o and the log-sum-exp the backward needs) and kernels that take more than one
tile size.

It is not part of what you submit, and it needs nothing from kernel.py: test_kernel.py and
benchmark.py load it from this folder, whatever implementation they test. Its tests are the
attention ones of test_kernel.py (pytest only; the grader leaves them out, since the learner does
not write this code, and mastery/03 grades its kernels).
"""

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# fp32/fp16/bf16 for models, float64 for torch.autograd.gradcheck, as in kernel.py.
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)

# Operator names are global to a process, so this file too registers under a namespace made from
# the name Python imported it under, as kernel.py does (see NAMESPACE there): two copies loaded
# under different names register side by side instead of replacing each other's ops.
NAMESPACE = "course_" + __name__.replace(".", "_").strip("_")


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 data (gradcheck), float32 otherwise: the dtype of the statistics."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# The kernels are those of mastery/03-attention-kernels (online softmax, causal tiles skipped,
# grouped-query heads), with fixed tile sizes instead of @triton.autotune: an operator launches
# through wrap_triton, and a fixed launch is what torch.compile can trace most simply.

# exp(x) = exp2(x * log2(e)); ln(2) is written out inside the kernels (they read no globals).
LOG2E = 1.4426950408889634
ATTENTION_HEAD_DIMS = (16, 32, 64, 128)


# ---- kernels -------------------------------------------------------------------------------------

@triton.jit
def attention_key_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                        offs_m, offs_d, lo, hi, seq_k, qk_scale,
                        BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                        COMPUTE_DTYPE: tl.constexpr):
    """Fold the key tiles from lo to hi into the running (acc, l_i, m_i) of the online softmax,
    in base 2 (qk_scale = sm_scale * log2(e)). MASKED tiles hold padding keys or the diagonal."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        k_ptrs = k_ptr + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_ptr + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < seq_k, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < seq_k, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        s = tl.dot(q, tl.trans(k), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        if MASKED:
            visible = cols[None, :] < seq_k
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_forward_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    n_heads, group_size, seq_q, seq_k, qk_scale,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per (query tile, batch x head): o and the log-sum-exp of BLOCK_M query rows."""
    if CAUSAL:  # the last query tiles see the most keys: start them first
        start_m = tl.num_programs(axis=0) - 1 - tl.program_id(axis=0)
    else:
        start_m = tl.program_id(axis=0)
    bh = tl.program_id(axis=1)
    batch = (bh // n_heads).to(tl.int64)
    head = (bh % n_heads).to(tl.int64)
    kv_head = head // group_size
    q_ptr += batch * stride_qb + head * stride_qh
    k_ptr += batch * stride_kb + kv_head * stride_kh
    v_ptr += batch * stride_vb + kv_head * stride_vh
    o_ptr += batch * stride_ob + head * stride_oh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_mask = offs_m < seq_q
    q = tl.load(q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=row_mask[:, None], other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=COMPUTE_DTYPE)
    l_i = tl.zeros((BLOCK_M,), dtype=COMPUTE_DTYPE)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=COMPUTE_DTYPE)
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq_k)
        full_end = tl.minimum(start_m * BLOCK_M, seq_k) // BLOCK_N * BLOCK_N
    else:
        hi = seq_k
        full_end = seq_k // BLOCK_N * BLOCK_N
    acc, l_i, m_i = attention_key_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                                        offs_m, offs_d, 0, full_end, seq_k, qk_scale,
                                        BLOCK_N, False, CAUSAL, COMPUTE_DTYPE)
    acc, l_i, m_i = attention_key_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                                        offs_m, offs_d, full_end, hi, seq_k, qk_scale,
                                        BLOCK_N, True, CAUSAL, COMPUTE_DTYPE)
    o = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, o.to(o_ptr.dtype.element_ty),
             mask=row_mask[:, None])
    tl.store(lse_ptr + bh.to(tl.int64) * seq_q + offs_m, lse, mask=row_mask)


@triton.jit
def attention_delta_kernel(o_ptr, do_ptr, delta_ptr,
                           stride_ob, stride_oh, stride_om, stride_od,
                           stride_dob, stride_doh, stride_dom, stride_dod,
                           n_heads, seq_q,
                           HEAD_DIM: tl.constexpr, COMPUTE_DTYPE: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta = rowsum(dO * O) for BLOCK_M query rows of one (batch, head)."""
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(axis=1)
    batch = (bh // n_heads).to(tl.int64)
    head = (bh % n_heads).to(tl.int64)
    offs_d = tl.arange(0, HEAD_DIM)
    row_mask = offs_m < seq_q
    o = tl.load(o_ptr + batch * stride_ob + head * stride_oh + offs_m[:, None] * stride_om
                + offs_d[None, :] * stride_od, mask=row_mask[:, None], other=0.0).to(COMPUTE_DTYPE)
    do = tl.load(do_ptr + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dod, mask=row_mask[:, None], other=0.0).to(COMPUTE_DTYPE)
    tl.store(delta_ptr + bh.to(tl.int64) * seq_q + offs_m, tl.sum(o * do, axis=1), mask=row_mask)


@triton.jit
def attention_query_tiles(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, stride_qm, stride_qd, stride_dom,
                          stride_dod, offs_n, offs_d, lo, hi, seq_q, qk_scale,
                          BLOCK_M: tl.constexpr, MASKED: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """Add to dk and dv (BLOCK_N keys) the share of the query tiles from lo to hi, computed
    transposed (keys along the rows). MASKED tiles straddle the causal diagonal."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_mask = offs_m < seq_q
        q = tl.load(q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=row_mask[:, None],
                    other=0.0)
        do = tl.load(do_ptr + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=row_mask[:, None],
                     other=0.0)
        # lse in base 2; rows past seq_q get +inf, so that their probabilities are exp2(-inf) = 0
        lse = tl.load(lse_ptr + offs_m, mask=row_mask, other=float("inf")) * 1.4426950408889634
        delta = tl.load(delta_ptr + offs_m, mask=row_mask, other=0.0)
        pT = tl.math.exp2(tl.dot(k, tl.trans(q), input_precision="ieee", out_dtype=COMPUTE_DTYPE) * qk_scale
                          - lse[None, :])
        if MASKED:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        dv = tl.dot(pT.to(do.dtype), do, dv, input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        dpT = tl.dot(v, tl.trans(do), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        dk = tl.dot((pT * (dpT - delta[None, :])).to(q.dtype), q, dk, input_precision="ieee",
                    out_dtype=COMPUTE_DTYPE)
    return dk, dv


@triton.jit
def attention_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_gb, stride_gh, stride_gn, stride_gd,
    n_heads, n_kv_heads, group_size, seq_q, seq_k, qk_scale, sm_scale,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per (key tile, batch x key/value head): dK and dV of BLOCK_N keys, summed over
    the queries of every query head that reads this key/value head (dk and dv share strides)."""
    start_n = tl.program_id(axis=0) * BLOCK_N
    bh_kv = tl.program_id(axis=1)
    batch = (bh_kv // n_kv_heads).to(tl.int64)
    kv_head = (bh_kv % n_kv_heads).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    key_mask = offs_n < seq_k
    k = tl.load(k_ptr + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn
                + offs_d[None, :] * stride_kd, mask=key_mask[:, None], other=0.0)
    v = tl.load(v_ptr + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn
                + offs_d[None, :] * stride_vd, mask=key_mask[:, None], other=0.0)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), dtype=COMPUTE_DTYPE)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), dtype=COMPUTE_DTYPE)
    if CAUSAL:  # query i sees key j when i >= j: the band of tiles on the diagonal takes the mask
        lo = start_n // BLOCK_M * BLOCK_M
        band_end = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, seq_q)
        rest_start = tl.maximum(lo, band_end)
    else:
        lo = 0
        band_end = 0
        rest_start = 0
    for g in range(group_size):
        head = kv_head * group_size + g
        bh = batch * n_heads + head
        q_head = q_ptr + batch * stride_qb + head * stride_qh
        do_head = do_ptr + batch * stride_dob + head * stride_doh
        dk, dv = attention_query_tiles(dk, dv, k, v, q_head, do_head, lse_ptr + bh * seq_q, delta_ptr + bh * seq_q,
                                       stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d,
                                       lo, band_end, seq_q, qk_scale, BLOCK_M, True, COMPUTE_DTYPE)
        dk, dv = attention_query_tiles(dk, dv, k, v, q_head, do_head, lse_ptr + bh * seq_q, delta_ptr + bh * seq_q,
                                       stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d,
                                       rest_start, seq_q, seq_q, qk_scale, BLOCK_M, False, COMPUTE_DTYPE)
    grads = batch * stride_gb + kv_head * stride_gh + offs_n[:, None] * stride_gn + offs_d[None, :] * stride_gd
    tl.store(dk_ptr + grads, (dk * sm_scale).to(dk_ptr.dtype.element_ty), mask=key_mask[:, None])
    tl.store(dv_ptr + grads, dv.to(dv_ptr.dtype.element_ty), mask=key_mask[:, None])


@triton.jit
def attention_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    n_heads, group_size, seq_q, seq_k, qk_scale, sm_scale,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per (query tile, batch x head): dQ of BLOCK_M queries, over the forward's keys."""
    if CAUSAL:
        start_m = tl.num_programs(axis=0) - 1 - tl.program_id(axis=0)
    else:
        start_m = tl.program_id(axis=0)
    bh = tl.program_id(axis=1)
    batch = (bh // n_heads).to(tl.int64)
    head = (bh % n_heads).to(tl.int64)
    kv_head = head // group_size
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    row_mask = offs_m < seq_q
    q = tl.load(q_ptr + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :] * stride_qd, mask=row_mask[:, None], other=0.0)
    do = tl.load(do_ptr + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dod, mask=row_mask[:, None], other=0.0)
    rows = bh.to(tl.int64) * seq_q + offs_m
    lse = tl.load(lse_ptr + rows, mask=row_mask, other=float("inf")) * 1.4426950408889634
    delta = tl.load(delta_ptr + rows, mask=row_mask, other=0.0)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), dtype=COMPUTE_DTYPE)
    k_ptr += batch * stride_kb + kv_head * stride_kh
    v_ptr += batch * stride_vb + kv_head * stride_vh
    hi = tl.minimum((start_m + 1) * BLOCK_M, seq_k) if CAUSAL else seq_k
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        visible = (cols < seq_k)[None, :]
        if CAUSAL:
            visible = visible & (offs_m[:, None] >= cols[None, :])
        k = tl.load(k_ptr + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=cols[:, None] < seq_k,
                    other=0.0)
        v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=cols[:, None] < seq_k,
                    other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        p = tl.where(visible, tl.math.exp2(s * qk_scale - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        dq = tl.dot((p * (dp - delta[:, None])).to(k.dtype), k, dq, input_precision="ieee", out_dtype=COMPUTE_DTYPE)
    tl.store(dq_ptr + batch * stride_dqb + head * stride_dqh + offs_m[:, None] * stride_dqm
             + offs_d[None, :] * stride_dqd, (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_mask[:, None])


# ---- launchers: tiles ----------------------------------------------------------------------------

def attention_tiles(q: torch.Tensor, which: str) -> dict:
    """Tile sizes and launch options of one attention kernel ("forward", "dkdv" or "dq"). Under
    the interpreter, small tiles of unequal sizes (a causal diagonal then crosses two tiles); on a
    GPU, the tiles mastery/03 launches below its autotuning threshold: modest tensor-core tiles for
    16-bit data, small ones for float32 and float64, whose products run on the exact, slower units.
    (mastery/03's autotuned tiles are faster on long sequences; a fixed launch keeps the operator's
    eager and compiled calls the same.)"""
    if not q.is_cuda:
        block_m, block_n = {"forward": (32, 16), "dkdv": (16, 32), "dq": (32, 16)}[which]
        return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4, num_stages=1)
    if q.dtype in (torch.float32, torch.float64):
        return dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
    block_m, block_n = {"forward": (64, 64), "dkdv": (32, 64), "dq": (64, 32)}[which]
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4, num_stages=3)


def attention_readable(*tensors):
    """The tensors as the kernels read them: Triton's CPU interpreter multiplies bf16 blocks
    wrongly in tl.dot (3.6 to 3.9), so there bf16 inputs are read as float32 copies."""
    return tuple(t.float() if t.dtype == torch.bfloat16 and not t.is_cuda else t for t in tensors)


def attention_compute_type(t: torch.Tensor):
    return tl.float64 if t.dtype == torch.float64 else tl.float32


# ---- validation ----------------------------------------------------------------------------------

def check_attention_inputs(q, k, v, causal, sm_scale) -> None:
    """Raise a TypeError or ValueError that says what to do, unless the kernels can run on these
    inputs (metadata only)."""
    check_tensors(("q", q), ("k", k), ("v", v), dtypes=DTYPES, ndim=4)
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}: every key needs one value, "
                         "so give k and v the same shape (B, Hkv, Sk, D).")
    batch, q_heads, seq_q, head_dim = q.shape
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}: q is (B, Hq, Sq, D) and k is "
                         "(B, Hkv, Sk, D), with the same batch size B and head dimension D.")
    if k.shape[1] == 0 or q_heads % k.shape[1]:
        raise ValueError(f"q has {q_heads} heads and k {k.shape[1]}: grouped-query attention needs the number "
                         "of query heads to be a multiple of the number of key/value heads.")
    if head_dim not in ATTENTION_HEAD_DIMS:
        raise ValueError(f"the head dimension is {head_dim}; attention supports "
                         f"{', '.join(map(str, ATTENTION_HEAD_DIMS))}. Pad q, k and v with zeros up to the next "
                         "one, pass sm_scale=1/sqrt(D) of the unpadded D, and slice the output back.")
    if seq_q and not k.shape[2]:
        raise ValueError("k and v hold no keys (Sk = 0): attention over zero keys is undefined.")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}.")
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)) or not 0 < sm_scale < math.inf:
        raise ValueError(f"sm_scale must be a positive number (default 1 / sqrt(D)), got {sm_scale!r}.")


# ---- the forward operator ------------------------------------------------------------------------

def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                      sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward operator's implementation: (o, lse), lse being each query row's log-sum-exp of
    sm_scale * q k^T (float32; float64 for float64 inputs), which the backward needs."""
    check_attention_inputs(q, k, v, causal, sm_scale)
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, q_heads, seq_q), dtype=accumulator_dtype(q.dtype), device=q.device)
    if o.numel() == 0:
        return o, lse
    qr, kr, vr = attention_readable(q, k, v)
    tiles = attention_tiles(q, "forward")
    torch.library.wrap_triton(attention_forward_kernel)[(triton.cdiv(seq_q, tiles["BLOCK_M"]), batch * q_heads)](
        qr, kr, vr, o, lse, *qr.stride(), *kr.stride(), *vr.stride(), *o.stride(),
        q_heads, q_heads // kv_heads, seq_q, seq_k, sm_scale * LOG2E,
        HEAD_DIM=head_dim, CAUSAL=causal, COMPUTE_DTYPE=attention_compute_type(q), **tiles)
    return o, lse


def attention_fake(q, k, v, causal, sm_scale):
    """(o, lse) from metadata alone: o like q, contiguous; lse (B, Hq, Sq) in the statistics' dtype."""
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=accumulator_dtype(q.dtype))


# ---- the backward operator -----------------------------------------------------------------------

DELTA_ROWS = 64  # query rows per program of attention_delta_kernel


def attention_grads(grad_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                    lse: torch.Tensor, causal: bool, sm_scale: float
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) for an upstream gradient grad_o: delta = rowsum(dO * O) first, then dK and dV
    per key tile and dQ per query tile, the probabilities recomputed from the saved lse."""
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)  # written whole: every key tile
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if dk.numel() == 0:
        return dq, dk, dv
    common = dict(HEAD_DIM=head_dim, CAUSAL=causal, COMPUTE_DTYPE=attention_compute_type(q))
    qr, kr, vr, o_r, do = attention_readable(q, k, v, o, grad_o)
    delta = torch.empty(lse.shape, dtype=lse.dtype, device=q.device)
    if seq_q:
        torch.library.wrap_triton(attention_delta_kernel)[(triton.cdiv(seq_q, DELTA_ROWS), batch * q_heads)](
            o_r, do, delta, *o_r.stride(), *do.stride(), q_heads, seq_q,
            HEAD_DIM=head_dim, COMPUTE_DTYPE=attention_compute_type(q), BLOCK_M=DELTA_ROWS)
    tiles = attention_tiles(q, "dkdv")
    torch.library.wrap_triton(attention_dkdv_kernel)[(triton.cdiv(seq_k, tiles["BLOCK_N"]), batch * kv_heads)](
        qr, kr, vr, do, lse, delta, dk, dv, *qr.stride(), *kr.stride(), *vr.stride(), *do.stride(), *dk.stride(),
        q_heads, kv_heads, q_heads // kv_heads, seq_q, seq_k, sm_scale * LOG2E, sm_scale, **common, **tiles)
    if seq_q:
        tiles = attention_tiles(q, "dq")
        torch.library.wrap_triton(attention_dq_kernel)[(triton.cdiv(seq_q, tiles["BLOCK_M"]), batch * q_heads)](
            qr, kr, vr, do, lse, delta, dq, *qr.stride(), *kr.stride(), *vr.stride(), *do.stride(), *dq.stride(),
            q_heads, q_heads // kv_heads, seq_q, seq_k, sm_scale * LOG2E, sm_scale, **common, **tiles)
    return dq, dk, dv


def attention_backward_fake(grad_o, q, k, v, o, lse, causal, sm_scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


# ---- registration and autograd -------------------------------------------------------------------

attention_op = torch.library.triton_op(f"{NAMESPACE}::attention", attention_forward, mutates_args=())
attention_op.register_fake(attention_fake)
attention_backward_op = torch.library.triton_op(f"{NAMESPACE}::attention_backward", attention_grads,
                                                mutates_args=())
attention_backward_op.register_fake(attention_backward_fake)


def attention_setup_context(ctx, inputs, output):
    """Keep q, k, v, o and lse: the backward recomputes the probabilities from them."""
    q, k, v, causal, sm_scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.sm_scale = causal, sm_scale
    ctx.mark_non_differentiable(lse)


def attention_backward(ctx, grad_o, grad_lse):
    """One gradient per input (q, k, v, causal, sm_scale); lse is not differentiable."""
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward_op(grad_o, q, k, v, o, lse, ctx.causal, ctx.sm_scale)
    return dq, dk, dv, None, None


attention_op.register_autograd(attention_backward, setup_context=attention_setup_context)


# ---- the public function -------------------------------------------------------------------------

def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: Optional[float] = None) -> torch.Tensor:
    """softmax(sm_scale * q k^T) v by FlashAttention: F.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=sm_scale, enable_gqa=True) as an operator.

    Args:
        q: (B, Hq, Sq, D), D one of 16, 32, 64, 128; float32, float16, bfloat16 or float64.
        k, v: (B, Hkv, Sk, D) of q's dtype, Hq a multiple of Hkv (grouped-query attention).
        causal: query i sees keys 0..i (top-left aligned, as SDPA's is_causal).
        sm_scale: the softmax scale, 1 / sqrt(D) by default.

    Returns o, shaped and typed like q, contiguous. Differentiable in q, k and v; works under
    torch.compile(fullgraph=True). Raises TypeError or ValueError with what to change.
    """
    check_attention_inputs(q, k, v, causal, 1.0 if sm_scale is None else sm_scale)  # errors name the argument
    o, _ = attention_op(q, k, v, causal, 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale))
    return o
