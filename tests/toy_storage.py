"""A storage backend for tests only: files in a dict, for ``toy://`` URLs.

It exists to show that a backend is one module behind the storage contract: with one line in
``subsetsaver.storage.SCHEMES`` (``"toy": ("toy_storage", "TOY")``) every file function serves it.
"""

import contextlib
import io
import time

import subsetsaver as ss
from subsetsaver.storage import RangeReader, StorageBackend


class ToyFiles(StorageBackend):
    can_rename = True

    def __init__(self):
        self.files = {}  # URL -> (bytes, when written in nanoseconds)

    def _under(self, directory):
        return directory.rstrip("/") + "/"

    def exists(self, path) -> bool:
        return path in self.files or self.is_directory(path)

    def is_directory(self, path) -> bool:
        return any(name.startswith(self._under(path)) for name in self.files)

    def list_directory(self, directory) -> list:
        names = {name[len(self._under(directory)):].split("/", 1)[0] for name in self.files
                 if name.startswith(self._under(directory))}
        if not names:
            raise FileNotFoundError(directory)
        return sorted(names)

    def size(self, path) -> int:
        return len(self.read_bytes(path))

    def read_bytes(self, path, limit=None) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path][0][:limit]

    def open_reader(self, path):
        return ToyReader(path, self.read_bytes(path))

    @contextlib.contextmanager
    def replacing(self, path):
        sink = io.BytesIO()
        yield sink
        self.files[path] = (sink.getvalue(), time.time_ns())

    def rename(self, source, target) -> None:
        self.files[target] = self.files.pop(source)

    def remove(self, path) -> None:
        self.files.pop(path, None)

    def make_directories(self, directory) -> list:
        return []

    def remove_tree(self, directory) -> None:
        for name in [name for name in self.files if name.startswith(self._under(directory))]:
            del self.files[name]

    def remove_directory(self, directory) -> None:
        pass

    def sync_directory(self, directory) -> None:
        pass

    def hold_directory(self, directory) -> None:
        pass

    def remove_abandoned(self, directory) -> list:
        return []

    def modified(self, path) -> int:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path][1]

    def identity(self, path):
        return None


class ToyReader(RangeReader):
    def __init__(self, path, data):
        self.path, self.size, self._data = path, len(data), data

    def read_into(self, offset, buffer):
        view = memoryview(buffer).cast("B")
        piece = self._data[offset:offset + len(view)]
        if len(piece) < len(view):
            raise ss.CorruptCheckpointError(f"'{self.path}' ended early")
        view[:] = piece
        return buffer

    def close(self):
        pass


TOY = ToyFiles()
