"""Who reads and who writes each variable: the dataflow the auditor reasons over.

Built from :class:`~subsetsaver.catalog.op_graph.OpGraph`, which already joins the bodies of
``tf.cond``/``tf.while_loop`` v2 and ``tf.function``. Two directed graphs over op keys
(``fn::op`` inside a function body), walked straight from the OpGraph's inputs and
consumers rather than copied (a 10^5-op graph has no time for copies; importing
networkx alone takes longer than auditing a ResNet-50). :meth:`Dataflow.to_networkx`
hands either one to networkx:

* ``deps``: ``u -> v`` when ``v`` cannot run before ``u``: data and control inputs,
  and every op of a function body into each op that calls the function.
* ``values``: ``u -> v`` when ``u``'s value flows into ``v``. A call's outputs are
  nodes ``(call, port)``, so a value returned by one branch reaches only the
  consumers of that output. Writes, optimizer updates, savers and shape queries end a
  flow; a value that enters an optimizer update as its gradient, or decides which
  branch of a cond runs, flows into the node :data:`USE`.

A variable's *reads* are the ops that take its value: follow its reference or
resource handle through ``Identity``/``Switch``/``Enter``/function arguments to the
first op that is not an assignment, optimizer update, saver or shape query.

Example::

    flow = dataflow(catalog.load(graph))
    flow.forward_reader('block/bn/moving_mean')
    # 'block/bn/FusedBatchNormInference'
"""

from __future__ import annotations

import collections
import contextlib
import gc
import weakref

from .op_graph import DT_RESOURCE, VARIABLE_OPS, input_is_variable, is_apply_op, is_write, may_call_functions
from .op_graph import INERT_OPS as _INERT
from .op_graph import PASS_OPS as _PASS
from .op_graph import computes as _computes
from .op_graph import ends_flow as _ends_flow
from .op_graph import gradient_inputs as _gradient_inputs
from .op_graph import inert as _inert
from .walks import closure, reaches

USE = "<use>"
"""Where a value goes when it feeds an optimizer update as its gradient, or decides
which branch of a ``tf.cond`` runs."""

_CALL_WITH_PREDICATE = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})
_ALWAYS_HANDLE = frozenset({"RefIdentity", "RefEnter", "RefSwitch", "RefExit", "RefNextIteration", "RefMerge", "_Arg"})
_HANDLE_IF_RESOURCE = frozenset({"Identity", "IdentityN", "Enter", "Switch", "Exit", "Merge", "NextIteration"})
_RESTORE = frozenset({"RestoreV2", "Restore", "RestoreSlice"})
_SWITCH = frozenset({"Switch", "RefSwitch"})
_METADATA = frozenset({"Shape", "ShapeN", "Size", "Rank", "VariableShape"})
_REF_WRITES = frozenset({"Assign", "AssignAdd", "AssignSub"})
_NEARBY_BUDGET = 20_000  # ops may_be_read_forward looks at, at least, before it leaves the question to the dataflow


