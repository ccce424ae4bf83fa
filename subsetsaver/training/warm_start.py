"""Warm starts: restore a subset from a pretrained checkpoint on a run's first start only.

Example::

    start = warm_start(ss.scope('model/backbone'), 'pretrained/model-100',
                       remap={'pretrained/': 'model/backbone/'}, graph=graph)
    scaffold = ss.training.scaffold(p, warm_start=start)
"""

from __future__ import annotations

import logging

from ..graph_mode import tensorflow
from ..planning import RestoreReport
from ..planning import plan as make_plan

logger = logging.getLogger("subsetsaver.training")


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

    start = warm_start(ss.scope('model/backbone'), 'pretrained/',
                       remap={'pretrained/': 'model/backbone/'}, graph=graph)
    """
    tensorflow("ss.warm_start")
    subset = make_plan(sel, graph, remap=remap, on_mismatch=on_mismatch)
    check = subset.check(checkpoint)
    if check.blocking and on_mismatch == "error":
        raise check.error()
    return WarmStart(subset, check.checkpoint, check)
