"""What each variable is for: optimizer state, batch-norm statistic, moving average, step, loss scale.

:class:`Roles` holds the answer. A graph's roles come from what its dataflow means, not from
names or idioms (:mod:`~subsetsaver.catalog.dataflow_roles`). Only a checkpoint without a graph
falls back to the well-known names, and says so (:func:`roles_from_names`). An object-based
checkpoint (``tf.train.Checkpoint``, Keras ``save_weights``) needs no names: its object graph
says which variables are an optimizer's slots (and whose), its iteration counter
(``global_step``) and its hyperparameters (``optimizer``, like TF1's beta powers), and which are
a batch-norm layer's ``moving_mean`` and ``moving_variance`` attributes (``bn_stat``); see
:func:`roles_from_object_graph`.

Example::

    roles = roles_from_names(['dense/w', 'dense/w/Adam', 'dense/w/Adam_1', 'beta1_power'])
    sorted(roles.by_role['slot'])
    # ['beta1_power', 'dense/w/Adam', 'dense/w/Adam_1']
"""

from __future__ import annotations

import dataclasses
import re
import warnings

from ..errors import SubsetSaverWarning
from ..formats.tf import object_graph

ROLES = ("slot", "optimizer", "bn_stat", "average", "global_step", "loss_scale")

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
    :class:`~subsetsaver.formats.tf.object_graph.ObjectGraph`); ``names``: key -> catalog name.
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
        if tensor.role == object_graph.SLOT:
            slots.add(name)
            if tensor.slot_of in names:
                slot_of[name] = names[tensor.slot_of]
        elif tensor.role == object_graph.HYPERPARAMETER:
            own.add(name)
        elif tensor.role == object_graph.ITERATIONS:
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
    by_name = " - ".join([repr(selector)] + [f"name('**/{ending}*')" for ending in endings])
    return (
        f"{repr(selector)} keeps {len(missed)} tensor{'s' if len(missed) != 1 else ''} of '{source}' that look like "
        f"optimizer state ({shown}): without a graph, slots() knows only well-known names. Pass the training graph "
        f"(--graph model.meta), or drop them by name: {by_name!r}."
    )
