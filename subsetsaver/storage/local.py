"""The local file system's backend of the file layer (:mod:`subsetsaver.storage`).

Reads go through ``os.preadv`` into the caller's buffer (no seek, so threads do not
interfere). Writes are atomic and durable: the bytes go under a temporary name beside
the target (same file system, so the rename is atomic), past the page cache in aligned
stages where the file system allows (:mod:`~subsetsaver.storage.direct_io`; else with a
background fdatasync every 32 MiB), an fsync at the end, the rename and an fsync of the
directory; a large
file the rename replaces is freed in a background thread (:func:`finish_background_work`
waits). The temporary name says who wrote it (``PATH.tmp-HOST-PID-RANDOM``), so that a
later writer deletes what a killed one left without touching another live writer's
files. One writing process per directory: an exclusive ``flock`` on the directory.

Example::

    with LOCAL.replacing('/ckpt/model-5.npz') as sink:      # all or nothing
        sink.write(header); sink.write(memoryview(array))
    LOCAL.remove_abandoned('/ckpt')                          # what killed writers on this host left
"""

import collections
import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import threading
import uuid

from .. import workers
from ..errors import CheckpointNotFoundError, CheckpointWriteError, CorruptCheckpointError
from . import direct_io
from .contract import RangeReader, StorageBackend

