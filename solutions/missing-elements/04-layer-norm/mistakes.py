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
]
