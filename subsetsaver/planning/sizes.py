"""Exact checkpoint sizes, computed before anything is written.

A V2 checkpoint (TensorFlow's *tensor bundle*) is one or more ``.data`` files and one
``.index`` file. The data files hold every tensor's raw little-endian bytes back to back
(no header, no padding), so their size is exact arithmetic. The index is a sorted
string table (LevelDB's format, no compression): one ``BundleEntryProto`` per tensor
(dtype, shape, shard, offset, size, crc32c) in prefix-compressed blocks of 256 KB, a
restart point every 16 keys, then an index block and a 48-byte footer. This module
computes each entry's length and builds that table with the bundle writer's own table
builder, so the estimate matches TensorFlow's file to the byte for ordinary models; only what the index cannot know in advance (string tensors,
unknown shapes) makes it an estimate.

Example::

    >>> tensors = [SavedTensor('fc/w', 'float32', (784, 10))]
    >>> data_bytes(tensors)
    31360
    >>> index_bytes(tensors)          # what TensorFlow 2.21 writes, to the byte
    131
"""

from __future__ import annotations

import dataclasses
import math

from ..formats.tf import bundle
from ..selectors import format_bytes

_HEADER_VALUE = b"\x08\x01\x1a\x02\x08\x01"  # BundleHeaderProto{num_shards: 1, version{producer: 1}}

# Byte width of the dtypes a bundle stores as raw little-endian values.
DTYPE_BYTES = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "bool": 1, "complex64": 8, "complex128": 16,
    "qint8": 1, "quint8": 1, "qint16": 2, "quint16": 2, "qint32": 4,
}


@dataclasses.dataclass(frozen=True)
class SavedTensor:
    """One tensor as a Saver writes it.

    ``key`` is the checkpoint name. A slice of a partitioned variable also carries the
    full variable's shape and where the slice starts; ``shape`` is then the slice's.
    ``shard`` is the data file it goes to (one per device with ``sharded=True``).
    """

    key: str
    dtype: str
    shape: tuple
    full_shape: tuple | None = None
    offset: tuple | None = None
    shard: int = 0

    @property
    def is_slice(self) -> bool:
        return self.full_shape is not None

    @property
    def nbytes(self) -> int:
        width = DTYPE_BYTES.get(self.dtype)
        if width is None or any(d is None or d < 0 for d in self.shape):
            return 0
        return math.prod(self.shape) * width

    @property
    def exact(self) -> bool:
        """False when the bytes depend on the values (strings) or the shape is not known."""
        return self.dtype in DTYPE_BYTES and all(d is not None and d >= 0 for d in self.shape)


@dataclasses.dataclass(frozen=True)
class ScopeSize:
    """Bytes and counts of one top-level scope, split by fate."""

    scope: str
    saved_variables: int
    saved_bytes: int
    rest_variables: int
    rest_bytes: int


@dataclasses.dataclass(frozen=True)
class PlanSizes:
    """What a plan costs on disk, and what a full Saver would cost instead.

    ``saved_bytes``/``rest_bytes``/``total_bytes``: values of the saved, initialized and
    all variables. ``data_bytes``: the exact size of the ``.data`` file(s) the plan's
    Saver writes (summed over shards); ``index_bytes``: the ``.index`` file (estimate,
    usually exact). ``full_*``: the same for ``tf.compat.v1.train.Saver()`` over every
    global variable. ``exact`` is False when a string tensor or an unknown shape makes
    ``data_bytes`` a lower bound.
    """

    saved_bytes: int
    rest_bytes: int
    total_bytes: int
    data_bytes: int
    index_bytes: int
    data_files: int
    full_data_bytes: int
    full_index_bytes: int
    per_scope: tuple
    exact: bool = True

    @property
    def checkpoint_bytes(self) -> int:
        """``.data`` plus ``.index``: what this plan writes per checkpoint (the .meta aside)."""
        return self.data_bytes + self.index_bytes

    @property
    def full_checkpoint_bytes(self) -> int:
        return self.full_data_bytes + self.full_index_bytes

    @property
    def ratio(self) -> float:
        """How many times smaller than a full Saver's checkpoint (inf for an empty plan)."""
        return self.full_checkpoint_bytes / self.checkpoint_bytes if self.checkpoint_bytes else math.inf


def smaller_text(before: int, after: int) -> str:
    """How ``after`` bytes compare with ``before``: '3.0 times smaller', or 'the same size' when
    nothing was dropped (never '1.0 times smaller').

    >>> smaller_text(300, 100), smaller_text(100, 100)
    ('3.0 times smaller', 'the same size')
    """
    if after >= before:
        return "the same size" if after == before else f"{after / before:.1f} times larger" if before else "larger"
    if after == 0:
        return "empty"
    ratio = before / after
    return f"{ratio:.1f} times smaller" if ratio >= 1.05 else f"{100 * (before - after) / before:.0f}% smaller"


def data_bytes(tensors) -> int:
    """Exact bytes of the ``.data`` files holding ``tensors`` (raw values, no padding)."""
    return sum(t.nbytes for t in tensors)


def data_bytes_per_shard(tensors) -> dict:
    """Shard number -> bytes of that ``.data-0000k-of-0000n`` file."""
    sizes = {}
    for tensor in tensors:
        sizes[tensor.shard] = sizes.get(tensor.shard, 0) + tensor.nbytes
    return sizes


