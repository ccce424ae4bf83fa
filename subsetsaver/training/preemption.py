"""Training that survives preemption: on SIGTERM, finish the step, save, stop.

Preemptible machines (spot VMs, preemptible TPUs, Kubernetes, SLURM) send SIGTERM and give
a grace period (about 30 s on Kubernetes, 120 s on spot VMs) before SIGKILL. Here a signal
handler only notes the signal: the running ``session.run`` finishes (Python runs handlers
between calls), then the plan is saved at the current step, blocking, after any background
save in flight, and named latest; the loop stops and one log line says what was saved.
A second signal during the save is noted and ignored, so it cannot interrupt the save. With
``grace_secs``, the save's time is estimated from the last save's (its rate times the plan's
bytes) and a warning says when it does not fit in what is left of the budget; the save
still runs, and if the process is killed midway the previous checkpoint stays whole.

In a cluster only the chief saves: with ``is_chief=False`` a signal stops the worker
without a save and leaves the others running.

Example::

    hook = PreemptionHook(plan, 'ckpt/model', grace_secs=25)
    with tf.compat.v1.train.MonitoredTrainingSession(scaffold=plan.scaffold(resume_from='ckpt/'),
                                                     hooks=[hook]) as sess:
        while not sess.should_stop():
            sess.run(train_op)
    with preemptible(sess, plan, 'ckpt/model', global_step=step) as p:    # a plain loop
        while not p.stop_requested:
            sess.run(train_op)
"""

from __future__ import annotations

import logging
import numbers
import os
import signal as signal_module
import threading
import time

from ..errors import SubsetSaverError

logger = logging.getLogger("subsetsaver.training")


class _SignalWatch:
    """Handlers for ``signals`` that only note the first one (and count the rest); the previous
    handlers come back with :meth:`uninstall`."""

    def __init__(self, signals):
        self.signals = tuple(signals)
        if not self.signals:
            raise ValueError("signals is empty: name at least one, e.g. signals=(signal.SIGTERM,)")
        self.received = None  # the first signal's number
        self.received_at = None  # time.monotonic() when it came
        self.ignored = 0
        self._previous = {}

    def install(self, owner):
        if threading.current_thread() is not threading.main_thread():
            raise ValueError(f"{owner} must start in the main thread: Python runs signal handlers only there")
        for number in self.signals:
            self._previous[number] = signal_module.signal(number, self._noted)

    def uninstall(self):
        while self._previous:
            number, previous = self._previous.popitem()
            signal_module.signal(number, previous if previous is not None else signal_module.SIG_DFL)

    def _noted(self, number, frame):
        if self.received is None:
            self.received, self.received_at = number, time.monotonic()
        else:
            self.ignored += 1

    @property
    def name(self):
        return signal_module.Signals(self.received).name if self.received is not None else None


class _PreemptionSave:
    """What a hook and a loop share: the watch, and the save when a signal came."""

    def __init__(self, plan, save_path, signals, grace_secs, exit_code, is_chief):
        if grace_secs is not None and not grace_secs > 0:
            raise ValueError(f"grace_secs must be a positive number of seconds, got {grace_secs!r}")
        if exit_code is not None and not isinstance(exit_code, int):
            raise TypeError(f"exit_code must be an int (the process's exit status) or None, got {exit_code!r}")
        self.plan = plan
        self.save_path = os.fspath(save_path)
        self.grace_secs = grace_secs
        self.exit_code = exit_code
        self.is_chief = is_chief
        self.preempted = False  # a signal came and the loop was stopped (and, on the chief, saved)
        self.saved = None  # the path the preemption save wrote
        self._watch = _SignalWatch(signals)

    @property
    def signal(self):
        """The number of the signal that stopped the loop, or None."""
        return self._watch.received

    @property
    def stop_requested(self) -> bool:
        """Whether a signal came: finish the step at hand and leave the loop."""
        return self._watch.received is not None

    def _save(self, sess, step):
        """The chief's save at ``step`` (after the background save in flight), or a worker's stop."""
        self.preempted = True
        if not self.is_chief:
            logger.warning("%s: stopping this worker at step %s without a save (only the chief saves)",
                           self._watch.name, step)
            return None
        try:
            self.plan.wait()
        except (SubsetSaverError, OSError) as error:
            logger.warning("the background save in flight failed (%s); saving now", error)
        self._warn_if_late()
        started = time.monotonic()
        self.saved = self.plan.save(sess, self.save_path, global_step=step)
        seconds = time.monotonic() - started
        ignored = f"; {self._watch.ignored} more signal(s) ignored during the save" if self._watch.ignored else ""
        logger.warning("%s at step %s: saved '%s' (%s bytes in %.1f s) and named it latest; stopping%s",
                       self._watch.name, step, self.saved, f"{self.plan.sizes.saved_bytes:,}", seconds, ignored)
        return self.saved

    def _warn_if_late(self):
        if self.grace_secs is None:
            return
        estimate = self.plan.estimated_save_secs()
        left = self.grace_secs - (time.monotonic() - self._watch.received_at)
        if estimate is not None and estimate > left:
            logger.warning("the save needs about %.1f s (the last save's rate) but %.1f s of the %.1f s grace budget "
                           "are left: it may be cut short, and then the previous checkpoint stays the latest",
                           estimate, max(left, 0.0), self.grace_secs)

    def _exit(self):
        if self.preempted and self.exit_code is not None:
            raise SystemExit(self.exit_code)


