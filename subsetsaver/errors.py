"""The library's exceptions: one root, and each leaf also a builtin users already catch.

Example::

    try:
        ss.parse("trainabel()")
    except ValueError as error:      # SelectorSyntaxError is a ValueError
        print(error)
"""

import re


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


class UnsupportedDtypeError(SubsetSaverError, TypeError):
    """An array whose dtype a portable checkpoint cannot hold (strings, objects, ...)."""


class NoSaverError(SubsetSaverError, RuntimeError):
    """MonitoredTrainingSession tried to save or restore a plan whose backend has no TensorFlow Saver."""


class RestoreOpsMissingError(SubsetSaverError, RuntimeError):
    """A restore needs ops that a finalized graph can no longer get."""


class BacktrackingRegexError(SelectorSyntaxError, re.error):
    """A ``regex()`` pattern refused because Python's ``re`` can backtrack exponentially on it.

    Also a ``re.error``, like every pattern ``regex()`` refuses, so ``parse`` reports it as an
    invalid regular expression at its argument. ``pattern`` and ``pos`` (as in ``re.error``) point
    at the repetition or alternation whose choice the next character does not decide.
    """

    def __init__(self, message, pattern, position):
        SelectorSyntaxError.__init__(self, message)
        self.msg, self.pattern, self.pos = message, pattern, position
        self.lineno = pattern.count("\n", 0, position) + 1
        self.colno = position - pattern.rfind("\n", 0, position)