def index_bytes(tensors) -> int:
    """Size of the ``.index`` file a Saver writes for ``tensors`` (given in write order).

    Offsets follow the write order within each shard; the table itself is sorted by key.
    """
    num_shards = max((t.shard for t in tensors), default=0) + 1
    entries = {b"": _header(num_shards)}
    offsets = {}
    full_entries = {}
    for tensor in tensors:
        offset = offsets.get(tensor.shard, 0)
        offsets[tensor.shard] = offset + tensor.nbytes
        value = _entry(tensor.dtype, tensor.shape, tensor.shard, offset, tensor.nbytes)
        if tensor.is_slice:
            entries[_slice_key(tensor)] = value
            full_entries.setdefault(tensor.key, (tensor, []))[1].append(tensor)
        else:
            entries[tensor.key.encode()] = value
    for key, (first, slices) in full_entries.items():
        entries[key.encode()] = _full_entry(first, slices)
    # the table the writer builds, each value as long as its entry (the bytes do not change the layout)
    return len(bundle.build_table((key, bytes(length)) for key, length in sorted(entries.items())))


# -- BundleEntryProto ------------------------------------------------------------


def _varint(value: int) -> int:
    if value < 0:
        return 10
    length = 1
    while value >= 0x80:
        value >>= 7
        length += 1
    return length


def _field(number: int, payload: int) -> int:
    """Bytes of a length-delimited field whose payload is ``payload`` bytes."""
    return _varint(number << 3) + _varint(payload) + payload


def _shape_proto(shape) -> int:
    size = 0
    for dim in shape:
        dim_payload = 1 + _varint(dim) if dim else 0  # Dim{size: 1}; proto3 omits 0
        size += _field(2, dim_payload)
    return size


def _dtype_enum(dtype: str) -> int:
    return _DATA_TYPE_ENUMS[dtype]


_DATA_TYPE_ENUMS = {data_type.name: data_type.enum for data_type in bundle.dtypes.DATA_TYPES}


def _entry(dtype, shape, shard, offset, nbytes) -> int:
    """Length of a serialized BundleEntryProto (only its length matters here)."""
    size = 1 + _varint(_dtype_enum(dtype))
    size += _field(2, _shape_proto(shape))
    if shard:
        size += 1 + _varint(shard)
    if offset:
        size += 1 + _varint(offset)
    if nbytes:
        size += 1 + _varint(nbytes)
    return size + 5  # crc32c: fixed32, never zero once masked


def _full_entry(first, slices) -> int:
    size = 1 + _varint(_dtype_enum(first.dtype)) + _field(2, _shape_proto(first.full_shape))
    for tensor in slices:
        extents = 0
        for start, length in zip(tensor.offset, tensor.shape):
            payload = (1 + _varint(start) if start else 0) + 1 + _varint(length)
            extents += _field(1, payload)
        size += _field(7, extents)
    return size


def _header(num_shards) -> int:
    return len(_HEADER_VALUE) + _varint(num_shards) - 1


# -- the key of a slice: OrderedCode, as EncodeTensorNameSlice writes it ---------------


def _slice_key(tensor) -> bytes:
    """The slice's key in the table: ``EncodeTensorNameSlice(name, slice)`` (OrderedCode)."""
    out = bytearray(_num_increasing(0))
    for byte in tensor.key.encode():
        out += {0x00: b"\x00\xff", 0xFF: b"\xff\x00"}.get(byte, bytes([byte]))
    out += b"\x00\x01"
    out += _num_increasing(len(tensor.shape))
    for start, length in zip(tensor.offset, tensor.shape):
        out += _signed_num_increasing(start) + _signed_num_increasing(length)
    return bytes(out)


def _num_increasing(value: int) -> bytes:
    body = value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""
    return bytes([len(body)]) + body


_SIGNED_HEADER = ((0, 0), (0x80, 0), (0xC0, 0), (0xE0, 0), (0xF0, 0), (0xF8, 0), (0xFC, 0), (0xFE, 0),
                  (0xFF, 0), (0xFF, 0x80), (0xFF, 0xC0))


def _signed_num_increasing(value: int) -> bytes:
    magnitude = ~value if value < 0 else value
    if magnitude < 64:
        return bytes([(0x80 ^ value) & 0xFF])
    length = 1 + magnitude.bit_length() // 7
    encoded = bytearray(value.to_bytes(10, "big", signed=True)[10 - length:])
    encoded[0] ^= _SIGNED_HEADER[length][0]
    encoded[1] ^= _SIGNED_HEADER[length][1]
    return bytes(encoded)


def table_lines(sizes) -> list:
    """The lines of a plan's summary below its counts: bytes per scope, the checkpoint's files, and how
    much smaller they are than a full Saver's."""
    lines = [""]
    rows = [("scope", "saved", "saved size", "initialized", "initialized size")]
    for s in sizes.per_scope:
        rows.append((s.scope, str(s.saved_variables), format_bytes(s.saved_bytes), str(s.rest_variables),
                     format_bytes(s.rest_bytes)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for position, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:])]
        lines.append("  " + "  ".join(cells).rstrip())
        if position == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    lines.append("")
    exactness = "exact" if sizes.exact else "at least: string values vary"
    lines.append(f"  checkpoint files: .data {sizes.data_bytes:,} bytes ({exactness}, "
                 f"{sizes.data_files} file{'s' if sizes.data_files > 1 else ''}), "
                 f".index ~{sizes.index_bytes:,} bytes")
    lines.append(
        f"a full Saver would write {format_bytes(sizes.full_checkpoint_bytes)} (.data and .index); this plan "
        f"writes {format_bytes(sizes.checkpoint_bytes)}: "
        f"{smaller_text(sizes.full_checkpoint_bytes, sizes.checkpoint_bytes)}"
    )
    return lines
