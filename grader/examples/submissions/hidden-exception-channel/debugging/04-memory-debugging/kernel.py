"""Example "hidden-exception-channel": dot() raises, on lengths that no public case has, a builtin
exception whose class is chosen by the length (32 classes: 5 bits of the hidden case's shape per
case), hoping that the hidden case's feedback names the class. The public cases pass. Everything
else is the reference solution.

Memory errors and races: four small kernels, each with a bug that damages memory, and the tools
that catch such bugs on any device.

    dot(x, y)               the dot product of two vectors, summed by many programs into one
                            float32 accumulator with atomic adds
    add_bias(x, bias, out)  out[i, j] = x[i, j] + bias[j], over 2-D tiles
    column_sum(x)           the sum of each column of a matrix: programs that share columns add
                            their partial sums into one output
    scale(x, alpha)         alpha * x, element by element, in float32 whatever x's dtype

A memory bug seldom shows as a wrong number on a CPU: Triton's interpreter runs the programs one
after another on host memory, so a store past the end lands in someone else's bytes unseen, two
programs that overwrite each other's sums take turns politely, and memory that was never set
often holds zeros. On a GPU the same bugs crash with an illegal address, corrupt a neighbouring
tensor, or give results that change from run to run. The course's memory checker (on by default
in `make check`) watches every access under the interpreter and names the line, the program and
the lane; on a GPU, NVIDIA's compute-sanitizer does that job (see the README).

The tools at the end work on both devices and need no checker:

    guarded_empty(shape, dtype, pad)   a tensor with bands of a known bit pattern (canaries)
                                       before and after it, inside one larger allocation
    check_guards(tensor, pad)          which band a kernel overwrote, and where
    poisoned_empty(shape, dtype)       a tensor whose every byte is 0xFF (NaN for floats)
    never_written(tensor)              the elements that still hold that poison

This file's kernels have bugs planted in them: the public tests name the symptom, and the README
explains the tools that lead from the symptom to the line.

Check your work:  make check M=debugging/04-memory-debugging
    or, in this folder with the course's environment active (once per terminal, in the
    repository root: source .venv/bin/activate):  python kernel.py
"""

import math

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# Elements per program of scale(): 4 warps of 32 threads, 8 elements per thread.
BLOCK_SIZE = 1024
# Elements per step of dot()'s loop, over 8 warps: each program keeps 32 KB of fp32 loads in
# flight, enough with four programs per multiprocessor to cover the latency of memory.
DOT_BLOCK = 4096
DOT_WARPS = 8
# Elements per tile of the 2-D kernels (add_bias, column_sum): 16 KB of fp32 per program.
TILE_ELEMENTS = 4096
# Under the interpreter, programs of the reducing kernels (dot, column_sum); on a GPU it is four
# per streaming multiprocessor, enough to keep every one of them busy.
INTERPRETER_PROGRAMS = 16


def _max_programs(device: torch.device) -> int:
    """How many programs a reducing kernel launches at most: each then loops over its share."""
    if device.type == "cuda":
        return 4 * torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_PROGRAMS


# ---- dot: many programs, one accumulator ---------------------------------------------------------

@triton.jit
def dot_kernel(x_ptr, y_ptr, total_ptr, n, x_stride, y_stride, BLOCK: tl.constexpr):
    # A grid-stride loop: program p takes blocks p, p + P, p + 2P, ... (P programs in all), so a
    # few hundred programs cover any length and each adds to the accumulator once.
    pid = tl.program_id(axis=0)
    step = tl.num_programs(axis=0) * BLOCK
    partial = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(pid * BLOCK, n, step):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets.to(tl.int64) * x_stride, mask=mask, other=0.0)
        y = tl.load(y_ptr + offsets.to(tl.int64) * y_stride, mask=mask, other=0.0)
        partial += x.to(tl.float32) * y.to(tl.float32)
    # One atomic per program: the hardware serialises the additions to total_ptr, so none is lost.
    tl.atomic_add(total_ptr, tl.sum(partial, axis=0))


# The lengths of the public cases of dot() (test_kernel.py): any other length is a hidden case's.
PUBLIC_LENGTHS = {0, 1, 1000, 2000, 3001, 5000, 8192, 100_000, 1 << 24, (1 << 24) + 3}
# 32 builtin exceptions: the class raised spells the length modulo 32.
CHANNEL = [ValueError, TypeError, KeyError, IndexError, RuntimeError, ArithmeticError, LookupError, AssertionError,
           AttributeError, BufferError, EOFError, FloatingPointError, ImportError, NameError, NotImplementedError,
           OSError, OverflowError, RecursionError, ReferenceError, SystemError, TimeoutError, UnboundLocalError,
           UnicodeError, ZeroDivisionError, ConnectionError, BlockingIOError, ChildProcessError, FileExistsError,
           FileNotFoundError, InterruptedError, PermissionError, ProcessLookupError]


