"""A minimal streaming zip writer: stored members, 64-byte aligned data, zip64 when needed.

It never seeks back, so it works on streams that cannot seek (``tf.io.gfile`` writers). A
member whose CRC is known before it is written carries it in its local header; one whose CRC
is not (a large array streamed from a checkpoint) is checksummed as its bytes are written, a
megabyte at a time, and its CRC follows its data in a data descriptor (general purpose flag
bit 3, which ``zipfile`` and so ``np.load`` read): the disk then takes each megabyte while the
next is checksummed, instead of waiting for a pass over the whole array first.

Small writes are joined into one per megabyte. Thousands of equal-shaped small arrays (a
save's stack of small variables) go in as one block (:meth:`ZipWriter.add_rows`): every
member of the block has a local header of one length and the block a fixed stride, so its
bytes are a template filled by two numpy assignments, and only the CRCs are computed per
member. The template is built once per layout and reused by every later save of the same
variables.

Example::

    zip_writer = ZipWriter(sink); zip_writer.add('w.npy', (header, array), size, crc); zip_writer.finish()
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

from ..memory import ALIGNMENT, evict_oldest

_JOINED_BELOW = 64 << 10  # writes smaller than this are joined ...
_JOIN_UP_TO = 1 << 20     # ... into one of about this size
_LOCAL = struct.Struct("<IHHHHHIIIHH")           # a local file header without name and extra field
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")   # a central directory record without name and extra field
_LOCAL_CRC_AT, _CENTRAL_CRC_AT = 14, 16          # where the CRC-32 sits in each
_DOS_DATE = (0 << 9) | (1 << 5) | 1              # 1980-01-01: reproducible bytes
_PADDING_ID = 0xD935                             # the extra-field id zipalign uses for padding
_PADDING_FIELD = 4                               # its id and length
_BIG = 0xFFFFFFFF
_CRC_FOLLOWS = 0x08                              # general purpose flag bit 3: the CRC is in a data descriptor
_CHECKSUMMED_AT_A_TIME = 1 << 20                 # bytes of a member checksummed, then written, in turn


def bytes_of(array):
    """A flat byte view of a C-contiguous array (no copy)."""
    return memoryview(array.reshape(-1)).cast("B") if array.size else memoryview(b"")


def central_record(encoded, crc, size, offset, force_zip64=False, flags=0) -> bytes:
    """The central directory record of one member (with a zip64 field when its size or offset needs one)."""
    big_size = force_zip64 or size >= _BIG
    big_offset = force_zip64 or offset >= _BIG
    fields = ([size, size] if big_size else []) + ([offset] if big_offset else [])
    extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
    return _CENTRAL.pack(
        0x02014B50, (3 << 8) | 45, 45 if fields else 20, flags, 0, 0, _DOS_DATE, crc, _BIG if big_size else size,
        _BIG if big_size else size, len(encoded), len(extra), 0, 0, 0, 0o100644 << 16, _BIG if big_offset else offset,
    ) + encoded + extra


@dataclasses.dataclass(frozen=True)
class RowsLayout:
    """Where a block of equal-shaped members sits: ``count`` members of ``stride`` bytes from ``start``,
    each a local header of ``local`` bytes, the ``.npy`` ``header``, then ``row_nbytes`` of data; the
    ``template`` of the block's bytes and of its central records, with the CRC fields at 0."""

    members: tuple         # member names
    header: bytes
    header_crc: int
    row_nbytes: int
    start: int
    local: int
    stride: int
    template: bytes
    central: bytes
    central_crc_bytes: object  # numpy index array: the 4 bytes of each member's CRC in ``central``, in order

    @property
    def count(self) -> int:
        return len(self.members)


def rows_layout(members, header, row_nbytes, start, force_zip64=False) -> RowsLayout:
    """The layout of a block of ``members`` (names) at file offset ``start``, cached: the same
    variables saved again at the same place reuse it."""
    key = (tuple(members), header, row_nbytes, start, force_zip64)
    found = _layouts.get(key)
    if found is not None:
        return found
    encoded = [member.encode("ascii") for member in members]
    local = max(_LOCAL.size + len(name) + _PADDING_FIELD for name in encoded)
    local += (-(start + local + len(header))) % ALIGNMENT  # every member's data 64-byte aligned
    stride = local + len(header) + row_nbytes
    stride += (-stride) % ALIGNMENT  # the gap after each member's data keeps the next one aligned
    template, central, crc_at = bytearray(), bytearray(), []
    for index, name in enumerate(encoded):
        padding = local - _LOCAL.size - len(name) - _PADDING_FIELD
        size = len(header) + row_nbytes
        template += _LOCAL.pack(0x04034B50, 20, 0, 0, 0, _DOS_DATE, 0, size, size, len(name),
                                _PADDING_FIELD + padding) + name + struct.pack("<HH", _PADDING_ID, padding)
        template += b"\0" * padding + header + b"\0" * (stride - local - len(header))
        crc_at.append(len(central) + _CENTRAL_CRC_AT)
        central += central_record(name, 0, size, start + index * stride, force_zip64)
    import numpy as np

    crc_bytes = (np.array(crc_at, dtype=np.intp)[:, None] + np.arange(4)).reshape(-1)
    layout = RowsLayout(tuple(members), header, zlib.crc32(header), row_nbytes, start, local, stride,
                        bytes(template), bytes(central), crc_bytes)
    _layouts[key] = layout
    evict_oldest(_layouts, keep=8)
    return layout


