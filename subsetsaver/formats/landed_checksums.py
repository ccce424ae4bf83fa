"""The CRC32C of what a writer's files hold on the disk, taken while their bytes land.

Inside :func:`~subsetsaver.storage.reporting_landed`, every stage of a file written past the page
cache is read back from the disk as soon as it is written (:mod:`~subsetsaver.storage.direct_io`).
:class:`LandedChecksums` keeps the CRC32C of each write's bytes as the disk gave them back. The one
writer then checks a tensor that one write stored by that checksum, taken while later tensors still
arrived, instead of reading the file again once the last byte is written
(:func:`~subsetsaver.formats.checkpoint_writer.verify`).

Example::

    checksums = LandedChecksums()
    with storage.reporting_landed(checksums):
        safetensors.write('/out/model.safetensors', [('w', w)], specs=[('w', w.shape, 'float32')])
    checksums.checksum('/out/model.safetensors', 88, w.nbytes)   # None where it must be read to be checked
"""

from __future__ import annotations

import os
import threading

from .. import storage
from .wire.crc32c import crc32c


class LandedChecksums:
    """The listener :func:`~subsetsaver.storage.reporting_landed` reports to; :meth:`checksum` answers."""

    def __init__(self):
        self._files = {}
        self._lock = threading.Lock()

    def segment(self, path, offset, length) -> None:
        with self._lock:
            self._files.setdefault(_key(path), _LandedFile()).segments.append([offset, length, 0])

    def landed(self, path, offset, view) -> None:
        with self._lock:
            landed_file = self._files.get(_key(path))
        if landed_file is not None:
            landed_file.take(offset, view)

    def finished(self, path, identity) -> None:
        with self._lock:
            landed_file = self._files.get(_key(path))
        if landed_file is not None:
            landed_file.finish(identity)

    def abandoned(self, path) -> None:
        with self._lock:
            self._files.pop(_key(path), None)

    def checksum(self, path, offset, length) -> int | None:
        """The CRC32C of the ``length`` bytes at ``offset`` of ``path`` as the disk gave them back, where one
        write put exactly those bytes there and the file is unchanged since; else None (read them to check)."""
        with self._lock:
            landed_file = self._files.get(_key(path))
        if landed_file is None or landed_file.identity is None:
            return None
        if storage.written_identity(storage.local_path(os.fspath(path))) != landed_file.identity:
            return None
        return landed_file.by_place.get((offset, length))


class _LandedFile:
    """The writes of one file (``[offset, length, CRC32C so far]``, in order) and how far it was read back."""

    def __init__(self):
        self.segments = []
        self.next = 0  # the first write whose bytes have not all come back
        self.reached = 0  # bytes read back so far, from the start
        self.broken = False
        self.identity = None
        self.by_place = {}

    def take(self, offset, view):
        """Extend the checksums of the writes that ``view`` (the bytes from ``offset``, read back) covers."""
        if offset != self.reached:
            self.broken = True
        if self.broken:
            return
        end = offset + len(view)
        while self.next < len(self.segments):
            segment = self.segments[self.next]
            start, stop = segment[0], segment[0] + segment[1]
            low, high = max(offset, start), min(end, stop)
            if low < high:
                segment[2] = crc32c(view[low - offset:high - offset], segment[2])
            if stop > end:
                break
            self.next += 1
        self.reached = end

    def finish(self, identity):
        if self.broken or self.next != len(self.segments) or identity[2] != self.reached:
            return
        self.by_place = {(start, length): checksum for start, length, checksum in self.segments}
        self.identity = identity


def _key(path) -> str:
    return os.path.abspath(storage.local_path(os.fspath(path)))
