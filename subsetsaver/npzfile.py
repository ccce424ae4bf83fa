"""The portable checkpoint file: a numpy ``.npz`` archive with an embedded JSON manifest.

This module is only the file format (no TensorFlow graph code). A file is a zip archive
of uncompressed members that ``np.load(path, allow_pickle=False)`` opens:

* one ``.npy`` member per array, named after the variable (``conv_1/w`` ->
  ``conv_1.w.npy``), data aligned to 64 bytes in the file;
* ``__subsetsaver__.json``: the manifest, written last: per array its name, member,
  shape, dtype, the dtype it is stored as, byte size and checksum (the member's CRC-32,
  or the SHA-256 of the data with ``checksum='sha256'``); the selector text and the
  library, TensorFlow, numpy and Python versions.

Dtypes numpy's ``.npy`` format cannot describe (bfloat16, float8, int4) are stored as
raw unsigned bytes of the same width, the true dtype in the manifest; :func:`read`
gives them back typed. String and object arrays are refused (:class:`UnsupportedDtypeError`):
a portable file holds numbers only, so nothing in it can ask for pickle.

Reading validates before it allocates or returns anything: the zip directory, member
names (no paths, no '..', no duplicates, no member the manifest does not list),
compression (none), the manifest's schema, every declared shape and size against the
member sizes and the file size, every ``.npy`` header byte for byte, then the
checksums. Any problem raises :class:`~subsetsaver.errors.CorruptCheckpointError` naming
the member. Reading the same local file again (same inode, size and times, and the
same directory and manifest bytes) skips re-parsing its structure; the array data are
read and checksummed every time; many small arrays of one size are read in one pass and
gathered into one buffer (:meth:`Archive.load_rows`). Local paths use the operating
system's files (with fsync); any other scheme (``ram://``, ``gs://``, ...) goes through
``tf.io.gfile``. Writes are atomic: a temporary name in the same directory, flush, fsync
where the filesystem has it, rename, fsync of the directory; a large local file that a
write replaces is freed in a background thread (:func:`finish_background_work` waits).

Example::

    >>> write('/ckpt/model.npz', {'conv_1/w': w, 'opt/beta1_power': b1}, selector='everything()')
    >>> manifest, arrays = read('/ckpt/model.npz')
    >>> manifest.entry('conv_1/w').shape, arrays['conv_1/w'].dtype
    ((5, 5, 1, 32), dtype('float32'))
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import io
import json
import math
import os
import re
import stat
import struct
import threading
import zlib

from .errors import CheckpointNotFoundError, CorruptCheckpointError, SubsetSaverError
from .files import fsync_directory, temporary_name

FORMAT = "subsetsaver.npz"
FORMAT_VERSION = 1
MANIFEST_MEMBER = "__subsetsaver__.json"
CHECKSUMS = {"crc32": 8, "sha256": 64}  # algorithm -> hex digits
DEFAULT_CHECKSUM = "crc32"
ALIGNMENT = 64
MAX_MANIFEST_BYTES = 64 << 20

# True dtype name -> the little-endian ``.npy`` descr it is stored as.
STORED_AS = {
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "bfloat16": "<u2",
    "float8_e4m3fn": "|u1",
    "float8_e5m2": "|u1",
    "int4": "|u1",
    "uint4": "|u1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "bool": "|b1",
    "complex64": "<c8",
    "complex128": "<c16",
}
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4")
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,250}")
_HASH_IN_THREADS = 1 << 20  # arrays at least this big are hashed in worker threads
_WRITE_CHUNK = 16 << 20     # tf.io.gfile takes bytes, so remote writes copy this much at a time
_READ_WHOLE = 16 << 20      # local files up to this size are read in one piece
_WRITEBACK_EVERY = 32 << 20  # local writes fdatasync in the background after each this many bytes
_RELEASE_IN_BACKGROUND = 16 << 20  # a replaced local file this large is freed in the background
_FSYNC = True               # the benchmark turns it off once, to show what durability costs


class UnsupportedDtypeError(SubsetSaverError, TypeError):
    """An array whose dtype a portable checkpoint cannot hold (strings, objects, ...)."""


# ---------------------------------------------------------------------------------
# The manifest
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArrayEntry:
    """One array of a portable checkpoint, as its manifest declares it.

    ``shape``/``dtype``: the array :func:`read` returns; ``stored_dtype``: the ``.npy``
    descr of the member; ``nbytes``: bytes of the values; ``info``: free-form JSON the
    writer attached (e.g. a partitioned variable's full shape).
    """

    name: str
    member: str
    shape: tuple
    dtype: str
    stored_dtype: str
    nbytes: int
    checksum: str  # hex digest: CRC-32 of the whole member, or SHA-256 of the data (see Manifest.checksum)
    info: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a portable checkpoint holds: its arrays in file order, the selector and versions."""

    path: str
    arrays: tuple
    selector: str | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    versions: dict = dataclasses.field(default_factory=dict)
    written: str | None = None
    checksum: str = DEFAULT_CHECKSUM

    @property
    def names(self) -> tuple:
        return tuple(a.name for a in self.arrays)

    def entry(self, name) -> ArrayEntry:
        for array in self.arrays:
            if array.name == name:
                return array
        raise KeyError(name)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)


# ---------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------


