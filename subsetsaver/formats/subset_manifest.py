"""The manifest: a small JSON file beside a checkpoint that says which subset it holds.

``PREFIX.subset.json`` records the selector text, every saved variable (name, name in
the checkpoint, shape, dtype, bytes), the names left to initialization, and the library
and TensorFlow versions. ``inspect``, a later restore and users read it to tell a
trainable-only checkpoint from a full one without opening the data. It is written
atomically (:func:`subsetsaver.storage.write_bytes`), so a reader never sees half a
manifest.

Example::

    write_manifest('/ckpt/model-100', {'selector': 'trainable()', ...})
    # '/ckpt/model-100.subset.json'
    read_manifest('/ckpt/model-100')['selector']
    # 'trainable()'
"""

from __future__ import annotations

import datetime
import json
import os

from .. import bounded_json, storage
from ..errors import CorruptCheckpointError
from ..version import versions

SUFFIX = ".subset.json"
FORMAT = "subsetsaver.subset"
MAX_MANIFEST_BYTES = 64 << 20
FORMAT_VERSION = 1


def manifest_path(prefix) -> str:
    """``PREFIX.subset.json``."""
    return os.fspath(prefix) + SUFFIX


def manifest_content(*, selector, variables, initialized, remap=None, backend="tf", **extra) -> dict:
    """The manifest's JSON value.

    ``variables``: dicts with ``name``, ``checkpoint_name``, ``shape``, ``dtype``, ``bytes``
    (in the plan's order); ``initialized``: names left to their initializers.
    """
    written_by = versions()
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
        "versions": {key: written_by[key] for key in ("subsetsaver", "tensorflow", "python")},
    }
    content.update(extra)
    return content


def write_manifest(prefix, content: dict) -> str:
    """Write ``content`` to ``PREFIX.subset.json`` atomically; returns the path."""
    content = dict(content)
    content.setdefault("checkpoint", os.path.basename(os.fspath(prefix)))
    content.setdefault("written", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    path = manifest_path(prefix)
    storage.write_bytes(path, (json.dumps(content, indent=1) + "\n").encode("utf-8"))
    return path


def read_manifest(prefix) -> dict | None:
    """The manifest beside ``prefix``, or None when there is none."""
    path = manifest_path(prefix)
    try:
        data = storage.read_bytes(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None
    try:
        content = bounded_json.loads(data, max_bytes=MAX_MANIFEST_BYTES)
    except ValueError as error:
        raise CorruptCheckpointError(f"manifest '{path}' is not valid JSON ({error}); delete it or rewrite it") from error
    if not isinstance(content, dict) or content.get("format") != FORMAT:
        raise CorruptCheckpointError(f"'{path}' is not a subsetsaver manifest (no \"format\": \"{FORMAT}\")")
    return content


def remove_manifest(prefix) -> None:
    """Delete the manifest beside ``prefix`` if there is one (e.g. after the Saver retired it)."""
    storage.remove(manifest_path(prefix))
