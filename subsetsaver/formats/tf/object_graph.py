"""TensorFlow 2 object-based checkpoints: the object graph beside the tensors, read without TensorFlow.

``tf.train.Checkpoint`` and Keras's ``save_weights`` (TensorFlow format) key each tensor by the
attribute names from the saved root object down to the variable
(``model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE``; a slot of the optimizer under its
variable, ``.../kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE``) and store the
graph of those objects, a serialized ``TrackableObjectGraph``, as the string tensor
``_CHECKPOINTABLE_OBJECT_GRAPH``. Each node of it lists its children (node and attribute name),
its tensors (attribute name, the variable's full name as TensorFlow named it, the checkpoint
key) and, on an optimizer, its slot variables (original variable, slot name, slot variable).

:func:`read_object_graph` decodes and checks that graph and tells, for each tensor of the
checkpoint it names (an :class:`ObjectVariable`): its key, its *object path* (the key without
``/.ATTRIBUTES/VARIABLE_VALUE``), its recorded full name and, for an optimizer's state, which
optimizer, what it is (a slot, the iteration counter or a hyperparameter) and for a slot the key
of the variable it belongs to and the slot's name. Optimizers keep their state in one of two
layouts (an :class:`Optimizer` says which):

* ``slot_variables`` (tf_keras's legacy optimizers, ``tf.compat.v1.train`` optimizers run
  eagerly): the node lists its slots; its iteration counter is the child ``iter``; its other
  variable children (``beta_1``, ``learning_rate``, ``beta1_power``...) are hyperparameters.
* ``lists`` (Keras 3, and tf_keras's optimizers since TF 2.11): the node has ``_iterations`` and
  ``_variables``, the list of every variable the optimizer made. Each other list among its
  children whose elements all lie in ``_variables`` holds slots (``_momentums``, slot name
  ``momentums``): element *i* belongs to element *i* of the ``_trainable_variables`` list (Keras
  3) or, where no such list is saved (tf_keras), to the variable whose full name ends the
  slot's (``Adam/m/dense/kernel`` belongs to ``dense/kernel``) and whose shape is the slot's.
  The optimizer's other variables are hyperparameters (``_learning_rate``).

A graph that does not parse, refers to nodes it does not have, or gives one tensor to two
objects raises :class:`~subsetsaver.errors.CorruptCheckpointError` naming the checkpoint.

Example::

    with bundle.BundleReader('/ckpt/weights') as reader:
        graph = read_object_graph(reader)
    graph.tensors['layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE']
    # ObjectVariable(key='layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE',
                   # object_path='layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m',
                   # full_name='Adam/dense/kernel/m', ..., role='slot',
                   # slot_of='layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE', slot_name='m')
"""

from __future__ import annotations

import dataclasses
import functools

from ...errors import clipped
from ..wire.protobuf import Field, Message, decode
from .bundle.problems import corrupt

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VARIABLE_VALUE = "VARIABLE_VALUE"
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
COUNTER_NAMES = ("iter", "iterations", "_iterations")
SLOT, ITERATIONS, HYPERPARAMETER = "slot", "iterations", "hyperparameter"
_INTEGER_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
_SUBJECT = f"its object graph (tensor '{OBJECT_GRAPH_KEY}')"

# trackable_object_graph.proto (registered_saver and has_checkpoint_values are not needed here)
OBJECT_REFERENCE = Message(
    "TrackableObject.ObjectReference",
    Field(1, "node_id", "int32"),
    Field(2, "local_name", "bytes"),
)
SERIALIZED_TENSOR = Message(
    "TrackableObject.SerializedTensor",
    Field(1, "name", "bytes"),
    Field(2, "full_name", "bytes"),
    Field(3, "checkpoint_key", "bytes"),
)
SLOT_VARIABLE_REFERENCE = Message(
    "TrackableObject.SlotVariableReference",
    Field(1, "original_variable_node_id", "int32"),
    Field(2, "slot_name", "bytes"),
    Field(3, "slot_variable_node_id", "int32"),
)
TRACKABLE_OBJECT = Message(
    "TrackableObject",
    Field(1, "children", OBJECT_REFERENCE, repeated=True),
    Field(2, "attributes", SERIALIZED_TENSOR, repeated=True),
    Field(3, "slot_variables", SLOT_VARIABLE_REFERENCE, repeated=True),
)
TRACKABLE_OBJECT_GRAPH = Message("TrackableObjectGraph", Field(1, "nodes", TRACKABLE_OBJECT, repeated=True))


