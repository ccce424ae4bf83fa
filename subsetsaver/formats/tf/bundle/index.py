"""A checkpoint's ``.index``, parsed and checked: what each tensor is and where its bytes lie.

:func:`parse_index` turns the table's entries into a :class:`BundleIndex`. The header
(key ``""``, a BundleHeaderProto) must declare little-endian data and a format version
this reader may read; every other key is a tensor name holding a BundleEntryProto. An
entry must declare a known dtype, a valid shape whose element count and byte size fit
in an int64, a size that fits what it declares, and a data file of the checkpoint. A
partitioned tensor lists its parts as slices; each part is an entry of its own, under
its ordered-code key; the parts never overlap (TensorFlow leaves some slots of partitioned
variables covered only in part).
:func:`check_data_files` then checks every tensor's bytes against its data file's size.
Nothing here reads a value.

Example::

    index = parse_index('/ckpt/model', read_table(data, fail))
    index.tensors['conv_1/w'].spec
    # TensorSpec(name='conv_1/w', shape=(5, 5, 1, 32), dtype='float32', nbytes=3200, partitioned=False)
"""

from __future__ import annotations

import dataclasses
import math
import typing

from ....errors import CheckpointNotFoundError, clipped
from ...wire.protobuf import decode
from . import dtypes as dtype_table
from .problems import corrupt, key_subject, quoted_key, tensor_subject
from .proto import BUNDLE_ENTRY, BUNDLE_HEADER
from .slices import UNDECIDED, WHOLE_DIMENSION, extent_text, first_overlap, region_of, slice_key

