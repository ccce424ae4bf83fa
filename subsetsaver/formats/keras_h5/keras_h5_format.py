"""Keras 3's ``.weights.h5`` in the format registry (see :mod:`.weights_file`).

Example::

    KERAS_H5.recognises('model.weights.h5'), KERAS_H5.name
    # (True, 'keras')
"""

from __future__ import annotations

from .. import storage
from ..format_protocol import CheckpointFormat, Contents, TensorInfo
from . import weights_file


class KerasH5Format(CheckpointFormat):
    name = "keras"
    description = "Keras 3 .weights.h5"
    noun = "Keras weights file"
    suffixes = (weights_file.SUFFIX,)

    def recognises(self, path) -> bool:
        return str(path).endswith(weights_file.SUFFIX) and storage.exists(path) and not storage.is_directory(path)

    def contents(self, path) -> Contents:
        tensors = tuple(TensorInfo(name, shape, dtype) for name, (shape, dtype) in weights_file.specs(path).items())
        return Contents(str(path), self.name, tensors)

    def read(self, path, names):
        return weights_file.read(path, names)

    def files(self, path) -> list:
        return [str(path)] if storage.exists(path) else []

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        weights_file.write(staged, tensors)
        return {str(final): staged}


KERAS_H5 = KerasH5Format()
