"""Hidden grading cases for 05-conv2d: filters, strides, paddings and layouts the public tests do not show."""

import torch

from grader.cases import Case

CASES = [
    Case({"x": (3, 6, 7, 10), "w": (9, 6, 2, 4), "stride": (1, 2), "padding": (0, 1), "bias": True},
         label="even 2x4 filter"),
    Case({"x": (2, 8, 9, 9), "w": (16, 8, 1, 1), "stride": 2}, torch.float16,
         label="1x1 stride 2 shortcut"),
    Case({"x": (2, 3, 1, 12), "w": (4, 3, 1, 3), "padding": (0, 1)}, label="one-row image"),
    Case({"x": (1, 2, 3, 3), "w": (5, 2, 2, 2), "stride": 3, "padding": 2, "bias": True},
         torch.float16, label="padding wider than the filter"),
    Case({"x": (1, 1, 5, 5), "w": (1, 1, 3, 3), "padding": 1}, label="one channel in, one out"),
    Case({"x": (1, 66, 5, 4), "w": (3, 66, 3, 1), "stride": (2, 1), "padding": (1, 0), "bias": True,
          "layout": "channels_last"}, torch.float16, label="channels-last, channel tail"),
    Case({"x": (2, 5, 9, 7), "w": (6, 5, 3, 5), "padding": (1, 2), "layout": "strided"},
         torch.float16, label="non-contiguous"),
    Case({"x": (2, 3, 4, 9), "w": (6, 3, 3, 2), "stride": (1, 2), "padding": (2, 1), "bias": True,
          "layout": "nan-padded"}, torch.float16, label="NaN-padded, wide padding"),
    Case({"x": (16, 256, 14, 14), "w": (256, 256, 3, 3), "padding": 1, "bias": True},
         torch.bfloat16, label="ResNet stage 4", cuda_only=True),
    Case({"x": (3, 40, 33, 47), "w": (72, 40, 5, 5), "stride": (2, 3), "padding": 2},
         torch.float16, label="odd sizes", cuda_only=True),
]
