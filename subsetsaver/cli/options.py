"""Flag values the commands share, parsed into what the library takes.

Example::

    >>> parse_remap(('model/=net/',))
    {'model/': 'net/'}
"""

import click


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


class KnownName(click.ParamType):
    """One of the names ``known()`` gives, asked when the command runs rather than when it is defined: the
    room that knows them loads only then (a command's ``--help`` loads none), and a format registered after
    import is accepted too. ``name``/``plural``: what one and several are called; the flag's help lists them."""

    def __init__(self, name, plural, known):
        self.name, self.plural, self.known = name, plural, known

    def convert(self, value, param, ctx):
        known = self.known()
        if value in known:
            return value
        self.fail(f"{value!r} is not a {self.name}; the {self.plural} are {', '.join(sorted(known))}", param, ctx)


def _formats():
    from ..formats import registry

    return registry


FORMAT_NAME = KnownName("format", "formats", lambda: _formats().names())


def format_noun(name) -> str:
    """What a checkpoint of the format ``name`` is called in a sentence (``'portable .npz'``)."""
    return _formats().named(name).noun
