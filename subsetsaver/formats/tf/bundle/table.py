"""TensorFlow's table format (LevelDB's SSTable), the format of a checkpoint's ``.index`` file.

A table is a run of blocks, then a 48-byte footer: the handles (varint offset and size)
of the metaindex block and of the index block, zero padding to 40 bytes, and the magic
number 0xdb4775248b80fb57 (little-endian). Each block is followed by a compression type
byte (TensorFlow writes 0: none) and the masked CRC32C of the block and that byte. A
block holds entries ``varint shared, varint unshared, varint value length, key suffix,
value``, each key sharing ``shared`` bytes with the one before, except at *restart
points*, whose offsets end the block (uint32 each, then their count). The index block
holds, for each data block, a key at least its last key and below the next block's
first, and the data block's handle.

:func:`read_table` checks all of it (magic, handles, checksums, restart points, keys in
strictly increasing order, index keys between their blocks) and gives the entries in
order; :func:`build_table` writes the bytes TensorFlow's ``TableBuilder`` writes for the
same entries (256 KiB blocks, a restart every 16 keys, shortened index keys).

Example::

    data = build_table([(b'', header), (b'conv_1/w', entry)])
    read_table(data, lambda problem, cause=None: CorruptCheckpointError(f'model.index {problem}'))
    # [(b'', header), (b'conv_1/w', entry)]
"""

from __future__ import annotations

import struct

from ...wire.crc32c import crc32c, masked_crc32c, unmasked
from ...wire.protobuf import decode_varint, encode_varint
from .problems import quoted_key

MAGIC = 0xDB4775248B80FB57
FOOTER_BYTES = 48
HANDLES_BYTES = 40  # two block handles of at most 10 + 10 bytes, zero-padded
TRAILER_BYTES = 5  # compression type, masked CRC32C
NO_COMPRESSION, SNAPPY_COMPRESSION = 0, 1
BLOCK_BYTES = 262144  # TensorFlow's table::Options defaults
RESTART_INTERVAL = 16
_VARINT32_BYTES = 5


# ---------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------


def read_table(data, fail) -> list:
    """``[(key, value)]`` of table ``data`` in key order, every structure and checksum checked.

    ``fail(problem, cause=...)`` makes the exception to raise for a sentence such as
    "fails the checksum of its index block" (the caller names the file).
    """
    if len(data) < FOOTER_BYTES:
        raise fail(f"holds {len(data)} bytes, fewer than the {FOOTER_BYTES}-byte footer of a table")
    if int.from_bytes(data[-8:], "little") != MAGIC:
        raise fail("does not end with the magic number of a TensorFlow table (it is not a checkpoint index)")
    footer = data[-FOOTER_BYTES:-8]
    try:
        _, position = _handle(footer, 0)  # the metaindex block: empty, TensorFlow never reads it
        index_handle, _ = _handle(footer, position)
    except ValueError:
        raise fail("has a footer whose block handles do not parse") from None
    index = _entries(_block(data, index_handle, "index block", fail), "index block", fail)
    table, blocks = [], []
    for number, (separator, encoded) in enumerate(index):
        where = f"data block {number}"
        try:
            handle, end = _handle(encoded, 0)
        except ValueError:
            handle, end = None, -1
        if end != len(encoded):
            raise fail(f"has an index entry for {where} that is not a block handle")
        entries = _entries(_block(data, handle, where, fail), where, fail)
        if entries and entries[-1][0] > separator:
            raise fail(f"indexes {where} under key {quoted_key(separator)}, before its last key "
                       f"{quoted_key(entries[-1][0])}")
        if entries and blocks and entries[0][0] <= blocks[-1]:  # (index keys increase: so do all keys)
            raise fail(f"has {where} starting at key {quoted_key(entries[0][0])}, not after the index key "
                       f"{quoted_key(blocks[-1])} of the block before it")
        blocks.append(separator)
        table.extend(entries)
    return table


def _handle(data, position):
    """``((offset, size), next position)`` of the block handle at ``position``."""
    offset, position = decode_varint(data, position)
    size, position = decode_varint(data, position)
    return (offset, size), position


def _block(data, handle, where, fail):
    """The contents of the block at ``handle``, its checksum and compression type checked."""
    offset, size = handle
    end = offset + size
    if end + TRAILER_BYTES > len(data) - FOOTER_BYTES:
        raise fail(f"has its {where} at bytes {offset} to {end}, past the end of its blocks "
                   f"({len(data) - FOOTER_BYTES} bytes)")
    stored = int.from_bytes(data[end + 1:end + TRAILER_BYTES], "little")
    if crc32c(data[offset:end + 1]) != unmasked(stored):
        raise fail(f"fails the checksum of its {where} (bytes {offset} to {end})")
    kind = data[end]
    if kind == SNAPPY_COMPRESSION:
        raise fail(f"has a snappy-compressed {where}, but TensorFlow writes checkpoint indexes uncompressed",
                   cause="not written by TensorFlow's checkpoint writer")
    if kind != NO_COMPRESSION:
        raise fail(f"has its {where} in an unknown compression type ({kind})")
    return data[offset:end]


