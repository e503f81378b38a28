"""Tiling and coalescing: a transpose and a matrix multiplication that read memory the way a GPU
wants it read.

A GPU serves memory in 32-byte sectors. When the 32 lanes of a warp load 32 neighbouring floats,
4 sectors serve them all: the access is coalesced. When every lane loads from a different row,
every lane needs a sector of its own, 32 sectors for the same 128 useful bytes. Both functions
below start correct but slow; the TODOs turn them into tiled kernels.

- ``transpose(x)`` starts as a 1-D kernel over the output: its stores are coalesced, but its loads
  walk down the columns of x, one row apart per lane. A 2-D tile of x can be read along its rows
  and written along the rows of the output; Triton's compiler reshuffles the tile on chip between
  the two, so both sides are coalesced.
- ``matmul(a, b)`` starts with one output element per program: each loads a whole row of a and a
  whole column of b, 2K loads for one result. A BLOCK_M x BLOCK_N tile of outputs shares each
  loaded row among BLOCK_N outputs and each column among BLOCK_M, and ``tl.dot`` feeds the slabs
  to the tensor cores.

Check your work:  make check M=optimization/01-tiling
    (on a CPU it prints the memory-traffic report; on a GPU, the speed against the reference)
    or, in this folder with the course's environment active:  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors


@triton.jit
def transpose_kernel(
    x_ptr, y_ptr,
    M, N,
    stride_xm, stride_xn,
    stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # y[j, i] = x[i, j] for x of shape (M, N) and y of shape (N, M).
    # TODO: find the rows and the columns of x that this program's tile covers
    # HINT: make the grid 2-D: axis 0 counts tiles down the rows of x, axis 1 across its columns.
    # HINT: along each axis it is module 01's offsets again: the tile's start plus tl.arange.
    # HINT: make them tl.int64: an offset row * stride_xm passes 2**31 once x has that many
    # HINT: elements, and int32 arithmetic would wrap around to an address before x.
    rows = (tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = (tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    # STUB: # The starting kernel: a 1-D block of y's elements, in y's memory order. Consecutive
    # STUB: # lanes write neighbours in y, but read x one row apart: a sector per lane.
    # STUB: offsets = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    # STUB: cols = offsets // M  # y's row is x's column
    # STUB: rows = offsets % M
    # END TODO
    # TODO: mark the elements of the tile that lie inside x
    # HINT: an element exists when its row and its column do; test each as a column (rows[:, None])
    # HINT: or a row (cols[None, :]) so that the two tests broadcast to the whole tile.
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    # STUB: mask = offsets < M * N
    # END TODO
    # TODO: load the tile of x
    # HINT: the same broadcast builds the tile's addresses: a column of row offsets times stride_xm
    # HINT: plus a row of column offsets times stride_xn. Neighbouring lanes then read neighbours.
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    # STUB: tile = tl.load(x_ptr + rows * stride_xm + cols * stride_xn, mask=mask)
    # END TODO
    # TODO: store the tile into y, transposed
    # HINT: no data moves inside the program: swap which index goes with which of y's strides.
    # HINT: y's addresses run along the tile's rows, so the compiler writes y row by row as well.
    tl.store(y_ptr + cols[None, :] * stride_ym + rows[:, None] * stride_yn, tile, mask=mask)
    # STUB: tl.store(y_ptr + cols * stride_ym + rows * stride_yn, tile, mask=mask)
    # END TODO


def transpose(x: torch.Tensor) -> torch.Tensor:
    """Return x.T as a new contiguous (N, M) tensor, for x of shape (M, N), any strides."""
    check_tensors(("x", x), ndim=2)
    M, N = x.shape
    y = torch.empty((N, M), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    # TODO: launch one program per BLOCK_M x BLOCK_N tile of x
    # HINT: square tiles of 64 x 64 move 16 KiB of float32 per program: enough to keep every
    # HINT: lane busy, little enough for the on-chip reshuffle. Round the grid up with triton.cdiv.
    BLOCK_M, BLOCK_N = 64, 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    # STUB: BLOCK_M, BLOCK_N = 1024, 1  # the starting kernel: 1-D blocks of 1024 elements of y
    # STUB: grid = (triton.cdiv(M * N, BLOCK_M), 1)
    # END TODO
    transpose_kernel[grid](
        x, y, M, N,
        x.stride(0), x.stride(1),
        y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )
    return y


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # Program (pid_m, pid_n) computes the BLOCK_M x BLOCK_N tile of c at that place; with
    # BLOCK_M = BLOCK_N = 1 (the starting launcher) the tile is a single element.
    # 64-bit rows and columns: offs_m * stride_am passes 2**31 once a has that many elements.
    offs_m = (tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    offs_n = (tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        k_left = K - k
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        # TODO: multiply the two slabs on the tensor cores and add the product to acc
        # HINT: the starting line multiplies every pair with broadcasting and sums over k: right
        # HINT: for any tile, but it never uses the tensor cores. One tl.dot call does it all.
        acc = tl.dot(a, b, acc)
        # STUB: acc += tl.sum(a[:, :, None].to(tl.float32) * b[None, :, :].to(tl.float32), axis=1)
        # END TODO
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul_blocks(M: int, N: int, K: int, dtype: torch.dtype) -> dict:
    """The tile of c each program computes, and the step along K.

    Each loaded element of a serves BLOCK_N outputs and each element of b serves BLOCK_M, so
    bigger tiles load less: 128 x 128 reads a and b 64 times less than 1 x 1 tiles at the same
    BLOCK_K. Small problems get tiles no bigger than they are (and never below 16, the smallest
    tile tl.dot takes), which also keeps the CPU interpreter quick.
    """
    def fit(size: int, largest: int) -> int:
        return min(largest, max(16, triton.next_power_of_2(size)))

    # TODO: choose a BLOCK_M x BLOCK_N tile of outputs per program instead of a single element
    # HINT: tiles of 128 x 128 with a k-step of 64 (32 for float32) suit a Hopper GPU; use the
    # HINT: fit() helper so that small matrices get small tiles.
    block_m, block_n, block_k = fit(M, 128), fit(N, 128), fit(K, 128 // dtype.itemsize)
    # STUB: block_m, block_n, block_k = 1, 1, fit(K, 128 // dtype.itemsize)  # one output per program
    # END TODO
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                num_warps=8 if block_m * block_n >= 128 * 128 else 4)


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
    config = matmul_blocks(M, N, K, a.dtype)
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
