"""Writing a portable checkpoint: arrays streamed through a minimal zip writer into an atomic file.

Arrays are written as they are (no second copy in memory), hashed in worker threads
while earlier ones are written; the manifest goes last. The file appears whole under
its name or not at all (:func:`subsetsaver.formats.atomic.replacing`). String and object
arrays are refused (:class:`~subsetsaver.errors.UnsupportedDtypeError`): a portable file
holds numbers only, so nothing in it can ask for pickle.

Example::

    >>> write('/ckpt/model.npz', {'conv_1/w': w, 'opt/beta1_power': b1}, selector='everything()').names
    ('conv_1/w', 'opt/beta1_power')
"""

from __future__ import annotations

import collections.abc
import concurrent.futures
import dataclasses
import datetime
import hashlib
import json
import os
import struct
import zlib

from ...errors import UnsupportedDtypeError
from ...version import versions
from .. import atomic
from .format import (
    ALIGNMENT,
    CHECKSUMS,
    DEFAULT_CHECKSUM,
    HASH_IN_THREADS,
    MANIFEST_MEMBER,
    STORED_AS,
    ArrayEntry,
    Manifest,
    manifest_to_json,
    member_name,
    name_problem,
    npy_header,
)


@dataclasses.dataclass(frozen=True)
class PreparedArray:
    """One array ready to be written: its bytes as stored, true dtype, ``.npy`` header and checksums.
    Made by :func:`prepare` in any thread (hashing releases the GIL), so a producer can hash while
    the writer writes."""

    name: str
    data: object        # C-contiguous, little-endian, viewed as its stored dtype
    true_dtype: str
    header: bytes
    crc: int            # CRC-32 of the member: header and data
    checksum: str       # the manifest's hex checksum (the CRC, or the data's SHA-256)


def prepare(name, value, checksum=DEFAULT_CHECKSUM) -> PreparedArray:
    """Check ``name`` and ``value`` and hash it: the :class:`PreparedArray` :func:`write` takes.

    >>> prepare('dense/w', np.ones(3, np.float32)).checksum
    '4a3f9a8e'
    """
    _check_name(name)
    data, true_dtype = _storable(name, value)
    header = npy_header(STORED_AS[true_dtype], data.shape)
    crc, digest = _digest(header, data, checksum)
    return PreparedArray(name, data, true_dtype, header, crc, digest)


def write(path, arrays, *, selector=None, metadata=None, array_info=None, checksum=DEFAULT_CHECKSUM,
          _force_zip64=False) -> Manifest:
    """Write ``arrays`` to ``path`` atomically: a mapping (name -> numpy array, order kept), or an
    iterable of ``(name, array)`` pairs or :class:`PreparedArray` values, written as they come (one
    in memory at a time: nothing is gathered).

    ``checksum``: 'crc32' (default: the CRC-32 of each member, the one the zip format
    and ``np.load`` check too, so it costs nothing extra) or 'sha256' (also a SHA-256 of
    each array's data: stronger against random damage, about twice the CPU time).
    Neither is a signature: whoever can rewrite the file can rewrite its checksums.

    ``selector``: the selector text to record; ``metadata``: JSON for the whole file;
    ``array_info``: name -> JSON dict kept in that array's manifest entry. A mapping's arrays
    are hashed in worker threads while earlier ones are written.

    >>> write('model.npz', {'dense/w': np.ones((2, 3), np.float32)}).names
    ('dense/w',)
    """
    path = os.fspath(path)
    if checksum not in CHECKSUMS:
        raise ValueError(f"checksum={checksum!r} is not one of {', '.join(repr(c) for c in CHECKSUMS)}")
    array_info = dict(array_info or {})
    for info in array_info.values():
        json.dumps(info)  # fail early on what JSON cannot hold
    if isinstance(arrays, collections.abc.Mapping):
        arrays = list(arrays.items())  # every array is in memory already: checked now, hashed ahead in threads
        for name, value in arrays:
            _check_name(name)
            _true_dtype(name, value)
        _check_info(array_info, {name for name, _ in arrays})
    entries, used, names = [], set(), set()
    with atomic.replacing(path) as sink, concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        zip_writer = ZipWriter(sink, force_zip64=_force_zip64)
        items, index = _prepared(arrays, checksum, pool), 0
        while (item := next(items, None)) is not None:  # not enumerate(): its tuple would keep the last array
            if item.name in names:
                raise ValueError(f"array {item.name!r} is written twice; names must be unique")
            names.add(item.name)
            member = member_name(item.name, index, used)
            zip_writer.add(member, (item.header, item.data), len(item.header) + item.data.nbytes, item.crc)
            entries.append(ArrayEntry(item.name, member, tuple(int(d) for d in item.data.shape), item.true_dtype,
                                      STORED_AS[item.true_dtype], int(item.data.nbytes),
                                      item.checksum if checksum == "sha256" else f"{item.crc:08x}",
                                      array_info.get(item.name) or {}))
            del item  # a streamed array is let go once written
            index += 1
        _check_info(array_info, names)
        manifest = Manifest(
            path=path,
            arrays=tuple(entries),
            selector=selector,
            metadata=dict(metadata or {}),
            versions=versions(),
            written=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            checksum=checksum,
        )
        text = json.dumps(manifest_to_json(manifest), separators=(",", ":")).encode("utf-8")  # C encoder: fast
        zip_writer.add(MANIFEST_MEMBER, (text,), len(text), zlib.crc32(text))
        zip_writer.finish()
    return manifest


