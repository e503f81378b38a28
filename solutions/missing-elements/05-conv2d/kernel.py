"""2-D convolution as an implicit GEMM: out = conv2d(x, weight) + bias, in NCHW.

A convolution is a matrix multiplication in disguise. Lay the output out as a matrix with one row
per output pixel (N * OH * OW rows) and one column per output channel (K columns); then every
output element is the dot product of the input patch under the filter (C * R * S values) with
that channel's filter (C * R * S weights). im2col would copy every patch into a real matrix
first, R * S times the size of x. An *implicit* GEMM never builds it: each program computes a
BLOCK_M x BLOCK_N tile of the output like a matmul does, and works out on the fly which input
elements the rows of its "patch matrix" tile are, reading zeros where a filter tap hangs over the
border (the padding).

Names: the convolution's sizes are N, C, H, W (input), K, R, S (filters) and OH, OW (output).
The GEMM's sizes are M = N * OH * OW rows, K output channels as its columns (BLOCK_N of them per
program) and a reduction over C * R * S, walked BLOCK_K values at a time. The reduction runs over
the filter taps (r, s) and, inside each tap, over the channels c in chunks of BLOCK_K.

Check your work:  make check M=missing-elements/05-conv2d
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors


# The block sizes are tuned on the GPU: @triton.autotune times these configurations the first time
# it sees a new shape and keeps the fastest (track 2 explains it; under the interpreter the course
# runs the first one). Each is a matmul tile: 64 to 128 outputs a side per program, 64 or 128
# reduction values per step, and 3-4 pipeline stages so that the loads of the next steps overlap
# the tensor-core work of this one.
CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=4),
]


@triton.autotune(configs=CONFIGS, key=["N", "C", "H", "W", "K", "R", "S", "stride_h", "stride_w"])
@triton.jit
def conv2d_kernel(
    x_ptr, w_ptr, bias_ptr, out_ptr,
    N, C, H, W, K, R, S, OH, OW,
    stride_h, stride_w, pad_h, pad_w,
    x_stride_n, x_stride_c, x_stride_h, x_stride_w,
    w_stride_k, w_stride_c, w_stride_r, w_stride_s,
    out_stride_n, out_stride_k, out_stride_h, out_stride_w,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # The grid is one-dimensional. Output-channel blocks vary fastest, so the programs that read
    # the same input patch (same rows, different channels) run side by side and share it in L2.
    pid = tl.program_id(axis=0)
    # TODO: find this program's block of output channels (pid_n) and block of pixels (pid_m)
    # HINT: there are tl.cdiv(K, BLOCK_N) channel blocks; consecutive program ids step through them.
    # HINT: integer division and remainder by that count split pid into the two block indices.
    num_pid_n = tl.cdiv(K, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    # STUB: pid_m = ...
    # STUB: pid_n = ...
    # END TODO

    # Rows of the tile: output pixels, numbered n-major like the NCHW output (n, then oh, then ow).
    # TODO: compute the indices of the BLOCK_M output pixels of this tile
    # HINT: as in a matmul: the block index times the block size, plus tl.arange.
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    # STUB: offs_m = ...
    # END TODO
    # TODO: decode each pixel index into its column ow and row oh in the output image
    # HINT: ow is the fastest-varying coordinate: a remainder by OW. Then divide by OW and wrap by OH.
    ow = offs_m % OW
    oh = (offs_m // OW) % OH
    # STUB: ow = ...
    # STUB: oh = ...
    # END TODO
    # TODO: decode each pixel index into the image n of the batch it belongs to
    # HINT: every image has OH * OW output pixels.
    n = offs_m // (OH * OW)
    # STUB: n = ...
    # END TODO
    # TODO: mask the pixels past the end of the batch (the last tile is usually partial)
    # HINT: there are N * OH * OW pixels in all.
    mask_m = offs_m < N * OH * OW
    # STUB: mask_m = ...
    # END TODO

    # Columns of the tile: output channels.
    # TODO: compute this tile's BLOCK_N output channels and mask those that do not exist
    # HINT: the same pattern as the rows, with pid_n, BLOCK_N and K.
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < K
    # STUB: offs_n = ...
    # STUB: mask_n = ...
    # END TODO

    # TODO: find the top-left corner (ih0, iw0) of each output pixel's receptive field in x
    # HINT: output pixel (oh, ow) starts `stride` input pixels further per step, minus the padding.
    # HINT: with padding the corner can be negative: those taps fall outside the image.
    ih0 = oh * stride_h - pad_h
    iw0 = ow * stride_w - pad_w
    # STUB: ih0 = ...
    # STUB: iw0 = ...
    # END TODO

    # TODO: create the float32 accumulator for the BLOCK_M x BLOCK_N output tile
    # HINT: it starts at zero; fp16 and bf16 products are summed in float32 to keep precision.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # STUB: acc = ...
    # END TODO
    offs_k = tl.arange(0, BLOCK_K)
    # The reduction runs over (r, s, c) with c innermost: one step handles one filter tap (r, s)
    # and BLOCK_K channels. Consecutive channels sit next to each other in a channels-last tensor
    # (see the launcher), so every step loads contiguous, vectorisable runs of memory.
    # TODO: count the chunks of BLOCK_K channels needed to cover C channels
    # HINT: round up, so that the last, partial chunk is included; tl.cdiv does that.
    c_blocks = tl.cdiv(C, BLOCK_K)
    # STUB: c_blocks = ...
    # END TODO
    # TODO: loop over all reduction steps: every filter tap times every channel chunk
    # HINT: one loop, not three: its index counts R * S * c_blocks steps and is decoded below.
    for step in range(0, R * S * c_blocks):
    # STUB: for step in range(...):
    # END TODO
        # TODO: decode the step into the filter tap (r, s) and the first channel c0 of the chunk
        # HINT: the channel chunk varies fastest, then s, then r: peel them off with % and //, as
        # HINT: for the pixels. c0 is a whole number of chunks, so a multiple of BLOCK_K.
        tap = step // c_blocks
        r = tap // S
        s = tap % S
        c0 = (step % c_blocks) * BLOCK_K
        # STUB: r = ...
        # STUB: s = ...
        # STUB: c0 = ...
        # END TODO
        # TODO: compute the input row ih and column iw that tap (r, s) reads for every pixel
        # HINT: move from the receptive field's corner by the tap's offset.
        ih = ih0 + r
        iw = iw0 + s
        # STUB: ih = ...
        # STUB: iw = ...
        # END TODO
        # TODO: the padding mask: True for pixels whose tap lies inside the image (and exists)
        # HINT: a tap in the padding must read 0, and a masked-off load with other=0.0 gives 0.
        # HINT: check both ends of both coordinates, and combine with mask_m.
        in_image = mask_m & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        # STUB: in_image = ...
        # END TODO
        # TODO: compute this chunk's channel indices and mask the channels past C
        # HINT: BLOCK_K consecutive channels from c0; C is rarely a multiple of BLOCK_K.
        offs_c = c0 + offs_k
        mask_c = offs_c < C
        # STUB: offs_c = ...
        # STUB: mask_c = ...
        # END TODO
        # TODO: build the BLOCK_M x BLOCK_K block of pointers into x: rows are pixels, columns channels
        # HINT: an element's offset is the sum of each coordinate (n, c, ih, iw) times its stride.
        # HINT: per-pixel terms go down the rows ([:, None]), per-channel terms across the columns ([None, :]).
        x_ptrs = (x_ptr + (n * x_stride_n + ih * x_stride_h + iw * x_stride_w)[:, None]
                  + offs_c[None, :] * x_stride_c)
        # STUB: x_ptrs = ...
        # END TODO
        # TODO: load the patch tile, reading 0 in the padding and past the last channel
        # HINT: the mask combines the per-pixel mask (rows) with the channel mask (columns).
        x_tile = tl.load(x_ptrs, mask=in_image[:, None] & mask_c[None, :], other=0.0)
        # STUB: x_tile = ...
        # END TODO
        # TODO: build the BLOCK_K x BLOCK_N block of pointers to the weights of tap (r, s)
        # HINT: rows are channels, columns output channels; r and s are the same for the whole tile.
        w_ptrs = (w_ptr + offs_c[:, None] * w_stride_c + offs_n[None, :] * w_stride_k
                  + r * w_stride_r + s * w_stride_s)
        # STUB: w_ptrs = ...
        # END TODO
        # TODO: load the weight tile, with 0 for missing channels and output channels
        # HINT: zeros in either operand add nothing to the dot product, so masked lanes are harmless.
        w_tile = tl.load(w_ptrs, mask=mask_c[:, None] & mask_n[None, :], other=0.0)
        # STUB: w_tile = ...
        # END TODO
        # TODO: multiply the tiles and add the product to the accumulator
        # HINT: tl.dot takes the accumulator as its third argument and adds into it (on tensor cores).
        acc = tl.dot(x_tile, w_tile, acc)
        # STUB: acc = ...
        # END TODO

    if HAS_BIAS:
        # TODO: load the bias of this tile's output channels
        # HINT: one value per column of the tile; mask the channels past K.
        bias = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
        # STUB: bias = ...
        # END TODO
        # TODO: add the bias to every row of the accumulator
        # HINT: bias holds one value per column: make it a 1 x BLOCK_N row so that it broadcasts
        # HINT: down all BLOCK_M rows. Add it in float32.
        acc += bias[None, :].to(tl.float32)
        # END TODO

    # TODO: convert the float32 sums to the output's dtype
    # HINT: a pointer knows the type it points to: out_ptr.dtype.element_ty.
    out_tile = acc.to(out_ptr.dtype.element_ty)
    # STUB: out_tile = ...
    # END TODO
    # The output is channels-last too (the launcher allocates it so): the BLOCK_N channels of one
    # pixel are neighbours in memory, so each row of the tile is one contiguous run and the store
    # is wide and coalesced. (Storing into plain NCHW, where channels are OH * OW apart, made this
    # kernel three times slower on an H200.)
    # TODO: build the BLOCK_M x BLOCK_N block of output pointers (pixels down, channels across)
    # HINT: as for x: each coordinate (n, k, oh, ow) times its stride, summed.
    out_ptrs = (out_ptr + (n * out_stride_n + oh * out_stride_h + ow * out_stride_w)[:, None]
                + offs_n[None, :] * out_stride_k)
    # STUB: out_ptrs = ...
    # END TODO
    # TODO: store the tile, masked to the pixels and channels that exist
    # HINT: the mask has the pointers' shape: valid pixels down, valid channels across.
    tl.store(out_ptrs, out_tile, mask=mask_m[:, None] & mask_n[None, :])
    # END TODO


def _pair(value, name: str) -> tuple[int, int]:
    """(h, w) from an int or a pair of ints, like torch's `stride=2` or `padding=(2, 0)`."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    if is_int(value):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(is_int(v) for v in value):
        return value[0], value[1]
    raise TypeError(f"{name} must be an int or a pair of ints (h, w), got {value!r}.")


