"""Matrix multiplication: c = a @ b, one Triton program per BLOCK_M x BLOCK_N tile of c.

Each program owns one tile of the output. It walks along the shared dimension K in steps of
BLOCK_K: load a BLOCK_M x BLOCK_K slab of a and a BLOCK_K x BLOCK_N slab of b, multiply them
with `tl.dot` (the tensor cores on a GPU), and add the product into a float32 accumulator. After
the last step it rounds the tile to the output dtype and stores it. Pointers come from the
tensors' strides, so a transposed or sliced input works as it is, without a copy.

Check your work:  make check M=missing-elements/02-matrix-mul
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
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
    # The grid is two-dimensional: axis 0 counts tiles down the rows of c, axis 1 across its
    # columns. (The GPU starts programs in order of axis 0 first, so the programs that run at
    # the same time share a few column-slabs of b and read them from the L2 cache.)
    # TODO: find the row of tiles this program handles
    # HINT: the launcher puts the tiles along M on the grid's first axis.
    pid_m = tl.program_id(axis=0)
    # STUB: pid_m = ...
    # END TODO
    # TODO: find the column of tiles this program handles
    # HINT: the same question, asked of the grid's other axis.
    pid_n = tl.program_id(axis=1)
    # STUB: pid_n = ...
    # END TODO

    # Row indices (of a and c) and column indices (of b and c) of this program's tile, in int64:
    # a row index times stride_am passes 2**31 once a has that many elements, and int32 would wrap.
    # TODO: compute the BLOCK_M row indices of the tile
    # HINT: tile 0 covers rows 0 to BLOCK_M - 1, tile 1 the BLOCK_M rows after those, and so on.
    # HINT: these are module 01's offsets again, for one dimension of the tile.
    # HINT: make them tl.int64 by converting pid_m first: pid_m.to(tl.int64) * BLOCK_M + ...
    offs_m = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    # STUB: offs_m = ...
    # END TODO
    # TODO: compute the BLOCK_N column indices of the tile
    # HINT: the mirror image of the rows, with pid_n and BLOCK_N (in int64 too: a transposed b
    # HINT: multiplies them by a large stride_bn).
    offs_n = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    # STUB: offs_n = ...
    # END TODO
    # TODO: compute the BLOCK_K indices along K of the first step
    # HINT: the k-loop starts at 0; later steps move the pointers instead of these indices.
    offs_k = tl.arange(0, BLOCK_K)
    # STUB: offs_k = ...
    # END TODO

    # Element (i, j) of a lives at a_ptr + i * stride_am + j * stride_ak. Broadcasting a column
    # of row offsets against a row of k offsets gives the whole BLOCK_M x BLOCK_K grid of
    # addresses at once. Using the strides (not the row length) is what lets a transposed
    # input, whose stride_ak is large and stride_am is 1, work without a copy.
    # TODO: build the BLOCK_M x BLOCK_K block of pointers into a for the first step
    # HINT: index a column vector with [:, None] and a row vector with [None, :]; both broadcast.
    # HINT: rows go with stride_am, the k direction with stride_ak.
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    # STUB: a_ptrs = ...
    # END TODO
    # TODO: build the BLOCK_K x BLOCK_N block of pointers into b for the first step
    # HINT: here k runs down the rows and the tile's columns run across.
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    # STUB: b_ptrs = ...
    # END TODO

    # Edge tiles stick out past the matrices. These masks do not change inside the k-loop.
    # TODO: mark which rows of the tile exist in a (and c), as a BLOCK_M x 1 column
    # HINT: a row index is valid when it is below M; keep the shape that broadcasts across columns.
    mask_m = offs_m[:, None] < M
    # STUB: mask_m = ...
    # END TODO
    # TODO: mark which columns of the tile exist in b (and c), as a 1 x BLOCK_N row
    # HINT: the mirror image of the row mask.
    mask_n = offs_n[None, :] < N
    # STUB: mask_n = ...
    # END TODO

    # Sums of many float16 products lose digits fast, so the tile accumulates in float32,
    # whatever the input dtype; it is rounded once, at the end.
    # TODO: create the float32 accumulator for the tile, filled with zeros
    # HINT: the accumulator has the tile's shape; tl.zeros takes a shape and a dtype.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # STUB: acc = ...
    # END TODO

    # TODO: count the steps of BLOCK_K needed to cover all of K
    # HINT: round up: a last, partial step covers the K % BLOCK_K leftover columns.
    num_k_steps = tl.cdiv(K, BLOCK_K)
    # STUB: num_k_steps = ...
    # END TODO
    for k_step in range(0, num_k_steps):
        # TODO: how many k indices are left from this step on
        # HINT: every step before this one consumed BLOCK_K of the K indices.
        k_remaining = K - k_step * BLOCK_K
        # STUB: k_remaining = ...
        # END TODO
        # TODO: load this step's slab of a, with zeros where the slab sticks out
        # HINT: a lane is valid when its row exists and its k index is below k_remaining.
        # HINT: & combines two masks; a column mask and a row mask broadcast to the whole slab.
        # HINT: a masked lane must add nothing to the dot product, so give the load a value for it.
        a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_remaining), other=0.0)
        # STUB: a = ...
        # END TODO
        # TODO: load this step's slab of b, the same way
        # HINT: b's k index runs down its rows, so the k mask is a column this time.
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_remaining) & mask_n, other=0.0)
        # STUB: b = ...
        # END TODO
        # TODO: multiply the slabs and add the product to the accumulator
        # HINT: one tl.dot call does both; it accepts the accumulator as its third argument.
        acc = tl.dot(a, b, acc)
        # STUB: acc = ...
        # END TODO
        # TODO: move both blocks of pointers BLOCK_K steps along K
        # HINT: along K, a moves with stride_ak and b with stride_bk.
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        # END TODO

    # TODO: round the accumulator to the output's dtype
    # HINT: c_ptr.dtype.element_ty is the type c_ptr points to; a block has a method that converts it.
    c = acc.to(c_ptr.dtype.element_ty)
    # STUB: c = ...
    # END TODO
    # TODO: build the BLOCK_M x BLOCK_N block of pointers into c
    # HINT: like a's pointers, with the tile's rows and columns and c's strides.
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    # STUB: c_ptrs = ...
    # END TODO
    # TODO: store the tile, writing only the elements that exist in c
    # HINT: an element exists when both its row and its column do.
    tl.store(c_ptrs, c, mask=mask_m & mask_n)
    # END TODO


def shared_memory_bytes(device: torch.device) -> int:
    """How much shared memory one program may use on ``device`` (no limit for the interpreter)."""
    if device.type != "cuda":
        return 1 << 30
    return torch.cuda.get_device_properties(device).shared_memory_per_block_optin


def pick_blocks(M: int, N: int, K: int, dtype: torch.dtype, shared_memory: int) -> dict:
    """Tile sizes and launch settings for one problem size.

    Large problems get the tile that keeps a Hopper GPU's tensor cores busy: 128 x 256 outputs
    per program, 8 warps, and 3 k-steps of loads in flight (num_stages). A k-step of 128 bytes
    per row is 64 float16 (or 32 float32) elements. Small matrices get smaller tiles (never
    below 16, the smallest tl.dot accepts), so that no program spends its time on padding; this
    also keeps the CPU interpreter quick.
    """
    def fit(size: int, largest: int) -> int:
        return min(largest, max(16, triton.next_power_of_2(size)))

    block_m, block_n, block_k = fit(M, 128), fit(N, 256), fit(K, 128 // dtype.itemsize)
    num_stages = 3
    # Every stage in flight holds a slab of a and a slab of b in shared memory: 144 KiB for the
    # big tile. GPUs with less (consumer cards have about 100 KiB) get narrower tiles, 2 stages.
    if num_stages * (block_m + block_n) * block_k * dtype.itemsize > shared_memory:
        block_n, num_stages = min(block_n, 128), 2
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_stages=num_stages,
                num_warps=8 if block_m * block_n >= 128 * 128 else 4)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for a of shape (M, K) and b of shape (K, N), in the inputs' dtype.

    The inputs may be strided views (a transpose, a slice): the kernel follows their strides.
    """
    check_tensors(("a", a), ("b", b), ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: the inner dimensions "
                         f"must match (a's columns = b's rows) to compute a @ b. Transpose or "
                         f"reshape one of them.")
    M, K = a.shape
    N = b.shape[1]
    # TODO: allocate the (M, N) output
    # HINT: the inputs' dtype and device; every element is written, so it need not be zeroed.
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    # STUB: c = ...
    # END TODO
    if c.numel() == 0:
        return c  # nothing to compute, and a grid with no programs cannot be launched
    config = pick_blocks(M, N, K, a.dtype, shared_memory_bytes(a.device))
    # TODO: choose the 2-D grid: one program per tile of c
    # HINT: a tuple (tiles along M, tiles along N); round each up with triton.cdiv.
    grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))
    # STUB: grid = ...
    # END TODO
    # TODO: launch the kernel, passing each tensor's strides
    # HINT: x.stride(0) steps to the next row, x.stride(1) to the next column; pass **config last.
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        **config,
    )
    # END TODO
    return c


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
