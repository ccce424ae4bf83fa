"""Remap rules quoted in a ValueError, reworded as the command line's flags.

Errors of the library carry their remedies as :class:`~subsetsaver.errors.Fix` values, which
:mod:`.advice` shows as flags. A remap rule that cannot apply is a plain ``ValueError`` (a
wrong argument) that quotes the rule as Python wrote it (``remap rule 'a/': 'b/' matches no
name``); on the command line the rule reads as it was typed (``--remap a/=b/ matches no name``).

Example::

    >>> in_flags("remap rule 'model/': 'net/' matches no name")
    '--remap model/=net/ matches no name'
"""

import re

_REMAP_RULES = re.compile(r"remap rule ((?:'[^']*': '[^']*'(?:, )?)+)")
_RULE = re.compile(r"'([^']*)': '([^']*)'")


def in_flags(text) -> str:
    """``text`` with each quoted remap rule written as the ``--remap`` flag that types it."""
    return _REMAP_RULES.sub(_rule_flags, text)


def _rule_flags(match) -> str:
    """``remap rule 'a/': 'b/', 'w': 'v'`` -> ``--remap a/=b/ --remap w=v``."""
    return " ".join(f"--remap {old}={new}" for old, new in _RULE.findall(match.group(1)))
