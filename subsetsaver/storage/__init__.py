"""The file layer: every question the library asks of files, for local paths and URLs alike.

Each path goes to one backend by its scheme: local paths (no scheme, or ``file://``) to
:mod:`~subsetsaver.storage.local` (``pread``, atomic durable writes, a ``flock`` per
directory); bucket URLs (``gs://``, ``s3://``, ``memory://`` and whatever else fsspec
serves) to :mod:`~subsetsaver.storage.remote`; schemes only TensorFlow serves
(``ram://``) to :mod:`~subsetsaver.storage.gfile`. Nothing else in the library opens,
lists, renames or removes a checkpoint file.

Every backend answers the same questions, the contract of
:class:`~subsetsaver.storage.contract.StorageBackend`: ``exists``, ``is_directory``,
``list_directory``, ``size``, ``read_bytes``, ``open_reader`` (ranged reads: ``read``,
``read_into``), ``replacing`` (a file appears whole or not at all), ``remove``,
``make_directories``, ``hold_directory`` (one writer per directory), ``remove_abandoned``
(what killed writers left) and ``can_rename`` (object stores cannot: they publish data first,
the commit object last). Backends are chosen by scheme, from :data:`SCHEMES`.

Example::

    with replacing('out/model.npz') as sink:
        sink.write(b'PK...')
    exists('out/model.npz'), size('out/model.npz'), join('gs://bucket/run', 'model.index')
    # (True, 6, 'gs://bucket/run/model.index')
"""

from __future__ import annotations

import os
import posixpath

from ..errors import RemoteStorageError, clipped
from ..lazy_exports import load
from .contract import RangeReader, StorageBackend
from .direct_io import reading_back, reporting_landed, written_identity
from .local import finish_background_work, fsync_directory, local_path, temporary_name

__all__ = ["SCHEMES", "RangeReader", "StorageBackend", "backend", "can_rename", "exists", "finish_background_work", "fsync_directory", "hold_directory",
           "identity", "is_directory", "modified", "is_local", "join", "list_directory", "local_path", "make_directories",
           "open_reader", "parent", "read_bytes", "reading_back", "remove", "remove_abandoned", "remove_directory", "remove_tree", "rename",
           "replacing", "reporting_landed", "scheme", "size", "sizes", "sync_directory", "temporary_name", "write_bytes",
           "written_identity"]



# URL scheme -> (module, name) of the backend that serves its paths ('': local paths, ``file://`` included).
# A new backend is one module (a :class:`~subsetsaver.storage.contract.StorageBackend`) and one line here.
SCHEMES = {
    "": (".local", "LOCAL"),
    "ram": (".gfile", "GFILE"),
}
FSSPEC = ".remote"  # any other scheme fsspec serves: buckets (gs://, s3://), memory://, ...
OTHER_SCHEMES = (".gfile", "GFILE")  # the rest: TensorFlow's file systems


def scheme(path) -> str:
    """``'gs'`` for ``gs://bucket/x``; ``''`` for a local path (``file://`` included)."""
    path = os.fspath(path)
    head, separator, _ = path.partition("://")
    return "" if not separator or head == "file" else head


def is_local(path) -> bool:
    """Whether ``path`` is on the local file system (no ``scheme://``, or ``file://``)."""
    return scheme(path) == ""


def backend(path):
    """The backend that serves ``path``: its scheme's in :data:`SCHEMES`, else fsspec's where fsspec serves the
    scheme, else TensorFlow's gfile. Each loads when a path of it is first used (a local command needs none
    but the local one)."""
    protocol = scheme(path)
    if protocol in SCHEMES:
        return load(__name__, *SCHEMES[protocol])
    fsspec_backends = load(__name__, FSSPEC)
    if fsspec_backends.serves(protocol):
        return fsspec_backends.backend_for(protocol)
    if not load(__name__, OTHER_SCHEMES[0]).tensorflow_serves(protocol):
        raise RemoteStorageError(f"no file system serves '{clipped(os.fspath(path))}'", os.fspath(path),
                                 load(__name__, ".remote_errors").install_fix(protocol))
    return load(__name__, *OTHER_SCHEMES)


def join(directory, name) -> str:
    """``name`` inside ``directory``, with ``/`` for URLs."""
    directory = os.fspath(directory)
    if is_local(directory):
        return os.path.join(directory, name)
    return posixpath.join(directory, name)


