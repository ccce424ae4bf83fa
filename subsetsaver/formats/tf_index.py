"""Checking a TensorFlow checkpoint's declared tensor sizes before anything is allocated.

TensorFlow allocates a tensor's declared shape before it compares that with the bytes
stored, so an ``.index`` that declares 8 GiB over a 2 MiB ``.data`` file exhausts memory
on restore instead of failing. :func:`check_declared_sizes` reads the ``.index`` entries
(dtype, shape, shard, offset and size of each tensor) with a small reader of TensorFlow's
table format, since TensorFlow's Python API exposes shapes but not the stored sizes, and
compares them with the ``.data`` files on disk, never reading a value.
:func:`subsetsaver.catalog.open_checkpoint` runs it on every checkpoint it opens.

Example::

    >>> check_declared_sizes('train/model-9000')   # None, or CorruptCheckpointError naming the tensor
"""

from __future__ import annotations

import math

from ..errors import CorruptCheckpointError

_TABLE_MAGIC = 0xDB4775248B80FB57  # the last 8 bytes of a TensorFlow table (the .index file)
_TABLE_FOOTER_BYTES = 48
_UNCOMPRESSED_BLOCK = 0
# dtypes whose stored size is not elements x dtype.size (no fixed width, or packed below a byte)
_UNSIZED_DTYPES = frozenset({"string", "resource", "variant", "int4", "uint4", "int2", "uint2", "float4_e2m1fn"})


def check_declared_sizes(prefix, reader=None) -> None:
    """CorruptCheckpointError unless every tensor of checkpoint ``prefix`` fits the bytes stored for it.

    Reads the ``.index`` entries (dtype, shape, shard, offset, size of each tensor) and the sizes
    of the ``.data`` files, never a value: a tensor whose shape x dtype size exceeds the size of
    its entry, or whose entry ends past the end of its ``.data`` file, is truncated or tampered.
    Tensors in a missing ``.data`` file are left to the caller (it names the missing file). When
    the index cannot be read here (compressed blocks), ``reader``'s shapes are checked against the
    total size of the ``.data`` files instead, an upper bound.

    >>> check_declared_sizes('train/model-9000')  # None, or CorruptCheckpointError
    """
    import tensorflow as tf

    index = _read_table(file_bytes(prefix + ".index"))
    if index is None:
        _check_against_total(prefix, reader or tf.train.load_checkpoint(prefix))
        return
    from tensorflow.core.protobuf import tensor_bundle_pb2

    header = tensor_bundle_pb2.BundleHeaderProto.FromString(index.pop(b"", b""))
    shards = max(header.num_shards, 1)
    shard_bytes, dtypes = {}, {}  # shard id -> size of its .data file (None: missing); enum -> (name, size)
    for key, value in index.items():
        entry = tensor_bundle_pb2.BundleEntryProto.FromString(value)
        problem = _entry_problem(prefix, entry, shards, shard_bytes, dtypes)
        if problem:
            raise CorruptCheckpointError(
                f"cannot read checkpoint '{prefix}': tensor '{_entry_name(key)}' {problem} (truncated or tampered); "
                "restore from an intact copy of the checkpoint"
            )


def _entry_problem(prefix, entry, shards, shard_bytes, dtypes):
    """What is wrong with one BundleEntryProto of ``prefix``, or None (runs for every tensor of every restore)."""
    if entry.slices:  # a partitioned variable: its parts are entries of their own
        return None
    if entry.dtype not in dtypes:
        dtypes[entry.dtype] = _dtype_name_and_size(entry.dtype)
    dtype, item_bytes = dtypes[entry.dtype]
    if dtype is None:
        return f"declares an unknown dtype ({entry.dtype})"
    shape = [dim.size for dim in entry.shape.dim]
    if any(size < 0 for size in shape):
        return f"declares the shape {shape}"
    declared = math.prod(shape) * item_bytes  # value_bytes, without its cache: shapes rarely repeat
    if declared > entry.size:
        return f"declares {shape} {dtype} ({declared} bytes) but the checkpoint stores {entry.size} bytes for it"
    if entry.shard_id >= shards:
        return f"lies in .data file {entry.shard_id} of a checkpoint with {shards}"
    if entry.shard_id not in shard_bytes:
        shard_bytes[entry.shard_id] = _file_size(_data_file(prefix, entry.shard_id, shards))
    available = shard_bytes[entry.shard_id]
    if available is not None and entry.offset + entry.size > available:
        return (f"declares {shape} {dtype} stored in bytes {entry.offset} to {entry.offset + entry.size} "
                f"of '{_data_file(prefix, entry.shard_id, shards)}', which holds {available} bytes")
    return None


