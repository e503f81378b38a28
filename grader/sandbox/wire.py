"""The byte format in which tensors travel between the grader and its child process.

Inputs go to the child, outputs come back, as one file per trial:

    b"GRT2" | header length (4 bytes, little-endian) | JSON header | storages

The header lists the storages (their sizes in bytes), the tensors (each a view: storage index,
dtype, shape, stride, offset) and a JSON "skeleton" of the value with every tensor replaced by
``{"$tensor": i}`` and every tuple by ``{"$tuple": [...]}``. Views keep their layout (a
row-strided or transposed input arrives as one) and two tensors that share a storage still share
one after the trip, so the parent can tell an output that is an input in disguise. Each storage
starts at a multiple of ``ALIGN`` bytes from the start of the file (the header is padded with
spaces, a storage with zeros), so that ``parse`` can use the bytes where they lie instead of
copying gigabytes.

What the child sends back (``dump_spans``) holds of each storage only the bytes its tensors
address, from the lowest element to the highest (or, for a storage that one sparse view alone
reaches, that view's elements packed): a result that is a small view of a large workspace costs
its own size. Views of one storage still share one after the trip.

Nothing is unpickled, and ``parse`` trusts nothing: the file is read by the caller with a size
limit, the declared sizes must account for exactly the bytes present, every view must lie inside
its storage, and no tensor may hold more elements than the caller allows, so a small file cannot
make the parent allocate gigabytes.
"""

from __future__ import annotations

import json
import struct

import torch

MAGIC = b"GRT2"
ALIGN = 64
DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}


class WireError(ValueError):
    """The bytes are not a well-formed tensor file within the limits given."""


def _prepared(value, spans: bool) -> tuple[bytes, list[torch.Tensor], list[int], int]:
    """What a file of ``value`` holds: its head (magic, length, header), each storage's bytes as a
    uint8 tensor and where it starts, and the file's length."""
    storages: list[torch.UntypedStorage] = []
    storage_index: dict[tuple, int] = {}
    tensors: list[dict] = []
    viewing: list[list[torch.Tensor]] = []  # per storage, the tensors sent as its views

    def encode(item):
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            key = (item.device.type, item.device.index, storage.data_ptr(), storage.nbytes())
            if key not in storage_index:
                storage_index[key] = len(storages)
                storages.append(storage)
                viewing.append([])
            viewing[storage_index[key]].append(item)
            tensors.append(
                {
                    "storage": storage_index[key],
                    "dtype": str(item.dtype).removeprefix("torch."),
                    "shape": list(item.shape),
                    "stride": list(item.stride()),
                    "offset": item.storage_offset(),
                }
            )
            return {"$tensor": len(tensors) - 1}
        if isinstance(item, tuple):
            return {"$tuple": [encode(part) for part in item]}
        if isinstance(item, list):
            return [encode(part) for part in item]
        if isinstance(item, dict):
            return {str(key): encode(part) for key, part in item.items()}
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        if isinstance(item, torch.dtype):
            return {"$dtype": str(item).removeprefix("torch.")}
        raise TypeError(f"cannot send a {type(item).__name__}")

    skeleton = encode(value)
    sources: list = list(storages)
    if spans:
        for index, views in enumerate(viewing):
            sources[index] = _span(views, [t for t in tensors if t["storage"] == index], storages[index])
    sources = [
        torch.empty(0, dtype=torch.uint8, device=source.device).set_(source)
        if isinstance(source, torch.UntypedStorage)
        else source
        for source in sources
    ]
    sizes = [source.numel() for source in sources]
    header = json.dumps({"storages": sizes, "tensors": tensors, "value": skeleton}).encode()
    header += b" " * (_aligned(8 + len(header)) - 8 - len(header))
    offsets, end = _layout(8 + len(header), sizes)
    return MAGIC + struct.pack("<I", len(header)) + header, sources, offsets, end


def dump(value, spans: bool = False) -> bytearray:
    """``value`` (nested lists, tuples and dicts of tensors, numbers, strings, None) as bytes: each
    storage whole (what the parent hands over: a padded input keeps its padding), or with
    ``spans`` only the bytes its tensors address (``dump_spans``)."""
    head, sources, offsets, end = _prepared(value, spans)
    data = bytearray(end)  # zero-filled: the padding between storages
    data[: len(head)] = head
    for source, offset in zip(sources, offsets):
        if source.numel():  # straight from the device into the file's bytes: one copy
            torch.frombuffer(data, dtype=torch.uint8, count=source.numel(), offset=offset).copy_(source)
    return data


def write(value, handle, chunk_bytes: int = 64 << 20) -> None:
    """``dump(value)`` written to the binary file ``handle`` a chunk at a time, so that handing
    over inputs of gigabytes never holds them in host memory whole."""
    head, sources, offsets, end = _prepared(value, spans=False)
    handle.write(head)
    position = len(head)
    for source, offset in zip(sources, offsets):
        handle.write(bytes(offset - position))  # the padding before the storage
        for start in range(0, source.numel(), chunk_bytes):
            handle.write(source[start : start + chunk_bytes].cpu().numpy().tobytes())
        position = offset + source.numel()
    handle.write(bytes(end - position))


def dump_spans(value) -> bytearray:
    """``dump`` that sends of each storage only what its tensors address (what the child saves)."""
    return dump(value, spans=True)


