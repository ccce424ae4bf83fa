"""MetaGraph files (``.meta``) read without TensorFlow: the graph's ops, collections and variables.

``tf.compat.v1.train.Saver.save`` writes a ``MetaGraphDef`` beside every checkpoint. This
module decodes the parts of it that say what the variables are and how the graph uses them,
with the wire-format reader of :mod:`~subsetsaver.formats.wire.protobuf`:

* the ``GraphDef``: every op (``NodeDef``: name, op type, inputs, attributes) and the function
  library (bodies of ``tf.cond``/``tf.while_loop`` v2 and ``tf.function``). The objects keep
  the field names of TensorFlow's protobuf classes (``node``, ``library.function``,
  ``signature.input_arg``, ``attr['T'].type``, ``HasField('func')``), so code that reads a
  live graph's ``as_graph_def()`` reads them unchanged. Attributes are decoded when first
  asked for: most ops' never are.
* the ``OpDef`` of every op type the graph uses (``meta_info_def.stripped_op_list``): which
  inputs take a variable, which attributes name functions.
* the collections: variable collections hold ``VariableDef`` messages (variable op, initializer,
  trainable, partition); the others list op or tensor names, numbers or bytes.

A file that is not a MetaGraphDef raises ``ValueError`` (the catalog words it for the user).

Example::

    meta = read_meta_graph(open('ckpt/model-100.meta', 'rb').read())
    meta.variable_defs('trainable_variables')[0].variable_name
    # 'conv_1/w:0'
    meta.graph_def.node[0].op
    # 'Placeholder'
"""

from __future__ import annotations

import dataclasses
import struct

from ..wire.protobuf import LENGTH_DELIMITED, Field, Message, decode, decode_varint, fields

__all__ = ["VARIABLE_COLLECTIONS", "AttrValue", "MetaGraph", "NodeDef", "OpDef", "VariableDef", "read_meta_graph", "shape_dims"]

_INT64_SIGN = 1 << 63


def _text(raw) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _int64(raw) -> int:
    return raw - (1 << 64) if raw >= _INT64_SIGN else raw


def _packed_or_single(wire_type, raw):
    """The numbers of a repeated varint field: packed (one length-delimited run) or one per field."""
    if wire_type != LENGTH_DELIMITED:
        return [raw]
    values, position = [], 0
    while position < len(raw):
        value, position = decode_varint(raw, position)
        values.append(value)
    return values


def _map_entry(raw):
    """(key bytes, value bytes) of a ``map<string, ...>`` entry."""
    key, value = b"", b""
    for number, _wire_type, field in fields(raw):
        if number == 1:
            key = field
        elif number == 2:
            value = field
    return _text(key), value


@dataclasses.dataclass
class Shape:
    """A ``TensorShapeProto``: ``dim`` sizes (-1 unknown) and ``unknown_rank``."""

    dim: list
    unknown_rank: bool = False


def shape_dims(shape):
    """A shape's dims as a tuple (None for an unknown dim), or None for an unknown rank."""
    if shape is None or shape.unknown_rank:
        return None
    return tuple(None if size == -1 else size for size in shape.dim)


def _shape(raw) -> Shape:
    dims, unknown_rank = [], False
    for number, wire_type, value in fields(raw):
        if number == 2 and wire_type == LENGTH_DELIMITED:
            size = 0
            for dim_number, dim_wire, dim_value in fields(value):
                if dim_number == 1 and dim_wire != LENGTH_DELIMITED:
                    size = _int64(dim_value)
            dims.append(size)
        elif number == 3:
            unknown_rank = bool(value)
    return Shape(dims, unknown_rank)


@dataclasses.dataclass
class NameAttrList:
    """A function reference: its ``name`` (its own attributes are not needed here)."""

    name: str


@dataclasses.dataclass
class ListValue:
    """``AttrValue.ListValue``: the lists of names, types, shapes, functions and numbers."""

    s: list = dataclasses.field(default_factory=list)
    i: list = dataclasses.field(default_factory=list)
    b: list = dataclasses.field(default_factory=list)
    type: list = dataclasses.field(default_factory=list)
    shape: list = dataclasses.field(default_factory=list)
    func: list = dataclasses.field(default_factory=list)


