"""safetensors files in the format registry (see :mod:`~subsetsaver.formats.safetensors_file`).

Example::

    SAFETENSORS.recognises('model.safetensors')
    # True
"""

from __future__ import annotations

from .. import bounded_json
from . import safetensors_file, storage
from .format_protocol import CheckpointFormat, Contents, TensorInfo


class SafetensorsFormat(CheckpointFormat):
    name = "safetensors"
    description = "safetensors"
    noun = "safetensors file"
    suffixes = (safetensors_file.SUFFIX,)
    dtypes = frozenset(safetensors_file.CODES)

    def recognises(self, path) -> bool:
        return str(path).endswith(safetensors_file.SUFFIX) and storage.exists(path) and not storage.is_directory(path)

    def contents(self, path) -> Contents:
        found, metadata = safetensors_file.specs(path)
        tensors = tuple(TensorInfo(name, shape, dtype) for name, (shape, dtype) in found.items())
        return Contents(str(path), self.name, tensors, metadata=metadata,
                        recorded_roles=_recorded_roles(metadata, frozenset(found)))

    def read(self, path, names):
        return safetensors_file.read(path, names)

    def files(self, path) -> list:
        return [str(path)] if storage.exists(path) else []

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        safetensors_file.write(staged, tensors, metadata, specs=specs)
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
