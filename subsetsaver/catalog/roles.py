"""What each variable is for: optimizer state, batch-norm statistic, moving average, step, loss scale.

Every role is declared once, in :data:`ROLE_TABLE` (its name, its selector, what it means, the names
TensorFlow gives it); everything else reads the table. :class:`Roles` holds the answer. A graph's roles come from what its dataflow means, not from
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
# Mesh TensorFlow's Adafactor: VARIABLE_slot_v, or the factored VARIABLE_slot_vr and VARIABLE_slot_vc
_MESH_SLOT_NAME = re.compile(r"_slot_(vr|vc|v)$")
# Optimizers' hyperparameters kept as variables: legacy Keras's OPTIMIZER/learning_rate, Keras 3's adam/learning_rate
_HYPERPARAMETER_NAME = re.compile(r"(?i)^(training/)?(adam|sgd|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|adamw|lion|"
                                  r"adafactor|lamb)(_\d+)?/(beta_1|beta_2|learning_rate|decay|rho|epsilon|momentum|"
                                  r"initial_accumulator_value|weight_decay)$")
_KERAS_STEP_NAME = re.compile(rf"^(training/)?{_KERAS_OPTIMIZERS}/iter$")
_OPTIMIZER_NAME = re.compile(r"(^|/)(beta1_power|beta2_power)(_\d+)?$")
_EMA_NAME = re.compile(r"/ExponentialMovingAverage(_\d+)?$")
_BN_NAME = re.compile(r"(^|/)(moving_mean|moving_variance)(/|$)")
# tf.compat.v1.mixed_precision's dynamic loss scale; tf.contrib.mixed_precision's ExponentialUpdateLossScaleManager
# (loss_scale, good_steps, bad_steps)
_LOSS_SCALE_NAME = re.compile(r"(^|/)(current_loss_scale|good_steps|bad_steps|loss_scale)(_\d+)?$")
_GLOBAL_STEP_NAME = re.compile(r"(^|/)global_step$")
_BN_ATTRIBUTES = frozenset({"moving_mean", "moving_variance"})  # Keras BatchNormalization's statistics
# What looks like optimizer state to a reader, whether or not a role family above knows it: a path segment naming
# an optimizer or an accumulator, a hand-written moment, an object-based checkpoint's slot path.
_OPTIMIZER_LOOKING = re.compile(
    r"(?i)(^|/)(adam\w*|adafactor\w*|lamb\w*|lars\w*|momentum\w*|adagrad\w*|adadelta|rmsprop|ftrl|nadam|yogi|lion|"
    r"sgd|optimizer|accum|accumulator|grad_acc|beta[12]_power)(_\d+)?(/|$)|\.OPTIMIZER_SLOT"
)


@dataclasses.dataclass(frozen=True)
class Role:
    """One thing a variable can be for, declared once.

    ``name``: as catalogs, files and ``--json`` say it; ``selector``: the DSL function that selects it
    (None: none of its own); ``meaning``: what it is, in the words of ``inspect`` and the audit;
    ``names``: the patterns of the names TensorFlow gives it, for a checkpoint without a graph;
    ``part_of``: the role that holds it too (an optimizer's own variables are optimizer state);
    ``hides``: roles it is part of that a variable of it is never labeled with (a hyperparameter is the
    optimizer's, so ``slots()`` selects it, yet it is no slot);
    ``optimizer_state``: the audit counts it as the optimizer's, never as a forgotten statistic;
    ``weight``: a model weight may have it (the Keras bridge loads it into the model).
    """

    name: str
    selector: str | None
    meaning: str
    names: tuple = ()
    part_of: str | None = None
    hides: tuple = ()
    optimizer_state: bool = False
    weight: bool = False


ROLE_TABLE = (
    Role("slot", "slots", "optimizer state: slots and the optimizer's own state",
         (_SLOT_NAME, _HANDWRITTEN_SLOT_NAME, _KERAS_SLOT_NAME, _ACCUMULATOR_NAME, _MESH_SLOT_NAME),
         optimizer_state=True),
    Role("optimizer", None, "the optimizer's own variable", (_OPTIMIZER_NAME, _ACCUMULATION_OWN_NAME),
         part_of="slot", optimizer_state=True),
    Role("hyperparameter", None, "an optimizer's hyperparameter held in a variable (the optimizer's, no slot)",
         (_HYPERPARAMETER_NAME,), part_of="optimizer", hides=("slot",), optimizer_state=True),
    Role("bn_stat", "bn_stats", "batch-norm statistic", (_BN_NAME,), weight=True),
    Role("average", "averages", "moving-average shadow", (_EMA_NAME,)),
    Role("global_step", "global_step", "step counter", (_KERAS_STEP_NAME, _GLOBAL_STEP_NAME), optimizer_state=True),
    Role("loss_scale", None, "loss-scale state", (_LOSS_SCALE_NAME,), part_of="slot"),
)
ROLES = tuple(role.name for role in ROLE_TABLE)
BY_NAME = {role.name: role for role in ROLE_TABLE}


def named(role, names) -> set:
    """The ``names`` that ``role``'s name patterns in :data:`ROLE_TABLE` match."""
    patterns = BY_NAME[role].names
    return {n for n in names if any(pattern.search(n) for pattern in patterns)}


def by_role(found) -> dict:
    """Role -> frozenset of names for every role of :data:`ROLE_TABLE`, from ``found`` (role -> names, any missing):
    each role's names go into the role it is ``part_of`` (transitively)."""
    members = {role.name: set(found.get(role.name, ())) for role in ROLE_TABLE}
    for role in ROLE_TABLE:
        holder = role.part_of
        while holder is not None:
            members[holder] |= members[role.name]
            holder = BY_NAME[holder].part_of
    return {name: frozenset(names) for name, names in members.items()}


def labels(roles) -> set:
    """The roles a variable that is in ``roles`` is labeled with: all of them but those a role of it ``hides``."""
    hidden = {hidden for role in roles if role in BY_NAME for hidden in BY_NAME[role].hides}
    return set(roles) - hidden


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
    """Fallback for a checkpoint without a graph: the names TensorFlow gives these variables (each role's
    ``names`` in :data:`ROLE_TABLE`)."""
    found = {role.name: named(role.name, names) for role in ROLE_TABLE}
    found["bn_stat"] |= {n for n in found["average"] if "/moments/" in n}  # EMAs of batch moments
    return Roles(
        by_role=by_role(found),
        slot_of=_slot_owners(names),
        average_of={n: _EMA_NAME.sub("", n) for n in found["average"] if "/moments/" not in n},
        from_names=True,
    )


def _slot_owners(names) -> dict:
    """Slot name -> the name of its variable, for the slot names the name families know."""
    slot_of = {n: _SLOT_NAME.sub("", n) for n in names if _SLOT_NAME.search(n)}
    slot_of.update((n, _HANDWRITTEN_SLOT_NAME.sub("", n)) for n in names if _HANDWRITTEN_SLOT_NAME.search(n))
    slot_of.update((n, _MESH_SLOT_NAME.sub("", n)) for n in names if _MESH_SLOT_NAME.search(n))
    slot_of.update((n, match["variable"]) for n in names for match in [_KERAS_SLOT_NAME.match(n)] if match)
    slot_of.update((n, match["variable"]) for n in names for match in [_ACCUMULATOR_NAME.match(n)] if match)
    return slot_of


def roles_from_object_graph(graph, names) -> Roles:
    """Roles of an object-based checkpoint's tensors from its object graph (a
    :class:`~subsetsaver.formats.tf.object_graph.ObjectGraph`); ``names``: key -> catalog name.
    Slots are ``slot`` with ``slot_of`` the catalog name of their variable; an iteration counter is
    ``global_step``; hyperparameters are ``hyperparameter`` (and so ``optimizer``), never ``slot``.

    roles = roles_from_object_graph(graph, {key: name, ...})
    roles.slot_of['Adam/dense/kernel/m']
    # 'dense/kernel'
    """
    slots, hyperparameters, steps, bn_stats, slot_of = set(), set(), set(), set(), {}
    for key, tensor in graph.tensors.items():
        name = names.get(key)
        if name is None:
            continue
        if tensor.role == object_graph.SLOT:
            slots.add(name)
            if tensor.slot_of in names:
                slot_of[name] = names[tensor.slot_of]
        elif tensor.role == object_graph.HYPERPARAMETER:
            hyperparameters.add(name)
        elif tensor.role == object_graph.ITERATIONS:
            steps.add(name)
        elif _BN_ATTRIBUTES & set(tensor.local_names):
            bn_stats.add(name)
    found = {"slot": slots, "hyperparameter": hyperparameters, "bn_stat": bn_stats, "global_step": steps}
    return Roles(by_role=by_role(found), slot_of=slot_of, average_of={})


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
