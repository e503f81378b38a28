"""Example "low-precision-lse": attention_forward() returns the log-sum-exp in q's dtype (fp16 or
bf16) instead of float32, a few tenths of a percent off; o is right. The backward (attention())
keeps its float32 statistics. Everything else is the reference solution.

FlashAttention: exact attention in one pass over the keys, without the S x S matrix.

For every batch b and query head h, with q (B, Hq, Sq, D) and k, v (B, Hkv, Sk, D):

    O = softmax(sm_scale * Q K^T) V        (rows of Q are queries, rows of K and V are keys)

1. naive_attention(q, k, v) does it in three passes, as the formula reads: S = Q K^T into a
   (B, Hq, Sq, Sk) float32 buffer, a row-wise softmax of S in place, then O = P V. It is simple and
   exact, and its buffer grows with Sq x Sk: 4 GiB for 32 heads at 4096 x 8192.
2. attention(q, k, v) is FlashAttention. A program owns a tile of BLOCK_M queries and walks over
   the keys one tile of BLOCK_N at a time, keeping three running values per query row: the largest
   score seen so far m, the sum of exponentials l (relative to m), and the output accumulator acc
   (also relative to m). When a new tile raises m, l and acc are rescaled by exp(m_old - m_new):
   the online softmax. The scores live in registers for one tile only, so memory holds Q, K, V, O
   and one number per query row, the log-sum-exp that the backward pass needs.
3. Causal attention (query i sees keys 0..i, the diagonal included, as SDPA's is_causal) skips the
   key tiles that lie entirely above the diagonal: the loop stops there instead of masking them.
4. The backward pass recomputes the probabilities tile by tile from the saved log-sum-exp:
   D = rowsum(dO * O) first, then one kernel that owns a key tile and walks over the query tiles
   (dK, dV), and one that owns a query tile and walks over the key tiles (dQ). A
   torch.autograd.Function puts forward and backward together.

Grouped-query attention: Hq may be any multiple of Hkv; query head h reads key/value head
h // (Hq // Hkv). Head dimensions 16, 32, 64 and 128; Sq and Sk need not be equal nor multiples of
the blocks. The kernels take every stride, so q, k and v may be views (a (B, S, H, D) tensor
transposed to (B, H, S, D), for instance). Arithmetic is float32 (float64 for float64 inputs,
which torch.autograd.gradcheck needs); the matrix products run on the inputs' own dtype.

Check your work:  make check M=mastery/03-attention-kernels
    or, in this folder with the course's environment active:  python kernel.py
"""

import math

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# fp16, bf16 and fp32 for use; float64 so that torch.autograd.gradcheck can check the backward.
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
HEAD_DIMS = (16, 32, 64, 128)
# The naive softmax keeps a whole row of scores in one block (see missing-elements/03-softmax).
NAIVE_MAX_KEYS = 32768
# exp(x) = exp2(x * log2(e)). Inside the kernels the constants log2(e) = 1.4426950408889634 and
# ln(2) = 0.6931471805599453 are written out (a @triton.jit function reads no Python globals).
LOG2E = 1.4426950408889634


# ------------------------------------------------------------------------------------------------
# Helpers shared by every kernel
# ------------------------------------------------------------------------------------------------

def interpreter_safe(*tensors):
    """The tensors as the kernels should read them. Triton's CPU interpreter multiplies bf16 blocks
    wrongly in tl.dot (3.6 to 3.9), so there bf16 inputs are read as float32 copies; on a GPU,
    and for every other dtype, the tensors themselves."""
    return tuple(t.float() if t.dtype == torch.bfloat16 and not t.is_cuda else t for t in tensors)


def compute_dtype(t: torch.Tensor):
    """Softmax statistics and accumulators: float32, or float64 for float64 inputs."""
    return tl.float64 if t.dtype == torch.float64 else tl.float32


