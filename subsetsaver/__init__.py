"""subsetsaver: save and restore exactly the TensorFlow 1 variables you choose.

This module only re-exports the public contract; names outside ``errors``, ``audit`` and
``selectors`` load their room on first use (``_LAZY``), so the command line starts fast.
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

import importlib

from .audit import Finding, Severity, audit, audit_values
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
from .version import __version__

# The rooms below load when one of their names is first used, so that ``import subsetsaver.cli``
# (every command line run) does not pay for what the command does not use.
_LAZY = {
    "keras": ("keras", None),
    "draw_plan": ("draw", "draw_plan"),
    "draw_sets": ("draw", "draw_sets"),
    "convert": ("layouts", "convert"),
    "RowMap": ("planning", "RowMap"),
    "plan": ("planning", "plan"),
    "restore_npz": ("portable", "restore_npz"),
    "save_npz": ("portable", "save_npz"),
    "average": ("tools.average", "average"),
    "diff": ("tools.diff", "diff"),
    "rewrite": ("tools.rewrite", "rewrite"),
    "PlanSaverHook": ("training", "PlanSaverHook"),
    "StaleStatsHook": ("training", "StaleStatsHook"),
    "warm_start": ("training", "warm_start"),
}


_ROOMS = ("catalog", "cli", "draw", "formats", "layouts", "planning", "portable", "tools", "training")


def __getattr__(name):
    """Load a public name's room on first use (``ss.plan``, ``ss.keras``, ``ss.training``, ...)."""
    if name not in _LAZY and name not in _ROOMS:
        raise AttributeError(f"module 'subsetsaver' has no attribute '{name}'")
    module, attribute = _LAZY.get(name, (name, None))
    loaded = importlib.import_module(f".{module}", __name__)
    value = loaded if attribute is None else getattr(loaded, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_ROOMS))


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
