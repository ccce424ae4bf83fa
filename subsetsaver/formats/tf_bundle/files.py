"""The bytes of checkpoint files, read at an offset without reading the rest.

Local paths (no scheme, or ``file://``) are read with ``os.pread``/``os.preadv`` into the
caller's buffer, so a tensor costs its own size and nothing more. Other schemes
(``gs://``, ``ram://``, ...) go through ``tf.io.gfile`` (seek, then read), TensorFlow
imported only then.

Example::

    >>> with open_random_access('/ckpt/model.data-00000-of-00001') as data:
    ...     data.size, data.read(0, 4)
    (2097164, b'\\x00\\x00\\xc0?')
"""

from __future__ import annotations

import os
import stat

import numpy as np

from ...errors import CorruptCheckpointError
from ..atomic import is_local, local_path

_MOST_PER_READ = 1 << 30  # os.preadv moves at most about 2 GiB per call on Linux


def whole_file(path) -> bytes:
    """The bytes of the file at ``path``; FileNotFoundError if there is none."""
    path = os.fspath(path)
    if is_local(path):
        descriptor = _open_regular(path)
        with open(descriptor, "rb") as handle:
            return handle.read()
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(path)
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def file_size(path):
    """Size of the file at ``path`` in bytes; None if there is none."""
    path = os.fspath(path)
    if is_local(path):
        try:
            status = os.stat(local_path(path))
        except (FileNotFoundError, NotADirectoryError):
            return None
        _check_regular(path, status)
        return status.st_size
    import tensorflow as tf

    try:
        return tf.io.gfile.stat(path).length
    except tf.errors.NotFoundError:
        return None


def _open_regular(path):
    """A read-only descriptor of the regular file at ``path`` (opened without blocking: a pipe under
    a checkpoint's name must not wait for a writer forever)."""
    descriptor = os.open(local_path(os.fspath(path)), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        _check_regular(path, os.fstat(descriptor))
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _check_regular(path, status):
    if not stat.S_ISREG(status.st_mode):  # a directory, a device (endless), a pipe (blocks)
        raise CorruptCheckpointError(f"'{path}' is not a regular file; restore from an intact copy of the checkpoint")


def open_random_access(path):
    """A :class:`LocalFile` for a local ``path``, else a :class:`GFile`."""
    return LocalFile(path) if is_local(os.fspath(path)) else GFile(path)


class _RandomAccess:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def read(self, offset, count) -> bytes:
        """``count`` bytes from ``offset``; CorruptCheckpointError if the file ends first."""
        return self.read_into(offset, np.empty(count, dtype=np.uint8)).tobytes()

    def _ended(self):
        return CorruptCheckpointError(f"'{self.path}' ended while reading it: it changed or was truncated "
                                      "since the checkpoint was opened; restore from an intact copy of the checkpoint")


class LocalFile(_RandomAccess):
    """A local file read with ``os.preadv``: no seek, so reads from threads do not interfere."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._descriptor = _open_regular(self.path)
        self.size = os.fstat(self._descriptor).st_size

    def read_into(self, offset, buffer):
        """Fill ``buffer`` (a contiguous writable array) with the bytes from ``offset``; returns it."""
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view):
            got = os.preadv(self._descriptor, [view[done:done + _MOST_PER_READ]], offset + done)
            if got <= 0:
                raise self._ended()
            done += got
        return buffer

    def close(self):
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


class GFile(_RandomAccess):
    """A file on another filesystem, through ``tf.io.gfile`` (seek, read)."""

    def __init__(self, path):
        import tensorflow as tf

        self.path = os.fspath(path)
        self.size = tf.io.gfile.stat(self.path).length
        self._handle = tf.io.gfile.GFile(self.path, "rb")

    def read_into(self, offset, buffer):
        view, done = memoryview(buffer).cast("B"), 0
        self._handle.seek(offset)
        while done < len(view):
            piece = self._handle.read(min(len(view) - done, _MOST_PER_READ))
            if not piece:
                raise self._ended()
            view[done:done + len(piece)] = piece
            done += len(piece)
        return buffer

    def close(self):
        self._handle.close()
