"""The memory-bug corpus: small Triton kernels with one planted memory bug each, and a few clean
controls, to measure the interpreter's memory checker (``grader.core.memcheck``) and to hold it
against the GPU's tools (compute-sanitizer's memcheck, racecheck and initcheck, Triton's GSan).

Each ``Bug`` names its kernel, a launcher that builds the inputs and launches (and returns the
tensors a caller reads afterwards), the finding the checker should give (``kind``: out-of-bounds,
misaligned, race, uninitialised-read, unwritten-output; empty for a clean control), the source
line of the faulty access (the line ending in the marker ``# planted``) and which GPU tools are
expected to see it (``gpu_tools``). Where the checker cannot see a bug, ``missed_by_checker`` says
why; ``tests/authoring/test_memory_corpus.py`` holds the checker to exactly those misses.

    python -m grader.authoring.memory_corpus                 # every entry under the checker, timed
                                                             # against the plain interpreter
    python -m grader.authoring.memory_corpus --tool plain    # the kernels alone
    python -m grader.authoring.memory_corpus --list          # the entries and the GPU tools for each
    python -m grader.authoring.memory_corpus --only NAME     # one entry (names may be comma-separated)
    python -m grader.authoring.memory_corpus --json          # the checker's verdicts, a JSON line each

On a GPU the same launchers run natively (``--tool plain``; the checker watches the interpreter
only), one entry per process since a fault leaves the CUDA context unusable. One command runs
every entry (or ``--only``) under compute-sanitizer's memcheck, racecheck and initcheck and under
GSan (where Triton has it), ``--jobs`` processes at a time, and under the checker on the same
machine, then prints the tools and the checker side by side (``grader.authoring.sanitizers``)::

    python -m grader.authoring.memory_corpus --sanitizers OUT_DIR [--jobs 8] [--timeout 120] [--only ...]

Each of its runs is one of these (GSan wants the caching allocator, hence ``=0`` there)::

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 99 \\
        python -m grader.authoring.memory_corpus --tool plain --only load-tail-no-mask
    PYTORCH_NO_CUDA_MEMORY_CACHING=0 python -m triton.tools.gsan grader/authoring/memory_corpus.py \\
        --tool plain --only sum-with-plain-store
    GRADER_DEVICE=cpu python -m grader.authoring.memory_corpus --json --only load-tail-no-mask

PyTorch's caching allocator hands out pieces of larger blocks and recycles memory that other
kernels wrote, which hides small overruns from memcheck and fresh memory from initcheck:
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (set by ``main`` unless given) makes every tensor its own
allocation. After each launch the plain run reads the returned tensors with a PyTorch kernel, so
that initcheck sees an unwritten output being read. ``gpu_tools`` is what the tools are documented
to cover: racecheck watches shared memory only, so no race here (all in global memory between
programs) is expected of it; GSan is for races in global memory (write-after-write, read-after-write,
write-after-read) and samples its readers, so it may need several runs.

Under the interpreter every tensor of a launcher sits in the middle of a larger zeroed block of
its own (``_fresh``): an overrun lands in memory this process owns and no other argument holds,
so the plain run cannot crash or corrupt the process and the checker's verdict does not depend on
where the heap put two tensors (its messages therefore say an overrun is still inside the memory the
tensor is a view of). On a GPU each tensor is its own allocation. A pointer one byte past a tensor's
start (an object whose ``data_ptr()`` adds 1) cannot be passed under the interpreter, which rebuilds
every argument from its storage: the misaligned entries cut byte views, or cast the pointer inside
the kernel, instead.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton
import triton.language as tl

from grader.authoring import sanitizers
from grader.authoring.text_table import aligned
from grader.core import device
from grader.core.memcheck import Finding, MemoryChecker, MemoryFault

MARKER = "# planted"
KINDS = ("out-of-bounds", "misaligned", "race", "uninitialised-read", "unwritten-output")
GPU_TOOLS = ("memcheck", "racecheck", "initcheck", "gsan")
PAD = 256  # elements of room on each side of a tensor under the interpreter


@dataclass(frozen=True)
class Bug:
    name: str
    kind: str  # the finding expected of the checker (KINDS); "" for a clean control
    kernel: object  # the @triton.jit function holding the faulty access
    launch: Callable[[], dict[str, torch.Tensor]]  # builds inputs, launches; returns what a caller reads
    what: str  # the bug in one sentence
    gpu_tools: tuple[str, ...] = ()  # which of GPU_TOOLS should report it
    missed_by_checker: str = ""  # why the checker cannot see it ("" if it should)

    @property
    def clean(self) -> bool:
        return not self.kind

    @property
    def line(self) -> int:
        """The line of the faulty access: the line marked ``# planted`` in the kernel, else in the
        launcher (a grid too small); 0 for a clean control."""
        if self.clean:
            return 0
        for source in (self.kernel.fn, self.launch):
            lines, start = inspect.getsourcelines(source)
            for offset, text in enumerate(lines):
                if MARKER in text:
                    return start + offset
        return 0


# -- tensors ---------------------------------------------------------------------------------------


def _fresh(values: torch.Tensor) -> torch.Tensor:
    """``values`` on the kernel's device: on a GPU its own allocation; under the interpreter a view
    in the middle of a zeroed block PAD elements larger on each side (see the module's docstring)."""
    if device.is_cuda():
        return values.to("cuda")
    base = torch.zeros(values.numel() + 2 * PAD, dtype=values.dtype)
    view = base[PAD : PAD + values.numel()].view(values.shape)
    view.copy_(values)
    return view


def _empty(*shape: int, dtype=torch.float32) -> torch.Tensor:
    """A tensor from torch.empty, as a learner allocates an output (the checker tracks these)."""
    return torch.empty(*shape, dtype=dtype, device=device.torch_device())


def _randn(*shape: int) -> torch.Tensor:
    return _fresh(torch.randn(*shape))


def _zeros(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return _fresh(torch.zeros(*shape, dtype=dtype))


# -- out of bounds ---------------------------------------------------------------------------------


@triton.jit
def load_tail_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # planted
    tl.store(out_ptr + offs, x * 2.0, mask=offs < n)


def _load_tail():
    x, out = _randn(100), _zeros(100)
    load_tail_kernel[(triton.cdiv(100, 32),)](x, out, 100, BLOCK=32)
    return {"out": out}


@triton.jit
def store_tail_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x * 2.0)  # planted


def _store_tail():
    x, out = _randn(100), _zeros(100)
    store_tail_kernel[(triton.cdiv(100, 32),)](x, out, 100, BLOCK=32)
    return {"out": out}


@triton.jit
def row_overrun_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    x = tl.load(x_ptr + rows * N + cols, mask=(rows < M) & (cols < N), other=0.0)
    tl.store(out_ptr + rows * N + cols, x + 1.0, mask=cols < N)  # planted


def _row_overrun():
    x, out = _randn(20, 16), _zeros(20, 16)
    row_overrun_kernel[(triton.cdiv(20, 8),)](x, out, 20, 16, BLOCK_M=8, BLOCK_N=16)
    return {"out": out}


@triton.jit
def column_overrun_kernel(x_ptr, out_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols)  # planted
    tl.store(out_ptr + row * N + cols, x - tl.max(x, axis=0), mask=cols < N)


def _column_overrun():
    x, out = _randn(8, 12), _zeros(8, 12)
    column_overrun_kernel[(8,)](x, out, 12, BLOCK_N=16)  # the last row's overrun leaves the tensor
    return {"out": out}


@triton.jit
def negative_offset_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    left = tl.load(x_ptr + offs - 1, mask=offs < n, other=0.0)  # planted
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x - left, mask=offs < n)


