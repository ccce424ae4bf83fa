"""Reading a catalog from its source: a live graph, a ``.meta`` file, a checkpoint, a Keras model.

This room is the only one that reads TensorFlow graphs. Sources: a live ``tf.Graph``
(None means the default graph), a MetaGraph file (``.meta``, imported into a fresh
graph), a checkpoint (prefix or directory: names, shapes and dtypes only), a Keras 3
model (or ``(model, optimizer)``), or a catalog. A graph's catalog is cached until the
graph's collections change.

Example::

    >>> cat = load(graph)
    >>> cat.ordered_names[:2]
    ('conv_1/w', 'conv_1/b')
"""

from __future__ import annotations

import os
import weakref

from .. import tf_internals
from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from ..formats.tf_index import file_bytes
from . import keras_source
from .checkpoints import checkpoint_catalog
from .records import (
    GLOBAL_STEP,
    GLOBAL_VARIABLES,
    LOCAL_VARIABLES,
    TRAINABLE_VARIABLES,
    Catalog,
    CatalogEntry,
    value_bytes,
)
from .roles import roles_from_graph

_graph_cache = weakref.WeakKeyDictionary()


def load(source=None) -> Catalog:
    """A catalog for ``source``: a tf.Graph (None: the default graph), a ``.meta`` file,
    a checkpoint prefix or directory, a Keras model (or ``(model, optimizer)``), or a
    catalog (returned as is)."""
    if isinstance(source, Catalog):
        return source
    if isinstance(source, (str, os.PathLike)):  # checkpoints need no TensorFlow
        path = os.fspath(source)
        if path.endswith(".meta"):
            return _meta_catalog(path)
        return checkpoint_catalog(path)
    import tensorflow as tf

    if source is None:
        source = tf.compat.v1.get_default_graph()
    if isinstance(source, tf.Graph):
        return _graph_catalog(source)
    if keras_source.is_keras_model(source):
        return keras_source.load(source)
    if isinstance(source, tuple) and len(source) == 2 and keras_source.is_keras_model(source[0]):
        return keras_source.load(*source)  # (model, optimizer)
    raise TypeError(
        f"cannot read variables from a {type(source).__name__}; "
        "pass a tf.Graph, a .meta file, a checkpoint or a Keras model"
    )


def _graph_catalog(graph) -> Catalog:
    stamp = tf_internals.collections_stamp(graph)
    cached = _graph_cache.get(graph)
    if cached is not None and stamp is not None and cached[0] == stamp:
        return cached[1]
    catalog = _read_graph(graph, kind="graph")
    _graph_cache[graph] = (stamp, catalog)
    return catalog


