"""The file layer's backend for file systems only TensorFlow serves (``ram://``, ``hdfs://``, ...).

Buckets go through fsspec (:mod:`subsetsaver.storage.remote`); what fsspec does
not know, and TensorFlow does, goes through ``tf.io.gfile``, imported only then. Such
file systems publish a file when it is closed and have no fsync.

Example::

    >>> GFILE.exists('ram://tests/model.npz')
    False
"""

from __future__ import annotations

import contextlib
import os
import threading

from ..errors import CheckpointNotFoundError, CheckpointWriteError
from .contract import RangeReader, StorageBackend
from .local import ended_early, temporary_name

_WRITE_CHUNK = 16 << 20  # tf.io.gfile takes bytes, so writes copy this much at a time


def _gfile():
    import tensorflow as tf

    return tf


def tensorflow_serves(protocol) -> bool:
    """Whether TensorFlow is installed and has a file system for ``protocol`` (``ram``, ``hdfs``, ...)."""
    try:
        return protocol in _gfile().io.gfile.get_registered_schemes()
    except ImportError:
        return False


class GFileFiles(StorageBackend):
    """``tf.io.gfile`` behind the file layer's questions."""

    can_rename = True

    def exists(self, path) -> bool:
        return _gfile().io.gfile.exists(path)

    def is_directory(self, path) -> bool:
        return _gfile().io.gfile.isdir(path)

    def list_directory(self, directory) -> list:
        tf = _gfile()
        try:
            return sorted(name.rstrip("/") for name in tf.io.gfile.listdir(directory))
        except tf.errors.OpError as error:
            raise OSError(str(error)) from error

    def size(self, path) -> int:
        return _stat(path).length

    def read_bytes(self, path, limit=None) -> bytes:
        tf = _gfile()
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(path)
        try:
            with tf.io.gfile.GFile(path, "rb") as handle:
                return handle.read() if limit is None else handle.read(limit)
        except tf.errors.OpError as error:
            raise OSError(str(error)) from error

    def open_reader(self, path):
        return _GFileReader(path)

    @contextlib.contextmanager
    def replacing(self, path):
        tf = _gfile()
        directory = os.path.dirname(path)
        if directory and not path.startswith("ram://") and not tf.io.gfile.isdir(directory):
            raise CheckpointNotFoundError(f"cannot write '{path}': directory '{directory}' does not exist; create it first")
        temporary = temporary_name(path)
        handle = tf.io.gfile.GFile(temporary, "wb")
        try:
            handle.write(b"")  # GFile creates its file on the first write: an empty file is written too
            yield _GFileSink(handle)
            handle.close()
            tf.io.gfile.rename(temporary, path, overwrite=True)
        except BaseException as error:
            with contextlib.suppress(OSError, tf.errors.OpError):
                handle.close()
            self.remove(temporary)
            if isinstance(error, tf.errors.OpError):
                raise CheckpointWriteError(f"cannot write '{path}': {error.message}", path=path) from error
            raise

    def rename(self, source, target) -> None:
        _gfile().io.gfile.rename(source, target, overwrite=True)

    def remove(self, path) -> None:
        tf = _gfile()
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)

    def make_directories(self, directory) -> list:
        _gfile().io.gfile.makedirs(directory)
        return []

    def remove_tree(self, directory) -> None:
        tf = _gfile()
        if tf.io.gfile.isdir(directory):
            tf.io.gfile.rmtree(directory)

    def remove_directory(self, directory) -> None:
        pass

    def sync_directory(self, directory) -> None:
        pass

    def hold_directory(self, directory) -> None:
        pass  # no advisory locks on these file systems

    def remove_abandoned(self, directory) -> list:
        return []

    def modified(self, path) -> int:
        return _stat(path).mtime_nsec

    def identity(self, path):
        return None


def _stat(path):
    tf = _gfile()
    try:
        return tf.io.gfile.stat(path)
    except tf.errors.NotFoundError as error:
        raise FileNotFoundError(path) from error


class _GFileSink:
    def __init__(self, handle):
        self._handle = handle

    def write(self, data):
        if isinstance(data, bytes):
            self._handle.write(data)
            return
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _WRITE_CHUNK):
            self._handle.write(bytes(view[start:start + _WRITE_CHUNK]))


class _GFileReader(RangeReader):
    """A file read through ``tf.io.gfile`` (seek, then read)."""

    def __init__(self, path):
        tf = _gfile()
        self.path = os.fspath(path)
        self.size = _stat(self.path).length
        self._handle = tf.io.gfile.GFile(self.path, "rb")
        self._lock = threading.Lock()  # seek then read: one at a time

    def read_into(self, offset, buffer):
        view, done = memoryview(buffer).cast("B"), 0
        with self._lock:
            self._handle.seek(offset)
            while done < len(view):
                piece = self._handle.read(len(view) - done)
                if not piece:
                    raise ended_early(self.path)
                view[done:done + len(piece)] = piece
                done += len(piece)
        return buffer

    def close(self):
        self._handle.close()


GFILE = GFileFiles()