def statistics_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _check_inputs(q, k, v, causal, sm_scale, what: str) -> float:
    """Validate the inputs of every API function; returns the softmax scale to use."""
    check_tensors(("q", q), ("k", k), ("v", v), dtypes=DTYPES, ndim=4)
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}: every key needs "
                         "one value, so give k and v the same shape (B, Hkv, Sk, D).")
    batch, q_heads, seq_q, head_dim = q.shape
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"q has shape {tuple(q.shape)} and k {tuple(k.shape)}: q is (B, Hq, Sq, D) and k "
                         "is (B, Hkv, Sk, D), with the same batch size B and head dimension D.")
    kv_heads = k.shape[1]
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"q has {q_heads} heads and k {kv_heads}: grouped-query attention needs the "
                         "number of query heads to be a multiple of the number of key/value heads.")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"the head dimension is {head_dim}; {what} supports head dimensions "
                         f"{', '.join(map(str, HEAD_DIMS))} (a tile of a head is one power-of-two block). "
                         "Pad the last dimension of q, k and v with zeros up to the next one, pass "
                         "sm_scale=1/sqrt(D) of the unpadded D, and slice o back.")
    if seq_q and not k.shape[2]:
        raise ValueError("k and v hold no keys (Sk = 0), so the softmax has nothing to normalize over: "
                         "attention over zero keys is undefined.")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}.")
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)) or not 0 < sm_scale < math.inf:
        raise ValueError(f"sm_scale must be a positive number (default 1 / sqrt(D)), got {sm_scale!r}.")
    return float(sm_scale)


# ------------------------------------------------------------------------------------------------
# 1. Naive attention: three passes, with the S x S scores in memory
# ------------------------------------------------------------------------------------------------

