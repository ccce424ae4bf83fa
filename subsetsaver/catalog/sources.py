"""Reading a catalog from its source: a live graph, a ``.meta`` file, a checkpoint, a Keras model.

This room is the only one that reads TensorFlow graphs. Sources: a live ``tf.Graph``
(None means the default graph), a MetaGraph file (``.meta``, read without TensorFlow by
:mod:`~subsetsaver.catalog.meta_source`, or imported into a fresh graph for the planner), a checkpoint (prefix or directory: names, shapes and dtypes only), a Keras 3
model (or ``(model, optimizer)``), or a catalog. A graph's catalog is cached until the
graph's collections change.

Example::

    cat = load(graph)
    cat.ordered_names[:2]
    # ('conv_1/w', 'conv_1/b')
"""

from __future__ import annotations

import os
import weakref

from .. import storage, tf_internals
from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from ..formats.tf import declared_sizes
from ..graph_mode import tensorflow
from . import keras_source, meta_source
from .checkpoints import file_catalog
from .dataflow import no_garbage_collection
from .op_graph import OpGraph
from .records import (
    GLOBAL_VARIABLES,
    LOCAL_VARIABLES,
    Catalog,
    CatalogEntry,
    LazyEntries,
    value_bytes,
)

_graph_cache = weakref.WeakKeyDictionary()


def load(source=None, *, live=False) -> Catalog:
    """A catalog for ``source``: a tf.Graph (None: the default graph), a ``.meta`` file,
    a checkpoint prefix or directory, a Keras model (or ``(model, optimizer)``), or a
    catalog (returned as is).

    A ``.meta`` file is read without TensorFlow (its catalog has ops, no ``tf.Graph``);
    ``live=True`` imports it into a new ``tf.Graph`` instead, for callers that build ops.
    """
    if isinstance(source, Catalog):
        return source
    if isinstance(source, (str, os.PathLike)):  # checkpoints and MetaGraph files need no TensorFlow
        path = os.fspath(source)
        if path.endswith(".meta"):
            return _meta_catalog(path) if live else _meta_file_catalog(path)
        return file_catalog(path)
    if keras_source.is_keras_model(source):
        return keras_source.load(source)
    if isinstance(source, tuple) and len(source) == 2 and keras_source.is_keras_model(source[0]):
        return keras_source.load(*source)  # (model, optimizer)
    tf = tensorflow("reading the variables of a tf.Graph")
    if source is None:
        source = tf.compat.v1.get_default_graph()
    if isinstance(source, tf.Graph):
        return _graph_catalog(source)
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
    with no_garbage_collection():  # thousands of small objects next to a big graph: nothing to collect
        return _read_variables(graph, kind)


def _read_variables(graph, kind) -> Catalog:
    """The names, parts and collections of ``graph``'s variables now; shapes, dtypes and bytes when
    first asked for (the first resolve of a selector on a 20,000-variable graph needs none of them)."""
    global_variables = graph.get_collection(GLOBAL_VARIABLES)
    local_variables = graph.get_collection(LOCAL_VARIABLES)
    every = global_variables + local_variables
    infos = tf_internals.slice_infos(every)
    op_names = tf_internals.op_names(every)
    if any(infos) or len(set(op_names)) < len(op_names):
        names_of, parts_by_name, index = _grouped_parts(every, infos, op_names, local_variables)
        order = sorted(parts_by_name, key=index.__getitem__)
        part_names = {name: tuple(p.op.name for p in parts) for name, parts in parts_by_name.items()}
        whole, split = {}, {name: tuple(parts) for name, parts in parts_by_name.items()}
    else:  # the common case: one whole variable per name
        names_of, part_names, index, order = op_names, {}, None, op_names
        whole, split = dict(zip(op_names, every)), {}
        if local_variables:  # global variables are listed in creation order; op ids interleave local ones
            index = {name: tf_internals.creation_id(v.op) for name, v in zip(op_names, every)}
            order = sorted(op_names, key=index.__getitem__)
    known = split or whole
    positions = {}

    def make(name):
        parts = split[name] if split else (whole[name],)
        if index is not None:
            return _entry(name, parts, index[name])
        if not positions:
            positions.update((n, i) for i, n in enumerate(order))
        return _entry(name, parts, positions[name])

    name_of_object = dict(zip(map(id, every), names_of)).get
    collections = {}
    for key in graph.get_all_collection_keys():
        names = [name for name in map(name_of_object, map(id, graph.get_collection(key))) if name is not None]
        if names:
            collections[key] = names

    return Catalog(
        LazyEntries(order, make, known, part_names),
        collections,
        kind=kind,
        graph=graph,
        variables=split,
        whole_variables=whole,
        roles=meta_source.graph_roles,
        op_graph=lambda: OpGraph(graph.as_graph_def()),
    )


def _grouped_parts(every, infos, op_names, local_variables):
    """(logical name of each variable, name -> its parts in offset order, name -> creation index) for
    a graph with partitioned variables (or two variables of one name)."""
    names_of, parts_by_name, first_seen = [], {}, {}
    for position, (variable, info, op_name) in enumerate(zip(every, infos, op_names)):
        name = info.full_name if info is not None else op_name
        names_of.append(name)
        parts_by_name.setdefault(name, []).append(variable)
        first_seen.setdefault(name, tf_internals.creation_id(variable.op) if local_variables else position)
    for parts in parts_by_name.values():
        if len(parts) > 1 or tf_internals.slice_info(parts[0]) is not None:
            parts.sort(key=lambda v: tuple(tf_internals.slice_info(v).var_offset))
    return names_of, parts_by_name, first_seen


def _entry(name, parts, index) -> CatalogEntry:
    head = parts[0]
    dtype = head.dtype.base_dtype
    info = tf_internals.slice_info(head)
    if len(parts) > 1 or info is not None:
        shape = tuple(info.full_shape)
        # Only the parts that exist are written (TF gives some slots a full shape
        # larger than the one slice they hold).
        nbytes = sum(value_bytes(tuple(tf_internals.slice_info(p).var_shape), dtype) for p in parts)
    else:
        shape = tuple(head.shape.as_list()) if head.shape.dims is not None else ()
        nbytes = value_bytes(shape, dtype)
    return CatalogEntry(
        name=name,
        shape=shape,
        dtype=dtype.name,
        nbytes=nbytes,
        parts=tuple(p.op.name for p in parts),  # a lone part's op name differs from its name
        index=index,
    )


def _meta_file_catalog(path) -> Catalog:
    """A ``.meta`` file's catalog without TensorFlow; a file in protobuf's text format is imported."""
    if not storage.exists(path):
        raise CheckpointNotFoundError(f"no MetaGraph file at '{path}'")
    data = declared_sizes.file_bytes(path)
    if not data:
        raise CorruptCheckpointError(f"'{path}' is empty (0 bytes), not a MetaGraph file; {_PASS_A_META_FILE}")
    if meta_source.is_text_format(data):
        tensorflow("reading a text-format MetaGraph file")
        return _meta_catalog(path)
    return meta_source.meta_catalog(path, data)


def _meta_catalog(path) -> Catalog:
    tf = tensorflow("importing a MetaGraph file into a tf.Graph")

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
_PASS_A_META_FILE = meta_source.PASS_A_META_FILE


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
        tf.compat.v1.MetaGraphDef.FromString(declared_sizes.file_bytes(path))
    except Exception as error:  # google.protobuf.message.DecodeError
        return error
    return None


def _unreadable_meta(path, error) -> str:
    return meta_source.unreadable(path, f"{type(error).__name__}: {error}")