_layouts = {}


class ZipWriter:
    """Stored members written in order to ``sink``, then the central directory (:meth:`finish`).

    zip_writer = ZipWriter(sink); zip_writer.add('w.npy', (header, array), size, crc); zip_writer.finish()
    """

    def __init__(self, sink, *, force_zip64=False):
        self._sink = sink
        self.offset = 0
        self.force_zip64 = force_zip64
        self._central = []  # per member (encoded, crc, size, offset, flags), or the bytes of a block's records
        self._records = 0
        self._pending, self._pending_bytes = [], 0  # small writes, joined into one

    def _write(self, data):
        size = len(data) if isinstance(data, (bytes, bytearray)) else data.nbytes
        if size < _JOINED_BELOW:  # thousands of small arrays: one sink write per megabyte, not three per array
            self._pending.append(bytes(data))
            self._pending_bytes += size
            if self._pending_bytes >= _JOIN_UP_TO:
                self._flush()
        else:
            self._flush()
            self._sink.write(data)
        self.offset += size

    def _flush(self):
        if self._pending:
            self._sink.write(b"".join(self._pending))
            self._pending, self._pending_bytes = [], 0

    def add(self, name, pieces, size, crc=None) -> int:
        """Member ``name`` of ``size`` bytes: ``pieces`` (bytes or arrays) in order; returns its CRC-32.
        ``crc``: the CRC-32 if known (it goes in the local header), else None (it is taken while the
        pieces are written and follows them in a data descriptor)."""
        encoded = name.encode("ascii")
        offset = self.offset
        zip64 = self.force_zip64 or size >= _BIG
        extra = struct.pack("<HHQQ", 1, 16, size, size) if zip64 else b""
        used = offset + _LOCAL.size + len(encoded) + len(extra) + _PADDING_FIELD
        padding = (-used) % ALIGNMENT
        extra += struct.pack("<HH", _PADDING_ID, padding) + b"\0" * padding
        stored_size = _BIG if zip64 else size
        follows = crc is None  # the CRC is taken while the pieces are written, and follows them
        flags = _CRC_FOLLOWS if follows else 0
        header = _LOCAL.pack(0x04034B50, 45 if zip64 else 20, flags, 0, 0, _DOS_DATE, crc or 0, stored_size,
                             stored_size, len(encoded), len(extra)) + encoded + extra
        self._write(header)
        running = 0
        for piece in pieces:
            data = piece if isinstance(piece, bytes) else bytes_of(piece)
            if not follows:
                self._write(data)
                continue
            for start in range(0, len(data), _CHECKSUMMED_AT_A_TIME):
                part = data[start:start + _CHECKSUMMED_AT_A_TIME]
                running = zlib.crc32(part, running)
                self._write(part)
        if follows:
            crc = running
            self._write(struct.pack("<IIQQ" if zip64 else "<IIII", 0x08074B50, crc, size, size))
        self._central.append((encoded, crc, size, offset, flags))
        self._records += 1
        return crc

    def add_rows(self, layout, rows):
        """The members of ``layout`` (at the current offset), member ``i`` holding ``rows[i]`` (a
        C-contiguous array of ``layout.count`` equal rows); returns their CRC-32s (a uint32 array)."""
        import numpy as np

        if layout.start != self.offset:
            raise ValueError(f"a block laid out at offset {layout.start} cannot be written at {self.offset}")
        count, nbytes = layout.count, layout.row_nbytes
        data = np.ascontiguousarray(rows).reshape(count, -1).view(np.uint8)
        block = np.frombuffer(bytearray(layout.template), dtype=np.uint8).reshape(count, layout.stride)
        first = layout.local + len(layout.header)
        block[:, first:first + nbytes] = data
        flat, seed = memoryview(data.reshape(-1)), layout.header_crc
        crcs = [zlib.crc32(flat[i * nbytes:(i + 1) * nbytes], seed) for i in range(count)]
        crcs = np.array(crcs, dtype="<u4")
        crc_bytes = crcs.view(np.uint8)
        block[:, _LOCAL_CRC_AT:_LOCAL_CRC_AT + 4] = crc_bytes.reshape(count, 4)
        central = np.frombuffer(bytearray(layout.central), dtype=np.uint8)
        central[layout.central_crc_bytes] = crc_bytes
        self._flush()
        self._sink.write(memoryview(block.reshape(-1)))
        self.offset += block.nbytes
        self._central.append(central.tobytes())
        self._records += count
        return crcs

    def finish(self):
        """The central directory and its end records (zip64 ones when sizes or offsets need them)."""
        start = self.offset
        for record in self._central:
            if isinstance(record, bytes):
                self._write(record)
            else:
                encoded, crc, size, offset, flags = record
                self._write(central_record(encoded, crc, size, offset, self.force_zip64, flags))
        end = self.offset
        count, directory_size = self._records, end - start
        if self.force_zip64 or count >= 0xFFFF or directory_size >= _BIG or start >= _BIG:
            self._write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, directory_size, start))
            self._write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
            self._write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, _BIG, _BIG, 0))
        else:
            self._write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, directory_size, start, 0))
        self._flush()
