"""safetensors files in the format registry (see :mod:`~subsetsaver.formats.safetensors.codec`).

Example::

    SAFETENSORS.recognises('model.safetensors')
    # True
"""

from __future__ import annotations

import json
import os

from ... import bounded_json, storage
from ..format_protocol import CheckpointFormat, Contents, StoredBytes, TensorInfo
from . import codec


class SafetensorsFormat(CheckpointFormat):
    name = "safetensors"
    description = "safetensors"
    noun = "safetensors file"
    suffixes = (codec.SUFFIX,)
    dtypes = frozenset(codec.CODES)
    locates_stored_bytes = True

    def recognises(self, path) -> bool:
        return str(path).endswith(codec.SUFFIX) and storage.exists(path) and not storage.is_directory(path)

    def contents(self, path) -> Contents:
        found, metadata = codec.specs(path)
        tensors = tuple(TensorInfo(name, shape, dtype) for name, (shape, dtype) in found.items())
        return Contents(str(path), self.name, tensors, metadata=metadata,
                        recorded_roles=_recorded_roles(metadata, frozenset(found)))

    def recorded(self, provenance) -> dict:
        """The selection, roles by name and where the tensors came from (with the source's subset manifest)."""
        metadata = {"format": "subsetsaver.safetensors", "selector": provenance.selector,
                    "source": os.path.basename(provenance.source.rstrip("/")), "roles": json.dumps(provenance.roles)}
        manifest = provenance.subset_manifest() if provenance.subset_manifest is not None else None
        if manifest is not None:
            metadata["subset_manifest"] = json.dumps(manifest)
        return metadata

    def read(self, path, names):
        return codec.read(path, names)

    def stored_bytes(self, path) -> dict:
        return {name: StoredBytes(str(path), *place) for name, place in codec.stored_bytes(path).items()}

    def files(self, path) -> list:
        return [str(path)] if storage.exists(path) else []

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        codec.write(staged, tensors, metadata, specs=specs)
        return {str(final): staged}


SAFETENSORS = SafetensorsFormat()


def _recorded_roles(metadata, names):
    """Role -> names, from the ``roles`` metadata subsetsaver writes (name -> roles); None without it."""
    try:
        recorded = bounded_json.loads(metadata.get("roles", "null"))
    except ValueError:
        return None
    if not isinstance(recorded, dict):
        return None
    by_role = {}
    for name, roles in recorded.items():
        if name in names and isinstance(roles, list):
            for role in roles:
                if isinstance(role, str):
                    by_role.setdefault(role, set()).add(name)
    return {role: frozenset(members) for role, members in by_role.items()}
