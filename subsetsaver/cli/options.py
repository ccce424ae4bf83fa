"""Flag values the commands share, parsed into what the library takes.

Example::

    >>> parse_remap(('model/=net/',))
    {'model/': 'net/'}
"""

import click

from ..formats import registry


def parse_remap(pairs):
    """``('OLD=NEW', ...)`` of repeated ``--remap`` flags -> ``{OLD: NEW}`` (None when there are none)."""
    remap = {}
    for pair in pairs:
        source, separator, target = pair.partition("=")
        if not separator or not source or not target:
            raise click.BadParameter(f"{pair!r} is not OLD=NEW, a scope or name on each side (e.g. model/=net/)",
                                     param_hint="--remap")
        remap[source] = target
    return remap or None


class FormatName(click.ParamType):
    """A checkpoint format's name, checked against the registry when the command runs (so a format
    registered after import is accepted too)."""

    name = "format"

    def convert(self, value, param, ctx):
        if value in registry.names():
            return value
        self.fail(f"{value!r} is not a format; the formats are {', '.join(sorted(registry.names()))}", param, ctx)


FORMAT_NAME = FormatName()
