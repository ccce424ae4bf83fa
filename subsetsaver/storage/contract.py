"""What every storage backend answers: the contract below the formats, and the ranged reader backends share.

A backend serves the paths of the URL schemes :data:`subsetsaver.storage.SCHEMES` gives it; the
file layer's functions (:mod:`subsetsaver.storage`) send each path to its backend. A backend
subclasses :class:`StorageBackend` (an abstract class: a backend missing a question cannot be
made) and its readers subclass :class:`RangeReader`; one test runs the same questions against
every backend. Paths reach a backend as strings, a local one without ``file://``.

Example::

    class MemoryFiles(StorageBackend):
        can_rename = True
        def exists(self, path): return path in self.files
        ...
"""

from __future__ import annotations

import abc


class StorageBackend(abc.ABC):
    """The questions the file layer asks of the file system behind one or more URL schemes.

    ``can_rename``: whether a rename is atomic there (object stores have none: they publish data
    first, the commit object last).
    """

    @property
    @abc.abstractmethod
    def can_rename(self) -> bool:
        """Whether ``rename`` is atomic on this file system."""

    @abc.abstractmethod
    def exists(self, path) -> bool:
        """Whether a file or directory is at ``path``."""

    @abc.abstractmethod
    def is_directory(self, path) -> bool:
        """Whether ``path`` is a directory."""

    @abc.abstractmethod
    def list_directory(self, directory) -> list:
        """The names in ``directory``, sorted; OSError when it cannot be listed."""

    @abc.abstractmethod
    def size(self, path) -> int:
        """Bytes of the file at ``path``; FileNotFoundError when there is none."""

    def sizes(self, paths) -> dict:
        """Bytes of each file of ``paths``, None where there is none; asked one after another here (a store whose
        round trips cost more asks them together)."""
        return {path: size_or_none(self, path) for path in paths}

    @abc.abstractmethod
    def read_bytes(self, path, limit=None) -> bytes:
        """The bytes of ``path`` (at most ``limit``); FileNotFoundError when there is no such file."""

    @abc.abstractmethod
    def open_reader(self, path) -> RangeReader:
        """A :class:`RangeReader` of ``path``; FileNotFoundError when there is no such file."""

    @abc.abstractmethod
    def replacing(self, path):
        """A context manager giving a sink (``write(bytes or buffer)``): ``path`` gets the bytes written when
        the block ends, or stays as it was when it raises."""

    @abc.abstractmethod
    def rename(self, source, target) -> None:
        """Atomically make ``target`` name what ``source`` named (only where ``can_rename``)."""

    @abc.abstractmethod
    def remove(self, path) -> None:
        """Delete ``path`` if it exists."""

    @abc.abstractmethod
    def make_directories(self, directory) -> list:
        """Create ``directory`` and its missing parents; the ones created, outermost first."""

    @abc.abstractmethod
    def remove_tree(self, directory) -> None:
        """Delete ``directory`` and everything in it, if it exists."""

    @abc.abstractmethod
    def remove_directory(self, directory) -> None:
        """Remove ``directory`` if it is empty."""

    @abc.abstractmethod
    def sync_directory(self, directory) -> None:
        """Make the renames in ``directory`` durable, where the file system can."""

    @abc.abstractmethod
    def hold_directory(self, directory) -> None:
        """This process's writer lock on ``directory``; CheckpointWriteError when another process holds it."""

    @abc.abstractmethod
    def remove_abandoned(self, directory) -> list:
        """Delete the temporary files killed writers left in ``directory``; their names."""

    @abc.abstractmethod
    def modified(self, path) -> int:
        """When ``path`` was last written, in nanoseconds since the epoch; FileNotFoundError when absent."""

    @abc.abstractmethod
    def identity(self, path):
        """A value equal for the same unchanged file, None where unknown."""


class RangeReader:
    """What every backend's reader shares: ``read`` on top of its ``read_into``, and ``with`` closing it.
    A subclass sets ``path`` and ``size`` and defines ``read_into(offset, buffer)`` and ``close()``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def will_need(self, offset, count) -> None:
        """A hint: bytes ``offset`` to ``offset + count`` are read next (a local file starts fetching them)."""

    def read(self, offset, count) -> bytes:
        """``count`` bytes from ``offset``; CorruptCheckpointError if the file ends first."""
        import numpy as np

        return self.read_into(offset, np.empty(count, dtype=np.uint8)).tobytes()


def size_or_none(backend, path):
    """``backend.size(path)``, or None where nothing is there."""
    try:
        return backend.size(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
