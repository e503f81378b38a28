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
    sent = {
        "args": [x, y, None, 1e-5, (1, 2)],
        "kwargs": {"dtype": torch.float16, "x_again": base[1:], "half": torch.randn(3).half()},
    }
    got = wire.parse(wire.dump(sent), 1000)
    assert torch.equal(got["args"][0], x) and got["args"][0].stride() == x.stride()
    assert torch.equal(got["args"][1], y) and got["args"][1].stride() == (1, 3)
    assert got["args"][2:] == [None, 1e-5, (1, 2)] and got["kwargs"]["dtype"] is torch.float16
    assert got["kwargs"]["half"].dtype == torch.float16
    # two views of one storage arrive as two views of one storage (aliasing stays visible)
    assert got["args"][0].untyped_storage().data_ptr() == got["kwargs"]["x_again"].untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "data, says",
    [
        (b"PK\x03\x04 a torch.save zip", "not a tensor file"),
        (wire.MAGIC + struct.pack("<I", 10_000) + b"{}", "header runs past"),
        (
            _forged(
                [1 << 31],
                [{"storage": 0, "dtype": "float32", "shape": [1 << 29], "stride": [1], "offset": 0}],
                [{"$tensor": 0}],
                bytes(8),
            ),
            "do not match",
        ),
        (
            _forged(
                [8],
                [{"storage": 0, "dtype": "float32", "shape": [1 << 29], "stride": [0], "offset": 0}],
                [{"$tensor": 0}],
                bytes(8),
            ),
            "more than the 1000 expected",
        ),
        (
            _forged(
                [8],
                [{"storage": 0, "dtype": "float32", "shape": [100], "stride": [1], "offset": 0}],
                [{"$tensor": 0}],
                bytes(8),
            ),
            "past the end of its storage",
        ),
        (
            _forged(
                [8],
                [{"storage": 0, "dtype": "float32", "shape": [2], "stride": [-1], "offset": 1}],
                [{"$tensor": 0}],
                bytes(8),
            ),
            "not valid",
        ),
        (
            _forged(
                [8],
                [{"storage": 3, "dtype": "float32", "shape": [2], "stride": [1], "offset": 0}],
                [{"$tensor": 0}],
                bytes(8),
            ),
            "not valid",
        ),
        (
            _forged(
                [8],
                [{"storage": 0, "dtype": "object", "shape": [2], "stride": [1], "offset": 0}],
                [{"$tensor": 0}],
                bytes(8),
            ),
            "not valid",
        ),
        (
            _forged(
                [7],
                [{"storage": 0, "dtype": "float32", "shape": [1], "stride": [1], "offset": 0}],
                [{"$tensor": 0}],
                bytes(7),
            ),
            "whole number",
        ),
    ],
)
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
    sent = [
        torch.tensor([True, False, True]),
        torch.randn(1).half(),
        torch.randn(5, dtype=torch.float64),
        torch.empty(0),
        torch.arange(7, dtype=torch.int64),
    ]
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


def test_a_small_view_of_a_large_storage_travels_at_its_own_size():
    """What the child sends back holds only the bytes each output addresses: a right answer that
    is one element of a 4 MiB workspace is not refused for the workspace's size."""
    workspace = torch.zeros(1 << 20)
    workspace[12345] = 2.5
    block = torch.arange(40.0)
    sent = {"outputs": [workspace[12345:12346].reshape(()), block[10:20].view(2, 5)[:, 1:4]]}
    data = wire.dump_spans(sent)
    assert len(data) < 1024, len(data)
    got = wire.parse(data, 100)["outputs"]
    assert got[0].shape == () and float(got[0]) == 2.5
    assert torch.equal(got[1], sent["outputs"][1]) and got[1].stride() == (5, 1)
    assert len(wire.dump(sent)) > 4 << 20, "dump() sends whole storages (the inputs the parent hands over)"


def test_views_that_share_a_storage_still_share_one_when_sent_as_spans():
    """An output that is a view of an input arrives as a view of that input's storage (the
    aliasing check needs it), whatever part of it each one covers; views of other dtypes too."""
    x = torch.randn(8, 100)
    words = torch.arange(64, dtype=torch.int32)
    sent = {"args": [x[2:5, 10:20]], "outputs": [x[4, 50:60], words[3:9], words.view(torch.int16)[20:31]]}
    got = wire.parse(wire.dump_spans(sent), 1000)
    (arg,), (row, ints, halves) = got["args"], got["outputs"]
    assert torch.equal(arg, x[2:5, 10:20]) and arg.stride() == (100, 1)
    assert torch.equal(row, x[4, 50:60]) and row.untyped_storage().data_ptr() == arg.untyped_storage().data_ptr()
    assert torch.equal(ints, words[3:9]) and torch.equal(halves, words.view(torch.int16)[20:31])
    assert ints.untyped_storage().data_ptr() == halves.untyped_storage().data_ptr()
    assert arg.untyped_storage().nbytes() < x.untyped_storage().nbytes()


def test_a_sparse_view_alone_in_its_storage_travels_packed():
    sparse = torch.randn(1 << 20)[::4096]
    empty = torch.empty(0)
    data = wire.dump_spans([sparse, empty, torch.ones(3, 4).t()])
    assert len(data) < 4096
    got = wire.parse(data, 1000)
    assert torch.equal(got[0], sparse) and got[1].shape == (0,) and torch.equal(got[2], torch.ones(4, 3))


def test_written_in_chunks_is_the_same_file_as_dumped(tmp_path):
    """Inputs handed to a child are streamed to its file, never held whole in the grader's memory."""
    base = torch.arange(1000, dtype=torch.float32)
    value = {"args": [base[3:900:7], torch.ones(5, dtype=torch.bfloat16), (base[:4], 2.5)], "kwargs": {"eps": None}}
    with open(tmp_path / "f", "wb") as handle:
        wire.write(value, handle, chunk_bytes=100)
    data = (tmp_path / "f").read_bytes()
    assert data == bytes(wire.dump(value))
    parsed = wire.parse(bytearray(data), 10_000)
    assert torch.equal(parsed["args"][0], base[3:900:7]) and parsed["args"][2][1] == 2.5
