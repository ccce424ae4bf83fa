"""Reading a TensorFlow checkpoint's names, shapes and dtypes into a catalog.

A checkpoint has no graph, so its catalog has no collections and its roles are
guessed from names (see :func:`~subsetsaver.catalog.roles.roles_from_names`). Every
checkpoint opened here has its declared sizes checked first
(:class:`subsetsaver.formats.tf_bundle.BundleReader`).

Example::

    >>> checkpoint_catalog('train/').record('conv_1/w').shape
    (5, 5, 1, 32)
"""

from __future__ import annotations

import json
import os

from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from ..formats import npz, paths, safetensors_file, tf_bundle, tf_state
from .records import Catalog, CatalogEntry, value_bytes
from .roles import Roles

_CHECKPOINT_BOOKKEEPING = ("_CHECKPOINTABLE_OBJECT_GRAPH",)


def checkpoint_prefix(path) -> str:
    """The checkpoint prefix behind ``path``: a prefix, a directory (its latest), or a file of it.

    A directory that holds checkpoints but no ``checkpoint`` state file naming one is an
    error that names them, never "no checkpoint".
    """
    path = os.fspath(path)
    if paths.is_directory(path):
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
    if not paths.exists(path + ".index"):
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


def checkpoint_catalog(path) -> Catalog:
    """Names, shapes and dtypes of a TensorFlow checkpoint; roles guessed from names. No TensorFlow."""
    contents = checkpoint_contents(checkpoint_prefix(path))
    entries = [
        CatalogEntry(name=name, shape=shape, dtype=dtype, nbytes=value_bytes(shape, dtype), parts=(name,), index=index)
        for index, (name, (shape, dtype)) in enumerate(sorted(contents.items()))
    ]
    return Catalog(entries, {}, kind="checkpoint")


def checkpoint_contents(prefix) -> dict:
    """``{name: (shape tuple, dtype name)}`` of the TensorFlow checkpoint ``prefix``, as
    ``tf.train.load_checkpoint`` lists it (a partitioned variable once, with its full shape), after
    the whole index and the data files' sizes are validated; read without TensorFlow and without
    reading a value."""
    # Data files are checked after the whole index: a damaged index is named before a missing file.
    with tf_bundle.BundleReader(prefix, require_data_files=False) as reader:
        missing = [path for path in (tf_bundle.data_path(prefix, shard, reader.num_shards)
                                     for shard in range(reader.num_shards)) if not paths.exists(path)]
        if missing:
            raise CorruptCheckpointError(
                f"checkpoint '{prefix}' is incomplete: {', '.join(missing)} missing; copy every file of the checkpoint"
            )
        return {name: (tuple(spec.shape), spec.dtype) for name, spec in reader.specs.items()
                if name not in _CHECKPOINT_BOOKKEEPING}


def npz_catalog(path) -> Catalog:
    """A catalog of a portable file's arrays (names, logical shapes, dtypes; roles guessed from names)."""
    manifest = npz.read_manifest(path)
    entries = []
    for index, entry in enumerate(manifest.arrays):
        shape, dtype, _ = npz.entry_spec(entry)
        entries.append(CatalogEntry(name=entry.name, shape=tuple(shape), dtype=dtype, nbytes=entry.nbytes,
                                    parts=(entry.name,), index=index))
    return Catalog(entries, {}, kind="checkpoint")


def safetensors_catalog(path) -> Catalog:
    """A catalog of a safetensors file's tensors, read from its header alone. Roles come from the
    file's ``roles`` metadata when subsetsaver wrote it (the roles of the source it was converted
    from), else they are guessed from names."""
    found, metadata = safetensors_file.specs(path)
    entries = [CatalogEntry(name=name, shape=shape, dtype=dtype, nbytes=value_bytes(shape, dtype), parts=(name,),
                            index=index)
               for index, (name, (shape, dtype)) in enumerate(found.items())]
    recorded = _recorded_roles(metadata, frozenset(found))
    return Catalog(entries, {}, kind="checkpoint", roles=None if recorded is None else (lambda catalog: recorded))


def file_format(path) -> str:
    """'npz', 'safetensors' or 'name' (a TensorFlow checkpoint prefix, file of it, or directory), by name."""
    path = os.fspath(path)
    if path.endswith(".npz"):
        return "npz"
    if path.endswith(safetensors_file.SUFFIX):
        return "safetensors"
    return "name"


def read_tensors(path, names):
    """Yield ``(name, array)`` for each of ``names`` (catalog names) of the checkpoint file ``path``
    (any format :func:`file_catalog` reads; a TensorFlow checkpoint by its prefix), one at a time.

    >>> dict(read_tensors('train/model-9000', ['global_step']))
    {'global_step': array(9000)}
    """
    source_format = file_format(path)
    if source_format == "name":
        with tf_bundle.BundleReader(path) as reader:
            for name in names:
                yield name, reader.read(name)
    elif source_format == "npz":
        with npz.Archive(path) as archive:
            for name in names:
                yield name, archive.load([name])[name]
    else:
        yield from safetensors_file.read(path, names)


def file_catalog(path) -> Catalog:
    """The catalog of a checkpoint file of any format subsetsaver reads: a TensorFlow checkpoint
    (prefix, file of it or directory), a portable ``.npz``, or a ``.safetensors`` file."""
    source_format = file_format(path)
    if source_format == "npz":
        return npz_catalog(path)
    if source_format == "safetensors":
        return safetensors_catalog(path)
    return checkpoint_catalog(path)


def _recorded_roles(metadata, names):
    try:
        recorded = json.loads(metadata.get("roles", "null"))
    except ValueError:
        return None
    if not isinstance(recorded, dict):
        return None
    by_role = {}
    for name, roles in recorded.items():
        if name in names and isinstance(roles, list):
            for role in roles:
                if isinstance(role, str):
                    by_role.setdefault(role, set()).add(name)
    return Roles(by_role={role: frozenset(members) for role, members in by_role.items()}, slot_of={}, average_of={})
