"""Fused operations: three layers of a transformer block, each done in one trip through memory
where PyTorch takes two or three.

PyTorch runs `F.gelu(F.layer_norm(x, ...))` as two kernels: the first writes the normalised x to
memory, the second reads it back. Both are memory-bound, so the pair costs twice the bytes of
one kernel that does both while the row is in registers. The same holds around a matmul: the
bias and the activation can be applied to the accumulator before its one store (an *epilogue*),
and a layer norm in front of a matmul can be applied to each tile of x as it is loaded (a
*prologue*), so that the normalised x never exists in memory.

- ``layer_norm_act(x, weight, bias, activation, eps)``: act(LayerNorm(x)), one program per row:
  one read of x, one write of y.
- ``linear_bias_act(x, weight, bias, activation)``: act(x @ weight^T + bias) for a weight in
  ``nn.Linear``'s (out_features, in_features) layout: a tiled ``tl.dot`` matmul whose epilogue adds
  the bias and applies the activation in registers.
- ``layer_norm_linear(x, ln_weight, ln_bias, weight, bias, eps)``: LayerNorm(x) @ weight^T + bias:
  a small kernel computes each row's mean and rstd (8 bytes per row), then the matmul normalises
  each tile of x on its way into ``tl.dot``.

The two matmuls share one kernel with plain pointers (every GPU, and the CPU interpreter) and,
on Hopper GPUs, a persistent TMA-fed one; the prologue and the epilogue are helpers that both
call, so each is written once.

Activations: "gelu" is the exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), which is
``torch.nn.functional.gelu``'s default (``approximate="none"``); "gelu_tanh" is its tanh
approximation (``approximate="tanh"``, GPT-2's); "silu" is x * sigmoid(x) (``F.silu``).

Check your work:  make check M=mastery/02-fused-operations
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from grader.validation import check_tensors

ACTIVATIONS = ("gelu", "gelu_tanh", "silu")
# A row kernel keeps a whole row in registers, as float32: up to 65536 values (the longest rows
# spill to local memory, still correct). layer_norm_linear's statistics kernel shares the limit.
MAX_ROW = 65536
GROUP_M = 8  # rows of output tiles per group in the matmul's program order


@triton.jit
def sigmoid(x):
    """1 / (1 + exp(-x)) on a float32 block, without overflow. exp only ever sees -|x| <= 0, so
    e lies in (0, 1]; for x < 0 the same value is written e / (1 + e) = exp(x) / (1 + exp(x))."""
    e = tl.exp(-tl.abs(x))
    return tl.where(x >= 0, 1.0, e) / (1.0 + e)


@triton.jit
def gaussian_cdf(x):
    """Phi(x) = 0.5 (1 + erf(x / sqrt(2))) on a float32 block, within about 2e-7 of the exact value.

    tl.erf is libdevice's erff: exact to a rounding, but it takes one of two code paths depending
    on |x|, and a warp whose lanes take both runs both. Abramowitz and Stegun's formula 7.1.26 has
    no branch: 1 - erf(z) = q(t) exp(-z^2) for z >= 0, with t = 1 / (1 + p z) and q a polynomial
    of degree 5, to within 1.5e-7. Phi of a negative x is written 0.5 q directly rather than
    1 - (1 - 0.5 q), so that small tails keep their digits.

    In a row kernel the GPU has time for about 40 instructions an element while memory moves it,
    so two more choices count: t is rsqrt(d)^2, not 1 / d (a division compiles to a reciprocal plus
    checks for huge and tiny d, which cannot occur with d >= 1; rsqrt is one instruction), and
    exp(-z^2) is exp2(-z2^2) with sqrt(log2 e) folded into z2's constant (tl.exp adds the same kind
    of checks). Measured on an H100, layer_norm_act at 32768 x 4096: 0.77 x copy with tl.erf (fp16),
    0.87 x (bf16) and 0.89 x (fp16) with the formula written with / and tl.exp, 0.96 x as here."""
    z = tl.abs(x) * 0.7071067811865476
    r = tl.math.rsqrt(1.0 + 0.3275911 * z)
    t = r * r
    q = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    z2 = tl.abs(x) * 0.8493218002880191  # z * sqrt(log2(e)): exp(-z^2) = exp2(-z2^2)
    half_tail = 0.5 * q * tl.exp2(-z2 * z2)
    return tl.where(x >= 0, 1.0 - half_tail, half_tail)


@triton.jit
def activate(x, ACTIVATION: tl.constexpr):
    """The activation named by ACTIVATION on a float32 block; any other name leaves x as it is
    (layer_norm_linear passes "none"). ACTIVATION is a compile-time string, so each activation
    compiles to its own kernel with no branch left in it."""
    # TODO 1: apply the activation: "gelu" (exact), "gelu_tanh" (tanh approximation) or "silu"
    #   Hint: gelu(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), and gaussian_cdf above computes Phi.
    #   Hint: gelu_tanh(x) = 0.5 x (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3); since
    #   Hint: 0.5 (1 + tanh(u)) = sigmoid(2u), the sigmoid helper above computes it without overflow.
    #   Hint: silu(x) = x sigmoid(x). ACTIVATION is a tl.constexpr: a plain if/elif on it is decided
    #   Hint: when the kernel compiles.
    return x


@triton.jit
def normalize_row(x, x0, mask, N, eps):
    """(x_hat, mean, rstd) of one row: x is the row as a float32 block whose masked lanes hold 0,
    x0 its first element, N its length. x_hat = (x - mean) * rstd, with 0 in the masked lanes."""
    # Two passes over the row, both in registers (track 1, module 04): the mean of the row shifted
    # by x0, then the variance of the centred values. The shift makes a constant row come out
    # exactly constant (x - x0 = 0) at any magnitude, and centring before squaring avoids the
    # cancellation of E[x^2] - mean^2 when the mean is large next to the spread.
    # TODO 2: compute the row's mean and rstd = 1 / sqrt(var + eps), and the centred row x - mean
    #   Hint: shift by x0, take the mean, centre, then the mean of the squares: divide by N, not the block size.
    #   Hint: every subtraction turns the masked lanes' 0 into something else: put them back with
    #   Hint: tl.where(mask, ..., 0.0) before the next sum.
    shifted_mean = ...
    centred = ...
    rstd = ...
    return centred * rstd, x0 + shifted_mean, rstd


@triton.jit
def layer_norm_act_kernel(x_ptr, y_ptr, weight_ptr, bias_ptr, x_row_stride, y_row_stride, N, eps,
                          ACTIVATION: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per row: one read of the row, the layer norm and the activation in registers,
    one write. Nothing between the two steps goes to memory."""
    row = tl.program_id(axis=0).to(tl.int64)  # 64-bit: row * stride passes 2^31 on large inputs
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x_row_ptr = x_ptr + row * x_row_stride
    # TODO 3: load the row, as float32 with 0 in the masked lanes, and its first element x0
    #   Hint: x0 is a scalar load at the row's start (N >= 1, so it needs no mask); it shares the row's
    #   Hint: cache line, so it costs no extra memory traffic.
    x = ...
    x0 = ...
    x_hat, _, _ = normalize_row(x, x0, mask, N, eps)
    # TODO 4: scale and shift by weight and bias (one value per column), then apply the activation
    #   Hint: weight and bias are shared by every row: the row's column offsets and mask, no row offset.
    #   Hint: the activation comes last: act(x_hat * weight + bias), as PyTorch's gelu of its layer_norm computes.
    y = ...
    # TODO 5: store the row of y, in y's dtype: the only write of this kernel
    #   Hint: y_ptr.dtype.element_ty is y's element type; rows of y are y_row_stride apart.


