"""Autotuning and persistent kernels: a matmul that picks its own configuration for each shape and
keeps one program per multiprocessor busy from the first tile to the last.

- **Autotuning.** ``@triton.autotune`` times every config of a search space the first time it sees
  a new value of its ``key`` arguments, and remembers the winner for that key. Two things make it
  work: a space small enough to search (a handful of configs, pruned of those that do not fit the
  GPU's shared memory before any is compiled) and a key that says when to search again (the
  problem's shape: M, N and K).
- **A persistent kernel.** Instead of one program per tile (thousands of programs, each paying its
  start-up and leaving a ragged last wave), launch one program per multiprocessor and let each loop
  over tiles: tile = pid, pid + NUM_SMS, pid + 2 NUM_SMS, ...
- **Tensor descriptors (TMA).** On Hopper and newer GPUs a copy engine moves whole tiles between
  global and shared memory, described by a tensor descriptor (base, shape, strides, tile shape):
  no pointer arithmetic, no masks (the descriptor knows the edges), and fewer instructions in the
  loop. ``matmul_tma_kernel`` runs the same persistent loop on descriptors where the GPU and the
  operands' layouts allow it; ``matmul_kernel`` (pointers) runs everywhere else.

The starting file launches one program per tile with one fixed, small config, tuned for nothing.

Check your work:  make check M=optimization/05-advanced-optimizations
    (on a CPU it checks the search space, the key and the pruning, and prints the memory-traffic
    report; on a GPU, the speed against the reference)
    or, in this folder with the course's environment active:  python kernel.py
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from grader.validation import check_tensors

INTERPRETER_SMS = 4  # "multiprocessors" under the CPU interpreter, which runs one program at a time
COMPILER_RESERVE = 8 * 1024  # shared memory the compiler keeps for itself (epilogue, barriers)
# The descriptor kernel's one config: what the autotuner picked on an H100 for every shape measured
# (README). A descriptor's tile shape is fixed on the host, before the launch, so this kernel is
# not autotuned: the autotuner would need a Python hook to re-shape the descriptors per config.
TMA_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 8}


def matmul_configs() -> list:
    """The search space, largest tile first (the CPU interpreter runs only the first config)."""
    # TODO 1: offer the autotuner a handful of configs worth trying on a Hopper-class GPU
    #   Hint: tiles of 128 x 256, 256 x 128, 128 x 128 and 64 x 256 with k-steps of 64; 3 or 4 stages;
    #   Hint: 8 warps for the tiles of 32768 outputs, 4 for smaller ones; end with one small config
    #   Hint: (128 x 128 x 32, 3 stages) that fits GPUs with about 100 KiB of shared memory.
    shapes = [(64, 64, 32, 2, 4)]  # one small config: nothing to choose from
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                          num_stages=stages, num_warps=warps)
            for bm, bn, bk, stages, warps in shapes]


def config_shared_memory(config, itemsize: int) -> int:
    """Shared memory a config's pipeline needs: num_stages slabs of a and of b."""
    kw = config.kwargs
    return config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * itemsize


def configs_that_fit(configs: list, itemsize: int, shared_memory: int) -> list:
    """The configs whose pipeline fits in ``shared_memory`` bytes (less the compiler's reserve)."""
    # TODO 2: drop the configs that would not fit in shared memory, before any of them is compiled
    #   Hint: config_shared_memory(config, itemsize) must not exceed shared_memory - COMPILER_RESERVE.
    #   Hint: a config that does not fit fails to launch; pruning it also saves compiling it.
    return configs


def shared_memory_bytes(device: torch.device) -> int:
    """Shared memory one program may use on ``device`` (227 KiB, an H100's, for the interpreter)."""
    if device.type != "cuda":
        return 227 * 1024
    return torch.cuda.get_device_properties(device).shared_memory_per_block_optin


def prune(configs, named_args, **kwargs):
    """``early_config_prune`` for the autotuner: keep what fits this GPU (the smallest config, if
    nothing does, so that the error says why)."""
    a = named_args["a_ptr"]
    return configs_that_fit(configs, a.element_size(), shared_memory_bytes(a.device)) or configs[-1:]


