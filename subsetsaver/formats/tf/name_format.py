"""TensorFlow name-based checkpoints (what ``tf.compat.v1.train.Saver`` writes) in the format registry.

A checkpoint is a prefix: ``PREFIX.index`` and its data shards, read and written by
:mod:`~subsetsaver.formats.tf.bundle` without TensorFlow; a directory stands for the
latest checkpoint its ``checkpoint`` state file names.

Example::

    NAME.recognises('train/model-9000'), NAME.resolve('train/')
    # (True, 'train/model-9000')
"""

from __future__ import annotations

import os

from ... import storage
from ...errors import CheckpointNotFoundError, CorruptCheckpointError
from ..format_protocol import CheckpointFormat, Contents, StoredBytes, TensorInfo
from . import bundle, checkpoint_state, object_graph

BOOKKEEPING = (object_graph.OBJECT_GRAPH_KEY,)  # tensors that are the file's own, not a variable's


def checkpoint_prefix(path) -> str:
    """The checkpoint prefix behind ``path``: a prefix, a directory (its latest), or a file of it.

    A directory that holds checkpoints but no ``checkpoint`` state file naming one is an
    error that names them, never "no checkpoint".
    """
    path = os.fspath(path)
    if storage.is_directory(path):
        latest = checkpoint_state.latest_checkpoint(path)
        if latest is None:
            raise unlisted_checkpoints_error(path) or CheckpointNotFoundError(
                f"no checkpoint in directory '{path}' (no 'checkpoint' state file naming one)", path=path)
        return latest
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if ".data-" in path.rsplit("/", 1)[-1]:
        path = path[: path.rindex(".data-")]
    if not storage.exists(path + ".index"):
        raise CheckpointNotFoundError(f"no checkpoint at '{path}' (expected '{path}.index')", path=path)
    return path


def unlisted_checkpoints_error(directory):
    """The CheckpointNotFoundError for a directory whose checkpoints no state file names, or None
    when it holds no checkpoint at all."""
    prefixes = checkpoint_state.unlisted_checkpoints(directory)
    if not prefixes:
        return None
    shown = ", ".join(f"'{p}'" for p in prefixes[-3:]) + (f" and {len(prefixes) - 3} more" if len(prefixes) > 3 else "")
    return CheckpointNotFoundError(
        f"directory '{directory}' holds {len(prefixes)} checkpoint{'s' if len(prefixes) > 1 else ''} ({shown}) but "
        f"no 'checkpoint' state file naming the latest; pass a prefix such as '{prefixes[-1]}', or write the "
        "state file with tf.train.update_checkpoint_state", path=directory)


def is_bundle(path) -> bool:
    """Whether ``path`` names a TensorFlow checkpoint (a prefix, a file of one, or a directory of them)."""
    try:
        checkpoint_prefix(path)
    except CheckpointNotFoundError:
        return False
    return True


def open_checked(prefix):
    """An open BundleReader of ``prefix`` whose data files all exist: checked after the whole index,
    so that a damaged index is named before a missing file."""
    reader = bundle.BundleReader(prefix, require_data_files=False)
    missing = [path for path in (bundle.data_path(prefix, shard, reader.num_shards)
                                 for shard in reader.data_shards())
               if not storage.exists(path)]
    if missing:
        reader.close()
        raise CorruptCheckpointError(f"checkpoint '{prefix}' is incomplete: {', '.join(missing[:3])} missing; copy "
                                     "every file of the checkpoint", path=prefix)
    return reader


class BundleFormat(CheckpointFormat):
    """What name-based and object-based checkpoints share: the bundle's files and its writer."""

    holds_parts = True
    keeps_state_file = True  # the directory's ``checkpoint`` file names the latest

    def resolve(self, path) -> str:
        return checkpoint_prefix(path)

    def files(self, path) -> list:
        return bundle.bundle_files(path)

    def commit_file(self, path) -> str:
        return bundle.index_path(path)

    def name_latest(self, path) -> None:
        checkpoint_state.name_latest(path)

    def streams(self, path):
        prefix = checkpoint_prefix(path)
        if not storage.is_local(prefix):
            return None
        reader = bundle.BundleReader(prefix)
        try:
            return _Streams(reader, self._keys(reader))
        except BaseException:
            reader.close()
            raise

    def _keys(self, reader) -> dict | None:
        """Name -> the key the bundle stores it under, or None where they are the same."""
        return None

    def _is_object_based(self, path) -> bool | None:
        if not is_bundle(path):
            return None
        with bundle.BundleReader(checkpoint_prefix(path), require_data_files=False) as reader:
            return object_graph.is_object_based(reader)


class NameBasedFormat(BundleFormat):
    name = "name"
    description = "TensorFlow name-based (tf.compat.v1.train.Saver)"
    takes_tf1_names = True
    locates_stored_bytes = True

    def recognises(self, path) -> bool:
        return self._is_object_based(path) is False

    def contents(self, path) -> Contents:
        prefix = checkpoint_prefix(path)
        with open_checked(prefix) as reader:
            tensors = tuple(TensorInfo(name, tuple(spec.shape), spec.dtype) for name, spec in sorted(reader.specs.items())
                            if name not in BOOKKEEPING)
        return Contents(prefix, self.name, tensors)

    def read(self, path, names):
        with bundle.BundleReader(checkpoint_prefix(path)) as reader:
            yield from reader.read_many(names)  # from a bucket: several tensors in flight

    def stored_bytes(self, path) -> dict:
        with bundle.BundleReader(checkpoint_prefix(path), require_data_files=False) as reader:
            return {name: StoredBytes(*place) for name, place in reader.stored_bytes().items()
                    if name not in BOOKKEEPING}

    def part_reader(self, path):
        """A :class:`~subsetsaver.formats.tf.bundle.BundleReader` of the checkpoint, to read a partitioned
        tensor part by part (``parts``, ``read_part``) rather than assembled; close it, or use ``with``."""
        return bundle.BundleReader(checkpoint_prefix(path))

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        num_shards = bundle.shard_count_for(final)
        with bundle.BundleWriter(staged, num_shards=num_shards, publish=False) as writer:
            for item in tensors:
                if len(item) == 3:
                    name, array, (full_shape, offset) = item
                    writer.add_slice(name, full_shape, offset, array)
                    del array  # else held while the next part is made: three parts in memory, not two
                else:
                    writer.add(*item)
                del item
        return {bundle.data_path(final, shard, num_shards): bundle.data_path(staged, shard, num_shards)
                for shard in range(num_shards)} | {bundle.index_path(final): bundle.index_path(staged)}


class _Streams:
    """A bundle's tensors as streams of verified pieces, by the names its format reads them by."""

    def __init__(self, reader, keys):
        self._reader, self._keys = reader, keys

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._reader.close()
        return False

    def _key(self, name):
        if self._keys is None:
            return name
        if name not in self._keys:
            raise KeyError(f"checkpoint '{self._reader.prefix}' holds no tensor '{name}'")
        return self._keys[name]

    def streamable(self, name) -> bool:
        return self._reader.streamable(self._key(name))

    def pieces(self, name, buffers):
        return self._reader.pieces(self._key(name), buffers)

    def read(self, name):
        return self._reader.read(self._key(name))


NAME = NameBasedFormat()
