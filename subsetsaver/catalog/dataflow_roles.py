"""Roles of a graph's variables from what its dataflow means, not from names or idioms (the
dataflow rules are in :mod:`~subsetsaver.catalog.training_state`):

* optimizer state (``slot``): what an ``Apply*`` kernel takes besides the variable it
  updates, or a non-trainable variable that only the training update reads and that the
  training step updates from gradients (plain ``assign`` ops: BERT's AdamW, LAMB,
  Adafactor, gradient accumulators); ``slot_of`` names the trainable variable it serves;
* the optimizer's own scalars (``optimizer``, also ``slot``): beta powers, hyperparameter
  variables, counters that reset; with them, scalars nothing uses in their scope (Keras's
  ``decay`` while it is 0);
* ``global_step``: the GLOBAL_STEP collection and every integer scalar the training step
  only increments (Keras's ``iter``);
* ``loss_scale`` (also ``slot``): the dynamic loss scale and its good-step counter;
* ``bn_stat``: what feeds ``FusedBatchNorm``'s mean and variance, or is assigned a moving
  average of forward batch moments; a value that reaches moments only through the
  backward pass (layer norm under a hand-written Adam) is no statistic;
* ``average``: an ``ExponentialMovingAverage`` shadow.

Example::

    roles = roles_from_graph(catalog, trainable, global_steps=frozenset())
    sorted(roles.by_role['bn_stat'])
    # ['conv_1/bn/moving_mean', 'conv_1/bn/moving_variance']
"""

from __future__ import annotations

import re

from .dataflow import USE, dataflow
from .op_graph import ASSIGN_OPS, inert, input_is_variable, is_apply_op, is_fused_batch_norm
from .roles import Roles, by_role
from .training_state import training_state

_MOVING_AVERAGE_ASSIGNS = frozenset({"AssignSub", "AssignSubVariableOp"})
_METADATA_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs"})
_MOMENT_SEARCH_DEPTH = 10


def roles_from_graph(catalog, trainable: frozenset, global_steps: frozenset) -> Roles:
    """Roles of the variables of a graph ``catalog``; ``global_steps``: the GLOBAL_STEP collection
    (or what is named like it); structural step counters are added."""
    flow = dataflow(catalog)
    ops, logical = flow.ops, flow.variable_of

    def behind(source, through_reads=True):
        return {logical[v] for v in ops.variables_behind(source, through_reads=through_reads) if v in logical}

    slot_of, read_by_optimizer, primaries, applies = {}, set(), set(), {}
    apply_keys = ops.keys_of_type(is_apply_op)
    for key in apply_keys:
        op_type, primary = ops.type[key], None
        for index, source in enumerate(ops.inputs[key]):
            if input_is_variable(op_type, index):
                names = behind(source, through_reads=False)
                if index == 0:
                    primary = min(names) if names else None
                    primaries.update(names)
                else:
                    slot_of.update((name, primary) for name in names)
            else:
                read_by_optimizer |= behind(source)
        applies[key] = primary

    assigns = ops.keys_of_type(lambda t: t in ASSIGN_OPS)
    updated_after_apply = set()
    apply_set = set(apply_keys)
    for key in assigns:
        if _controlled_by(ops, key, apply_set):
            updated_after_apply |= behind(ops.inputs[key][0], through_reads=False)

    state = training_state(flow, trainable, applies, catalog.entry)
    steps = frozenset(global_steps) | state.steps
    for name, primary in state.slot_of.items():
        slot_of.setdefault(name, primary)
    taken = trainable | steps | primaries | set(slot_of)
    loss_scale = state.loss_scale - taken
    optimizer_own = ((read_by_optimizer & updated_after_apply) | state.optimizer) - taken - loss_scale
    optimizer_own |= _unused_siblings(catalog, flow, optimizer_own, taken | loss_scale)

    moment_ops = _batch_moment_ops(ops)
    bn_stats, averages, average_of = set(), set(), {}
    for key in ops.keys_of_type(is_fused_batch_norm):
        for source in ops.inputs[key][3:5]:
            bn_stats |= behind(source)
    for key in assigns:
        targets = behind(ops.inputs[key][0], through_reads=False)
        if not targets or len(ops.inputs[key]) < 2:
            continue
        value = ops.inputs[key][1]
        averaged = _moving_average_value(ops, key, targets, behind)
        if averaged is not None:
            value = averaged
            averaged_variables = behind(averaged)
            if averaged_variables:
                averages |= targets
                average_of.update((t, min(averaged_variables)) for t in targets)
            elif _named_like_ema_update(key, targets):
                averages |= targets
        if flow.value_node(*value) in state.gradient_derived:
            continue  # moments reached through the backward pass are no statistic
        reached = ops.upstream_keys(value[0], _MOMENT_SEARCH_DEPTH, stop=lambda k: ops.type.get(k) in _METADATA_OPS)
        if reached & moment_ops:
            bn_stats |= targets
    optimizer_state = set(slot_of) | optimizer_own | loss_scale
    bn_stats -= trainable | optimizer_state | primaries | steps
    averages -= trainable | optimizer_state

    return Roles(
        by_role=by_role({"slot": set(slot_of), "optimizer": optimizer_own, "bn_stat": bn_stats, "average": averages,
                         "global_step": steps, "loss_scale": loss_scale}),
        slot_of={k: v for k, v in slot_of.items() if v is not None},
        average_of=average_of,
        training_updates=state.training_updates,
    )


