"""Typical mistakes in conv2d, planted into the reference by the course's suite."""

from grader.authoring.mistakes import FAULTS_ON_A_GPU, Mistake, TF32_ROUNDING

MISTAKES = [
    Mistake("fp32 operands rounded to fp16 before tl.dot",
            "acc = tl.dot(x_tile, w_tile, acc)",
            "acc = tl.dot(x_tile.to(tl.float16), w_tile.to(tl.float16), acc)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
    Mistake("bias not added",
            "acc += bias[None, :].to(tl.float32)", "acc += 0.0 * bias[None, :].to(tl.float32)",
            cause=r"bias"),
    Mistake("padding ignored",
            "ih0 = oh * stride_h - pad_h\n    iw0 = ow * stride_w - pad_w",
            "ih0 = oh * stride_h\n    iw0 = ow * stride_w",
            cause=r"padding"),
    Mistake("stride ignored",
            "ih0 = oh * stride_h - pad_h\n    iw0 = ow * stride_w - pad_w",
            "ih0 = oh - pad_h\n    iw0 = ow - pad_w",
            cause=r"stride"),
    Mistake("output rounded to fp16 before the store",
            "out_tile = acc.to(out_ptr.dtype.element_ty)", "out_tile = acc.to(tl.float16)",
            cause=r"16-bit", interpreter_only=TF32_ROUNDING),
    # Output size, borders (padding) and the launch.
    Mistake("output height without the + 1",
            "OH = (H + 2 * pad_h - R) // stride_h + 1", "OH = (H + 2 * pad_h - R) // stride_h",
            cause=r"shape"),
    Mistake("padding counted on one side only in the output height",
            "OH = (H + 2 * pad_h - R) // stride_h + 1", "OH = (H + pad_h - R) // stride_h + 1",
            cause=r"shape"),
    Mistake("bottom border check off by one",
            "(ih < H)", "(ih <= H)", cause=r"where padding is set|of `x_ptr`"),
    Mistake("rows above the image not masked",
            "in_image = mask_m & (ih >= 0) & ", "in_image = mask_m & ", cause=r"where padding is set|of `x_ptr`", interpreter_only=FAULTS_ON_A_GPU),
    Mistake("grid rounds down",
            'triton.cdiv(N * OH * OW, meta["BLOCK_M"])', '(N * OH * OW) // meta["BLOCK_M"]', cause=r"cdiv"),
    # The reduction's order: filter taps, then channel blocks (two non-square filters and two
    # channel counts above one block were added to the cases: each of these failed one case).
    Mistake("filter tap split with R instead of S",
            "r = tap // S\n        s = tap % S", "r = tap // R\n        s = tap % R", cause=r"t // S"),
    Mistake("loop over filter taps forgets the channel blocks",
            "for step in range(0, R * S * c_blocks):", "for step in range(0, R * S):",
            cause=r"cdiv\(C, BLOCK_K\)"),
]
