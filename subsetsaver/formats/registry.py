"""The format registry: every checkpoint format the library reads or writes, found by path or by name.

Commands, catalog sources and plan backends ask here; nothing else branches on a format's
name. A new format is one module (a :class:`~subsetsaver.formats.format_protocol.CheckpointFormat`)
plus one line: an entry of :data:`FORMATS`, or a call of :func:`register`.

Example::

    format_of('train/model-9000').name, format_of('model.npz').name
    # ('name', 'npz')
    for_output('out/model.safetensors').name, for_output('out/model', 'npz').name
    # ('safetensors', 'npz')
"""

from __future__ import annotations

import os

from .. import storage
from ..errors import CheckpointNotFoundError, UnknownFormatError
from .keras_h5 import KERAS_H5
from .npz import NPZ
from .safetensors import SAFETENSORS, SHARDED_SAFETENSORS
from .tf import NAME, OBJECT, checkpoint_prefix

# In the order a path is tried: formats known by their file's name first, the TensorFlow bundles last.
FORMATS = [NPZ, SAFETENSORS, SHARDED_SAFETENSORS, KERAS_H5, OBJECT, NAME]


def register(checkpoint_format) -> None:
    """Add a format; it is tried before the built-in ones. Registering a name again replaces it."""
    unregister(checkpoint_format.name)
    FORMATS.insert(0, checkpoint_format)


def unregister(name) -> None:
    """Remove the format called ``name``, if registered."""
    FORMATS[:] = [known for known in FORMATS if known.name != name]


def names() -> list:
    """The registered formats' names, in the order they are tried."""
    return [known.name for known in FORMATS]


def named(name):
    """The format called ``name``; UnknownFormatError naming the known ones otherwise."""
    for known in FORMATS:
        if known.name == name:
            return known
    raise UnknownFormatError(f"unknown format {str(name)[:40]!r}; the formats are {', '.join(sorted(names()))}")


def format_of(path):
    """The format of the existing checkpoint at ``path``.

    CheckpointNotFoundError when nothing is there; UnknownFormatError for a file no format reads.
    """
    path = os.fspath(path)
    for known in FORMATS:
        if known.recognises(path):
            return known
    for known in FORMATS:
        if any(path.endswith(suffix) for suffix in known.suffixes) and not storage.exists(path):
            raise CheckpointNotFoundError(f"no {known.description} checkpoint at '{path}'", path=path)
    if storage.exists(path) and not storage.is_directory(path) and not path.endswith(".index") \
            and ".data-" not in path.rsplit("/", 1)[-1]:
        raise UnknownFormatError(f"'{path}' is not a checkpoint subsetsaver reads (the formats: "
                                 f"{', '.join(sorted(names()))})", path=path)
    checkpoint_prefix(path)  # raises the error that says what is missing
    raise UnknownFormatError(f"'{path}' is not a checkpoint subsetsaver reads", path=path)


def for_output(path, to=None):
    """The format to write ``path`` in: the one named ``to``, else the one whose suffix ``path`` has,
    else TensorFlow's name-based checkpoint."""
    if to is not None:
        return named(to)
    path = os.fspath(path)
    for known in FORMATS:
        if any(path.endswith(suffix) for suffix in known.suffixes):
            return known
    return NAME