def _name_attr_list(raw) -> NameAttrList:
    name = b""
    for number, _wire_type, value in fields(raw):
        if number == 1:
            name = value
    return NameAttrList(_text(name))


def _list_value(raw) -> ListValue:
    found = ListValue()
    for number, wire_type, value in fields(raw):
        kind = _LIST_VALUE_FIELDS.get(number)
        if kind is not None:
            items = _packed_or_single(wire_type, value) if kind in _PACKABLE else (value,)
            getattr(found, kind).extend(map(_DECODE[kind], items))
    return found


def _float(raw) -> float:
    return struct.unpack("<f", raw.to_bytes(4, "little"))[0]


def _as_is(raw):
    return raw


_DECODE = {"list": _list_value, "s": _as_is, "i": _int64, "f": _float, "b": bool, "type": _as_is, "shape": _shape,
           "tensor": _as_is, "placeholder": _text, "func": _name_attr_list}
"""How each kind of attribute value is decoded from its field, in an ``AttrValue`` and in its list."""
_ATTR_VALUE_FIELDS = {1: "list", 2: "s", 3: "i", 4: "f", 5: "b", 6: "type", 7: "shape", 8: "tensor",
                      9: "placeholder", 10: "func"}
"""The kind of each field of ``AttrValue`` (a oneof)."""
_LIST_VALUE_FIELDS = {2: "s", 3: "i", 5: "b", 6: "type", 7: "shape", 9: "func"}
"""The kind of each field of ``AttrValue.ListValue`` read here (its floats and tensors are not needed)."""
_PACKABLE = frozenset({"i", "b", "type"})
"""Repeated numbers, which the wire may pack into one field."""


class AttrValue:
    """An ``AttrValue``: one of ``list``, ``s``, ``i``, ``f``, ``b``, ``type``, ``shape``, ``func``
    (``tensor`` and ``placeholder`` are kept as present only); ``HasField`` says which."""

    __slots__ = ("_which", "_value")

    _DEFAULTS = {"list": ListValue, "s": bytes, "i": int, "f": float, "b": bool, "type": int,
                 "shape": lambda: Shape([]), "func": lambda: NameAttrList(""), "tensor": bytes, "placeholder": str}

    def __init__(self, raw):
        self._which, self._value = None, None
        for number, _wire_type, value in fields(raw):  # a oneof: the last field on the wire wins
            kind = _ATTR_VALUE_FIELDS.get(number)
            if kind is not None:
                self._which, self._value = kind, _DECODE[kind](value)

    def HasField(self, name) -> bool:  # noqa: N802 - the protobuf method's name
        return self._which == name

    def __getattr__(self, name):
        if name not in AttrValue._DEFAULTS:
            raise AttributeError(name)
        return self._value if self._which == name else AttrValue._DEFAULTS[name]()

    def __repr__(self):
        return f"AttrValue({self._which}={self._value!r})"


class NodeDef:
    """A ``NodeDef``: ``name``, ``op``, ``input`` (``"name:port"``, ``"^control"``), ``device`` and
    ``attr`` (name -> :class:`AttrValue`, decoded when first asked for)."""

    __slots__ = ("name", "op", "input", "device", "_attr_entries", "_attr")

    def __init__(self, raw):
        name = op = device = b""
        inputs, entries = [], []
        for number, _wire_type, value in fields(raw):
            if number == 1:
                name = value
            elif number == 2:
                op = value
            elif number == 3:
                inputs.append(_text(value))
            elif number == 4:
                device = value
            elif number == 5:
                entries.append(value)
        self.name, self.op, self.device = _text(name), _text(op), _text(device)
        self.input = inputs
        self._attr_entries = entries
        self._attr = None

    @property
    def attr(self) -> dict:
        if self._attr is None:
            self._attr = {}
            for entry in self._attr_entries:
                key, value = _map_entry(entry)
                self._attr[key] = AttrValue(value)
            self._attr_entries = ()
        return self._attr

    def __repr__(self):
        return f"NodeDef(name={self.name!r}, op={self.op!r})"


@dataclasses.dataclass
class ArgDef:
    """``OpDef.ArgDef``: an input's or output's ``name``, fixed ``type`` (0 when an attribute sets it)
    and whether it takes a reference (``is_ref``)."""

    name: str
    type: int = 0
    is_ref: bool = False


