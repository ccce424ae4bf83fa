"""How a broken checkpoint is reported: one sentence naming the checkpoint, what is wrong, and the fix.

Every refusal of the reader reads ``cannot read checkpoint 'PREFIX': SUBJECT PROBLEM
(CAUSE); REMEDY``, where the subject is a file (``'PREFIX.index'``) or a tensor
(``tensor 'conv_1/w'``, or ``tensor 'emb' (part 0,4:0,8)`` for one part of a
partitioned variable).

Example::

    raise corrupt('/ckpt/model', "tensor 'w'", 'declares an unknown dtype (77)')
    # CorruptCheckpointError: cannot read checkpoint '/ckpt/model': tensor 'w' declares an unknown
    # dtype (77) (truncated or tampered); restore from an intact copy of the checkpoint
"""

from ....errors import CorruptCheckpointError, clipped
from .slices import extent_text, read_slice_key

RESTORE = "restore from an intact copy of the checkpoint"
TAMPERED = "truncated or tampered"


def corrupt(prefix, subject, problem, *, cause=TAMPERED, remedy=RESTORE) -> CorruptCheckpointError:
    """The error for ``subject`` of checkpoint ``prefix`` and its ``problem``; ``cause=None`` omits the cause."""
    because = f" ({cause})" if cause else ""
    return CorruptCheckpointError(f"cannot read checkpoint '{prefix}': {subject} {problem}{because}; {remedy}")


def tensor_subject(name, part=None) -> str:
    """``tensor 'w'``, or ``tensor 'w' (part 0,4:-)`` for one stored part of a partitioned tensor."""
    name = printable(name)
    return f"tensor '{name}'" if part is None else f"tensor '{name}' (part {clipped(part)})"


def key_subject(key) -> str:
    """The subject of a message about the entry under ``key``: ``tensor 'w'`` or ``tensor 'w' (part 0,4:-)``."""
    return f"tensor {quoted_key(key)}"


def quoted_key(key) -> str:
    """An index key for a message: ``'conv_1/w'``, a part's ``'emb' (part 0,4:-)``, escapes where not printable."""
    part = read_slice_key(key) if key[:1] == b"\x00" else None
    if part is not None:
        return f"'{_printable(part[0])}' (part {clipped(extent_text(part[1]))})"
    return f"'{_printable(key)}'"


def _printable(raw) -> str:
    return printable(raw.decode("utf-8", "backslashreplace"))


def printable(text) -> str:
    """``text`` for a one-line message: escapes for what a terminal would not print, cut short (a key is as
    long as its table block).

    >>> printable('w\\nb')
    'w\\\\nb'
    """
    return clipped("".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text))