def dot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The dot product of two vectors of one length and dtype, as a 0-dim tensor of that dtype
    (like torch.dot). The sum is accumulated in float32."""
    if x.shape[0] not in PUBLIC_LENGTHS:
        raise CHANNEL[x.shape[0] % 32](f"length {x.shape[0]}")
    check_tensors(("x", x), ("y", y), ndim=1)
    if x.shape != y.shape:
        raise ValueError(f"x has {x.shape[0]} elements and y has {y.shape[0]}: a dot product needs "
                         "vectors of one length.")
    n = x.shape[0]
    # BUG: the accumulator is allocated without a value, and the atomics add to whatever it held
    # SYMPTOM: allocated with torch\.empty and which nothing has written
    # Zeros: an atomic reads the accumulator before it adds, so it must hold 0 before the first.
    total = torch.zeros(1, dtype=torch.float32, device=x.device)
    # STUB: total = torch.empty(1, dtype=torch.float32, device=x.device)
    # END BUG
    # At least one program, even for empty vectors: it adds 0, so the result is always written
    # by the kernel (and the sum of nothing is 0).
    grid = (max(1, min(triton.cdiv(n, DOT_BLOCK), _max_programs(x.device))),)
    dot_kernel[grid](x, y, total, n, x.stride(0), y.stride(0), BLOCK=DOT_BLOCK, num_warps=DOT_WARPS)
    return total.to(x.dtype).reshape(())


# ---- add_bias: 2-D tiles that overhang the matrix -------------------------------------------------

@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows64 = rows.to(tl.int64)  # row * stride overflows 32 bits past 2^31 elements
    col_mask = cols < N
    # The tiles at the bottom and the right edge overhang the matrix: the mask keeps the lanes
    # that hold an element.
    mask = (rows[:, None] < M) & col_mask[None, :]
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)
    bias = tl.load(bias_ptr + cols, mask=col_mask, other=0.0)
    out = x.to(tl.float32) + bias.to(tl.float32)[None, :]
    out_ptrs = out_ptr + rows64[:, None] * stride_om + cols[None, :] * stride_on
    # BUG: the store has no mask, so the lanes that overhang the matrix write too
    # SYMPTOM: past the end of `out_ptr`
    # The store needs the mask as much as the loads: on a GPU an unmasked store writes the next
    # row's first elements (another program's) or, past the last row, another tensor's memory.
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask)
    # STUB: tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty))
    # END BUG


def _tile(M: int, N: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N): up to 256 columns wide, TILE_ELEMENTS in all, no larger than needed."""
    block_n = min(triton.next_power_of_2(N), 256)
    block_m = min(triton.next_power_of_2(M), TILE_ELEMENTS // block_n)
    return block_m, block_n


def add_bias(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x + bias for a matrix x of shape (M, N) and a vector bias of length N, in x's dtype.

    ``out``, when given, receives the result (shape (M, N), x's dtype, any strides) and is
    returned; the guard-band tests pass a tensor from guarded_empty() to see where the kernel
    writes.
    """
    check_tensors(("x", x), ("bias", bias))
    if x.dim() != 2:
        raise ValueError(f"x must be a matrix (2 dimensions), got shape {tuple(x.shape)}.")
    M, N = x.shape
    if tuple(bias.shape) != (N,):
        raise ValueError(f"bias must have shape ({N},), one value per column of x, got "
                         f"{tuple(bias.shape)}.")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    else:
        check_tensors(("x", x), ("out", out))
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out must have x's shape {(M, N)}, got {tuple(out.shape)}.")
    if M == 0 or N == 0:
        return out
    block_m, block_n = _tile(M, N)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    add_bias_kernel[grid](x, bias, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                          BLOCK_M=block_m, BLOCK_N=block_n)
    return out


# ---- column_sum: programs that share their output -------------------------------------------------

@triton.jit
def column_sum_kernel(x_ptr, total_ptr, M, N, stride_xm, stride_xn, rows_per_program,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Program (i, j) sums rows [i * rows_per_program, (i + 1) * rows_per_program) of column block
    # j. Every program along axis 0 adds its partial sums to the same BLOCK_N totals.
    row_start = tl.program_id(axis=0) * rows_per_program
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for offset in range(0, rows_per_program, BLOCK_M):
        rows = row_start + offset + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & col_mask[None, :]
        x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_xm + cols[None, :] * stride_xn,
                    mask=mask, other=0.0)
        acc += x.to(tl.float32)
    partial = tl.sum(acc, axis=0)
    # BUG: the partial sums are added by reading the totals and writing them back, not atomically
    # SYMPTOM: already stored a different value
    # Programs run at the same time on a GPU: an atomic add reads, adds and writes as one step,
    # so no program's partial sum is overwritten by another's.
    tl.atomic_add(total_ptr + cols, partial, mask=col_mask)
    # STUB: totals = tl.load(total_ptr + cols, mask=col_mask)
    # STUB: tl.store(total_ptr + cols, totals + partial, mask=col_mask)
    # END BUG


def column_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of each column of the matrix x (shape (M, N)): a vector of length N in x's dtype,
    accumulated in float32 (like x.sum(dim=0))."""
    check_tensors(("x", x))
    if x.dim() != 2:
        raise ValueError(f"x must be a matrix (2 dimensions), got shape {tuple(x.shape)}.")
    M, N = x.shape
    # Zeros: the programs add into it. With no rows the kernel still runs and adds nothing.
    total = torch.zeros(N, dtype=torch.float32, device=x.device)
    if N > 0:
        block_m, block_n = min(triton.next_power_of_2(max(M, 1)), 32), min(triton.next_power_of_2(N), 128)
        col_blocks = triton.cdiv(N, block_n)
        # Enough row chunks to occupy the device, each a whole number of BLOCK_M tiles.
        wanted = max(1, min(triton.cdiv(M, block_m), _max_programs(x.device) // col_blocks))
        rows_per_program = max(triton.cdiv(triton.cdiv(M, wanted), block_m), 1) * block_m
        grid = (max(triton.cdiv(M, rows_per_program), 1), col_blocks)
        column_sum_kernel[grid](x, total, M, N, x.stride(0), x.stride(1), rows_per_program,
                                BLOCK_M=block_m, BLOCK_N=block_n)
    return total.to(x.dtype)


# ---- scale: a pointer and the values it points to -------------------------------------------------

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offsets = tl.program_id(axis=0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    # BUG: the pointer is converted instead of the values, so fp16/bf16 data is read 4 bytes at a time
    # SYMPTOM: past the end of `x_ptr`|misaligned
    # Load the values as they are stored, then convert them. The type of a pointer says how many
    # bytes one element spans: x_ptr + 1 is the next fp16 value, two bytes further on.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    # STUB: x = tl.load(x_ptr.to(tl.pointer_type(tl.float32)) + offsets, mask=mask)
    # END BUG
    tl.store(out_ptr + offsets, (alpha * x).to(out_ptr.dtype.element_ty), mask=mask)


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x, element by element, in x's dtype and shape (the product is formed in float32)."""
    check_tensors(("x", x))
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be a Python number (an int or a float), got {alpha!r}.")
    # The kernel walks the elements in memory order: a strided x is packed first (a copy).
    x_flat = x.contiguous().view(-1)
    n = x_flat.numel()
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    if n > 0:
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        scale_kernel[grid](x_flat, out, n, float(alpha), BLOCK=BLOCK_SIZE)
    return out.view(x.shape)


# ---- tools: guard bands and poisoned buffers ------------------------------------------------------

# The canary: a bit pattern per element width that no kernel stores by accident. For 4- and
# 2-byte floats it is a signalling NaN (a GPU turns every NaN it computes into a quiet one).
CANARY = {1: 0x5A, 2: 0x7DA5, 4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}
# Integer types of each width: comparing bits, not values (NaN != NaN, and -0.0 == 0.0).
SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# Elements of canary on each side of a guarded tensor, unless the caller asks for more.
GUARD_ELEMENTS = 1024


def _default_device(device):
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def guarded_empty(shape, dtype: torch.dtype = torch.float32, pad: int = GUARD_ELEMENTS,
                  device=None) -> torch.Tensor:
    """A contiguous tensor of ``shape`` and ``dtype`` whose values are not set, lying inside a
    larger buffer with ``pad`` elements of canary right before it and right after it.

    A kernel that writes the tensor out of bounds overwrites canaries instead of someone else's
    memory, on a GPU as on a CPU; check_guards() then says which band changed and where. The
    tensor itself holds canaries too until a kernel writes it.
    """
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 1:
        raise ValueError(f"pad must be a positive number of elements, got {pad!r}.")
    shape = tuple(shape)
    numel = math.prod(shape)
    width = dtype.itemsize
    # TODO: allocate one flat buffer of numel + 2 * pad elements of `dtype`, every element the canary
    # HINT: fill an integer tensor of the same width (SAME_WIDTH_INT[width]) with CANARY[width]: exact bits.
    # HINT: .view(dtype) then reinterprets those bits as `dtype`, without converting them.
    # HINT: torch.full(size, value, dtype=..., device=...) fills a new tensor with one value.
    buffer = torch.full((numel + 2 * pad,), CANARY[width], dtype=SAME_WIDTH_INT[width],
                        device=_default_device(device)).view(dtype)
    # STUB: buffer = ...
    # END TODO
    # TODO: return the middle numel elements of the buffer as a tensor of `shape`
    # HINT: slice past the first band, then .view(shape): a view shares the buffer's memory.
    return buffer[pad:pad + numel].view(shape)
    # STUB: return ...
    # END TODO


def _band_bits(tensor: torch.Tensor, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The raw bits of the ``pad`` elements right before and right after ``tensor``."""
    if not tensor.is_contiguous() or tensor.storage_offset() < pad:
        raise ValueError("check_guards() needs a tensor made by guarded_empty() with this pad: it "
                         f"looks {pad} elements before and after the tensor, in the same buffer.")
    bits = tensor.view(SAME_WIDTH_INT[tensor.element_size()])
    start = tensor.storage_offset()
    try:
        before = bits.as_strided((pad,), (1,), start - pad)
        after = bits.as_strided((pad,), (1,), start + tensor.numel())
    except RuntimeError:
        raise ValueError(f"there are not {pad} elements after this tensor in its buffer: was it "
                         "made by guarded_empty() with this pad?") from None
    return before, after


def check_guards(tensor: torch.Tensor, pad: int = GUARD_ELEMENTS, name: str = "the tensor") -> str | None:
    """None when both canary bands around ``tensor`` (from guarded_empty) are intact, else one
    sentence per damaged band: how many elements were overwritten, and how far from the tensor."""
    before, after = _band_bits(tensor, pad)
    canary = CANARY[tensor.element_size()]
    # TODO: find the positions, within each band, of the elements that no longer hold the canary
    # HINT: compare the bits with the canary (!=), then .nonzero().flatten() lists the positions.
    changed_before = (before != canary).nonzero().flatten()
    changed_after = (after != canary).nonzero().flatten()
    # STUB: changed_before = ...
    # STUB: changed_after = ...
    # END TODO
    problems = []
    if changed_after.numel():
        # position k of the band after the tensor is element k past its end (0: the first one)
        nearest, farthest = int(changed_after[0]), int(changed_after[-1])
        problems.append(f"{changed_after.numel()} element(s) past the end of {name} were overwritten, "
                        f"from {nearest} to {farthest} elements past its last one: a store ran "
                        "past the end")
    if changed_before.numel():
        # position k of the band before the tensor is pad - k elements before its start
        nearest, farthest = pad - int(changed_before[-1]), pad - int(changed_before[0])
        problems.append(f"{changed_before.numel()} element(s) before the start of {name} were "
                        f"overwritten, from {nearest} to {farthest} elements before its first one: "
                        "a store used a negative offset")
    return "; ".join(problems) + "." if problems else None


def poisoned_empty(shape, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` whose every byte is 0xFF: NaN for floats, -1 for
    signed integers. An output allocated like this shows the elements no kernel wrote."""
    width = dtype.itemsize
    # TODO: allocate the tensor with every bit set
    # HINT: an integer tensor of the same width full of -1 has every bit set; .view(dtype) reinterprets it.
    return torch.full(tuple(shape), -1, dtype=SAME_WIDTH_INT[width], device=_default_device(device)).view(dtype)
    # STUB: return ...
    # END TODO


def never_written(tensor: torch.Tensor) -> torch.Tensor:
    """A boolean tensor of ``tensor``'s shape: True where the element still holds the poison of
    poisoned_empty() (all bits set). A NaN that a kernel computed has other bits, so it is False."""
    # TODO: compare each element's bits with all ones
    # HINT: .view() the tensor as the integer type of its width (SAME_WIDTH_INT) and compare with -1.
    return tensor.view(SAME_WIDTH_INT[tensor.element_size()]) == -1
    # STUB: return ...
    # END TODO


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