@contextlib.contextmanager
def no_garbage_collection():
    """Pause the cyclic garbage collector while building big acyclic structures.

    With a large TensorFlow graph in memory every collection walks all of it; pausing
    halves the time to read a 10^5-op graph.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Dataflow:
    """Ops, variables, their reads and writes, for one graph; see the module docstring."""

    def __init__(self, ops, variable_of, initializers=()):
        self.ops = ops
        self.memo = {}  # results that depend on the graph alone, kept by their users
        self._consumers = ops.consumers()
        self._control_consumers = None
        self._bodies = None
        self._reaches_use = {}

        functions = {key.split("::", 1)[0] for key in ops.type if "::" in key} if ops.returns else set()
        self._calls = {}                                   # call key -> functions it runs
        self._callers = collections.defaultdict(list)      # function -> call keys
        for key in ops.returns:                            # exactly the ops that call functions
            self._calls[key] = _called_functions(ops.node_defs[key], functions)
            for name in self._calls[key]:
                self._callers[name].append(key)
        self._returned_to = collections.defaultdict(list)  # body key -> [(call, port, body port)]
        for call, returns in ops.returns.items():
            for port, sources in returns.items():
                for source, source_port in sources:
                    self._returned_to[source].append((call, port, source_port))

        self.variable_of = dict(variable_of)               # variable op key -> logical name
        self.variable_names = frozenset(self.variable_of.values())
        self.initializers = frozenset(initializers)        # the variables' initializer ops
        self.reads = collections.defaultdict(list)    # name -> ops that take its value
        self.writes = collections.defaultdict(list)   # name -> ops that change it (initializers included)
        for key, name in self.variable_of.items():
            if key in ops.type:
                self._collect_users(key, name)
        self._target_of = {w: name for name, keys in self.writes.items() for w in keys}

    # -- reads and writes -------------------------------------------------------------
    def _collect_users(self, variable_key, name):
        """Follow the variable's reference or handle to the ops that use it."""
        ops = self.ops
        stack, seen = [(variable_key, 0)], set()
        while stack:
            key, port = stack.pop()
            if (key, port) in seen:
                continue
            seen.add((key, port))
            for consumer, index in self._consumers_of(key, port):
                op_type = ops.type[consumer]
                if consumer in self._calls and not (op_type in _CALL_WITH_PREDICATE and index == 0):
                    continue  # the handle goes on into the function's argument
                if self._hands_on_variable(consumer, op_type, index):
                    stack.extend(_outputs_passing(consumer, op_type, index))
                elif is_write(op_type) and index == 0:
                    self.writes[name].append(consumer)
                    if op_type in _REF_WRITES:  # tf.assign on a reference variable hands the variable on
                        stack.append((consumer, 0))
                elif is_apply_op(op_type):
                    if not input_is_variable(op_type, index):  # a gradient accumulator applied as the gradient
                        self.reads[name].append(consumer)
                elif op_type in _INERT or op_type in VARIABLE_OPS:
                    continue
                else:
                    self.reads[name].append(consumer)
            stack.extend((call, call_port) for call, call_port, p in self._returned_to.get(key, ()) if p == port)

    def _consumers_of(self, key, port):
        inputs = self.ops.inputs
        return [(c, i) for c, i in self._consumers.get(key, ()) if inputs[c][i][1] == port]

    def _hands_on_variable(self, key, op_type, index):
        if op_type in _ALWAYS_HANDLE:
            return not (op_type == "RefSwitch" and index == 1)
        if op_type in _HANDLE_IF_RESOURCE:
            if op_type == "Switch" and index == 1:
                return False
            return self.ops.attr_type(key) == DT_RESOURCE or self.ops.attr_type(key, "Tin") == DT_RESOURCE
        return False

    # -- the values graph ---------------------------------------------------------------
    def value_successors(self, node) -> list:
        """Where ``node``'s value flows next: op keys, ``(call, port)`` or :data:`USE`."""
        ops = self.ops
        if isinstance(node, tuple):
            call, port = node
            following = [t for c, i in self._consumers_of(call, port) for t in self._value_targets(c, i)]
            following.extend((c, p) for c, p, source_port in self._returned_to.get(call, ()) if source_port == port)
            return following
        if node == USE or _ends_flow(ops.type[node]):
            return []
        following = [t for c, i in self._consumers.get(node, ()) for t in self._value_targets(c, i)]
        following.extend((c, p) for c, p, _ in self._returned_to.get(node, ()))
        return following

    def _value_targets(self, consumer, index):
        op_type = self.ops.type[consumer]
        if consumer in self._calls:  # the value goes on through the function's argument
            return [USE] if op_type in _CALL_WITH_PREDICATE and index == 0 else []
        gradient = _gradient_inputs(op_type)
        if gradient or is_apply_op(op_type):
            return [USE] if index in gradient else []  # learning rates and the like end here
        return [consumer]

    def _is_use(self, node):
        """An output nothing consumes: what a program fetches (``output``, ``loss``...)."""
        if node == USE:
            return True
        if isinstance(node, tuple) or node in self._calls or _ends_flow(self.ops.type[node]):
            return False
        return not self._consumers.get(node) and node not in self._returned_to

    def value_node(self, key, port=0):
        """The values-graph node of output ``port`` of op ``key``: ``(call, port)`` for a call."""
        return (key, port) if key in self._calls else key

    def value_predecessors(self, node) -> list:
        """The nodes whose value flows straight into ``node`` (the reverse of :meth:`value_successors`)."""
        if node == USE:
            return []
        ops = self.ops
        if isinstance(node, tuple):
            return [self.value_node(s, p) for s, p in ops.returns.get(node[0], {}).get(node[1], ())]
        if ops.type.get(node) in VARIABLE_OPS:
            return []
        return [self.value_node(s, p) for s, p in ops.inputs.get(node, ())]

    def value_consumers(self, node) -> list:
        """``(op, input index)`` of every op that takes ``node``'s value as an input."""
        if node == USE:
            return []
        if isinstance(node, tuple):
            return self._consumers_of(*node)
        return list(self._consumers.get(node, ()))

    def data_successors(self, node) -> list:
        """:meth:`value_successors` without the predicate edge of a v1 ``Switch``: what is
        computed *from* ``node``, not merely decided by it."""
        if isinstance(node, tuple) or node == USE:
            return self.value_successors(node)
        if _ends_flow(self.ops.type[node]):
            return []
        following = [
            t for c, i in self._consumers.get(node, ())
            if not (i == 1 and self.ops.type[c] in _SWITCH) for t in self._value_targets(c, i)
        ]
        following.extend((c, p) for c, p, _ in self._returned_to.get(node, ()))
        return following

    def value_inputs(self, key) -> list:
        """The values an update op ``key`` writes (every input that is not the variable itself)."""
        op_type = self.ops.type[key]
        return [
            self.value_node(source, port) for index, (source, port) in enumerate(self.ops.inputs[key])
            if not input_is_variable(op_type, index)
        ]

    def ends_flow(self, node) -> bool:
        """Whether ``node`` takes values without handing one on: a write, an optimizer update, a saver."""
        return not isinstance(node, tuple) and node != USE and _ends_flow(self.ops.type[node])

    def computes(self, node) -> bool:
        """Whether ``node`` computes something (not a hand-on, write, update, saver or shape query)."""
        return not isinstance(node, tuple) and node != USE and _computes(self.ops.type[node])

    def is_output(self, node) -> bool:
        """A value nothing uses but inert ops (shape queries, summaries): a fetch such as the loss.
        Unlike :meth:`_is_use`, an optimizer update's gradient or a branch predicate is no output."""
        if node == USE or isinstance(node, tuple) or node in self._calls or _ends_flow(self.ops.type[node]):
            return False
        if node in self._returned_to:
            return False
        following = self.value_successors(node)
        if any(isinstance(t, tuple) or t == USE or not _inert(self.ops.type[t]) for t in following):
            return False
        # consumed by nothing, or logged (a summary); a value only measured (Shape, Rank) is not fetched
        return not following or any(self.ops.type[t] not in _METADATA for t in following)

    def predicates_of(self, key) -> list:
        """The predicates (value nodes) of the ``tf.cond`` v2 calls whose branch functions run
        op ``key``, through nested calls."""
        found, seen = [], set()
        function = key.split("::", 1)[0] if "::" in key else None
        pending = [function] if function else []
        while pending:
            function = pending.pop()
            if function in seen:
                continue
            seen.add(function)
            for call in self._callers.get(function, ()):
                if self.ops.type[call] in _CALL_WITH_PREDICATE and self.ops.inputs[call]:
                    found.append(self.value_node(*self.ops.inputs[call][0]))
                if "::" in call:
                    pending.append(call.split("::", 1)[0])
        return found

    def reaches_use(self, start) -> bool:
        """Whether ``start``'s value flows (over ``values``) to a use; remembered per node."""
        return reaches(start, self.value_successors, self._is_use, self._reaches_use)

    def forward_reader(self, name, within=None, uses=()):
        """The first op that computes with ``name``'s value towards a use, or None.

        A read counts when its value, before reaching a write, an optimizer update's
        learning rate, a saver or a shape query, goes through an op that computes
        (not merely hands on the value) and whose result is used. So the moving-average
        update ``v -= (v - x) * (1 - decay)`` is not a read of ``v``. ``within``
        restricts the search to ops that run for some fetches (see :meth:`needed_by`);
        ``uses`` adds ops that count as used (the fetches themselves).
        """
        types = self.ops.type
        for read in self.reads.get(name, ()):
            if within is not None and read not in within:
                continue
            queue, seen = collections.deque([read]), {read}
            while queue:  # breadth first: the nearest computing op names the layer best
                node = queue.popleft()
                if not isinstance(node, tuple) and _computes(types[node]) and (
                    node in uses or self.reaches_use(node)
                ):
                    return node
                for following in self.value_successors(node):
                    if following in seen or following == USE:
                        continue
                    if within is not None and _key(following) not in within:
                        continue
                    seen.add(following)
                    queue.append(following)
        return None

    # -- the deps graph -----------------------------------------------------------------
    def dependencies(self, key) -> list:
        """The ops ``key`` cannot run before: inputs, control inputs, called function bodies."""
        ops = self.ops
        found = [source for source, _port in ops.inputs.get(key, ())]
        found.extend(ops.control_inputs.get(key, ()))
        if key in self._calls:
            bodies = self._function_bodies()
            for name in self._calls[key]:
                found.extend(bodies.get(name, ()))
        return found

    def dependents(self, key) -> list:
        """The ops that cannot run before ``key`` (the reverse of :meth:`dependencies`)."""
        if self._control_consumers is None:
            control = collections.defaultdict(list)
            for consumer, sources in self.ops.control_inputs.items():
                for source in sources:
                    control[source].append(consumer)
            self._control_consumers = control
        found = [consumer for consumer, _index in self._consumers.get(key, ())]
        found.extend(self._control_consumers.get(key, ()))
        if "::" in key:
            found.extend(self._callers.get(key.split("::", 1)[0], ()))
        return found

    def _function_bodies(self):
        if self._bodies is None:
            bodies = collections.defaultdict(list)
            for key in self.ops.type:
                head, sep, _ = key.partition("::")
                if sep:
                    bodies[head].append(key)
            self._bodies = bodies
        return self._bodies

    def needed_by(self, keys) -> set:
        """Every op that must run before ``keys`` (data, control, function bodies), and ``keys``."""
        return closure(keys, self.dependencies)

    def training_ops(self, collected=(), updates=()) -> list:
        """The ops a training step is run by: the last ops that run after ``collected`` (the
        TRAIN_OP collection) or, without it, after ``updates`` (the optimizer updates and step
        increments, :attr:`Roles.training_updates`), and that nothing runs after. That is the
        train op itself, a ``tf.group`` of it and the statistics' updates, or the grouped
        update op of a Keras graph-mode training function."""
        seeds = [key for key in collected if key in self.ops.type] or [k for k in updates if k in self.ops.type]
        seeds = seeds or self.ops.keys_of_type(is_apply_op)
        if not seeds:
            return []
        after = closure(seeds, self.dependents)
        last = sorted(key for key in after if not self.dependents(key) and "::" not in key)
        # Reads of the values just written (Adam's beta powers) are not what anyone runs.
        return [key for key in last if self.ops.type[key] not in _PASS] or last

    # -- writes ---------------------------------------------------------------------------
    def updates(self, name) -> list:
        """Writes of ``name`` that are not its initializer, a Saver's restore or a feed."""
        return [key for key in self.writes.get(name, ()) if key not in self.initializers and not self._fed(key)]

    def _fed(self, key):
        sources = self.ops.inputs.get(key, ())
        if len(sources) < 2:
            return False
        source = sources[1][0]
        for _ in range(8):
            op_type = self.ops.type.get(source)
            if op_type in _RESTORE or op_type == "Placeholder":
                return True
            if op_type not in _PASS or not self.ops.inputs.get(source):
                return False
            source = self.ops.inputs[source][0][0]
        return False

    def target_of(self, write_key):
        """The variable a write (one of :attr:`writes`) changes."""
        return self._target_of.get(write_key)

    def writes_behind(self, key, max_depth=4) -> set:
        """Writes that ``key`` runs directly: itself, or through groups, identities and reads."""
        found, frontier, seen = set(), [key], {key}
        for _ in range(max_depth):
            following = []
            for current in frontier:
                op_type = self.ops.type.get(current)
                if op_type is None:
                    continue
                if is_write(op_type):
                    found.add(current)
                    continue
                if op_type not in _PASS and op_type != "NoOp":
                    continue
                for source in [s for s, _ in self.ops.inputs[current]] + self.ops.control_inputs[current]:
                    if source not in seen:
                        seen.add(source)
                        following.append(source)
            frontier = following
        return found

    # -- names ----------------------------------------------------------------------------
    def display_name(self, key) -> str:
        """A name users recognise: ops inside function bodies are named by their caller."""
        key = _key(key)
        seen = set()
        while "::" in key and key not in seen:
            seen.add(key)
            function = key.split("::", 1)[0]
            callers = self._callers.get(function)
            if not callers:
                return key.split("::", 1)[1]
            key = callers[0]
        return key

    def layer_of(self, name, reader=None) -> str:
        """The scope a variable belongs to, for messages and ``scope()`` fixes.

        The longest common scope of the variable and the op that reads it
        (``conv_1/bn/conv_1/bn/moments/Squeeze/ExponentialMovingAverage`` read by
        ``conv_1/bn/cond`` -> ``conv_1/bn``), else the variable's parent scope; a scope
        that is itself a variable gives way to its own parent
        (``layer1/w/ExponentialMovingAverage`` -> ``layer1``).
        """
        layer = _parent(name)
        if reader is not None:
            common = []
            for mine, theirs in zip(name.split("/")[:-1], self.display_name(reader).split("/")):
                if mine != theirs:
                    break
                common.append(mine)
            layer = "/".join(common) or layer
        while layer in self.variable_names and "/" in layer:
            layer = _parent(layer)  # 'layer1/w/ExponentialMovingAverage' belongs to layer1, like layer1/w
        return layer

    # -- for people -------------------------------------------------------------------
    def to_networkx(self, which="deps"):
        """``deps`` or ``values`` (see the module docstring) as a ``networkx.DiGraph``,
        nodes labelled with their op ``type`` and, for variables, ``variable``.

        nx.has_path(flow.to_networkx(), 'block/bn/moving_mean', 'output')
        # True
        """
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from((key, {"type": op_type}) for key, op_type in self.ops.type.items())
        if which == "deps":
            graph.add_edges_from((source, key) for key in self.ops.type for source in self.dependencies(key))
        else:
            pending, seen = list(self.ops.type), set(self.ops.type)
            while pending:
                node = pending.pop()
                for following in self.value_successors(node):
                    graph.add_edge(node, following)
                    if following not in seen:
                        seen.add(following)
                        pending.append(following)
        for key, name in self.variable_of.items():
            if key in graph:
                graph.nodes[key]["variable"] = name
        return graph