class PreemptionHook(_PreemptionSave):
    """A ``SessionRunHook`` that saves ``plan`` at the current step on a signal and stops the session.

    After a signal (``signals``, default SIGTERM) the running step ends, the plan saves at
    the global step (``SAVE_PATH-STEP``), names it latest, ``mon_sess.should_stop()`` turns
    True and ``preempted`` is True. ``grace_secs``: the budget the save is checked against;
    ``exit_code``: when given, the session's close ends the process with that status;
    ``is_chief=False``: stop without a save (in a cluster only the chief saves).

    hook = PreemptionHook(plan, 'ckpt/model', signals=(signal.SIGTERM, signal.SIGINT), exit_code=143)
    """

    def __init__(self, plan, save_path, signals=(signal_module.SIGTERM,), grace_secs=None, *, exit_code=None,
                 is_chief=True):
        super().__init__(plan, save_path, signals, grace_secs, exit_code, is_chief)
        self._global_step = None

    def begin(self):
        import tensorflow as tf

        if tf.compat.v1.get_default_graph() is not self.plan.graph:
            raise ValueError("PreemptionHook runs in another graph than its plan's; create the session "
                             "inside `with plan.graph.as_default():`")
        self._global_step = tf.compat.v1.train.get_global_step(self.plan.graph)
        self._watch.install("PreemptionHook")

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        if self.stop_requested and not self.preempted:
            self._save(run_context.session, self._step(run_context.session))
            run_context.request_stop()

    def end(self, session):
        try:
            if self.stop_requested and not self.preempted:  # the signal came after the last step
                self._save(session, self._step(session))
            self.plan.wait()
        finally:
            self._watch.uninstall()
        self._exit()

    def _step(self, session):
        return None if self._global_step is None else int(session.run(self._global_step))


class Preemptible(_PreemptionSave):
    """The context manager :func:`preemptible` returns: ``stop_requested``, ``preempted``, ``saved``."""

    def __init__(self, sess, plan, save_path, global_step, signals, grace_secs, exit_code, is_chief):
        super().__init__(plan, save_path, signals, grace_secs, exit_code, is_chief)
        self.session = sess
        self.global_step = global_step

    def __enter__(self):
        self._watch.install("preemptible()")
        return self

    def __exit__(self, exc_type, exc, traceback):
        try:
            if exc_type is None:
                if self.stop_requested:
                    self._save(self.session, self._step())
                self.plan.wait()
            else:
                _wait_quietly(self.plan)
        finally:
            self._watch.uninstall()
        if exc_type is None:
            self._exit()
        return False

    def _step(self):
        step = self.global_step
        if step is None or isinstance(step, numbers.Integral):
            return step
        if callable(step) and not hasattr(step, "op"):
            return step()
        return int(self.session.run(step))


def preemptible(sess, plan, save_path, global_step=None, *, signals=(signal_module.SIGTERM,), grace_secs=None,
                exit_code=None, is_chief=True) -> Preemptible:
    """A context manager for plain ``session.run`` loops: leave the loop when ``p.stop_requested``;
    leaving the block after a signal saves ``plan`` at the current step (``global_step``: a
    variable or tensor read then, an int, or a callable returning one) and names it latest;
    ``p.preempted`` tells whether it did. Leaving the block also waits for a background save in
    flight. Options as for :class:`PreemptionHook`.

    with preemptible(sess, plan, 'ckpt/model', global_step=step) as p:
        while not p.stop_requested:
            sess.run(train_op)
    """
    return Preemptible(sess, plan, save_path, global_step, signals, grace_secs, exit_code, is_chief)


def _wait_quietly(plan):
    """While an exception leaves the block: wait for the save in flight, logging (not raising) its error."""
    try:
        plan.wait()
    except Exception as error:  # the exception on its way out says more
        logger.warning("the background save in flight failed: %s", error)
