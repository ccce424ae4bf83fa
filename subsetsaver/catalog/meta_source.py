"""The catalog of a MetaGraph file (``.meta``), read without TensorFlow.

The file's variable collections (``VariableDef`` messages) give the variables, their
partitions, initializers and collections; the variable ops' ``dtype`` and ``shape``
attributes give their specs; the file's ``GraphDef`` becomes the same
:class:`~subsetsaver.catalog.op_graph.OpGraph` a live graph gives, so roles and the audit's
dataflow run on it unchanged (the ``OpDef`` of each op comes from the file's op list).
A MetaGraph in protobuf's text format (``export_meta_graph(as_text=True)``) is imported
by TensorFlow instead (see :func:`subsetsaver.catalog.sources.load`).

Example::

    cat = load('ckpt/model-100.meta')
    cat.kind, cat.graph, sorted(cat.role('bn_stat'))[:1]
    # ('meta', None, ['conv_1/bn/moving_mean'])
"""

from __future__ import annotations

import math

from ..errors import CorruptCheckpointError
from ..formats.tf import bundle, meta_graph
from .dataflow_roles import roles_from_graph
from .op_graph import VARIABLE_OPS, OpGraph, register_op_defs
from .records import (
    GLOBAL_STEP,
    GLOBAL_VARIABLES,
    LOCAL_VARIABLES,
    TRAINABLE_VARIABLES,
    Catalog,
    CatalogEntry,
    value_bytes,
)

PASS_A_META_FILE = "pass the .meta file that tf.compat.v1.train.Saver.save wrote"
_LARGEST = (1 << 63) - 1


def is_text_format(data) -> bool:
    """Whether ``data`` looks like a MetaGraphDef in protobuf's text format (a binary one starts
    with a field tag, never a letter)."""
    head = data[:64].lstrip()
    if not head[:1].isalpha():
        return False
    try:
        head.decode("ascii")
    except UnicodeDecodeError:
        return False
    return True


def unreadable(path, cause) -> str:
    return f"'{path}' is not a readable MetaGraph file ({cause}); {PASS_A_META_FILE}"


def meta_catalog(path, data) -> Catalog:
    """The catalog of the binary MetaGraphDef ``data`` read from ``path``; CorruptCheckpointError
    naming the file when it does not parse or lacks what the catalog needs."""
    try:
        meta = meta_graph.read_meta_graph(data)
        if meta.graph_def is None:
            raise CorruptCheckpointError(f"'{path}' is truncated: it ends before its graph; {PASS_A_META_FILE}")
        global_defs = meta.variable_defs(GLOBAL_VARIABLES)
        local_defs = meta.variable_defs(LOCAL_VARIABLES)
    except ValueError as error:
        raise CorruptCheckpointError(unreadable(path, f"it does not parse as a MetaGraphDef: {error}")) from None
    nodes = {}
    for position, node in enumerate(meta.graph_def.node):
        nodes[node.name] = (position, node)
    _check_graph(path, meta, nodes)
    every = global_defs + local_defs
    op_names = [d.op_name for d in every]
    for name in op_names:
        if name not in nodes or nodes[name][1].op not in VARIABLE_OPS:
            raise CorruptCheckpointError(unreadable(path, f"its collections list variable '{name}', which is not a "
                                                          "variable op of its graph"))
    entries, names_of = _entries(path, every, op_names, nodes, bool(local_defs))
    name_of_op = dict(zip(op_names, names_of))
    collections, op_collections = {}, {}
    for key, collection in meta.collections.items():
        if collection.kind == "node_list":
            op_collections[key] = [value.split(":")[0] for value in collection.values]
            names = [name_of_op.get(value[:-2]) for value in collection.values if value.endswith(":0")]
        else:
            names = [name_of_op.get(d.op_name) for d in meta.variable_defs(key)]
        names = [name for name in names if name is not None]
        if names:
            collections[key] = names
    initializers = [d.initializer_name.split(":")[0] for d in every if d.initializer_name]

    def op_graph():
        register_op_defs(meta.op_defs)
        return OpGraph(meta.graph_def)

    return Catalog(entries, collections, kind="meta", roles=graph_roles, op_graph=op_graph,
                   op_collections=op_collections, initializers=initializers)


