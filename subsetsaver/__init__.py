"""subsetsaver: save and restore exactly the TensorFlow 1 variables you choose.

This module only re-exports the public contract; names outside ``errors`` load their room
on first use (:mod:`~subsetsaver.lazy_exports`), so the command line starts fast.
The package is laid out as its pipeline, each room importing only the rooms before it:
``formats`` (files, no graph) -> ``catalog`` (variables read from a source) -> ``selectors`` (which ones) -> ``audit``
(what the choice forgets) -> ``planning`` (the Saver, initializer and backends) ->
``portable``, ``training``, ``tools``, ``draw``, ``keras`` -> ``cli``. See
``docs/architecture.md``.

Example::

    import subsetsaver as ss
    sel = ss.trainable() | ss.bn_stats()
    print(sel.explain(graph))
"""

from . import lazy_exports
from .errors import (
    Blank,
    CastRuleError,
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
    ModelBuilderError,
    NoSaverError,
    OutputExistsError,
    RemapRuleError,
    RemoteStorageError,
    RestoreOpsMissingError,
    RowMapError,
    SelectorSyntaxError,
    StoreSettingError,
    StoreUnreachableError,
    SubsetSaverError,
    SubsetSaverWarning,
    TensorFlowNeededError,
    UninitializedVariablesError,
    UnknownFormatError,
    UnsupportedDtypeError,
    UnsupportedRegexError,
    WeightsChoiceError,
)
from .version import __version__

# Every other name loads its room when first used, so that ``import subsetsaver.cli`` (every
# command line run) does not pay for what the command does not use.
__getattr__, __dir__ = lazy_exports.exports(__name__, {
    **lazy_exports.names(".audit", "Finding", "Severity", "audit", "audit_values"),
    **lazy_exports.names(".selectors", "Selector", "averages", "bn_stats", "collection", "everything", "global_step",
                         "local", "name", "nothing", "parse", "regex", "scope", "slots", "trainable", "variables"),
    **lazy_exports.names(".draw", "draw_plan", "draw_sets"),
    **lazy_exports.names(".layouts", "convert"),
    **lazy_exports.names(".planning", "RowMap", "plan"),
    **lazy_exports.names(".portable", "restore_npz", "save_npz"),
    **lazy_exports.names(".tools.average", "average"),
    **lazy_exports.names(".tools.diff", "diff"),
    **lazy_exports.names(".tools.rewrite", "rewrite"),
    **lazy_exports.names(".training", "PlanSaverHook", "StaleStatsHook", "warm_start"),
    **{room: (f".{room}", None) for room in ("catalog", "cli", "draw", "formats", "keras", "layouts", "planning",
                                             "portable", "selectors", "tools", "training")},
})


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
    "CastRuleError",
    "UnknownFormatError",
    "SelectorSyntaxError",
    "Selector",
    "SubsetSaverError",
    "SubsetSaverWarning",
    "TensorFlowNeededError",
    "UninitializedVariablesError",
    "UnsupportedDtypeError",
    "NoSaverError",
    "RestoreOpsMissingError",
    "RowMap",
    "RowMapError",
    "RemoteStorageError",
    "StoreUnreachableError",
    "StoreSettingError",
    "InvalidRegexError",
    "InvalidNameError",
    "LayoutMapError",
    "ModelBuilderError",
    "UnsupportedRegexError",
    "WeightsChoiceError",
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
