"""Errors, validation and fallbacks: two operators that fail well.

softmax(x, dim=-1)
    checks its input and says what to do about a bad one; returns an empty result for an empty
    input without launching anything; takes any layout and any dim; and falls back to PyTorch,
    with a one-time warning that says why, where its kernel cannot help: rows longer than one
    block, or a process where Triton has nothing to launch on (no GPU, interpreter off).

matmul(a, b, config=FIRST_CONFIG, *, return_config=False)
    launches a tiled kernel with a large configuration. On a GPU whose shared memory is too small
    for it, the launch raises Triton's OutOfResources; launch_with_retry() then tries smaller
    configurations until one fits, and matmul() can report which one ran.

This file has planted bugs, and TODOs for the checks and the recovery you write. The public tests
describe what goes wrong (an error, a crash, elements never written), never where: read the
failure, then find the code that produces it.

Check your work:  make check M=debugging/02-error-handling
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import warnings
from typing import Callable, NamedTuple

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# A program keeps its whole row in registers, as float32: 32768 values are 32 per thread with 32
# warps. Longer rows go to PyTorch (the optimization track loops over chunks of a row instead).
MAX_COLUMNS = 32768

# What this process has found out once and need not find out again: where kernels run (the probe
# below), and which fallbacks it has already warned about (each warns once; tests clear it).
PROBED: dict = {}
WARNED: dict = {}


# ----------------------------------------------------------------------------------------------
# softmax: one program per row, the whole row in one block
# ----------------------------------------------------------------------------------------------

@triton.jit
def softmax_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    # 64-bit row offsets: row * stride passes 2^31 once x holds 2^31 elements.
    row = tl.program_id(axis=0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK)
    mask = col_offsets < n_cols
    # -inf in the padding lanes: it cannot raise the maximum, and exp(-inf) = 0 adds nothing.
    x = tl.load(x_ptr + row * x_row_stride + col_offsets, mask=mask, other=-float("inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)  # exp() of anything above 88 overflows float32
    numerator = tl.exp(shifted)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * y_row_stride + col_offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def probe_kernel(flag_ptr):
    tl.store(flag_ptr, 1)


def kernel_device():
    """Where Triton kernels run in this process: "cuda" (natively, on a GPU), "cpu" (Triton's
    interpreter, TRITON_INTERPRET=1), or None (nowhere: no GPU driver and no interpreter).

    The only reliable way to know is to launch something, so the first call launches a tiny
    kernel on a tensor in host memory and reads the answer from how the launch ends; the answer
    is kept for the rest of the process.
    """
    if "device" not in PROBED:
        flag = torch.zeros(1, dtype=torch.int32)  # host memory on purpose
        try:
            probe_kernel[(1,)](flag)
            PROBED["device"] = "cpu"  # only the interpreter runs a kernel on host memory
        except ValueError:  # a GPU driver refused host memory: "cannot be accessed from Triton (cpu tensor?)"
            PROBED["device"] = "cuda"
        except RuntimeError:  # no driver at all: "0 active drivers ([]). There should only be one."
            # (with a GPU present, something else went wrong: let the real launch report it)
            PROBED["device"] = "cuda" if torch.cuda.is_available() else None
    return PROBED["device"]


def warn_once(reason: str, message: str) -> None:
    """warnings.warn(message) the first time this process falls back for ``reason``."""
    if reason not in WARNED:
        WARNED[reason] = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def check_softmax_input(x, dim):
    """Raise, with a message that says what to do, unless softmax() can take ``x`` and ``dim``;
    return ``dim`` as an index from 0."""
    # TODO 1: refuse anything that is not a torch.Tensor, with a TypeError
    #   Hint: say what was passed instead, and how to make a tensor of it (torch.as_tensor).
    # TODO 2: refuse the dtypes the kernel does not handle, with a TypeError
    #   Hint: SUPPORTED_DTYPES lists those it handles; name x's dtype, the supported ones, and a conversion.
    # TODO 3: refuse a 0-dimensional x (a ValueError) and a dim that is not one of x's dimensions
    #   Hint: a scalar has no dimension to normalise over: say how to give it one (x.reshape(1)).
    #   Hint: torch raises IndexError for a dim out of range; say which dims x has (-n to n - 1).
    return dim % x.dim()


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x) / sum(exp(x)) along ``dim``: x's shape and dtype, like torch.softmax(x, dim).

    When dim is not the last dimension, the result is a view laid out with dim last in memory.
    """
    dim = check_softmax_input(x, dim)

    where = kernel_device()
    # TODO 4: when no kernel can run in this process, warn once why, and compute with PyTorch
    #   Hint: kernel_device() says where kernels run; warn_once(reason, message) warns the first time only.
    #   Hint: the message should say what is missing and how to get it (TRITON_INTERPRET=1 runs kernels on a CPU).
    # TODO 5: refuse a tensor that is not where kernels run, with a ValueError that says how to move it
    #   Hint: compare x.device.type with where; x.to(where) moves it.
    n_cols = x.shape[dim]
    # TODO 6: rows longer than one block holds go to PyTorch, with a one-time warning that says why
    #   Hint: MAX_COLUMNS is the longest row the kernel keeps in one block.
    # Each softmax becomes one row of a 2-D view: dim moved last, the other dimensions flattened.
    # The kernel steps between rows with the row stride but needs a row's elements side by side.
    if not x.is_contiguous():
        x = x.contiguous()
    moved = x.movedim(dim, -1)
    rows = moved.reshape(-1, n_cols)
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    BLOCK = triton.next_power_of_2(n_cols)
    num_warps = min(max(BLOCK // 512, 4), 32)  # about 16 values of the row per thread
    softmax_kernel[(rows.shape[0],)](rows, y, rows.stride(0), y.stride(0), n_cols,
                                     BLOCK=BLOCK, num_warps=num_warps)
    return y.reshape(moved.shape).movedim(-1, dim)


# ----------------------------------------------------------------------------------------------
# matmul: a tiled kernel whose shared memory grows with its blocks and its pipeline
# ----------------------------------------------------------------------------------------------

class MatmulConfig(NamedTuple):
    """One way to launch matmul_kernel: the tile of A, B and C a program works on, how many
    K-steps the software pipeline keeps in flight (num_stages), and its warps."""
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_stages: int
    num_warps: int = 8


# Too large for an H100 on purpose: four stages of a 128 x 128 tile of A and a 128 x 256 tile of
# B are 384 KiB in fp16 (768 KiB in fp32), and a program may use 227 KiB of shared memory there.
FIRST_CONFIG = MatmulConfig(128, 256, 128, num_stages=4, num_warps=8)
H100_SHARED_MEMORY = 232448  # bytes of shared memory one program may use on an H100 (227 KiB)
SMALLEST_BLOCK = 16  # tl.dot needs every dimension of its operands to be at least 16 (fp16)
GROUP_M = 8  # programs in a group cover GROUP_M rows of tiles, column by column: see the kernel


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # Grouped order: consecutive programs walk down a group of GROUP_M tile rows before moving to
    # the next column, so the tiles of B they read are still in the L2 cache for the next ones.
    pid = tl.program_id(axis=0)
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    programs_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // programs_per_group) * GROUP_M
    group_rows = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % programs_per_group) % group_rows
    pid_n = (pid % programs_per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # num_stages (a launch option) lets the compiler load the next tiles of this loop while
    # tl.dot works on the current ones: each stage in flight is one more pair of tiles in
    # shared memory, which is what runs out when the blocks or the stages are too many.
    for k in range(0, K, BLOCK_K):
        k_left = K - k
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def shared_memory_bytes(config: MatmulConfig, element_size: int) -> int:
    """The shared memory matmul_kernel needs with ``config``: the pipeline keeps num_stages pairs
    of tiles, a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B, each element
    ``element_size`` bytes. (What Triton allocates for this kernel on an H100 when the strides
    are multiples of 16; without that alignment it does not pipeline, and needs one stage.)"""
    # TODO 7: compute the bytes of shared memory the pipeline keeps
    #   Hint: count the elements of one stage (a tile of A plus a tile of B), then all the stages, then bytes.
    return ...


def smaller_config(config: MatmulConfig):
    """The config to try after ``config`` ran out of shared memory, or None when none is smaller.

    Halve the largest block dimension, BLOCK_K first among equals: a shorter K-step keeps the
    tile of C (and so the reuse of every loaded element) and the pipeline. Once every block
    dimension is down to SMALLEST_BLOCK, keep one stage fewer, down to one.
    """
    # TODO 8: return the next, smaller config (None when there is none)
    #   Hint: a NamedTuple is rebuilt field by field: MatmulConfig(block_m, block_n, block_k, stages, warps).
    #   Hint: a 128 x 128 tile of C keeps 8 warps busy; smaller tiles need only 4.
    return ...


def is_out_of_resources(error: BaseException) -> bool:
    """True for Triton's OutOfResources, which a launch raises when its config needs more shared
    memory (or registers, or threads) than the GPU has, and for the stand-in the interpreter
    path raises below. Both carry what ran out (.name), what was needed (.required) and the
    hardware's limit (.limit). (Your own code can write `except triton.runtime.errors.
    OutOfResources`; this file may not import triton.runtime, so it looks at the fields.)"""
    return hasattr(error, "required") and hasattr(error, "limit")


class SharedMemoryExceeded(Exception):
    """What launch_matmul raises under the interpreter for a config that would not fit in an
    H100's shared memory: the interpreter has no shared memory to run out of, so it checks the
    estimate instead. Same fields and message as Triton's OutOfResources."""


def shared_memory_exceeded(required: int, limit: int) -> SharedMemoryExceeded:
    error = SharedMemoryExceeded(f"out of resource: shared memory, Required: {required}, Hardware limit: "
                                 f"{limit}. Reducing block sizes or `num_stages` may help.")
    error.required, error.limit = required, limit
    return error


def matmul_grid(M: int, N: int, config: MatmulConfig) -> tuple:
    """One program per BLOCK_M x BLOCK_N tile of C."""
    return (triton.cdiv(M, config.BLOCK_M) * triton.cdiv(N, config.BLOCK_N),)


def launch_matmul(a, b, c, config: MatmulConfig, grid: tuple) -> None:
    """One launch of matmul_kernel with ``config``: c = a @ b. On a GPU a config that needs too
    much shared memory raises OutOfResources here; under the interpreter the estimate is checked
    against an H100's shared memory first, and raises the stand-in."""
    if not a.is_cuda:
        required = shared_memory_bytes(config, a.element_size())
        if required > H100_SHARED_MEMORY:
            raise shared_memory_exceeded(required, H100_SHARED_MEMORY)
    M, K = a.shape
    N = b.shape[1]
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=config.BLOCK_M, BLOCK_N=config.BLOCK_N,
                        BLOCK_K=config.BLOCK_K, GROUP_M=GROUP_M, num_stages=config.num_stages,
                        num_warps=config.num_warps)


def launch_with_retry(launch: Callable, config: MatmulConfig, shrink: Callable = smaller_config,
                      max_attempts: int = 16) -> MatmulConfig:
    """Call ``launch(config)``; while it runs out of resources, call it again with
    ``shrink(config)``. Returns the config that ran.

    Any other error goes straight to the caller. When shrink has nothing smaller, the last
    OutOfResources does; after ``max_attempts`` launches a RuntimeError does (a shrink that does
    not shrink would otherwise loop for ever).
    """
    tried, last_error = [], None
    for _ in range(max_attempts):
        tried.append(config)
        try:
            launch(config)
            return config
        except Exception as error:
            if not is_out_of_resources(error):
                raise
            last_error = error
            smaller = shrink(config)
            if smaller is None:  # nothing smaller to try: the caller sees why
                raise

    raise RuntimeError(f"launch_with_retry(): {max_attempts} launches in a row ran out of resources, "
                       f"with {len(set(tried))} different config(s); the last, {config}, raised: {last_error}")


def matmul(a: torch.Tensor, b: torch.Tensor, config: MatmulConfig = FIRST_CONFIG, *,
           return_config: bool = False):
    """c = a @ b for 2-D a (M x K) and b (K x N) of one float dtype, in a's dtype.

    Starts from ``config`` and retries smaller configs while the GPU runs out of shared memory.
    With return_config=True, returns (c, the config that ran), or (c, None) when c is empty and
    nothing was launched.
    """
    check_tensors(("a", a), ("b", b), ndim=2)
    M, K = a.shape
    if b.shape[0] != K:
        raise ValueError(f"a is {M} x {K} and b is {b.shape[0]} x {b.shape[1]}: the inner dimensions "
                         "(a's columns, b's rows) must be equal.")
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M == 0 or N == 0:
        return (c, None) if return_config else c
    grid = matmul_grid(M, N, config)
    def launch(cfg):
        launch_matmul(a, b, c, cfg, grid)
    ran = launch_with_retry(launch, config)
    return (c, ran) if return_config else c


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
