"""The auditor: the state a selection forgets, found before it bites.

``audit`` reasons over the graph's dataflow (``catalog/dataflow.py``) and the catalog's roles;
``audit_values`` looks at the values in a session. Each returns :class:`Finding` values:

=========================  ========  ==========================================================
code                       severity  meaning
=========================  ========  ==========================================================
unsaved-state              error     a non-trainable variable that inference reads is not saved
stats-not-updated          warning   the training step does not run the batch-norm updates
optimizer-state-saved      info      the selection carries optimizer state
optimizer-state-partial    warning   part of the optimizer state is saved, part is not
empty-term                 warning   a term of the selector matches nothing
stale-stats                warning   (audit_values) statistics still hold their initial values
=========================  ========  ==========================================================

Example::

    for finding in audit(trainable(), graph):
        print(finding)
    # error: unsaved-state: conv_1/bn keeps moving averages of the batch mean and variance that
    # inference reads; they are not saved and will be re-initialized on restore. Add bn_stats()
    # or scope('conv_1/bn').
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import warnings

from . import catalog as catalog_module
from .catalog import dataflow, may_be_read_forward, no_garbage_collection
from .errors import SubsetSaverError, SubsetSaverWarning
from .selectors import Nothing, Selector, closest_names, format_bytes, slots

UPDATE_OPS = "update_ops"
TRAIN_OP = "train_op"
LOCAL_VARIABLES = "local_variables"
_OPTIMIZER_ROLES = frozenset(role.name for role in catalog_module.ROLE_TABLE if role.optimizer_state)
_UPDATE_FIX = (
    "Build the training op under "
    "tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))."
)


class Severity(str, enum.Enum):
    """How bad a finding is; compares equal to its text: ``Severity.ERROR == 'error'``."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self):
        return self.value

    def __format__(self, spec):
        return format(self.value, spec)


