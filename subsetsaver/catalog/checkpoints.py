"""Reading a TensorFlow checkpoint's names, shapes and dtypes into a catalog.

A checkpoint has no graph, so its catalog has no collections. A name-based checkpoint
(``tf.compat.v1.train.Saver``) has its roles guessed from names (see
:func:`~subsetsaver.catalog.roles.roles_from_names`). An object-based one
(``tf.train.Checkpoint``, Keras ``save_weights``) names each variable by the full name
TensorFlow recorded in its object graph (``dense/kernel``, a slot ``Adam/dense/kernel/m``),
or by its object path where it has none or two variables share one (see
:func:`object_checkpoint_names`), and its roles come from that graph
(:func:`~subsetsaver.catalog.roles.roles_from_object_graph`); :func:`read_tensors` reads
it by those names. Every checkpoint opened here has its declared sizes checked first
(:class:`subsetsaver.formats.tf_bundle.BundleReader`).

Example::

    >>> checkpoint_catalog('train/').record('conv_1/w').shape
    (5, 5, 1, 32)
    >>> checkpoint_catalog('keras/weights').record('dense/kernel').object_path
    'layer_with_weights-0/kernel'
"""

from __future__ import annotations

import json
import os

from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from ..formats import npz, safetensors_file, storage, tf_bundle, tf_object_graph, tf_state
from .records import Catalog, CatalogEntry, value_bytes
from .roles import Roles, roles_from_object_graph

_CHECKPOINT_BOOKKEEPING = (tf_object_graph.OBJECT_GRAPH_KEY,)


def checkpoint_prefix(path) -> str:
    """The checkpoint prefix behind ``path``: a prefix, a directory (its latest), or a file of it.

    A directory that holds checkpoints but no ``checkpoint`` state file naming one is an
    error that names them, never "no checkpoint".
    """
    path = os.fspath(path)
    if storage.is_directory(path):
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
    if not storage.exists(path + ".index"):
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
    """Names, shapes and dtypes of a TensorFlow checkpoint, without TensorFlow: a name-based one with
    roles guessed from names, an object-based one named and given roles by its object graph."""
    prefix = checkpoint_prefix(path)
    with _checked_reader(prefix) as reader:
        contents = _contents(reader)
        graph = tf_object_graph.read_object_graph(reader)
    if graph is None:
        entries = [CatalogEntry(name=name, shape=shape, dtype=dtype, nbytes=value_bytes(shape, dtype), parts=(name,),
                                index=index)
                   for index, (name, (shape, dtype)) in enumerate(sorted(contents.items()))]
        return Catalog(entries, {}, kind="checkpoint", checkpoint_kind="name")
    names = object_checkpoint_names(graph, contents)
    entries = []
    for index, key in enumerate(sorted(contents, key=names.__getitem__)):
        shape, dtype = contents[key]
        tensor = graph.tensors.get(key)
        entries.append(CatalogEntry(name=names[key], shape=shape, dtype=dtype, nbytes=value_bytes(shape, dtype),
                                    parts=(names[key],), index=index, key=key,
                                    object_path=tensor.object_path if tensor else None))
    return Catalog(entries, {}, kind="checkpoint", checkpoint_kind="object", object_graph=graph,
                   roles=lambda catalog: roles_from_object_graph(graph, names))


def object_checkpoint_names(graph, keys) -> dict:
    """Key -> catalog name of each of ``keys`` of an object-based checkpoint (``graph``: its
    :class:`~subsetsaver.formats.tf_object_graph.ObjectGraph`): the full name TensorFlow recorded
    (what ``tf.compat.v1.train.Saver`` finds it by); the object path where it recorded none, or
    where its full name is another tensor's too (or another's object path); the key itself for a
    tensor the graph does not name, or when even an object path clashes.

    >>> object_checkpoint_names(graph, ['layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE'])
    {'layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE': 'dense/kernel'}
    """
    keys = list(keys)
    choices = {}  # key -> [(rank, name)]: full name 0, object path 1, key 2; a name repeated is kept once
    for key in keys:
        tensor = graph.tensors.get(key)
        found = [(0, tensor.full_name), (1, tensor.object_path)] if tensor is not None else []
        unique = {}
        for rank, name in found + [(2, key)]:
            if name and name not in unique:
                unique[name] = rank
        choices[key] = [(rank, name) for name, rank in unique.items()]
    level = dict.fromkeys(keys, 0)
    while True:  # in each clash the names of the lowest rank that can move do, towards the keys, which never clash
        holders = {}
        for key in keys:
            holders.setdefault(choices[key][level[key]][1], []).append(key)
        moving = []
        for group in holders.values():
            movable = [key for key in group if len(group) > 1 and level[key] < len(choices[key]) - 1]
            if movable:
                lowest = min(choices[key][level[key]][0] for key in movable)
                moving += [key for key in movable if choices[key][level[key]][0] == lowest]
        if not moving:
            return {key: choices[key][level[key]][1] for key in keys}
        for key in moving:
            level[key] += 1