def _key(node):
    return node[0] if isinstance(node, tuple) else node


def _parent(name):
    return name.rsplit("/", 1)[0] if "/" in name else name


def _outputs_passing(key, op_type, index):
    if op_type in ("Switch", "RefSwitch"):
        return [(key, 0), (key, 1)]
    if op_type == "IdentityN":
        return [(key, index)]
    return [(key, 0)]


def _called_functions(node, functions):
    called = []
    for value in node.attr.values():
        if value.HasField("func"):
            called.append(value.func.name)
        elif value.HasField("list"):
            called.extend(f.name for f in value.list.func)
    return tuple(name for name in called if name in functions)


_cache = weakref.WeakKeyDictionary()  # catalog -> its Dataflow


def dataflow(catalog) -> Dataflow:
    """The :class:`Dataflow` of a graph catalog, built once per catalog: the roles and the
    audit of one catalog share it."""
    if not catalog.traceable:
        raise TypeError(f"a {catalog.kind} catalog has no graph to trace; pass a tf.Graph or a .meta file")
    flow = _cache.get(catalog)
    if flow is None:
        with no_garbage_collection():
            variable_of = {part: name for name in catalog.ordered_names for part in catalog.parts(name)}
            flow = Dataflow(catalog.op_graph, variable_of, catalog.initializer_ops())
        _cache[catalog] = flow
    return flow


