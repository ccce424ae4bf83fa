"""Reading a TensorFlow checkpoint's names, shapes and dtypes into a catalog.

A checkpoint has no graph, so its catalog has no collections and its roles are
guessed from names (see :func:`~subsetsaver.catalog.roles.roles_from_names`). Every
checkpoint opened here has its declared sizes checked first
(:func:`subsetsaver.formats.tf_index.check_declared_sizes`).

Example::

    >>> checkpoint_catalog('train/').record('conv_1/w').shape
    (5, 5, 1, 32)
"""

from __future__ import annotations

import os

from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from ..formats import atomic, npz, tf_state
from ..formats.tf_index import check_declared_sizes
from .records import Catalog, CatalogEntry, value_bytes

_CHECKPOINT_BOOKKEEPING = ("_CHECKPOINTABLE_OBJECT_GRAPH",)


def checkpoint_prefix(path) -> str:
    """The checkpoint prefix behind ``path``: a prefix, a directory (its latest), or a file of it.

    A directory that holds checkpoints but no ``checkpoint`` state file naming one is an
    error that names them, never "no checkpoint".
    """
    path = os.fspath(path)
    if _is_directory(path):
        latest = tf_state.latest_checkpoint(path)
        if latest is None:
            raise unlisted_checkpoints_error(path) or CheckpointNotFoundError(
                f"no checkpoint in directory '{path}' (no 'checkpoint' state file naming one)"
            )
        return latest
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if ".data-" in path.rsplit("/", 1)[-1]:
        path = path[: path.rindex(".data-")]
    if not _exists(path + ".index"):
        raise CheckpointNotFoundError(f"no checkpoint at '{path}' (expected '{path}.index')")
    return path


def unlisted_checkpoints_error(directory):
    """The CheckpointNotFoundError for a directory whose checkpoints no state file names, or None
    when it holds no checkpoint at all."""
    prefixes = tf_state.unlisted_checkpoints(directory)
    if not prefixes:
        return None
    shown = ", ".join(f"'{p}'" for p in prefixes[-3:]) + (f" and {len(prefixes) - 3} more" if len(prefixes) > 3 else "")
    return CheckpointNotFoundError(
        f"directory '{directory}' holds {len(prefixes)} checkpoint{'s' if len(prefixes) > 1 else ''} ({shown}) but "
        f"no 'checkpoint' state file naming the latest; pass a prefix such as '{prefixes[-1]}', or write the "
        "state file with tf.train.update_checkpoint_state"
    )


def _is_directory(path) -> bool:
    if atomic.is_local(path):
        return os.path.isdir(atomic.local_path(path))
    import tensorflow as tf

    return tf.io.gfile.isdir(path)


def _exists(path) -> bool:
    if atomic.is_local(path):
        return os.path.exists(atomic.local_path(path))
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def checkpoint_catalog(path) -> Catalog:
    """Names, shapes and dtypes of a TensorFlow checkpoint; roles guessed from names."""
    prefix = checkpoint_prefix(path)
    reader = open_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    entries = [
        CatalogEntry(
            name=name,
            shape=tuple(shapes[name]),
            dtype=dtypes[name].name,
            nbytes=value_bytes(tuple(shapes[name]), dtypes[name]),
            parts=(name,),
            index=index,
        )
        for index, name in enumerate(sorted(n for n in shapes if n not in _CHECKPOINT_BOOKKEEPING))
    ]
    return Catalog(entries, {}, kind="checkpoint")


def open_checkpoint(prefix):
    """A ``CheckpointReader`` for ``prefix``, or a CorruptCheckpointError that says why not.

    Every tensor's declared size is checked against the bytes the checkpoint stores for it
    (see :func:`check_declared_sizes`): TensorFlow allocates a tensor's declared shape before
    it compares sizes, so an ``.index`` declaring 8 GiB over a 2 MiB ``.data`` file would
    exhaust memory on restore instead of failing.

    >>> open_checkpoint('train/model-9000').get_variable_to_shape_map()['conv_1/w']
    [5, 5, 1, 32]
    """
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as error:
        message = getattr(error, "message", str(error)).strip().splitlines()[0]
        raise CorruptCheckpointError(f"cannot read checkpoint '{prefix}': {message}") from error
    check_declared_sizes(prefix, reader)
    return reader


def npz_catalog(path) -> Catalog:
    """A catalog of a portable file's arrays (names, logical shapes, dtypes; roles guessed from names)."""
    manifest = npz.read_manifest(path)
    entries = []
    for index, entry in enumerate(manifest.arrays):
        shape, dtype, _ = npz.entry_spec(entry)
        entries.append(CatalogEntry(name=entry.name, shape=tuple(shape), dtype=dtype, nbytes=entry.nbytes,
                                    parts=(entry.name,), index=index))
    return Catalog(entries, {}, kind="checkpoint")
