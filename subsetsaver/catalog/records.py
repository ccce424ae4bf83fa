"""The catalog: one picture of a program's variables, read once from a source.

A :class:`Catalog` holds every variable's name, shape, dtype, bytes, collections and
(lazily) roles, in creation order. The readers in this package build it; selectors,
the audit, the planner and the drawings only ask it questions.

Example::

    cat = load(graph)
    cat.record('conv_1/w')
    # VariableRecord(name='conv_1/w', shape=(5, 5, 1, 32), dtype='float32', nbytes=3200, ...)
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import math

from ..formats.tf import bundle
from .roles import Roles, labels, roles_from_names

GLOBAL_VARIABLES = "variables"
LOCAL_VARIABLES = "local_variables"
TRAINABLE_VARIABLES = "trainable_variables"
GLOBAL_STEP = "global_step"


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
    object_path: str | None = None     # object-based checkpoints: the key without /.ATTRIBUTES/VARIABLE_VALUE
    checkpoint_key: str | None = None  # object-based checkpoints: the tensor's key in the checkpoint


@dataclasses.dataclass(frozen=True)
class CatalogEntry:
    """What a reader knows of one variable before roles and collections are joined in."""

    name: str
    shape: tuple
    dtype: str
    nbytes: int
    parts: tuple
    index: int
    key: str | None = None          # object-based checkpoints: the tensor's checkpoint key
    object_path: str | None = None  # object-based checkpoints: the object path
    part_slices: tuple = ()         # .meta files: (offset, shape) of each part of a partitioned variable


class LazyEntries(collections.abc.Mapping):
    """name -> :class:`CatalogEntry` in creation order, each entry made by ``make(name)`` when first
    asked for: a reader of a big graph lists names at once and shapes only when someone needs them.

    ``known``: a container of every name. ``parts``: name -> its variable op names, for the names
    whose parts are not just ``(name,)``.
    """

    def __init__(self, names, make, known, parts):
        self.names = tuple(names)
        self.known = known
        self.parts = parts
        self._make = make
        self._made = {}

    def __getitem__(self, name):
        entry = self._made.get(name)
        if entry is None:
            if name not in self.known:
                raise KeyError(name)
            entry = self._made[name] = self._make(name)
        return entry

    def part_names(self, name) -> tuple:
        if name not in self.known:
            raise KeyError(name)
        return self.parts.get(name) or (name,)

    def __contains__(self, name):
        return name in self.known

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


class Catalog:
    """Variables of one source, in creation order, with collections and (lazily) roles.

    A checkpoint's catalog says which kind of file it read in ``checkpoint_kind``: 'name' (a
    TensorFlow name-based checkpoint), 'object' (an object-based one, whose decoded graph is
    ``object_graph``), 'npz' or 'safetensors'; None for graphs and models.

    ``entries``: :class:`CatalogEntry` values in any order, or a :class:`LazyEntries` (already in
    creation order). ``collections``: key -> names. ``variables``: name -> its ``tf.Variable`` parts
    (a tuple); ``whole_variables``: name -> the one ``tf.Variable`` of a name that has no partitions.

    A graph's catalog gives ``op_graph``: a function that makes its
    :class:`~subsetsaver.catalog.op_graph.OpGraph`. A graph read without TensorFlow (a ``.meta`` file)
    has no ``graph``; it gives ``op_collections`` (key -> the op names of a graph collection) and
    ``initializers`` (the variables' initializer op names) instead.
    """

    def __init__(self, entries, collections, *, kind, graph=None, variables=None, roles=None,
                 checkpoint_kind=None, object_graph=None, whole_variables=None, op_graph=None,
                 op_collections=None, initializers=None):
        self.kind = kind                       # 'graph', 'meta', 'keras' or 'checkpoint'
        self.checkpoint_kind = checkpoint_kind
        self.object_graph = object_graph
        self.graph = graph
        if isinstance(entries, LazyEntries):
            self.ordered_names = entries.names
            self._entries = entries
            self._lazy = entries
        else:
            entries = sorted(entries, key=lambda e: e.index)
            self.ordered_names = tuple(e.name for e in entries)
            self._entries = {e.name: e for e in entries}
            self._lazy = None
        self._collection_names = collections
        self._collections = {}
        self._variables = variables or {}
        self._whole = whole_variables or {}
        self._roles_source = roles
        self._roles = None
        self._records = None
        self._records_by_name = None
        self._op_graph = None
        self._op_graph_source = op_graph
        self._op_collections = op_collections
        self._initializers = initializers
        self._matching = {}  # selector leaf -> the names it matches (see names_matching)

    @functools.cached_property
    def all_names(self) -> frozenset:
        return frozenset(self.ordered_names)

    @functools.cached_property
    def _position(self) -> dict:
        return {name: i for i, name in enumerate(self.ordered_names)}

    # -- what selectors ask -------------------------------------------------------
    def in_order(self, names) -> list:
        """``names`` (a subset of the catalog's) in creation order."""
        if isinstance(names, (set, frozenset)) and len(names) * 8 >= len(self.ordered_names):
            return [name for name in self.ordered_names if name in names]  # a large part: one pass beats a sort
        return sorted(names, key=self._position.__getitem__)

    def nbytes(self, names) -> int:
        return sum(self._entries[n].nbytes for n in names)

    def collection(self, key) -> frozenset:
        if key == TRAINABLE_VARIABLES and self.kind == "checkpoint":
            return self.all_names.difference(*self.roles.by_role.values())  # every role is something else
        found = self._collections.get(key)
        if found is None:
            found = self._collections[key] = frozenset(self._collection_names.get(key, ()))
        return found

    def collection_note(self, key) -> str:
        if self.kind == "checkpoint":
            if key == TRAINABLE_VARIABLES:
                return "guessed: a checkpoint has no collections; everything that is not optimizer state, statistics or a step"
            return "a checkpoint has no collections"
        return ""

    def role(self, role) -> frozenset:
        return self.roles.by_role.get(role, frozenset())

    def role_note(self, role) -> str:
        if self.checkpoint_kind == "object":
            return "from the checkpoint's object graph"
        return "from names: no graph" if self.roles.from_names else ""

    # -- what the rest of the library asks ---------------------------------------
    @property
    def roles(self) -> Roles:
        if self._roles is None:
            self._roles = self._roles_source(self) if callable(self._roles_source) else roles_from_names(self.all_names)
        return self._roles

    @property
    def traceable(self) -> bool:
        """Whether the catalog has a graph to trace (a live ``tf.Graph`` or a ``.meta`` file's ops)."""
        return self.graph is not None or self._op_graph_source is not None

    @property
    def op_graph(self):
        """The graph's ops and function bodies (an :class:`~subsetsaver.catalog.op_graph.OpGraph`),
        read once; None without a graph."""
        if self._op_graph is None:
            if self._op_graph_source is not None:
                self._op_graph = self._op_graph_source()
        return self._op_graph

    def op_collection(self, key) -> list:
        """The names of the ops in graph collection ``key`` (``'update_ops'``, ``'train_op'``), without
        ``:0``; [] without a graph."""
        if self._op_collections is not None:
            return list(self._op_collections.get(key, ()))
        if self.graph is None:
            return []
        names = []
        for item in self.graph.get_collection(key):
            name = getattr(getattr(item, "op", item), "name", None)
            if isinstance(name, str):
                names.append(name.split(":")[0])
        return names

    def initializer_ops(self) -> list:
        """The names of the initializer ops of every variable (partitions expanded)."""
        if self._initializers is not None:
            return list(self._initializers)
        return [variable.initializer.name for variable in self.variables(self.ordered_names)
                if getattr(variable, "initializer", None) is not None]

    def names_matching(self, key, select) -> frozenset:
        """The names ``select(all_names)`` picks (an iterable of them), computed once per ``key`` (a
        selector leaf: a pattern runs over every name once per catalog, however often a selector is
        resolved)."""
        found = self._matching.get(key)
        if found is None:
            found = frozenset(select(self.all_names))
            if len(self._matching) >= _MATCHES_KEPT:
                self._matching.pop(next(iter(self._matching)))
            self._matching[key] = found
        return found

    def entry(self, name) -> CatalogEntry:
        """What the reader knew of ``name`` (shape, dtype, bytes, parts), before roles were joined in."""
        return self._entries[name]

    def checkpoint_key(self, name) -> str:
        """The key of ``name`` in its checkpoint: the name itself, but in an object-based checkpoint
        ``checkpoint_key('dense/kernel') == 'layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE'``."""
        return self._entries[name].key or name

    def parts(self, name) -> tuple:
        """The variable op names behind ``name``, its partitions in order (``(name,)`` for most)."""
        if self._lazy is not None:
            return self._lazy.part_names(name)
        return self._entries[name].parts

    def variables(self, names) -> list:
        """The ``tf.Variable`` objects (partitions expanded) behind ``names``, in the given order."""
        if self.graph is None:
            raise TypeError(f"a {self.kind} catalog has no tf.Variable objects; pass a tf.Graph")
        if not self._variables:
            return list(map(self._whole.__getitem__, names))
        whole, split = self._whole, self._variables
        return [variable for name in names for variable in ((whole[name],) if name in whole else split[name])]

    def record(self, name) -> VariableRecord:
        return self.records_by_name[name]

    @property
    def records(self) -> list:
        """Full records, roles included, in creation order."""
        if self._records is None:
            roles = self.roles
            member = {}
            for key, names in self._collection_names.items():
                for name in names:
                    member.setdefault(name, set()).add(key)
            trainable = self.collection(TRAINABLE_VARIABLES)
            records = []
            for name in self.ordered_names:
                entry = self._entries[name]
                kinds = labels({role for role, names in roles.by_role.items() if name in names})
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
                        object_path=entry.object_path,
                        checkpoint_key=entry.key,
                    )
                )
            self._records = records
        return self._records

    @property
    def records_by_name(self) -> dict:
        if self._records_by_name is None:
            self._records_by_name = {r.name: r for r in self.records}
        return self._records_by_name

    def __len__(self):
        return len(self.ordered_names)

    def __repr__(self):
        kind = "an object-based checkpoint" if self.checkpoint_kind == "object" else f"a {self.kind}"
        return f"<Catalog of {len(self)} variables from {kind}>"


@functools.lru_cache(maxsize=4096)
def value_bytes(shape, dtype) -> int:
    """Bytes of a tensor's values: ``value_bytes((3, 4), 'float32') == 48`` (a ``tf.DType`` works too);
    0 for strings, other variable-width dtypes or unknown dims. Needs no TensorFlow."""
    itemsize = _ITEMSIZES.get(getattr(dtype, "name", dtype))
    if not itemsize or any(d is None or d < 0 for d in shape):
        return 0
    return math.prod(shape) * itemsize


_MATCHES_KEPT = 256
_ITEMSIZES = {data_type.name: data_type.itemsize for data_type in bundle.dtypes.DATA_TYPES}
