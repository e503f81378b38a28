"""Typical mistakes in vector add, planted into the reference by the course's suite."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("program offsets not scaled by the block size",
            "block_start = pid.to(tl.int64) * BLOCK_SIZE", "block_start = pid",
            cause=r"multipl\w* by the block size"),
    Mistake("grid rounds down",
            "grid = (triton.cdiv(n_elements, BLOCK_SIZE),)", "grid = (n_elements // BLOCK_SIZE,)",
            cause=r"triton\.cdiv"),
    Mistake("mask off by one",
            "mask = offsets < n_elements", "mask = offsets < n_elements - 1",
            cause=r"off.by.one"),
    Mistake("y loaded from x's pointer",
            "y = tl.load(y_ptr + offsets, mask=mask)", "y = tl.load(x_ptr + offsets, mask=mask)",
            cause=r"which tensor each pointer"),
    Mistake("strided inputs not made contiguous",
            "x, y = x.contiguous(), y.contiguous()", "x, y = x, y",
            cause=r"non-contiguous"),
    Mistake("output allocated as float32 whatever the input",
            "out = torch.empty_like(x)", "out = torch.empty(x.shape, device=x.device)",
            cause=r"dtype=x\.dtype"),
]