def _negative_offset():
    x, out = _randn(64), _zeros(64)
    negative_offset_kernel[(2,)](x, out, 64, BLOCK=32)
    return {"out": out}


@triton.jit
def mask_off_by_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x * x, mask=offs <= n)  # planted


def _mask_off_by_one():
    x, out = _randn(50), _zeros(50)
    mask_off_by_one_kernel[(2,)](x, out, 50, BLOCK=32)
    return {"out": out}


@triton.jit
def wrong_stride_kernel(x_ptr, out_ptr, stride_row, stride_col, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    x = tl.load(x_ptr + rows * stride_col + cols * stride_row)  # planted
    tl.store(out_ptr + rows * stride_row + cols * stride_col, x)


def _wrong_stride():
    x, out = _randn(8, 16), _zeros(8, 16)
    wrong_stride_kernel[(1,)](x, out, x.stride(0), x.stride(1), BLOCK_M=8, BLOCK_N=16)
    return {"out": out}


@triton.jit
def bias_offsets_kernel(x_ptr, bias_ptr, out_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0)
    b = tl.load(bias_ptr + row * N + cols, mask=cols < N, other=0.0)  # planted
    tl.store(out_ptr + row * N + cols, x + b, mask=cols < N)


def _bias_offsets():
    x, bias, out = _randn(6, 16), _randn(16), _zeros(6, 16)
    bias_offsets_kernel[(6,)](x, bias, out, 16, BLOCK_N=16)
    return {"out": out}


@triton.jit
def gather_kernel(table_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    idx = tl.load(idx_ptr + offs, mask=offs < n, other=0)
    row = tl.load(table_ptr + idx, mask=offs < n, other=0.0)  # planted
    tl.store(out_ptr + offs, row, mask=offs < n)


def _gather_past_end():
    table, out = _randn(16), _zeros(8)
    idx = _fresh(torch.tensor([3, 0, 15, 16, 2, 7, 1, 9], dtype=torch.int32))  # 16: one past the table
    gather_kernel[(1,)](table, idx, out, 8, BLOCK=8)
    return {"out": out}


def _gather_negative():
    table, out = _randn(16), _zeros(8)
    idx = _fresh(torch.tensor([3, 0, -1, 5, 2, -1, 1, 9], dtype=torch.int32))  # -1: a padding index
    gather_kernel[(1,)](table, idx, out, 8, BLOCK=8)  # the same gather, other indices
    return {"out": out}


@triton.jit
def histogram_overflow_kernel(x_ptr, hist_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    bins = (x * NBINS).to(tl.int32)  # x == 1.0 gives bin NBINS
    tl.atomic_add(hist_ptr + bins, 1, mask=offs < n)  # planted


def _histogram_overflow():
    x = _fresh(torch.linspace(0, 1, 40))  # ends at exactly 1.0
    hist = _zeros(8, dtype=torch.int32)
    histogram_overflow_kernel[(2,)](x, hist, 40, NBINS=8, BLOCK=32)
    return {"hist": hist}


@triton.jit
def view_end_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x)  # planted


def _view_end():
    x, big = _randn(12), _zeros(32)
    out = big[8:20]  # a view: the 4 stores too many land in big[20:24]
    view_end_kernel[(1,)](x, out, 12, BLOCK=16)
    return {"big": big}


@triton.jit
def int32_as_int64_kernel(idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    wide = idx_ptr.to(tl.pointer_type(tl.int64))  # written for int64 indices
    idx = tl.load(wide + offs, mask=offs < n, other=0)  # planted
    tl.store(out_ptr + offs, idx, mask=offs < n)


def _int32_as_int64():
    idx = _fresh(torch.arange(32, dtype=torch.int32))  # int32: half the bytes the kernel reads
    out = _zeros(32, dtype=torch.int64)
    int32_as_int64_kernel[(1,)](idx, out, 32, BLOCK=32)
    return {"out": out}


@triton.jit
def loop_tail_kernel(x_ptr, out_ptr, K, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.load(x_ptr + row * K + k + tl.arange(0, BLOCK_K))  # planted
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def _loop_tail():
    x, out = _randn(4, 40), _zeros(4)
    loop_tail_kernel[(4,)](x, out, 40, BLOCK_K=16)  # the last chunk of the last row leaves the tensor
    return {"out": out}


@triton.jit
def view_gap_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    x = tl.load(x_ptr + rows * N + cols)  # planted
    tl.store(out_ptr + rows * N + cols, x)


def _view_gap():
    base, out = _randn(8, 16), _zeros(8, 8)
    x = base[:, :8]  # row stride 16: the kernel assumes 8, so rows 1.. are read from the gaps
    view_gap_kernel[(1,)](x, out, 8, 8, BLOCK_M=8, BLOCK_N=8)
    return {"out": out}


@triton.jit
def into_neighbour_kernel(a_ptr, b_ptr, out_ptr, n_a, n_b, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(a_ptr + offs, mask=offs < n_a + n_b, other=0.0)  # planted
    tl.store(out_ptr + offs, x, mask=offs < n_a + n_b)


def _into_neighbour():
    packed, out = _randn(64), _zeros(64)
    a, b = packed.split([32, 32])  # the kernel should switch to b_ptr after n_a elements
    into_neighbour_kernel[(1,)](a, b, out, 32, 32, BLOCK=64)
    return {"out": out}


# -- misaligned ------------------------------------------------------------------------------------


@triton.jit
def bytes_as_floats_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # planted
    tl.store(out_ptr + offs, x, mask=offs < n)


def _bytes_as_floats():
    raw = _randn(17).view(torch.uint8)[1 : 1 + 4 * 16]  # a byte view at an odd offset
    out = _zeros(16)
    bytes_as_floats_kernel[(1,)](triton.reinterpret(raw, tl.float32), out, 16, BLOCK=16)
    return {"out": out}


@triton.jit
def half_as_float_kernel(h_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    pairs = h_ptr.to(tl.pointer_type(tl.float32))  # two halves read as one float32
    x = tl.load(pairs + offs, mask=offs < n, other=0.0)  # planted
    tl.store(out_ptr + offs, x, mask=offs < n)


def _half_as_float():
    h, out = _fresh(torch.randn(34).half()), _zeros(16)
    half_as_float_kernel[(1,)](h[1:], out, 16, BLOCK=16)  # h[1:] starts 2 bytes into a float32
    return {"out": out}


@triton.jit
def odd_int32_as_int64_kernel(idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    wide = idx_ptr.to(tl.pointer_type(tl.int64))
    idx = tl.load(wide + offs, mask=offs < n, other=0)  # planted
    tl.store(out_ptr + offs, idx, mask=offs < n)


def _odd_int32_as_int64():
    idx = _fresh(torch.arange(34, dtype=torch.int32))
    out = _zeros(16, dtype=torch.int64)
    odd_int32_as_int64_kernel[(1,)](idx[1:], out, 16, BLOCK=16)  # 4 bytes into an int64
    return {"out": out}


# -- races between programs ------------------------------------------------------------------------


@triton.jit
def halo_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    lane = tl.arange(0, BLOCK)
    offs = tl.program_id(0) * (BLOCK - 2) + lane  # tiles overlap: one element of halo on each side
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    left = tl.load(x_ptr + offs - 1, mask=(offs < n) & (lane > 0), other=0.0)
    right = tl.load(x_ptr + offs + 1, mask=(offs + 1 < n) & (lane < BLOCK - 1), other=0.0)
    tl.store(out_ptr + offs, left + x + right, mask=offs < n)  # planted


def _halo():
    x, out = _randn(62), _zeros(62)
    halo_kernel[(triton.cdiv(62 - 2, 14),)](x, out, 62, BLOCK=16)
    return {"out": out}


@triton.jit
def plain_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(x, axis=0))  # planted


def _plain_sum():
    x, out = _randn(128), _zeros(1)
    plain_sum_kernel[(4,)](x, out, 128, BLOCK=32)
    return {"out": out}


@triton.jit
def read_modify_write_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    total = tl.load(out_ptr)
    tl.store(out_ptr, total + tl.sum(x, axis=0))  # planted


def _read_modify_write():
    x, out = _randn(128), _zeros(1)
    read_modify_write_kernel[(4,)](x, out, 128, BLOCK=32)
    return {"out": out}


@triton.jit
def histogram_no_atomic_kernel(x_ptr, hist_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    bins = x % NBINS
    counts = tl.load(hist_ptr + bins, mask=offs < n, other=0)
    tl.store(hist_ptr + bins, counts + 1, mask=offs < n)  # planted


def _histogram_no_atomic():
    x = _fresh(torch.arange(64, dtype=torch.int32))
    hist = _zeros(8, dtype=torch.int32)
    histogram_no_atomic_kernel[(4,)](x, hist, 64, NBINS=8, BLOCK=16)
    return {"hist": hist}


@triton.jit
def split_k_kernel(a_ptr, v_ptr, out_ptr, M, K, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ks = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
    v = tl.load(v_ptr + ks, mask=ks < K, other=0.0)
    tl.store(out_ptr + rows, tl.sum(a * v[None, :], axis=1), mask=rows < M)  # planted


def _split_k():
    a, v, out = _randn(4, 32), _randn(32), _zeros(4)
    split_k_kernel[(1, 2)](a, v, out, 4, 32, BLOCK_M=4, BLOCK_K=16)
    return {"out": out}


@triton.jit
def read_after_write_kernel(x_ptr, partial_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    total = tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0)
    tl.store(partial_ptr + pid, total)
    before = tl.load(partial_ptr + pid - 1, mask=pid > 0, other=0.0)  # planted
    tl.store(out_ptr + pid, before + total)


def _read_after_write():
    x, partial, out = _randn(128), _zeros(4), _zeros(4)
    read_after_write_kernel[(4,)](x, partial, out, 128, BLOCK=32)
    return {"out": out}


@triton.jit
def shift_in_place_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    following = tl.load(x_ptr + offs + 1, mask=offs + 1 < n, other=0.0)
    tl.store(x_ptr + offs, following, mask=offs < n)  # planted (overwrites what program p - 1 loaded)


def _shift_in_place():
    x = _randn(64)
    shift_in_place_kernel[(4,)](x, 64, BLOCK=16)  # program p reads the first element of p + 1's tile
    return {"x": x}


# -- uninitialised reads ---------------------------------------------------------------------------


@triton.jit
def empty_input_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # planted
    tl.store(out_ptr + offs, x + 1.0, mask=offs < n)


def _empty_input():
    x, out = _empty(64), _zeros(64)  # x was meant to be filled first
    empty_input_kernel[(2,)](x, out, 64, BLOCK=32)
    return {"out": out}


@triton.jit
def partial_init_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # planted
    tl.store(out_ptr + offs, x * 0.5, mask=offs < n)


def _partial_init():
    x, out = _empty(64), _zeros(64)
    x[:48] = 1.0  # the last 16 elements are never set
    partial_init_kernel[(2,)](x, out, 64, BLOCK=32)
    return {"out": out}


@triton.jit
def partials_kernel(x_ptr, ws_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ws_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@triton.jit
def combine_kernel(ws_ptr, out_ptr, P, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    parts = tl.load(ws_ptr + offs, mask=offs < P, other=0.0)  # planted
    tl.store(out_ptr, tl.sum(parts, axis=0))


def _workspace_order():
    x, ws, out = _randn(128), _empty(4), _zeros(1)
    combine_kernel[(1,)](ws, out, 4, BLOCK=4)  # launched before the kernel that fills ws
    partials_kernel[(4,)](x, ws, 128, BLOCK=32)
    return {"out": out}


@triton.jit
def accumulate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    acc = tl.load(out_ptr + offs, mask=offs < n, other=0.0)  # planted
    tl.store(out_ptr + offs, acc + x, mask=offs < n)


def _accumulate_into_empty():
    x, out = _randn(64), _empty(64)  # out += x on an output never zeroed
    accumulate_kernel[(2,)](x, out, 64, BLOCK=32)
    return {"out": out}


@triton.jit
def atomic_into_empty_kernel(x_ptr, hist_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(hist_ptr + x % NBINS, 1, mask=offs < n)  # planted


def _atomic_into_empty():
    x, hist = _fresh(torch.arange(64, dtype=torch.int32)), _empty(8, dtype=torch.int32)
    atomic_into_empty_kernel[(2,)](x, hist, 64, NBINS=8, BLOCK=32)
    return {"hist": hist}


@triton.jit
def padded_columns_kernel(x_ptr, out_ptr, stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride + cols)  # planted
    tl.store(out_ptr + row * N + cols, x, mask=cols < N)


def _padded_columns():
    x, out = _empty(8, 16), _zeros(8, 12)
    x[:, :12] = torch.randn(8, 12)  # 4 columns of padding, never filled; the kernel reads all 16
    padded_columns_kernel[(8,)](x, out, 16, 12, BLOCK_N=16)
    return {"out": out}


# -- unwritten outputs -----------------------------------------------------------------------------


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, 3.0 * x, mask=offs < n)


def _grid_short():
    x, out = _randn(100), _empty(100)
    scale_kernel[(100 // 32,)](x, out, 100, BLOCK=32)  # planted
    return {"out": out}


@triton.jit
def mask_short_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x + 1.0, mask=offs < n - 1)  # planted


def _mask_short():
    x, out = _randn(64), _empty(64)
    mask_short_kernel[(2,)](x, out, 64, BLOCK=32)
    return {"out": out}


@triton.jit
def tile_copy_kernel(x_ptr, out_ptr, M, N, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)[:, None]
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = (rows < M) & (cols < N)
    tl.store(out_ptr + rows * N + cols, tl.load(x_ptr + rows * N + cols, mask=mask, other=0.0), mask=mask)


def _grid_missing_axis():
    x, out = _randn(16, 32), _empty(16, 32)
    tile_copy_kernel[(triton.cdiv(16, 16),)](x, out, 16, 32, BLOCK=16)  # planted
    return {"out": out}


# -- clean controls --------------------------------------------------------------------------------


@triton.jit
def atomic_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(hist_ptr + x % NBINS, 1, mask=offs < n)


@triton.jit
def strided_copy_kernel(x_ptr, out_ptr, stride_x, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    tl.store(out_ptr + rows * N + cols, tl.load(x_ptr + rows * stride_x + cols))


@triton.jit
def scale_in_place_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _clean_copy():
    x, out = _randn(100), _empty(100)
    scale_kernel[(triton.cdiv(100, 32),)](x, out, 100, BLOCK=32)
    return {"out": out}


def _clean_sum():
    x, out = _randn(128), _empty(1)
    out.zero_()
    atomic_sum_kernel[(4,)](x, out, 128, BLOCK=32)
    return {"out": out}


def _clean_histogram():
    x, hist = _fresh(torch.arange(64, dtype=torch.int32)), _zeros(8, dtype=torch.int32)
    histogram_kernel[(2,)](x, hist, 64, NBINS=8, BLOCK=32)
    return {"hist": hist}


def _clean_tiles():
    x, out = _randn(20, 40), _empty(20, 40)
    tile_copy_kernel[(triton.cdiv(20, 16), triton.cdiv(40, 16))](x, out, 20, 40, BLOCK=16)
    return {"out": out}


def _clean_strided_view():
    base, out = _randn(8, 16), _empty(8, 8)
    x = base[:, :8]
    strided_copy_kernel[(1,)](x, out, x.stride(0), 8, BLOCK_M=8, BLOCK_N=8)
    return {"out": out}


def _clean_in_place():
    x = _randn(100)
    scale_in_place_kernel[(triton.cdiv(100, 32),)](x, 100, BLOCK=32)
    return {"x": x}


def _clean_workspace():
    x, ws, out = _randn(128), _empty(4), _empty(1)
    partials_kernel[(4,)](x, ws, 128, BLOCK=32)
    combine_kernel[(1,)](ws, out, 4, BLOCK=4)
    return {"out": out}


_NO_PROVENANCE = (
    "the checker bounds each access by every tensor of the launch together, not by the tensor the "
    "pointer was made from; "
)

BUGS: list[Bug] = [
    # out of bounds
    Bug("load-tail-no-mask", "out-of-bounds", load_tail_kernel, _load_tail,
        "1-D: the last block loads without a mask past the end of x", ("memcheck",)),
    Bug("store-tail-no-mask", "out-of-bounds", store_tail_kernel, _store_tail,
        "1-D: the last block stores without a mask past the end of out", ("memcheck",)),
    Bug("row-overrun-2d", "out-of-bounds", row_overrun_kernel, _row_overrun,
        "2-D: the store masks the columns but not the rows of the last row tile", ("memcheck",)),
    Bug("column-overrun-2d", "out-of-bounds", column_overrun_kernel, _column_overrun,
        "2-D: a row of 12 loaded as 16 without a column mask (the last row leaves the tensor)", ("memcheck",)),
    Bug("negative-offset", "out-of-bounds", negative_offset_kernel, _negative_offset,
        "a left neighbour loaded at offs - 1 without masking offs == 0", ("memcheck",)),
    Bug("mask-off-by-one", "out-of-bounds", mask_off_by_one_kernel, _mask_off_by_one,
        "the store's mask is offs <= n: one element too many", ("memcheck",)),
    Bug("wrong-stride", "out-of-bounds", wrong_stride_kernel, _wrong_stride,
        # memcheck on an H100 did not report it: on a GPU the overrun lands in `out`, the
        # allocation right after x, which memcheck cannot tell from a legal access.
        "row and column strides swapped on an 8 x 16 tensor"),
    Bug("bias-with-x-offsets", "out-of-bounds", bias_offsets_kernel, _bias_offsets,
        "the bias (N) read with the offsets of x (M x N): a pointer with another tensor's offsets", ("memcheck",)),
    Bug("gather-index-past-end", "out-of-bounds", gather_kernel, _gather_past_end,
        "a gather whose index tensor holds the table's length", ("memcheck",)),
    Bug("gather-negative-index", "out-of-bounds", gather_kernel, _gather_negative,
        "a gather whose index tensor holds -1 (a padding index not masked)", ("memcheck",)),
    Bug("atomic-bin-overflow", "out-of-bounds", histogram_overflow_kernel, _histogram_overflow,
        "a histogram's atomic_add where x == 1.0 falls in bin NBINS", ("memcheck",)),
    Bug("store-past-view-end", "out-of-bounds", view_end_kernel, _view_end,
        "a store past the end of a view, into the rest of the tensor it is cut from "
        "(inside one allocation: memcheck cannot see it)", ()),
    Bug("int32-read-as-int64", "out-of-bounds", int32_as_int64_kernel, _int32_as_int64,
        "a wrong-dtype pointer: int32 indices read as int64, twice the bytes", ("memcheck",)),
    Bug("loop-tail-no-mask", "out-of-bounds", loop_tail_kernel, _loop_tail,
        "a K loop whose last chunk is not masked (K = 40, chunks of 16)", ("memcheck",)),
    Bug("wrong-stride-in-view-gap", "out-of-bounds", view_gap_kernel, _view_gap,
        "a column slice read with the row stride of a contiguous tensor: the reads fall between "
        "its rows, into the columns it leaves out (inside one allocation: memcheck cannot see it)", (),
        missed_by_checker="a view is bounded by its first and last byte, and the gaps between the "
        "rows of a column slice lie inside that span; refusing them would turn the course's planted "
        "'strided tensor read as if contiguous' mistakes into out-of-bounds stops instead of the "
        "comparison's diagnosis"),
    Bug("pointer-into-neighbour", "out-of-bounds", into_neighbour_kernel, _into_neighbour,
        "a concatenation that reads both halves through a's pointer; b happens to follow a in "
        "the same storage", (),
        missed_by_checker=_NO_PROVENANCE + "b is an argument too, so reading it through a's pointer "
        "is allowed (memcheck cannot see it either: one allocation)"),
    # misaligned
    Bug("bytes-at-odd-offset", "misaligned", bytes_as_floats_kernel, _bytes_as_floats,
        "a uint8 view starting at byte 1 reinterpreted as float32 (triton.reinterpret)", ("memcheck",)),
    Bug("half-as-float-odd-offset", "misaligned", half_as_float_kernel, _half_as_float,
        "a float16 tensor at an odd element offset read through a float32 pointer", ("memcheck",)),
    Bug("int32-odd-offset-as-int64", "misaligned", odd_int32_as_int64_kernel, _odd_int32_as_int64,
        "an int32 tensor at an odd element offset read through an int64 pointer", ("memcheck",)),
    # races
    Bug("halo-stored-twice", "race", halo_kernel, _halo,
        "overlapping tiles: each program also stores its halo, with a value computed without the "
        "neighbour's data", ("gsan",)),
    Bug("sum-with-plain-store", "race", plain_sum_kernel, _plain_sum,
        "a reduction where every program stores its partial sum to out[0] with tl.store", ("gsan",)),
    Bug("accumulate-without-atomic", "race", read_modify_write_kernel, _read_modify_write,
        "out[0] += partial written as a load and a store, not tl.atomic_add", ("gsan",)),
    Bug("histogram-without-atomic", "race", histogram_no_atomic_kernel, _histogram_no_atomic,
        "a histogram counted with load + 1 and store instead of tl.atomic_add", ("gsan",)),
    Bug("split-k-plain-store", "race", split_k_kernel, _split_k,
        "split-K: the programs along K store their partial products to the same outputs", ("gsan",)),
    Bug("read-after-write-across-programs", "race", read_after_write_kernel, _read_after_write,
        "program p reads the partial that program p - 1 stored in the same launch", ("gsan",)),
    Bug("write-after-read-in-place", "race", shift_in_place_kernel, _shift_in_place,
        "an in-place shift: program p reads the first element of tile p + 1, which program p + 1 "
        "overwrites", ("gsan",)),
    # uninitialised reads
    Bug("read-empty-input", "uninitialised-read", empty_input_kernel, _empty_input,
        "an input allocated with torch.empty and never filled", ("initcheck",)),
    Bug("partially-initialised-input", "uninitialised-read", partial_init_kernel, _partial_init,
        "an input of which only the first 48 of 64 elements were set", ("initcheck",)),
    Bug("workspace-read-before-written", "uninitialised-read", combine_kernel, _workspace_order,
        "the kernel that combines a workspace is launched before the one that fills it", ("initcheck",)),
    Bug("accumulate-into-empty", "uninitialised-read", accumulate_kernel, _accumulate_into_empty,
        "out += x on an output from torch.empty (never zeroed)", ("initcheck",)),
    Bug("atomic-into-empty", "uninitialised-read", atomic_into_empty_kernel, _atomic_into_empty,
        "a histogram of atomic_adds into torch.empty bins", ("initcheck",)),
    Bug("padding-columns-read", "uninitialised-read", padded_columns_kernel, _padded_columns,
        "a row-padded buffer whose padding columns were never filled, loaded without a column mask", ("initcheck",)),
    # unwritten outputs
    Bug("grid-one-program-short", "unwritten-output", scale_kernel, _grid_short,
        "a grid of n // BLOCK programs instead of cdiv: the tail of out is never written", ("initcheck",)),
    Bug("store-mask-one-short", "unwritten-output", mask_short_kernel, _mask_short,
        "the store's mask is offs < n - 1: the last element is never written", ("initcheck",)),
    Bug("grid-missing-column-tiles", "unwritten-output", tile_copy_kernel, _grid_missing_axis,
        "a 2-D tiling launched with a 1-D grid: only the first column tile is written", ("initcheck",)),
    # clean controls
    Bug("clean-masked-copy", "", scale_kernel, _clean_copy, "a masked copy into a torch.empty output"),
    Bug("clean-atomic-sum", "", atomic_sum_kernel, _clean_sum, "a reduction with tl.atomic_add into a zeroed output"),
    Bug("clean-atomic-histogram", "", histogram_kernel, _clean_histogram, "a histogram with tl.atomic_add"),
    Bug("clean-2d-tiles", "", tile_copy_kernel, _clean_tiles, "a 2-D tiled copy with row and column masks"),
    Bug("clean-strided-view", "", strided_copy_kernel, _clean_strided_view,
        "a column slice read with its own row stride"),
    Bug("clean-in-place", "", scale_in_place_kernel, _clean_in_place,
        "each program loads and stores its own elements in place"),
    Bug("clean-workspace", "", combine_kernel, _clean_workspace,
        "a torch.empty workspace filled by one kernel, then read by the next"),
]  # fmt: skip


def named(name: str) -> Bug:
    for bug in BUGS:
        if bug.name == name:
            return bug
    raise KeyError(f"no entry {name!r} in the memory corpus (--list shows them)")


# -- running ---------------------------------------------------------------------------------------


@dataclass
class Result:
    bug: Bug
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    plain_seconds: float | None = None
    error: str = ""  # an exception other than the checker's

    @property
    def finding(self) -> Finding | None:
        """The finding of the expected kind if there is one, else the first."""
        wanted = [f for f in self.findings if f.kind == self.bug.kind]
        return (wanted or self.findings or [None])[0]

    @property
    def caught(self) -> bool:
        return not self.bug.clean and any(f.kind == self.bug.kind for f in self.findings)

    @property
    def false_alarm(self) -> bool:
        return self.bug.clean and bool(self.findings or self.error)

    @property
    def as_documented(self) -> bool:
        """Caught as planted, or missed where ``missed_by_checker`` says so; clean controls clean."""
        if self.bug.clean:
            return not self.false_alarm
        if self.bug.missed_by_checker:
            return not self.findings and not self.error
        return self.caught and (self.finding.kind == "unwritten-output" or self.finding.line == self.bug.line)


def checked(bug: Bug) -> Result:
    """Run ``bug`` under the memory checker: its findings (a refused access stops the launch; races
    and uninitialised reads are collected; the returned tensors are asked for unwritten elements)."""
    torch.manual_seed(0)
    result = Result(bug)
    start = time.perf_counter()
    try:
        with MemoryChecker() as checker:
            outputs = bug.launch()
            for name, tensor in outputs.items():
                checker.unwritten(tensor, f"`{name}`")
        result.findings = list(checker.findings)
    except MemoryFault as fault:
        result.findings = [fault.finding]
    except Exception as error:  # a kernel that does not run is a result too
        result.error = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    result.seconds = time.perf_counter() - start
    return result


def plain(bug: Bug) -> tuple[float, str]:
    """Run ``bug`` with no checker, then read what it returns with a PyTorch op (which initcheck
    watches on a GPU). Returns (seconds, error)."""
    torch.manual_seed(0)
    start = time.perf_counter()
    try:
        outputs = bug.launch()
        for tensor in outputs.values():
            tensor.double().sum().item()
        device.synchronize()
    except Exception as error:
        return time.perf_counter() - start, f"{type(error).__name__}: {error}"
    return time.perf_counter() - start, ""


def _line_named(result: Result) -> str:
    finding = result.finding
    if finding is None or not finding.line:
        return "-"
    return str(finding.line)


def verdict(r: Result) -> str:
    """The checker's verdict on one entry, in a few words."""
    if r.error:
        return f"ERROR {r.error}"
    if r.bug.clean:
        return "clean" if not r.findings else f"FALSE ALARM ({r.findings[0].kind})"
    if r.caught:
        return f"yes ({r.bug.kind})"
    if r.findings:
        return f"wrong kind ({r.findings[0].kind})"
    return "missed (documented)" if r.bug.missed_by_checker else "MISSED"


def verdict_record(r: Result) -> dict[str, object]:
    """One entry's verdict as ``--json`` prints it (read back by ``sanitizers.parse_verdict``)."""
    finding = r.finding
    return {
        "name": r.bug.name,
        "verdict": verdict(r),
        "caught": r.caught,
        "false_alarm": r.false_alarm,
        "kind": finding.kind if finding else "",
        "line": (finding.line or 0) if finding else 0,
    }


def table(results: list[Result]) -> str:
    rows = [("name", "class", "caught?", "line named", "planted", "checker s", "plain s")]
    for r in results:
        plain_s = "-" if r.plain_seconds is None else f"{r.plain_seconds:.3f}"
        rows.append(
            (
                r.bug.name,
                r.bug.kind or "clean",
                verdict(r),
                _line_named(r),
                str(r.bug.line or "-"),
                f"{r.seconds:.3f}",
                plain_s,
            )
        )
    return aligned(rows)


def totals(results: list[Result]) -> str:
    bugs = [r for r in results if not r.bug.clean]
    clean = [r for r in results if r.bug.clean]
    caught = sum(r.caught for r in bugs)
    documented = [r for r in bugs if not r.caught and r.bug.missed_by_checker]
    unexpected = [r for r in results if not r.as_documented]
    text = [
        f"bugs caught: {caught} of {len(bugs)}; missed: {len(bugs) - caught} "
        f"({len(documented)} documented: {', '.join(r.bug.name for r in documented) or 'none'})",
        f"false alarms on the {len(clean)} clean controls: {sum(r.false_alarm for r in clean)}",
    ]
    checker_s = sum(r.seconds for r in results)
    if all(r.plain_seconds for r in results):
        plain_s = sum(r.plain_seconds for r in results)
        text.append(
            f"time: checker {checker_s:.2f} s, plain interpreter {plain_s:.2f} s: "
            f"{checker_s / plain_s:.2f} x the plain interpreter"
        )
        whole = [r for r in results if not any(f.kind in ("out-of-bounds", "misaligned") for f in r.findings)]
        if whole:  # a refused access stops the launch early, which flatters the checker
            checker_w, plain_w = sum(r.seconds for r in whole), sum(r.plain_seconds for r in whole)
            text.append(
                f"  over the {len(whole)} entries that run to the end (no refused access): {checker_w / plain_w:.2f} x"
            )
    text.append(
        "as documented: every entry"
        if not unexpected
        else "NOT as documented: " + ", ".join(r.bug.name for r in unexpected)
    )
    return "\n".join(text)


def listing() -> str:
    rows = [("name", "class", "planted", "GPU tools", "missed by the checker")]
    for bug in BUGS:
        rows.append(
            (
                bug.name,
                bug.kind or "clean",
                str(bug.line or "-"),
                ",".join(bug.gpu_tools) or "-",
                bug.missed_by_checker and "yes",
            )
        )
    return aligned(rows, ruled=False)


def sanitize(bugs: list[Bug], out_dir: Path, jobs: int, timeout: float) -> int:
    """``--sanitizers``: the entries under the GPU's tools and the checker, side by side (see
    ``grader.authoring.sanitizers``)."""
    problem = sanitizers.unavailable(device.is_cuda())
    if problem:
        print(problem, file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = [sanitizers.Entry(b.name, b.kind, b.line, b.gpu_tools) for b in bugs]
    gsan_note = sanitizers.run(entries, out_dir, jobs=jobs, timeout=timeout)
    sanitizers.publish(entries, out_dir, gsan_note, {"timeout_s": str(timeout)})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.authoring.memory_corpus",
        description="Planted memory bugs, run under the interpreter's memory checker or plainly.",
    )
    parser.add_argument("--tool", choices=("checker", "plain"), default="checker")
    parser.add_argument("--only", help="entry names, comma-separated")
    parser.add_argument("--list", action="store_true", help="list the entries and the GPU tools for each")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each entry (the fastest counts)")
    parser.add_argument("--json", action="store_true", help="print the checker's verdict on each entry as JSON")
    parser.add_argument("--sanitizers", metavar="OUT_DIR", type=Path, help="on a GPU: compare with the GPU's tools")
    parser.add_argument("--jobs", type=int, default=8, help="processes at a time for --sanitizers")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per process for --sanitizers")
    args = parser.parse_args(argv)
    repeat = max(args.repeat, 1)
    if args.list:
        print(listing())
        return 0
    bugs = [named(n.strip()) for n in args.only.split(",")] if args.only else BUGS
    if args.sanitizers:
        return sanitize(bugs, args.sanitizers, args.jobs, args.timeout)
    if args.tool == "plain":
        failed = 0
        for bug in bugs:
            seconds, error = plain(bug)
            failed += bool(error)
            print(f"{bug.name}  {seconds:.3f} s" + (f"  {error}" if error else ""), flush=True)
        return 0
    if device.is_cuda():
        print("the memory checker watches the interpreter: on a GPU run --tool plain under compute-sanitizer")
        return 2
    if args.json:  # one untimed run each, for --sanitizers
        for bug in bugs:
            print(json.dumps(verdict_record(checked(bug))), flush=True)
        return 0
    checked(bugs[0])  # once untimed: the checker's first use imports torch._dynamo (a few seconds)
    results = []
    for bug in bugs:
        plain(bug)  # once untimed: the interpreter's first call of a kernel does extra work
        runs = [checked(bug) for _ in range(repeat)]
        result = min(runs, key=lambda r: r.seconds)
        result.plain_seconds = min(plain(bug)[0] for _ in range(repeat))
        results.append(result)
    print(table(results))
    print()
    print(totals(results))
    return 0 if all(r.as_documented for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    sys.exit(main())
