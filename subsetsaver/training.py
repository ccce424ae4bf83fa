"""Training loops: a plan inside ``MonitoredTrainingSession``, warm starts, saving hooks,
and moving-average weights for evaluation.

``MonitoredTrainingSession`` restores the latest checkpoint of its ``checkpoint_dir``
with the scaffold's Saver and runs ``init_op`` only when there is none, so a plan's
"initialize the rest" must happen elsewhere: :func:`scaffold` initializes the
variables the plan does not save in ``local_init_op``, each only if it is still
uninitialized, which runs on every session creation, after the restore.

Everything here builds its ops when it is called (the plan, the scaffold, the warm
start, the averages restorer); call them before the session is created, because
``MonitoredTrainingSession`` finalizes the graph.

Example::

    >>> p = ss.plan(ss.trainable() | ss.bn_stats(), graph)
    >>> start = warm_start(ss.scope('model/backbone'), 'pretrained/model-100',
    ...                    remap={'pretrained/': 'model/backbone/'}, graph=graph)
    >>> with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
    ...         checkpoint_dir='run/', scaffold=scaffold(p, warm_start=start),
    ...         hooks=[StaleStatsHook(p, after_steps=100)]) as sess:
    ...     while not sess.should_stop():
    ...         sess.run(train_op)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from .errors import (
    CheckpointMismatchError,
    CorruptCheckpointError,
    SubsetSaverError,
    UninitializedVariablesError,
)
from .planner import CheckReport, Problem, RestoreReport, compare_spec, first_line

logger = logging.getLogger(__name__)

DEFAULT_EMA_NAME = "ExponentialMovingAverage"
_OWNED_BY_SCAFFOLD = {
    "saver": "the scaffold's Saver is the plan's",
    "init_op": "the scaffold initializes every variable of the plan",
    "ready_op": "the scaffold reports the plan's uninitialized variables",
    "ready_for_local_init_op": "the scaffold waits for the plan's saved variables",
    "copy_from_scaffold": "pass the pieces you want to keep (init_fn, local_init_op, ...) directly",
}


class NoSaverError(SubsetSaverError, RuntimeError):
    """MonitoredTrainingSession tried to save or restore a plan whose backend has no TensorFlow Saver."""


# ---------------------------------------------------------------------------------
# The scaffold
# ---------------------------------------------------------------------------------


def scaffold(plan, warm_start=None, *, resume_from=None, **scaffold_kwargs):
    """A ``tf.compat.v1.train.Scaffold`` that saves ``plan.saved`` and initializes the rest.

    - ``saver``: ``plan.saver``, so ``MonitoredTrainingSession(checkpoint_dir=...)``
      writes only the subset and, on a restart, restores it from there.
    - ``init_op`` (fresh start only): initializes every variable of the plan; then
      ``init_fn`` restores the plan's own latest checkpoint from ``resume_from`` if there
      is one, else runs ``warm_start`` (a :class:`WarmStart`), then the caller's
      ``init_fn``.
    - ``local_init_op`` (every session creation, after the restore): initializes each
      variable of ``plan.rest`` that is still uninitialized, plus lookup tables.
    - ``ready_for_local_init_op`` reports the uninitialized variables of ``plan.saved``
      (they must be restored or initialized first); ``ready_op`` reports those of the
      whole plan.

    ``resume_from``: a directory of the plan's own checkpoints, for runs whose
    MonitoredTrainingSession does not restore them itself: backends without a Saver
    (``backend='npz'``, saved by :class:`PlanSaverHook`) or sessions without
    ``checkpoint_dir``. Other ``scaffold_kwargs`` go to the Scaffold (``init_fn`` is
    chained, ``local_init_op`` grouped with the scaffold's).

    >>> with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
    ...         checkpoint_dir='run/', save_checkpoint_steps=100, scaffold=scaffold(p)) as sess:
    ...     sess.run(train_op)
    """
    import tensorflow as tf

    for option, why in _OWNED_BY_SCAFFOLD.items():
        if option in scaffold_kwargs:
            raise TypeError(f"scaffold() does not take {option!r}: {why}")
    graph = plan.graph
    if warm_start is not None and warm_start.graph is not graph:
        raise ValueError("the warm start was built for another graph than the plan's; pass graph=plan.graph")
    _check_no_later_variables(plan)
    if graph.finalized:
        raise RuntimeError("the graph is finalized; build the scaffold before MonitoredTrainingSession is created")
    user_init_fn = scaffold_kwargs.pop("init_fn", None)
    user_local_init_op = scaffold_kwargs.pop("local_init_op", None)
    every_variable = list(plan.saved) + list(plan.rest)
    with graph.as_default(), tf.compat.v1.name_scope("subsetsaver_scaffold"):
        init_op = tf.compat.v1.variables_initializer(every_variable, name="initialize_all")
        local_pieces = [initialize_if_uninitialized(plan.rest), tf.compat.v1.tables_initializer()]
        if user_local_init_op is not None:
            local_pieces.append(user_local_init_op)
        local_init_op = tf.group(*local_pieces, name="initialize_rest_if_uninitialized")
        ready_for_local_init_op = tf.compat.v1.report_uninitialized_variables(plan.saved, name="ready_for_local_init")
        ready_op = tf.compat.v1.report_uninitialized_variables(every_variable, name="ready")
        for report in (ready_for_local_init_op, ready_op):
            getattr(report, "mark_used", lambda: None)()  # the session manager runs them later

    def init_fn(the_scaffold, session):
        own = _latest_checkpoint(plan, resume_from) if resume_from is not None else None
        if own is not None:
            report = plan.restore_or_initialize(session, own)
            logger.info("resumed %d variables from %s", len(report.restored), own)
        elif warm_start is not None:
            warm_start.restore(session)
        if user_init_fn is not None:
            user_init_fn(the_scaffold, session)

    saver = plan.saver if plan.saver is not None else _NoSaver(plan.backend.name)
    return tf.compat.v1.train.Scaffold(
        init_op=init_op,
        init_fn=init_fn,
        ready_op=ready_op,
        ready_for_local_init_op=ready_for_local_init_op,
        local_init_op=local_init_op,
        saver=saver,
        **scaffold_kwargs,
    )


def initialize_if_uninitialized(variables, name="initialize_if_uninitialized"):
    """One op that initializes each of ``variables`` only if it is not initialized yet.

    Per variable: ``IsVariableInitialized`` steers the initial value through a
    ``Switch``; the assign runs only on the "not initialized" side (dataflow
    control flow, so it works for reference and resource variables alike and adds
    three or four small ops per variable, no function). The initial values are
    computed on every run, used or not.

    >>> sess.run(initialize_if_uninitialized(plan.rest))   # a no-op the second time
    """
    import tensorflow as tf

    variables = list(variables)
    graph = variables[0].graph if variables else tf.compat.v1.get_default_graph()
    assigns = []
    with graph.as_default(), tf.compat.v1.name_scope(name):
        for variable in variables:
            value = _initial_value(variable)
            if value.dtype._is_ref_dtype:
                value = tf.identity(value)
            initialized = tf.compat.v1.is_variable_initialized(variable)
            when_uninitialized, _ = tf.raw_ops.Switch(data=value, pred=initialized)
            assigns.append(variable.assign(when_uninitialized, read_value=False))
        return tf.group(*assigns, name="group")


def _initial_value(variable):
    op = variable.initializer
    if op.type in ("Assign", "AssignVariableOp") and len(op.inputs) == 2:
        return op.inputs[1]  # what the initializer assigns, dependency guards included
    value = getattr(variable, "initial_value", None)
    if value is None:
        raise ValueError(
            f"cannot initialize {variable.op.name} conditionally: its initializer {op.name} ({op.type}) "
            "assigns no value tensor; create the variable with an initial value"
        )
    return value


def _check_no_later_variables(plan):
    known = {variable.op.name for variable in list(plan.saved) + list(plan.rest)}
    graph = plan.graph
    later = [v.op.name for v in graph.get_collection("variables") + graph.get_collection("local_variables")
             if v.op.name not in known]
    if later:
        later = list(dict.fromkeys(later))
        raise ValueError(
            f"{len(later)} variable{'s were' if len(later) > 1 else ' was'} created after the plan: "
            f"{', '.join(later[:10])}{', ...' if len(later) > 10 else ''}; "
            "build the plan after the whole model (optimizer and moving averages included)"
        )


def _latest_checkpoint(plan, directory):
    import tensorflow as tf

    directory = os.fspath(directory)
    if not tf.io.gfile.isdir(directory):
        return None
    return plan.backend.latest_checkpoint(directory)


class _NoSaver:
    """The scaffold's saver for a backend without a TensorFlow Saver (npz).

    False in a boolean context, so ``SessionManager`` never restores through it; a
    ``CheckpointSaverHook`` that tries to save through it gets a NoSaverError saying
    what to do instead of a full TensorFlow checkpoint of every variable.
    """

    def __init__(self, backend_name):
        self.backend_name = backend_name
        self.last_checkpoints = []
        self.saver_def = None

    def __bool__(self):
        return False

    def build(self):
        pass

    def _refuse(self, *args, **kwargs):
        raise NoSaverError(
            f"a plan with backend {self.backend_name!r} has no TensorFlow Saver, so MonitoredTrainingSession "
            "cannot save or restore it: pass save_checkpoint_secs=None and save_checkpoint_steps=None, save with "
            "PlanSaverHook(plan, directory, save_steps=...) and resume with scaffold(plan, resume_from=directory)"
        )

    save = restore = recover_last_checkpoints = _refuse


# ---------------------------------------------------------------------------------
# Warm start
# ---------------------------------------------------------------------------------


class WarmStart:
    """Restores a subset from a pretrained checkpoint on a run's first start only.

    Built by :func:`warm_start`. ``plan``: the plan over the chosen subset (its Saver
    reads the pretrained names); ``checkpoint``: the pretrained prefix; ``check``: the
    pre-flight diff made at construction; ``report``: the RestoreReport once it ran
    (None while the run resumed from its own checkpoints instead). Pass it to
    :func:`scaffold`, or use :meth:`init_fn` as a Scaffold's ``init_fn``.
    """

    def __init__(self, plan, checkpoint, check):
        self.plan = plan
        self.checkpoint = checkpoint
        self.check = check
        self.report = None

    @property
    def graph(self):
        return self.plan.graph

    def restore(self, session) -> RestoreReport:
        """Restore the subset from the pretrained checkpoint, then (re)initialize every
        other variable, so initializers that read restored weights see them."""
        self.report = self.plan.restore_or_initialize(session, self.checkpoint)
        logger.info("warm start: restored %d variables from %s", len(self.report.restored), self.checkpoint)
        return self.report

    def init_fn(self, scaffold, session):
        """``Scaffold(init_fn=start.init_fn)``: MonitoredTrainingSession calls it only on a fresh start."""
        self.restore(session)

    def __repr__(self):
        return f"<WarmStart {self.plan.selector!r} from {self.checkpoint!r}>"


def warm_start(sel, checkpoint, remap=None, on_mismatch="error", graph=None) -> WarmStart:
    """A :class:`WarmStart` restoring ``sel`` from the pretrained ``checkpoint`` (prefix
    or directory), with ``remap`` for other names (``{'pretrained/': 'model/backbone/'}``).

    Its ops are built now (call it before the session is created). The pre-flight diff
    runs now too: with ``on_mismatch='error'`` a variable the checkpoint lacks, or holds
    with another shape or dtype, raises CheckpointMismatchError before anything runs;
    with ``'initialize'`` those variables are initialized instead.

    >>> start = warm_start(ss.scope('model/backbone'), 'pretrained/',
    ...                    remap={'pretrained/': 'model/backbone/'}, graph=graph)
    """
    from .planner import plan as make_plan

    subset = make_plan(sel, graph, remap=remap, on_mismatch=on_mismatch)
    check = subset.check(checkpoint)
    if check.blocking and on_mismatch == "error":
        raise CheckpointMismatchError(check.message(), check.blocking)
    return WarmStart(subset, check.checkpoint, check)


# ---------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------


class PlanSaverHook:
    """Saves a plan every ``save_steps`` steps or ``save_secs`` seconds, with any backend.

    A ``tf.compat.v1.train.SessionRunHook`` (it implements the interface without
    importing TensorFlow at import time). Files are ``CHECKPOINT_DIR/BASENAME-STEP``
    (TensorFlow checkpoints) or ``BASENAME-STEP.npz`` (``backend='npz'``), numbered by
    the global step (or, without one, by the hook's count of steps), each with its
    ``.subset.json`` manifest; the backend's ``max_to_keep`` holds, also for the files
    an earlier (killed) run left. A last save happens when the session ends normally.
    ``saved``: the paths written by this hook.

    >>> hook = PlanSaverHook(p, 'run/', save_steps=100)
    >>> tf.compat.v1.train.MonitoredTrainingSession(scaffold=scaffold(p, resume_from='run/'), hooks=[hook])
    """

    def __init__(self, plan, checkpoint_dir, save_steps=None, save_secs=None, checkpoint_basename="model"):
        if (save_steps is None) == (save_secs is None):
            raise ValueError("PlanSaverHook needs exactly one of save_steps and save_secs")
        for name, value in (("save_steps", save_steps), ("save_secs", save_secs)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        self.plan = plan
        self.checkpoint_dir = os.fspath(checkpoint_dir)
        self.save_path = os.path.join(self.checkpoint_dir, checkpoint_basename)
        self.save_steps = save_steps
        self.save_secs = save_secs
        self.saved = []
        self._timer = None
        self._global_step = None
        self._steps = 0
        self._inherited = []

    # -- SessionRunHook --------------------------------------------------------------
    def begin(self):
        import tensorflow as tf

        graph = tf.compat.v1.get_default_graph()
        if graph is not self.plan.graph:
            raise ValueError("PlanSaverHook runs in another graph than its plan's; create the session "
                             "inside `with plan.graph.as_default():`")
        self._timer = tf.compat.v1.train.SecondOrStepTimer(every_secs=self.save_secs, every_steps=self.save_steps)
        self._global_step = tf.compat.v1.train.get_global_step(graph)
        self._steps = 0
        tf.io.gfile.makedirs(self.checkpoint_dir)

    def after_create_session(self, session, coord):
        self._recover_last_checkpoints()
        self._timer.update_last_triggered_step(self._current_step(session))

    def before_run(self, run_context):
        if self._global_step is None:
            return None
        import tensorflow as tf

        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        self._steps += 1
        # The global step fetched with the run may be read before the train op updated it.
        stale = run_values.results + 1 if self._global_step is not None else self._steps
        if self._timer.should_trigger_for_step(stale):
            step = self._current_step(run_context.session)
            if self._timer.should_trigger_for_step(step):
                self._timer.update_last_triggered_step(step)
                self._save(run_context.session, step)

    def end(self, session):
        step = self._current_step(session)
        if step != self._timer.last_triggered_step():
            self._save(session, step)

    # -- helpers ---------------------------------------------------------------------
    def _current_step(self, session):
        if self._global_step is None:
            return self._steps
        return int(session.run(self._global_step))

    def _save(self, session, step):
        path = self.plan.save(session, self.save_path, global_step=step)
        self.saved.append(path)
        logger.info("saved %s (step %d)", path, step)
        self._retire_inherited()
        return path

    def _recover_last_checkpoints(self):
        """Take over the files an earlier run kept, so ``max_to_keep`` counts them."""
        import tensorflow as tf

        backend = self.plan.backend
        if self.plan.saver is not None:
            state = tf.train.get_checkpoint_state(self.checkpoint_dir)
            if state is not None and not self.plan.saver.last_checkpoints:
                self.plan.saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
            return
        kept = [path for path in _npz_kept(self.checkpoint_dir) if tf.io.gfile.exists(path)]
        recover = getattr(backend, "recover_last_checkpoints", None)
        if recover is not None:
            recover(kept)
        else:
            self._inherited = [path for path in kept if path not in backend.last_checkpoints]

    def _retire_inherited(self):
        """Delete the oldest files of an earlier run that ``max_to_keep`` no longer allows."""
        limit = getattr(self.plan.backend, "max_to_keep", None)
        if not limit or not self._inherited:
            return
        import tensorflow as tf

        from . import manifest as manifest_module

        excess = len(self._inherited) + len(self.plan.backend.last_checkpoints) - limit
        for path in self._inherited[:max(excess, 0)]:
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
            manifest_module.remove_manifest(path)
            logger.info("deleted %s, kept by an earlier run (max_to_keep=%d)", path, limit)
        self._inherited = self._inherited[max(excess, 0):]


def _npz_kept(directory) -> list:
    """The files the state file of a portable-checkpoint directory lists as kept, oldest first."""
    import tensorflow as tf

    from .portable import STATE_FILENAME, STATE_FORMAT

    path = os.path.join(directory, STATE_FILENAME)
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            state = json.loads(handle.read(1 << 20).decode("utf-8"))
    except (tf.errors.OpError, ValueError, UnicodeDecodeError):
        return []
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        return []
    names = [n for n in state.get("kept", ()) if isinstance(n, str) and "/" not in n and n.strip(".")]
    return [os.path.join(directory, name) for name in names]


class StaleStatsHook:
    """Runs ``ss.audit_values`` once, after the first ``after_steps`` steps, and logs
    (``logging`` logger ``subsetsaver.training``, level WARNING) every batch-norm
    statistic the plan saves that still holds its initial value: the training op does
    not update it, and every checkpoint would carry a useless statistic.

    A ``tf.compat.v1.train.SessionRunHook`` (by interface). ``findings``: the audit's
    findings once it ran, else None.

    >>> hooks = [StaleStatsHook(p, after_steps=100)]
    """

    def __init__(self, plan, after_steps=100):
        if not isinstance(after_steps, int) or after_steps < 1:
            raise ValueError(f"after_steps must be a positive number of steps, got {after_steps!r}")
        self.plan = plan
        self.after_steps = after_steps
        self.findings = None
        self._steps = 0

    def begin(self):
        self._steps = 0

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        self._steps += 1
        if self._steps != self.after_steps or self.findings is not None:
            return
        from .audit import audit_values

        self.findings = audit_values(run_context.session, self.plan)
        for finding in self.findings:
            logger.warning("%s", finding)
        if not self.findings:
            logger.info("after %d steps, every batch-norm statistic the plan saves has moved", self._steps)

    def end(self, session):
        pass


# ---------------------------------------------------------------------------------
# Moving averages for evaluation
# ---------------------------------------------------------------------------------


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
    from .roles import roles_from_names

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

    >>> average_restore_map(p, 'train/')
    {'layer1/w': 'layer1/w/ExponentialMovingAverage', ..., 'layer2/b': 'layer2/b'}
    """
    from .catalog import checkpoint_prefix, open_checkpoint

    if hasattr(plan_or_sel, "saved_names") and hasattr(plan_or_sel, "checkpoint_names"):
        keys = {name: plan_or_sel.checkpoint_names[name] for name in plan_or_sel.saved_names}
    else:
        from .parser import parse

        selector = parse(plan_or_sel) if isinstance(plan_or_sel, str) else plan_or_sel
        keys = {name: name for name in selector.names(graph)}
    reader = open_checkpoint(checkpoint_prefix(checkpoint))
    shadows = shadow_names(keys.values(), reader.get_variable_to_shape_map(), ema)
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

    >>> restorer = AverageRestorer(ss.plan(ss.trainable(), eval_graph))
    >>> graph.finalize()
    >>> restorer.restore_or_initialize(sess, 'train/').from_averages
    ('layer1/w', 'layer1/b', 'layer2/w')
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
        self._restore_ops, self._name_feeds = {}, {}
        with plan.graph.as_default(), tf.compat.v1.name_scope("subsetsaver_averages"):
            self._prefix_feed = tf.compat.v1.placeholder(tf.string, [], name="prefix")
            for name in plan.saved_names:
                parts = self._parts[name]
                feed = tf.compat.v1.placeholder(tf.string, [len(parts)], name="tensor_names")
                specs = [_slice_spec(part) for part in parts]
                values = tf.raw_ops.RestoreV2(prefix=self._prefix_feed, tensor_names=feed, shape_and_slices=specs,
                                              dtypes=[part.dtype.base_dtype for part in parts])
                self._name_feeds[name] = feed
                self._restore_ops[name] = tf.group(
                    *(part.assign(value, read_value=False) for part, value in zip(parts, values))
                )
            self._uninitialized = tf.compat.v1.report_uninitialized_variables(
                list(plan.saved) + list(plan.rest), name="report_uninitialized"
            )
            getattr(self._uninitialized, "mark_used", lambda: None)()  # it is run later, not now

    def choose(self, prefix) -> dict:
        """Variable name -> checkpoint name to restore it from, for the checkpoint ``prefix``."""
        contents = self.plan.backend.contents(prefix)
        keys = self.plan.checkpoint_names
        shadows = shadow_names([keys[n] for n in self.plan.saved_names], contents, self.ema)
        return {name: shadows.get(keys[name], keys[name]) for name in self.plan.saved_names}

    def check(self, prefix) -> CheckReport:
        """The pre-flight diff against the names :meth:`choose` picks (only blocking problems)."""
        contents = self.plan.backend.contents(prefix)
        problems = []
        for name, key in self.choose(prefix).items():
            shape, dtype = self.plan.spec(name)
            if key not in contents:
                problems.append(Problem("missing", name, key, shape, dtype))
                continue
            problem = compare_spec(name, key, shape, dtype, contents[key])
            if problem is not None:
                problems.append(problem)
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
            raise CheckpointMismatchError(check.message(), mismatched)
        bad = {p.name for p in mismatched}
        good = [name for name in plan.saved_names if name not in bad]
        feeds = {self._prefix_feed: prefix}
        for name in good:
            feeds[self._name_feeds[name]] = [chosen[name]] * len(self._parts[name])
        try:
            sess.run([self._restore_ops[name] for name in good], feeds)
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


def _slice_spec(part) -> str:
    info = getattr(part, "_save_slice_info", None)
    return info.spec if info is not None else ""
