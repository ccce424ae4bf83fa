"""Atomic, durable file writes: the one place the library replaces a file.

A writer puts its bytes under a temporary name beside the target (same file system, so
the rename is atomic), then renames. Local files are made durable: a background
fdatasync every 32 MiB while the bytes come, an fsync at the end, the rename, an fsync
of the directory; a large file the rename replaces is freed in a background thread
(:func:`finish_background_work` waits). Any other scheme (``ram://``, ``gs://``, ...)
goes through ``tf.io.gfile`` streams, imported only then: object stores publish a file
when it is closed, and have no fsync.

The temporary name says who wrote it (``PATH.tmp-HOST-PID-RANDOM``), so that a later
save can delete what a killed one left without touching another live writer's files.

Example::

    >>> with replacing('/ckpt/model-5.npz') as sink:      # all or nothing
    ...     sink.write(header); sink.write(memoryview(array))
    >>> write_bytes('/ckpt/checkpoint_npz.json', b'{}\\n')
    >>> remove_abandoned('/ckpt')                          # what killed writers on this host left
"""

import concurrent.futures
import contextlib
import os
import re
import shutil
import socket
import stat
import threading
import uuid

from ..errors import CheckpointNotFoundError

TEMPORARY_MARK = ".tmp-"
# NAME.tmp-HOST-PID-RANDOM, then whatever a writer appends (.index, .data-00000-of-00001, _temp, ...)
_TEMPORARY = re.compile(r"^(?P<stem>.+\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8})(?P<rest>(?:[-._].*)?)$")
_WRITE_CHUNK = 16 << 20     # tf.io.gfile takes bytes, so remote writes copy this much at a time
_WRITEBACK_EVERY = 32 << 20  # local writes fdatasync in the background after each this many bytes
_RELEASE_IN_BACKGROUND = 16 << 20  # a replaced local file this large is freed in the background


# ---------------------------------------------------------------------------------
# Paths and temporary names
# ---------------------------------------------------------------------------------


def is_local(path) -> bool:
    """Whether ``path`` is on the local filesystem (no ``scheme://``, or ``file://``)."""
    path = os.fspath(path)
    return "://" not in path or path.startswith("file://")


def local_path(path) -> str:
    """``path`` without a ``file://`` scheme, for the operating system's calls."""
    return path[len("file://"):] if path.startswith("file://") else path


def fsync_directory(directory):
    """Make a rename in ``directory`` durable; a no-op where directories cannot be opened."""
    try:
        descriptor = os.open(directory or ".", os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def temporary_name(path) -> str:
    """A unique name beside ``path`` (same file system, so a rename is atomic) naming its writer."""
    return f"{path}{TEMPORARY_MARK}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_abandoned(directory) -> list:
    """Delete the temporary files in ``directory`` whose writer ran on this host and no longer
    runs (a save killed midway). Another host's and live processes' are left alone.
    Returns the deleted names, sorted."""
    host, removed = socket.gethostname(), []
    try:
        names = os.listdir(directory or ".")
    except FileNotFoundError:
        return []
    for name in names:
        match = _TEMPORARY.match(name)
        if match is None or match["host"] != host or _running(int(match["pid"])):
            continue
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except FileNotFoundError:  # another process cleaning up at the same time
            continue
        removed.append(name)
    return sorted(removed)


def _running(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


# ---------------------------------------------------------------------------------
# Replacing a file
# ---------------------------------------------------------------------------------


@contextlib.contextmanager
def replacing(path):
    """``with replacing(path) as sink: sink.write(data)``: ``path`` gets the bytes written, or stays as it was.

    ``sink.write`` takes bytes or anything with the buffer protocol (a memoryview of a
    C-contiguous array: no copy for local files). On success the temporary file is made
    durable and renamed over ``path``; on any error it is removed and the error raised.
    A missing directory is a :class:`~subsetsaver.errors.CheckpointNotFoundError`.
    """
    path = os.fspath(path)
    sink = _LocalFileSink(path) if is_local(path) else _GFileSink(path)
    try:
        yield sink
        sink.commit()
    except BaseException:
        sink.abort()
        raise


def write_bytes(path, data) -> None:
    """Replace ``path`` with ``data`` atomically (temporary name, flush, fsync, rename).

    >>> write_bytes('/ckpt/checkpoint_npz.json', b'{"format": "subsetsaver.npz-state"}\\n')
    """
    with replacing(path) as sink:
        sink.write(memoryview(data))


class _LocalFileSink:
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
        self.path = local_path(path)
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
        if (self._written - self._started >= _WRITEBACK_EVERY
                and (self._syncing is None or self._syncing.done())):
            self._file.flush()
            self._syncing = _background().submit(os.fdatasync, self._file.fileno())
            self._started = self._written

    def commit(self):
        self._file.flush()
        if self._syncing is not None:
            self._syncing.result()
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
        fsync_directory(os.path.dirname(self.path))
        if replaced is not None:
            _background().submit(os.close, replaced)

    def abort(self):
        """Drop the temporary file, whatever state the write stopped in (a full disk fails close too)."""
        try:
            if self._syncing is not None:
                self._syncing.exception()
            self._file.close()
        except OSError:
            pass  # the bytes are being dropped anyway; the temporary goes below
        finally:
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
        try:
            self._file.close()
        except (OSError, self._tf.errors.OpError):
            pass  # the bytes are being dropped anyway; the temporary goes below
        finally:
            if self._tf.io.gfile.exists(self.temporary):
                self._tf.io.gfile.remove(self.temporary)


# ---------------------------------------------------------------------------------
# Work left to the background
# ---------------------------------------------------------------------------------

_executor = None
_executor_lock = threading.Lock()


def _background():
    """One worker thread for work a save need not wait for (see _LocalFileSink)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="subsetsaver-npz")
        return _executor


def finish_background_work() -> None:
    """Wait until the work earlier saves left to the background (closing replaced files) is done.

    >>> write_bytes('model.npz', data); finish_background_work()
    """
    if _executor is not None:
        _executor.submit(lambda: None).result()
