"""The library's exceptions: one root, and each leaf also a builtin users already catch.

Example::

    try:
        ss.parse("trainabel()")
    except ValueError as error:      # SelectorSyntaxError is a ValueError
        print(error)
"""

import dataclasses
import re
import unicodedata

EXCERPT_WIDTH = 70
"""Most display columns of selector text a syntax error shows around its caret."""
QUOTED_CHARACTERS = 160
"""Most characters of a name or of file content that a message quotes."""


@dataclasses.dataclass(frozen=True)
class Fix:
    """One remedy, as the argument of a call: ``Fix('overwrite', True, 'to replace it')`` reads
    ``pass overwrite=True to replace it``. The command line shows the same remedy as the flag
    that sets that argument (``pass --force to replace it``), or leaves it out when the command
    has no such flag.

    >>> str(Fix('on_mismatch', 'initialize', 'to initialize them instead'))
    "pass on_mismatch='initialize' to initialize them instead"
    """

    argument: str
    value: object = True
    purpose: str = ""

    def __str__(self):
        return self.render(f"{self.argument}={self.value!r}")

    def render(self, setting) -> str:
        """The remedy with ``setting`` (an argument or a flag) as the thing to pass."""
        return f"pass {setting} {self.purpose}".rstrip()


@dataclasses.dataclass(frozen=True)
class Blank:
    """A value for the user to fill in, shown as its description: ``Fix('remap', Blank('{old: new}'))``
    reads ``pass remap={old: new}``.

    >>> str(Fix('remap', Blank('{old: new}'), 'to pair the names'))
    'pass remap={old: new} to pair the names'
    """

    text: str

    def __repr__(self):
        return self.text


class SubsetSaverError(Exception):
    """Root of every error subsetsaver raises on purpose.

    ``reason``: what went wrong; ``fixes``: the remedies as :class:`Fix` values (the message
    ends with them, worded as arguments); ``path``: the file or directory at fault, if any.

    >>> str(SubsetSaverError("checkpoint 'out' exists", fixes=[Fix('overwrite', True, 'to replace it')]))
    "checkpoint 'out' exists; pass overwrite=True to replace it"
    """

    def __init__(self, message="", *args, fixes=(), path=None):
        self.reason = message
        self.fixes = tuple(fixes)
        self.path = path
        super().__init__(with_fixes(message, [str(fix) for fix in self.fixes]), *args)


def with_fixes(reason, remedies) -> str:
    """``reason``, then each remedy after a semicolon (on a line of its own, as a sentence, when the
    reason has several lines)."""
    if not remedies:
        return reason
    if "\n" in reason:
        return "\n".join([reason, *(remedy[:1].upper() + remedy[1:] + "." for remedy in remedies)])
    return "; ".join([reason, *remedies])


class SelectorSyntaxError(SubsetSaverError, ValueError):
    """Selector text that does not parse; the message shows its line with a caret under the column.

    ``text`` is the whole text, ``column`` the index of the character at fault, ``reason`` the
    message without the excerpt. The excerpt is one line (``line N:`` when the text has several),
    cut to about 70 columns around the caret; tabs, wide and combining characters are measured as
    a terminal shows them.
    """

    def __init__(self, message, text="", column=0):
        super().__init__(f"{message}\n{excerpt(text, column)}" if text else message)
        self.text = text
        self.column = column
        self.reason = message


def excerpt(text, column, width=EXCERPT_WIDTH) -> str:
    """Two lines: the line of ``text`` holding ``column`` (cut to ``width`` columns), and a caret under it.

    >>> print(excerpt("scope(\\t3)", 7))
      scope(  3)
              ^
    """
    start = text.rfind("\n", 0, column) + 1
    end = text.find("\n", column)
    end = len(text) if end < 0 else end
    line = text[start:end - 1] if text.endswith("\r", start, end) and column < end - 1 else text[start:end]
    cells, at = [], 0  # one (shown text, display width) per character; tab stops every 8 columns
    for char in line:
        cells.append(_shown_char(char, at))
        at += cells[-1][1]
    caret = min(column - start, len(cells))
    first, last = _window(cells, caret, width)
    shown = ("..." if first > 0 else "") + "".join(cell for cell, _ in cells[first:last])
    shown += "..." if last < len(cells) else ""
    offset = (3 if first > 0 else 0) + sum(cell_width for _, cell_width in cells[first:caret])
    prefix = f"  line {text.count(chr(10), 0, start) + 1}: " if "\n" in text else "  "
    return f"{prefix}{shown}\n{' ' * (len(prefix) + offset)}^"


