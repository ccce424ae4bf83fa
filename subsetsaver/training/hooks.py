"""Session hooks for training loops: save a plan on a schedule, warn about stale statistics.

Both implement ``tf.compat.v1.train.SessionRunHook``'s interface without importing
TensorFlow at import time.

Example::

    hooks = [PlanSaverHook(p, 'run/', save_steps=100), StaleStatsHook(p, after_steps=100)]
    with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
            scaffold=scaffold(p, resume_from='run/'), hooks=hooks) as sess:
        sess.run(train_op)
"""

from __future__ import annotations

import logging
import os

from ..audit import audit_values
from ..formats import npz, subset_manifest

logger = logging.getLogger("subsetsaver.training")


class PlanSaverHook:
    """Saves a plan every ``save_steps`` steps or ``save_secs`` seconds, with any backend.

    A ``tf.compat.v1.train.SessionRunHook`` (it implements the interface without
    importing TensorFlow at import time). Files are ``CHECKPOINT_DIR/BASENAME-STEP``
    (TensorFlow checkpoints) or ``BASENAME-STEP.npz`` (``backend='npz'``), numbered by
    the global step (or, without one, by the hook's count of steps), each with its
    ``.subset.json`` manifest; the backend's ``max_to_keep`` holds, also for the files
    an earlier (killed) run left. A last save happens when the session ends normally.
    ``saved``: the paths written by this hook.

    hook = PlanSaverHook(p, 'run/', save_steps=100)
    tf.compat.v1.train.MonitoredTrainingSession(scaffold=scaffold(p, resume_from='run/'), hooks=[hook])
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

        excess = len(self._inherited) + len(self.plan.backend.last_checkpoints) - limit
        for path in self._inherited[:max(excess, 0)]:
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
            subset_manifest.remove_manifest(path)
            logger.info("deleted %s, kept by an earlier run (max_to_keep=%d)", path, limit)
        self._inherited = self._inherited[max(excess, 0):]


def _npz_kept(directory) -> list:
    """The files the state file of a portable-checkpoint directory lists as kept, oldest first."""
    state = npz.read_state(os.path.join(directory, npz.STATE_FILENAME))
    return [] if state is None else [os.path.join(directory, name) for name in state.kept]


class StaleStatsHook:
    """Runs ``ss.audit_values`` once, after the first ``after_steps`` steps, and logs
    (``logging`` logger ``subsetsaver.training``, level WARNING) every batch-norm
    statistic the plan saves that still holds its initial value: the training op does
    not update it, and every checkpoint would carry a useless statistic.

    A ``tf.compat.v1.train.SessionRunHook`` (by interface). ``findings``: the audit's
    findings once it ran, else None.

    hooks = [StaleStatsHook(p, after_steps=100)]
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
        self.findings = audit_values(run_context.session, self.plan)
        for finding in self.findings:
            logger.warning("%s", finding)
        if not self.findings:
            logger.info("after %d steps, every batch-norm statistic the plan saves has moved", self._steps)

    def end(self, session):
        pass