@dataclasses.dataclass(frozen=True)
class ObjectVariable:
    """One tensor the object graph names: ``full_name`` is '' when TensorFlow recorded none;
    ``local_names`` are the attribute names its object has in its parents (``('kernel',)``).
    For an optimizer's state, ``optimizer`` is the index of its :class:`Optimizer` and ``role`` one
    of 'slot', 'iterations', 'hyperparameter'; a slot's ``slot_of`` is the key of the variable it
    belongs to (None when the graph does not tell) and ``slot_name`` its name ('m', 'momentums')."""

    key: str
    object_path: str
    full_name: str
    attribute: str
    node: int
    local_names: tuple = ()
    optimizer: int | None = None
    role: str | None = None
    slot_of: str | None = None
    slot_name: str | None = None


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """One optimizer of the graph: its node, its ``layout`` ('slot_variables' or 'lists'), the key
    of its iteration counter (None if it has none), its hyperparameters (``{attribute name: key}``,
    e.g. ``{'beta_1': 'optimizer/beta_1/.ATTRIBUTES/VARIABLE_VALUE'}``) and the keys of its slots."""

    node: int
    layout: str
    iterations: str | None
    hyperparameters: dict
    slots: tuple


@dataclasses.dataclass(frozen=True)
class ObjectGraph:
    """The decoded graph of checkpoint ``prefix``: ``tensors`` (key -> :class:`ObjectVariable`) for
    every tensor of the checkpoint that a node names, and its ``optimizers``."""

    prefix: str
    tensors: dict
    optimizers: tuple


def object_path(key) -> str:
    """``key`` without ``/.ATTRIBUTES/VARIABLE_VALUE``: ``object_path('model/w/.ATTRIBUTES/VARIABLE_VALUE') == 'model/w'``."""
    return key[:-len(VALUE_SUFFIX)] if key.endswith(VALUE_SUFFIX) and len(key) > len(VALUE_SUFFIX) else key


def is_object_based(reader) -> bool:
    """Whether the open :class:`~subsetsaver.formats.tf.bundle.BundleReader` holds an object graph."""
    return OBJECT_GRAPH_KEY in reader.specs


def read_object_graph(reader):
    """The :class:`ObjectGraph` of an open :class:`~subsetsaver.formats.tf.bundle.BundleReader`, or
    None for a name-based checkpoint (no ``_CHECKPOINTABLE_OBJECT_GRAPH``)."""
    if not is_object_based(reader):
        return None
    spec = reader.specs[OBJECT_GRAPH_KEY]
    if spec.dtype != "string" or tuple(spec.shape) != ():
        raise corrupt(reader.prefix, _SUBJECT, f"is a {spec.dtype} tensor of shape {list(spec.shape)}, not one string")
    data = reader.read(OBJECT_GRAPH_KEY).item()
    specs = {name: reader.specs[name] for name in reader.names if name != OBJECT_GRAPH_KEY}
    return parse_object_graph(data, reader.prefix, specs)


def parse_object_graph(data, prefix, specs) -> ObjectGraph:
    """The :class:`ObjectGraph` in ``data`` (a serialized TrackableObjectGraph) of checkpoint ``prefix``,
    whose tensors are ``specs`` (key -> an object with ``shape`` and ``dtype``)."""
    try:
        nodes = decode(TRACKABLE_OBJECT_GRAPH, data).get("nodes", [])
    except ValueError as error:
        raise corrupt(prefix, _SUBJECT, f"does not parse as a TrackableObjectGraph ({error})") from None
    return _Reading(prefix, nodes, specs).graph()