@triton.jit
def row_stats_kernel(x_ptr, mean_ptr, rstd_ptr, x_row_stride, K, eps, BLOCK_K: tl.constexpr):
    """layer_norm_linear's pre-pass, one program per row: the row's mean and rstd, in float32."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    mask = cols < K
    x_row_ptr = x_ptr + row * x_row_stride
    x = tl.load(x_row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    _, mean, rstd = normalize_row(x, tl.load(x_row_ptr).to(tl.float32), mask, K, eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def tile_position(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row, column), in tiles, of the output tile that program ``pid`` computes. Consecutive
    programs walk down a group of GROUP_M rows of tiles before moving one column right, so the
    programs that run at the same time share their tiles of x and of W in the L2 cache."""
    tiles_per_group = GROUP_M * tiles_n
    first_row = (pid // tiles_per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_row, GROUP_M)
    in_group = pid % tiles_per_group
    return first_row + in_group % rows_in_group, in_group // rows_in_group


@triton.jit
def tile_statistics(mean_ptr, rstd_ptr, offs_m, M):
    """(mean, rstd) of a tile's BLOCK_M rows, from the pre-pass's float32 vectors."""
    # TODO 6: load the mean and the rstd of the tile's rows
    #   Hint: one value per row of the tile: offs_m indexes them, and offs_m < M keeps to the real rows
    #   Hint: (other=0.0 for the others: their results are never stored).
    mean = ...
    rstd = ...
    return mean, rstd


@triton.jit
def normalize_tile(a, mean, rstd, ln_weight_ptr, ln_bias_ptr, offs_k, K):
    """The prologue: a (BLOCK_M, BLOCK_K) tile of x becomes the same tile of LayerNorm(x), in
    float32. It exists only here, in registers; the caller converts it to the weight's dtype for
    tl.dot. ln_weight and ln_bias loaded with other=0 make the lanes past K exactly 0."""
    # x - mean first, then the scale: x * rstd - mean * rstd would save an instruction but round
    # x * rstd, a large number when the mean is large, wherever the compiler does not fuse the
    # multiply-add (the interpreter never does); x - mean is exact for x close to the mean.
    # TODO 7: normalise the tile: (x - mean) * rstd per row, then scale by ln_weight and shift by ln_bias per column
    #   Hint: mean and rstd hold one value per row of the tile: use them as a column, [:, None].
    #   Hint: ln_weight and ln_bias hold one value per column k, loaded at offs_k (masked: offs_k < K),
    #   Hint: in float32, and used as a row, [None, :]. Compute in float32 (a.to(tl.float32)).
    a = ...
    return a


@triton.jit
def epilogue(acc, bias_ptr, offs_n, N, ACTIVATION: tl.constexpr):
    """What a finished tile's float32 accumulator becomes before its one store."""
    # TODO 8: the fused epilogue: add the bias (one value per column) to the accumulator, then apply the activation
    #   Hint: load the tile's BLOCK_N bias values (masked, float32) and add them as a row, bias[None, :],
    #   Hint: so that they broadcast down the tile; then activate(..., ACTIVATION). Without this TODO the
    #   Hint: kernel stores the bare product, and PyTorch would need a second kernel to read it back.
    return acc


@triton.jit
def fused_linear_kernel(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    mean_ptr, rstd_ptr, ln_weight_ptr, ln_bias_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_wn, stride_wk,
    stride_ym, stride_yn,
    NORMALIZE: tl.constexpr, ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """y = epilogue(prologue(x) @ w^T), one program per BLOCK_M x BLOCK_N tile of y, with plain
    pointers: every GPU, and the CPU interpreter.

    With NORMALIZE (layer_norm_linear) each tile of x is layer-normalised as it is loaded;
    otherwise (linear_bias_act) it goes to tl.dot as it is. Either way the bias and the
    activation are applied to the float32 accumulator before the tile's one store."""
    pid_m, pid_n = tile_position(tl.program_id(axis=0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    # 64-bit rows and columns: offs_m * stride_xm (or offs_n * stride_wn) passes 2**31 once x (or
    # the weight) has that many elements.
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    # tl.dot multiplies a (BLOCK_M, BLOCK_K) tile by a (BLOCK_K, BLOCK_N) one, so the second operand
    # is a tile of w^T. An nn.Linear weight is stored (out_features, in_features) = (N, K), and
    # element (k, n) of w^T is element (n, k) of w: the tile is read straight from w's layout by
    # its strides, with no transposed copy.
    # TODO 9: build the BLOCK_K x BLOCK_N block of pointers to the first k-step's tile of w^T
    #   Hint: k runs down the tile and n across it, but in w, n picks the row (stride_wn) and k the column (stride_wk).
    wt_ptrs = ...
    if NORMALIZE:
        mean, rstd = tile_statistics(mean_ptr, rstd_ptr, offs_m, M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        k_mask = offs_k < K - k
        a = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        if NORMALIZE:
            # tl.dot takes two operands of one dtype: the normalised tile goes back to w's.
            a = normalize_tile(a, mean, rstd, ln_weight_ptr, ln_bias_ptr, k + offs_k, K).to(w_ptr.dtype.element_ty)
        b = tl.load(wt_ptrs, mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        wt_ptrs += BLOCK_K * stride_wk
    acc = epilogue(acc, bias_ptr, offs_n, N, ACTIVATION)
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def fused_linear_hopper_kernel(
    x_desc, w_desc, y_desc, bias_ptr,
    mean_ptr, rstd_ptr, ln_weight_ptr, ln_bias_ptr,
    M, N, K,
    NORMALIZE: tl.constexpr, ACTIVATION: tl.constexpr, NUM_SMS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """The same tiles, prologue and epilogue on Hopper GPUs: persistent (one program per
    multiprocessor, looping over tiles), fed by TMA through tensor descriptors (which fill loads
    past the edges with zeros and clip stores, so no masks), with Triton's warp-specialized tile
    loop (some warps load the next tiles while the others compute). A descriptor reads w in its
    own (N, K) layout; tl.dot takes its transpose, a view."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(axis=0), tiles_m * tiles_n, NUM_SMS, flatten=True, warp_specialize=True):
        pid_m, pid_n = tile_position(tile, tiles_m, tiles_n, GROUP_M)
        if NORMALIZE:
            mean, rstd = tile_statistics(mean_ptr, rstd_ptr, pid_m * BLOCK_M + tl.arange(0, BLOCK_M), M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = x_desc.load([pid_m * BLOCK_M, k])
            if NORMALIZE:
                a = normalize_tile(a, mean, rstd, ln_weight_ptr, ln_bias_ptr, k + tl.arange(0, BLOCK_K),
                                   K).to(x_desc.dtype)
            acc = tl.dot(a, w_desc.load([pid_n * BLOCK_N, k]).T, acc)
        acc = epilogue(acc, bias_ptr, pid_n * BLOCK_N + tl.arange(0, BLOCK_N), N, ACTIVATION)
        y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(y_desc.dtype))


# ---- launchers ---------------------------------------------------------------------------------

def _check_activation(activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}. "
                         "'gelu' is the exact GELU (F.gelu's default), 'gelu_tanh' its tanh approximation.")


def _check_vector(name: str, vector, length: int, what: str, x) -> None:
    """A per-feature parameter: None, or a vector of ``length`` values of x's dtype."""
    if vector is None:
        return
    check_tensors(("x", x), (name, vector))
    if tuple(vector.shape) != (length,):
        raise ValueError(f"{name} must have shape ({length},), one value per {what}, got {tuple(vector.shape)}.")


def _check_rows(x, what: str) -> int:
    """The length of x's rows (its last dimension), checked to fit one block."""
    check_tensors(("x", x))
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x has shape {tuple(x.shape)}; {what} works over x's last dimension, which "
                         "must have at least one element.")
    if x.shape[-1] > MAX_ROW:
        raise ValueError(f"x has {x.shape[-1]} elements in its last dimension, but this kernel keeps a whole "
                         f"row in one block and supports at most {MAX_ROW}.")
    return x.shape[-1]


def _check_weight(x, weight) -> int:
    """The number of output features of an nn.Linear weight (out_features, in_features)."""
    check_tensors(("x", x), ("weight", weight))
    if weight.dim() != 2:
        raise ValueError(f"weight must have 2 dimensions, (out_features, in_features), got shape "
                         f"{tuple(weight.shape)}.")
    if weight.shape[1] != x.shape[-1]:
        raise ValueError(f"weight has shape {tuple(weight.shape)} but x's last dimension is {x.shape[-1]}: "
                         "weight is (out_features, in_features), nn.Linear's layout, so its second dimension "
                         "must equal x's last. (Pass weight.t() if yours is (in_features, out_features).)")
    return weight.shape[0]


def _as_rows(x, n_cols: int):
    """x as a 2-D (rows, n_cols) tensor with unit steps along a row; a copy only where needed."""
    rows = x.reshape(x.shape[:-1].numel(), n_cols)
    return rows if rows.stride(-1) == 1 or rows.shape[0] == 0 else rows.contiguous()


def _row_warps(block: int) -> int:
    """num_warps for a row kernel: about 32 values of the row per thread, 1 warp for rows of 1024
    and 4 for 4096. Measured on an H100 (GELU, fp16), that beat 16 values per thread by 5 to 20 %:
    each thread's share of the two reductions and of the activation is spread over more values."""
    return min(max(block // 1024, 1), 32)


def _or_constant(vector, length: int, value: float, x):
    """``vector``, or for None a vector of ``value``: length values cost nothing next to x, and
    keep one kernel for the cases with and without."""
    if vector is None:
        return torch.full((length,), value, dtype=x.dtype, device=x.device)
    return vector


_PROPERTIES = {}


def _properties(device: torch.device):
    """The GPU's properties, asked once per device: asking on every call adds host time to calls
    whose GPU work may take only a tenth of a millisecond."""
    if device not in _PROPERTIES:
        _PROPERTIES[device] = torch.cuda.get_device_properties(device)
    return _PROPERTIES[device]


def _shared_memory(device: torch.device) -> int:
    """How much shared memory one program may use on ``device`` (no limit for the interpreter)."""
    if device.type != "cuda":
        return 1 << 30
    return _properties(device).shared_memory_per_block_optin


def _matmul_config(M: int, N: int, K: int, dtype: torch.dtype, device: torch.device) -> dict:
    """Tile sizes and launch settings. Large problems get 128 x 256 tiles, 8 warps and 3 k-steps
    in flight, the shape that keeps a Hopper GPU's tensor cores busy (a k-step is 128 bytes of a
    row); small problems get smaller tiles (never below 16, the smallest tl.dot takes), which also
    keeps the interpreter quick. GPUs with less shared memory get narrower tiles."""
    def fit(size: int, largest: int) -> int:
        return min(largest, max(16, triton.next_power_of_2(size)))

    block_m, block_n, block_k = fit(M, 128), fit(N, 256), fit(K, 128 // dtype.itemsize)
    num_stages = 3
    if num_stages * (block_m + block_n) * block_k * dtype.itemsize > _shared_memory(device):
        block_n, num_stages = min(block_n, 128), 2
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M,
                num_stages=num_stages, num_warps=8 if block_m * block_n >= 128 * 256 else 4)


def _multiprocessors(device: torch.device) -> int:
    return _properties(device).multi_processor_count


def _takes_hopper_path(x_rows, weight, y, config: dict) -> bool:
    """Whether the TMA kernel runs: on a Hopper GPU, for 16-bit operands and the full 128 x 256 x 64
    tile with 8 warps (where it was measured), with x, weight and y row-major and every row on a
    16-byte boundary, as a tensor descriptor needs. Everything else takes the pointer kernel."""
    if x_rows.device.type != "cuda" or x_rows.element_size() != 2:
        return False
    if _properties(x_rows.device).major != 9:
        return False
    if (config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_warps"]) != (128, 256, 64, 8):
        return False
    return all(t.stride(1) == 1 and t.stride(0) * t.element_size() % 16 == 0 and t.data_ptr() % 16 == 0
               for t in (x_rows, weight, y))


def _launch_linear(x_rows, weight, bias, y, activation: str, stats=None, ln_weight=None, ln_bias=None) -> None:
    """y = act(x_rows @ weight^T + bias), normalising x_rows's tiles on the way in when ``stats``
    (mean, rstd) is given."""
    M, K = x_rows.shape
    N = weight.shape[0]
    config = _matmul_config(M, N, K, x_rows.dtype, x_rows.device)
    tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])
    normalize = stats is not None
    # The kernels read bias, ln_weight and ln_bias one element apart (bias_ptr + offs_n): a strided
    # view, such as every other element of a longer tensor, is copied first (a no-op otherwise).
    bias = bias.contiguous()
    if normalize:
        ln_weight, ln_bias = ln_weight.contiguous(), ln_bias.contiguous()
    # Without a prologue these pointers are never read: pass the bias in their place.
    mean, rstd = stats if normalize else (bias, bias)
    ln_weight, ln_bias = (ln_weight, ln_bias) if normalize else (bias, bias)
    if _takes_hopper_path(x_rows, weight, y, config):
        bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
        num_sms = _multiprocessors(x_rows.device)
        fused_linear_hopper_kernel[(min(num_sms, tiles),)](
            TensorDescriptor.from_tensor(x_rows, [bm, bk]), TensorDescriptor.from_tensor(weight, [bn, bk]),
            TensorDescriptor.from_tensor(y, [bm, bn]), bias, mean, rstd, ln_weight, ln_bias, M, N, K,
            NORMALIZE=normalize, ACTIVATION=activation, NUM_SMS=num_sms, **config,
        )
        return
    fused_linear_kernel[(tiles,)](
        x_rows, weight, bias, y, mean, rstd, ln_weight, ln_bias,
        M, N, K,
        x_rows.stride(0), x_rows.stride(1),
        weight.stride(0), weight.stride(1),
        y.stride(0), y.stride(1),
        NORMALIZE=normalize, ACTIVATION=activation, **config,
    )


def layer_norm_act(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                   activation: str = "gelu", eps: float = 1e-5) -> torch.Tensor:
    """act(LayerNorm(x)) over x's last dimension, in x's shape and dtype: one read of x, one write.

    weight and bias have shape (N,) and x's dtype; None means no scale and no shift, as in
    torch.nn.functional.layer_norm. activation is "gelu" (exact, F.gelu's default), "gelu_tanh"
    or "silu".
    """
    _check_activation(activation)
    n_cols = _check_rows(x, "layer_norm_act")
    _check_vector("weight", weight, n_cols, "element of x's last dimension", x)
    _check_vector("bias", bias, n_cols, "element of x's last dimension", x)
    # Leading dimensions become rows; rows may be any distance apart (the kernel takes the stride).
    x_rows = _as_rows(x, n_cols)
    n_rows = x_rows.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0:
        return y.view(x.shape)
    weight = _or_constant(weight, n_cols, 1.0, x).contiguous()
    bias = _or_constant(bias, n_cols, 0.0, x).contiguous()
    block_n = triton.next_power_of_2(n_cols)
    layer_norm_act_kernel[(n_rows,)](
        x_rows, y, weight, bias, x_rows.stride(0), y.stride(0), n_cols, eps,
        ACTIVATION=activation, BLOCK_N=block_n, num_warps=_row_warps(block_n),
    )
    return y.view(x.shape)


def linear_bias_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    activation: str = "gelu") -> torch.Tensor:
    """act(x @ weight^T + bias), as act(torch.nn.functional.linear(x, weight, bias)), in one kernel.

    x has shape (..., in_features); weight (out_features, in_features), nn.Linear's layout; bias
    (out_features,) or None. The result has shape (..., out_features) and x's dtype; products
    accumulate in float32 (on a GPU, float32 operands go through TF32 tensor cores).
    """
    _check_activation(activation)
    check_tensors(("x", x))
    if x.dim() == 0:
        raise ValueError("x is a scalar (0 dimensions); it needs a last dimension of in_features values.")
    n_out = _check_weight(x, weight)
    _check_vector("bias", bias, n_out, "output feature (weight.shape[0])", x)
    x_rows = x.reshape(x.shape[:-1].numel(), x.shape[-1])  # any strides: the kernel follows them
    y = torch.empty((x_rows.shape[0], n_out), dtype=x.dtype, device=x.device)
    if y.numel():
        _launch_linear(x_rows, weight, _or_constant(bias, n_out, 0.0, x), y, activation)
    return y.view(*x.shape[:-1], n_out)


def layer_norm_linear(x: torch.Tensor, ln_weight: torch.Tensor | None, ln_bias: torch.Tensor | None,
                      weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm(x) @ weight^T + bias, as F.linear(F.layer_norm(x, ...), weight, bias), without
    ever writing the normalised x: a pre-pass saves each row's mean and rstd (float32), then the
    matmul normalises each tile of x as it loads it.

    x has shape (..., K); ln_weight and ln_bias (K,) or None; weight (N, K), nn.Linear's layout;
    bias (N,) or None. The result has shape (..., N) and x's dtype.
    """
    n_in = _check_rows(x, "layer_norm_linear")
    _check_vector("ln_weight", ln_weight, n_in, "element of x's last dimension", x)
    _check_vector("ln_bias", ln_bias, n_in, "element of x's last dimension", x)
    n_out = _check_weight(x, weight)
    _check_vector("bias", bias, n_out, "output feature (weight.shape[0])", x)
    x_rows = _as_rows(x, n_in)
    n_rows = x_rows.shape[0]
    y = torch.empty((n_rows, n_out), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.view(*x.shape[:-1], n_out)
    # TODO 10: compute every row's mean and rstd first: float32 vectors of one value per row, one program per row
    #   Hint: row_stats_kernel takes the rows, the two outputs, the row stride, K, eps and BLOCK_K, a power
    #   Hint: of two that holds a whole row; give it num_warps=_row_warps(BLOCK_K), as layer_norm_act does.
    mean = ...
    rstd = ...
    _launch_linear(x_rows, weight, _or_constant(bias, n_out, 0.0, x), y, "none", stats=(mean, rstd),
                   ln_weight=_or_constant(ln_weight, n_in, 1.0, x), ln_bias=_or_constant(ln_bias, n_in, 0.0, x))
    return y.view(*x.shape[:-1], n_out)


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
