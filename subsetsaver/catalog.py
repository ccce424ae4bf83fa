"""The catalog: one picture of a program's variables, read once from a source.

This is the only module that reads TensorFlow graphs and checkpoints. Everything else
(selectors, planner, audit, drawings) works on the records it builds.

Sources: a live ``tf.Graph`` (None means the default graph), a MetaGraph file
(``.meta``, imported into a fresh graph), a checkpoint (prefix or directory: names,
shapes and dtypes only), or a catalog.

Example::

    >>> cat = load(graph)
    >>> cat.record('conv_1/w')
    VariableRecord(name='conv_1/w', shape=(5, 5, 1, 32), dtype='float32', nbytes=3200, ...)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import weakref

from .errors import CheckpointNotFoundError, CorruptCheckpointError
from .index_check import check_declared_sizes, file_bytes
from .roles import Roles, roles_from_graph, roles_from_names

GLOBAL_VARIABLES = "variables"
LOCAL_VARIABLES = "local_variables"
TRAINABLE_VARIABLES = "trainable_variables"
GLOBAL_STEP = "global_step"
_CHECKPOINT_BOOKKEEPING = ("_CHECKPOINTABLE_OBJECT_GRAPH",)


@dataclasses.dataclass(frozen=True)
class VariableRecord:
    """Everything subsetsaver knows about one logical variable."""

    name: str                   # op name without ':0'; a partitioned variable's full name
    shape: tuple                # ints (None where unknown)
    dtype: str                  # 'float32', 'bfloat16', 'int64', ...
    nbytes: int                 # bytes of the values (0 when the shape is not fully known)
    collections: frozenset      # graph collection keys that hold it
    trainable: bool
    roles: frozenset            # subset of roles.ROLES, plus 'partitioned'
    slot_of: str | None = None  # for an optimizer slot: the variable it belongs to
    average_of: str | None = None  # for a moving-average shadow: the averaged variable
    parts: tuple = ()           # a partitioned variable's part names, in order
    index: int = 0              # creation order


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    shape: tuple
    dtype: str
    nbytes: int
    parts: tuple
    index: int


class Catalog:
    """Variables of one source, in creation order, with collections and (lazily) roles."""

    def __init__(self, entries, collections, *, kind, graph=None, variables=None, roles=None):
        entries = sorted(entries, key=lambda e: e.index)
        self.kind = kind                       # 'graph', 'meta' or 'checkpoint'
        self.graph = graph
        self.ordered_names = tuple(e.name for e in entries)
        self.all_names = frozenset(self.ordered_names)
        self._entries = {e.name: e for e in entries}
        self._position = {name: i for i, name in enumerate(self.ordered_names)}
        self._collections = {k: frozenset(v) for k, v in collections.items()}
        self._variables = variables or {}
        self._roles_source = roles
        self._roles = None
        self._records = None
        self._op_graph = None

    # -- what selectors ask -------------------------------------------------------
    def in_order(self, names) -> list:
        return sorted(names, key=self._position.__getitem__)

    def nbytes(self, names) -> int:
        return sum(self._entries[n].nbytes for n in names)

    def collection(self, key) -> frozenset:
        if key == TRAINABLE_VARIABLES and self.kind == "checkpoint":
            return self.all_names - self.role("slot") - self.role("bn_stat") - self.role("average") - self.role(
                "global_step"
            )
        return self._collections.get(key, frozenset())

    def collection_note(self, key) -> str:
        if self.kind == "checkpoint":
            if key == TRAINABLE_VARIABLES:
                return "guessed: a checkpoint has no collections; everything that is not optimizer state, statistics or a step"
            return "a checkpoint has no collections"
        return ""

    def role(self, role) -> frozenset:
        return self.roles.by_role.get(role, frozenset())

    def role_note(self, role) -> str:
        return "from names: no graph" if self.roles.from_names else ""

    # -- what the rest of the library asks ---------------------------------------
    @property
    def roles(self) -> Roles:
        if self._roles is None:
            self._roles = self._roles_source(self) if callable(self._roles_source) else roles_from_names(self.all_names)
        return self._roles

    @property
    def op_graph(self):
        """The graph's ops and function bodies (``dataflow.OpGraph``), read once; None without a graph."""
        if self._op_graph is None and self.graph is not None:
            from .dataflow import OpGraph

            self._op_graph = OpGraph(self.graph.as_graph_def())
        return self._op_graph

    def variables(self, names) -> list:
        """The ``tf.Variable`` objects (partitions expanded) behind ``names``, in the given order."""
        if self.graph is None:
            raise TypeError(f"a {self.kind} catalog has no tf.Variable objects; pass a tf.Graph")
        return [variable for name in names for variable in self._variables[name]]

    def record(self, name) -> VariableRecord:
        return self.records_by_name[name]

    @property
    def records(self) -> list:
        """Full records, roles included, in creation order."""
        if self._records is None:
            roles = self.roles
            member = {}
            for key, names in self._collections.items():
                for name in names:
                    member.setdefault(name, set()).add(key)
            trainable = self.collection(TRAINABLE_VARIABLES)
            records = []
            for name in self.ordered_names:
                entry = self._entries[name]
                kinds = {role for role, names in roles.by_role.items() if name in names}
                if len(entry.parts) > 1:
                    kinds.add("partitioned")
                records.append(
                    VariableRecord(
                        name=name,
                        shape=entry.shape,
                        dtype=entry.dtype,
                        nbytes=entry.nbytes,
                        collections=frozenset(member.get(name, ())),
                        trainable=name in trainable,
                        roles=frozenset(kinds),
                        slot_of=roles.slot_of.get(name),
                        average_of=roles.average_of.get(name),
                        parts=entry.parts if len(entry.parts) > 1 else (),
                        index=entry.index,
                    )
                )
            self._records = records
        return self._records

    @property
    def records_by_name(self) -> dict:
        return {r.name: r for r in self.records}

    def __len__(self):
        return len(self.ordered_names)

    def __repr__(self):
        return f"<Catalog of {len(self)} variables from a {self.kind}>"