@dataclasses.dataclass
class AttrDef:
    """``OpDef.AttrDef``: an attribute's ``name`` and ``type`` ('func', 'list(func)', 'type', ...)."""

    name: str
    type: str


@dataclasses.dataclass
class OpDef:
    """An ``OpDef`` (of a registered op or a function's signature): name, inputs, outputs, attributes."""

    name: str
    input_arg: list
    output_arg: list
    attr: list


_ARG_DEF = Message("ArgDef", Field(1, "name", "bytes"), Field(3, "type", "enum"), Field(16, "is_ref", "bool"))
_ATTR_DEF = Message("AttrDef", Field(1, "name", "bytes"), Field(2, "type", "bytes"))


def _arg_def(raw) -> ArgDef:
    found = decode(_ARG_DEF, raw)
    return ArgDef(_text(found.get("name", b"")), found.get("type", 0), found.get("is_ref", False))


def _attr_def(raw) -> AttrDef:
    found = decode(_ATTR_DEF, raw)
    return AttrDef(_text(found.get("name", b"")), _text(found.get("type", b"")))


def _op_def(raw) -> OpDef:
    name, inputs, outputs, attrs = b"", [], [], []
    for number, _wire_type, value in fields(raw):
        if number == 1:
            name = value
        elif number == 2:
            inputs.append(_arg_def(value))
        elif number == 3:
            outputs.append(_arg_def(value))
        elif number == 4:
            attrs.append(_attr_def(value))
    return OpDef(_text(name), inputs, outputs, attrs)


@dataclasses.dataclass
class FunctionDef:
    """A ``FunctionDef``: its ``signature`` (an :class:`OpDef`), ``node_def`` and ``ret``
    (output name -> ``"node:output:index"``)."""

    signature: OpDef
    node_def: list
    ret: dict


def _function_def(raw) -> FunctionDef:
    signature, nodes, returns = OpDef("", [], [], []), [], {}
    for number, _wire_type, value in fields(raw):
        if number == 1:
            signature = _op_def(value)
        elif number == 3:
            nodes.append(NodeDef(value))
        elif number == 4:
            key, target = _map_entry(value)
            returns[key] = _text(target)
    return FunctionDef(signature, nodes, returns)


@dataclasses.dataclass
class FunctionLibrary:
    function: list


@dataclasses.dataclass
class GraphDef:
    """A ``GraphDef``: ``node`` (the graph's ops, in creation order) and ``library``."""

    node: list
    library: FunctionLibrary


def _graph_def(raw) -> GraphDef:
    nodes, functions = [], []
    for number, _wire_type, value in fields(raw):
        if number == 1:
            nodes.append(NodeDef(value))
        elif number == 2:
            functions.extend(_function_def(f) for n, _w, f in fields(value) if n == 1)
    return GraphDef(nodes, FunctionLibrary(functions))


@dataclasses.dataclass(frozen=True)
class SaveSliceInfo:
    """``SaveSliceInfoDef``: one partition of a partitioned variable."""

    full_name: str
    full_shape: tuple
    var_offset: tuple
    var_shape: tuple


@dataclasses.dataclass(frozen=True)
class VariableDef:
    """A ``VariableDef`` of a variable collection: its tensor (``variable_name``, ``'w:0'``), initializer
    op, partition (``save_slice_info_def``, or None), and whether it is a resource variable and trainable."""

    variable_name: str
    initializer_name: str = ""
    snapshot_name: str = ""
    save_slice_info_def: SaveSliceInfo | None = None
    is_resource: bool = False
    trainable: bool = False

    @property
    def op_name(self) -> str:
        """The variable op's name: ``variable_name`` without ``:0``."""
        return self.variable_name.split(":", 1)[0]


def _slice_info(raw) -> SaveSliceInfo:
    name, lists = b"", {2: [], 3: [], 4: []}
    for number, wire_type, value in fields(raw):
        if number == 1:
            name = value
        elif number in lists:
            lists[number].extend(_int64(v) for v in _packed_or_single(wire_type, value))
    return SaveSliceInfo(_text(name), tuple(lists[2]), tuple(lists[3]), tuple(lists[4]))