def write(path, arrays, *, selector=None, metadata=None, array_info=None, checksum=DEFAULT_CHECKSUM,
          _force_zip64=False) -> Manifest:
    """Write ``arrays`` (name -> numpy array, order kept) to ``path`` atomically.

    ``checksum``: 'crc32' (default: the CRC-32 of each member, the one the zip format
    and ``np.load`` check too, so it costs nothing extra) or 'sha256' (also a SHA-256 of
    each array's data: stronger against random damage, about twice the CPU time).
    Neither is a signature: whoever can rewrite the file can rewrite its checksums.

    ``selector``: the selector text to record; ``metadata``: JSON for the whole file;
    ``array_info``: name -> JSON dict kept in that array's manifest entry. The arrays
    are streamed into the file (no second copy in memory) and hashed in worker threads
    while earlier ones are written.

    >>> write('model.npz', {'dense/w': np.ones((2, 3), np.float32)}).names
    ('dense/w',)
    """
    path = os.fspath(path)
    if checksum not in CHECKSUMS:
        raise ValueError(f"checksum={checksum!r} is not one of {', '.join(repr(c) for c in CHECKSUMS)}")
    array_info = dict(array_info or {})
    items, used = [], set()
    for index, (name, value) in enumerate(dict(arrays).items()):
        if not isinstance(name, str) or not name:
            raise ValueError(f"array names are non-empty strings, got {name!r}")
        data, true_dtype = _storable(name, value)
        member = _member_name(name, index, used)
        stored = STORED_AS[true_dtype]
        header = _npy_header(stored, data.shape)
        info = array_info.get(name) or {}
        if info:
            json.dumps(info)  # fail early on what JSON cannot hold
        items.append((name, member, true_dtype, stored, data, header, info))
    unknown = set(array_info) - {item[0] for item in items}
    if unknown:
        raise ValueError(f"array_info names arrays that are not written: {', '.join(sorted(unknown))}")

    entries = []
    with _open_sink(path) as sink, concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        zip_writer = _ZipWriter(sink, force_zip64=_force_zip64)
        digests = [
            pool.submit(_digest, header, raw, checksum) if raw.nbytes >= _HASH_IN_THREADS
            else _Done(_digest(header, raw, checksum))
            for (_, _, _, _, raw, header, _) in items
        ]
        for (name, member, true_dtype, stored, raw, header, info), digest in zip(items, digests):
            crc, sha = digest.result()
            zip_writer.add(member, (header, raw), len(header) + raw.nbytes, crc)
            entries.append(ArrayEntry(name, member, tuple(int(d) for d in raw.shape), true_dtype, stored,
                                      int(raw.nbytes), sha, info))
        manifest = Manifest(
            path=path,
            arrays=tuple(entries),
            selector=selector,
            metadata=dict(metadata or {}),
            versions=_versions(),
            written=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            checksum=checksum,
        )
        text = json.dumps(_manifest_json(manifest), separators=(",", ":")).encode("utf-8")  # C encoder: fast
        zip_writer.add(MANIFEST_MEMBER, (text,), len(text), zlib.crc32(text))
        zip_writer.finish()
    return manifest


def write_bytes_atomically(path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temporary name, flush, fsync, rename)."""
    with _open_sink(os.fspath(path)) as sink:
        sink.write(memoryview(data))


def _storable(name, value):
    """(a C-contiguous little-endian array to write, its true dtype name) or a clear error."""
    import numpy as np

    array = np.asarray(value)
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
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = array.copy(order="C")  # np.ascontiguousarray would turn a scalar into shape (1,)
    return _raw_view(array), true_dtype


_dtype_names = {}  # numpy's dtype.name is slow; thousands of small arrays ask it


def _raw_view(array):
    """The array's bytes reinterpreted as its stored dtype, shape kept, no copy."""
    import numpy as np

    stored = np.dtype(STORED_AS[_dtype_names[array.dtype]])
    return array.view(stored) if array.dtype != stored else array


def _member_name(name, index, used) -> str:
    base = name.replace("/", ".")
    if not _MEMBER_NAME.fullmatch(base) or ".." in base or base.lower() == MANIFEST_MEMBER[:-5]:
        base = f"_{index}"
    member, counter = base + ".npy", 0
    while member in used:
        counter += 1
        member = f"{base}.{counter}.npy"
    used.add(member)
    return member


_header_cache = {}


def _npy_header(stored_descr, shape) -> bytes:
    """The exact ``.npy`` header numpy writes for a C-ordered array (cached)."""
    import numpy as np

    key = (stored_descr, tuple(int(d) for d in shape))
    header = _header_cache.get(key)
    if header is None:
        buffer = io.BytesIO()
        description = {"descr": stored_descr, "fortran_order": False, "shape": key[1]}
        try:
            np.lib.format.write_array_header_1_0(buffer, description)
        except ValueError:  # a header over 64 KiB (absurdly many dimensions) needs format 2.0
            buffer = io.BytesIO()
            np.lib.format.write_array_header_2_0(buffer, description)
        header = buffer.getvalue()
        if len(_header_cache) < 4096:
            _header_cache[key] = header
    return header


def _digest(header, raw, checksum):
    """(CRC-32 of the member: header + data, the manifest's hex checksum); both release the GIL."""
    data = _bytes_of(raw)
    crc = zlib.crc32(data, zlib.crc32(header))
    return crc, (f"{crc:08x}" if checksum == "crc32" else hashlib.sha256(data).hexdigest())


def _bytes_of(array):
    """A flat byte view of a C-contiguous array (no copy)."""
    return memoryview(array.reshape(-1)).cast("B") if array.size else memoryview(b"")


class _Done:
    def __init__(self, value):
        self._value = value

    def result(self):
        return self._value


