"""The op-level view of a graph: ops of a GraphDef and of every function body it calls.

Control flow v2 (``tf.cond``/``tf.while_loop`` in TF2) and ``tf.function`` bodies live
in the GraphDef's function library, not among the graph's ops. ``OpGraph`` joins them:
a function argument is linked to the inputs of every op that calls the function, and a
call's outputs to the function's return values, so tracing works across the boundary.

Example::

    ops = OpGraph(graph.as_graph_def())
    ops.variables_behind(ops.data_inputs('opt/update_w/ResourceApplyAdam')[1])
    # {'opt/w/Adam'}
"""

from __future__ import annotations

import collections
import functools
import re
import sys

from .. import tf_internals

DT_RESOURCE = 20
VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
ASSIGN_OPS = frozenset(
    {
        "Assign", "AssignAdd", "AssignSub",
        "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    }
)
_APPLY = re.compile(r"^(Resource)?(Sparse)?Apply[A-Z]")
_FUSED_BATCH_NORM = re.compile(r"^FusedBatchNorm(V\d)?$")
# Ops that hand on a variable itself (a reference or a resource handle) unchanged.
_HANDLE_PASS = frozenset({"RefIdentity", "RefEnter", "RefSwitch", "RefExit", "RefNextIteration"})
# Ops that hand on a value unchanged, or read a variable's value.
_VALUE_PASS = frozenset(
    {"Identity", "IdentityN", "Enter", "Switch", "Exit", "NextIteration", "Snapshot", "Cast", "ReadVariableOp"}
)
_FIRST_INPUT_IS_PREDICATE = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})
# Ops whose output is (one of) their inputs, unchanged: reaching them computes nothing.
PASS_OPS = frozenset(
    {
        "Identity", "IdentityN", "Snapshot", "ReadVariableOp", "_Arg",
        "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch", "Merge", "RefMerge",
        "NextIteration", "RefNextIteration", "RefIdentity",
        "StopGradient", "PreventGradient", "Print", "CheckNumerics", "EnsureShape", "PlaceholderWithDefault",
        "DeepCopy",
    }
)
_WRITE = re.compile(r"^(Resource)?(Scatter\w*|StridedSliceAssign|CountUpTo)$")
# Ops that end a flow without computing anything from the values they take.
INERT_OPS = frozenset(
    {
        "SaveV2", "Save", "SaveSlices", "Shape", "ShapeN", "Size", "Rank", "VariableShape",
        "VarIsInitializedOp", "IsVariableInitialized", "DestroyResourceOp", "Assert", "NoOp",
        # cond_v2 hands intermediates to its gradient wrapped in optionals; that is not a use
        "OptionalFromValue",
        # a snapshot for a background save (planning/background.py) is queued, not computed with
        "QueueEnqueueV2",
    }
)
_SUMMARY = re.compile(r"Summary")
_GRADIENT_ARGS = frozenset({"grad", "indices"})
_FUNCTION_ATTRS = frozenset({"func", "list(func)"})


_FILE_OP_DEFS = {}  # op type -> OpDef, from the op lists of the MetaGraph files read


def register_op_defs(op_defs) -> None:
    """Take the ``OpDef`` of each op type a MetaGraph file lists (op type -> OpDef), so that its graph
    is traced without TensorFlow. TensorFlow's own registry answers first when it is loaded."""
    new = {op_type: op_def for op_type, op_def in op_defs.items() if op_type not in _FILE_OP_DEFS}
    if new:
        _FILE_OP_DEFS.update(new)
        for cached in (gradient_inputs, may_call_functions, _output_offsets):
            cached.cache_clear()


def op_def(op_type):
    """The ``OpDef`` of ``op_type``: TensorFlow's registry if TensorFlow is loaded, else (or when it
    does not know the op) the one a MetaGraph file listed; None when neither knows it."""
    found = tf_internals.op_def(op_type) if sys.modules.get("tensorflow") is not None else None
    return found if found is not None else _FILE_OP_DEFS.get(op_type)


def is_apply_op(op_type: str) -> bool:
    """Optimizer update kernels: ApplyAdam, ResourceApplyMomentum, ResourceSparseApplyAdagrad, ..."""
    return bool(_APPLY.match(op_type))


def is_write(op_type: str) -> bool:
    """Ops that change a variable in place: Assign*, Scatter*, StridedSliceAssign, CountUpTo."""
    return op_type in ASSIGN_OPS or bool(_WRITE.match(op_type))


@functools.lru_cache(maxsize=None)
def ends_flow(op_type: str) -> bool:
    """Ops that take values without handing one on: writes, optimizer updates, savers, shape queries, summaries."""
    return is_write(op_type) or is_apply_op(op_type) or op_type in INERT_OPS or bool(_SUMMARY.search(op_type))


