"""Moving-average weights for evaluation: restore each variable from its EMA shadow.

An evaluation graph has no ``ExponentialMovingAverage`` ops, and an evaluation loop may
meet several checkpoints, so the choice between a variable's shadow
(``w/ExponentialMovingAverage``) and its own value is made per checkpoint at restore
time, from the checkpoint's names. ``ss.plan(sel, graph, use_averages=True)`` restores
through an :class:`AverageRestorer`.

Example::

    restorer = AverageRestorer(ss.plan(ss.trainable(), eval_graph))
    restorer.restore_or_initialize(sess, 'train/').from_averages
    # ('layer1/w', 'layer1/b', 'layer2/w')
"""

from __future__ import annotations

import dataclasses
import os

from .. import catalog as catalog_module
from .. import tf_internals
from ..catalog import roles_from_names
from ..errors import CorruptCheckpointError, UninitializedVariablesError, first_line
from ..selectors import as_selector
from .reports import CheckReport, RestoreReport, compare_contents
from .restore_ops import CheckpointRestoreOps

DEFAULT_EMA_NAME = "ExponentialMovingAverage"


@dataclasses.dataclass(frozen=True)
class AverageRestoreReport(RestoreReport):
    """A RestoreReport whose ``from_averages`` names the variables restored from their
    moving-average shadow (the others in ``restored`` came from their own values)."""

    from_averages: tuple = ()


def _ema_name(ema):
    if ema is None or ema is True:
        return None
    if isinstance(ema, str):
        return ema
    name = getattr(ema, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"ema is a tf.compat.v1.train.ExponentialMovingAverage, its name, or None; got {ema!r}")
    return name


def shadow_names(keys, checkpoint_names, ema=None) -> dict:
    """Checkpoint name -> the name of its moving-average shadow among ``checkpoint_names``
    (only for the keys that have one).

    With ``ema`` (an ExponentialMovingAverage or its name), the shadow of ``k`` is
    ``k/NAME``, as ``ema.average_name`` names it. Without, any name TensorFlow's
    ExponentialMovingAverage gives (``k/ExponentialMovingAverage``, ``..._1``) counts;
    the unsuffixed one wins.

    >>> shadow_names(['w', 'b'], ['w', 'b', 'w/ExponentialMovingAverage'])
    {'w': 'w/ExponentialMovingAverage'}
    """
    available = set(checkpoint_names)
    name = _ema_name(ema)
    if name is not None:
        return {key: f"{key}/{name}" for key in keys if f"{key}/{name}" in available}
    shadows = {}
    for shadow, primary in roles_from_names(available).average_of.items():
        shadows.setdefault(primary, []).append(shadow)
    preferred = {}
    for key in keys:
        candidates = sorted(shadows.get(key, ()), key=lambda s: (s != f"{key}/{DEFAULT_EMA_NAME}", s))
        if candidates:
            preferred[key] = candidates[0]
    return preferred


def average_restore_map(plan_or_sel, checkpoint, ema=None, graph=None) -> dict:
    """Variable name -> the checkpoint name it restores from with moving averages: its
    shadow when ``checkpoint`` holds one, else its own checkpoint name.

    ``plan_or_sel``: a plan (its saved variables and remap) or a selector (on ``graph``).
    The names come from the checkpoint, so the evaluation graph needs no EMA ops.

    average_restore_map(p, 'train/')
    # {'layer1/w': 'layer1/w/ExponentialMovingAverage', ..., 'layer2/b': 'layer2/b'}
    """
    if hasattr(plan_or_sel, "saved_names") and hasattr(plan_or_sel, "checkpoint_names"):
        keys = {name: plan_or_sel.checkpoint_names[name] for name in plan_or_sel.saved_names}
    else:
        keys = {name: name for name in as_selector(plan_or_sel, "plan_or_sel").names(graph)}
    contents = catalog_module.checkpoint_contents(catalog_module.checkpoint_prefix(checkpoint))
    shadows = shadow_names(keys.values(), contents, ema)
    return {name: shadows.get(key, key) for name, key in keys.items()}


