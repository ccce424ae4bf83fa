"""The bytes of a portable checkpoint being read, through the file layer (local or remote alike).

Files up to 16 MiB are read in one piece, so every header check is a slice; larger ones
are read at the offsets asked for (``read_into`` from several threads at once), and
``zipfile`` parses their directory through a seekable stream that reads only what it
asks for: the central directory, not the data.

Example::

    source = open_source('/ckpt/model.npz')
    source.read(0, 4), source.size
    # (b'PK\\x03\\x04', 3208)
    source.close()
"""

from __future__ import annotations

import io
import os

from ... import storage
from ...errors import CheckpointNotFoundError, CorruptCheckpointError

_READ_WHOLE = 16 << 20  # files up to this size are read in one piece


def open_source(path):
    """A :class:`Source` of the portable checkpoint file at ``path``."""
    return Source(path)


class Source:
    """A checkpoint file: ``read``/``read_into``/``span`` at any offset; ``identity`` (device, inode,
    size, times, where the file system tells) tells a later open whether it is still the same file."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            self._reader = storage.open_reader(self.path)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise CheckpointNotFoundError(f"no portable checkpoint at '{path}'", path=self.path) from error
        except (IsADirectoryError, CorruptCheckpointError) as error:
            raise CheckpointNotFoundError(f"'{path}' is not a portable checkpoint file (a directory, or not a "
                                          "regular file)", path=self.path) from error
        self.size = self._reader.size
        self.identity = storage.identity(self.path)
        self._whole = None
        if self.size <= _READ_WHOLE:  # small files: one read, then every header check is a slice
            import numpy as np

            self._whole = self._reader.read_into(0, np.empty(self.size, dtype=np.uint8))

    def directory_stream(self):
        """A seekable binary stream of the file, for ``zipfile`` to parse its directory."""
        if self._whole is not None:
            return io.BytesIO(self._whole.tobytes())
        return io.BufferedReader(_ReaderStream(self._reader), buffer_size=1 << 16)

    def read(self, offset, count) -> bytes:
        if self._whole is not None:
            return self._whole[offset:offset + count].tobytes()
        return self._reader.read(offset, count)

    def read_into(self, offset, buffer):
        """Fill ``buffer`` (a writable uint8 array) with the file's bytes from ``offset``; returns it."""
        if self._whole is not None:
            buffer[...] = self._whole[offset:offset + buffer.nbytes]  # numpy uint8 buffers only
            return buffer
        return self._reader.read_into(offset, buffer)

    def span(self, start, end):
        """Bytes ``start:end`` of the file as a uint8 array (a view when the file is in memory)."""
        if self._whole is not None:
            return self._whole[start:end]
        import numpy as np

        return self._reader.read_into(start, np.empty(end - start, dtype=np.uint8))

    def close(self):
        self._reader.close()


class _ReaderStream(io.RawIOBase):
    """A read-only, seekable stream over a file layer reader (its own position; the reader keeps none)."""

    def __init__(self, reader):
        self._reader, self._position = reader, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._position

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._reader.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._position = base + offset
        return self._position

    def readinto(self, buffer):
        count = max(0, min(len(buffer), self._reader.size - self._position))
        if count:
            self._reader.read_into(self._position, memoryview(buffer).cast("B")[:count])
            self._position += count
        return count

    def close(self):  # the Source closes the reader
        super().close()
