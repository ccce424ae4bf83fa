"""A fifth checkpoint format, for tests only: one JSON file holding each tensor's dtype, shape and bytes.

It exists to show that a format is one module behind the registry's protocol: with one
``registry.register(TOY)`` line, ``inspect``, ``convert`` and ``diff`` read and write it.
"""

import base64
import json

import numpy as np

from subsetsaver import storage
from subsetsaver.formats.format_protocol import CheckpointFormat, Contents, TensorInfo

SUFFIX = ".toy.json"


class ToyFormat(CheckpointFormat):
    name = "toy"
    description = "toy JSON"
    noun = "toy file"
    suffixes = (SUFFIX,)
    dtypes = frozenset({"float32", "float64", "int32", "int64"})

    def recognises(self, path) -> bool:
        return str(path).endswith(SUFFIX) and storage.exists(path)

    def _load(self, path):
        return json.loads(storage.read_bytes(path).decode("utf-8"))

    def contents(self, path) -> Contents:
        tensors = self._load(path)["tensors"]
        return Contents(str(path), self.name, tuple(TensorInfo(name, tuple(t["shape"]), t["dtype"])
                                                    for name, t in tensors.items()))

    def read(self, path, names):
        tensors = self._load(path)["tensors"]
        for name in names:
            raw = base64.b64decode(tensors[name]["data"])
            yield name, np.frombuffer(raw, tensors[name]["dtype"]).reshape(tensors[name]["shape"]).copy()

    def files(self, path) -> list:
        return [str(path)] if storage.exists(path) else []

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        written = {name: {"dtype": array.dtype.name, "shape": list(array.shape),
                          "data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")}
                   for name, array in tensors}
        storage.write_bytes(staged, json.dumps({"tensors": written, "metadata": metadata}).encode("utf-8"))
        return {str(final): staged}


TOY = ToyFormat()