def _prepared(arrays, checksum, pool):
    """:class:`PreparedArray` values of ``arrays``; a list's large arrays hashed ahead in ``pool``."""
    if isinstance(arrays, list):
        futures = [pool.submit(prepare, name, value, checksum) if getattr(value, "nbytes", 0) >= HASH_IN_THREADS
                   else _FinishedFuture(prepare(name, value, checksum)) for name, value in arrays]
        for future in futures:
            yield future.result()
        return
    for item in arrays:
        if isinstance(item, PreparedArray):
            if checksum == "sha256" and len(item.checksum) != 64:
                raise ValueError(f"array {item.name!r} was prepared with crc32; prepare it with checksum='sha256'")
            yield item
        else:
            yield prepare(*item, checksum)
        del item  # before the next is fetched


def _check_info(array_info, names):
    unknown = set(array_info) - set(names)
    if unknown:
        raise ValueError(f"array_info names arrays that are not written: {', '.join(sorted(unknown))}")


def _check_name(name):
    if not isinstance(name, str):
        raise ValueError(f"array names are strings, got {name!r}")
    problem = name_problem(name)
    if problem is not None:
        raise ValueError(f"cannot write an array named {name[:80]!r}: {problem}; name it as a TensorFlow variable "
                         "('scope/name')")


