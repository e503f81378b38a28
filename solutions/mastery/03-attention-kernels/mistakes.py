"""Typical mistakes in FlashAttention, planted into the reference by the course's suite."""

from grader.authoring.mistakes import Mistake

_KEY_LOOP = (
    "    offs_n = tl.arange(0, BLOCK_N)\n    for start_n in range(lo, hi, BLOCK_N):\n"
    "        start_n = tl.multiple_of(start_n, BLOCK_N)\n        cols = start_n + offs_n\n"
    "        k_ptrs = k_ptr + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd\n"
    "        v_ptrs = v_ptr + cols[:, None] * "
)

MISTAKES = [
    # Both show on the rows where a later key tile raised the running maximum: the diagnosis must
    # say that the rows' values decide (not their position) and name the carried value.
    Mistake("accumulator not rescaled when the running maximum grows",
            "        acc = acc * alpha[:, None]\n", "",
            cause=r"value carried from one block of the row to the next"),
    Mistake("running sum not rescaled when the running maximum grows",
            "l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)",
            cause=r"factor of its own.*running sum carried from one block of the row to the next is not rescaled"),
    Mistake("causal mask that leaves out the diagonal",
            "visible = visible & (cols[None, :] <= offs_m[:, None])",
            "visible = visible & (cols[None, :] < offs_m[:, None])",
            cause=r"diagonal"),
    Mistake("padding keys let in: the key bound off by one",
            "visible = cols[None, :] < seq_k", "visible = cols[None, :] <= seq_k",
            cause=r"padding columns",
            interpreter_only="the extra key is read past the end of K and V: on a GPU whatever memory lies "
                             "there decides the symptom, so only the interpreter shows it the same way each run"),
    Mistake("log-sum-exp saved in base 2",
            "lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.math.log2(l_i)",
            cause=r"natural log"),
    Mistake("dS = P * dP, without subtracting D = rowsum(dO * O)",
            "ds = p * (dp - delta[:, None])", "ds = p * dp",
            cause=r"rowsum"),
    Mistake("dK without the softmax scale",
            "    dk = dk * sm_scale\n", "",
            cause=r"sm_scale"),
    Mistake("running maximum starts at 0 instead of -inf",
            'm_i = tl.full((BLOCK_M,), float("-inf"), dtype=COMPUTE_DTYPE)',
            "m_i = tl.zeros((BLOCK_M,), dtype=COMPUTE_DTYPE)",
            cause=r"must start at -inf"),
    Mistake("naive softmax exponentiates the scores without subtracting the row maximum",
            "e = tl.exp(s - s_max)", "e = tl.exp(s)",
            cause=r"subtract each row's maximum"),
    Mistake("dQ without the softmax scale",
            "    dq = dq * sm_scale\n", "",
            cause=r"dQ = sm_scale"),
    # The diagnosis localizes it to the dK/dV kernel's recomputed probabilities (o and dQ right).
    Mistake("the dK/dV kernel's causal mask leaves out the diagonal",
            "pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)",
            "pT = tl.where(offs_m[None, :] > offs_n[:, None], pT, 0.0)",
            cause=r"only grad_k and grad_v depend on.*P recomputed"),
    # The forward's key loop (its docstring's last words make the text unique; dQ's loop is alike).
    Mistake("v read with k's strides",
            "m' = m * log2(e).\"\"\"\n" + _KEY_LOOP + "stride_vn + offs_d[None, :] * stride_vd",
            "m' = m * log2(e).\"\"\"\n" + _KEY_LOOP + "stride_kn + offs_d[None, :] * stride_kd",
            cause=r"its own strides"),
    # The module's suspect recomputes attention with K^T read that way and finds the output equal
    # to it, in every case (the causal ones also show row 0 of every head right).
    Mistake("naive pass 1 reads K^T with k's strides in their own order",
            "(k.stride(0), k.stride(1), k.stride(3), k.stride(2))", "k.stride()",
            cause=r"o matches what pass 1 with k's strides in their own order.*row stride is k\.stride\(3\)"),
    # The module's suspects recompute attention with the scale the kernel used (ln 2, or 1).
    Mistake("online softmax exponentiates the raw scores, without qk_scale",
            "        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)\n"
            "        p = tl.math.exp2(s * qk_scale - m_new[:, None])",
            "        m_new = tl.maximum(m_i, tl.max(s, axis=1))\n"
            "        p = tl.math.exp2(s - m_new[:, None])",
            cause=r"o and lse match what the scores exponentiated without qk_scale"),
    Mistake("naive pass 2 leaves sm_scale out",
            's = tl.where(visible, sm_scale * s, float("-inf"))', 's = tl.where(visible, s, float("-inf"))',
            cause=r"o matches what the softmax without sm_scale"),
    # o of the heads that read the wrong key/value head is wrong, and so is their lse: both
    # diagnoses name the head mapping (the lse's rows are heads), neither a row offset.
    Mistake("grouped-query head mapping h % group instead of h // group (forward)",
            "    kv_head = head // group_size\n    q_ptr += batch * stride_qb",
            "    kv_head = head % group_size\n    q_ptr += batch * stride_qb",
            cause=r"^(?!.*row offset).*matrices of the last two dimensions.*h // group size.*"
                  r"lse: .*rows along the last dimension.*h // group size"),
]
