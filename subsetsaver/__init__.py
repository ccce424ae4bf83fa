"""subsetsaver: save and restore exactly the TensorFlow 1 variables you choose.

This module only re-exports the public contract. The package is laid out as its
pipeline, each room importing only the rooms before it: ``formats`` (files, no graph)
-> ``catalog`` (variables read from a source) -> ``selectors`` (which ones) -> ``audit``
(what the choice forgets) -> ``planning`` (the Saver, initializer and backends) ->
``portable``, ``training``, ``tools``, ``draw``, ``keras`` -> ``cli``. See
``docs/architecture.md``.

Example::

    import subsetsaver as ss
    sel = ss.trainable() | ss.bn_stats()
    print(sel.explain(graph))
"""

from . import keras
from .audit import Finding, Severity, audit, audit_values
from .draw import draw_plan, draw_sets
from .errors import (
    Blank,
    CheckpointMismatchError,
    CheckpointNotFoundError,
    CheckpointWriteError,
    CorruptCheckpointError,
    EmptySelectionError,
    Fix,
    InvalidNameError,
    InvalidOutputError,
    InvalidRegexError,
    LayoutMapError,
    NoSaverError,
    OutputExistsError,
    RemapRuleError,
    RemoteStorageError,
    RestoreOpsMissingError,
    RowMapError,
    SelectorSyntaxError,
    SubsetSaverError,
    SubsetSaverWarning,
    UninitializedVariablesError,
    UnknownFormatError,
    UnsupportedDtypeError,
    UnsupportedRegexError,
)
from .layouts import convert
from .planning import RowMap, plan
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
    parse,
    regex,
    scope,
    slots,
    trainable,
    variables,
)
from .tools.average import average
from .tools.diff import diff
from .tools.rewrite import rewrite
from .training import PlanSaverHook, StaleStatsHook, warm_start
from .version import __version__

__all__ = [
    "__version__",
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
    "CheckpointWriteError",
    "CorruptCheckpointError",
    "EmptySelectionError",
    "Fix",
    "Blank",
    "InvalidOutputError",
    "OutputExistsError",
    "RemapRuleError",
    "UnknownFormatError",
    "SelectorSyntaxError",
    "Selector",
    "SubsetSaverError",
    "SubsetSaverWarning",
    "UninitializedVariablesError",
    "UnsupportedDtypeError",
    "NoSaverError",
    "RestoreOpsMissingError",
    "RowMap",
    "RowMapError",
    "RemoteStorageError",
    "InvalidRegexError",
    "InvalidNameError",
    "LayoutMapError",
    "UnsupportedRegexError",
    "average",
    "averages",
    "bn_stats",
    "collection",
    "convert",
    "diff",
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
    "rewrite",
    "scope",
    "slots",
    "trainable",
    "variables",
]