def _versions() -> dict:
    import platform
    import sys

    import numpy as np

    from . import __version__

    tensorflow = sys.modules.get("tensorflow")
    tf_version = getattr(tensorflow, "__version__", None)
    if tf_version is None:
        try:
            import importlib.metadata

            tf_version = importlib.metadata.version("tensorflow")
        except Exception:  # not installed: the file format does not need it
            tf_version = None
    return {"subsetsaver": __version__, "tensorflow": tf_version, "numpy": np.__version__,
            "python": platform.python_version()}


def _manifest_json(manifest) -> dict:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "checksum": manifest.checksum,
        "selector": manifest.selector,
        "written": manifest.written,
        "versions": manifest.versions,
        "metadata": manifest.metadata,
        "arrays": [
            {
                "name": a.name,
                "member": a.member,
                "shape": list(a.shape),
                "dtype": a.dtype,
                "stored_dtype": a.stored_dtype,
                "nbytes": a.nbytes,
                "checksum": a.checksum,
                **({"info": a.info} if a.info else {}),
            }
            for a in manifest.arrays
        ],
    }


class _ZipWriter:
    """A minimal streaming zip writer: stored members, 64-byte aligned data, zip64 when needed.

    CRCs are known before a member is written, so it never seeks back: it works on
    streams that cannot seek (``tf.io.gfile`` writers).
    """

    _DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01: reproducible bytes
    _PADDING_ID = 0xD935                 # the extra-field id zipalign uses for padding

    def __init__(self, sink, *, force_zip64=False):
        self._sink = sink
        self._offset = 0
        self._central = []
        self._force_zip64 = force_zip64

    def _write(self, data):
        self._sink.write(data)
        self._offset += len(data) if isinstance(data, bytes) else data.nbytes

    def add(self, name, pieces, size, crc):
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


# ---------------------------------------------------------------------------------
# Files: local (os, with fsync) or any TensorFlow filesystem (tf.io.gfile)
# ---------------------------------------------------------------------------------


def is_local(path) -> bool:
    """Whether ``path`` is on the local filesystem (no ``scheme://``, or ``file://``)."""
    path = os.fspath(path)
    return "://" not in path or path.startswith("file://")


def _local_path(path):
    return path[len("file://"):] if path.startswith("file://") else path



