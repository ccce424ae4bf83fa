"""What each variable is for: optimizer state, batch-norm statistic, moving average, step, loss scale.

Roles come from what the graph's dataflow means, not from names or idioms (the dataflow
rules are in :mod:`~subsetsaver.catalog.training_state`):

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

Only a checkpoint without a graph falls back to the well-known names, and says so. An
object-based checkpoint (``tf.train.Checkpoint``, Keras ``save_weights``) needs no names: its
object graph says which variables are an optimizer's slots (and whose), its iteration counter
(``global_step``) and its hyperparameters (``optimizer``, like TF1's beta powers), and which are
a batch-norm layer's ``moving_mean`` and ``moving_variance`` attributes (``bn_stat``); see
:func:`roles_from_object_graph`.

Example::

    roles = roles_from_graph(catalog, trainable, global_steps=frozenset())
    sorted(roles.by_role['bn_stat'])
    # ['conv_1/bn/moving_mean', 'conv_1/bn/moving_variance']
"""

from __future__ import annotations

import dataclasses
import re
import warnings

from ..errors import SubsetSaverWarning
from ..formats import tf_object_graph
from .dataflow import USE, dataflow
from .op_graph import ASSIGN_OPS, inert, input_is_variable, is_apply_op, is_fused_batch_norm
from .training_state import training_state

ROLES = ("slot", "optimizer", "bn_stat", "average", "global_step", "loss_scale")
_MOVING_AVERAGE_ASSIGNS = frozenset({"AssignSub", "AssignSubVariableOp"})
_METADATA_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs"})
_MOMENT_SEARCH_DEPTH = 10

# tf.compat.v1.train optimizers' slots are VARIABLE/OPTIMIZER_NAME[_N]: Adam's m and v are VAR/Adam and VAR/Adam_1;
# tensor2tensor's Adafactor makes VAR/Adafactor (m), then VAR/Adafactor_1 and _2 (the factored vr and vc) or
# VAR/Adafactor_1 (v); tf.contrib.opt's AdaMax, AdamW, MomentumW, LARS, AddSign, PowerSign, GGT and Shampoo likewise.
_SLOT_NAME = re.compile(
    r"/(Adam|Momentum|Adagrad|AdagradDA|Adadelta|RMSProp|Ftrl|ProximalAdagrad|ProximalGradientDescent|Adafactor|"
    r"AdaMax|AdamW|MomentumW|LARSOptimizer|AddSignOptimizer|PowerSignOptimizer|GGT|Shampoo)(_\d+)?$"
)
# Gradient accumulation (NVIDIA's BERT and the code copied from it): VAR/accum, or VAR/accum/VAR/accum when made
# under a variable scope of its own name; a micro-step counter and a flag of finite gradients beside them.
_ACCUMULATOR_NAME = re.compile(r"^(?P<variable>.+?)/accum(/(?P=variable)/accum)?$")
_ACCUMULATION_OWN_NAME = re.compile(r"(^|/)(local_step|batch_finite)$")
# Names hand-written optimizers give their moments (google-research/bert's AdamWeightDecayOptimizer and
# the LAMB and Adafactor implementations copied from it): VARIABLE/adam_m, VARIABLE/lamb_v, ...
_HANDWRITTEN_SLOT_NAME = re.compile(r"/(adam_m|adam_v|lamb_m|lamb_v|adafactor_m|adafactor_v|adafactor_vr|adafactor_vc)$")
# Legacy Keras optimizers in graph mode: [training/]OPTIMIZER/VARIABLE/SLOT, and OPTIMIZER/iter, OPTIMIZER/beta_1
_KERAS_OPTIMIZERS = r"(Adam|SGD|RMSprop|Adagrad|Adadelta|Adamax|Nadam|Ftrl)"
_KERAS_SLOT_NAME = re.compile(rf"^(training/)?{_KERAS_OPTIMIZERS}/(?P<variable>.+)/(m|v|vhat|momentum|rms|mg|"
                              r"accumulator|delta_accumulator|linear)$")
