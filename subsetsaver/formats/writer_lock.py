"""One writing process per checkpoint directory.

Two processes saving into one directory with the same step numbers replace each
other's files, and the state file can name a checkpoint whose other files the second
writer is still replacing. The first save of a process in a directory takes an
exclusive ``flock`` on the directory itself (no file is added to it) and keeps it
until the process ends: the operating system releases it when the process dies,
however it dies (a process that has saved into more than ``MAX_HELD`` directories
since lets go of the oldest). Another process that tries to save there gets a clear
error at once. Readers take no lock. Directories of object stores (``gs://``) and file
systems without ``flock`` are not locked.

Example::

    >>> hold_directory('/ckpt')      # None; again in this process: None; in another: CheckpointWriteError
"""

from __future__ import annotations

import collections
import errno
import os
import threading

from ..errors import CheckpointWriteError

MAX_HELD = 32  # a process writing to more directories than this lets go of the least recently used
_held = collections.OrderedDict()  # real path of a directory -> open descriptor holding its lock
_lock = threading.Lock()


def hold_directory(directory) -> None:
    """Take (or keep) this process's writer lock on ``directory``; CheckpointWriteError if another holds it."""
    directory = os.fspath(directory) or "."
    if "://" in directory and not directory.startswith("file://"):
        return
    directory = directory[len("file://"):] if directory.startswith("file://") else directory
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no advisory locks to take
        return
    key = os.path.realpath(directory)
    with _lock:
        if key in _held:
            _held.move_to_end(key)
            return
        try:  # read-only: an open file for writing would keep the file system from being remounted
            descriptor = os.open(directory, os.O_RDONLY)
        except OSError:
            return  # a directory we cannot open fails in the save itself, with its own message
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                raise CheckpointWriteError(
                    f"another process is saving checkpoints in '{directory}'; two writers in one directory "
                    "replace each other's files: give each run its own directory, or stop the other process first"
                ) from error
            return  # no flock on this file system (some network mounts): unlocked, as before
        _held[key] = descriptor
        while len(_held) > MAX_HELD:
            os.close(_held.popitem(last=False)[1])