def may_be_read_forward(catalog, names, budget=None) -> bool:
    """Whether one of ``names`` may have a forward reader (:meth:`Dataflow.forward_reader` without
    fetches), judged from the ops near each variable in the live graph, without its GraphDef
    (True for a ``.meta`` file's catalog: the dataflow decides).

    False proves that none has one: everything its value reaches over data edges either computes
    nothing or computes a value that reaches no use (an optimizer slot, a beta power, a step). True
    means only that :func:`dataflow` must decide: an op computes a value that reaches a use, an op may
    call a library function, or the ops looked at pass ``budget`` (default: as many as the graph has,
    at least 20,000), past which reading the whole graph costs less.
    """
    if catalog.graph is None:
        if catalog.traceable:  # a .meta file's ops: no live graph to look near
            return True
        raise TypeError(f"a {catalog.kind} catalog has no graph to trace; pass a tf.Graph or a .meta file")
    if budget is None:
        budget = max(_NEARBY_BUDGET, catalog.graph.version)
    reaches, visits = {}, [0]
    for variable in catalog.variables(names):
        start = variable.op
        stack, seen = [start], {start}
        while stack:
            op = stack.pop()
            visits[0] += 1
            op_type = op.type
            if visits[0] > budget or may_call_functions(op_type):
                return True
            if op is not start and _computes(op_type) and _reaches_use_nearby(op, reaches, visits, budget):
                return True
            if _ends_flow(op_type) and not is_write(op_type):
                continue  # an optimizer update, a saver, a shape query: nothing goes on (a write may hand on a reference)
            for output in op.outputs:
                for consumer in output.consumers():
                    if consumer not in seen:
                        seen.add(consumer)
                        stack.append(consumer)
    return False


def _reaches_use_nearby(start, reaches, visits, budget) -> bool:
    """Whether ``start``'s value may reach a use (an op nothing consumes, the gradient of an optimizer
    update, a function call) over data edges that do not end the flow; True past ``budget``."""
    if start in reaches:
        return reaches[start]
    stack, seen, found = [start], {start}, False
    while stack and not found:
        op = stack.pop()
        visits[0] += 1
        consumers = [consumer for output in op.outputs for consumer in output.consumers()]
        found = visits[0] > budget or not consumers
        for consumer in consumers:
            consumer_type = consumer.type
            if may_call_functions(consumer_type):
                found = True
            elif is_apply_op(consumer_type):
                gradient = _gradient_inputs(consumer_type)
                found = found or any(t.op is op for i, t in enumerate(consumer.inputs) if i in gradient)
            elif not _ends_flow(consumer_type) and consumer not in seen:
                seen.add(consumer)
                stack.append(consumer)
    reaches[start] = found
    return found
