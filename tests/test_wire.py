"""The tensor file format between the grader and its child: layouts survive the trip, and no
file, however forged, makes the parent allocate more than the caller allows."""

import json
import struct

import pytest
import torch

from grader.sandbox import wire


def _forged(storages, tensors, value, payload=b""):
    header = json.dumps({"storages": storages, "tensors": tensors, "value": value}).encode()
    header += b" " * (-(8 + len(header)) % wire.ALIGN)  # the storages start aligned
    return wire.MAGIC + struct.pack("<I", len(header)) + header + payload


def test_values_layouts_and_shared_storage_survive_the_trip():
    base = torch.randn(6, 20)
    x, y = base[:, :5], torch.randn(4, 3).t()
    sent = {"args": [x, y, None, 1e-5, (1, 2)], "kwargs": {"dtype": torch.float16, "x_again": base[1:],
                                                            "half": torch.randn(3).half()}}
    got = wire.parse(wire.dump(sent), 1000)
    assert torch.equal(got["args"][0], x) and got["args"][0].stride() == x.stride()
    assert torch.equal(got["args"][1], y) and got["args"][1].stride() == (1, 3)
    assert got["args"][2:] == [None, 1e-5, (1, 2)] and got["kwargs"]["dtype"] is torch.float16
    assert got["kwargs"]["half"].dtype == torch.float16
    # two views of one storage arrive as two views of one storage (aliasing stays visible)
    assert got["args"][0].untyped_storage().data_ptr() == got["kwargs"]["x_again"].untyped_storage().data_ptr()


@pytest.mark.parametrize("data, says", [
    (b"PK\x03\x04 a torch.save zip", "not a tensor file"),
    (wire.MAGIC + struct.pack("<I", 10_000) + b"{}", "header runs past"),
    (_forged([1 << 31], [{"storage": 0, "dtype": "float32", "shape": [1 << 29], "stride": [1], "offset": 0}],
             [{"$tensor": 0}], bytes(8)), "do not match"),
    (_forged([8], [{"storage": 0, "dtype": "float32", "shape": [1 << 29], "stride": [0], "offset": 0}],
             [{"$tensor": 0}], bytes(8)), "more than the 1000 expected"),
    (_forged([8], [{"storage": 0, "dtype": "float32", "shape": [100], "stride": [1], "offset": 0}],
             [{"$tensor": 0}], bytes(8)), "past the end of its storage"),
    (_forged([8], [{"storage": 0, "dtype": "float32", "shape": [2], "stride": [-1], "offset": 1}],
             [{"$tensor": 0}], bytes(8)), "not valid"),
    (_forged([8], [{"storage": 3, "dtype": "float32", "shape": [2], "stride": [1], "offset": 0}],
             [{"$tensor": 0}], bytes(8)), "not valid"),
    (_forged([8], [{"storage": 0, "dtype": "object", "shape": [2], "stride": [1], "offset": 0}],
             [{"$tensor": 0}], bytes(8)), "not valid"),
    (_forged([7], [{"storage": 0, "dtype": "float32", "shape": [1], "stride": [1], "offset": 0}],
             [{"$tensor": 0}], bytes(7)), "whole number"),
])
def test_forged_files_are_refused_before_anything_large_is_allocated(data, says):
    with pytest.raises(wire.WireError, match=says):
        wire.parse(data, 1000)


def test_references_to_missing_tensors_stay_plain_data():
    value = wire.parse(_forged([], [], {"$tensor": 5}), 10)
    assert value == {"$tensor": 5}  # not an index error, not a tensor


def test_objects_outside_the_format_cannot_be_sent():
    with pytest.raises(TypeError):
        wire.dump({"f": lambda: 0})


def test_storages_of_any_size_start_aligned_and_are_read_where_they_lie():
    """Odd-sized storages (3 bools, one half) do not misalign the ones after them, and a parsed
    bytearray's tensors are views of its bytes, not copies."""
    sent = [torch.tensor([True, False, True]), torch.randn(1).half(), torch.randn(5, dtype=torch.float64),
            torch.empty(0), torch.arange(7, dtype=torch.int64)]
    data = wire.dump(sent)
    got = wire.parse(data, 1000)
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(got, sent))
    start = torch.frombuffer(data, dtype=torch.uint8).data_ptr()
    for tensor in got:
        if tensor.numel():
            assert start <= tensor.data_ptr() < start + len(data), "parsed by copying"
            assert (tensor.data_ptr() - start) % wire.ALIGN == 0
    assert torch.equal(wire.parse(bytes(data), 1000)[4], sent[4]), "plain bytes are accepted too"
    with pytest.raises(wire.WireError, match="do not match"):
        wire.parse(data + b"\0", 1000)
