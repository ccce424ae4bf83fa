"""The library's remedies as the flags of the command that failed.

An error of the library carries its remedies as :class:`~subsetsaver.errors.Fix` values
(an argument and its value). Here each argument has the flag that sets it on the command
line; a remedy is shown only when the failing command has that flag, so the advice
always names a flag that exists. The rules of a ``RemapRuleError`` read as the ``--remap``
flags that type them. No message is matched as text.

Example::

    render(OutputExistsError("checkpoint 'out' already exists", fixes=[Fix('overwrite')]), convert_command)
    # "checkpoint 'out' already exists; pass --force"
"""

from __future__ import annotations

import dataclasses

from ..errors import Blank, RemapRuleError, with_fixes


@dataclasses.dataclass(frozen=True)
class Flag:
    """The command-line option (its click name) that sets an argument, and how a value is written with it."""

    option: str
    text: object  # value -> the flag as typed


def _remap_flags(rules) -> str:
    if isinstance(rules, Blank):
        return "--remap OLD=NEW"
    return " ".join(f"--remap {old}={new}" for old, new in dict(rules).items())


FLAGS = {
    "overwrite": Flag("force", lambda value: "--force"),
    "remap": Flag("remap", _remap_flags),
    "on_mismatch": Flag("on_mismatch", lambda value: f"--on-mismatch {value}"),
    "allow_empty": Flag("allow_empty", lambda value: "--allow-empty"),
    "match": Flag("match", lambda value: f"--match {value}"),
    "optimizer": Flag("no_optimizer", lambda value: "--no-optimizer"),
    "keep": Flag("keep", lambda value: f'--keep "{value}"'),
    "to": Flag("to", lambda value: f"--to {value}"),
    "weights": Flag("weights", lambda value: f"--weights {value}"),
    "drop_background_class": Flag("drop_background_class", lambda value: "--drop-background-class"),
}


def remedies(fixes, command) -> list:
    """Each of ``fixes`` written with ``command``'s flag for its argument; a fix whose flag the command
    lacks is left out (``command``: a click command, or None when it is not known: then none is shown)."""
    options = {parameter.name for parameter in getattr(command, "params", ())}
    shown = []
    for fix in fixes:
        flag = FLAGS.get(fix.argument)
        if flag is not None and flag.option in options:
            shown.append(fix.render(flag.text(fix.value)))
    return shown


def render(error, command) -> str:
    """``error``'s message with its remedies written as ``command``'s flags (see :func:`remedies`); the rules
    of a RemapRuleError as the ``--remap`` flags that type them."""
    if isinstance(error, RemapRuleError):
        return f"{_remap_flags(error.rules)} {error.why}"
    if not getattr(error, "fixes", ()):
        return str(error)
    return with_fixes(error.reason, remedies(error.fixes, command))