TEMPORARY_MARK = ".tmp-"
# NAME.tmp-HOST-PID-RANDOM, then whatever a writer appends (.index, .data-00000-of-00001, _temp, ...)
_TEMPORARY = re.compile(r"^(?P<stem>.+\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8})(?P<rest>(?:[-._].*)?)$")
_MOST_PER_READ = 1 << 30    # os.preadv moves at most about 2 GiB per call on Linux
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
    """Whether process ``pid`` runs. A killed writer whose parent has not reaped it yet (a zombie) does not: it
    holds no file and no lock, and a process reparented to an init that reaps slowly stays one for a while."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return not _zombie(pid)


def _zombie(pid) -> bool:
    """Whether ``/proc`` says process ``pid`` has ended and waits to be reaped (False where there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            return status.read().rsplit(b")", 1)[1].split()[0] == b"Z"  # the state follows the name's ")"
    except (OSError, IndexError):
        return False


# ---------------------------------------------------------------------------------
# Replacing a file
# ---------------------------------------------------------------------------------


class LocalFiles(StorageBackend):
    """The file layer's backend for local paths (no scheme, or ``file://``)."""

    can_rename = True

    def exists(self, path) -> bool:
        return os.path.exists(local_path(path))

    def is_directory(self, path) -> bool:
        return os.path.isdir(local_path(path))

    def list_directory(self, directory) -> list:
        """The names in ``directory``, sorted; OSError when it cannot be listed."""
        return sorted(os.listdir(local_path(directory) or "."))

    def size(self, path) -> int:
        """Bytes of the regular file at ``path``; FileNotFoundError when absent."""
        status = os.stat(local_path(path))
        _check_regular(path, status)
        return status.st_size

    def read_bytes(self, path, limit=None) -> bytes:
        """The bytes of ``path`` (at most ``limit``); FileNotFoundError when there is no such file."""
        with open(_open_regular(path), "rb") as handle:
            return handle.read() if limit is None else handle.read(limit)

    def open_reader(self, path):
        return LocalReader(path)

    @contextlib.contextmanager
    def replacing(self, path):
        sink = _LocalFileSink(path)
        try:
            yield sink
            sink.commit()
        except BaseException:
            sink.abort()
            raise

    def rename(self, source, target) -> None:
        """Atomically make ``target`` name what ``source`` named."""
        os.replace(local_path(source), local_path(target))

    def remove(self, path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(local_path(path))

    def make_directories(self, directory) -> list:
        """Create ``directory`` and its missing parents; returns the ones created, outermost first."""
        directory, created = os.path.abspath(local_path(directory)), []
        while directory and not os.path.isdir(directory):
            created.append(directory)
            directory = os.path.dirname(directory)
        for missing in reversed(created):
            try:
                os.mkdir(missing)
            except FileExistsError:
                if not os.path.isdir(missing):
                    raise
        return list(reversed(created))

    def remove_tree(self, directory) -> None:
        shutil.rmtree(local_path(directory), ignore_errors=True)

    def remove_directory(self, directory) -> None:
        """Remove ``directory`` if it is empty."""
        with contextlib.suppress(OSError):
            os.rmdir(local_path(directory))

    def sync_directory(self, directory) -> None:
        fsync_directory(local_path(directory))

    def hold_directory(self, directory) -> None:
        hold_directory(local_path(directory))

    def remove_abandoned(self, directory) -> list:
        return remove_abandoned(local_path(directory))

    def modified(self, path) -> int:
        return os.stat(local_path(path)).st_mtime_ns

    def identity(self, path):
        """(device, inode, size, times) of ``path``: equal for the same unchanged file; None when absent."""
        try:
            status = os.stat(local_path(path))
        except OSError:
            return None
        return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


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


class LocalReader(RangeReader):
    """A local file read with ``os.preadv``: no seek, so reads from threads do not interfere.

    with LocalReader('/ckpt/model.data-00000-of-00001') as data:
        data.size, data.read(0, 4)
    # (2097164, b'\\x00\\x00\\xc0?')
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._descriptor = _open_regular(self.path)
        self.size = os.fstat(self._descriptor).st_size
        self._direct = (direct_io.DirectReads(local_path(self.path))
                        if direct_io.read_past_the_cache(self._descriptor) else None)

    def read_into(self, offset, buffer):
        """Fill ``buffer`` (a contiguous writable array) with the bytes from ``offset``; returns it. A large
        read that a writer's read-back makes of a file it wrote past the page cache comes from the disk
        (:mod:`~subsetsaver.storage.direct_io`)."""
        view, done = memoryview(buffer).cast("B"), 0
        if self._direct is not None and len(view) >= direct_io.DIRECT_FROM:
            done = self._direct.read(view, offset)
        while done < len(view):
            got = os.preadv(self._descriptor, [view[done:done + _MOST_PER_READ]], offset + done)
            if got <= 0:
                raise ended_early(self.path)
            done += got
        return buffer

    def will_need(self, offset, count) -> None:
        """Ask the kernel to read ``count`` bytes from ``offset`` ahead, while the pieces before them are
        looked at (a cold file is then read at the disk's pace, not one piece's)."""
        if hasattr(os, "posix_fadvise") and count and self._direct is None:  # else read past the page cache
            os.posix_fadvise(self._descriptor, offset, count, os.POSIX_FADV_WILLNEED)

    def close(self):
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
        if self._direct is not None:
            self._direct.close()


def ended_early(path) -> CorruptCheckpointError:
    """The error for a file that ended before the bytes its index promised."""
    return CorruptCheckpointError(f"'{path}' ended while reading it: it changed or was truncated since the "
                                  "checkpoint was opened; restore from an intact copy of the checkpoint")


class _LocalFileSink:
    """A local temporary file that becomes ``path`` on commit: fsync, rename, fsync of the directory.

    Durability costs a wait for the disk; three things keep it short. Where the file system
    allows, the bytes go to the disk past the page cache (:class:`~subsetsaver.storage.direct_io.StagedWrites`),
    whose new pages cost more than the disk on a virtual machine. Else every
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
        self._file = open(os.open(self.temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb", buffering=1 << 20)
        self._written = 0  # bytes handed to the file
        self._started = 0  # bytes handed to the file when the last background fdatasync started
        self._syncing = self._staged = None
        try:
            self._staged = direct_io.StagedWrites.open(self.temporary, self._file.fileno(), name=self.path)
        except BaseException:
            self.abort()
            raise

    def write(self, data):
        if self._staged is not None:  # past the page cache; the fsync at commit makes it durable
            self._staged.write(data)
            return
        self._file.write(data)
        self._written += len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        if (self._written - self._started >= _WRITEBACK_EVERY
                and (self._syncing is None or self._syncing.done())):
            self._file.flush()
            self._syncing = _background().submit(os.fdatasync, self._file.fileno())
            self._started = self._written

    def commit(self):
        if self._staged is not None:
            self._staged.finish()
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
            if self._staged is not None:
                self._staged.abandon()
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


# ---------------------------------------------------------------------------------
# Work left to the background
# ---------------------------------------------------------------------------------

_BACKGROUND = "subsetsaver-npz"


def _background():
    """One worker thread for work a save need not wait for (see _LocalFileSink)."""
    return workers.shared_pool(_BACKGROUND, 1)


def finish_background_work() -> None:
    """Wait until the work earlier saves left to the background (closing replaced files) is done.

    write_bytes('model.npz', data); finish_background_work()
    """
    pool = workers.started(_BACKGROUND)
    if pool is not None:
        pool.submit(lambda: None).result()


# ---------------------------------------------------------------------------------
# One writing process per directory
# ---------------------------------------------------------------------------------

MAX_HELD = 32  # a process writing to more directories than this lets go of the least recently used
_held = collections.OrderedDict()  # real path of a directory -> open descriptor holding its lock
_held_lock = threading.Lock()


def hold_directory(directory) -> None:
    """Take (or keep) this process's writer lock on ``directory``; CheckpointWriteError if another holds it.

    Two processes writing into one directory replace each other's files. The first write
    of a process in a directory takes an exclusive ``flock`` on the directory itself (no
    file is added to it) and keeps it until the process ends: the operating system
    releases it when the process dies, however it dies. Readers take no lock. File
    systems without ``flock`` are not locked.

    >>> hold_directory('/ckpt')      # None; again in this process: None; in another: CheckpointWriteError
    """
    directory = local_path(os.fspath(directory)) or "."
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no advisory locks to take
        return
    key = os.path.realpath(directory)
    with _held_lock:
        if key in _held:
            _held.move_to_end(key)
            return
        try:  # read-only: an open file for writing would keep the file system from being remounted
            descriptor = os.open(directory, os.O_RDONLY)
        except OSError:
            return  # a directory we cannot open fails in the write itself, with its own message
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                raise CheckpointWriteError(
                    f"another process is writing checkpoints in '{directory}'{_holder(key)}; two writers in one "
                    "directory replace each other's files: give each its own directory, or stop the other "
                    "process first", path=directory) from error
            return  # no flock on this file system (some network mounts): unlocked
        _held[key] = descriptor
        while len(_held) > MAX_HELD:
            os.close(_held.popitem(last=False)[1])


def _holder(directory) -> str:
    """`` (process N)`` for the process that holds the lock on ``directory``, where /proc/locks tells."""
    try:
        inode = os.stat(directory).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                    return f" (process {fields[4]})"
    except (OSError, ValueError):
        pass
    return ""


LOCAL = LocalFiles()