def checkpoint_contents(prefix) -> dict:
    """``{name: (shape tuple, dtype name)}`` of the TensorFlow checkpoint ``prefix``, as
    ``tf.train.load_checkpoint`` lists it (a partitioned variable once, with its full shape), after
    the whole index and the data files' sizes are validated; read without TensorFlow and without
    reading a value. The names are the checkpoint's keys (an object-based checkpoint's too; its
    catalog names them otherwise, see :func:`checkpoint_catalog`)."""
    with _checked_reader(prefix) as reader:
        return _contents(reader)


def checkpoint_kind(path) -> str:
    """'object' for a TensorFlow object-based checkpoint (``tf.train.Checkpoint``, Keras
    ``save_weights``), 'name' for a name-based one (``Saver``), else :func:`file_format`'s answer.
    Reads the ``.index`` of a TensorFlow checkpoint, no value.

    >>> checkpoint_kind('keras/weights'), checkpoint_kind('train/model-9000'), checkpoint_kind('m.npz')
    ('object', 'name', 'npz')
    """
    found = file_format(path)
    if found != "name":
        return found
    with tf_bundle.BundleReader(checkpoint_prefix(path), require_data_files=False) as reader:
        return "object" if tf_object_graph.is_object_based(reader) else "name"


def _checked_reader(prefix):
    """An open BundleReader of ``prefix`` whose data files all exist: checked after the whole index,
    so that a damaged index is named before a missing file."""
    reader = tf_bundle.BundleReader(prefix, require_data_files=False)
    missing = [path for path in (tf_bundle.data_path(prefix, shard, reader.num_shards)
                                 for shard in range(reader.num_shards)) if not storage.exists(path)]
    if missing:
        reader.close()
        raise CorruptCheckpointError(
            f"checkpoint '{prefix}' is incomplete: {', '.join(missing)} missing; copy every file of the checkpoint"
        )
    return reader


def _contents(reader):
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
    return Catalog(entries, {}, kind="checkpoint", checkpoint_kind="npz")


def safetensors_catalog(path) -> Catalog:
    """A catalog of a safetensors file's tensors, read from its header alone. Roles come from the
    file's ``roles`` metadata when subsetsaver wrote it (the roles of the source it was converted
    from), else they are guessed from names."""
    found, metadata = safetensors_file.specs(path)
    entries = [CatalogEntry(name=name, shape=shape, dtype=dtype, nbytes=value_bytes(shape, dtype), parts=(name,),
                            index=index)
               for index, (name, (shape, dtype)) in enumerate(found.items())]
    recorded = _recorded_roles(metadata, frozenset(found))
    return Catalog(entries, {}, kind="checkpoint", checkpoint_kind="safetensors",
                   roles=None if recorded is None else (lambda catalog: recorded))


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
    An object-based checkpoint is read by its catalog names (recorded full names), not its keys.

    >>> dict(read_tensors('train/model-9000', ['global_step']))
    {'global_step': array(9000)}
    """
    source_format = file_format(path)
    if source_format == "name":
        with tf_bundle.BundleReader(path) as reader:
            keys = _object_keys(reader)
            for name in names:
                if keys is not None and name not in keys:
                    raise KeyError(f"checkpoint '{reader.prefix}' holds no tensor '{name}'")
                yield name, reader.read(name if keys is None else keys[name])
    elif source_format == "npz":
        with npz.Archive(path) as archive:
            for name in names:
                yield name, archive.load([name])[name]
    else:
        yield from safetensors_file.read(path, names)


def _object_keys(reader):
    """Catalog name -> key of an object-based checkpoint's tensors; None for a name-based one."""
    graph = tf_object_graph.read_object_graph(reader)
    if graph is None:
        return None
    names = object_checkpoint_names(graph, [name for name in reader.names if name not in _CHECKPOINT_BOOKKEEPING])
    return {name: key for key, name in names.items()}


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
