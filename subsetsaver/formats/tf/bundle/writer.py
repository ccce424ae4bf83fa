"""Writing a TensorFlow checkpoint (a tensor bundle) without TensorFlow, the bytes SaveV2 writes.

:class:`BundleWriter` streams: :meth:`~BundleWriter.add` writes a tensor's bytes to the
data file at once and keeps only its index entry; leaving the ``with`` block writes the
``.index`` (keys sorted as TensorFlow sorts them). The files are written under a staging
name beside the target and then published (:mod:`subsetsaver.formats.publish`): the data
first, under names the checkpoint it replaces does not use, the ``.index`` last, so a
reader finds the old checkpoint or the new one, whole. The writer holds the directory's
writer lock. On an exception nothing is left under the final names, and what earlier
writers killed midway left in the directory is removed. :func:`write` writes a whole dict
of arrays in name order, as ``tf.compat.v1.train.Saver`` orders its variables.

For the same tensors added in the same order, the files are byte for byte those of
TensorFlow's ``BundleWriter`` (one data file, no alignment padding) unless a checkpoint
with one data file is being replaced: then the new one is written with two shards (the
second empty), which TensorFlow reads the same.

Example::

    write('/ckpt/model', {'dense/w': w, 'dense/b': b})
    # '/ckpt/model'
    with BundleWriter('/ckpt/model') as writer:
        writer.add('global_step', np.int64(7))
        writer.add_slice('emb', (10, 4), (0, 0), emb[:4])
        writer.add_slice('emb', (10, 4), (4, 0), emb[4:])
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from .... import storage
from ....errors import UnsupportedDtypeError
from ... import publish as publishing
from ...wire.crc32c import RunningCrc, crc32c, mask
from ...wire.protobuf import decode, encode, encode_varint
from . import dtypes as dtype_table
from .files import bundle_files, data_files, free_shard_count, shard_count_of
from .index import HEADER_KEY, LITTLE_ENDIAN, READER_VERSION, data_path, index_path
from .problems import corrupt
from .proto import BUNDLE_ENTRY, BUNDLE_HEADER
from .reader import BundleReader
from .slices import overlaps, slice_key
from .table import build_table, read_table


def write(prefix, arrays) -> str:
    """Write ``arrays`` (name -> array-like) as the checkpoint ``prefix``; returns ``prefix``.

    write('/ckpt/model', {'w': np.ones((2, 3), np.float32), 'words': np.array([b'a', b''], object)})
    # '/ckpt/model'
    """
    with BundleWriter(prefix) as writer:
        for name in sorted(arrays, key=lambda name: name.encode("utf-8")):
            writer.add(name, arrays[name])
    return writer.prefix


def publish_staged(staged, final) -> None:
    """Publish the complete checkpoint at ``staged`` (written by TensorFlow or by this module) as ``final``:
    its shard count is changed first where ``final``'s data files use the same one, so that the old
    checkpoint stays whole until the new ``.index`` replaces it (:mod:`subsetsaver.formats.publish`)."""
    with BundleReader(staged) as reader:
        count = reader.num_shards
    wanted = shard_count_for(final, count)
    if wanted != count:
        _renumber(staged, count, wanted)
    files = {data_path(final, shard, wanted): data_path(staged, shard, wanted) for shard in range(wanted)}
    files[index_path(final)] = index_path(staged)
    publishing.publish(files, commit=index_path(final), replaced=bundle_files(final))


def shard_count_for(prefix, wanted=1) -> int:
    """The shard count for a checkpoint to be published over ``prefix``: the smallest of at least
    ``wanted`` that the checkpoint there does not use. Data files of ``prefix`` that its ``.index`` does
    not use (what a writer killed after moving its data in left) are removed first, so the count
    alternates between two values. Called under the directory's writer lock."""
    try:
        with BundleReader(prefix, require_data_files=False) as reader:
            current = reader.num_shards
    except OSError:  # no checkpoint there, or a damaged one that is being replaced: its data files are garbage
        current = None
    for path in data_files(prefix):
        if shard_count_of(path) != current:
            storage.remove(path)
    return free_shard_count(prefix, wanted)