# ---------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------

_graph_cache = weakref.WeakKeyDictionary()


def load(source=None) -> Catalog:
    """A catalog for ``source``: a tf.Graph (None: the default graph), a ``.meta`` file,
    a checkpoint prefix or directory, a Keras model (or ``(model, optimizer)``), or a
    catalog (returned as is)."""
    if isinstance(source, Catalog):
        return source
    import tensorflow as tf

    if source is None:
        source = tf.compat.v1.get_default_graph()
    if isinstance(source, tf.Graph):
        return _graph_catalog(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if path.endswith(".meta"):
            return _meta_catalog(path)
        return checkpoint_catalog(path)
    from . import keras_catalog

    if keras_catalog.is_keras_model(source):
        return keras_catalog.load(source)
    if isinstance(source, tuple) and len(source) == 2 and keras_catalog.is_keras_model(source[0]):
        return keras_catalog.load(*source)  # (model, optimizer)
    raise TypeError(
        f"cannot read variables from a {type(source).__name__}; "
        "pass a tf.Graph, a .meta file, a checkpoint or a Keras model"
    )


def _graph_catalog(graph) -> Catalog:
    stamp = _graph_stamp(graph)
    cached = _graph_cache.get(graph)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    catalog = _read_graph(graph, kind="graph")
    _graph_cache[graph] = (stamp, catalog)
    return catalog


def _graph_stamp(graph):
    collections = getattr(graph, "_collections", None)
    if collections is None:
        return None  # unknown internals: never trust the cache
    return graph.version, tuple((key, len(items)) for key, items in collections.items())


def _read_graph(graph, *, kind) -> Catalog:
    global_variables = graph.get_collection(GLOBAL_VARIABLES)
    local_variables = graph.get_collection(LOCAL_VARIABLES)
    parts_by_name, first_seen, op_to_name, name_of_object = {}, {}, {}, {}
    for position, variable in enumerate(global_variables + local_variables):
        op = variable.op
        slice_info = getattr(variable, "_save_slice_info", None)
        name = slice_info.full_name if slice_info is not None else op.name
        parts_by_name.setdefault(name, []).append(variable)
        # Global variables are listed in creation order; op ids interleave local ones.
        first_seen.setdefault(name, op._id if local_variables else position)
        name_of_object[id(variable)] = name
        op_to_name[op.name] = name

    entries = []
    for name, parts in parts_by_name.items():
        head = parts[0]
        dtype = head.dtype.base_dtype
        if len(parts) > 1 or getattr(head, "_save_slice_info", None) is not None:
            parts.sort(key=lambda v: tuple(v._save_slice_info.var_offset))
            shape = tuple(head._save_slice_info.full_shape)
            # Only the parts that exist are written (TF gives some slots a full shape
            # larger than the one slice they hold).
            nbytes = sum(value_bytes(tuple(p._save_slice_info.var_shape), dtype) for p in parts)
        else:
            shape = tuple(head.shape.as_list()) if head.shape.dims is not None else ()
            nbytes = value_bytes(shape, dtype)
        entries.append(
            _Entry(
                name=name,
                shape=shape,
                dtype=dtype.name,
                nbytes=nbytes,
                parts=tuple(p.op.name for p in parts) if len(parts) > 1 else (name,),
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
        return roles_from_graph(catalog.op_graph, op_to_name, trainable, steps)

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
    from tensorflow.python.framework import meta_graph

    if tf.io.gfile.stat(path).length == 0:
        raise CorruptCheckpointError(f"'{path}' is empty (0 bytes), not a MetaGraph file; {_PASS_A_META_FILE}")
    try:
        meta = meta_graph.read_meta_graph_file(path)
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


def checkpoint_prefix(path) -> str:
    """The checkpoint prefix behind ``path``: a prefix, a directory (its latest), or a file of it."""
    import tensorflow as tf

    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise CheckpointNotFoundError(
                f"no checkpoint in directory '{path}' (no 'checkpoint' state file naming one)"
            )
        return latest
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if ".data-" in path.rsplit("/", 1)[-1]:
        path = path[: path.rindex(".data-")]
    if not tf.io.gfile.exists(path + ".index"):
        raise CheckpointNotFoundError(f"no checkpoint at '{path}' (expected '{path}.index')")
    return path


def checkpoint_catalog(path) -> Catalog:
    """Names, shapes and dtypes of a TensorFlow checkpoint; roles guessed from names."""
    prefix = checkpoint_prefix(path)
    reader = open_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    entries = [
        _Entry(
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


@functools.lru_cache(maxsize=4096)
def value_bytes(shape, dtype) -> int:
    """Bytes of a tensor's values: ``value_bytes((3, 4), tf.float32) == 48``; 0 for strings or unknown dims."""
    import tensorflow as tf

    dtype = tf.as_dtype(dtype)
    if dtype == tf.string or any(d is None or d < 0 for d in shape):
        return 0
    return math.prod(shape) * dtype.size