@triton.jit
def batched_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, n_heads, group_size,
                          stride_ab, stride_ah, stride_am, stride_ak,
                          stride_bb, stride_bh, stride_bk, stride_bn,
                          stride_cb, stride_ch, stride_cm, stride_cn,
                          COMPUTE_DTYPE: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """c[b, h] = a[b, h] @ b[b, h // group_size] for every batch b and head h: the tiled matmul of
    missing-elements/02-matrix-mul, one (batch, head) pair per program along axis 1. Strides make
    transposes free: b = K^T is k with its two last strides swapped."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    pid_m = tl.program_id(axis=0) // tiles_n
    pid_n = tl.program_id(axis=0) % tiles_n
    bh = tl.program_id(axis=1)
    batch = (bh // n_heads).to(tl.int64)
    head = (bh % n_heads).to(tl.int64)
    a_ptr += batch * stride_ab + head * stride_ah
    b_ptr += batch * stride_bb + (head // group_size) * stride_bh
    c_ptr += batch * stride_cb + head * stride_ch
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=COMPUTE_DTYPE)
    for start_k in range(0, K, BLOCK_K):
        ks = start_k + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        # a may be the float32 probabilities and b the 16-bit values: multiply in b's dtype
        acc = tl.dot(a.to(b.dtype), b, acc, input_precision="ieee", out_dtype=COMPUTE_DTYPE)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def masked_softmax_kernel(s_ptr, seq_q, seq_k, sm_scale, CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr):
    """Row-wise softmax of sm_scale * scores, in place: one program per row of the contiguous
    (B * Hq * Sq, Sk) score matrix. Keys a query must not see get probability 0."""
    row = tl.program_id(axis=0).to(tl.int64)
    query = row % seq_q
    cols = tl.arange(0, BLOCK_N)
    in_row = cols < seq_k
    s = tl.load(s_ptr + row * seq_k + cols, mask=in_row, other=0.0)
    # TODO: decide which keys this query sees, and give the others the score -inf
    # HINT: the padding lanes past seq_k see nothing; with CAUSAL, query i sees keys 0..i (the diagonal too).
    # HINT: tl.where(visible, sm_scale * s, float("-inf")): exp(-inf) = 0, so they get probability 0.
    visible = in_row
    if CAUSAL:
        visible = visible & (cols <= query)
    s = tl.where(visible, sm_scale * s, float("-inf"))
    # STUB: s = ...
    # END TODO
    # TODO: the softmax of the row: subtract its maximum, exponentiate, divide by the sum
    # HINT: subtracting the maximum changes nothing mathematically, and keeps exp from overflowing.
    # HINT: tl.max and tl.sum reduce a block (axis=0); tl.exp works element by element.
    s_max = tl.max(s, axis=0)
    e = tl.exp(s - s_max)
    p = e / tl.sum(e, axis=0)
    # STUB: p = ...
    # END TODO
    tl.store(s_ptr + row * seq_k + cols, p, mask=in_row)


def _matmul_blocks(M: int, N: int, K: int) -> dict:
    """Tiles of at most 64 x 64 x 32 (at least 16, the smallest tl.dot takes): the naive version
    is the one to measure against, not to tune."""
    def fit(size, largest):
        return min(largest, max(16, triton.next_power_of_2(size)))

    return dict(BLOCK_M=fit(M, 64), BLOCK_N=fit(N, 64), BLOCK_K=fit(K, 32))


def _batched_matmul(a, b, c, M: int, N: int, K: int, n_heads: int, group_size: int, strides_a, strides_b,
                    like: torch.Tensor) -> None:
    """Launch batched_matmul_kernel: c (B, Hq, M, N) = a (B, Hq, M, K) @ b (B, Hkv, K, N), where a
    and b are given as tensors plus the four strides to read them with."""
    blocks = _matmul_blocks(M, N, K)
    grid = (triton.cdiv(M, blocks["BLOCK_M"]) * triton.cdiv(N, blocks["BLOCK_N"]), c.shape[0] * c.shape[1])
    batched_matmul_kernel[grid](a, b, c, M, N, K, n_heads, group_size, *strides_a, *strides_b, *c.stride(),
                                COMPUTE_DTYPE=compute_dtype(like), **blocks)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: float | None = None) -> torch.Tensor:
    """softmax(sm_scale * q k^T) v in three passes, with the (B, Hq, Sq, Sk) scores in memory.

    q is (B, Hq, Sq, D), k and v (B, Hkv, Sk, D) with Hq a multiple of Hkv; sm_scale defaults to
    1 / sqrt(D). causal=True lets query i see keys 0..i. Returns o, shaped and typed like q."""
    sm_scale = _check_inputs(q, k, v, causal, sm_scale, "naive_attention")
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    if seq_k > NAIVE_MAX_KEYS:
        raise ValueError(f"naive_attention keeps a row of {seq_k} scores in one block and supports at most "
                         f"{NAIVE_MAX_KEYS} keys; use attention(), which has no such limit.")
    out = torch.empty((batch, q_heads, seq_q, head_dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    group_size = q_heads // kv_heads
    q, k, v = interpreter_safe(q, k, v)
    # TODO: allocate the scores: one float32 value for every (batch, head, query, key)
    # HINT: this (B, Hq, Sq, Sk) buffer is what FlashAttention never writes; statistics_dtype(q) is its dtype.
    scores = torch.empty((batch, q_heads, seq_q, seq_k), dtype=statistics_dtype(q), device=q.device)
    # STUB: scores = ...
    # END TODO
    # TODO: pass 1, S = Q K^T: launch the batched matmul with b = K^T, read through k's strides
    # HINT: _batched_matmul(a, b, c, M, N, K, ...) computes c = a @ b for M x K times K x N matrices.
    # HINT: K^T needs no copy: element (d, j) of K^T is k[.., j, d], so its two strides are k's swapped.
    _batched_matmul(q, k, scores, seq_q, seq_k, head_dim, q_heads, group_size, q.stride(),
                    (k.stride(0), k.stride(1), k.stride(3), k.stride(2)), like=q)
    # END TODO
    # TODO: pass 2, P = softmax(sm_scale * S) row by row, in place
    # HINT: one program per row of scores; the block must hold a whole row (a power of two >= Sk).
    block_n = triton.next_power_of_2(seq_k)
    masked_softmax_kernel[(batch * q_heads * seq_q,)](scores, seq_q, seq_k, sm_scale, CAUSAL=causal,
                                                      BLOCK_N=block_n, num_warps=min(max(block_n // 512, 1), 16))
    # END TODO
    # TODO: pass 3, O = P V
    # HINT: the same batched matmul, now with M = Sq, N = D and K = Sk.
    _batched_matmul(scores, v, out, seq_q, head_dim, seq_k, q_heads, group_size, scores.stride(), v.stride(),
                    like=q)
    # END TODO
    return out


# ------------------------------------------------------------------------------------------------
# 2. FlashAttention forward: one pass over the keys with the online softmax
# ------------------------------------------------------------------------------------------------

@triton.jit
def attend_to_key_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                        offs_m, offs_d, lo, hi, seq_k, qk_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                        COMPUTE_DTYPE: tl.constexpr):
    """Fold the key tiles that start at lo, lo + BLOCK_N, ... below hi into the running (acc, l_i,
    m_i) of this program's query rows. MASKED tiles may hold keys past seq_k or above the
    diagonal; the others are entirely visible, and skip the mask.

    m_i and the exponents live in base 2: qk_scale = sm_scale * log2(e), so that
    exp(sm_scale * s - m) = exp2(qk_scale * s - m') with m' = m * log2(e)."""
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
        # TODO: the raw scores of this tile: q times the transpose of k
        # HINT: tl.trans(k) is k's transpose, (HEAD_DIM, BLOCK_N); tl.dot multiplies (BLOCK_M, HEAD_DIM) by it.
        # HINT: pass input_precision="ieee" and out_dtype=COMPUTE_DTYPE, as every tl.dot here does.
        s = tl.dot(q, tl.trans(k), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        # STUB: s = ...
        # END TODO
        if MASKED:
            # TODO: give the keys this tile's rows must not see the score -inf
            # HINT: columns at or past seq_k are padding; with CAUSAL, row i sees only columns cols <= i.
            # HINT: offs_m[:, None] and cols[None, :] broadcast to the (BLOCK_M, BLOCK_N) tile.
            visible = cols[None, :] < seq_k
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            s = tl.where(visible, s, float("-inf"))
            # STUB: s = ...
            # END TODO
        # TODO: the online softmax: the new running maximum, this tile's probabilities, the correction
        # HINT: m_new = max(m_i, the largest qk_scale * s of each row): tl.max(s, axis=1) * qk_scale works
        # HINT: because qk_scale > 0. p = exp2(qk_scale * s - m_new[:, None]) lies in [0, 1], and
        # HINT: alpha = exp2(m_i - m_new) rescales what was summed relative to the old maximum (exp2(-inf) = 0).
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        # STUB: m_new = ...
        # STUB: p = ...
        # STUB: alpha = ...
        # END TODO
        # TODO: rescale the running sum and the accumulator, then add this tile's share
        # HINT: both were relative to the old maximum: multiply them by alpha (acc row by row: alpha[:, None]).
        # HINT: then l_i adds the row sums of p, and acc adds p @ v: tl.dot(p.to(v.dtype), v, acc, ...), whose
        # HINT: tensor cores take 16-bit operands (p rounded to v's dtype) and add into the float32 acc.
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        # STUB: l_i = ...
        # STUB: acc = ...
        # END TODO
        m_i = m_new
    return acc, l_i, m_i


def forward_configs() -> list:
    """The search space on an H100-class GPU: query tiles of 128 (64 for few rows), key tiles of 32
    to 128, 3 or 4 tiles of K and V in flight, 4 warps (8 for the largest tiles)."""
    shapes = [(128, 64, 3, 4), (128, 64, 4, 4), (128, 32, 4, 4), (128, 128, 3, 8), (128, 64, 3, 8),
              (64, 64, 4, 4), (64, 32, 3, 4)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps)
            for bm, bn, stages, warps in shapes]


# Under the interpreter: small tiles, so that the tiny test cases still span several tiles, and
# BLOCK_M != BLOCK_N, so that the diagonal of a causal query tile crosses two key tiles.
INTERPRETER_FORWARD = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_stages=1, num_warps=4)
# Below this many query x key pairs per head, a launch takes one modest config: tuning (compiling
# and timing every config, for every new shape) would cost more than it saves.
TUNED_WORK = 1024 * 1024


def _prune(interpreter_config, small_config, exact_config):
    """An ``early_config_prune`` for the autotuner: the interpreter's config on a CPU, one modest
    config where tuning would not pay (short sequences) or could not use the tensor cores (float32
    and float64 products run on the exact, slower units), else the whole space."""
    def prune(configs, named_args, **kwargs):
        q = named_args["q_ptr"]
        if not q.is_cuda:
            return [interpreter_config]
        if q.dtype in (torch.float32, torch.float64):
            return [exact_config]
        if named_args["seq_q"] * named_args["seq_k"] < TUNED_WORK:
            return [small_config]
        return configs

    return prune


@triton.autotune(configs=forward_configs(), key=["seq_q", "seq_k", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _prune(
                     INTERPRETER_FORWARD, triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_stages=3, num_warps=4),
                     triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_stages=2, num_warps=4))})
@triton.jit
def flash_forward_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    n_heads, group_size, seq_q, seq_k, qk_scale,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per (query tile, batch x head): o and lse of BLOCK_M query rows."""
    # With a causal mask the last query tiles have the most keys to see: start them first, so that
    # the GPU does not end on a few long programs while its other multiprocessors wait.
    if CAUSAL:
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
    # The query tile stays in registers for the whole loop.
    q = tl.load(q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=row_mask[:, None], other=0.0)
    # TODO: start the running statistics: the maximum, the sum, the output accumulator
    # HINT: before any key the maximum is -inf and the sum and the accumulator are 0; one value of m_i
    # HINT: and l_i per query row, acc is (BLOCK_M, HEAD_DIM). All in COMPUTE_DTYPE (tl.full, tl.zeros).
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=COMPUTE_DTYPE)
    l_i = tl.zeros((BLOCK_M,), dtype=COMPUTE_DTYPE)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=COMPUTE_DTYPE)
    # STUB: m_i = ...
    # STUB: l_i = ...
    # STUB: acc = ...
    # END TODO

    # Which key tiles to visit. Keys below full_end are visible to every row of the tile (no mask);
    # the tiles from full_end to hi need the mask (the last, partial key tile; the diagonal).
    if CAUSAL:
        # TODO: stop at the last key tile that a row of this query tile can see
        # HINT: the last row of the tile is (start_m + 1) * BLOCK_M - 1 and sees keys up to its own index;
        # HINT: the tiles past that are entirely masked: skip them, do not mask them. Never past seq_k.
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq_k)
        # STUB: hi = seq_k  # every key tile: right, but the tiles above the diagonal are computed for nothing
        # END TODO
        # keys below the tile's first row are seen by all its rows
        full_end = tl.minimum(start_m * BLOCK_M, seq_k) // BLOCK_N * BLOCK_N
    else:
        hi = seq_k
        full_end = seq_k // BLOCK_N * BLOCK_N
    acc, l_i, m_i = attend_to_key_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                                        offs_m, offs_d, 0, full_end, seq_k, qk_scale,
                                        BLOCK_M, BLOCK_N, False, CAUSAL, COMPUTE_DTYPE)
    acc, l_i, m_i = attend_to_key_tiles(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                                        offs_m, offs_d, full_end, hi, seq_k, qk_scale,
                                        BLOCK_M, BLOCK_N, True, CAUSAL, COMPUTE_DTYPE)

    # TODO: normalize the output, and the log-sum-exp of each row in natural log for the backward
    # HINT: acc holds sum_j exp(...) v_j and l_i the sum of the same exponentials: o = acc / l_i[:, None].
    # HINT: m_i and log2(l_i) are base 2: lse = log(sum_j exp(sm_scale * s_j)) = (m_i + log2(l_i)) * ln 2.
    o = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    # STUB: o = ...
    # STUB: lse = ...
    # END TODO
    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, o.to(o_ptr.dtype.element_ty),
             mask=row_mask[:, None])
    tl.store(lse_ptr + bh.to(tl.int64) * seq_q + offs_m, lse.to(lse_ptr.dtype.element_ty), mask=row_mask)


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                      sm_scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The FlashAttention forward kernel, without autograd: returns (o, lse).

    o is shaped and typed like q; lse (B, Hq, Sq) is the log-sum-exp of each query row of
    sm_scale * q k^T in natural log (FlashAttention's softmax_lse), float32 (float64 for float64
    inputs): softmax(sm_scale * s)_j = exp(sm_scale * s_j - lse)."""
    sm_scale = _check_inputs(q, k, v, causal, sm_scale, "attention")
    # the statistics in q's own dtype: half the bytes of float32 for 16-bit inputs
    return _forward(q, k, v, causal, sm_scale, lse_dtype=q.dtype)


def _forward(q, k, v, causal: bool, sm_scale: float, lse_dtype=None):
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    o = torch.empty((batch, q_heads, seq_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, q_heads, seq_q), dtype=lse_dtype or statistics_dtype(q), device=q.device)
    if o.numel() == 0:
        return o, lse
    q, k, v = interpreter_safe(q, k, v)

    def grid(meta):
        return (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * q_heads)

    flash_forward_kernel[grid](
        q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        q_heads, q_heads // kv_heads, seq_q, seq_k, sm_scale * LOG2E,
        HEAD_DIM=head_dim, CAUSAL=causal, COMPUTE_DTYPE=compute_dtype(q),
    )
    return o, lse


# ------------------------------------------------------------------------------------------------
# 3. The backward pass
# ------------------------------------------------------------------------------------------------
#
# With P = softmax(sm_scale * S), S = Q K^T and O = P V, for an upstream gradient dO:
#     dV = P^T dO                    dP = dO V^T
#     dS = P * (dP - D),  D = rowsum(dO * O) (one number per query row: sum_j P_ij dP_ij)
#     dQ = sm_scale * dS K           dK = sm_scale * dS^T Q
# P is never stored: each tile recomputes it from the scores and the saved log-sum-exp,
# P = exp(sm_scale * S - lse), exactly the probabilities the forward used.

@triton.jit
def backward_preprocess_kernel(o_ptr, do_ptr, delta_ptr,
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
    # TODO: delta, one number per query row: the sum over the head dimension of dO * O
    # HINT: it equals sum_j P_ij dP_ij, the term dS = P * (dP - delta) subtracts; tl.sum(..., axis=1).
    delta = tl.sum(o * do, axis=1)
    # STUB: delta = ...
    # END TODO
    tl.store(delta_ptr + bh.to(tl.int64) * seq_q + offs_m, delta, mask=row_mask)


@triton.jit
def dkdv_from_query_tiles(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, stride_qm, stride_qd, stride_dom, stride_dod,
                          offs_n, offs_d, lo, hi, seq_q, qk_scale,
                          BLOCK_M: tl.constexpr, MASKED: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    """Add to dk and dv (this program's BLOCK_N keys) the share of the query tiles that start at lo,
    lo + BLOCK_M, ... below hi. The tile is computed transposed, keys along the rows:
    pT = P^T of the tile, (BLOCK_N, BLOCK_M), so that dV += pT dO and dK += dsT Q need no transpose
    of a computed block. MASKED tiles straddle the causal diagonal."""
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
        # TODO: recompute this tile's probabilities, transposed: pT[j, i] = P[i, j]
        # HINT: the transposed scores are k @ q^T (tl.dot of k and tl.trans(q)); then
        # HINT: tl.math.exp2(qk_scale * scores - lse[None, :]): the forward's own probabilities, in base 2.
        sT = tl.dot(k, tl.trans(q), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        pT = tl.math.exp2(sT * qk_scale - lse[None, :])
        # STUB: pT = ...
        # END TODO
        if MASKED:
            # TODO: zero the probabilities above the causal diagonal
            # HINT: key j (a row of pT, offs_n) is seen by query i (a column, offs_m) only when i >= j.
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
            # STUB: pT = ...
            # END TODO
        # TODO: accumulate dV, then compute dS^T and accumulate dK
        # HINT: dV += P^T dO. dP^T = V dO^T (dot of v and tl.trans(do)); dS^T = pT * (dP^T - delta[None, :]).
        # HINT: dK += dS^T Q (the sm_scale factor is applied once, after the loop). Round pT and dsT to the
        # HINT: dtype of the block they multiply, as the forward rounds p.
        dv = tl.dot(pT.to(do.dtype), do, dv, input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        dpT = tl.dot(v, tl.trans(do), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        dsT = pT * (dpT - delta[None, :])
        dk = tl.dot(dsT.to(q.dtype), q, dk, input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        # STUB: dv = ...
        # STUB: dk = ...
        # END TODO
    return dk, dv


@triton.jit
def dq_from_key_tiles(dq, q, do, lse, delta, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                      offs_m, offs_d, lo, hi, seq_k, qk_scale,
                      BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                      COMPUTE_DTYPE: tl.constexpr):
    """Add to dq (this program's BLOCK_M queries) the share of the key tiles from lo to hi."""
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
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        if MASKED:
            visible = (cols < seq_k)[None, :]
            if CAUSAL:
                visible = visible & (offs_m[:, None] >= cols[None, :])
            p = tl.where(visible, p, 0.0)
        # TODO: dP = dO V^T, then dS = P * (dP - delta), then dQ += dS K
        # HINT: the same algebra as dK, with queries along the rows: delta[:, None] this time.
        dp = tl.dot(do, tl.trans(v), input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision="ieee", out_dtype=COMPUTE_DTYPE)
        # STUB: dq = ...
        # END TODO
    return dq


def dkdv_configs() -> list:
    """(BLOCK_M queries, BLOCK_N keys): a program keeps dK and dV, two (BLOCK_N, HEAD_DIM) float32
    blocks, in registers for its whole life, so 8 warps for the 128-key tiles."""
    shapes = [(32, 128, 3, 8), (64, 128, 3, 8), (32, 128, 4, 4), (32, 64, 4, 4), (64, 64, 3, 4)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps)
            for bm, bn, stages, warps in shapes]


def dq_configs() -> list:
    shapes = [(128, 32, 4, 4), (128, 64, 3, 8), (128, 32, 3, 8), (64, 32, 4, 4), (64, 64, 3, 4)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps)
            for bm, bn, stages, warps in shapes]


