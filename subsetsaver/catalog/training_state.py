"""What a training step keeps besides the weights, found from what its dataflow means.

The *training updates* are the writes of trainable variables and the optimizer kernels
(``Apply*``) that update them. From there, over the values graph of
:class:`~subsetsaver.catalog.dataflow.Dataflow`:

* the *update side*: values that flow into a training update, also through variables
  whose value only the update reads (an accumulator written every step and applied every
  N steps), and through the predicates of the ``tf.cond`` that decides whether to apply;
* a variable is *read only by the update* when some read of it is on the update side and
  no read reaches a forward output (a value the program fetches: loss, logits);
* *gradients*: update-side values derived from forward values that reach no forward
  output themselves; the backward pass. What is computed from them is *gradient-derived*.

Then, with no name looked at:

* optimizer state: a non-trainable variable read only by the update whose update is
  gradient-derived (Adam's m and v written by plain assigns, LAMB, Adafactor's row and
  column moments, gradient accumulators); its *primary* is the trainable variable whose
  update it feeds;
* the optimizer's own scalars: read only by the update, not gradient-derived (beta powers,
  learning-rate or beta variables, a micro-step counter that resets);
* a step counter: an integer scalar that every update increments by a constant
  (``global_step.assign(global_step + 1)``, Keras's ``iter``);
* loss-scale state: a scalar whose every update is decided by a gradient-derived predicate
  (``all(is_finite(grads))``) but never computed from gradients: the dynamic loss scale
  and its good-step counter.

Example::

    state = training_state(flow, trainable, applies={}, spec=catalog.entry)
    state.slot_of
    # {'dense/w/adam_m': 'dense/w', 'dense/w/adam_v': 'dense/w'}
"""

from __future__ import annotations

import collections
import dataclasses
import functools

from .walks import closure

_ADD = frozenset({"Add", "AddV2"})
_HAND_ON = frozenset({
    "Identity", "Snapshot", "Cast", "ReadVariableOp", "Enter", "Exit", "_Arg", "RefIdentity",
    "NextIteration", "Merge", "RefMerge",
})
_SWITCH = frozenset({"Switch", "RefSwitch"})
_CONTROL_FLOW = frozenset({"Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit", "RefExit",
                           "NextIteration", "RefNextIteration"})
# Ops that bring a program's input in: feeds, tf.data iterators, queues.
_INPUT_OPS = ("Placeholder", "IteratorGetNext", "QueueDequeue", "ReaderRead")
_INCREMENT_DEPTH = 12       # ops between a counter's write and its own read: v + 1 through a cond
_V1_COND_DEPTH = 6          # ops between a write and the Switch of the v1 cond it runs in
_PRIMARY_SEARCH_LIMIT = 20_000  # nodes one search for the variable a slot serves may visit


@dataclasses.dataclass(frozen=True)
class TrainingState:
    """The training step's state: see the module docstring.

    ``slot_of``: gradient-fed optimizer state -> its primary; ``optimizer``: the optimizer's
    own scalars; ``steps``: step counters; ``loss_scale``: loss-scale state;
    ``training_updates``: op keys of the training updates and step increments;
    ``gradient_derived``: the values computed from gradients (a set of values-graph nodes).
    """

    slot_of: dict
    optimizer: frozenset
    steps: frozenset
    loss_scale: frozenset
    training_updates: frozenset
    gradient_derived: frozenset


def training_state(flow, trainable, applies, spec) -> TrainingState:
    """The :class:`TrainingState` of ``flow``'s graph.

    ``trainable``: names of the trainable variables; ``applies``: ``Apply*`` op key -> the
    variable it updates (or None); ``spec(name)``: an object with ``shape`` and ``dtype``.
    """
    return _Analysis(flow, frozenset(trainable), applies, spec).run()