@functools.lru_cache(maxsize=None)
def inert(op_type: str) -> bool:
    """Ops that end a flow without computing anything: savers, shape queries, summaries, ..."""
    return op_type in INERT_OPS or bool(_SUMMARY.search(op_type))


@functools.lru_cache(maxsize=None)
def computes(op_type: str) -> bool:
    """Ops that compute something from their inputs (not a hand-on, write, update, saver or shape query)."""
    return op_type not in PASS_OPS and not ends_flow(op_type)


@functools.lru_cache(maxsize=None)
def gradient_inputs(op_type: str) -> frozenset:
    """Input positions of an optimizer update that carry the gradient (empty for other ops)."""
    if not is_apply_op(op_type):
        return frozenset()
    found = op_def(op_type)
    names = [arg.name for arg in found.input_arg] if found is not None else []
    return frozenset(i for i, name in enumerate(names) if name in _GRADIENT_ARGS)


@functools.lru_cache(maxsize=None)
def may_call_functions(op_type: str) -> bool:
    """Whether an op of ``op_type`` can call a function of the graph's library: its OpDef has a
    function attribute (``If``, ``While``, ``PartitionedCall``, ...), or it has no registered OpDef
    (a call of a library function by its name)."""
    found = op_def(op_type)
    return found is None or any(attr.type in _FUNCTION_ATTRS for attr in found.attr)


def is_fused_batch_norm(op_type: str) -> bool:
    return bool(_FUSED_BATCH_NORM.match(op_type))


