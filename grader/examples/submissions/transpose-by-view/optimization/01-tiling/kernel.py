"""Example "transpose-by-view": PyTorch moves the data, a dummy launch satisfies the counter.

Attack: the exercise is a transpose, which is nothing but data movement, and the operators that
move data are allowed around a launch (views, copies, ``.contiguous()``: PyTorch's own data
movement is not "computing"). ``transpose`` returns ``x.t().contiguous()`` (a clone where that
would hand back x itself) and launches a kernel that does nothing useful, so a launch is counted
and the operator log holds only allowed operators. This file is the reference solution with that
one change; ``matmul`` is unchanged.

Mechanism abused: allowed data-movement operators doing the exercise's whole work.

Expected under the hardened grader: the transpose cases fail and the module gets no points, with
"returned values that no Triton kernel of yours stored" (the Spec says moving the data is the
exercise: ``kernel_writes_outputs``). Under the interpreter the child records the bytes every
store of a kernel wrote during the call and finds none of the output's; on a GPU the kernel trace
shows PyTorch's copy kernel, which such a Spec does not allow. The matmul cases still pass. The
policy gate lets the file through (nothing in it is refused).
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
    rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
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
    """Return x.T as a new contiguous (N, M) tensor: moved by PyTorch (the attack)."""
    check_tensors(("x", x), ndim=2)
    y = x.t().contiguous()
    if y.data_ptr() == x.data_ptr():  # a row or a column is contiguous both ways: .contiguous() gives x back
        y = y.clone()
    if y.numel():
        noop_kernel[(1,)](y.numel())  # launched only so that a launch is counted
    return y


@triton.jit
def noop_kernel(n):
    pass


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
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
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
