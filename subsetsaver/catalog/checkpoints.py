"""Reading any checkpoint file's names, shapes and dtypes into a catalog, through the format registry.

A checkpoint has no graph, so its catalog has no collections. Its format
(:mod:`subsetsaver.formats.registry`) lists its tensors; roles come from what the file
records: an object-based checkpoint's object graph
(:func:`~subsetsaver.catalog.roles.roles_from_object_graph`), a subsetsaver safetensors
file's ``roles`` metadata, else the names
(:func:`~subsetsaver.catalog.roles.roles_from_names`). :func:`read_tensors` reads values by
catalog name. Every checkpoint opened here has its declared sizes checked first.

Example::

    checkpoint_catalog('train/').record('conv_1/w').shape
    # (5, 5, 1, 32)
    file_catalog('keras/weights').record('dense/kernel').object_path
    # 'layer_with_weights-0/kernel'
"""

from __future__ import annotations

import os

from ..formats import registry
from ..formats.tf import name_format, object_format
from .records import Catalog, CatalogEntry, value_bytes
from .roles import Roles, roles_from_object_graph

# Answered by the formats room; the catalog passes them on to its own users.
checkpoint_prefix = name_format.checkpoint_prefix
object_checkpoint_names = object_format.object_checkpoint_names
unlisted_checkpoints_error = name_format.unlisted_checkpoints_error

__all__ = ["checkpoint_catalog", "checkpoint_contents", "checkpoint_kind", "checkpoint_prefix", "file_catalog",
           "file_format", "object_checkpoint_names", "read_tensors", "source_path", "unlisted_checkpoints_error"]


def file_catalog(path) -> Catalog:
    """The catalog of a checkpoint file of any registered format: a TensorFlow checkpoint (prefix,
    file of it or directory), a portable ``.npz``, a ``.safetensors`` file, ..."""
    checkpoint_format = registry.format_of(path)
    contents = checkpoint_format.contents(checkpoint_format.resolve(path))
    entries = [CatalogEntry(name=info.name, shape=info.shape, dtype=info.dtype,
                            nbytes=value_bytes(info.shape, info.dtype), parts=(info.name,), index=index, key=info.key,
                            object_path=info.object_path)
               for index, info in enumerate(contents.tensors)]
    roles = None
    if contents.object_graph is not None:
        graph, names = contents.object_graph, {info.key: info.name for info in contents.tensors}
        roles = lambda catalog: roles_from_object_graph(graph, names)  # noqa: E731
    elif contents.recorded_roles is not None:
        recorded = Roles(by_role=contents.recorded_roles, slot_of={}, average_of={})
        roles = lambda catalog: recorded  # noqa: E731
    return Catalog(entries, {}, kind="checkpoint", checkpoint_kind=checkpoint_format.name,
                   object_graph=contents.object_graph, roles=roles)


def checkpoint_catalog(path) -> Catalog:
    """Names, shapes and dtypes of a TensorFlow checkpoint, without TensorFlow (see :func:`file_catalog`)."""
    return file_catalog(checkpoint_prefix(path))


def checkpoint_contents(prefix) -> dict:
    """``{name: (shape tuple, dtype name)}`` of the TensorFlow checkpoint ``prefix``, as
    ``tf.train.load_checkpoint`` lists it (a partitioned variable once, with its full shape), after
    the whole index and the data files' sizes are validated; read without TensorFlow and without
    reading a value. The names are the checkpoint's keys (an object-based checkpoint's too)."""
    with name_format.open_checked(prefix) as reader:
        return {name: (tuple(spec.shape), spec.dtype) for name, spec in reader.specs.items()
                if name not in name_format.BOOKKEEPING}


def checkpoint_kind(path) -> str:
    """The name of the format of the checkpoint at ``path``: 'object' for a TensorFlow object-based
    checkpoint, 'name' for a name-based one, 'npz', 'safetensors', ...

    checkpoint_kind('keras/weights'), checkpoint_kind('train/model-9000'), checkpoint_kind('m.npz')
    # ('object', 'name', 'npz')
    """
    return registry.format_of(path).name


def file_format(path) -> str:
    """The format an output at ``path`` is written in when none is named: by its suffix
    ('npz', 'safetensors', ...), else 'name' (a TensorFlow checkpoint prefix)."""
    return registry.for_output(path).name


def source_path(path) -> str:
    """The checkpoint's own path for ``path``: a TensorFlow directory's latest prefix, a prefix for a
    file of it, any other checkpoint file itself."""
    return registry.format_of(path).resolve(os.fspath(path))


def read_tensors(path, names):
    """Yield ``(name, array)`` for each of ``names`` (catalog names) of the checkpoint at ``path``
    (any registered format), one at a time, each verified.

    dict(read_tensors('train/model-9000', ['global_step']))
    # {'global_step': array(9000)}
    """
    checkpoint_format = registry.format_of(path)
    yield from checkpoint_format.read(checkpoint_format.resolve(path), names)