class _Analysis:
    def __init__(self, flow, trainable, applies, spec):
        self.flow, self.ops, self.trainable, self.applies, self.spec = flow, flow.ops, trainable, applies, spec
        self.updates = {name: flow.updates(name) for name in flow.writes}
        self.updates = {name: keys for name, keys in self.updates.items() if keys}
        self.read_of = collections.defaultdict(set)
        for name, keys in flow.reads.items():
            for key in keys:
                self.read_of[key].add(name)

    # -- forward values (asked only when the graph trains) -------------------------------
    @functools.cached_property
    def data(self) -> set:
        """What the model computes: every value reached from its inputs or weights."""
        inputs = [key for key, op_type in self.ops.type.items() if op_type.startswith(_INPUT_OPS)]
        weights = [key for name in self.trainable for key in self.flow.reads.get(name, ())]
        return closure(inputs + weights, self.flow.value_successors)

    @functools.cached_property
    def forward(self) -> frozenset:
        """The values used by a computation towards a forward output (an output computed from
        the model's inputs or weights: an optimizer's unused intermediate is none)."""
        flow = self.flow

        def passing_on(node):
            return [p for p in flow.value_predecessors(node) if not flow.ends_flow(p)]

        outputs = [key for key in self.ops.type if self._is_forward_output(key)]
        to_outputs = closure(outputs, passing_on)
        return frozenset(closure([node for node in to_outputs if flow.computes(node)], passing_on))

    def _is_forward_output(self, node):
        """A fetch: a value computed from the model's inputs or weights that nothing uses. Not
        what graph building leaves behind: a dangling alias of a value used elsewhere (a
        gradient's spare ``tf.identity``), a ``tf.cond`` result or ``Switch`` nothing uses, a
        duplicate of an op that is used (``tf.rank`` packs a list once more)."""
        flow = self.flow
        if node not in self.data or not flow.is_output(node):
            return False
        while not flow.computes(node):
            if isinstance(node, tuple) or self.ops.type[node] in _CONTROL_FLOW:
                return False
            predecessors = flow.value_predecessors(node)
            if len(predecessors) != 1 or any(s != node for s in flow.value_successors(predecessors[0])):
                return False
            node = predecessors[0]
        return not self._duplicate(node)

    def _duplicate(self, key):
        inputs, op_type = self.ops.inputs[key], self.ops.type[key]
        if not inputs:
            return False
        return any(
            other != key and self.ops.type[other] == op_type and self.ops.inputs[other] == inputs
            for other, _index in self.flow.value_consumers(self.flow.value_node(*inputs[0]))
        )

    # -- the update side -----------------------------------------------------------------
    def run(self) -> TrainingState:
        steps = {name for name in self.updates if self._is_step_counter(name)}
        training = [key for name in self.trainable for key in self.updates.get(name, ())]
        training += [key for key, primary in self.applies.items() if primary in self.trainable]
        training += [key for name in steps for key in self.updates[name]]
        update_side, read_only_by_update = self._update_side(training)
        gradients = self._gradients(update_side)
        derived = self._gradient_derived(gradients, read_only_by_update - steps)

        loss_scale = {
            name for name in self.updates
            if name not in steps and name not in read_only_by_update and name not in self.trainable
            and self._is_loss_scale(name, derived)
        }
        slot_of, own = {}, set()
        for name in read_only_by_update - steps - loss_scale:
            if self._written_from(name, derived):
                primary = self._primary(name)
                if primary is not None:
                    slot_of[name] = primary
                    continue
            own.add(name)
        return TrainingState(
            slot_of=slot_of,
            optimizer=frozenset(own),
            steps=frozenset(steps),
            loss_scale=frozenset(loss_scale),
            training_updates=frozenset(training),
            gradient_derived=frozenset(derived),
        )

    def _update_side(self, training):
        """(values that flow into a training update, variables read only by the update)."""
        flow, in_side, queue, functions = self.flow, set(), collections.deque(), set()

        def add(nodes):
            for node in nodes:
                if node not in in_side:
                    in_side.add(node)
                    queue.append(node)

        read_only, rejected, candidates = set(), set(self.trainable), []

        def add_update(key):
            candidates.extend(self.read_of.get(key, ()))  # an update op that reads a variable itself
            add(flow.value_inputs(key))
            add(flow.predicates_of(key))

        for key in training:
            add_update(key)
        while queue or candidates:
            while queue:
                node = queue.popleft()
                key = node[0] if isinstance(node, tuple) else node
                candidates.extend(self.read_of.get(node, ()) if not isinstance(node, tuple) else ())
                if "::" in key and key.split("::", 1)[0] not in functions:
                    functions.add(key.split("::", 1)[0])
                    add(flow.predicates_of(key))
                add(flow.value_predecessors(node))
            while candidates:
                name = candidates.pop()
                if name in read_only or name in rejected:
                    continue
                if any(read in self.forward for read in flow.reads.get(name, ())):
                    rejected.add(name)
                    continue
                read_only.add(name)
                for key in self.updates.get(name, ()):
                    add_update(key)
        return in_side, read_only

    def _gradients(self, update_side):
        """Update-side values derived from forward values that reach no forward output."""
        if not update_side:
            return set()  # nothing trains: no gradient, and no need to find the forward values
        flow = self.flow
        forward = update_side & self.forward
        below_forward = closure(forward, lambda n: [s for s in flow.value_successors(n) if s in update_side])
        return below_forward - forward

    def _gradient_derived(self, gradients, carriers):
        """What is computed from ``gradients``, also through the variables among ``carriers``
        (read only by the update) that are written from them: an accumulator's value is a
        gradient, whatever reads it next (a loss-scale wrapper's finiteness check, a cond)."""
        flow, derived, pending = self.flow, set(), list(gradients)
        carriers = set(carriers)
        while pending:
            derived |= closure(pending, flow.data_successors)
            written = {name for name in carriers if self._written_from(name, derived)}
            carriers -= written
            pending = [read for name in written for read in flow.reads.get(name, ()) if read not in derived]
        return derived

    def _written_from(self, name, values):
        flow = self.flow
        return any(node in values for key in self.updates.get(name, ()) for node in flow.value_inputs(key))

    def _primary(self, name):
        """The one trainable variable whose update ``name``'s value feeds, or None (none or several)."""
        flow, found = self.flow, set()
        seen = set(flow.reads.get(name, ()))
        queue = collections.deque(seen)
        def updated_by(key):
            return self.applies.get(key) if key in self.applies else flow.target_of(key)

        while queue and len(found) < 2 and len(seen) < _PRIMARY_SEARCH_LIMIT:
            node = queue.popleft()
            for key in [node] + [consumer for consumer, _index in flow.value_consumers(node)]:
                if not isinstance(key, tuple) and updated_by(key) in self.trainable and key not in flow.initializers:
                    found.add(updated_by(key))
            for following in flow.data_successors(node):  # what decides a cond serves every variable
                if following not in seen:
                    seen.add(following)
                    queue.append(following)
        return next(iter(found)) if len(found) == 1 else None

    # -- counters and the loss scale -----------------------------------------------------
    def _is_step_counter(self, name):
        entry = self.spec(name)
        if name in self.trainable or tuple(entry.shape) != () or not entry.dtype.startswith(("int", "uint")):
            return False
        changes = [self._change(name, key) for key in self.updates[name]]
        return "plus" in changes and all(change in ("plus", "same") for change in changes)

    def _change(self, name, write):
        """'plus' when ``write`` adds a constant to ``name``, 'same' when it writes it back, else None."""
        flow, op_type = self.flow, self.ops.type[write]
        values = flow.value_inputs(write)
        if len(values) != 1:
            return None
        found = self._expression(name, values[0], _INCREMENT_DEPTH)
        if op_type.startswith("AssignAdd"):
            return "plus" if found == "const" else None
        return found if found in ("plus", "same") else None

    def _expression(self, name, node, depth):
        """What ``node`` is in terms of ``name``: 'same', 'plus' (same + constant), 'const' or None."""
        if depth <= 0:
            return None
        if not isinstance(node, tuple) and name in self.read_of.get(node, ()):
            return "same"
        flow = self.flow
        predecessors = flow.value_predecessors(node)
        if isinstance(node, tuple):
            return _combine([self._expression(name, p, depth - 1) for p in predecessors])
        op_type = self.ops.type[node]
        if op_type == "Const":
            return "const"
        if op_type in _SWITCH:
            predecessors = predecessors[:1]
        elif op_type in _ADD:
            parts = sorted(self._expression(name, p, depth - 1) or "" for p in predecessors)
            return "plus" if parts in (["const", "same"], ["const", "plus"]) else None
        elif op_type not in _HAND_ON:
            return None
        return _combine([self._expression(name, p, depth - 1) for p in predecessors])

    def _is_loss_scale(self, name, derived):
        if tuple(self.spec(name).shape) != ():
            return False
        flow = self.flow
        for key in self.updates[name]:
            if any(node in derived for node in flow.value_inputs(key)):
                return False
            if not any(p in derived for p in flow.predicates_of(key) + self._v1_cond_predicates(key)):
                return False
        return True

    def _v1_cond_predicates(self, key):
        """Predicates of the v1 ``tf.cond`` (``Switch``) that ``key`` runs in, nearby."""
        ops, found, frontier, seen = self.ops, [], [key], {key}
        for _ in range(_V1_COND_DEPTH):
            following = []
            for current in frontier:
                if ops.type.get(current) in _SWITCH and len(ops.inputs[current]) > 1:
                    found.append(self.flow.value_node(*ops.inputs[current][1]))
                for source in [s for s, _ in ops.inputs.get(current, ())] + ops.control_inputs.get(current, []):
                    if source not in seen:
                        seen.add(source)
                        following.append(source)
            frontier = following
        return found


def _combine(parts):
    if not parts or None in parts:
        return None
    kinds = set(parts)
    if kinds == {"same"}:
        return "same"
    if kinds <= {"same", "plus"}:
        return "plus"
    return "const" if kinds == {"const"} else None
