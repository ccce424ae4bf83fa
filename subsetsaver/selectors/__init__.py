"""The selection room: selectors, their text form, and their patterns run on RE2.

A selector is a small immutable value (``trainable() | scope('conv_1/bn')``) that
picks variable names from a catalog; it never touches TensorFlow. ``expressions``
holds the selector types and constructors, ``parser`` reads their text (``parse(repr(sel))
== sel``), ``patterns`` matches ``regex()`` and ``name()`` with RE2 (linear time: no pattern
can hang the tool) and gives the layout maps the same globs with captures, ``re2_syntax``
rewrites Python's regex syntax in RE2's, and ``sizes`` writes byte counts as people read them.

This room imports ``catalog``, ``errors`` and ``tf_internals``. Other rooms use the names
in ``__all__``.

Example::

    >>> from subsetsaver.selectors import parse, trainable, bn_stats
    >>> parse("trainable() | bn_stats()") == trainable() | bn_stats()
    True
"""

from ..lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".expressions", "Nothing", "Selector", "averages", "bn_stats", "closest_names", "collection", "everything",
            "global_step", "local", "name", "nothing", "regex", "scope", "slots", "trainable", "variable_name",
            "variables"),
    **names(".parser", "as_selector", "parse"),
    **names(".patterns", "fill_glob", "glob_captures", "glob_wildcard_count"),
    **names(".sizes", "format_bytes"),
})

__all__ = [
    "Nothing",
    "as_selector",
    "Selector",
    "averages",
    "bn_stats",
    "closest_names",
    "collection",
    "everything",
    "fill_glob",
    "format_bytes",
    "glob_captures",
    "glob_wildcard_count",
    "global_step",
    "local",
    "name",
    "nothing",
    "parse",
    "regex",
    "scope",
    "slots",
    "trainable",
    "variable_name",
    "variables",
]