def _shown_char(char, at):
    if char == "\t":
        return " " * (8 - at % 8), 8 - at % 8
    if unicodedata.category(char) in ("Cc", "Cs"):  # control characters and lone surrogates: their escape
        escape = repr(char)[1:-1]
        return escape, len(escape)
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return char, 0
    return char, 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _window(cells, caret, width):
    """(first, last) cells to show: all if they fit, else about ``width`` columns with the caret a third in."""
    # A zero-width character (combining accent, joiner) costs a column here all the same: ten thousand
    # accents on one letter are one column on a terminal, and would be 20 KB in a message.
    widths = [max(cell_width, 1) for _, cell_width in cells]
    if sum(widths) <= width:
        return 0, len(cells)
    first, used = caret, widths[caret] if caret < len(cells) else 1
    while first > 0 and used + widths[first - 1] <= width // 3:
        first -= 1
        used += widths[first]
    last = caret + 1
    while last < len(cells) and used + widths[last] <= width:
        used += widths[last]
        last += 1
    while first > 0 and used + widths[first - 1] <= width:  # the end came early: show more before
        first -= 1
        used += widths[first]
    return first, min(last, len(cells))


def clipped(text, limit=QUOTED_CHARACTERS) -> str:
    """``text`` cut to ``limit`` characters, saying how many it leaves out: a name or file content quoted
    in a message stays short whatever a file holds.

    >>> clipped('w' * 500, 8)
    'wwwwwwww... (492 more characters)'
    """
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


class EmptySelectionError(SubsetSaverError, LookupError):
    """A selector matched no variable although an empty result was not asked for."""


class CheckpointMismatchError(SubsetSaverError, ValueError):
    """A checkpoint does not hold what the plan expects (missing names, shapes, dtypes)."""

    def __init__(self, message, problems=(), *, fixes=(), path=None):
        self.problems = tuple(problems)
        super().__init__(message, fixes=fixes, path=path)


class RowMapError(SubsetSaverError, ValueError):
    """A row map (``ss.RowMap``) or a rule of ``rows=``/``remap=`` that cannot apply: a vocabulary that
    repeats a token, a map on a variable the plan does not save, two tensors sent into one variable."""


class RemapRuleError(SubsetSaverError, ValueError):
    """Remap rules that cannot apply. ``rules``: them, as ``(old, new)`` pairs; ``why``: what is wrong. The
    message quotes them as Python writes them; the command line shows them as its ``--remap`` flags.

    >>> str(RemapRuleError([('model/', 'net/')], 'matches no name'))
    "remap rule 'model/': 'net/' matches no name"
    """

    def __init__(self, rules, why):
        self.rules = tuple(rules)
        self.why = why
        super().__init__(f"remap rule {', '.join(f'{old!r}: {new!r}' for old, new in self.rules)} {why}")


class CastRuleError(SubsetSaverError, ValueError):
    """A ``cast`` rule of ``rewrite`` that cannot apply: not ``SELECTOR=DTYPE``, a dtype that is not a float
    type, or a selector that picks no kept tensor or a tensor that is not a float. ``rule``: the rule as
    ``SELECTOR=DTYPE``. Raised before anything is written.

    >>> CastRuleError("cast slots()=float16 selects no tensor that is kept; check the selector", "slots()=float16").rule
    'slots()=float16'
    """

    def __init__(self, message, rule):
        self.rule = rule
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


class CheckpointWriteError(SubsetSaverError, OSError):
    """A save could not be written (disk full, no permission, another writer, ...); nothing partial was
    left under the final name and the previous checkpoint is untouched. ``errno`` is the cause's, when known."""


class OutputExistsError(SubsetSaverError, FileExistsError):
    """A command would replace a checkpoint or file that is there, and was not told to."""


class InvalidOutputError(SubsetSaverError, ValueError):
    """An output that cannot be written as asked: it is the source, or a directory where a file or prefix belongs."""


class UnknownFormatError(SubsetSaverError, ValueError):
    """A path whose checkpoint format no registered format recognises, or a format name that is not registered."""


class InvalidNameError(SubsetSaverError, ValueError):
    """A tensor name a checkpoint cannot hold (empty, a control character, an empty or '..' part), or two
    tensors that would be written under one name; raised before anything is written."""


class UnsupportedDtypeError(SubsetSaverError, TypeError):
    """An array whose dtype a portable checkpoint cannot hold (strings, objects, ...)."""


class NoSaverError(SubsetSaverError, RuntimeError):
    """MonitoredTrainingSession tried to save or restore a plan whose backend has no TensorFlow Saver."""