def _storable(name, value):
    """(a C-contiguous little-endian array to write, its true dtype name) or a clear error."""
    import numpy as np

    array = np.asarray(value)
    true_dtype = _true_dtype(name, array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = array.copy(order="C")  # np.ascontiguousarray would turn a scalar into shape (1,)
    return _raw_view(array, true_dtype), true_dtype


def _true_dtype(name, value):
    """The true dtype name of a numeric array, or UnsupportedDtypeError naming ``name``."""
    import numpy as np

    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    true_dtype = _dtype_names.get(array.dtype)
    if true_dtype is None:
        true_dtype = _dtype_names[array.dtype] = array.dtype.name
    if true_dtype not in STORED_AS:
        kind = {"O": "Python objects", "S": "byte strings", "U": "unicode strings", "V": "raw records"}.get(
            array.dtype.kind, f"dtype {array.dtype}"
        )
        raise UnsupportedDtypeError(
            f"cannot write '{name}' to a portable checkpoint: it holds {kind}; portable checkpoints hold numeric "
            f"arrays only ({', '.join(STORED_AS)}): leave it out of the selection, or use the 'tf' backend"
        )
    return true_dtype


_dtype_names = {}  # numpy's dtype.name is slow; thousands of small arrays ask it


def _raw_view(array, true_dtype):
    """The array's bytes reinterpreted as its stored dtype, shape kept, no copy."""
    import numpy as np

    stored = np.dtype(STORED_AS[true_dtype])
    return array.view(stored) if array.dtype != stored else array


def _digest(header, raw, checksum):
    """(CRC-32 of the member: header + data, the manifest's hex checksum); both release the GIL."""
    data = _bytes_of(raw)
    crc = zlib.crc32(data, zlib.crc32(header))
    return crc, (f"{crc:08x}" if checksum == "crc32" else hashlib.sha256(data).hexdigest())


def _bytes_of(array):
    """A flat byte view of a C-contiguous array (no copy)."""
    return memoryview(array.reshape(-1)).cast("B") if array.size else memoryview(b"")


class _FinishedFuture:
    """A finished future: what small arrays, hashed in this thread, give instead of ``pool.submit``."""

    def __init__(self, value):
        self._value = value

    def result(self):
        return self._value


_JOINED_BELOW = 64 << 10  # writes smaller than this are joined ...
_JOIN_UP_TO = 1 << 20     # ... into one of about this size


class ZipWriter:
    """A minimal streaming zip writer: stored members, 64-byte aligned data, zip64 when needed.

    CRCs are known before a member is written, so it never seeks back: it works on
    streams that cannot seek (``tf.io.gfile`` writers).

    >>> zip_writer = ZipWriter(sink); zip_writer.add('w.npy', (header, array), size, crc); zip_writer.finish()
    """

    _DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01: reproducible bytes
    _PADDING_ID = 0xD935                 # the extra-field id zipalign uses for padding

    def __init__(self, sink, *, force_zip64=False):
        self._sink = sink
        self._offset = 0
        self._central = []
        self._force_zip64 = force_zip64
        self._pending, self._pending_bytes = [], 0  # small writes, joined into one

    def _write(self, data):
        size = len(data) if isinstance(data, bytes) else data.nbytes
        if size < _JOINED_BELOW:  # thousands of small arrays: one sink write per megabyte, not three per array
            self._pending.append(data if isinstance(data, bytes) else bytes(data))
            self._pending_bytes += size
            if self._pending_bytes >= _JOIN_UP_TO:
                self._flush()
        else:
            self._flush()
            self._sink.write(data)
        self._offset += size

    def _flush(self):
        if self._pending:
            self._sink.write(b"".join(self._pending))
            self._pending, self._pending_bytes = [], 0

    def add(self, name, pieces, size, crc):
        """Member ``name`` of ``size`` bytes with CRC-32 ``crc``: ``pieces`` (bytes or arrays) in order."""
        encoded = name.encode("ascii")
        offset = self._offset
        zip64 = self._force_zip64 or size >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, size, size) if zip64 else b""
        used = offset + 30 + len(encoded) + len(extra) + 4
        padding = (-used) % ALIGNMENT
        extra += struct.pack("<HH", self._PADDING_ID, padding) + b"\0" * padding
        stored_size = 0xFFFFFFFF if zip64 else size
        header = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, 0, 0, 0, self._DOS_DATE, crc,
                             stored_size, stored_size, len(encoded), len(extra)) + encoded + extra
        for piece in pieces:  # small pieces go out with the header in one write
            if isinstance(piece, bytes):
                header += piece
            else:
                if header:
                    self._write(header)
                    header = b""
                if piece.nbytes:
                    self._write(_bytes_of(piece))
        if header:
            self._write(header)
        self._central.append((encoded, crc, size, offset))

    def finish(self):
        """The central directory and its end records (zip64 ones when sizes or offsets need them)."""
        start = self._offset
        for encoded, crc, size, offset in self._central:
            big_size = self._force_zip64 or size >= 0xFFFFFFFF
            big_offset = self._force_zip64 or offset >= 0xFFFFFFFF
            fields = ([size, size] if big_size else []) + ([offset] if big_offset else [])
            extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
            self._write(struct.pack(
                "<IHHHHHHIIIHHHHHII", 0x02014B50, (3 << 8) | 45, 45 if fields else 20, 0, 0, 0, self._DOS_DATE,
                crc, 0xFFFFFFFF if big_size else size, 0xFFFFFFFF if big_size else size, len(encoded), len(extra),
                0, 0, 0, 0o100644 << 16, 0xFFFFFFFF if big_offset else offset,
            ) + encoded + extra)
        end = self._offset
        count, directory_size = len(self._central), end - start
        if self._force_zip64 or count >= 0xFFFF or directory_size >= 0xFFFFFFFF or start >= 0xFFFFFFFF:
            self._write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, directory_size, start))
            self._write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
            self._write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
        else:
            self._write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, directory_size, start, 0))
        self._flush()