class _LocalSink:
    """A local temporary file that becomes ``path`` on commit: fsync, rename, fsync of the directory.

    Durability costs a wait for the disk; two things keep it short. Every
    ``_WRITEBACK_EVERY`` bytes a background thread fdatasyncs what came so far, so the
    disk works while later arrays are still being checksummed and written and the final
    fsync waits only for the tail (measured better here than ``sync_file_range`` or one
    fsync at the end). And a large file this rename replaces is kept open across the
    rename and closed in the background: freeing its blocks (slow on a filesystem
    mounted with online discard) no longer delays the save;
    :func:`finish_background_work` waits for it.
    """

    def __init__(self, path):
        self.path = _local_path(path)
        directory = os.path.dirname(self.path) or "."
        if not os.path.isdir(directory):
            raise CheckpointNotFoundError(f"cannot write '{path}': directory '{directory}' does not exist; create it first")
        self.temporary = temporary_name(self.path)
        self._file = open(os.open(self.temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb", buffering=1 << 20)
        self._written = 0  # bytes handed to the file
        self._started = 0  # bytes handed to the file when the last background fdatasync started
        self._syncing = None

    def write(self, data):
        self._file.write(data)
        self._written += len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        if (_FSYNC and self._written - self._started >= _WRITEBACK_EVERY
                and (self._syncing is None or self._syncing.done())):
            self._file.flush()
            self._syncing = _background().submit(os.fdatasync, self._file.fileno())
            self._started = self._written

    def commit(self):
        self._file.flush()
        if self._syncing is not None:
            self._syncing.result()
        if _FSYNC:
            os.fsync(self._file.fileno())
        self._file.close()
        replaced = _open_replaced(self.path)
        try:
            os.replace(self.temporary, self.path)
        except BaseException:
            if replaced is not None:
                os.close(replaced)
            if os.path.exists(self.temporary):
                os.remove(self.temporary)
            raise
        if _FSYNC:
            fsync_directory(os.path.dirname(self.path))
        if replaced is not None:
            _background().submit(os.close, replaced)

    def abort(self):
        if self._syncing is not None:
            self._syncing.exception()
        self._file.close()
        if os.path.exists(self.temporary):
            os.remove(self.temporary)


def _open_replaced(path):
    """A descriptor of the large regular file at ``path`` (about to be replaced), or None.

    Held open across the rename, the old file's blocks are freed only when it is closed.
    """
    if _RELEASE_IN_BACKGROUND is None or os.name != "posix":
        return None
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # absent, a symbolic link, unreadable: nothing to hold
        return None
    status = os.fstat(descriptor)
    if stat.S_ISREG(status.st_mode) and status.st_nlink == 1 and status.st_size >= _RELEASE_IN_BACKGROUND:
        return descriptor
    os.close(descriptor)
    return None


_executor = None
_executor_lock = threading.Lock()


def _background():
    """One worker thread for work a save need not wait for (see _LocalSink)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="subsetsaver-npz")
        return _executor


def finish_background_work() -> None:
    """Wait until the work earlier saves left to the background (closing replaced files) is done.

    >>> write('model.npz', arrays); finish_background_work()
    """
    if _executor is not None:
        _executor.submit(lambda: None).result()


class _GFileSink:
    """``tf.io.gfile`` streams have no fsync; object stores publish a file only when it is closed."""

    def __init__(self, path):
        import tensorflow as tf

        self._tf = tf
        self.path = path
        directory = os.path.dirname(path)
        if directory and not path.startswith("ram://") and not tf.io.gfile.isdir(directory):
            raise CheckpointNotFoundError(f"cannot write '{path}': directory '{directory}' does not exist; create it first")
        self.temporary = temporary_name(path)
        self._file = tf.io.gfile.GFile(self.temporary, "wb")

    def write(self, data):
        if isinstance(data, bytes):
            self._file.write(data)
            return
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _WRITE_CHUNK):
            self._file.write(bytes(view[start:start + _WRITE_CHUNK]))

    def commit(self):
        self._file.flush()
        self._file.close()
        self._tf.io.gfile.rename(self.temporary, self.path, overwrite=True)

    def abort(self):
        self._file.close()
        if self._tf.io.gfile.exists(self.temporary):
            self._tf.io.gfile.remove(self.temporary)


class _open_sink:
    """``with _open_sink(path) as sink:`` commits (fsync + rename) on success, removes the temporary on error."""

    def __init__(self, path):
        self._sink = _LocalSink(path) if is_local(path) else _GFileSink(path)

    def __enter__(self):
        return self._sink

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self._sink.commit()
        else:
            self._sink.abort()
        return False


class _LocalSource:
    def __init__(self, path):
        self.path = _local_path(path)
        try:
            self._descriptor = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError as error:
            raise CheckpointNotFoundError(f"no portable checkpoint at '{path}'") from error
        except IsADirectoryError as error:
            raise CheckpointNotFoundError(f"'{path}' is a directory, not a portable checkpoint file") from error
        status = os.fstat(self._descriptor)
        self.size = status.st_size
        self.identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        self._whole = None
        if self.size <= _READ_WHOLE:  # small files: one read, then every header check is a slice
            import numpy as np

            self._whole = self.read_into(0, np.empty(self.size, dtype=np.uint8))

    def directory_stream(self):
        return io.BytesIO(self._whole.tobytes()) if self._whole is not None else open(self.path, "rb")

    def read(self, offset, count) -> bytes:
        if self._whole is not None:
            return self._whole[offset:offset + count].tobytes()
        return os.pread(self._descriptor, count, offset)

    def read_into(self, offset, buffer):
        if getattr(self, "_whole", None) is not None:
            buffer[...] = self._whole[offset:offset + buffer.nbytes]  # numpy uint8 buffers only
            return buffer
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view):
            got = os.preadv(self._descriptor, [view[done:]], offset + done)
            if got <= 0:
                raise CorruptCheckpointError(f"'{self.path}' ended while reading it; it changed or was truncated")
            done += got
        return buffer

    def span(self, start, end):
        """Bytes ``start:end`` of the file as a uint8 array (a view when the file is in memory)."""
        if self._whole is not None:
            return self._whole[start:end]
        import numpy as np

        return self.read_into(start, np.empty(end - start, dtype=np.uint8))

    def close(self):
        os.close(self._descriptor)


class _MemorySource:
    """A file read in one piece through ``tf.io.gfile`` (remote filesystems: one request)."""

    def __init__(self, path):
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            raise CheckpointNotFoundError(f"no portable checkpoint at '{path}'")
        if tf.io.gfile.isdir(path):
            raise CheckpointNotFoundError(f"'{path}' is a directory, not a portable checkpoint file")
        with tf.io.gfile.GFile(path, "rb") as handle:
            self._data = handle.read()
        self.path = path
        self.size = len(self._data)

    def directory_stream(self):
        return io.BytesIO(self._data)

    def read(self, offset, count) -> bytes:
        return self._data[offset:offset + count]

    def view(self, offset, count):
        return memoryview(self._data)[offset:offset + count]

    def span(self, start, end):
        import numpy as np

        return np.frombuffer(self._data, dtype=np.uint8, count=end - start, offset=start)

    def close(self):
        self._data = b""


# ---------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------


def read_manifest(path) -> Manifest:
    """Validate everything but the data (directory, names, manifest, sizes, headers); the manifest.

    Cheap: reads the zip directory, the manifest and each member's headers, never the arrays.
    """
    with Archive(path) as archive:
        return archive.manifest


def read(path, names=None) -> tuple:
    """``(manifest, {name: array})`` for ``names`` (None: every array), fully validated.

    Nothing is returned unless every requested array passed every check, its checksum
    included. Arrays come back with their true dtype (bfloat16 as ``ml_dtypes.bfloat16``);
    local files are read into 64-byte aligned memory.
    """
    with Archive(path) as archive:
        return archive.manifest, archive.load(names)


def verify(path) -> Manifest:
    """Read and check every array of ``path`` (sizes, headers, checksums); the manifest."""
    with Archive(path) as archive:
        archive.load(None)
        return archive.manifest


# (path, file identity) -> (manifest, data offsets, directory start, manifest span, fingerprint) of
# local files whose structure passed validation. A later open of the same file (same inode, size,
# times) whose zip directory and manifest bytes are unchanged skips re-parsing them; anything else is
# validated again. Array data is read and checksummed on every load regardless.
_validated = {}


class Archive:
    """An open portable checkpoint whose structure is validated: ``manifest``, then ``load(names)``.

    Opening checks everything but the data (directory, names, manifest, sizes,
    headers); :meth:`load` reads and checksums the arrays. Use it to decide what to
    load from the manifest without opening the file twice::

        with Archive(path) as archive:
            arrays = archive.load([n for n in archive.manifest.names if n in wanted])
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._source = _LocalSource(self.path) if is_local(self.path) else _MemorySource(self.path)
        try:
            identity = getattr(self._source, "identity", None)
            known = _validated.get((self.path, identity)) if identity else None
            if known is not None and self._fingerprint(known[2], known[3]) == known[4]:
                self.manifest, self._data_offsets = known[0], known[1]
            else:
                self._validate()
                if identity:
                    start, manifest = self._directory_start, (self._data_offsets[MANIFEST_MEMBER],
                                                              self._members[MANIFEST_MEMBER].file_size)
                    _validated[(self.path, identity)] = (self.manifest, self._data_offsets, start, manifest,
                                                         self._fingerprint(start, manifest))
                    _evict_oldest(_validated)
        except BaseException:
            self._source.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._source.close()
        return False

    def _fingerprint(self, directory_start, manifest_span) -> bytes:
        """The zip directory and manifest bytes: a cached validation holds only while they are unchanged."""
        offset, size = manifest_span
        return self._source.read(directory_start, self._source.size - directory_start) + \
            self._source.read(offset, size)

    def _fail(self, message, member=None):
        where = f"'{self.path}'" + (f", member '{member}'" if member else "")
        return CorruptCheckpointError(f"{where}: {message}")

    # -- the zip directory -----------------------------------------------------------
    def _validate(self):
        import zipfile

        try:
            with self._source.directory_stream() as stream, zipfile.ZipFile(stream) as archive:
                infos = archive.infolist()
                directory_start = archive.start_dir
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error, OSError) as error:
            raise self._fail(
                f"not a complete npz archive: its zip directory is missing or damaged ({error}); "
                "the file is truncated or was not written by subsetsaver; use another checkpoint"
            ) from error
        members = {}
        for info in infos:
            name = info.filename
            problem = _member_problem(name)
            if problem:
                raise self._fail(f"refused member name: {problem}; a portable checkpoint holds only flat member "
                                 "names like 'conv_1.w.npy'", name)
            if name in members:
                raise self._fail("the zip directory lists this member twice", name)
            if info.compress_type != 0:
                raise self._fail(f"compressed (zip method {info.compress_type}); portable checkpoints store members "
                                 "uncompressed", name)
            if info.flag_bits & 0x1:
                raise self._fail("encrypted; portable checkpoints are not encrypted", name)
            if info.compress_size != info.file_size:
                raise self._fail(f"stored size {info.compress_size} differs from its size {info.file_size}", name)
            members[name] = info
        if MANIFEST_MEMBER not in members:
            raise self._fail(f"no '{MANIFEST_MEMBER}' manifest: not a subsetsaver portable checkpoint "
                             "(plain numpy .npz files lack dtypes and checksums)")
        self._directory_start = directory_start
        self._data_offsets = {}
        spans = []
        for name, info in members.items():
            offset = self._data_offset(info, directory_start)
            self._data_offsets[name] = offset
            spans.append((info.header_offset, offset + info.file_size, name))
        spans.sort()
        for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
            if start < end:
                raise self._fail(f"overlaps member '{first}' in the file", second)
        self._members = members
        self.manifest = self._read_manifest_member(members[MANIFEST_MEMBER])
        listed = {entry.member for entry in self.manifest.arrays}
        for name in members:
            if name != MANIFEST_MEMBER and name not in listed:
                raise self._fail("unexpected member: the manifest does not list it", name)
        for entry in self.manifest.arrays:
            self._check_entry(entry)

    def _data_offset(self, info, directory_start):
        """Where a member's data starts, after checking its local header against the directory."""
        name = info.filename
        fixed = self._source.read(info.header_offset, 30)
        if len(fixed) < 30:
            raise self._fail("its local header lies past the end of the file (truncated?)", name)
        signature, _, _, method, _, _, _, _, _, name_length, extra_length = struct.unpack("<IHHHHHIIIHH", fixed)
        if signature != 0x04034B50:
            raise self._fail("no local file header where the zip directory points", name)
        local_name = self._source.read(info.header_offset + 30, name_length)
        if local_name != name.encode("ascii") or method != 0:
            raise self._fail("its local header disagrees with the zip directory (name or compression)", name)
        start = info.header_offset + 30 + name_length + extra_length
        if start + info.file_size > directory_start:
            raise self._fail(f"declares {info.file_size} bytes at offset {start}, past the data area that ends "
                             f"at {directory_start} (truncated or tampered)", name)
        return start

    # -- the manifest ----------------------------------------------------------------
    def _read_manifest_member(self, info) -> Manifest:
        name = info.filename
        if info.file_size > MAX_MANIFEST_BYTES:
            raise self._fail(f"manifest of {info.file_size} bytes exceeds the {MAX_MANIFEST_BYTES} byte limit", name)
        text = self._source.read(self._data_offsets[name], info.file_size)
        if zlib.crc32(text) != info.CRC:
            raise self._fail("manifest fails its CRC-32 check: it was edited or damaged", name)
        try:
            content = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise self._fail(f"manifest is not valid JSON ({error})", name) from error
        check = _SchemaCheck(self, name)
        check.that(isinstance(content, dict), "manifest is not a JSON object")
        check.that(content.get("format") == FORMAT, f"manifest format is {content.get('format')!r}, not {FORMAT!r}")
        version = content.get("format_version")
        check.that(isinstance(version, int) and not isinstance(version, bool),
                   f"manifest format_version {version!r} is not an integer")
        check.that(version <= FORMAT_VERSION,
                   f"format version {version} is newer than this subsetsaver reads ({FORMAT_VERSION}); upgrade subsetsaver")
        algorithm = content.get("checksum")
        check.that(algorithm in CHECKSUMS, f"checksum {algorithm!r} is not one of {', '.join(CHECKSUMS)}")
        arrays = content.get("arrays")
        check.that(isinstance(arrays, list), "manifest has no 'arrays' list")
        entries, names, members = [], set(), set()
        for position, raw in enumerate(arrays):
            entry = _entry_from_json(raw, position, check, CHECKSUMS[algorithm])
            check.that(entry.name not in names, f"manifest lists array '{entry.name}' twice")
            check.that(entry.member not in members, f"manifest gives two arrays member '{entry.member}'")
            check.that(entry.member in self._members, f"array '{entry.name}': member '{entry.member}' is not in the archive")
            if algorithm == "crc32":
                check.that(int(entry.checksum, 16) == self._members[entry.member].CRC,
                           f"array '{entry.name}': checksum {entry.checksum} is not the zip directory's CRC-32 "
                           f"{self._members[entry.member].CRC:08x} of member '{entry.member}'")
            names.add(entry.name)
            members.add(entry.member)
            entries.append(entry)
        for key in ("metadata", "versions"):
            check.that(isinstance(content.get(key, {}), dict), f"manifest '{key}' is not an object")
        selector = content.get("selector")
        check.that(selector is None or isinstance(selector, str), "manifest 'selector' is not text")
        return Manifest(
            path=self.path,
            arrays=tuple(entries),
            selector=selector,
            metadata=content.get("metadata") or {},
            versions=content.get("versions") or {},
            written=content.get("written") if isinstance(content.get("written"), str) else None,
            checksum=algorithm,
        )

    def _check_entry(self, entry):
        """Sizes and the ``.npy`` header of one member against its manifest entry, before any allocation."""
        info = self._members[entry.member]
        header = _npy_header(entry.stored_dtype, entry.shape)
        if info.file_size != len(header) + entry.nbytes:
            raise self._fail(
                f"holds {info.file_size} bytes but the manifest declares array '{entry.name}' {list(entry.shape)} "
                f"{entry.dtype} ({entry.nbytes} data bytes + {len(header)} header bytes): truncated or tampered",
                entry.member,
            )
        found = self._source.read(self._data_offsets[entry.member], len(header))
        if found != header:
            raise self._fail(_header_problem(found, entry), entry.member)

    # -- the data --------------------------------------------------------------------
    def load(self, names, into=None):
        """Validated arrays for ``names`` (None: all), read and checksummed; all or nothing.

        ``into``: name -> a writable, C-contiguous uint8 array of exactly the entry's
        ``nbytes`` to read that array's data into, e.g. regions of one buffer that is fed
        to TensorFlow whole; those names are checked but not in the result (the caller
        has their bytes).
        """
        import numpy as np

        by_name = self._by_name()
        if names is None:
            names = self.manifest.names
        else:
            missing = [n for n in names if n not in by_name]
            if missing:
                raise KeyError(f"'{self.path}' holds no array {', '.join(missing)}")
            names = dict.fromkeys(names)
        into = into or {}
        memory = isinstance(self._source, _MemorySource)
        digest = _crc32_of_member if self.manifest.checksum == "crc32" else _sha256
        results, jobs, pool = {}, [], None
        read_into, threshold = self._source.read_into if not memory else None, _HASH_IN_THREADS
        try:
            for name in names:
                entry, start = by_name[name]
                target = into.get(name)
                if target is not None and target.nbytes != entry.nbytes:
                    raise ValueError(f"buffer for '{name}' has {target.nbytes} bytes, the array {entry.nbytes}")
                if memory:
                    raw = np.frombuffer(self._source.view(start, entry.nbytes), dtype=np.uint8)
                    if target is not None:
                        target[...] = raw
                        raw = target
                else:
                    raw = read_into(start, target if target is not None else _aligned_bytes(entry.nbytes))
                if entry.nbytes >= threshold:
                    pool = pool or concurrent.futures.ThreadPoolExecutor(max_workers=2)
                    jobs.append((entry, raw, pool.submit(digest, raw, entry)))
                    continue
                if digest(raw, entry) != entry.checksum:
                    self._mismatch(entry, digest(raw, entry))
                if target is None:
                    results[name] = _typed(raw, entry)
                if entry.dtype == "bool":
                    self._check_bools(entry, raw)
            for entry, raw, job in jobs:
                found = job.result()
                if found != entry.checksum:
                    self._mismatch(entry, found)
                if entry.name not in into:
                    results[entry.name] = _typed(raw, entry)
                if entry.dtype == "bool":
                    self._check_bools(entry, raw)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        return results

    def plan_rows(self, names, rows, nbytes) -> _RowPlan:
        """Where the arrays ``names`` (``nbytes`` bytes each) sit in this file, for :meth:`load_rows`
        to read them into rows ``rows`` of one buffer. Valid for as long as ``manifest`` is this one."""
        return _RowPlan(self, names, rows, nbytes)

    def load_rows(self, plan, out) -> None:
        """Read the arrays of ``plan`` into their rows of ``out`` (uint8 ``[count, nbytes]``) and check them.

        Many small arrays in one pass: the file is read a span of members at a time,
        each span gathered into the rows with one vectorized copy, then every row is
        checksummed (and bool rows checked) before this returns; on any problem it
        raises CorruptCheckpointError and the caller must drop ``out``.
        """
        import numpy as np

        count = plan.nbytes // plan.unit
        if count:
            units = out.reshape(-1).view(plan.unit_dtype).reshape(out.shape[0], count)
            width = np.arange(count)
            for start, end, rows, relative in plan.chunks:
                span = self._source.span(start, end).view(plan.unit_dtype)
                units[rows] = span[relative[:, None] + width]
        view = memoryview(out.reshape(-1))
        if self.manifest.checksum == "crc32":
            found = [zlib.crc32(view[where], start) for where, start in plan.crc_inputs]
            if found != plan.expected:
                index = next(i for i, (a, b) in enumerate(zip(found, plan.expected)) if a != b)
                self._mismatch(plan.entries[index], f"{found[index]:08x}")
        else:
            for (where, _), entry in zip(plan.crc_inputs, plan.entries):
                found = hashlib.sha256(view[where]).hexdigest()
                if found != entry.checksum:
                    self._mismatch(entry, found)
        for row, entry in plan.bools:
            self._check_bools(entry, out[row])

    def _mismatch(self, entry, found):
        raise self._fail(
            f"checksum mismatch for array '{entry.name}' ({self.manifest.checksum} {_short(found)}, manifest says "
            f"{_short(entry.checksum)}): its data was altered or damaged; use another checkpoint",
            entry.member,
        )

    def _check_bools(self, entry, raw):
        if raw.size and raw.max() > 1:
            raise self._fail(f"array '{entry.name}' holds bool bytes other than 0 and 1", entry.member)

    def _by_name(self):
        """name -> (entry, file offset of its data), computed once per validated file."""
        table = _by_name_tables.get(id(self.manifest))
        if table is None or table[0] is not self.manifest:
            mapping = {
                entry.name: (entry, self._data_offsets[entry.member] + len(_npy_header(entry.stored_dtype, entry.shape)))
                for entry in self.manifest.arrays
            }
            table = _by_name_tables[id(self.manifest)] = (self.manifest, mapping)
            _evict_oldest(_by_name_tables)
        return table[1]


_GATHER_SPAN = 8 << 20  # load_rows reads at most this much of a file at a time


class _RowPlan:
    """Equally sized arrays of one validated file and the rows of one buffer they go to (see Archive.load_rows).

    Members are visited in file order, in spans of at most ``_GATHER_SPAN`` bytes; the
    copy works in units of up to 8 bytes (the largest that divides the size and every
    offset), so gathering 3,000 arrays of 8 bytes is one numpy indexing of 3,000 items.
    """

    def __init__(self, archive, names, rows, nbytes):
        import numpy as np

        by_name = archive._by_name()
        missing = [n for n in names if n not in by_name]
        if missing:
            raise KeyError(f"'{archive.path}' holds no array {', '.join(missing)}")
        self.entries = [by_name[n][0] for n in names]
        wrong = [e.name for e in self.entries if e.nbytes != nbytes]
        if wrong:
            raise ValueError(f"arrays {', '.join(wrong)} do not have {nbytes} bytes")
        self.nbytes = nbytes
        offsets = np.array([by_name[n][1] for n in names], dtype=np.int64)
        rows = np.asarray(rows, dtype=np.intp)
        self.unit = math.gcd(nbytes, 8, int(np.gcd.reduce(offsets)) if offsets.size else 0)
        self.unit_dtype = np.dtype(f"<u{self.unit}")
        order = np.argsort(offsets, kind="stable")
        self.chunks, first = [], 0
        for last in range(1, len(order) + 1):
            if last == len(order) or offsets[order[last]] + nbytes - offsets[order[first]] > _GATHER_SPAN:
                chosen = order[first:last]
                start, end = int(offsets[chosen[0]]), int(offsets[chosen[-1]]) + nbytes
                self.chunks.append((start, end, rows[chosen], (offsets[chosen] - start) // self.unit))
                first = last
        self.crc_inputs = [(slice(int(row) * nbytes, (int(row) + 1) * nbytes), _header_crc(entry))
                           for row, entry in zip(rows, self.entries)]
        crc32 = archive.manifest.checksum == "crc32"
        self.expected = [int(entry.checksum, 16) for entry in self.entries] if crc32 else None
        self.bools = [(int(row), entry) for row, entry in zip(rows, self.entries) if entry.dtype == "bool"]


_by_name_tables = {}  # id(manifest) -> (manifest, {name: (entry, data offset)})
_cache_lock = threading.Lock()


def _evict_oldest(cache, keep=8):
    """Drop the oldest entries of a small insertion-ordered cache (safe from several threads)."""
    with _cache_lock:
        while len(cache) > keep:
            cache.pop(next(iter(cache)), None)


class _SchemaCheck:
    def __init__(self, archive, member):
        self._archive, self._member = archive, member

    def that(self, condition, message):
        if not condition:
            raise self._archive._fail(f"{message}; the manifest was edited or damaged", self._member)


_ENTRY_TYPES = (("name", str), ("member", str), ("dtype", str), ("stored_dtype", str), ("checksum", str),
                ("shape", list), ("nbytes", int))
_HEX = frozenset("0123456789abcdef")


def _entry_from_json(raw, position, check, digits) -> ArrayEntry:
    """An ArrayEntry from its manifest JSON, every field checked (messages built only on failure)."""
    if not isinstance(raw, dict):
        check.that(False, f"manifest array #{position} is not an object")
    for key, kind in _ENTRY_TYPES:
        value = raw.get(key)
        if type(value) is not kind:
            check.that(False, f"manifest array #{position} ({raw.get('name')!r}) has no valid '{key}'")
    dtype, stored, shape, member, digest = raw["dtype"], raw["stored_dtype"], raw["shape"], raw["member"], raw["checksum"]
    expected_storage = STORED_AS.get(dtype)
    itemsize = int(stored[2:]) if expected_storage == stored else 0
    nbytes = itemsize
    for d in shape:
        if type(d) is not int or d < 0:
            nbytes = -1
            break
        nbytes *= d
    if (expected_storage != stored or nbytes != raw["nbytes"] or len(shape) > 64 or len(digest) != digits
            or not _HEX.issuperset(digest) or _member_problem(member) is not None or not member.endswith(".npy")
            or not isinstance(raw.get("info", {}), dict)):
        _entry_problem(raw, position, check, digits)
    return ArrayEntry(raw["name"], member, tuple(shape), dtype, stored, nbytes, digest, raw.get("info") or {})


def _entry_problem(raw, position, check, digits):
    """Raise the message for the first thing wrong with a manifest entry."""
    label = f"manifest array #{position} ({raw.get('name')!r})"
    dtype, stored, shape = raw["dtype"], raw["stored_dtype"], raw["shape"]
    check.that(dtype in STORED_AS, f"{label}: dtype {dtype!r} is not allowed (allowed: {', '.join(STORED_AS)})")
    check.that(stored == STORED_AS[dtype], f"{label}: dtype {dtype} is stored as {STORED_AS[dtype]}, not {stored!r}")
    check.that(all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape),
               f"{label}: shape {shape!r} is not a list of non-negative integers")
    check.that(len(shape) <= 64, f"{label}: {len(shape)} dimensions")
    nbytes = math.prod(shape) * int(stored[2:])
    check.that(raw["nbytes"] == nbytes, f"{label}: nbytes {raw['nbytes']} is not what shape {shape} {dtype} takes "
                                        f"({nbytes})")
    check.that(re.fullmatch(f"[0-9a-f]{{{digits}}}", raw["checksum"]) is not None,
               f"{label}: checksum is not {digits} hex digits")
    check.that(_member_problem(raw["member"]) is None and raw["member"].endswith(".npy"),
               f"{label}: member {raw['member']!r} is not a flat '.npy' name")
    check.that(isinstance(raw.get("info", {}), dict), f"{label}: 'info' is not an object")


def _member_problem(name) -> str | None:
    """Why a zip member name is refused, or None."""
    if _MEMBER_NAME.fullmatch(name) and ".." not in name and (name.endswith(".npy") or name == MANIFEST_MEMBER):
        return None
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if ".." in name:
        return "'..' in the name"
    if "/" in name or "\\" in name:
        return "a path separator in the name"
    if not _MEMBER_NAME.fullmatch(name):
        return "characters outside A-Z a-z 0-9 _ . - (or longer than 251)"
    if name != MANIFEST_MEMBER and not name.endswith(".npy"):
        return "not a '.npy' member"
    return None


def _header_problem(found, entry) -> str:
    """Describe a ``.npy`` header that differs from the one the manifest implies; never unpickles."""
    import numpy as np

    expected = f"{entry.stored_dtype} {list(entry.shape)}"
    try:
        stream = io.BytesIO(found)
        version = np.lib.format.read_magic(stream)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(stream)  # literal_eval of a dict: cannot run code
    except Exception:
        return f"its .npy header is damaged or not the one the manifest implies ({expected}); data altered"
    if dtype.hasobject:
        return ("holds a Python object array (dtype object), which only pickle can load; subsetsaver never "
                "unpickles: refused")
    return (f"its .npy header says {dtype.str} {list(shape)}{' fortran order' if fortran else ''}, "
            f"but the manifest declares array '{entry.name}' as {expected}: tampered or damaged")


def _aligned_bytes(count):
    """An uninitialized uint8 array of ``count`` bytes whose data is ALIGNMENT-aligned."""
    import numpy as np

    raw = np.empty(count + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + count]


def _sha256(array, entry) -> str:
    return hashlib.sha256(array.data if array.size else b"").hexdigest()


_header_crcs = {}


def _header_crc(entry) -> int:
    """CRC-32 of the member's exact .npy header: where the member's CRC-32 over its data starts."""
    key = (entry.stored_dtype, entry.shape)
    start = _header_crcs.get(key)
    if start is None:
        start = _header_crcs[key] = zlib.crc32(_npy_header(entry.stored_dtype, entry.shape))
    return start


def _crc32_of_member(array, entry) -> str:
    """CRC-32 of the member (its exact .npy header, then the data), as 8 hex digits."""
    start = _header_crc(entry)
    return f"{zlib.crc32(array.data, start) if array.size else start:08x}"


def _short(digest) -> str:
    return digest if len(digest) <= 16 else digest[:16] + "..."


_stored_dtypes = {}


def _typed(raw, entry):
    """View the raw bytes as the entry's array: stored dtype, shape, then the true dtype."""
    import numpy as np

    stored = _stored_dtypes.get(entry.stored_dtype)
    if stored is None:
        stored = _stored_dtypes[entry.stored_dtype] = np.dtype(entry.stored_dtype)
    array = raw.view(stored).reshape(entry.shape)
    return array.view(numpy_dtype(entry.dtype)) if entry.dtype in _ML_DTYPES else array


def numpy_dtype(name):
    """The numpy dtype for a true dtype name: ``numpy_dtype('bfloat16')`` is ml_dtypes' bfloat16."""
    import numpy as np

    if name in _ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)
