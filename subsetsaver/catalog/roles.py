"""What each variable is for: optimizer slot, batch-norm statistic, moving average, global step.

Roles come from the structure of the graph, not from names: a slot is what an
optimizer's ``Apply*`` kernel takes besides the variable it updates; a batch-norm
statistic is a variable that feeds ``FusedBatchNorm``'s mean/variance inputs or is
assigned a moving average of batch moments. Only a checkpoint without a graph falls
back to the well-known names, and says so.

Example::

    >>> roles = roles_from_graph(OpGraph(graph.as_graph_def()), logical, trainable, set())
    >>> sorted(roles.by_role['bn_stat'])
    ['conv_1/bn/moving_mean', 'conv_1/bn/moving_variance']
"""

from __future__ import annotations

import dataclasses
import re

from .op_graph import ASSIGN_OPS, OpGraph, input_is_variable, is_apply_op, is_fused_batch_norm

ROLES = ("slot", "optimizer", "bn_stat", "average", "global_step")
_MOVING_AVERAGE_ASSIGNS = frozenset({"AssignSub", "AssignSubVariableOp"})
_METADATA_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs"})
_MOMENT_SEARCH_DEPTH = 10

_SLOT_NAME = re.compile(
    r"/(Adam|Momentum|Adagrad|AdagradDA|Adadelta|RMSProp|Ftrl|ProximalAdagrad|ProximalGradientDescent)(_\d+)?$"
)
_OPTIMIZER_NAME = re.compile(r"(^|/)(beta1_power|beta2_power)(_\d+)?$")
_EMA_NAME = re.compile(r"/ExponentialMovingAverage(_\d+)?$")
_BN_NAME = re.compile(r"(^|/)(moving_mean|moving_variance)(/|$)")


@dataclasses.dataclass
class Roles:
    """role -> names; slot -> the variable it belongs to; shadow -> the averaged variable."""

    by_role: dict
    slot_of: dict
    average_of: dict
    from_names: bool = False


def roles_from_graph(ops: OpGraph, logical: dict, trainable: frozenset, global_steps: frozenset) -> Roles:
    """Roles of the variables in ``logical`` (variable op name -> logical name)."""

    def behind(source, through_reads=True):
        return {logical[v] for v in ops.variables_behind(source, through_reads=through_reads) if v in logical}

    slot_of, read_by_optimizer, primaries = {}, set(), set()
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

    assigns = ops.keys_of_type(lambda t: t in ASSIGN_OPS)
    updated_after_apply = set()
    apply_set = set(apply_keys)
    for key in assigns:
        if _controlled_by(ops, key, apply_set):
            updated_after_apply |= behind(ops.inputs[key][0], through_reads=False)
    optimizer_own = (
        (read_by_optimizer & updated_after_apply) - trainable - global_steps - primaries - set(slot_of)
    )

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
        reached = ops.upstream_keys(value[0], _MOMENT_SEARCH_DEPTH, stop=lambda k: ops.type.get(k) in _METADATA_OPS)
        if reached & moment_ops:
            bn_stats |= targets
    bn_stats -= trainable | set(slot_of) | primaries
    averages -= trainable | set(slot_of)

    return Roles(
        by_role={
            "slot": frozenset(slot_of) | optimizer_own,
            "optimizer": frozenset(optimizer_own),
            "bn_stat": frozenset(bn_stats),
            "average": frozenset(averages),
            "global_step": frozenset(global_steps),
        },
        slot_of={k: v for k, v in slot_of.items() if v is not None},
        average_of=average_of,
    )


def roles_from_names(names) -> Roles:
    """Fallback for a checkpoint without a graph: the names TensorFlow gives these variables."""
    slots = {n for n in names if _SLOT_NAME.search(n)}
    optimizer_own = {n for n in names if _OPTIMIZER_NAME.search(n)}
    averages = {n for n in names if _EMA_NAME.search(n)}
    bn_stats = {n for n in names if _BN_NAME.search(n) or (n in averages and "/moments/" in n)}
    steps = {n for n in names if n == "global_step" or n.endswith("/global_step")}
    return Roles(
        by_role={
            "slot": frozenset(slots | optimizer_own),
            "optimizer": frozenset(optimizer_own),
            "bn_stat": frozenset(bn_stats),
            "average": frozenset(averages),
            "global_step": frozenset(steps),
        },
        slot_of={n: _SLOT_NAME.sub("", n) for n in slots},
        average_of={n: _EMA_NAME.sub("", n) for n in averages if "/moments/" not in n},
        from_names=True,
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
