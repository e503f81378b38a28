"""Swizzling and fused epilogues: y = gelu(a @ b + bias) in one kernel, with its programs ordered
so that the ones running at the same time share what they load.

Two techniques, both about memory around a compute-bound matmul:

- **A fused epilogue.** The starting code stores a @ b, then a second kernel reads it back, adds the
  bias, applies GELU and stores it again: two extra trips through memory for every output. The
  accumulator is still in registers when the k-loop ends, so the bias and GELU can be applied
  there, before the one store.
- **Grouped program order ("swizzling").** A GPU runs programs roughly in order of their id. In
  row-major order the programs running together cover one row of tiles: they share one slab of a
  but each needs its own slab of b, and the L2 cache holds few of them. Grouping GROUP_M rows of
  tiles together makes each wave a square-ish block of tiles, whose slabs of a and b are each
  shared by several programs, so more of the loads hit in L2.

Check your work:  make check M=optimization/04-warp-specialization
    (on a CPU it prints the memory-traffic report; on a GPU, the speed against the reference)
    or, in this folder with the course's environment active:  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

GROUP_M = 8  # rows of tiles per group in the grouped program order


@triton.jit
def gelu_tanh(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), with
    1 + tanh(u) written as 2 - 2 / (exp(2u) + 1) (finite for every x)."""
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (2.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0))


# TODO 1: once the epilogue is fused into the matmul kernel, delete this starting kernel
#   Hint: it is the second trip through memory that the fused epilogue saves.
@triton.jit
def bias_gelu_kernel(c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_bias, BLOCK: tl.constexpr):
    """The starting epilogue: read c back, add the bias, apply GELU, store c again."""
    offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    rows, cols = offsets // N, offsets % N
    mask = offsets < M * N
    c = tl.load(c_ptr + rows * stride_cm + cols * stride_cn, mask=mask).to(tl.float32)
    c += tl.load(bias_ptr + cols * stride_bias, mask=mask).to(tl.float32)
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, gelu_tanh(c).to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def matmul_bias_gelu_kernel(
    a_ptr, b_ptr, bias_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_bias,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # A 1-D grid: program pid computes one tile of c; which tile is the question of the order.
    pid = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # TODO 2: give consecutive programs the tiles of a group of GROUP_M rows, column by column
    #   Hint: a group is GROUP_M rows of tiles, all tiles_n columns: GROUP_M * tiles_n programs.
    #   Hint: inside a group, walk down the group's rows first, then move one column right; the last
    #   Hint: group may have fewer rows (tl.minimum(tiles_m - first row, GROUP_M)).
    pid_m = pid // tiles_n  # row-major: one whole row of tiles after another
    pid_n = pid % tiles_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # TODO 3: apply the epilogue to the accumulator, before the store: add the bias (one value per column), then GELU
    #   Hint: load the BLOCK_N values of bias for this tile's columns (masked), in float32, and add
    #   Hint: them as a row (bias[None, :]) so that they broadcast down the tile; then gelu_tanh.
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def launch_config(M: int, N: int, K: int, dtype: torch.dtype) -> dict:
    """Module 02's choice: 128 x 256 tiles (smaller for small problems), 3 stages, 8 warps."""
    def fit(size: int, largest: int) -> int:
        return min(largest, max(16, triton.next_power_of_2(size)))

    block_m, block_n, block_k = fit(M, 128), fit(N, 256), fit(K, 128 // dtype.itemsize)
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_stages=3,
                num_warps=8 if block_m * block_n >= 128 * 256 else 4)


def matmul_bias_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(a @ b + bias) (tanh approximation) for a (M, K), b (K, N) and bias (N,), in a's dtype."""
    check_tensors(("a", a), ("b", b), ndim=2)
    check_tensors(("a", a), ("bias", bias), ndim=None)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: the inner dimensions must "
                         "match (a's columns = b's rows) to compute a @ b.")
    if bias.dim() != 1 or bias.shape[0] != b.shape[1]:
        raise ValueError(f"bias has shape {tuple(bias.shape)}; it must be a vector of one value per "
                         f"column of the output ({b.shape[1]}).")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    config = launch_config(M, N, K, a.dtype)
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    matmul_bias_gelu_kernel[grid](
        a, b, bias, c, M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        bias.stride(0),
        c.stride(0), c.stride(1),
        GROUP_M=GROUP_M, **config,
    )
    # TODO 4: with the epilogue fused, nothing is left to launch here
    #   Hint: the starting code's second kernel reads c back and writes it again: delete the launch.
    bias_gelu_kernel[(triton.cdiv(M * N, 1024),)](c, bias, M, N, c.stride(0), c.stride(1), bias.stride(0),
                                                     BLOCK=1024)
    return c


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