@triton.jit
def tile_position(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Module 04's grouped order: the (row, column) of tile number ``tile`` in the output."""
    first_row = (tile // (GROUP_M * tiles_n)) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_row, GROUP_M)
    in_group = tile % (GROUP_M * tiles_n)
    return first_row + in_group % rows_in_group, in_group // rows_in_group


# TODO 3: tune per problem shape: the autotuner must search again when M, N or K changes
#   Hint: key lists the names of the kernel's arguments whose values select a config; the dtype is
#   Hint: part of the key already. prune_configs_by={"early_config_prune": prune} prunes first.
@triton.autotune(configs=matmul_configs(), key=[])  # tuned once, for whatever shape came first
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    NUM_SMS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # TODO 4: loop over the tiles this program owns: its own id, then every NUM_SMS-th tile after it
    #   Hint: the launcher starts at most NUM_SMS programs; program p computes tiles p, p + NUM_SMS,
    #   Hint: p + 2 NUM_SMS, ... below tiles_m * tiles_n: tl.range(start, end, step).
    for tile in tl.range(tl.program_id(axis=0), tl.program_id(axis=0) + 1, 1):  # one tile each
        pid_m, pid_n = tile_position(tile, tiles_m, tiles_n, GROUP_M)
        # 64-bit rows and columns: offs_m * stride_am passes 2**31 once a has that many elements.
        offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
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
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def matmul_tma_kernel(
    a_desc, b_desc, c_desc,
    M, N, K,
    NUM_SMS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """matmul_kernel's tiles, loaded and stored through tensor descriptors: each ``load`` asks the
    copy engine for a whole tile at a position (zeros where it hangs past an edge) and each
    ``store`` writes one back (dropping what lies past an edge), so the loop has no pointers and no
    masks."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # TODO 5: the same loop over this program's tiles as in matmul_kernel
    #   Hint: flatten=True lets the compiler pipeline the loads of the next tile under this one's dots.
    for tile in tl.range(tl.program_id(axis=0), tl.program_id(axis=0) + 1, 1):  # one tile each
        pid_m, pid_n = tile_position(tile, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def multiprocessors(device: torch.device) -> int:
    if device.type != "cuda":
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def programs(tiles: int, num_sms: int) -> int:
    """How many programs to launch for ``tiles`` output tiles."""
    # TODO 6: launch one program per multiprocessor (fewer when there are fewer tiles)
    #   Hint: the loop in the kernel hands each program every NUM_SMS-th tile.
    return tiles  # one program per tile


def takes_tma_path(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """Whether matmul_tma_kernel can run on these operands (the CPU interpreter runs it too)."""
    # TODO 7: take the descriptor path only where the GPU and the operands allow it
    #   Hint: a GPU needs compute capability 9 or more (torch.cuda.get_device_capability(a.device)).
    #   Hint: 16-bit operands (element_size() == 2); every one of a, b, c row-major (stride(1) == 1)
    #   Hint: with each row on a 16-byte boundary (stride(0) * element_size() and data_ptr() multiples
    #   Hint: of 16); and at least one full TMA_CONFIG tile (M >= BLOCK_M, N >= BLOCK_N, K >= BLOCK_K).
    return False  # pointer loads everywhere


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
    num_sms = multiprocessors(a.device)
    if takes_tma_path(a, b, c):
        bm, bn, bk = TMA_CONFIG["BLOCK_M"], TMA_CONFIG["BLOCK_N"], TMA_CONFIG["BLOCK_K"]
        grid = (programs(triton.cdiv(M, bm) * triton.cdiv(N, bn), num_sms),)
        matmul_tma_kernel[grid](TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
                                TensorDescriptor.from_tensor(c, [bm, bn]), M, N, K, NUM_SMS=num_sms, **TMA_CONFIG)
        return c

    def grid(meta):
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (programs(tiles, num_sms),)

    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        NUM_SMS=num_sms,
    )
    return c


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