_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing the auditor found: what (``code``), how bad, which variables, cause and fix."""

    code: str
    severity: Severity
    variables: tuple      # variable names, no ':0', in the graph's creation order
    message: str

    def __str__(self):
        return f"{self.severity}: {self.code}: {self.message}"

    def to_json(self) -> dict:
        return {"code": self.code, "severity": str(self.severity), "variables": list(self.variables),
                "message": self.message}


# ---------------------------------------------------------------------------------
# The static audit
# ---------------------------------------------------------------------------------


def audit(sel_or_plan, graph=None, fetches=None) -> list:
    """Findings about what ``sel_or_plan`` saves from ``graph``, errors first.

    ``sel_or_plan`` is a Selector, or a plan (anything with ``saved_names`` and
    ``catalog``). ``graph`` is a ``tf.Graph``, a ``.meta`` file or a graph catalog
    (default: the plan's graph, else the default graph). ``fetches`` (op or tensor
    names, tensors or ops) narrows "what inference reads" to what those fetches run;
    without it, any op that computes with a variable's value counts, except the
    variable's own update, optimizer updates, initializers and savers.

    [(f.code, f.variables) for f in audit(trainable(), graph)]
    # [('unsaved-state', ('block/bn/moving_mean', 'block/bn/moving_variance'))]
    audit(trainable() | bn_stats(), graph, fetches=['output'])
    # []
    """
    with no_garbage_collection():  # reading a big graph allocates much and frees nothing
        selector, catalog, saved = _selection(sel_or_plan, graph)
        flow = dataflow(catalog)
        fetch_keys = _fetch_keys(fetches, flow)
        findings = []
        findings += _unsaved_state(catalog, flow, saved, fetch_keys)
        findings += _stats_not_updated(catalog, flow, fetch_keys)
        findings += _optimizer_state(catalog, saved, selector)
        if selector is not None:
            findings += _empty_terms(selector, catalog)
    return _ordered(findings, catalog)


def audit_errors(sel_or_plan, graph=None) -> list:
    """The findings of :func:`audit` (no fetches) whose severity is error, in its order: what a plan
    warns about when it is built.

    Only ``unsaved-state`` is an error, and it needs a variable left out that inference reads. When the
    ops around every variable left out show that none can be read (optimizer slots, beta powers, a
    step), that is known without the graph's dataflow or roles, which are then not built.

    audit_errors(trainable(), graph)
    # [Finding(code='unsaved-state', severity=<Severity.ERROR: 'error'>, ...)]
    """
    with no_garbage_collection():
        _selector, catalog, saved = _selection(sel_or_plan, graph)
        left_out = catalog.all_names - saved - catalog.collection("trainable_variables") - catalog.collection(
            LOCAL_VARIABLES)
        if not left_out or not may_be_read_forward(catalog, catalog.in_order(left_out)):
            return []
        return _ordered(_unsaved_state(catalog, dataflow(catalog), saved, None), catalog)


def _selection(sel_or_plan, graph):
    """(selector or None, catalog, frozenset of saved names)."""
    if isinstance(sel_or_plan, Selector):
        catalog = catalog_module.load(graph)
        return sel_or_plan, catalog, frozenset(sel_or_plan.evaluate(catalog))
    if hasattr(sel_or_plan, "saved_names") and hasattr(sel_or_plan, "catalog"):
        catalog = sel_or_plan.catalog if graph is None else catalog_module.load(graph)
        return getattr(sel_or_plan, "selector", None), catalog, frozenset(sel_or_plan.saved_names)
    raise TypeError(f"audit takes a selector or a plan, got {type(sel_or_plan).__name__}: {sel_or_plan!r}")


def _fetch_keys(fetches, flow):
    if fetches is None:
        return None
    if isinstance(fetches, str) or hasattr(fetches, "name") or not hasattr(fetches, "__iter__"):
        fetches = [fetches]  # one name, tf.Tensor or tf.Operation
    keys = []
    for fetch in fetches:
        op = getattr(fetch, "op", fetch)
        name = op if isinstance(op, str) else getattr(op, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"a fetch is an op or tensor name, a tf.Tensor or a tf.Operation, got {fetch!r}")
        key = name.lstrip("^").split(":")[0]
        if key not in flow.ops.type or "::" in key:
            close = difflib.get_close_matches(key, [k for k in flow.ops.type if "::" not in k], n=3)
            hint = f"; closest op names: {', '.join(close)}" if close else ""
            raise ValueError(f"fetch '{name}' is not an op of the graph{hint}")
        keys.append(key)
    return keys


def _ordered(findings, catalog):
    position = {name: i for i, name in enumerate(catalog.ordered_names)}

    def key(finding):
        first = min((position.get(n, len(position)) for n in finding.variables), default=len(position))
        return _RANK[finding.severity], first

    return sorted(findings, key=key)


def _group_by_layer(names, layer_of):
    groups = {}
    for name in names:
        groups.setdefault(layer_of[name], []).append(name)
    return groups


# -- unsaved-state ------------------------------------------------------------------


def _unsaved_state(catalog, flow, saved, fetch_keys):
    within = flow.needed_by(fetch_keys) if fetch_keys is not None else None
    uses = frozenset(fetch_keys or ())
    # local variables (metrics, input counters) are never checkpointed
    skipped = saved | catalog.collection("trainable_variables") | catalog.collection(LOCAL_VARIABLES)
    skipped |= frozenset().union(*(catalog.role(role) for role in _OPTIMIZER_ROLES))
    statistics, averages = catalog.role("bn_stat"), catalog.role("average")
    layer_of = {}
    for name in catalog.ordered_names:
        if name in skipped:
            continue
        reader = flow.forward_reader(name, within, uses)
        if reader is None:
            continue
        kind = "bn" if name in statistics else "average" if name in averages else "state"
        layer_of[name] = (flow.layer_of(name, reader), kind)
    average_of = catalog.roles.average_of
    findings = []
    for (layer, kind), names in _group_by_layer(catalog.in_order(layer_of), layer_of).items():
        averaged = [average_of.get(n) for n in names]
        message = _unsaved_message(layer, kind, names, averaged)
        findings.append(Finding("unsaved-state", Severity.ERROR, tuple(names), message))
    return findings


def _unsaved_message(layer, kind, names, averaged):
    count = len(names)
    listed = ", ".join(names)
    if kind == "bn":
        fix = f"Add bn_stats() or scope('{layer}')."
        if count == 2:
            what = "moving averages of the batch mean and variance"
        elif count == 1:
            what = f"a moving average of a batch statistic ({listed})"
        else:
            what = f"{count} moving averages of batch statistics"
    elif kind == "average":
        fix = f"Add averages() or scope('{layer}')."
        of = ", ".join(averaged) if all(averaged) else "its weights"
        what = f"{'an exponential moving average' if count == 1 else 'exponential moving averages'} of {of}"
    else:
        fix = f"Add scope('{layer}') or variables({', '.join(repr(n) for n in names)})."
        what = f"non-trainable state ({listed})"
    pronoun, verb = ("it", "is") if count == 1 else ("they", "are")
    return (
        f"{layer} keeps {what} that inference reads; {pronoun} {verb} not saved and will be "
        f"re-initialized on restore. {fix}"
    )


# -- stats-not-updated ---------------------------------------------------------------


def _stats_not_updated(catalog, flow, fetch_keys=None):
    key = ("stats-not-updated", tuple(fetch_keys or ()))
    if key not in flow.memo:  # independent of the selection
        flow.memo[key] = _find_stats_not_updated(catalog, flow, fetch_keys)
    return flow.memo[key]


def _find_stats_not_updated(catalog, flow, fetch_keys):
    statistics = set(catalog.role("bn_stat"))
    non_state = {r.name for r in catalog.records if r.trainable or r.roles & _OPTIMIZER_ROLES}
    for key in catalog.op_collection(UPDATE_OPS):
        for write in flow.writes_behind(key):
            target = flow.target_of(write)
            if target is not None and target not in non_state:
                statistics.add(target)
    updates = {name: flow.updates(name) for name in statistics}
    updates = {name: keys for name, keys in updates.items() if keys}
    if not updates:
        return []
    training, runs = _training_step(catalog, flow, fetch_keys)
    if not training:
        return []
    stale = [name for name, keys in updates.items() if not runs.intersection(keys)]
    layer_of = {name: flow.layer_of(name, flow.forward_reader(name)) for name in stale}
    subject = (
        f"the training op {training[0]}" if len(training) == 1
        else f"the training ops {', '.join(training)}"
    )
    verb = "does" if len(training) == 1 else "do"
    findings = []
    for layer, names in _group_by_layer(catalog.in_order(stale), layer_of).items():
        findings.append(
            Finding(
                "stats-not-updated",
                Severity.WARNING,
                tuple(names),
                f"{layer}: {subject} {verb} not run the updates of its statistics ({', '.join(names)}), "
                f"so they never move from their initial values. {_UPDATE_FIX}",
            )
        )
    return findings


def _training_step(catalog, flow, fetch_keys):
    """(the ops that run a training step, every op that step runs).

    Fetches that run a training update are the step, with all they run in one
    ``session.run`` (Keras fetches the loss and the grouped update op together); else the
    last ops after the TRAIN_OP collection, or after the optimizer updates and step
    increments (what a MonitoredTrainingSession's train op runs)."""
    updates = catalog.roles.training_updates
    if fetch_keys:
        runs = flow.needed_by(fetch_keys)
        if runs & updates:
            return [key for key in fetch_keys if flow.needed_by([key]) & updates], runs
    training = list(dict.fromkeys(flow.training_ops(catalog.op_collection(TRAIN_OP), updates)))
    return training, flow.needed_by(training)


# -- optimizer state -----------------------------------------------------------------


def _optimizer_state(catalog, saved, selector):
    slot_role, own = catalog.role("slot"), catalog.role("optimizer")
    saved_state = saved & slot_role
    if not saved_state:
        return []
    records = catalog.records_by_name
    findings = []
    smaller = f"{selector - slots()!r}" if selector is not None else "the selection - slots()"
    findings.append(
        Finding(
            "optimizer-state-saved",
            Severity.INFO,
            tuple(catalog.in_order(saved_state)),
            f"the selection saves {len(saved_state)} optimizer variable{_s(saved_state)} "
            f"({format_bytes(catalog.nbytes(saved_state))}) that only resuming training needs; "
            f"for inference alone save {smaller}.",
        )
    )
    slots_of = {}
    for name in slot_role - own:
        primary = records[name].slot_of
        if primary is not None:
            slots_of.setdefault(primary, set()).add(name)
    missing_slots = set()
    for primary, its_slots in slots_of.items():
        if primary in saved:
            missing_slots |= its_slots - saved
    if missing_slots:
        primaries = catalog.in_order({records[n].slot_of for n in missing_slots})
        findings.append(
            Finding(
                "optimizer-state-partial",
                Severity.WARNING,
                tuple(catalog.in_order(missing_slots)),
                f"the selection saves optimizer slots, but not those of {', '.join(primaries)}: a resumed "
                f"run would restart their optimizer state from zero. Add slots() to save all of it, "
                f"or subtract slots() to save none.",
            )
        )
    loss_scale = catalog.role("loss_scale")
    missing_own = own - saved
    if saved_state - own - loss_scale and missing_own:
        findings.append(
            Finding(
                "optimizer-state-partial",
                Severity.WARNING,
                tuple(catalog.in_order(missing_own)),
                f"the selection saves optimizer slots but not the optimizer's own "
                f"variable{_s(missing_own)} {', '.join(catalog.in_order(missing_own))}: a resumed run "
                f"would restart {'it' if len(missing_own) == 1 else 'them'} from the initial value. Add slots().",
            )
        )
    missing_scale = loss_scale - saved
    if saved_state - loss_scale and missing_scale:
        findings.append(
            Finding(
                "optimizer-state-partial",
                Severity.WARNING,
                tuple(catalog.in_order(missing_scale)),
                f"the selection saves optimizer state but not the loss-scale state "
                f"{', '.join(catalog.in_order(missing_scale))}: a resumed run would restart loss scaling "
                f"from its initial scale, and skip steps again while it shrinks. Add slots().",
            )
        )
    missing_steps = catalog.role("global_step") - saved
    if missing_steps:
        findings.append(
            Finding(
                "optimizer-state-partial",
                Severity.WARNING,
                tuple(catalog.in_order(missing_steps)),
                f"the selection saves optimizer state but not the global step "
                f"{', '.join(catalog.in_order(missing_steps))}: a resumed run would count steps (and "
                f"decay learning rates) from 0 again. Add global_step().",
            )
        )
    return findings


def _s(items):
    return "" if len(items) == 1 else "s"


# -- empty-term ----------------------------------------------------------------------


def _empty_terms(selector, catalog):
    findings = []
    for leaf in dict.fromkeys(selector.leaves()):
        if isinstance(leaf, Nothing) or leaf.evaluate(catalog):
            continue
        hint = closest_names(leaf, catalog)
        findings.append(
            Finding(
                "empty-term",
                Severity.WARNING,
                (),
                f"{leaf!r} matches no variable"
                + (f" (closest names: {', '.join(hint)})" if hint else "")
                + "; fix the term or remove it.",
            )
        )
    return findings


# ---------------------------------------------------------------------------------
# The runtime audit
# ---------------------------------------------------------------------------------


def audit_values(sess, sel_or_plan, graph=None) -> list:
    """Findings from the values in ``sess``: ``stale-stats`` for saved batch-norm
    statistics that still hold their initial values (every element 0, as means and EMA
    shadows start, or every element 1, as variances start) while the global step is
    past 0. One ``session.run`` fetches everything; no op is created.

    audit_values(sess, trainable() | bn_stats())
    # [Finding(code='stale-stats', severity=<Severity.WARNING: 'warning'>, ...)]
    """
    if graph is None and isinstance(sel_or_plan, Selector):
        graph = sess.graph
    _selector, catalog, saved = _selection(sel_or_plan, graph)
    statistics = catalog.in_order(saved & catalog.role("bn_stat"))
    steps = catalog.in_order(catalog.role("global_step"))
    if not statistics or not steps:
        return []
    parts = {name: catalog.variables([name]) for name in statistics + steps[:1]}
    fetched = sess.run(parts)
    step = int(fetched[steps[0]][0])
    if step <= 0:
        return []
    stale = [
        name for name in statistics
        if all((value == 0).all() for value in fetched[name]) or all((value == 1).all() for value in fetched[name])
    ]
    if not stale:
        return []

    flow = dataflow(catalog)
    layer_of = {name: flow.layer_of(name, flow.forward_reader(name)) for name in stale}
    findings = []
    for layer, names in _group_by_layer(stale, layer_of).items():
        one = len(names) == 1
        findings.append(
            Finding(
                "stale-stats",
                Severity.WARNING,
                tuple(names),
                f"{layer}: the batch-norm statistic{_s(names)} {', '.join(names)} still "
                f"{'holds its initial value' if one else 'hold their initial values'} at global step {step}: "
                f"training never updated {'it' if one else 'them'}, so a checkpoint would carry "
                f"{'a statistic' if one else 'statistics'} that inference cannot use. {_UPDATE_FIX}",
            )
        )
    return findings


# ---------------------------------------------------------------------------------
# Warnings
# ---------------------------------------------------------------------------------


def warn_for(findings, strict=False, stacklevel=1) -> list:
    """Emit one ``SubsetSaverWarning`` per error finding, or with ``strict=True`` raise one
    ``SubsetSaverError`` listing them all (and warn nothing). Returns the error findings.

    ``stacklevel`` counts as in ``warnings.warn``, from the code that calls ``warn_for``:
    1 blames that line, 2 its caller (what ``plan()`` passes, to blame the user's call).

    warn_for(audit(trainable(), graph), strict=True)
    # Traceback (most recent call last):
    # subsetsaver.errors.SubsetSaverError: the selection forgets state inference needs (2 errors): ...
    """
    errors = [f for f in findings if f.severity == Severity.ERROR]
    if not errors:
        return errors
    if strict:
        lines = [f"the selection forgets state inference needs ({len(errors)} error{_s(errors)}):"]
        lines += [f"  {f.code}: {f.message}" for f in errors]
        lines.append("Fix the selection, or pass strict=False to get warnings instead.")
        raise SubsetSaverError("\n".join(lines))
    for finding in errors:
        warnings.warn(f"{finding.code}: {finding.message}", SubsetSaverWarning, stacklevel=stacklevel + 1)
    return errors
