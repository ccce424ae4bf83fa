"""A plan inside ``MonitoredTrainingSession``: the Scaffold that saves the subset and initializes the rest.

``MonitoredTrainingSession`` restores the latest checkpoint of its ``checkpoint_dir``
with the scaffold's Saver and runs ``init_op`` only when there is none, so a plan's
"initialize the rest" must happen elsewhere: :func:`scaffold` initializes the
variables the plan does not save in ``local_init_op``, each only if it is still
uninitialized, which runs on every session creation, after the restore. Build it
before the session: ``MonitoredTrainingSession`` finalizes the graph.

Example::

    with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
            checkpoint_dir='run/', scaffold=scaffold(p)) as sess:
        sess.run(train_op)
"""

from __future__ import annotations

import logging
import os

from .. import tf_internals
from ..errors import NoSaverError

logger = logging.getLogger("subsetsaver.training")

_OWNED_BY_SCAFFOLD = {
    "saver": "the scaffold's Saver is the plan's",
    "init_op": "the scaffold initializes every variable of the plan",
    "ready_op": "the scaffold reports the plan's uninitialized variables",
    "ready_for_local_init_op": "the scaffold waits for the plan's saved variables",
    "copy_from_scaffold": "pass the pieces you want to keep (init_fn, local_init_op, ...) directly",
}


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

    with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
            checkpoint_dir='run/', save_checkpoint_steps=100, scaffold=scaffold(p)) as sess:
        sess.run(train_op)
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
            tf_internals.mark_used(report)  # the session manager runs them later

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

    sess.run(initialize_if_uninitialized(plan.rest))   # a no-op the second time
    """
    import tensorflow as tf

    variables = list(variables)
    graph = variables[0].graph if variables else tf.compat.v1.get_default_graph()
    assigns = []
    with graph.as_default(), tf.compat.v1.name_scope(name):
        for variable in variables:
            value = _initial_value(variable)
            if tf_internals.is_reference(value):
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