def _read_graph(graph, *, kind) -> Catalog:
    global_variables = graph.get_collection(GLOBAL_VARIABLES)
    local_variables = graph.get_collection(LOCAL_VARIABLES)
    parts_by_name, first_seen, name_of_object = {}, {}, {}
    for position, variable in enumerate(global_variables + local_variables):
        op = variable.op
        slice_info = tf_internals.slice_info(variable)
        name = slice_info.full_name if slice_info is not None else op.name
        parts_by_name.setdefault(name, []).append(variable)
        # Global variables are listed in creation order; op ids interleave local ones.
        first_seen.setdefault(name, tf_internals.creation_id(op) if local_variables else position)
        name_of_object[id(variable)] = name

    entries = []
    for name, parts in parts_by_name.items():
        head = parts[0]
        dtype = head.dtype.base_dtype
        if len(parts) > 1 or tf_internals.slice_info(head) is not None:
            parts.sort(key=lambda v: tuple(tf_internals.slice_info(v).var_offset))
            shape = tuple(tf_internals.slice_info(head).full_shape)
            # Only the parts that exist are written (TF gives some slots a full shape
            # larger than the one slice they hold).
            nbytes = sum(value_bytes(tuple(tf_internals.slice_info(p).var_shape), dtype) for p in parts)
        else:
            shape = tuple(head.shape.as_list()) if head.shape.dims is not None else ()
            nbytes = value_bytes(shape, dtype)
        entries.append(
            CatalogEntry(
                name=name,
                shape=shape,
                dtype=dtype.name,
                nbytes=nbytes,
                parts=tuple(p.op.name for p in parts),  # a lone part's op name differs from its name
                index=first_seen[name],
            )
        )

    collections = {}
    for key in graph.get_all_collection_keys():
        names = [name_of_object[id(item)] for item in graph.get_collection(key) if id(item) in name_of_object]
        if names:
            collections[key] = names
    trainable = frozenset(collections.get(TRAINABLE_VARIABLES, ()))
    steps = frozenset(collections.get(GLOBAL_STEP, ())) or frozenset(
        e.name for e in entries if e.name.rsplit("/", 1)[-1] == "global_step" and e.dtype.startswith("int")
        and e.shape == ()
    )

    def roles(catalog):
        return roles_from_graph(catalog, trainable, steps)

    return Catalog(
        entries,
        collections,
        kind=kind,
        graph=graph,
        variables={name: tuple(parts) for name, parts in parts_by_name.items()},
        roles=roles,
    )


def _meta_catalog(path) -> Catalog:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise CheckpointNotFoundError(f"no MetaGraph file at '{path}'")
    meta = _read_meta_graph(path)
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.compat.v1.train.import_meta_graph(meta, clear_devices=True)
    except Exception as error:  # protobuf and TensorFlow raise many unrelated types here
        raise CorruptCheckpointError(_unreadable_meta(path, error)) from error
    return _read_graph(graph, kind="meta")


_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})
_PASS_A_META_FILE = "pass the .meta file that tf.compat.v1.train.Saver.save wrote"


def _read_meta_graph(path):
    """The MetaGraphDef in ``path`` (binary or text, as TensorFlow reads it), refused when damaged
    in a way that would still import: empty, or cut before the collections that list the variables
    (a clean cut at a field boundary parses; the graph then seems to have no variables)."""
    import tensorflow as tf
    if tf.io.gfile.stat(path).length == 0:
        raise CorruptCheckpointError(f"'{path}' is empty (0 bytes), not a MetaGraph file; {_PASS_A_META_FILE}")
    try:
        meta = tf_internals.read_meta_graph_file(path)
    except UnicodeDecodeError as error:  # neither binary nor text: the binary parser's reason is the useful one
        raise CorruptCheckpointError(_unreadable_meta(path, _binary_parse_error(path) or error)) from error
    except Exception as error:  # IOError, text_format.ParseError, ...
        raise CorruptCheckpointError(_unreadable_meta(path, error)) from error
    if not meta.HasField("graph_def"):
        raise CorruptCheckpointError(f"'{path}' is truncated: it ends before its graph; {_PASS_A_META_FILE}")
    variables = [node.name for node in meta.graph_def.node if node.op in _VARIABLE_OPS]
    if variables and not meta.collection_def:
        shown = ", ".join(f"'{name}'" for name in variables[:3]) + (", ..." if len(variables) > 3 else "")
        raise CorruptCheckpointError(
            f"'{path}' is truncated: its graph has {len(variables)} variable{'s' if len(variables) != 1 else ''} "
            f"({shown}) but the file ends before the collections that list them; {_PASS_A_META_FILE}, whole"
        )
    return meta


def _binary_parse_error(path):
    import tensorflow as tf

    try:
        tf.compat.v1.MetaGraphDef.FromString(file_bytes(path))
    except Exception as error:  # google.protobuf.message.DecodeError
        return error
    return None


def _unreadable_meta(path, error) -> str:
    return (f"'{path}' is not a readable MetaGraph file ({type(error).__name__}: {error}); "
            f"{_PASS_A_META_FILE}")