_KERAS_OWN_NAME = re.compile(rf"^(training/)?{_KERAS_OPTIMIZERS}/(beta_1|beta_2|learning_rate|decay|rho|epsilon|"
                             r"momentum|initial_accumulator_value)$")
_KERAS_STEP_NAME = re.compile(rf"^(training/)?{_KERAS_OPTIMIZERS}/iter$")
_OPTIMIZER_NAME = re.compile(r"(^|/)(beta1_power|beta2_power)(_\d+)?$")
_EMA_NAME = re.compile(r"/ExponentialMovingAverage(_\d+)?$")
_BN_NAME = re.compile(r"(^|/)(moving_mean|moving_variance)(/|$)")
# tf.compat.v1.mixed_precision's dynamic loss scale; tf.contrib.mixed_precision's ExponentialUpdateLossScaleManager
# (loss_scale, good_steps, bad_steps)
_LOSS_SCALE_NAME = re.compile(r"(^|/)(current_loss_scale|good_steps|bad_steps|loss_scale)(_\d+)?$")
_BN_ATTRIBUTES = frozenset({"moving_mean", "moving_variance"})  # Keras BatchNormalization's statistics
# What looks like optimizer state to a reader, whether or not a role family above knows it: a path segment naming
# an optimizer or an accumulator, a hand-written moment, an object-based checkpoint's slot path.
_OPTIMIZER_LOOKING = re.compile(
    r"(?i)(^|/)(adam\w*|adafactor\w*|lamb\w*|lars\w*|momentum\w*|adagrad\w*|adadelta|rmsprop|ftrl|nadam|yogi|lion|"
    r"sgd|optimizer|accum|accumulator|grad_acc|beta[12]_power)(_\d+)?(/|$)|\.OPTIMIZER_SLOT"
)


@dataclasses.dataclass
class Roles:
    """role -> names; slot -> the variable it belongs to; shadow -> the averaged variable;
    ``training_updates``: op keys of the updates a training step makes (weights, steps)."""

    by_role: dict
    slot_of: dict
    average_of: dict
    from_names: bool = False
    training_updates: frozenset = frozenset()


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
        by_role={
            "slot": frozenset(optimizer_state),
            "optimizer": frozenset(optimizer_own),
            "bn_stat": frozenset(bn_stats),
            "average": frozenset(averages),
            "global_step": steps,
            "loss_scale": frozenset(loss_scale),
        },
        slot_of={k: v for k, v in slot_of.items() if v is not None},
        average_of=average_of,
        training_updates=state.training_updates,
    )


def roles_from_names(names) -> Roles:
    """Fallback for a checkpoint without a graph: the names TensorFlow gives these variables."""
    slot_of = {n: _SLOT_NAME.sub("", n) for n in names if _SLOT_NAME.search(n)}
    slot_of.update((n, _HANDWRITTEN_SLOT_NAME.sub("", n)) for n in names if _HANDWRITTEN_SLOT_NAME.search(n))
    slot_of.update((n, match["variable"]) for n in names for match in [_KERAS_SLOT_NAME.match(n)] if match)
    slot_of.update((n, match["variable"]) for n in names for match in [_ACCUMULATOR_NAME.match(n)] if match)
    slots = set(slot_of)
    optimizer_own = {n for n in names if _OPTIMIZER_NAME.search(n) or _KERAS_OWN_NAME.match(n)
                     or _ACCUMULATION_OWN_NAME.search(n)}
    averages = {n for n in names if _EMA_NAME.search(n)}
    bn_stats = {n for n in names if _BN_NAME.search(n) or (n in averages and "/moments/" in n)}
    steps = {n for n in names if n == "global_step" or n.endswith("/global_step") or _KERAS_STEP_NAME.match(n)}
    loss_scale = {n for n in names if _LOSS_SCALE_NAME.search(n)}
    return Roles(
        by_role={
            "slot": frozenset(slots | optimizer_own | loss_scale),
            "optimizer": frozenset(optimizer_own),
            "bn_stat": frozenset(bn_stats),
            "average": frozenset(averages),
            "global_step": frozenset(steps),
            "loss_scale": frozenset(loss_scale),
        },
        slot_of=slot_of,
        average_of={n: _EMA_NAME.sub("", n) for n in averages if "/moments/" not in n},
        from_names=True,
    )