def _variable_def(raw) -> VariableDef:
    values = {}
    for number, wire_type, value in fields(raw):
        if (wire_type == LENGTH_DELIMITED) != (number in (1, 2, 3, 4, 6)):
            raise ValueError(f"VariableDef field {number} has wire type {wire_type}")
        values[number] = value
    return VariableDef(
        variable_name=_text(values.get(1, b"")),
        initializer_name=_text(values.get(2, b"")),
        snapshot_name=_text(values.get(3, b"")),
        save_slice_info_def=_slice_info(values[4]) if 4 in values else None,
        is_resource=bool(values.get(5, 0)),
        trainable=bool(values.get(7, 0)),
    )


@dataclasses.dataclass
class Collection:
    """A ``CollectionDef``: ``kind`` ('node_list', 'bytes_list', 'int64_list', 'float_list' or
    'any_list') and its ``values`` (names as text, the rest as given)."""

    kind: str
    values: list


# The collections TensorFlow writes as VariableDef messages (``ops.register_proto_function``).
VARIABLE_COLLECTIONS = frozenset({"variables", "trainable_variables", "local_variables", "model_variables",
                                  "moving_average_variables", "global_step", "metric_variables"})
_COLLECTION_KINDS = {1: "node_list", 2: "bytes_list", 3: "int64_list", 4: "float_list", 5: "any_list"}


def _collection(raw) -> Collection:
    kind, values = "node_list", []
    for number, _wire_type, value in fields(raw):
        if number not in _COLLECTION_KINDS:
            continue
        kind, values = _COLLECTION_KINDS[number], []
        for item_number, item_wire, item in fields(value):
            if item_number != 1:
                continue
            if kind == "node_list":
                values.append(_text(item))
            elif kind == "int64_list":
                values.extend(_int64(v) for v in _packed_or_single(item_wire, item))
            elif kind == "float_list" and item_wire == LENGTH_DELIMITED:
                values.extend(struct.unpack(f"<{len(item) // 4}f", item))
            elif kind == "float_list":
                values.append(struct.unpack("<f", item.to_bytes(4, "little"))[0])
            else:
                values.append(item)
    return Collection(kind, values)


@dataclasses.dataclass
class MetaGraph:
    """What a ``.meta`` file says: ``graph_def`` (None when the file has none), ``collections``
    (key -> :class:`Collection`, in the file's order), ``op_defs`` (op type -> :class:`OpDef` of
    every op the graph uses) and ``tensorflow_version`` (of the writer, '' if not recorded)."""

    graph_def: GraphDef | None
    collections: dict
    op_defs: dict
    tensorflow_version: str = ""
    _variable_defs: dict = dataclasses.field(default_factory=dict, repr=False)

    def variable_defs(self, key) -> list:
        """The :class:`VariableDef` values of a variable collection (``'variables'``,
        ``'trainable_variables'``, ...; see :data:`VARIABLE_COLLECTIONS`), in order; [] for other keys.
        ValueError when one does not parse."""
        found = self._variable_defs.get(key)
        if found is None:
            collection = self.collections.get(key)
            found = []
            if key in VARIABLE_COLLECTIONS and collection is not None and collection.kind == "bytes_list":
                found = [_variable_def(value) for value in collection.values]
            self._variable_defs[key] = found
        return found


def read_meta_graph(data) -> MetaGraph:
    """The :class:`MetaGraph` in ``data`` (a binary ``MetaGraphDef``); ValueError when it does not parse."""
    graph_def, collections, op_defs, version = None, {}, {}, ""
    graph_runs = []
    for number, wire_type, value in fields(data):
        if wire_type != LENGTH_DELIMITED:
            if number in (1, 2, 3, 4):
                raise ValueError(f"MetaGraphDef field {number} has wire type {wire_type}")
            continue
        if number == 1:
            for info_number, _info_wire, info in fields(value):
                if info_number == 2:
                    for op_number, _op_wire, op in fields(info):
                        if op_number == 1:
                            op_def = _op_def(op)
                            op_defs[op_def.name] = op_def
                elif info_number == 5:
                    version = _text(info)
        elif number == 2:
            graph_runs.append(value)  # protobuf merges a message that appears twice
        elif number == 4:
            key, collection = _map_entry(value)
            collections[key] = _collection(collection)
    if graph_runs:
        graph_def = _graph_def(b"".join(graph_runs))
    return MetaGraph(graph_def, collections, op_defs, version)