def _span(views: list[torch.Tensor], described: list[dict], storage: torch.UntypedStorage) -> torch.Tensor:
    """The bytes of ``storage`` that its ``views`` address, as a uint8 tensor (on the storage's
    device, sharing its memory where it can), and each view's description (``described``, in the
    same order) rewritten to address them: from the lowest element any view reaches to the
    highest, its start a multiple of every view's element size; or, where one view alone reaches
    the storage and its elements lie sparse in it, that view's elements packed in order."""
    reached = [(t, _extent(t)) for t in views if t.numel()]
    whole = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    if not reached:
        for entry in described:
            entry["offset"] = 0
        return whole[:0]
    first_view = reached[0][0]
    alone = all(
        t.dtype == first_view.dtype
        and t.shape == first_view.shape
        and t.stride() == first_view.stride()
        and t.storage_offset() == first_view.storage_offset()
        for t, _ in reached
    )
    dense = first_view.numel() * first_view.element_size()
    low, high = min(start for _, (start, _) in reached), max(end for _, (_, end) in reached)
    if alone and high - low > 2 * dense + 4096:
        packed = first_view.detach().contiguous().view(-1).view(torch.uint8)
        stride, size = [], 1
        for n in reversed(first_view.shape):
            stride.insert(0, size)
            size *= n
        for entry in described:
            entry["offset"] = 0
            if entry["shape"]:
                entry["stride"] = stride
        return packed
    unit = max(t.element_size() for t, _ in reached)
    low -= low % unit
    high = min(high + (-high) % unit, storage.nbytes())
    for view, entry in zip(views, described):
        entry["offset"] = (
            max(0, (view.storage_offset() * view.element_size() - low) // view.element_size()) if view.numel() else 0
        )
    return whole[low:high]


def _extent(tensor: torch.Tensor) -> tuple[int, int]:
    """The bytes of its storage that ``tensor`` (not empty) reaches: [first, end)."""
    size = tensor.element_size()
    last = tensor.storage_offset() + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return tensor.storage_offset() * size, (last + 1) * size


def _aligned(position: int) -> int:
    return -(-position // ALIGN) * ALIGN


def _layout(start: int, sizes: list[int]) -> tuple[list[int], int]:
    """Where each storage starts, and where the file ends, for storages after byte ``start``."""
    offsets, position, end = [], _aligned(start), start
    for size in sizes:
        offsets.append(position)
        end = position + size
        position = _aligned(end)
    return offsets, end


def parse(data: bytes | bytearray, max_elements: int, device: torch.device | str = "cpu"):
    """The value ``dump`` wrote, with its tensors on ``device``; raises WireError when the bytes
    are malformed or a tensor would hold more than ``max_elements`` elements. On the CPU the
    tensors are views of ``data`` when it is a bytearray (no copy), which they keep alive."""
    if data[:4] != MAGIC or len(data) < 8:
        raise WireError("not a tensor file")
    (length,) = struct.unpack("<I", data[4:8])
    if 8 + length > len(data):
        raise WireError("the header runs past the end of the file")
    try:
        header = json.loads(bytes(data[8 : 8 + length]))
        sizes = [int(n) for n in header["storages"]]
        views, skeleton = header["tensors"], header["value"]
    except (ValueError, KeyError, TypeError):
        raise WireError("the header is not valid") from None
    if any(n < 0 for n in sizes) or sum(sizes) > len(data):
        raise WireError("the declared storage sizes do not match the bytes in the file")
    offsets, end = _layout(8 + length, sizes)
    if end != len(data):
        raise WireError("the declared storage sizes do not match the bytes in the file")
    if not isinstance(data, bytearray):
        data = bytearray(data)  # writable, so that the views below may be written to
    storages = []
    for offset, size in zip(offsets, sizes):
        storage = (
            torch.frombuffer(data, dtype=torch.uint8, count=size, offset=offset)
            if size
            else torch.empty(0, dtype=torch.uint8)
        )
        storages.append(storage.to(device))
    tensors = [_view(view, storages, max_elements) for view in views]

    def decode(item):
        if isinstance(item, dict):
            if set(item) == {"$tensor"} and isinstance(item["$tensor"], int) and 0 <= item["$tensor"] < len(tensors):
                return tensors[item["$tensor"]]
            if set(item) == {"$tuple"} and isinstance(item["$tuple"], list):
                return tuple(decode(part) for part in item["$tuple"])
            if set(item) == {"$dtype"} and item["$dtype"] in DTYPES:
                return DTYPES[item["$dtype"]]
            return {key: decode(part) for key, part in item.items()}
        if isinstance(item, list):
            return [decode(part) for part in item]
        return item

    return decode(skeleton)


def _view(view: dict, storages: list[torch.Tensor], max_elements: int) -> torch.Tensor:
    try:
        dtype = DTYPES[view["dtype"]]
        storage = storages[int(view["storage"])]
        shape, stride, offset = [int(n) for n in view["shape"]], [int(n) for n in view["stride"]], int(view["offset"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise WireError("a tensor's description is not valid") from None
    if len(shape) != len(stride) or len(shape) > 8 or min(shape + stride + [offset], default=0) < 0:
        raise WireError("a tensor's shape, stride or offset is not valid")
    elements = 1
    for n in shape:
        elements *= n
    if elements > max_elements:
        raise WireError(f"a tensor has {elements} elements, more than the {max_elements} expected")
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if storage.numel() % itemsize:
        raise WireError("a storage's size is not a whole number of elements")
    if elements:  # the last element the view reaches must lie inside its storage
        last = offset + sum((n - 1) * s for n, s in zip(shape, stride))
        if (last + 1) * itemsize > storage.numel():
            raise WireError("a tensor reaches past the end of its storage")
    # Views of one storage stay views of one storage, with the layout they were sent with.
    return storage.view(dtype).as_strided(shape, stride, offset)