def _check_inputs(x, weight, bias, stride, padding) -> None:
    check_tensors(("x", x), ("weight", weight))
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D (N, C, H, W), got shape {tuple(x.shape)}; "
                         "add a batch dimension with x.unsqueeze(0) for a single image.")
    if weight.dim() != 4:
        raise ValueError(f"weight must be 4-D (K, C, R, S), got shape {tuple(weight.shape)}.")
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"x has {x.shape[1]} channels but weight {tuple(weight.shape)} expects "
                         f"{weight.shape[1]}: weight must be (K, C, R, S) with x's C "
                         "(grouped convolutions are not supported).")
    if weight.shape[2] < 1 or weight.shape[3] < 1:
        raise ValueError(f"weight {tuple(weight.shape)} has an empty filter; R and S must be >= 1.")
    if bias is not None:
        check_tensors(("x", x), ("bias", bias))
        if tuple(bias.shape) != (weight.shape[0],):
            raise ValueError(f"bias must have shape ({weight.shape[0]},), one value per output "
                             f"channel, got {tuple(bias.shape)}.")
    if min(stride) < 1:
        raise ValueError(f"stride must be positive, got {stride}.")
    if min(padding) < 0:
        raise ValueError(f"padding must be non-negative, got {padding}.")
    padded = (x.shape[2] + 2 * padding[0], x.shape[3] + 2 * padding[1])
    if padded[0] < weight.shape[2] or padded[1] < weight.shape[3]:
        raise ValueError(f"the {weight.shape[2]}x{weight.shape[3]} filter is larger than the "
                         f"padded input ({padded[0]}x{padded[1]}), so the output would be empty; "
                         "use a smaller filter or more padding.")


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride=1, padding=0) -> torch.Tensor:
    """torch.nn.functional.conv2d for x (N, C, H, W), weight (K, C, R, S), bias (K,) or None.

    stride and padding are ints or (h, w) pairs. Returns an (N, K, OH, OW) tensor in x's dtype,
    stored channels-last (as PyTorch's own conv2d returns for channels-last inputs); call
    .contiguous() on it if you need packed NCHW memory. Any memory layout of x and weight is
    accepted; channels-last tensors are read as they are, others are copied to channels-last first.
    """
    stride_h, stride_w = _pair(stride, "stride")
    pad_h, pad_w = _pair(padding, "padding")
    _check_inputs(x, weight, bias, (stride_h, stride_w), (pad_h, pad_w))
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    # TODO: compute the output height OH and width OW
    # HINT: the padded input is H + 2 * pad_h rows; the filter fits at every stride_h-th row
    # HINT: while it does not hang over the padded edge. Count those positions (integer division).
    OH = (H + 2 * pad_h - R) // stride_h + 1
    OW = (W + 2 * pad_w - S) // stride_w + 1
    # STUB: OH = ...
    # STUB: OW = ...
    # END TODO
    # TODO: allocate the output, channels-last
    # HINT: shape (N, K, OH, OW), on x's device and in x's dtype; the kernel writes every element.
    # HINT: torch.empty takes a memory_format argument, like .contiguous() below.
    out = torch.empty((N, K, OH, OW), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    # STUB: out = ...
    # END TODO
    if out.numel() == 0:  # an empty batch, or no filters: nothing to compute
        return out
    if max(t.numel() for t in (x, weight, out)) >= 2**31:
        raise ValueError("tensors of 2**31 or more elements are not supported: the kernel "
                         "computes offsets in 32-bit integers. Split the batch.")
    # The kernel follows the strides, so any layout gives the right answer; but each step reads
    # BLOCK_K consecutive channels, and only when those are adjacent in memory (channel stride 1,
    # "channels-last") can the GPU fetch them in wide, coalesced loads. An NCHW tensor keeps them
    # H * W elements apart, so it is copied once into channels-last order (see the README).
    # TODO: make channels-last copies of x and weight, unless their channel stride is already 1
    # HINT: tensor.stride(1) is the distance between neighbouring channels.
    # HINT: .contiguous() takes a memory_format argument; torch.channels_last puts channels innermost.
    if x.stride(1) != 1:
        x = x.contiguous(memory_format=torch.channels_last)
    if weight.stride(1) != 1:
        weight = weight.contiguous(memory_format=torch.channels_last)
    # STUB: x = ...
    # STUB: weight = ...
    # END TODO
    # The kernel reads bias as one contiguous vector; without bias it gets a pointer it never reads.
    has_bias = bias is not None
    bias = bias.contiguous() if has_bias else out
    # TODO: choose the grid: one program per (pixel block, output-channel block) tile
    # HINT: the autotuner picks BLOCK_M and BLOCK_N, so the grid is a function of its choice:
    # HINT: lambda meta: (...,) where meta["BLOCK_M"] is the chosen value. The grid is 1-D.
    grid = lambda meta: (triton.cdiv(N * OH * OW, meta["BLOCK_M"]) * triton.cdiv(K, meta["BLOCK_N"]),)
    # STUB: grid = ...
    # END TODO
    # TODO: launch the kernel
    # HINT: pass the arguments in the order of the kernel's signature; tensors become pointers.
    # HINT: x.stride() gives the four strides of x (in N, C, H, W order, whatever the layout).
    # HINT: HAS_BIAS tells the kernel whether to read bias; the autotuner supplies the BLOCK sizes.
    conv2d_kernel[grid](
        x, weight, bias, out,
        N, C, H, W, K, R, S, OH, OW,
        stride_h, stride_w, pad_h, pad_w,
        *x.stride(), *weight.stride(), *out.stride(),
        HAS_BIAS=has_bias,
    )
    # END TODO
    return out


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
