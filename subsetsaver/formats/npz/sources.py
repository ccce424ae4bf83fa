"""The bytes of a checkpoint file being read: a local file (``os.pread``), or a remote one in memory.

Local paths (no scheme, or ``file://``) are read with the operating system's calls;
files up to 16 MiB in one piece, so every header check is a slice. Any other scheme
(``ram://``, ``gs://``, ...) is read whole through ``tf.io.gfile`` (one request),
TensorFlow imported only then.

Example::

    >>> source = open_source('/ckpt/model.npz')
    >>> source.read(0, 4), source.size
    (b'PK\\x03\\x04', 3208)
    >>> source.close()
"""

from __future__ import annotations

import io
import os

from ...errors import CheckpointNotFoundError, CorruptCheckpointError
from ..atomic import is_local, local_path

_READ_WHOLE = 16 << 20  # local files up to this size are read in one piece


def open_source(path):
    """A :class:`LocalSource` for a local ``path``, else a :class:`MemorySource`."""
    return LocalSource(path) if is_local(path) else MemorySource(path)


class LocalSource:
    """A local file: ``read``/``read_into``/``span`` at any offset; ``identity`` (device, inode,
    size, times) tells a later open whether it is still the same file."""

    def __init__(self, path):
        self.path = local_path(path)
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
        """A binary stream of the whole file, for ``zipfile`` to parse its directory."""
        return io.BytesIO(self._whole.tobytes()) if self._whole is not None else open(self.path, "rb")

    def read(self, offset, count) -> bytes:
        if self._whole is not None:
            return self._whole[offset:offset + count].tobytes()
        return os.pread(self._descriptor, count, offset)

    def read_into(self, offset, buffer):
        """Fill ``buffer`` (a writable uint8 array) with the file's bytes from ``offset``; returns it."""
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


class MemorySource:
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
        """A binary stream of the whole file, for ``zipfile`` to parse its directory."""
        return io.BytesIO(self._data)

    def read(self, offset, count) -> bytes:
        return self._data[offset:offset + count]

    def view(self, offset, count):
        """``count`` bytes from ``offset`` without a copy (a memoryview)."""
        return memoryview(self._data)[offset:offset + count]

    def span(self, start, end):
        """Bytes ``start:end`` of the file as a read-only uint8 array (no copy)."""
        import numpy as np

        return np.frombuffer(self._data, dtype=np.uint8, count=end - start, offset=start)

    def close(self):
        self._data = b""