class AverageRestorer:
    """Restores a plan's saved variables from their moving-average shadows where the
    checkpoint holds them, and from their own values otherwise; initializes the rest.

    The choice is made per checkpoint at restore time (an evaluation graph has no EMA
    ops, and an evaluation loop may meet several checkpoints); every op is built here:
    one ``RestoreV2`` per variable whose tensor names are fed. A restore runs the
    planner's pre-flight diff (against the shadow where one is used) and its
    ``on_mismatch``, then one ``session.run`` for the values, one for the initializers
    of the rest and one to confirm nothing is left uninitialized.

    restorer = AverageRestorer(ss.plan(ss.trainable(), eval_graph))
    graph.finalize()
    restorer.restore_or_initialize(sess, 'train/').from_averages
    # ('layer1/w', 'layer1/b', 'layer2/w')
    """

    def __init__(self, plan, ema=None):
        import tensorflow as tf

        if plan.backend.name != "tf":
            raise ValueError(
                f"moving averages are restored from TensorFlow checkpoints, but the plan uses backend "
                f"{plan.backend.name!r}; build the evaluation plan with backend='tf' (a portable file converts "
                "with `subsetsaver convert`)"
            )
        self.plan = plan
        self.ema = ema
        _ema_name(ema)  # a bad ema fails now, not at restore time
        self._parts = {name: plan.catalog.variables([name]) for name in plan.catalog.ordered_names}
        self._logical = {part.op.name: name for name, parts in self._parts.items() for part in parts}
        self._restore_ops = CheckpointRestoreOps(plan.graph, {name: self._parts[name] for name in plan.saved_names},
                                                 scope="subsetsaver_averages", fed_names=True)
        with plan.graph.as_default(), tf.compat.v1.name_scope("subsetsaver_averages/"):
            self._uninitialized = tf.compat.v1.report_uninitialized_variables(
                list(plan.saved) + list(plan.rest), name="report_uninitialized"
            )
            tf_internals.mark_used(self._uninitialized)  # it is run later, not now

    def choose(self, prefix) -> dict:
        """Variable name -> checkpoint name to restore it from, for the checkpoint ``prefix``."""
        contents = self.plan.backend.contents(prefix)
        keys = self.plan.checkpoint_names
        shadows = shadow_names([keys[n] for n in self.plan.saved_names], contents, self.ema)
        return {name: shadows.get(keys[name], keys[name]) for name in self.plan.saved_names}

    def check(self, prefix) -> CheckReport:
        """The pre-flight diff against the names :meth:`choose` picks (only blocking problems)."""
        contents = self.plan.backend.contents(prefix)
        expected = [(name, key, *self.plan.spec(name)) for name, key in self.choose(prefix).items()]
        problems = compare_contents(expected, contents)
        return CheckReport(checkpoint=prefix, selector=repr(self.plan.selector), problems=tuple(problems))

    def restore_or_initialize(self, sess, checkpoint) -> AverageRestoreReport:
        """Like ``plan.restore_or_initialize``, restoring from shadows where the checkpoint has them."""
        import tensorflow as tf

        plan = self.plan
        if getattr(sess, "graph", None) is not plan.graph:
            raise ValueError("the session runs another graph than the plan's; "
                             "create it with tf.compat.v1.Session(graph=plan.graph)")
        prefix = self._resolve(checkpoint)
        if prefix is None:
            report = plan.restore_or_initialize(sess, None)
            return AverageRestoreReport(None, report.restored, report.initialized)
        chosen = self.choose(prefix)
        check = self.check(prefix)
        mismatched = check.blocking
        if mismatched and plan.on_mismatch == "error":
            raise check.error()
        bad = {p.name for p in mismatched}
        good = [name for name in plan.saved_names if name not in bad]
        try:
            self._restore_ops.run(sess, prefix, good, tensor_names=chosen)
            fallback = [part.initializer for name in plan.saved_names if name in bad for part in self._parts[name]]
            sess.run([plan.init_op] + fallback)
        except tf.errors.OpError as error:
            raise CorruptCheckpointError(
                f"restoring from '{prefix}' failed: {first_line(error)}; variables may be partly restored, "
                "restore again from a good checkpoint"
            ) from error
        still = list(dict.fromkeys(self._logical.get(raw.decode(), raw.decode()) for raw in sess.run(self._uninitialized)))
        if still:
            raise UninitializedVariablesError(
                f"after restoring from '{prefix}', {len(still)} variable{'s are' if len(still) > 1 else ' is'} "
                f"still uninitialized: {', '.join(still)}",
                still,
            )
        keys = plan.checkpoint_names
        return AverageRestoreReport(
            checkpoint=prefix,
            restored=tuple(good),
            initialized=tuple(n for n in plan.catalog.ordered_names if n in bad or n not in keys),
            mismatched=mismatched,
            from_averages=tuple(n for n in good if chosen[n] != keys[n]),
        )

    def _resolve(self, checkpoint):
        import tensorflow as tf

        if checkpoint is None:
            return None
        path = os.fspath(checkpoint)
        if tf.io.gfile.isdir(path):
            return self.plan.backend.latest_checkpoint(path)
        return self.plan.backend.prefix(path)