class TensorFlowNeededError(SubsetSaverError, ImportError):
    """What builds or runs graph ops (``ss.plan``, a restore into a session, the training helpers) where
    TensorFlow is not installed. ``needed_for``: what asked for it; ``install``: the command that adds it.
    Raised before anything is touched.

    >>> str(TensorFlowNeededError('ss.plan'))
    "ss.plan needs TensorFlow (graph mode): pip install 'subsetsaver[tf]'"
    """

    install = "pip install 'subsetsaver[tf]'"

    def __init__(self, needed_for):
        self.needed_for = needed_for
        super().__init__(f"{needed_for} needs TensorFlow (graph mode): {self.install}")
        self.name = "tensorflow"


class RestoreOpsMissingError(SubsetSaverError, RuntimeError):
    """A restore needs ops that a finalized graph can no longer get."""


class InvalidRegexError(SelectorSyntaxError, re.error):
    """A ``regex()`` pattern that Python's ``re`` rejects; the message is ``re``'s own.

    ``pattern``, ``pos``, ``lineno`` and ``colno`` are as in ``re.error`` (``pos`` is None when ``re``
    names no position, as for a pattern nested too deeply).
    """

    def __init__(self, message, pattern, position=None):
        SelectorSyntaxError.__init__(self, message)
        _locate(self, message, pattern, position)


class UnsupportedRegexError(SelectorSyntaxError, re.error):
    """A ``regex()`` pattern that Python's ``re`` accepts but RE2 cannot run.

    ``regex()`` runs on RE2 so that matching takes time linear in the name's length, whatever the
    pattern; RE2 has no backreferences, lookaround, atomic groups, possessive quantifiers or
    conditionals, and repeats at most 1000 times. The message names the construct and a way to do
    without it; ``pattern`` and ``pos`` (as in ``re.error``) say where it is.
    """

    def __init__(self, message, pattern, position):
        SelectorSyntaxError.__init__(self, message)
        _locate(self, message, pattern, position)


def _locate(error, message, pattern, position):
    error.msg, error.pattern, error.pos = message, pattern, position
    error.lineno = error.colno = None
    if position is not None:
        error.lineno = pattern.count("\n", 0, position) + 1
        error.colno = position - pattern.rfind("\n", 0, position)


class LayoutMapError(SubsetSaverError, ValueError):
    """A layout map that cannot convert a checkpoint: an unknown map, a map file that does not parse, a
    checkpoint of another family, tensors no rule maps, or a shape a transform cannot produce. Raised
    before anything is written. ``rule`` is the first failing rule's text (or None), ``fix`` the advice."""

    def __init__(self, message, rule=None, fix=None):
        self.rule = rule
        self.fix = fix
        super().__init__(f"{message}; {fix}" if fix else message)


class WeightsChoiceError(SubsetSaverError, ValueError):
    """A conversion asked for values a checkpoint does not hold as asked: moving averages
    (``weights='ema'``, ``--weights ema``) of weights that have none, averages of some weights but not of
    others, or a classifier whose classes do not fit the target's (``drop_background_class``). Raised
    before anything is written; the fixes name the arguments (flags) that choose otherwise."""


class ModelBuilderError(SubsetSaverError, ValueError):
    """The function that builds the Keras 3 model of a conversion (``--model MODULE:FUNCTION``, or a
    ``keras.applications`` name) cannot be imported or called, raises, or returns no Keras 3 model;
    raised before anything is written."""


class RemoteStorageError(SubsetSaverError, OSError):
    """An object store (Cloud Storage, S3, ...) refused or failed a request, or its client library is missing.

    ``url`` names the object or directory, ``fix`` says what to do (for credentials: the settings the
    client library reads). The message is ``"<cause>: <fix>"``.
    """

    def __init__(self, message, url="", fix=""):
        self.url = url
        self.fix = fix
        super().__init__(f"{message}: {fix}" if fix else message, path=url or None)


class StoreUnreachableError(RemoteStorageError, TimeoutError):
    """A request to an object store had no answer within the retry budget (the server is unreachable or
    stopped sending, the network is down, or the client kept retrying a refusal). ``url`` names the
    object; ``fix`` names the likely causes and the setting that waits longer."""


class StoreSettingError(SubsetSaverError, ValueError):
    """A time-out or retry budget for object stores that is not a number of seconds above 0."""


_TENSORFLOW_NOISE = ("Graph execution error:", "Detected at node", "Node: ", "Original stack trace", "[[")


def first_line(error) -> str:
    """The line of an error that says what went wrong; for a TensorFlow OpError, its cause
    (e.g. "... Checksum does not match ...") rather than "Graph execution error:"."""
    text = (getattr(error, "message", None) or str(error)).strip()
    lines = [line for line in text.splitlines()
             if line.strip() and not line[0].isspace() and not line.startswith(_TENSORFLOW_NOISE)]
    if lines:
        return lines[0]
    return text.splitlines()[0] if text else type(error).__name__