class _Reading:
    """One pass over the nodes: tensors, the names objects have in their parents, then optimizers."""

    def __init__(self, prefix, nodes, specs):
        self.prefix, self.nodes, self.specs = prefix, nodes, specs
        self.children = [self._children(index, node) for index, node in enumerate(nodes)]
        self.value_key = {}  # node -> key of its VARIABLE_VALUE tensor (tensors the checkpoint holds)
        self._members = {}  # list node -> its members, found once however many optimizers ask
        self.tensors = {}
        local_names = {}
        for index in range(len(nodes)):
            for local, child in self.children[index]:
                local_names.setdefault(child, []).append(local)
        claimed = {}
        for index, node in enumerate(nodes):
            for attribute in node.get("attributes", []):
                key = self._text(attribute.get("checkpoint_key", b""), f"node {index}'s checkpoint key")
                name = self._text(attribute.get("name", b""), f"node {index}'s attribute name")
                if not key or key == OBJECT_GRAPH_KEY:
                    raise self._corrupt(f"gives node {index} a tensor with the key {key!r}")
                if key in claimed:
                    raise self._corrupt(f"gives tensor '{clipped(key)}' to nodes {claimed[key]} and {index}")
                claimed[key] = index
                if key not in specs:
                    continue  # a value saved elsewhere (or not at all): the checkpoint lists what it holds
                if name == VARIABLE_VALUE:
                    if index in self.value_key:
                        raise self._corrupt(f"gives node {index} two variable values")
                    self.value_key[index] = key
                self.tensors[key] = ObjectVariable(
                    key=key, object_path=object_path(key), attribute=name, node=index,
                    full_name=self._text(attribute.get("full_name", b""), f"the full name of tensor '{clipped(key)}'"),
                    local_names=tuple(dict.fromkeys(local_names.get(index, ()))))

    def graph(self) -> ObjectGraph:
        optimizers, owned = [], {}  # owned: key -> (optimizer index, role, slot_of, slot_name)
        self.optimizer_of = {}  # counter and variable-list node -> the optimizer node that has it
        for index in range(len(self.nodes)):
            found = self._optimizer(index, len(optimizers), owned)
            if found is not None:
                optimizers.append(found)
        tensors = {key: dataclasses.replace(value, **owned[key]) if key in owned else value
                   for key, value in self.tensors.items()}
        return ObjectGraph(self.prefix, tensors, tuple(optimizers))

    # -- optimizers -------------------------------------------------------------------

    def _optimizer(self, index, number, owned):
        node, children = self.nodes[index], {}
        for name, child in self.children[index]:
            children.setdefault(name, child)  # the first of a name wins
        references = node.get("slot_variables", [])
        counter = next((children[name] for name in COUNTER_NAMES if self._is_counter(children.get(name))), None)
        members = self._list_members(children.get("_variables"))
        if references:
            layout = "slot_variables"
        elif counter is not None and members:
            layout = "lists"
        elif counter is not None and "iter" in children and children["iter"] == counter and all(
                self._is_scalar(child) for child in children.values() if child in self.value_key):
            layout = "slot_variables"  # a legacy Keras optimizer before its first step: no slots yet
        else:
            return None
        for held in (counter, children.get("_variables")):
            # An optimizer's counter and variable list are its own: shared, every optimizer would walk them again.
            if held is not None and self.optimizer_of.setdefault(held, index) != index:
                raise self._corrupt(f"gives node {held} to the optimizers of nodes {self.optimizer_of[held]} "
                                    f"and {index}")
        slots = self._slot_references(index, references) if references else self._slot_lists(children, members,
                                                                                                counter)
        taken = {self.value_key[counter]} if counter is not None else set()
        slot_keys = []
        for key, slot_of, slot_name in slots:
            if key in owned or key in taken:
                raise self._corrupt(f"makes tensor '{key}' the state of two optimizers, or two states of one")
            owned[key] = {"optimizer": number, "role": SLOT, "slot_of": slot_of, "slot_name": slot_name}
            taken.add(key)
            slot_keys.append(key)
        hyperparameters = {}
        candidates = [(name.lstrip("_") or name, child) for name, child in children.items() if child in self.value_key]
        candidates += [(f"_variables/{name}", child) for name, child in members]
        for name, child in candidates:
            key = self.value_key[child]
            if key not in taken and key not in owned:
                hyperparameters[name] = key
                owned[key] = {"optimizer": number, "role": HYPERPARAMETER}
                taken.add(key)
        iterations = None
        if counter is not None and self.value_key[counter] not in owned:
            iterations = self.value_key[counter]
            owned[iterations] = {"optimizer": number, "role": ITERATIONS}
        return Optimizer(index, layout, iterations, hyperparameters, tuple(slot_keys))

    def _slot_references(self, index, references):
        slots = {reference.get("slot_variable_node_id", 0) for reference in references}
        for reference in references:
            original = self._node(reference.get("original_variable_node_id", 0), index)
            slot = self._node(reference.get("slot_variable_node_id", 0), index)
            name = self._text(reference.get("slot_name", b""), f"a slot name of node {index}")
            if original == slot or original in slots:
                # A slot of itself or of another slot: written as its own owner, the variable's value would be lost.
                raise self._corrupt(f"makes node {slot} the slot {clipped(name)!r} of node {original}, which is "
                                    f"{'the slot itself' if original == slot else 'itself a slot'}")
            if slot in self.value_key:
                yield self.value_key[slot], self.value_key.get(original), name

    def _slot_lists(self, children, members, counter):
        """(key, key of its variable, slot name) of each slot in the lists whose elements are all optimizer variables."""
        member_nodes = {child for _, child in members} - {counter}
        trainables = dict(self._list_members(children.get("_trainable_variables")))
        for name, child in children.items():
            if name in ("_variables", "_trainable_variables") or child in self.value_key:
                continue
            elements = self._list_members(child)
            if not elements or not all(element in member_nodes for _, element in elements):
                continue
            for position, element in elements:
                key = self.value_key[element]
                if trainables:
                    owner = self.value_key.get(trainables.get(position))
                else:
                    owner = self._owner_by_full_name(key, member_nodes)
                if owner == key:
                    raise self._corrupt(f"makes tensor '{clipped(key)}' a slot of itself")
                yield key, owner, name.lstrip("_") or name

    def _owner_by_full_name(self, key, member_nodes):
        """tf_keras names a slot OPTIMIZER/SLOT/VARIABLE: the one variable of that full name and the slot's shape
        that is not one of the optimizer's own variables."""
        parts = self.tensors[key].full_name.split("/", 2)
        if len(parts) < 3:
            return None
        shape = tuple(self.specs[key].shape)
        found = [other for other in self._by_full_name.get(parts[2], ())
                 if self.tensors[other].node not in member_nodes and tuple(self.specs[other].shape) == shape]
        return found[0] if len(found) == 1 else None

    @functools.cached_property
    def _by_full_name(self):
        """Full name -> keys of the variable values of that name (made once: every optimizer looks here)."""
        found = {}
        for key, value in self.tensors.items():
            if value.attribute == VARIABLE_VALUE:
                found.setdefault(value.full_name, []).append(key)
        return found

    def _list_members(self, index):
        """``[(position, node), ...]`` of a list object whose elements are all variables; [] otherwise."""
        if index not in self._members:
            self._members[index] = self._find_members(index)
        return self._members[index]

    def _find_members(self, index):
        if index is None or index in self.value_key:
            return []
        members = self.children[index]
        if not members or not all(local.isdigit() and child in self.value_key for local, child in members):
            return []
        return members

    def _is_scalar(self, index):
        return index in self.value_key and tuple(self.specs[self.value_key[index]].shape) == ()

    def _is_counter(self, index):
        return self._is_scalar(index) and self.specs[self.value_key[index]].dtype in _INTEGER_TYPES

    # -- checks ------------------------------------------------------------------------

    def _children(self, index, node):
        found = []
        for reference in node.get("children", []):
            child = self._node(reference.get("node_id", 0), index)
            found.append((self._text(reference.get("local_name", b""), f"a child's name in node {index}"), child))
        return found

    def _node(self, number, referrer):
        if not 0 <= number < len(self.nodes):
            raise self._corrupt(f"refers from node {referrer} to node {number}, but has {len(self.nodes)} nodes")
        return number

    def _text(self, raw, what):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._corrupt(f"has {what} that is not UTF-8 text") from None

    def _corrupt(self, problem):
        return corrupt(self.prefix, _SUBJECT, problem)