def _entries(block, where, fail):
    """``[(key, value)]`` of one block: every entry inside it, restart points where entries start
    afresh, keys strictly increasing."""
    if len(block) < 4:
        raise fail(f"has a {where} of {len(block)} bytes, too short for its restart count")
    restarts = int.from_bytes(block[-4:], "little")
    if not 1 <= restarts <= (len(block) - 4) // 4:
        raise fail(f"has a {where} of {len(block)} bytes declaring {restarts} restart points")
    limit = len(block) - 4 - 4 * restarts
    points = struct.unpack_from(f"<{restarts}I", block, limit)
    entries, fresh, position, key = [], set(), 0, b""  # fresh: offsets of entries sharing no prefix
    try:
        while position < limit:
            start = position
            shared, position = decode_varint(block, position, _VARINT32_BYTES)
            unshared, position = decode_varint(block, position, _VARINT32_BYTES)
            length, position = decode_varint(block, position, _VARINT32_BYTES)
            if shared > len(key) or position + unshared + length > limit:
                raise ValueError("an entry runs past its end")
            following = key[:shared] + bytes(block[position:position + unshared])
            if entries and following <= key:
                raise fail(f"lists the key {quoted_key(following)} after {quoted_key(key)} (keys out of order)")
            position += unshared
            entries.append((following, bytes(block[position:position + length])))
            position += length
            key = following
            if shared == 0:
                fresh.add(start)
    except ValueError as error:
        raise fail(f"has a {where} whose entries do not parse ({error})") from None
    starts = fresh or {0}
    if points[0] != 0 or any(b <= a for a, b in zip(points, points[1:])) or not set(points) <= starts:
        raise fail(f"has a {where} whose restart points are not the starts of entries")
    return entries


# ---------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------


class _BlockBuilder:
    """Entries with keys prefix-compressed against the previous one, a restart every ``interval`` keys."""

    def __init__(self, interval):
        self.interval = interval
        self.reset()

    def reset(self):
        self.buffer, self.restarts, self.counter, self.last_key = bytearray(), [0], 0, b""

    def add(self, key, value):
        shared = 0
        if self.counter < self.interval:
            limit = min(len(key), len(self.last_key))
            while shared < limit and key[shared] == self.last_key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.counter = 0
        self.buffer += encode_varint(shared) + encode_varint(len(key) - shared) + encode_varint(len(value))
        self.buffer += key[shared:]
        self.buffer += value
        self.last_key = key
        self.counter += 1

    def size_estimate(self):
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self):
        return bytes(self.buffer) + struct.pack(f"<{len(self.restarts)}I", *self.restarts) + \
            struct.pack("<I", len(self.restarts))


def _shortest_separator(start, limit):
    """A short key >= ``start`` and < ``limit``, as TableBuilder picks for the index block."""
    common = 0
    while common < min(len(start), len(limit)) and start[common] == limit[common]:
        common += 1
    if common < min(len(start), len(limit)):
        byte = start[common]
        if byte < 0xFF and byte + 1 < limit[common]:
            return start[:common] + bytes([byte + 1])
    return start


def _short_successor(key):
    """A short key >= ``key``: its first byte that is not 0xff, plus one."""
    for position, byte in enumerate(key):
        if byte != 0xFF:
            return key[:position] + bytes([byte + 1])
    return key


def build_table(entries) -> bytes:
    """The table TensorFlow's TableBuilder writes for ``entries`` ([(key, value)], keys strictly increasing)."""
    out, data_block, index_block = bytearray(), _BlockBuilder(RESTART_INTERVAL), _BlockBuilder(1)
    last_key, pending = None, None  # pending: the handle of a flushed block not yet in the index

    def write_block(block):
        contents = block.finish()
        handle = (len(out), len(contents))
        out.extend(contents)
        out.append(NO_COMPRESSION)
        out.extend(struct.pack("<I", masked_crc32c(contents + bytes([NO_COMPRESSION]))))
        block.reset()
        return handle

    def flush():
        return write_block(data_block) if data_block.buffer else None

    for key, value in entries:
        if last_key is not None:
            if key <= last_key:
                raise ValueError(f"table keys out of order: {key!r} after {last_key!r}")
            if len(key) + len(value) >= 2 * BLOCK_BYTES and data_block.buffer:
                pending = flush()
        if pending is not None:
            index_block.add(_shortest_separator(last_key, key), _encoded_handle(pending))
            pending = None
        last_key = key
        data_block.add(key, value)
        if data_block.size_estimate() >= BLOCK_BYTES:
            pending = flush()
    if data_block.buffer:
        pending = flush()
    metaindex = write_block(_BlockBuilder(RESTART_INTERVAL))
    if pending is not None:
        index_block.add(_short_successor(last_key), _encoded_handle(pending))
    index = write_block(index_block)
    handles = _encoded_handle(metaindex) + _encoded_handle(index)
    out.extend(handles.ljust(HANDLES_BYTES, b"\0") + struct.pack("<Q", MAGIC))
    return bytes(out)


def _encoded_handle(handle):
    return encode_varint(handle[0]) + encode_varint(handle[1])