def parent(path) -> str:
    """The directory holding ``path`` (``''`` for a bare local name)."""
    path = os.fspath(path)
    if is_local(path):
        return os.path.dirname(path)
    head, _, rest = path.partition("://")
    directory = posixpath.dirname(rest.rstrip("/"))
    return f"{head}://{directory}" if directory else f"{head}://"


def exists(path) -> bool:
    return backend(path).exists(os.fspath(path))


def is_directory(path) -> bool:
    return backend(path).is_directory(os.fspath(path))


def list_directory(directory) -> list:
    """The names in ``directory``, sorted; OSError when it cannot be listed."""
    return backend(directory).list_directory(os.fspath(directory))


def size(path) -> int:
    """Bytes of the file at ``path``; FileNotFoundError when there is none."""
    return backend(path).size(os.fspath(path))


def sizes(paths) -> dict:
    """Bytes of each file of ``paths`` (None where there is none), asked together where the store answers so in
    about one round trip instead of one each (a checkpoint's data files in a bucket)."""
    by_backend = {}
    for path in map(os.fspath, paths):
        by_backend.setdefault(backend(path), []).append(path)
    found = {}
    for serving, asked in by_backend.items():
        found.update(serving.sizes(asked))
    return found


def read_bytes(path, limit=None) -> bytes:
    """The bytes of ``path`` (at most ``limit``); FileNotFoundError when there is no such file."""
    return backend(path).read_bytes(os.fspath(path), limit)


def open_reader(path):
    """A reader of ``path`` for ranged reads: ``.size``, ``.read(offset, count)``, ``.read_into(offset, buffer)``,
    ``.close()``; a context manager. FileNotFoundError when there is no such file."""
    return backend(path).open_reader(os.fspath(path))


def replacing(path):
    """``with replacing(path) as sink: sink.write(data)``: ``path`` gets the bytes written, or stays as it was.

    ``sink.write`` takes bytes or anything with the buffer protocol. A missing directory is a
    :class:`~subsetsaver.errors.CheckpointNotFoundError`.
    """
    return backend(path).replacing(os.fspath(path))


def write_bytes(path, data) -> None:
    """Replace ``path`` with ``data`` atomically.

    write_bytes('ckpt/checkpoint_npz.json', b'{}\\n')
    """
    with replacing(path) as sink:
        sink.write(memoryview(data))


def rename(source, target) -> None:
    """Atomically make ``target`` name what ``source`` named (only where ``can_rename(target)``)."""
    backend(target).rename(os.fspath(source), os.fspath(target))


def can_rename(path) -> bool:
    """Whether ``path``'s file system renames atomically (object stores do not)."""
    return backend(path).can_rename


def remove(path) -> None:
    """Delete ``path`` if it exists."""
    backend(path).remove(os.fspath(path))


def make_directories(directory) -> list:
    """Create ``directory`` and its missing parents; returns those created, outermost first
    (for :func:`remove_directory` to undo when a command fails)."""
    return backend(directory).make_directories(os.fspath(directory)) if directory else []


def remove_tree(directory) -> None:
    """Delete ``directory`` and everything in it, if it exists."""
    backend(directory).remove_tree(os.fspath(directory))


def remove_directory(directory) -> None:
    """Remove ``directory`` if it is empty."""
    backend(directory).remove_directory(os.fspath(directory))


def sync_directory(directory) -> None:
    """Make the renames in ``directory`` durable (where the file system can)."""
    backend(directory or ".").sync_directory(os.fspath(directory) or ".")


def hold_directory(directory) -> None:
    """This process's writer lock on ``directory``;
    :class:`~subsetsaver.errors.CheckpointWriteError` when another process holds it."""
    backend(directory or ".").hold_directory(os.fspath(directory) or ".")


def remove_abandoned(directory) -> list:
    """Delete the temporary files that killed writers left in ``directory``; returns their names."""
    return backend(directory or ".").remove_abandoned(os.fspath(directory) or ".")


def modified(path) -> int:
    """When ``path`` was last written, in nanoseconds since the epoch; FileNotFoundError when absent."""
    return backend(path).modified(os.fspath(path))


def identity(path):
    """A value equal for the same unchanged file (device, inode, size, times), None where unknown."""
    return backend(path).identity(os.fspath(path))