def roles_from_object_graph(graph, names) -> Roles:
    """Roles of an object-based checkpoint's tensors from its object graph (a
    :class:`~subsetsaver.formats.tf_object_graph.ObjectGraph`); ``names``: key -> catalog name.
    Slots are ``slot`` with ``slot_of`` the catalog name of their variable; an iteration counter is
    ``global_step``; hyperparameters are ``optimizer`` and ``slot``, as TF1's beta powers are.

    roles = roles_from_object_graph(graph, {key: name, ...})
    roles.slot_of['Adam/dense/kernel/m']
    # 'dense/kernel'
    """
    slots, own, steps, bn_stats, slot_of = set(), set(), set(), set(), {}
    for key, tensor in graph.tensors.items():
        name = names.get(key)
        if name is None:
            continue
        if tensor.role == tf_object_graph.SLOT:
            slots.add(name)
            if tensor.slot_of in names:
                slot_of[name] = names[tensor.slot_of]
        elif tensor.role == tf_object_graph.HYPERPARAMETER:
            own.add(name)
        elif tensor.role == tf_object_graph.ITERATIONS:
            steps.add(name)
        elif _BN_ATTRIBUTES & set(tensor.local_names):
            bn_stats.add(name)
    return Roles(
        by_role={
            "slot": frozenset(slots | own),
            "optimizer": frozenset(own),
            "bn_stat": frozenset(bn_stats),
            "average": frozenset(),
            "global_step": frozenset(steps),
            "loss_scale": frozenset(),
        },
        slot_of=slot_of,
        average_of={},
    )


def warn_missed_optimizer_state(cat, selector, kept, source, *, stacklevel=2) -> tuple:
    """Warn (``SubsetSaverWarning``) when ``selector`` uses ``slots()`` on roles guessed from names and keeps
    names that look like optimizer state that no known name family covers; returns those names. For the
    tools that select from a checkpoint alone (``slim``, ``convert``), after resolving ``kept``.

    warn_missed_optimizer_state(cat, ss.parse('~slots()'), ['w', 'w/opt_state'], 'ckpt/model')
    # ()
    """
    if not cat.roles.from_names or "slots()" not in repr(selector):
        return ()
    slots = cat.role("slot")
    missed = tuple(n for n in kept if n not in slots and _OPTIMIZER_LOOKING.search(n))
    if missed:
        warnings.warn(missed_optimizer_state_message(missed, source, selector), SubsetSaverWarning,
                      stacklevel=stacklevel + 1)
    return missed


def missed_optimizer_state_message(missed, source, selector) -> str:
    """The words of :func:`warn_missed_optimizer_state`: the names, and two ways to drop them."""
    shown = ", ".join(missed[:4]) + (f" and {len(missed) - 4} more" if len(missed) > 4 else "")
    endings = list(dict.fromkeys(re.sub(r"_\d+$", "", n.rsplit("/", 1)[-1]) for n in missed))[:3]
    by_name = " - ".join([repr(selector)] + [f"name('*/{ending}*')" for ending in endings])
    return (
        f"{repr(selector)} keeps {len(missed)} tensor{'s' if len(missed) != 1 else ''} of '{source}' that look like "
        f"optimizer state ({shown}): without a graph, slots() knows only well-known names. Pass the training graph "
        f"(--graph model.meta), or drop them by name: {by_name!r}."
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