INT64_MAX = (1 << 63) - 1
MAX_DIMENSIONS = 254  # TensorShape::MaxDimensions()
READER_VERSION = 1  # kTensorBundleVersion: the format version this reader consumes
LITTLE_ENDIAN, BIG_ENDIAN = 0, 1
HEADER_KEY = b""
_POINTER_BYTES = 8  # numpy's itemsize of the object arrays strings read as
_SHOWN_DIMENSIONS = 8


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What a checkpoint says about one tensor: ``nbytes`` is the size of its stored bytes (for
    strings the lengths, checksum and bytes; for a partitioned tensor the sum of its parts)."""

    name: str
    shape: tuple
    dtype: str
    nbytes: int
    partitioned: bool = False


class FormatVersion(typing.NamedTuple):
    """The header's VersionDef: the writer's format version and the readers it excludes."""

    producer: int
    min_consumer: int
    bad_consumers: tuple


@dataclasses.dataclass(frozen=True)
class StoredTensor:
    """One entry whose bytes are in a data file: ``crc32c`` is the masked checksum stored."""

    subject: str  # "tensor 'w'" or "tensor 'w' (part 0,4:-)", for messages
    data_type: dtype_table.DataType
    shape: tuple
    shard: int
    offset: int
    size: int
    crc32c: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class IndexedTensor:
    """A tensor of the checkpoint: its spec, and its bytes (``stored``) or, partitioned, its ``parts``:
    ``((region, StoredTensor), ...)``, a region ``((start, stop), ...)`` per dimension, known to be
    ``disjoint`` unless a crafted file has too many of them to compare on opening."""

    spec: TensorSpec
    data_type: dtype_table.DataType
    stored: StoredTensor | None
    parts: tuple = ()
    disjoint: bool = True  # False: too many parts to tell on opening; told when they are read


@dataclasses.dataclass(frozen=True)
class BundleIndex:
    """The parsed ``.index``: header fields and the tensors, in key order."""

    prefix: str
    num_shards: int
    version: FormatVersion
    tensors: dict

    def stored(self):
        """Every :class:`StoredTensor` (parts included), in key order of their tensors."""
        for tensor in self.tensors.values():
            yield from ([tensor.stored] if tensor.stored else [part for _, part in tensor.parts])


def shape_text(dims) -> str:
    """A declared shape for a message: ``[5, 5, 1, 32]``, or its first dimensions and how many it has.

    >>> shape_text([1] * 200)
    '[1, 1, 1, 1, 1, 1, 1, 1, ... (200 dimensions)]'
    """
    dims = list(dims)
    if len(dims) <= _SHOWN_DIMENSIONS:
        return str(dims)
    return f"[{', '.join(str(size) for size in dims[:_SHOWN_DIMENSIONS])}, ... ({len(dims)} dimensions)]"


def number_text(number) -> str:
    """A number for a message: its digits, or the power of two it reaches when it is longer than 100 bits
    (a product of declared sizes, which Python may even refuse to print).

    >>> number_text(2 ** 64), number_text(2 ** 15748)
    ('18446744073709551616', '2**15748 or more')
    """
    bits = number.bit_length()
    return str(number) if bits <= 100 else f"2**{bits - 1} or more"


def index_path(prefix) -> str:
    """``PREFIX.index``."""
    return f"{prefix}.index"


def data_path(prefix, shard, num_shards) -> str:
    """``PREFIX.data-0000K-of-0000N``, the data file of shard ``shard``."""
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


# ---------------------------------------------------------------------------------
# The header
# ---------------------------------------------------------------------------------


def _header(prefix, entries):
    index = f"'{index_path(prefix)}'"
    if not entries or entries[0][0] != HEADER_KEY:
        raise corrupt(prefix, index, "has no header entry (the empty key)")
    try:
        header = decode(BUNDLE_HEADER, entries[0][1])
    except ValueError as error:
        raise corrupt(prefix, index, f"has a header that does not parse as a BundleHeaderProto ({error})") from None
    num_shards = header.get("num_shards", 0)
    if num_shards < 1:
        raise corrupt(prefix, index, f"declares {num_shards} data files")
    if num_shards > max(1, len(entries) - 1) + 1:
        # TensorFlow writes one data file per device that holds variables, so each holds a tensor; a checkpoint
        # published over another may add one empty file (formats.publish): bounded by the entries, every loop
        # over the data files is as short as the index is long.
        raise corrupt(prefix, index, f"declares {num_shards} data files for {len(entries) - 1} index entries "
                      "(each data file but one holds a tensor)")
    endianness = header.get("endianness", LITTLE_ENDIAN)
    if endianness == BIG_ENDIAN:
        raise corrupt(prefix, index, "was written on a big-endian machine, and this reader reads only "
                      "little-endian data", cause=None,
                      remedy="load it with TensorFlow, which swaps the bytes, and save it again")
    if endianness != LITTLE_ENDIAN:
        raise corrupt(prefix, index, f"declares an unknown byte order ({endianness})")
    versions = header.get("version", {})
    version = FormatVersion(versions.get("producer", 0), versions.get("min_consumer", 0),
                            tuple(versions.get("bad_consumers", ())))
    newer = "read it with the TensorFlow version that wrote it"
    if version.producer < 0:
        raise corrupt(prefix, index, f"declares the format version {version.producer}, older than any reader's")
    if version.min_consumer > READER_VERSION:
        raise corrupt(prefix, index, f"needs a reader of format version {version.min_consumer} or later, and this "
                      f"reader is version {READER_VERSION}", cause="written by a newer TensorFlow", remedy=newer)
    if READER_VERSION in version.bad_consumers:
        raise corrupt(prefix, index, f"declares that readers of format version {READER_VERSION} must not read it "
                      f"(bad_consumers {clipped(list(version.bad_consumers))})", cause="written by a newer TensorFlow",
                      remedy=newer)
    return num_shards, version


# ---------------------------------------------------------------------------------
# Entries
# ---------------------------------------------------------------------------------


def parse_index(prefix, entries) -> BundleIndex:
    """The :class:`BundleIndex` of the table ``entries`` ([(key, value)] in key order) of checkpoint ``prefix``."""
    prefix = str(prefix)
    num_shards, version = _header(prefix, entries)
    decoded = {}
    for key, value in entries[1:]:
        try:
            decoded[key] = decode(BUNDLE_ENTRY, value)
        except ValueError as error:
            raise corrupt(prefix, key_subject(key), f"has an index entry that does not parse as a "
                          f"BundleEntryProto ({error})") from None
    parts = {slice_key(key, extents) for key, entry in decoded.items() for extents in _listed_extents(entry)}
    tensors = {}
    for key, entry in decoded.items():
        if key[:1] == b"\x00":  # the key of a part (ordered code starts with the number 0): checked below
            continue
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise corrupt(prefix, f"'{index_path(prefix)}'", f"holds the key {quoted_key(key)}, which is not a "
                          "UTF-8 tensor name") from None
        check = _Checker(prefix, num_shards, tensor_subject(name))
        tensors[name] = check.partitioned(name, entry, decoded) if entry.get("slices") else check.tensor(name, entry)
    for key in decoded:  # after the tensors, so that a tensor's own problem is told rather than its parts'
        if key[:1] == b"\x00" and key not in parts:
            raise corrupt(prefix, key_subject(key), "is stored as a part of a partitioned tensor that lists "
                          "no such part")
    return BundleIndex(prefix, num_shards, version, tensors)


def _listed_extents(entry):
    """The extents of each part a partitioned tensor's entry lists, as its parts' keys encode them."""
    for listed in entry.get("slices", ()):
        yield [(extent.get("start", 0), extent.get("length", WHOLE_DIMENSION)) for extent in listed.get("extent", ())]


class _Checker:
    """The checks of one tensor's entries; each problem a CorruptCheckpointError naming the tensor."""

    def __init__(self, prefix, num_shards, subject):
        self.prefix, self.num_shards, self.subject = prefix, num_shards, subject

    def fail(self, problem, subject=None):
        return corrupt(self.prefix, subject or self.subject, problem)

    def data_type(self, entry, subject):
        data_type = dtype_table.by_enum(entry.get("dtype", 0))
        if data_type is None:
            raise self.fail(f"declares an unknown dtype ({entry.get('dtype', 0)})", subject)
        return data_type

    def shape(self, entry, data_type, subject):
        shape = entry.get("shape", {})
        dims = [dim.get("size", 0) for dim in shape.get("dim", ())]
        if shape.get("unknown_rank", False):
            raise self.fail("declares a shape of unknown rank", subject)
        if len(dims) > MAX_DIMENSIONS:
            raise self.fail(f"declares {len(dims)} dimensions, more than TensorFlow's {MAX_DIMENSIONS}", subject)
        if any(size < 0 for size in dims):
            raise self.fail(f"declares the shape {shape_text(dims)}", subject)
        count = math.prod(dims)
        if count > INT64_MAX:
            raise self.fail(f"declares the shape {shape_text(dims)} of {number_text(count)} elements, more than an "
                            "int64 counts", subject)
        # With no elements the file bounds nothing, but numpy still refuses an array whose other dimensions
        # come to more bytes than an int64 counts (its itemsize for strings is a pointer's).
        itemsize = data_type.itemsize or _POINTER_BYTES
        if count == 0 and math.prod(size for size in dims if size) * itemsize > INT64_MAX:
            raise self.fail(f"declares the shape {shape_text(dims)}: no elements, but its other dimensions come to "
                            f"more {data_type.name} bytes than an int64 counts", subject)
        return tuple(dims)

    def tensor(self, name, entry) -> IndexedTensor:
        stored = self.stored(entry, self.subject)
        spec = TensorSpec(name, stored.shape, stored.data_type.name, stored.size)
        return IndexedTensor(spec, stored.data_type, stored)

    def stored(self, entry, subject) -> StoredTensor:
        data_type = self.data_type(entry, subject)
        shape = self.shape(entry, data_type, subject)
        shard, offset, size = (entry.get(field, 0) for field in ("shard_id", "offset", "size"))
        count, dims = math.prod(shape), shape_text(shape)
        if data_type.fixed_width:
            declared = count * data_type.itemsize
            if declared > INT64_MAX:
                raise self.fail(f"declares {dims} {data_type.name} ({declared} bytes), more than an int64 counts",
                                subject)
            if declared != size:
                raise self.fail(f"declares {dims} {data_type.name} ({declared} bytes) but the checkpoint stores "
                                f"{size} bytes for it", subject)
        else:  # a varint length (string) or varint length and checksum (variant) per element, at least
            least = (count + 4 if data_type is dtype_table.STRING else 5 * count) if count or size else 0
            if size < least:
                raise self.fail(f"declares {dims} {data_type.name} ({count} elements, at least {least} bytes) but "
                                f"the checkpoint stores {size} bytes for it", subject)
        if not 0 <= shard < self.num_shards:
            raise self.fail(f"lies in .data file {shard} of a checkpoint with {self.num_shards}", subject)
        if offset < 0:
            raise self.fail(f"declares its bytes at the offset {offset}", subject)
        return StoredTensor(subject, data_type, shape, shard, offset, size, entry.get("crc32c", 0))

    def partitioned(self, name, entry, decoded) -> IndexedTensor:
        """A tensor stored in parts: each listed part within the shape, stored, of the same dtype and
        of its extent's shape; no two parts overlapping and all of them covering the tensor."""
        data_type = self.data_type(entry, self.subject)
        shape = self.shape(entry, data_type, self.subject)
        key, parts, texts, seen = name.encode("utf-8"), [], [], set()
        for extents in _listed_extents(entry):
            text = clipped(extent_text(extents))
            if len(extents) != len(shape):
                raise self.fail(f"lists a part ({text}) of {len(extents)} dimensions for the shape {shape_text(shape)}")
            inside = all(start == 0 if length == WHOLE_DIMENSION else 0 <= start and 0 <= length <= size - start
                         for (start, length), size in zip(extents, shape))
            if not inside:
                raise self.fail(f"lists a part ({text}) outside its shape {shape_text(shape)}")
            part_key = slice_key(key, extents)
            if part_key in seen:
                raise self.fail(f"lists its part {text} twice")
            seen.add(part_key)
            if part_key not in decoded:
                raise self.fail(f"lists a part ({text}) that the checkpoint does not hold")
            subject = tensor_subject(name, text)
            if decoded[part_key].get("slices"):
                raise self.fail("is itself partitioned", subject)
            stored = self.stored(decoded[part_key], subject)
            region = region_of(extents, shape)
            if stored.data_type is not data_type:
                raise self.fail(f"holds {stored.data_type.name} values in a {data_type.name} tensor", subject)
            if list(stored.shape) != [stop - start for start, stop in region]:
                raise self.fail(f"holds the shape {shape_text(stored.shape)} for the extent {text} of "
                                f"{shape_text(shape)}", subject)
            parts.append((region, stored))
            texts.append(text)
        overlap = first_overlap([region for region, _ in parts])
        if overlap not in (None, UNDECIDED):
            raise self.fail(f"has the overlapping parts {texts[overlap[0]]} and {texts[overlap[1]]}")
        # Parts may cover less than the full shape: TensorFlow gives some optimizer slots of a partitioned
        # variable the variable's full shape while they hold one part (reading it whole is refused later).
        spec = TensorSpec(name, shape, data_type.name, sum(stored.size for _, stored in parts), partitioned=True)
        return IndexedTensor(spec, data_type, None, tuple(parts), disjoint=overlap is None)


# ---------------------------------------------------------------------------------
# Data files
# ---------------------------------------------------------------------------------


def check_data_files(index, sizes, require_all=True) -> None:
    """Check that every tensor's bytes lie inside its data file; ``sizes``: shard -> bytes (None: missing).

    A missing data file holding a tensor is a CheckpointNotFoundError, unless not ``require_all``.
    """
    for stored in index.stored():
        available = sizes.get(stored.shard)
        path = data_path(index.prefix, stored.shard, index.num_shards)
        if available is None:
            if not require_all:
                continue
            raise CheckpointNotFoundError(
                f"cannot read checkpoint '{index.prefix}': its data file '{path}' is missing ({stored.subject} lies "
                "in it); copy every file of the checkpoint")
        if stored.offset + stored.size > available:
            raise corrupt(index.prefix, stored.subject, (
                f"declares {shape_text(stored.shape)} {stored.data_type.name} stored in bytes {stored.offset} to "
                f"{stored.offset + stored.size} of '{path}', which holds {available} bytes"))