# Under the interpreter the key and query tiles differ in size both ways, as in the forward.
INTERPRETER_DKDV = triton.Config({"BLOCK_M": 16, "BLOCK_N": 32}, num_stages=1, num_warps=4)
INTERPRETER_DQ = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_stages=1, num_warps=4)
BACKWARD_KEY = ["seq_q", "seq_k", "HEAD_DIM", "CAUSAL"]


@triton.autotune(configs=dkdv_configs(), key=BACKWARD_KEY,
                 prune_configs_by={"early_config_prune": _prune(
                     INTERPRETER_DKDV, triton.Config({"BLOCK_M": 32, "BLOCK_N": 64}, num_stages=3, num_warps=4),
                     triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_stages=2, num_warps=4))})
@triton.jit
def flash_backward_dkdv_kernel(
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
    every query of every query head that reads this key/value head. dk and dv are contiguous
    and share the strides stride_g*."""
    start_n = tl.program_id(axis=0) * BLOCK_N
    bh_kv = tl.program_id(axis=1)
    batch = (bh_kv // n_kv_heads).to(tl.int64)
    kv_head = (bh_kv % n_kv_heads).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    key_mask = offs_n < seq_k
    # K and V of this tile stay in registers while the query tiles stream past.
    k = tl.load(k_ptr + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn
                + offs_d[None, :] * stride_kd, mask=key_mask[:, None], other=0.0)
    v = tl.load(v_ptr + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn
                + offs_d[None, :] * stride_vd, mask=key_mask[:, None], other=0.0)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), dtype=COMPUTE_DTYPE)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), dtype=COMPUTE_DTYPE)
    # The query tiles that see these keys: all of them, or with CAUSAL those from the tile of query
    # start_n on (query i sees key j when i >= j). Those that reach past the tile's last key see
    # it whole; the ones before straddle the diagonal and take the mask.
    if CAUSAL:
        # TODO: the first query tile that sees a key of this tile, and the end of the diagonal band
        # HINT: query start_n is the first to see key start_n: lo is the start of its tile (a multiple of BLOCK_M).
        # HINT: the band ends at the first multiple of BLOCK_M at or past start_n + BLOCK_N (tl.cdiv), at most seq_q.
        lo = start_n // BLOCK_M * BLOCK_M
        band_end = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, seq_q)
        # STUB: lo = 0  # every query tile: right, but the tiles above the diagonal are computed for nothing
        # STUB: band_end = seq_q
        # END TODO
        rest_start = tl.maximum(lo, band_end)  # past the band (lo, when no query reaches this tile)
    else:
        lo = 0
        band_end = 0
        rest_start = 0
    for g in range(group_size):  # the query heads that share this key/value head
        head = kv_head * group_size + g
        bh = batch * n_heads + head
        q_head = q_ptr + batch * stride_qb + head * stride_qh
        do_head = do_ptr + batch * stride_dob + head * stride_doh
        dk, dv = dkdv_from_query_tiles(dk, dv, k, v, q_head, do_head, lse_ptr + bh * seq_q, delta_ptr + bh * seq_q,
                                       stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d,
                                       lo, band_end, seq_q, qk_scale, BLOCK_M, True, COMPUTE_DTYPE)
        dk, dv = dkdv_from_query_tiles(dk, dv, k, v, q_head, do_head, lse_ptr + bh * seq_q, delta_ptr + bh * seq_q,
                                       stride_qm, stride_qd, stride_dom, stride_dod, offs_n, offs_d,
                                       rest_start, seq_q, seq_q, qk_scale, BLOCK_M, False, COMPUTE_DTYPE)
    # TODO: scale dK: S = sm_scale * Q K^T, so the chain rule brings sm_scale into dK (dV has no scale)
    # HINT: multiply once here rather than every tile in the loop.
    dk = dk * sm_scale
    # STUB: dk = ...
    # END TODO
    grad_offsets = batch * stride_gb + kv_head * stride_gh + offs_n[:, None] * stride_gn + offs_d[None, :] * stride_gd
    tl.store(dk_ptr + grad_offsets, dk.to(dk_ptr.dtype.element_ty), mask=key_mask[:, None])
    tl.store(dv_ptr + grad_offsets, dv.to(dv_ptr.dtype.element_ty), mask=key_mask[:, None])


@triton.autotune(configs=dq_configs(), key=BACKWARD_KEY,
                 prune_configs_by={"early_config_prune": _prune(
                     INTERPRETER_DQ, triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_stages=3, num_warps=4),
                     triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_stages=2, num_warps=4))})
@triton.jit
def flash_backward_dq_kernel(
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
    """One program per (query tile, batch x head): dQ of BLOCK_M queries, walking over the keys
    like the forward (the same loop bounds)."""
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
    row_mask = offs_m < seq_q
    q = tl.load(q_ptr + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :] * stride_qd, mask=row_mask[:, None], other=0.0)
    do = tl.load(do_ptr + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dod, mask=row_mask[:, None], other=0.0)
    row_stats = bh.to(tl.int64) * seq_q + offs_m
    lse = tl.load(lse_ptr + row_stats, mask=row_mask, other=float("inf")) * 1.4426950408889634
    delta = tl.load(delta_ptr + row_stats, mask=row_mask, other=0.0)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), dtype=COMPUTE_DTYPE)
    k_ptr += batch * stride_kb + kv_head * stride_kh
    v_ptr += batch * stride_vb + kv_head * stride_vh
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq_k)
        full_end = tl.minimum(start_m * BLOCK_M, seq_k) // BLOCK_N * BLOCK_N
    else:
        hi = seq_k
        full_end = seq_k // BLOCK_N * BLOCK_N
    dq = dq_from_key_tiles(dq, q, do, lse, delta, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                           offs_m, offs_d, 0, full_end, seq_k, qk_scale, BLOCK_N, False, CAUSAL, COMPUTE_DTYPE)
    dq = dq_from_key_tiles(dq, q, do, lse, delta, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                           offs_m, offs_d, full_end, hi, seq_k, qk_scale, BLOCK_N, True, CAUSAL, COMPUTE_DTYPE)
    # TODO: scale dQ like dK
    # HINT: dQ = sm_scale * dS K.
    dq = dq * sm_scale
    # STUB: dq = ...
    # END TODO
    dq_ptrs = (dq_ptr + batch * stride_dqb + head * stride_dqh + offs_m[:, None] * stride_dqm
               + offs_d[None, :] * stride_dqd)
    tl.store(dq_ptrs, dq.to(dq_ptr.dtype.element_ty), mask=row_mask[:, None])


PREPROCESS_BLOCK = 64  # query rows per program of the preprocessing kernel


def _backward(q, k, v, o, lse, do, causal: bool, sm_scale: float):
    """dq, dk, dv for the upstream gradient do, from the forward's inputs, o and lse."""
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    # dk and dv are written whole by their kernel: every key tile, even one that no query sees
    # (zeros), so that they need no zero-filling first. dk and dv share one (contiguous) layout.
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if dk.numel() == 0:
        return dq, dk, dv
    group_size = q_heads // kv_heads
    precision = dict(HEAD_DIM=head_dim, CAUSAL=causal, COMPUTE_DTYPE=compute_dtype(q))
    q, k, v, o, do = interpreter_safe(q, k, v, o, do)
    qk_scale = sm_scale * LOG2E

    delta = torch.empty((batch, q_heads, seq_q), dtype=lse.dtype, device=q.device)
    if seq_q:
        backward_preprocess_kernel[(triton.cdiv(seq_q, PREPROCESS_BLOCK), batch * q_heads)](
            o, do, delta, *o.stride(), *do.stride(), q_heads, seq_q,
            HEAD_DIM=head_dim, COMPUTE_DTYPE=compute_dtype(q), BLOCK_M=PREPROCESS_BLOCK)

    def dkdv_grid(meta):
        return (triton.cdiv(seq_k, meta["BLOCK_N"]), batch * kv_heads)

    flash_backward_dkdv_kernel[dkdv_grid](
        q, k, v, do, lse, delta, dk, dv, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(),
        q_heads, kv_heads, group_size, seq_q, seq_k, qk_scale, sm_scale, **precision)
    if seq_q:
        def dq_grid(meta):
            return (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * q_heads)

        flash_backward_dq_kernel[dq_grid](
            q, k, v, do, lse, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride(),
            q_heads, group_size, seq_q, seq_k, qk_scale, sm_scale, **precision)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """attention() with its hand-written backward: the forward saves q, k, v, o and lse."""

    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        # TODO: run the forward kernel, and save what the backward needs
        # HINT: _forward(q, k, v, causal, sm_scale) returns (o, lse). Tensors go through
        # HINT: ctx.save_for_backward(...); plain Python values (causal, sm_scale) are set as attributes of ctx.
        o, lse = _forward(q, k, v, causal, sm_scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        ctx.sm_scale = sm_scale
        # STUB: o = ...
        # END TODO
        return o

    @staticmethod
    def backward(ctx, do):
        # TODO: compute the three gradients with the backward kernels
        # HINT: ctx.saved_tensors gives back what forward saved; _backward(q, k, v, o, lse, do, causal, sm_scale)
        # HINT: returns (dq, dk, dv). Return one gradient per input of forward(): None for causal and sm_scale.
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None
        # STUB: return ...
        # END TODO


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None) -> torch.Tensor:
    """FlashAttention: softmax(sm_scale * q k^T) v, differentiable with respect to q, k and v.

    q is (B, Hq, Sq, D), k and v (B, Hkv, Sk, D) with Hq a multiple of Hkv (grouped-query
    attention) and D one of 16, 32, 64, 128; sm_scale defaults to 1 / sqrt(D); causal=True lets
    query i see keys 0..i (top-left aligned, as scaled_dot_product_attention's is_causal).
    Returns o, shaped and typed like q."""
    sm_scale = _check_inputs(q, k, v, causal, sm_scale, "attention")
    return FlashAttentionFunction.apply(q, k, v, causal, sm_scale)


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
