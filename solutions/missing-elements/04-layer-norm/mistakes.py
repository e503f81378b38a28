"""Typical mistakes in layer norm, planted into the reference by the course's suite."""

from grader.authoring.mistakes import Mistake

MISTAKES = [
    Mistake("eps ignored",
            "rstd = 1.0 / tl.sqrt(var + eps)", "rstd = 1.0 / tl.sqrt(var)",
            cause=r"\beps\b"),
    Mistake("one-pass variance E[x^2] - mean^2",
            "var = tl.sum(x_centred * x_centred, axis=0) / N",
            "var = tl.sum(x * x, axis=0) / N - mean * mean",
            cause=r"cancel"),
    Mistake("unbiased variance (divides by N - 1)",
            "var = tl.sum(x_centred * x_centred, axis=0) / N",
            "var = tl.sum(x_centred * x_centred, axis=0) / (N - 1)",
            cause=r"factor"),
    Mistake("row stride taken as the row length",
            "x_row_ptr = x_ptr + row * x_row_stride", "x_row_ptr = x_ptr + row * N",
            cause=r"stride"),
    Mistake("weight not applied",
            "y = x_hat * weight + bias", "y = x_hat + bias",
            cause=r"weight"),
    # Masks, formulas and the statistics a backward pass reads.
    Mistake("padded lanes not zeroed before squaring",
            "x_centred = tl.where(mask, x_shifted - shifted_mean, 0.0)", "x_centred = x_shifted - shifted_mean",
            cause=r"mask|padded"),
    Mistake("mean divided by the block size, not N",
            "shifted_mean = tl.sum(x_shifted, axis=0) / N", "shifted_mean = tl.sum(x_shifted, axis=0) / BLOCK_N",
            cause=r"power of two|BLOCK"),
    Mistake("bias not added", "y = x_hat * weight + bias", "y = x_hat * weight", cause=r"bias"),
    Mistake("rstd computed as sqrt(var + eps), not its inverse",
            "rstd = 1.0 / tl.sqrt(var + eps)", "rstd = tl.sqrt(var + eps)", cause=r"rstd"),
    Mistake("shifted mean saved instead of the mean",
            "tl.store(mean_ptr + row, mean)", "tl.store(mean_ptr + row, shifted_mean)", cause=r"mean"),
    Mistake("eps default 1e-6 instead of PyTorch's 1e-5", "eps: float = 1e-5", "eps: float = 1e-6", cause=r"eps"),
    Mistake("row not centred before scaling",
            "x_hat = x_centred * rstd", "x_hat = x * rstd", cause=r"mean"),
]
