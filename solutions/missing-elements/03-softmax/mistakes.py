"""Typical mistakes in softmax, planted into the reference by the course's suite."""

from grader.mistakes import Mistake

MISTAKES = [
    Mistake("row maximum not subtracted",
            "row_minus_max = row_values - tl.max(row_values, axis=0)", "row_minus_max = row_values",
            cause=r"overflow"),
    Mistake("masked lanes padded with 0 instead of -inf",
            'other=-float("inf")).to(tl.float32)', "other=0.0).to(tl.float32)",
            cause=r"power of two"),
    Mistake("fp16 rows computed in fp16 (no upcast to float32)",
            'other=-float("inf")).to(tl.float32)', 'other=-float("inf"))',
            cause=r"float32",
            gpu_only="The interpreter sums float16 with NumPy, which is about as accurate as float32, "
                     "so only a GPU's float16 arithmetic shows this mistake."),
    Mistake("row stride taken as the row length",
            "x_row_ptr = x_ptr + row.to(tl.int64) * x_row_stride",
            "x_row_ptr = x_ptr + row.to(tl.int64) * n_cols",
            cause=r"stride"),
    Mistake("column mask off by one",
            "mask = col_offsets < n_cols", "mask = col_offsets < n_cols - 1",
            cause=r"column mask|off.by.one"),
]
