"""Writing a TensorFlow checkpoint (a tensor bundle) without TensorFlow, the bytes SaveV2 writes.

:class:`BundleWriter` streams: :meth:`~BundleWriter.add` writes a tensor's bytes to the
data file at once and keeps only its index entry; leaving the ``with`` block writes the
``.index`` (keys sorted as TensorFlow sorts them) and puts both files in place. The
bytes go to temporary names beside the target (:mod:`subsetsaver.formats.storage`),
are made durable, then renamed: the data file first, the ``.index`` last, so a reader
never finds an index whose data is not complete. On an exception nothing is left under
the final names, and what earlier saves killed midway left in the directory is removed
(:func:`~subsetsaver.formats.storage.remove_abandoned`). :func:`write` writes a whole dict
of arrays in name order, as ``tf.compat.v1.train.Saver`` orders its variables.

For the same tensors added in the same order, the files are byte for byte those of
TensorFlow's ``BundleWriter`` (one data file, no alignment padding).

Example::

    >>> write('/ckpt/model', {'dense/w': w, 'dense/b': b})
    '/ckpt/model'
    >>> with BundleWriter('/ckpt/model') as writer:
    ...     writer.add('global_step', np.int64(7))
    ...     writer.add_slice('emb', (10, 4), (0, 0), emb[:4])
    ...     writer.add_slice('emb', (10, 4), (4, 0), emb[4:])
"""

from __future__ import annotations

import contextlib
import glob
import os

import numpy as np

from ...errors import UnsupportedDtypeError
from .. import storage
from . import dtypes as dtype_table
from .checksums import crc32c, mask
from .index import HEADER_KEY, LITTLE_ENDIAN, READER_VERSION, data_path, index_path
from .proto import BUNDLE_ENTRY, BUNDLE_HEADER, encode, encode_varint
from .slices import overlaps, slice_key
from .table import build_table


def write(prefix, arrays) -> str:
    """Write ``arrays`` (name -> array-like) as the checkpoint ``prefix``; returns ``prefix``.

    >>> write('/ckpt/model', {'w': np.ones((2, 3), np.float32), 'words': np.array([b'a', b''], object)})
    '/ckpt/model'
    """
    with BundleWriter(prefix) as writer:
        for name in sorted(arrays, key=lambda name: name.encode("utf-8")):
            writer.add(name, arrays[name])
    return writer.prefix


class BundleWriter:
    """Streams tensors into a new checkpoint at ``prefix``; see the module's docstring."""

    def __init__(self, prefix):
        self.prefix = os.fspath(prefix)
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
        stack = contextlib.ExitStack()
        try:  # entered first, left last: the data file is renamed into place before the .index
            self._index_sink = stack.enter_context(storage.replacing(index_path(self.prefix)))
            self._data = stack.enter_context(storage.replacing(data_path(self.prefix, 0, 1)))
        except BaseException as error:
            stack.__exit__(type(error), error, error.__traceback__)
            raise
        self._stack = stack
        return self

    def __exit__(self, exc_type, exc, traceback):
        stack, self._stack, self._data = self._stack, None, None
        if stack is None:
            return False
        if exc_type is None:
            try:
                self._index_sink.write(self._index_bytes())
                _forget_index(self.prefix)
            except BaseException as error:
                stack.__exit__(type(error), error, error.__traceback__)
                raise
        stack.__exit__(exc_type, exc, traceback)
        if exc_type is None and storage.is_local(self.prefix):
            _remove_stale_data_files(self.prefix)
            storage.remove_abandoned(os.path.dirname(storage.local_path(self.prefix)))  # what killed saves left
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
            self._data.write(memoryview(raw))
            size, checksum = raw.size, crc32c(raw)
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
        header = {"num_shards": 1, "endianness": LITTLE_ENDIAN, "version": {"producer": READER_VERSION}}
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


def _forget_index(prefix):
    """Remove the old ``.index`` a save replaces, before its data file is: a reader in between finds
    no checkpoint, rather than an old index over new data."""
    if storage.is_local(prefix):
        with contextlib.suppress(FileNotFoundError):
            os.remove(storage.local_path(index_path(prefix)))


def _remove_stale_data_files(prefix):
    """Data files of the (local) checkpoint this one replaced, written with another shard count."""
    path = storage.local_path(prefix)
    current = storage.local_path(data_path(prefix, 0, 1))
    for stale in glob.glob(glob.escape(path) + ".data-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]"):
        if stale != current:
            with contextlib.suppress(FileNotFoundError):
                os.remove(stale)