def graph_roles(catalog):
    """Roles of a graph catalog (live or from a file): the GLOBAL_STEP collection, or an integer
    scalar named ``global_step``, is the step; the rest comes from the graph's structure."""
    steps = catalog.collection(GLOBAL_STEP) or frozenset(
        name for name in catalog.ordered_names if name.rsplit("/", 1)[-1] == "global_step"
        and catalog.entry(name).dtype.startswith("int") and catalog.entry(name).shape == ()
    )
    return roles_from_graph(catalog, catalog.collection(TRAINABLE_VARIABLES), steps)


def _entries(path, every, op_names, nodes, has_local):
    """(CatalogEntry of each logical variable, the logical name of each VariableDef), as a live
    graph's catalog orders and groups them: partitions under their full name, in offset order."""
    names_of, parts, first_seen = [], {}, {}
    for position, (variable_def, op_name) in enumerate(zip(every, op_names)):
        info = variable_def.save_slice_info_def
        name = info.full_name if info is not None else op_name
        names_of.append(name)
        parts.setdefault(name, []).append((variable_def, op_name))
        first_seen.setdefault(name, nodes[op_name][0] if has_local else position)
    entries = []
    for name, members in parts.items():
        if len(members) > 1 or members[0][0].save_slice_info_def is not None:
            members.sort(key=lambda member: tuple(member[0].save_slice_info_def.var_offset)
                         if member[0].save_slice_info_def is not None else ())
        dtype = _dtype(path, nodes[members[0][1]][1])
        head = members[0][0].save_slice_info_def
        if len(members) > 1 or head is not None:
            if any(d.save_slice_info_def is None for d, _op in members):
                raise CorruptCheckpointError(unreadable(path, f"variable '{name}' is listed twice"))
            shape = tuple(head.full_shape)
            nbytes = sum(value_bytes(tuple(d.save_slice_info_def.var_shape), dtype) for d, _op in members)
        else:
            shape = _shape(path, nodes[members[0][1]][1])
            nbytes = value_bytes(shape, dtype)
        slices = tuple((tuple(d.save_slice_info_def.var_offset), tuple(d.save_slice_info_def.var_shape))
                       for d, _op in members) if head is not None else ()
        entries.append(CatalogEntry(name=name, shape=shape, dtype=dtype, nbytes=nbytes, part_slices=slices,
                                    parts=tuple(op for _d, op in members), index=first_seen[name]))
    return entries, names_of


def _dtype(path, node) -> str:
    attr = node.attr.get("dtype")
    data_type = bundle.dtypes.by_enum(attr.type % 100) if attr is not None else None  # 100+: a reference type
    if data_type is None:
        raise CorruptCheckpointError(unreadable(path, f"variable '{node.name}' has no dtype this library knows"))
    return data_type.name


def _shape(path, node) -> tuple:
    attr = node.attr.get("shape")
    dims = meta_graph.shape_dims(attr.shape) if attr is not None and attr.HasField("shape") else None
    if dims is None:
        return ()  # an unknown rank: what a live graph's catalog says too
    shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    if any(d is not None and d < -1 for d in dims):
        raise CorruptCheckpointError(unreadable(path, f"variable '{node.name}' has shape {shown}, which has "
                                                      "dimensions with values below -1"))
    if math.prod(d for d in dims if d is not None) > _LARGEST:
        raise CorruptCheckpointError(unreadable(path, f"variable '{node.name}' has shape {shown}, which is too "
                                                      "large (more than 2**63 - 1 entries)"))
    return dims


def _check_graph(path, meta, nodes):
    """What TensorFlow's import would refuse, refused before anything is built: variables the
    collections do not list (a file cut before its collections), ops of no known type."""
    variables = [name for name, (_position, node) in nodes.items() if node.op in VARIABLE_OPS]
    if variables and not meta.collections:
        shown = ", ".join(f"'{name}'" for name in variables[:3]) + (", ..." if len(variables) > 3 else "")
        raise CorruptCheckpointError(
            f"'{path}' is truncated: its graph has {len(variables)} variable{'s' if len(variables) != 1 else ''} "
            f"({shown}) but the file ends before the collections that list them; {PASS_A_META_FILE}, whole"
        )
    if not meta.op_defs:
        return  # a file written without its op list: nothing to check the op types against
    functions = {function.signature.name for function in meta.graph_def.library.function}
    for _position, node in nodes.values():
        if node.op not in meta.op_defs and node.op not in functions:
            raise CorruptCheckpointError(unreadable(
                path, f"Op type not registered '{node.op}': op '{node.name}' has a type that neither the file's "
                      "op list nor its function library defines"))
