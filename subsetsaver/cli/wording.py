"""Library messages reworded for the command line: flags instead of Python arguments.

The library's errors say how to fix a call (``pass allow_empty=True``,
``on_mismatch='initialize'``, ``remap={'old/': 'new/'}``, ``overwrite=True``). On the
command line the same advice names the flag that does it, and only flags that the
command has.

Example::

    >>> in_flags("fix: pass remap={'model/': 'net/'} to ss.plan: ...", "plan")
    'fix: pass --remap model/=net/: ...'
"""

import ast
import re

_REMAP = re.compile(r"pass remap=(\{[^}]*\})(?: to ss\.plan)?")
_REMAP_RULES = re.compile(r"remap rule ((?:'[^']*': '[^']*'(?:, )?)+)")
_RULE = re.compile(r"'([^']*)': '([^']*)'")
_KERAS_ADVICE = (  # what loading into a Keras model advises, as `convert --to object` flags
    ("pair the names with remap={checkpoint name or scope: model name or scope}",
     "pair the names with --remap OLD=NEW (a checkpoint name or scope = the model's)"),
    ("or pair by name with remap=,", "or pair by name with --match name --remap OLD=NEW,"),
    ("match='order' pairs", "--match order pairs"),
    ("pass optimizer=None (--no-optimizer)", "pass --no-optimizer"),
    ("or optimizer=None (--no-optimizer)", "or --no-optimizer"),
    ("ss.rewrite(checkpoint, out, cast={selector: dtype})", "subsetsaver rewrite CKPT -o OUT --cast EXPR=DTYPE"),
)


def in_flags(text, command) -> str:
    """``text`` with Python-call advice replaced by the flags of ``command``."""
    text = _REMAP.sub(_remap_flags, text)
    text = _REMAP_RULES.sub(_rule_flags, text)
    text = text.replace("pass on_mismatch='initialize' to leave the unmatched variables as they are",
                        "pass --on-mismatch initialize to leave the unmatched variables as they are")
    text = text.replace("pass overwrite=True (--force)", "pass --force")
    for library, flags in _KERAS_ADVICE:
        text = text.replace(library, flags)
    return text


def _rule_flags(match) -> str:
    """``remap rule 'a/': 'b/', 'w': 'v'`` -> ``--remap a/=b/ --remap w=v``."""
    return " ".join(f"--remap {old}={new}" for old, new in _RULE.findall(match.group(1)))


def _remap_flags(match) -> str:
    try:
        rules = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return match.group(0)
    return "pass " + " ".join(f"--remap {old}={new}" for old, new in rules.items())
