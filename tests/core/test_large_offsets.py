"""The shared check of matmuls past 2**31 elements (grader.core.large_offsets), on small CPU
tensors: what it compares, block by block, and what its failures say."""

import pytest
import torch

from grader.core import device, large_offsets


def test_a_wrong_element_is_named_with_its_place_and_the_fix():
    a, b = torch.randn(10, 8), torch.randn(8, 3)
    c = a @ b
    large_offsets.assert_matches(c, a, b, "small", block=4)
    c[9, 2] += 1.0  # in the last block of rows
    with pytest.raises(AssertionError, match=r"small: 1 of 6 elements wrong in c's rows 8 to 9, the first c\[9, 2\]"):
        large_offsets.assert_matches(c, a, b, "small", block=4)
    wide = (b.t() @ a.t()).clone()  # a wide c is compared a block of columns at a time
    wide[1, 5] = float("nan")
    with pytest.raises(AssertionError, match=r"columns 4 to 7, the first c\[1, 5\].*tl\.int64"):
        large_offsets.assert_matches(wide, b.t(), a.t(), "wide", block=4)


def test_every_product_runs_with_its_extras_and_a_failed_launch_says_what_to_fix(monkeypatch):
    a, b = torch.randn(6, 4), torch.randn(4, 5)
    monkeypatch.setattr(large_offsets, "products", lambda: [(a, b, "one"), (a[:, :2], b[:2], "two")])
    seen = []

    def with_bias(b):
        bias = torch.ones(b.shape[1])
        return (bias,), lambda product, cols: product + bias[cols]

    large_offsets.check_matmuls(lambda a, b, bias: seen.append(b.shape) or a @ b + bias, with_bias)
    assert seen == [(4, 5), (2, 5)]
    with pytest.raises(AssertionError, match=r"one: 30 of 30 elements wrong"):
        large_offsets.check_matmuls(lambda a, b: a @ b + 1)

    def fails(a, b):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    with pytest.raises(AssertionError, match=r"one: the launch failed \(CUDA error: an illegal memory access"):
        large_offsets.check_matmuls(fails)


def test_without_a_gpu_the_check_says_why_it_cannot_run():
    if device.is_cuda():
        pytest.skip("on a GPU the reason, if any, is the free memory")
    assert "needs a CUDA GPU" in large_offsets.why_not_here()