def _dtype_name_and_size(enum):
    """('float32', 4) for a DataType enum; size 0 where elements x size is not the stored size; (None, 0) if unknown."""
    import tensorflow as tf

    try:
        dtype = tf.as_dtype(enum)
    except TypeError:
        return None, 0
    return dtype.name, 0 if dtype.name in _UNSIZED_DTYPES else dtype.size


def _data_file(prefix, shard, shards) -> str:
    return f"{prefix}.data-{shard:05d}-of-{shards:05d}"


def _check_against_total(prefix, reader) -> None:
    """The fallback of :func:`check_declared_sizes`: no tensor may declare more than all .data files hold."""
    import tensorflow as tf

    available = sum(filter(None, map(_file_size, tf.io.gfile.glob(f"{prefix}.data-?????-of-?????"))))
    dtypes = reader.get_variable_to_dtype_map()
    for name, shape in reader.get_variable_to_shape_map().items():
        sized = dtypes[name].name not in _UNSIZED_DTYPES and all(d >= 0 for d in shape)
        declared = math.prod(shape) * dtypes[name].size if sized else 0
        if declared > available:
            raise CorruptCheckpointError(
                f"cannot read checkpoint '{prefix}': tensor '{name}' declares {list(shape)} {dtypes[name].name} "
                f"({declared} bytes) but its .data files hold {available} bytes in all (truncated or tampered); "
                "restore from an intact copy of the checkpoint"
            )


def file_bytes(path) -> bytes:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def _file_size(path):
    """Size of ``path`` in bytes, None if it does not exist."""
    import tensorflow as tf

    try:
        return tf.io.gfile.stat(path).length
    except tf.errors.NotFoundError:
        return None


def _read_table(data):
    """{key: value} of a TensorFlow table (the format of a checkpoint's .index, leveldb's SSTable);
    None if a block is compressed or the layout is not the one expected. Checksums are not
    verified: TensorFlow's reader has read the same file first."""
    if len(data) < _TABLE_FOOTER_BYTES or int.from_bytes(data[-8:], "little") != _TABLE_MAGIC:
        return None
    footer = data[-_TABLE_FOOTER_BYTES:]
    try:
        _, position = _varint(footer, 0)  # the metaindex block: unused
        _, position = _varint(footer, position)
        index_offset, position = _varint(footer, position)
        index_size, _ = _varint(footer, position)
        index_block = _table_block(data, index_offset, index_size)
        if index_block is None:
            return None
        table = {}
        for _, handle in index_block:
            offset, position = _varint(handle, 0)
            size, _ = _varint(handle, position)
            block = _table_block(data, offset, size)
            if block is None:
                return None
            table.update(block)
    except IndexError:  # a varint or block running past the end
        return None
    return table


def _table_block(data, offset, size):
    """[(key, value)] of one block (keys share prefixes with the previous key), or None if compressed."""
    if offset + size + 1 > len(data) or data[offset + size] != _UNCOMPRESSED_BLOCK:
        return None
    block = data[offset:offset + size]
    restarts = int.from_bytes(block[-4:], "little")
    end, position, key, entries = size - 4 - 4 * restarts, 0, b"", []
    while position < end:
        shared, position = _varint(block, position)
        unshared, position = _varint(block, position)
        length, position = _varint(block, position)
        key = key[:shared] + block[position:position + unshared]
        position += unshared
        entries.append((key, block[position:position + length]))
        position += length
    return entries


def _varint(data, position):
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _entry_name(key) -> str:
    """The variable name in an index key; a slice's key is ordered-code encoded: 0, name, rank, extents."""
    if key[:1] == b"\x00":
        key = key[1:key.find(b"\x00\x01", 1)].replace(b"\x00\xff", b"\x00").replace(b"\xff\x00", b"\xff")
    return key.decode("utf-8", "backslashreplace")