class OpGraph:
    """Ops keyed by name (``fn::op`` inside function bodies) with their inputs."""

    def __init__(self, graph_def):
        self.type = {}
        self.node_defs = {}
        self.inputs = {}            # key -> [(source key, port)]
        self.control_inputs = {}    # key -> [source key]
        self.returns = {}           # call key -> {port: [(source key, port)]}
        self._arg_callers = collections.defaultdict(list)  # arg key -> [(source key, port)]
        self._consumers = None
        self._function_args = {}      # function name -> [arg key]
        self._function_returns = {}   # function name -> [(source key, port)] per output
        functions = {f.signature.name: f for f in graph_def.library.function}
        self._add_outer_nodes(graph_def.node)
        for function in functions.values():
            self._add_function(function)
        if functions:  # most TF1 graphs call no function: skip reading every op's attributes
            for key in list(self.type):
                self._link_calls(key, functions)

    # -- building -------------------------------------------------------------------
    def _add_outer_nodes(self, nodes):
        """:meth:`_add_node` for the graph's own ops ("name" or "name:port" inputs), in one loop."""
        types, node_defs, inputs, control_inputs = self.type, self.node_defs, self.inputs, self.control_inputs
        for node in nodes:
            key = node.name
            types[key] = node.op
            node_defs[key] = node
            data, control = [], []
            for text in node.input:
                if text[:1] == "^":
                    control.append(text[1:])
                else:
                    source, colon, port = text.partition(":")
                    data.append((source, int(port) if colon else 0))
            inputs[key] = data
            control_inputs[key] = control

    def _add_node(self, key, node, prefix, local_outputs):
        self.type[key] = node.op
        self.node_defs[key] = node
        data, control = [], []
        for text in node.input:
            if text.startswith("^"):
                control.append(prefix + text[1:])
            else:
                data.append(self._source(text, prefix, local_outputs))
        self.inputs[key] = data
        self.control_inputs[key] = control

    def _source(self, text, prefix, local_outputs):
        parts = text.split(":")
        if not prefix:  # outer graph: "name" or "name:port"
            return parts[0], int(parts[1]) if len(parts) > 1 else 0
        if len(parts) == 1:  # a function argument
            return prefix + parts[0], 0
        node, output_name, index = parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0
        return prefix + node, local_outputs.get(node, {}).get(output_name, 0) + index

    def _add_function(self, function):
        prefix = function.signature.name + "::"
        for arg in function.signature.input_arg:
            self.type[prefix + arg.name] = "_Arg"
            self.inputs[prefix + arg.name] = []
            self.control_inputs[prefix + arg.name] = []
        local_outputs = {node.name: _output_offsets(node.op) for node in function.node_def}
        for node in function.node_def:
            self._add_node(prefix + node.name, node, prefix, local_outputs)
        self._function_returns[function.signature.name] = [
            self._source(function.ret[arg.name], prefix, local_outputs)
            for arg in function.signature.output_arg
        ]
        self._function_args[function.signature.name] = [prefix + a.name for a in function.signature.input_arg]

    def _link_calls(self, key, functions):
        node = self.node_defs.get(key)
        if node is None or not may_call_functions(node.op):
            return
        called = []
        for attr, value in sorted(node.attr.items()):  # by name: one order whoever decoded the node
            if value.HasField("func"):
                called.append((attr, value.func.name))
            elif value.HasField("list"):
                called.extend((attr, f.name) for f in value.list.func)
        called = [(attr, name) for attr, name in called if name in functions]
        if not called:
            return
        offset = 1 if node.op in _FIRST_INPUT_IS_PREDICATE else 0
        data = self.inputs[key][offset:]
        returns = collections.defaultdict(list)
        for attr, name in called:
            for arg_key, source in zip(self._function_args[name], data):
                self._arg_callers[arg_key].append(source)
                self.inputs[arg_key].append(source)
            if attr == "cond":  # a while loop's condition returns the predicate, not the loop's outputs
                continue
            for port, source in enumerate(self._function_returns[name]):
                returns[port].append(source)
        self.returns[key] = dict(returns)

    # -- queries --------------------------------------------------------------------
    def keys_of_type(self, predicate):
        """The keys whose op type ``predicate`` accepts, in the graph's order (asked once per type)."""
        accepted = {op_type: bool(predicate(op_type)) for op_type in set(self.type.values())}
        return [key for key, op_type in self.type.items() if accepted[op_type]]

    def attr_type(self, key, attr="T"):
        node = self.node_defs.get(key)
        if node is None or attr not in node.attr:
            return None
        return node.attr[attr].type

    def consumers(self):
        """key -> [(consumer key, input index)], data edges only."""
        if self._consumers is None:
            consumers = collections.defaultdict(list)
            for key, sources in self.inputs.items():
                for index, (source, _port) in enumerate(sources):
                    consumers[source].append((key, index))
            self._consumers = consumers
        return self._consumers

    def upstream(self, key, port):
        """The (key, port) pairs whose value ``(key, port)`` hands on unchanged, one step up."""
        op_type = self.type.get(key)
        if op_type == "_Arg":
            return list(self._arg_callers.get(key, ()))
        if key in self.returns:
            return list(self.returns[key].get(port, ()))
        sources = self.inputs.get(key, ())
        if op_type == "IdentityN":
            return [sources[port]] if port < len(sources) else []
        if op_type in _HANDLE_PASS or op_type in _VALUE_PASS:
            return sources[:1]
        return []

    def variables_behind(self, source, *, through_reads=True):
        """Variable op names whose handle, reference or value reaches ``source`` unchanged.

        ``through_reads=False`` follows only the variable itself (a resource handle or a
        reference), never a read of its value.
        """
        found, seen, stack = set(), set(), [source]
        while stack:
            key, port = stack.pop()
            if (key, port) in seen:
                continue
            seen.add((key, port))
            op_type = self.type.get(key)
            if op_type in VARIABLE_OPS:
                found.add(key)
                continue
            if not through_reads and not self._hands_on_variable(key, op_type):
                continue
            stack.extend(self.upstream(key, port))
        return found

    def _hands_on_variable(self, key, op_type):
        if op_type in _HANDLE_PASS or op_type == "_Arg" or key in self.returns:
            return True
        if op_type in ("Identity", "IdentityN", "Enter", "Switch", "Exit"):
            return self.attr_type(key) == DT_RESOURCE
        return False

    def upstream_keys(self, key, max_depth, stop=lambda key: False):
        """Keys reachable backwards from ``key`` over data edges within ``max_depth`` hops."""
        seen, frontier = {key}, [key]
        for _ in range(max_depth):
            following = []
            for current in frontier:
                if stop(current):
                    continue
                sources = [s for s, _ in self.inputs.get(current, ())]
                for port_sources in self.returns.get(current, {}).values():
                    sources.extend(s for s, _ in port_sources)
                for source in sources:
                    if source not in seen:
                        seen.add(source)
                        following.append(source)
            frontier = following
        return seen


@functools.lru_cache(maxsize=None)
def _output_offsets(op_type):
    """Output argument name -> flat port, for ops whose outputs are single tensors."""
    found = op_def(op_type)
    if found is None:
        return {}
    return {arg.name: position for position, arg in enumerate(found.output_arg)}


def input_is_variable(op_type, index) -> bool:
    """Whether input ``index`` of ``op_type`` takes a variable (reference or resource)."""
    found = op_def(op_type)
    if found is None or index >= len(found.input_arg):
        return False
    arg = found.input_arg[index]
    return arg.is_ref or arg.type == DT_RESOURCE
