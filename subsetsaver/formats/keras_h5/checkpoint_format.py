"""Keras 3's ``.weights.h5`` in the format registry (see :mod:`.codec`).

Example::

    KERAS_H5.recognises('model.weights.h5'), KERAS_H5.name
    # (True, 'keras')
"""

from __future__ import annotations

from ... import storage
from ..format_protocol import CheckpointFormat, Contents, TensorInfo
from . import codec


class KerasH5Format(CheckpointFormat):
    name = "keras"
    description = "Keras 3 .weights.h5"
    noun = "Keras weights file"
    suffixes = (codec.SUFFIX,)

    def recognises(self, path) -> bool:
        return str(path).endswith(codec.SUFFIX) and storage.exists(path) and not storage.is_directory(path)

    def contents(self, path) -> Contents:
        tensors = tuple(TensorInfo(name, shape, dtype) for name, (shape, dtype) in codec.specs(path).items())
        return Contents(str(path), self.name, tensors)

    def read(self, path, names):
        return codec.read(path, names)

    def files(self, path) -> list:
        return [str(path)] if storage.exists(path) else []

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        codec.write(staged, tensors)
        return {str(final): staged}


KERAS_H5 = KerasH5Format()
