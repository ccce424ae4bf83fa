"""subsetsaver: save and restore exactly the TensorFlow 1 variables you choose.

Example::

    import subsetsaver as ss
    sel = ss.trainable() | ss.bn_stats()
    print(sel.explain(graph))
"""

from .errors import (
    CheckpointMismatchError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmptySelectionError,
    SelectorSyntaxError,
    SubsetSaverError,
    SubsetSaverWarning,
)
from .parser import parse
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

__version__ = "0.1.0"

__all__ = [
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "CorruptCheckpointError",
    "EmptySelectionError",
    "SelectorSyntaxError",
    "Selector",
    "SubsetSaverError",
    "SubsetSaverWarning",
    "averages",
    "bn_stats",
    "collection",
    "everything",
    "global_step",
    "local",
    "name",
    "nothing",
    "parse",
    "regex",
    "scope",
    "slots",
    "trainable",
    "variables",
]
