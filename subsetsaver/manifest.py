"""The manifest: a small JSON file beside a checkpoint that says which subset it holds.

``PREFIX.subset.json`` records the selector text, every saved variable (name, name in
the checkpoint, shape, dtype, bytes), the names left to initialization, and the library
and TensorFlow versions. ``inspect``, a later restore and users read it to tell a
trainable-only checkpoint from a full one without opening the data. It is written
atomically (temporary file, fsync, rename), so a reader never sees half a manifest.

Example::

    >>> write_manifest('/ckpt/model-100', {'selector': 'trainable()', ...})
    '/ckpt/model-100.subset.json'
    >>> read_manifest('/ckpt/model-100')['selector']
    'trainable()'
"""

from __future__ import annotations

import datetime
import json
import os

from .errors import CorruptCheckpointError
from .files import fsync_directory, temporary_name

SUFFIX = ".subset.json"
FORMAT = "subsetsaver.subset"
FORMAT_VERSION = 1


def manifest_path(prefix) -> str:
    """``PREFIX.subset.json``."""
    return os.fspath(prefix) + SUFFIX


def manifest_content(*, selector, variables, initialized, remap=None, backend="tf", **extra) -> dict:
    """The manifest's JSON value.

    ``variables``: dicts with ``name``, ``checkpoint_name``, ``shape``, ``dtype``, ``bytes``
    (in the plan's order); ``initialized``: names left to their initializers.
    """
    import platform

    import tensorflow as tf

    from . import __version__

    content = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "selector": selector,
        "backend": backend,
        "remap": dict(remap) if remap else None,
        "variables": list(variables),
        "initialized": list(initialized),
        "totals": {
            "variables": len(variables),
            "bytes": sum(v["bytes"] for v in variables),
            "initialized": len(initialized),
        },
        "versions": {
            "subsetsaver": __version__,
            "tensorflow": tf.__version__,
            "python": platform.python_version(),
        },
    }
    content.update(extra)
    return content


def write_manifest(prefix, content: dict) -> str:
    """Write ``content`` to ``PREFIX.subset.json`` atomically; returns the path."""
    content = dict(content)
    content.setdefault("checkpoint", os.path.basename(os.fspath(prefix)))
    content.setdefault("written", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    path = manifest_path(prefix)
    _write_atomically(path, json.dumps(content, indent=1) + "\n")
    return path


def read_manifest(prefix) -> dict | None:
    """The manifest beside ``prefix``, or None when there is none."""
    import tensorflow as tf

    path = manifest_path(prefix)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as handle:
            content = json.loads(handle.read())
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptCheckpointError(f"manifest '{path}' is not valid JSON ({error}); delete it or rewrite it") from error
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise CorruptCheckpointError(f"'{path}' is not a subsetsaver manifest (no \"format\": \"{FORMAT}\")")
    return content


def remove_manifest(prefix) -> None:
    """Delete the manifest beside ``prefix`` if there is one (e.g. after the Saver retired it)."""
    import tensorflow as tf

    path = manifest_path(prefix)
    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)


def _write_atomically(path: str, text: str) -> None:
    temporary = temporary_name(path)
    if "://" in path:
        # Object stores (gs://, s3://) publish an object only when it is closed: no fsync needed.
        import tensorflow as tf

        try:
            with tf.io.gfile.GFile(temporary, "w") as handle:
                handle.write(text)
            tf.io.gfile.rename(temporary, path, overwrite=True)
        finally:
            if tf.io.gfile.exists(temporary):
                tf.io.gfile.remove(temporary)
        return
    directory = os.path.dirname(path) or "."
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    fsync_directory(directory)
