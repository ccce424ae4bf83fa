"""The library's exceptions: one root, and each leaf also a builtin users already catch.

Example::

    try:
        ss.parse("trainabel()")
    except ValueError as error:      # SelectorSyntaxError is a ValueError
        print(error)
"""


class SubsetSaverError(Exception):
    """Root of every error subsetsaver raises on purpose."""


class SelectorSyntaxError(SubsetSaverError, ValueError):
    """Selector text that does not parse; the message points at the column."""

    def __init__(self, message, text="", column=0):
        self.text = text
        self.column = column
        self.reason = message
        if text:
            message = f"{message}\n  {text}\n  {' ' * column}^"
        super().__init__(message)


class EmptySelectionError(SubsetSaverError, LookupError):
    """A selector matched no variable although an empty result was not asked for."""


class CheckpointMismatchError(SubsetSaverError, ValueError):
    """A checkpoint does not hold what the plan expects (missing names, shapes, dtypes)."""

    def __init__(self, message, problems=()):
        self.problems = tuple(problems)
        super().__init__(message)


class CorruptCheckpointError(SubsetSaverError, OSError):
    """A checkpoint file is missing, truncated, or fails its own validation."""


class SubsetSaverWarning(UserWarning):
    """Warnings about a selection, e.g. state it forgets to save."""


class CheckpointNotFoundError(CorruptCheckpointError, FileNotFoundError):
    """No checkpoint (or MetaGraph file) where one was named."""


class UninitializedVariablesError(SubsetSaverError, RuntimeError):
    """Variables are still uninitialized where the plan needs them initialized (before a save, after a restore)."""

    def __init__(self, message, names=()):
        self.names = tuple(names)
        super().__init__(message)