def _controlled_by(ops, key, targets, depth=4):
    """Whether ``key`` runs after one of ``targets``: reachable backwards over data and control edges."""
    frontier, seen = [key], {key}
    for _ in range(depth):
        following = []
        for current in frontier:
            sources = ops.control_inputs.get(current, []) + [s for s, _ in ops.inputs.get(current, ())]
            for source in sources:
                if source in targets:
                    return True
                if source not in seen:
                    seen.add(source)
                    following.append(source)
        frontier = following
    return False


def _moving_average_value(ops, key, targets, behind):
    """For ``v -= (v - value) * decay`` (assign_moving_average), the ``value`` input."""
    if ops.type[key] not in _MOVING_AVERAGE_ASSIGNS:
        return None
    delta = _skip_identity(ops, ops.inputs[key][1][0])
    if ops.type.get(delta) != "Mul":
        return None
    for factor, _port in ops.inputs[delta]:
        factor = _skip_identity(ops, factor)
        if ops.type.get(factor) == "Sub" and len(ops.inputs[factor]) == 2:
            current, value = ops.inputs[factor]
            if behind(current) & targets:
                return value
    return None


def _skip_identity(ops, key):
    while ops.type.get(key) in ("Identity", "Switch") and ops.inputs.get(key):
        key = ops.inputs[key][0][0]
    return key


def _batch_moment_ops(ops):
    """FusedBatchNorm ops, and the Mean ops of ``tf.nn.moments`` (mean and variance)."""
    moments = set(ops.keys_of_type(is_fused_batch_norm))
    consumers = ops.consumers()
    for key in ops.keys_of_type(lambda t: t == "Mean"):
        sources = ops.inputs[key]
        if sources and ops.type.get(sources[0][0]) == "SquaredDifference":
            moments.add(key)
            continue
        for consumer, _ in consumers.get(key, ()):
            if ops.type.get(consumer) == "StopGradient" and any(
                ops.type.get(c) == "SquaredDifference" for c, _ in consumers.get(consumer, ())
            ):
                moments.add(key)
    return moments


def _named_like_ema_update(key, targets):
    """ExponentialMovingAverage.apply names its updates '<ema name>/AssignMovingAvg'."""
    scopes = key.split("::")[-1].split("/")
    for target in targets:
        last = re.sub(r"_\d+$", "", target.rsplit("/", 1)[-1])
        if any(re.sub(r"_\d+$", "", s) == last for s in scopes[:-1]):
            return True
    return False


def _unused_siblings(catalog, flow, optimizer_own, taken):
    """Scalars that nothing reads or updates, made in the scope of the optimizer's own variables:
    Keras's ``decay`` hyperparameter while it is 0 is a variable nothing uses, next to
    ``learning_rate`` and ``beta_1``."""
    scopes = {name.rsplit("/", 1)[0] for name in optimizer_own if "/" in name}
    found = set()
    for name in catalog.ordered_names:
        if name in taken or name in optimizer_own or name.rsplit("/", 1)[0] not in scopes or "/" not in name:
            continue
        if tuple(catalog.entry(name).shape) != () or flow.updates(name):
            continue
        if any(_used(flow, read) for read in flow.reads.get(name, ())):
            continue
        found.add(name)
    return found


def _used(flow, read):
    """Whether the value ``read`` takes goes anywhere but a saver, a shape query or a summary:
    a ``tf.compat.v1.train.Saver`` built later must not change what a variable is for."""
    pending, seen = [read], {read}
    while pending:
        node = pending.pop()
        if isinstance(node, tuple) or node == USE or flow.computes(node):
            return True
        if flow.ends_flow(node):
            if not inert(flow.ops.type[node]):
                return True  # a write or an optimizer update takes it
            continue
        for following in flow.value_successors(node):
            if following not in seen:
                seen.add(following)
                pending.append(following)
    return False
