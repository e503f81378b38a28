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
    # TODO 1: find the row of tiles this program handles
    #   Hint: the launcher puts the tiles along M on the grid's first axis.
    pid_m = ...
    # TODO 2: find the column of tiles this program handles
    #   Hint: the same question, asked of the grid's other axis.
    pid_n = ...

    # Row indices (of a and c) and column indices (of b and c) of this program's tile, in int64:
    # a row index times stride_am passes 2**31 once a has that many elements, and int32 would wrap.
    # TODO 3: compute the BLOCK_M row indices of the tile
    #   Hint: tile 0 covers rows 0 to BLOCK_M - 1, tile 1 the BLOCK_M rows after those, and so on.
    #   Hint: these are module 01's offsets again, for one dimension of the tile.
    #   Hint: make them tl.int64 by converting pid_m first: pid_m.to(tl.int64) * BLOCK_M + ...
    offs_m = ...
    # TODO 4: compute the BLOCK_N column indices of the tile
    #   Hint: the mirror image of the rows, with pid_n and BLOCK_N (in int64 too: a transposed b
    #   Hint: multiplies them by a large stride_bn).
    offs_n = ...
    # TODO 5: compute the BLOCK_K indices along K of the first step
    #   Hint: the k-loop starts at 0; later steps move the pointers instead of these indices.
    offs_k = ...

    # Element (i, j) of a lives at a_ptr + i * stride_am + j * stride_ak. Broadcasting a column
    # of row offsets against a row of k offsets gives the whole BLOCK_M x BLOCK_K grid of
    # addresses at once. Using the strides (not the row length) is what lets a transposed
    # input, whose stride_ak is large and stride_am is 1, work without a copy.
    # TODO 6: build the BLOCK_M x BLOCK_K block of pointers into a for the first step
    #   Hint: index a column vector with [:, None] and a row vector with [None, :]; both broadcast.
    #   Hint: rows go with stride_am, the k direction with stride_ak.
    a_ptrs = ...
    # TODO 7: build the BLOCK_K x BLOCK_N block of pointers into b for the first step
    #   Hint: here k runs down the rows and the tile's columns run across.
    b_ptrs = ...

    # Edge tiles stick out past the matrices. These masks do not change inside the k-loop.
    # TODO 8: mark which rows of the tile exist in a (and c), as a BLOCK_M x 1 column
    #   Hint: a row index is valid when it is below M; keep the shape that broadcasts across columns.
    mask_m = ...
    # TODO 9: mark which columns of the tile exist in b (and c), as a 1 x BLOCK_N row
    #   Hint: the mirror image of the row mask.
    mask_n = ...

    # Sums of many float16 products lose digits fast, so the tile accumulates in float32,
    # whatever the input dtype; it is rounded once, at the end.
    # TODO 10: create the float32 accumulator for the tile, filled with zeros
    #   Hint: the accumulator has the tile's shape; tl.zeros takes a shape and a dtype.
    acc = ...

    # TODO 11: count the steps of BLOCK_K needed to cover all of K
    #   Hint: round up: a last, partial step covers the K % BLOCK_K leftover columns.
    num_k_steps = ...
    for k_step in range(0, num_k_steps):
        # TODO 12: how many k indices are left from this step on
        #   Hint: every step before this one consumed BLOCK_K of the K indices.
        k_remaining = ...
        # TODO 13: load this step's slab of a, with zeros where the slab sticks out
        #   Hint: a lane is valid when its row exists and its k index is below k_remaining.
        #   Hint: & combines two masks; a column mask and a row mask broadcast to the whole slab.
        #   Hint: a masked lane must add nothing to the dot product, so give the load a value for it.
        a = ...
        # TODO 14: load this step's slab of b, the same way
        #   Hint: b's k index runs down its rows, so the k mask is a column this time.
        b = ...
        # TODO 15: multiply the slabs and add the product to the accumulator
        #   Hint: one tl.dot call does both; it accepts the accumulator as its third argument.
        acc = ...
        # TODO 16: move both blocks of pointers BLOCK_K steps along K
        #   Hint: along K, a moves with stride_ak and b with stride_bk.

    # TODO 17: round the accumulator to the output's dtype
    #   Hint: c_ptr.dtype.element_ty is the type c_ptr points to; a block has a method that converts it.
    c = ...
    # TODO 18: build the BLOCK_M x BLOCK_N block of pointers into c
    #   Hint: like a's pointers, with the tile's rows and columns and c's strides.
    c_ptrs = ...
    # TODO 19: store the tile, writing only the elements that exist in c
    #   Hint: an element exists when both its row and its column do.


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
    # TODO 20: allocate the (M, N) output
    #   Hint: the inputs' dtype and device; every element is written, so it need not be zeroed.
    c = ...
    if c.numel() == 0:
        return c  # nothing to compute, and a grid with no programs cannot be launched
    config = pick_blocks(M, N, K, a.dtype, shared_memory_bytes(a.device))
    # TODO 21: choose the 2-D grid: one program per tile of c
    #   Hint: a tuple (tiles along M, tiles along N); round each up with triton.cdiv.
    grid = ...
    # TODO 22: launch the kernel, passing each tensor's strides
    #   Hint: x.stride(0) steps to the next row, x.stride(1) to the next column; pass **config last.
    return c


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
