"""subsetsaver: save and restore exactly the TensorFlow 1 variables you choose.

Example::

    import subsetsaver as ss
    sel = ss.trainable() | ss.bn_stats()
    print(sel.explain(graph))
"""

from . import keras
from .audit import Finding, Severity, audit, audit_values
from .draw import draw_plan, draw_sets
from .errors import (
    CheckpointMismatchError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmptySelectionError,
    SelectorSyntaxError,
    SubsetSaverError,
    SubsetSaverWarning,
    UninitializedVariablesError,
)
from .parser import parse
from .planner import plan
from .portable import restore_npz, save_npz
from .selectors import (
    Selector,
    averages,
    bn_stats,
    collection,
    everything,
    global_step,
    local,
    name,
    nothing,
    regex,
    scope,
    slots,
    trainable,
    variables,
)
from .training import PlanSaverHook, StaleStatsHook, warm_start

__version__ = "0.1.0"

__all__ = [
    "keras",
    "restore_npz",
    "save_npz",
    "PlanSaverHook",
    "StaleStatsHook",
    "warm_start",
    "Finding",
    "Severity",
    "audit",
    "audit_values",
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "CorruptCheckpointError",
    "EmptySelectionError",
    "SelectorSyntaxError",
    "Selector",
    "SubsetSaverError",
    "SubsetSaverWarning",
    "UninitializedVariablesError",
    "averages",
    "bn_stats",
    "collection",
    "draw_plan",
    "draw_sets",
    "everything",
    "global_step",
    "local",
    "name",
    "nothing",
    "parse",
    "plan",
    "regex",
    "scope",
    "slots",
    "trainable",
    "variables",
]
