"""Typical mistakes in softmax, planted into the reference by the course's suite."""

from grader.authoring.mistakes import Mistake

# Only the interpreter's memory checker stops an access past the end of a tensor and names it; a GPU
# reads or writes whatever lies there (a neighbouring row, often rewritten later), so what it shows
# depends on the order the programs run in.
PAST_END = "an access past the end of a tensor is named only by the interpreter's memory checker"

MISTAKES = [
    Mistake("row maximum not subtracted",
            "row_minus_max = row_values - tl.max(row_values, axis=0)", "row_minus_max = row_values",
            cause=r"overflow"),
    Mistake("masked lanes padded with 0 instead of -inf",
            'other=-float("inf")).to(tl.float32)', "other=0.0).to(tl.float32)",
            cause=r"power of two"),
# Loading float16 rows without .to(tl.float32) is not listed: Triton (3.6 on an H100, 3.9 in the
    # interpreter) then still reduces in float32, and the result stays within one rounding of the
    # reference on every case, so no test can fail it. Rounding an intermediate to float16 can.
    Mistake("exponentials rounded to float16 before the sum",
            "numerator = tl.exp(row_minus_max)", "numerator = tl.exp(row_minus_max).to(x_ptr.dtype.element_ty)",
            cause=r"float32"),
    Mistake("row stride taken as the row length",
            "x_row_ptr = x_ptr + row.to(tl.int64) * x_row_stride",
            "x_row_ptr = x_ptr + row.to(tl.int64) * n_cols",
            cause=r"stride"),
    Mistake("column mask off by one",
            "mask = col_offsets < n_cols", "mask = col_offsets < n_cols - 1",
            cause=r"column mask|off.by.one"),
    # Typical mistakes in the formula, the launch and the wrapper.
    Mistake("sum taken over exp of the raw values, not of x - max",
            "denominator = tl.sum(numerator, axis=0)", "denominator = tl.sum(tl.exp(row_values), axis=0)",
            cause=r"divided by \(its sum\)"),
    Mistake("x read with the output's row stride",
            "x_rows.stride(0), out_rows.stride(0)", "out_rows.stride(0), out_rows.stride(0)",
            cause=r"stride"),
    Mistake("output returned as 2-D rows, not in x's shape",
            "return out_rows.view(x.shape)", "return out_rows", cause=r"shape"),
    Mistake("block size equal to the row length, not a power of two",
            "block_size = triton.next_power_of_2(n_cols)", "block_size = n_cols", cause=r"power of two"),
    Mistake("exp2 used without the log2(e) factor",
            "numerator = tl.exp(row_minus_max)", "numerator = tl.exp2(row_minus_max)",
            cause=r"matches what exp2 in place of exp gives"),
    # Accesses past the end of a row or of the output.
    Mistake("mask keeps one lane too many",
            "mask = col_offsets < n_cols", "mask = col_offsets <= n_cols",
            cause=r"past the end of `x_ptr`", interpreter_only=PAST_END),
    Mistake("output written with x's row stride",
            "x_rows.stride(0), out_rows.stride(0)", "x_rows.stride(0), x_rows.stride(0)",
            cause=r"past the end of `out_ptr`", interpreter_only=PAST_END),
]