def _renumber(prefix, count, wanted):
    """Make the checkpoint ``prefix`` of ``count`` data files one of ``wanted`` (more): the same entries,
    the header's shard count changed, the data files renamed, the extra ones empty."""
    path = index_path(prefix)
    entries = read_table(storage.read_bytes(path), lambda problem, **_: corrupt(prefix, f"'{path}'", problem))
    header = decode(BUNDLE_HEADER, entries[0][1])
    header["num_shards"] = wanted
    for shard in range(count):
        storage.rename(data_path(prefix, shard, count), data_path(prefix, shard, wanted))
    for shard in range(count, wanted):
        storage.write_bytes(data_path(prefix, shard, wanted), b"")
    storage.write_bytes(path, build_table([(HEADER_KEY, encode(BUNDLE_HEADER, header)), *entries[1:]]))


class BundleWriter:
    """Streams tensors into a new checkpoint at ``prefix``; see the module's docstring."""

    def __init__(self, prefix, *, num_shards=None, publish=True):
        """``publish=False``: write the files at ``prefix`` itself, for a caller that publishes them
        (with ``num_shards`` data files, the tensors in the first); else stage, then publish over ``prefix``."""
        self.prefix = os.fspath(prefix)
        self._publish = publish
        self._num_shards = num_shards
        self._entries = {}  # key (bytes) -> BundleEntryProto fields; a partitioned tensor's lists its slices
        self._partitioned = {}  # name -> (dtype enum, shape, [region of each part added])
        self._stack = None
        self._data = None
        self._offset = 0
        self._used = False

    def __enter__(self):
        if self._used:
            raise RuntimeError(f"BundleWriter('{self.prefix}') was opened before: a writer writes one checkpoint")
        self._used = True
        self._target = self.prefix
        if self._publish:
            directory = storage.parent(self.prefix)
            storage.hold_directory(directory)
            storage.remove_abandoned(directory)
            if storage.can_rename(self.prefix):
                self._target = publishing.staging_name(self.prefix)
        if self._num_shards is None:
            self._num_shards = shard_count_for(self.prefix) if self._publish else 1
        stack = contextlib.ExitStack()
        try:
            self._data = stack.enter_context(storage.replacing(data_path(self._target, 0, self._num_shards)))
        except BaseException as error:
            stack.__exit__(type(error), error, error.__traceback__)
            raise
        self._stack = stack
        return self

    def __exit__(self, exc_type, exc, traceback):
        stack, self._stack, self._data = self._stack, None, None
        if stack is None:
            return False
        stack.__exit__(exc_type, exc, traceback)  # the data file is complete (or gone)
        if exc_type is not None:
            return False
        staged = {data_path(self.prefix, shard, self._num_shards): data_path(self._target, shard, self._num_shards)
                  for shard in range(self._num_shards)}
        staged[index_path(self.prefix)] = index_path(self._target)
        try:
            for shard in range(1, self._num_shards):  # shards the reader may open, holding nothing
                storage.write_bytes(data_path(self._target, shard, self._num_shards), b"")
            storage.write_bytes(index_path(self._target), self._index_bytes())
            if self._publish:
                publishing.publish(staged, commit=index_path(self.prefix), replaced=bundle_files(self.prefix))
        except BaseException:
            if self._target != self.prefix:
                publishing.discard(staged.values())
            raise
        return False

    # -----------------------------------------------------------------------------

    def add(self, name, array) -> None:
        """Write tensor ``name`` (a str) with the value ``array`` (anything ``np.asarray`` takes;
        bytes, str and object arrays of bytes or str are string tensors)."""
        self._add(self._new_key(name), _as_array(array))

    def add_slice(self, full_name, full_shape, offset, array) -> None:
        """Write the part ``array`` of the partitioned tensor ``full_name`` of shape ``full_shape``,
        at ``offset`` (its first element's index in the full tensor), as a partitioned Saver does."""
        self._require_open()
        array = _as_array(array)
        full_shape, offset = tuple(int(n) for n in full_shape), tuple(int(n) for n in offset)
        if not (len(full_shape) == len(offset) == array.ndim) or any(
                start < 0 or start + size > full for start, size, full in zip(offset, array.shape, full_shape)):
            raise ValueError(f"a part of shape {array.shape} at {offset} does not fit in '{full_name}' of shape "
                             f"{full_shape}")
        if offset == (0,) * len(offset) and array.shape == full_shape:
            self.add(full_name, array)  # a single part covering everything is a plain tensor, as in TensorFlow
            return
        data_type = dtype_table.for_numpy(array.dtype)
        key = full_name.encode("utf-8") if isinstance(full_name, str) else None
        if full_name not in self._partitioned:
            self._new_key(full_name)
            self._partitioned[full_name] = (data_type.enum, full_shape, [])
            self._entries[key] = {"dtype": data_type.enum, "shape": _shape_proto(full_shape), "slices": []}
        enum, shape, regions = self._partitioned[full_name]
        if (enum, shape) != (data_type.enum, full_shape):
            raise ValueError(f"a part of '{full_name}' as {data_type.name} {list(full_shape)}, but its earlier parts "
                             f"are {dtype_table.by_enum(enum).name} {list(shape)}")
        region = tuple((start, start + size) for start, size in zip(offset, array.shape))
        extents = [(start, size) for start, size in zip(offset, array.shape)]  # every dimension explicit, as in
        part_key = slice_key(key, extents)  # the Saver's slice specs ("10 4 0,4:0,4")
        if part_key in self._entries or any(overlaps(region, other) for other in regions):
            raise ValueError(f"the part of '{full_name}' at {offset} overlaps one added before")
        self._add(part_key, array)
        regions.append(region)
        self._entries[key]["slices"].append(
            {"extent": [{"start": start, "length": length} for start, length in extents]})

    # -----------------------------------------------------------------------------

    def _require_open(self):
        if self._stack is None:
            raise RuntimeError(f"BundleWriter('{self.prefix}') is not open: use it in a with block")

    def _new_key(self, name):
        self._require_open()
        if not isinstance(name, str) or not name or name.startswith("\x00"):
            raise ValueError(f"a tensor name must be a non-empty str not starting with NUL, not {name!r}")
        key = name.encode("utf-8")
        if key in self._entries:
            raise ValueError(f"checkpoint '{self.prefix}' already has a tensor '{name}'")
        return key

    def _add(self, key, array):
        data_type = dtype_table.for_numpy(array.dtype)
        if data_type is dtype_table.STRING:
            size, checksum = self._write_strings(array)
        else:
            if array.dtype.byteorder == ">":
                array = array.astype(array.dtype.newbyteorder("<"))
            raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            running = RunningCrc()
            running.feed(raw)  # checksummed while it is written
            self._data.write(memoryview(raw))
            size, checksum = raw.size, running.value()
        self._entries[key] = {"dtype": data_type.enum, "shape": _shape_proto(array.shape), "offset": self._offset,
                              "size": size, "crc32c": mask(checksum)}
        self._offset += size

    def _write_strings(self, array):
        """The lengths (varint64), their masked checksum, the bytes; the size and checksum of all of it."""
        elements = [_as_bytes(element) for element in array.reshape(-1).tolist()]
        lengths = [len(element) for element in elements]
        encoded = b"".join(map(encode_varint, lengths))
        checksum = crc32c(b"".join(n.to_bytes(4 if n <= 0xFFFFFFFF else 8, "little") for n in lengths))
        length_checksum = mask(checksum).to_bytes(4, "little")
        checksum = crc32c(length_checksum, checksum)
        text = b"".join(elements)
        for piece in (encoded, length_checksum, text):
            self._data.write(piece)
        return len(encoded) + 4 + len(text), crc32c(text, checksum)

    def _index_bytes(self):
        header = {"num_shards": self._num_shards, "endianness": LITTLE_ENDIAN, "version": {"producer": READER_VERSION}}
        entries = [(HEADER_KEY, encode(BUNDLE_HEADER, header))]
        entries += [(key, encode(BUNDLE_ENTRY, self._entries[key])) for key in sorted(self._entries)]
        return build_table(entries)


def _as_array(value):
    array = np.asarray(value)
    dtype_table.for_numpy(array.dtype)  # UnsupportedDtypeError early, before anything is written
    return array


def _as_bytes(element):
    if isinstance(element, bytes):
        return element
    if isinstance(element, str):
        return element.encode("utf-8")
    raise UnsupportedDtypeError(f"a string tensor holds bytes or str, not {type(element).__name__}")


def _shape_proto(shape):
    return {"dim": [{"size": int(size)} for size in shape]}

