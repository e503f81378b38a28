"""Software pipelining: keep the tensor cores busy while the next slabs of a and b are on their way.

Each step of a matmul's k-loop loads a slab of a and a slab of b from global memory (hundreds of
cycles away) and multiplies them with tl.dot (a few dozen cycles on the tensor cores). Done one
after the other, the tensor cores wait for every load. Triton's compiler can overlap them: with
``num_stages = S`` it issues the loads of the next S - 1 steps before the current tl.dot, into
S buffers of shared memory, so that each dot finds its slabs already there. That is software
pipelining; the slabs loaded ahead are the prefetch.

The starting launcher asks for no pipelining (``num_stages=1``), small tiles and few warps: right,
and about a third of the speed it could have. Your TODOs choose the tile, the number of stages
that fit in shared memory, and the warps that run them.

Check your work:  make check M=optimization/02-pipelining
    (on a CPU it checks the configuration and prints the memory-traffic report; on a GPU, the
    speed against the reference)
    or, in this folder with the course's environment active:  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # 64-bit rows and columns: offs_m * stride_am passes 2**31 once a has that many elements.
    offs_m = tl.program_id(axis=0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # With num_stages = S the compiler turns this loop into a prologue that loads the first S - 1
    # slabs, a steady state that loads slab k + S - 1 while tl.dot works on slab k, and an
    # epilogue. The loop itself stays this simple.
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def stage_bytes(block_m: int, block_n: int, block_k: int, dtype: torch.dtype) -> int:
    """Shared memory one stage of the pipeline holds: a slab of a and a slab of b."""
    return (block_m + block_n) * block_k * dtype.itemsize


def pipeline_config(M: int, N: int, K: int, dtype: torch.dtype, shared_memory: int) -> dict:
    """The tile, the pipeline depth and the warps for one problem, on a GPU whose programs may
    use ``shared_memory`` bytes of shared memory each."""
    def fit(size: int, largest: int) -> int:
        return min(largest, max(16, triton.next_power_of_2(size)))

    # TODO 1: choose a large tile: 128 x 256 outputs, k-steps of 128 bytes per row
    #   Hint: a bigger tile loads less per output (module 01), and gives each stage more work to hide
    #   Hint: a load behind. Use fit() so that small matrices get small tiles; a k-step of 128 bytes
    #   Hint: is 64 float16 elements, or 32 float32.
    block_m, block_n, block_k = fit(M, 64), fit(N, 64), fit(K, 32)
    # TODO 2: keep as many k-steps in flight as shared memory holds, from 2 up to 4
    #   Hint: each stage holds stage_bytes(...) of shared memory; the compiler also needs a little
    #   Hint: for itself, so leave one stage's worth spare: (shared_memory // per_stage) - 1.
    #   Hint: a tile that cannot have 2 stages gets narrower (halve block_n) until it can.
    num_stages = 1  # no pipelining: each tl.dot waits for its own loads
    # TODO 3: choose the warps: 8 for a 128 x 256 tile, 4 for smaller ones
    #   Hint: a warp group of 4 warps drives one Hopper tensor-core unit; a large tile needs two.
    num_warps = 4
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_stages=num_stages, num_warps=num_warps)


def shared_memory_bytes(device: torch.device) -> int:
    """Shared memory one program may use on ``device`` (the interpreter has no limit: say 227 KiB,
    an H100's)."""
    if device.type != "cuda":
        return 227 * 1024
    return torch.cuda.get_device_properties(device).shared_memory_per_block_optin


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for a of shape (M, K) and b of shape (K, N), in the inputs' dtype."""
    check_tensors(("a", a), ("b", b), ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: the inner dimensions must "
                         "match (a's columns = b's rows) to compute a @ b.")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    config = pipeline_config(M, N, K, a.dtype, shared_memory_bytes(a.device))
    grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        **config,
    )
    return c


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
