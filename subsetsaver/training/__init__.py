"""The training room: a plan inside training loops.

``MonitoredTrainingSession`` restores a plan's subset through :func:`scaffold` (which
lives with the plan, in ``subsetsaver.planning.scaffold``, and is re-exported here);
:func:`warm_start` restores a pretrained subset on a run's first start only;
:class:`PlanSaverHook` saves a plan with any backend on a schedule;
:class:`StaleStatsHook` warns once about batch-norm statistics that never move;
:class:`PreemptionHook` and :func:`preemptible` save at the current step on SIGTERM and stop.
Moving-average weights for evaluation live in ``subsetsaver.planning.averages``
(re-exported here as :class:`AverageRestorer`, :func:`average_restore_map`).

This room imports ``planning``, ``audit``, ``formats`` and ``errors``.

Example::

    p = ss.plan(ss.trainable() | ss.bn_stats(), graph)
    start = warm_start(ss.scope('model/backbone'), 'pretrained/model-100',
                       remap={'pretrained/': 'model/backbone/'}, graph=graph)
    with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
            checkpoint_dir='run/', scaffold=scaffold(p, warm_start=start),
            hooks=[StaleStatsHook(p, after_steps=100)]) as sess:
        while not sess.should_stop():
            sess.run(train_op)
"""

from ..errors import NoSaverError
from ..planning import (
    DEFAULT_EMA_NAME,
    AverageRestorer,
    AverageRestoreReport,
    average_restore_map,
    initialize_if_uninitialized,
    scaffold,
    shadow_names,
)
from .hooks import PlanSaverHook, StaleStatsHook
from .preemption import Preemptible, PreemptionHook, preemptible
from .warm_start import WarmStart, warm_start

__all__ = [
    "DEFAULT_EMA_NAME",
    "AverageRestoreReport",
    "AverageRestorer",
    "NoSaverError",
    "PlanSaverHook",
    "Preemptible",
    "PreemptionHook",
    "StaleStatsHook",
    "WarmStart",
    "average_restore_map",
    "initialize_if_uninitialized",
    "preemptible",
    "scaffold",
    "shadow_names",
    "warm_start",
]
