"""The schemas of ``tensor_bundle.proto`` and the messages it uses (versions, tensor_shape, tensor_slice).

Read and written with :mod:`subsetsaver.formats.wire.protobuf`.

Example::

    >>> from subsetsaver.formats.wire.protobuf import decode
    >>> decode(BUNDLE_HEADER, bytes.fromhex('08011a020801'))
    {'num_shards': 1, 'version': {'producer': 1}}
"""

from __future__ import annotations

from ...wire.protobuf import Field, Message

VERSION_DEF = Message(
    "VersionDef",
    Field(1, "producer", "int32"),
    Field(2, "min_consumer", "int32"),
    Field(3, "bad_consumers", "int32", repeated=True),
)
BUNDLE_HEADER = Message(
    "BundleHeaderProto",
    Field(1, "num_shards", "int32"),
    Field(2, "endianness", "enum"),  # LITTLE = 0, BIG = 1
    Field(3, "version", VERSION_DEF),
)
DIMENSION = Message("TensorShapeProto.Dim", Field(1, "size", "int64"), Field(2, "name", "bytes"))
TENSOR_SHAPE = Message(
    "TensorShapeProto",
    Field(2, "dim", DIMENSION, repeated=True),
    Field(3, "unknown_rank", "bool"),
)
EXTENT = Message(
    "TensorSliceProto.Extent",
    Field(1, "start", "int64"),
    Field(2, "length", "int64", tracked=True),  # oneof has_length: absent means the whole dimension
)
TENSOR_SLICE = Message("TensorSliceProto", Field(1, "extent", EXTENT, repeated=True))
BUNDLE_ENTRY = Message(
    "BundleEntryProto",
    Field(1, "dtype", "enum"),
    Field(2, "shape", TENSOR_SHAPE),
    Field(3, "shard_id", "int32"),
    Field(4, "offset", "int64"),
    Field(5, "size", "int64"),
    Field(6, "crc32c", "fixed32"),
    Field(7, "slices", TENSOR_SLICE, repeated=True),
)
