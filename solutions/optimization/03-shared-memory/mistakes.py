"""Typical mistakes in one-pass softmax, online softmax and a two-stage sum, planted into the
reference by the course's suite."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("row maximum not subtracted",
            "numerator = tl.exp(x - tl.max(x, axis=0))", "numerator = tl.exp(x)",
            cause=r"maximum is subtracted|overflow"),
    Mistake("masked columns padded with 0 instead of -inf",
            'x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=mask, other=-float("inf"))',
            "x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=mask, other=0.0)",
            cause=r"-inf|padding|power of two|mask"),
    Mistake("online sum not rescaled when the maximum grows",
            "running_sum = running_sum * rescale +", "running_sum = running_sum +",
            cause=r"rescaled"),
    Mistake("partial sums not all added: stage 2 reads one chunk",
            "total_kernel[(1,)](partials, out, partials.numel(), 1, BLOCK=1024)",
            "total_kernel[(1,)](partials, out, min(partials.numel(), 1), 1, BLOCK=1024)",
            cause=r"many chunks|sum|chunk"),
    Mistake("grid of stage 1 rounds down",
            "partials = torch.empty(triton.cdiv(n, CHUNK),", "partials = torch.empty(n // CHUNK,",
            cause=r"triton\.cdiv|past a chunk|tail|chunk"),
    Mistake("online running maximum starts at 0 instead of -inf",
            'running_max = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)',
            "running_max = tl.zeros((BLOCK,), dtype=tl.float32)",
            cause=r"start at -inf"),
    Mistake("partial sums kept in x's dtype instead of float32",
            "partials = torch.empty(triton.cdiv(n, CHUNK), dtype=torch.float32, device=x.device)",
            "partials = torch.empty(triton.cdiv(n, CHUNK), dtype=x.dtype, device=x.device)",
            cause=r"must stay float32"),
    # The online kernel's bookkeeping: the lanes, -inf entries, the second pass.
    Mistake("lane sums combined without rescaling to the row maximum",
            "running_sum * tl.exp(running_max - row_max)", "running_sum", cause=r"rescal"),
    Mistake("running maximum never updated",
            "        running_max = new_max\n", "", cause=r"rescal"),
    Mistake("rescale not guarded against exp(-inf - (-inf))",
            'rescale = tl.where(running_max == -float("inf"), 0.0, tl.exp(running_max - new_max))',
            "rescale = tl.exp(running_max - new_max)", cause=r"exp\(-inf - \(-inf\)\) is NaN"),
    Mistake("exponentials of -inf entries not guarded",
            'tl.where(x == -float("inf"), 0.0, tl.exp(x - new_max))', "tl.exp(x - new_max)",
            cause=r"exp\(-inf - \(-inf\)\) is NaN"),
    Mistake("second pass subtracts each chunk's own maximum",
            "y = tl.exp(x - row_max) / row_sum", "y = tl.exp(x - tl.max(x, axis=0)) / row_sum",
            cause=r"larger than 8192"),
    # The two-stage sum.
    Mistake("vector sum ignores x's stride",
            "x_ptr + offsets * stride", "x_ptr + offsets", cause=r"offsets \* stride"),
]
