"""subsetsaver's portable ``.npz`` checkpoints in the format registry (see :mod:`~subsetsaver.formats.npz`).

Example::

    NPZ.recognises('model.npz'), [t.name for t in NPZ.contents('model.npz').tensors][:1]
    # (True, ['conv_1/w'])
"""

from __future__ import annotations

import os

from ... import storage
from .. import npz  # the package: its reader and writer load when first used, not with the registry
from ..format_protocol import CheckpointFormat, Contents, TensorInfo


class NpzFormat(CheckpointFormat):
    name = "npz"
    description = "portable .npz"
    noun = "portable file"
    suffixes = (".npz",)

    @property
    def dtypes(self):
        return frozenset(npz.STORED_AS)

    def recognises(self, path) -> bool:
        return str(path).endswith(".npz") and storage.exists(path) and not storage.is_directory(path)

    def contents(self, path) -> Contents:
        manifest = npz.read_manifest(path)
        tensors = []
        for entry in manifest.arrays:
            shape, dtype, _ = npz.entry_spec(entry)
            tensors.append(TensorInfo(entry.name, tuple(shape), dtype))
        return Contents(str(path), self.name, tuple(tensors), metadata=dict(manifest.metadata or {}))

    def regions(self, path) -> dict:
        """Name -> (full shape, offset) of each array that is one part of a partitioned variable."""
        found = {}
        for entry in npz.read_manifest(path).arrays:
            shape, _dtype, region = npz.entry_spec(entry)
            if region is not None:
                found[entry.name] = (tuple(shape), tuple(region[0]))
        return found

    def recorded(self, provenance) -> dict:
        return {"selector": provenance.selector, "source": provenance.source_format,
                "checkpoint": os.path.basename(provenance.source)}

    def read(self, path, names):
        with npz.Archive(path) as archive:
            for name in names:
                yield name, archive.load([name])[name]

    def files(self, path) -> list:
        return [str(path)] if storage.exists(path) else []

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        metadata = dict(metadata)
        selector = metadata.pop("selector", None)
        npz.write(staged, tensors, selector=selector, metadata=metadata, describe=False)  # one array held at a time
        return {str(final): staged}


NPZ = NpzFormat()
