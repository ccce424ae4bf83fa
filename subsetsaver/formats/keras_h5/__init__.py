"""Keras 3's own weights file, ``.weights.h5``: what ``model.save_weights`` writes and ``model.load_weights`` reads.

An HDF5 file (read and written with h5py, imported on first use) whose datasets sit at the paths
Keras's saving walk gives each layer: ``layers/conv2d/vars/0``, ``layers/batch_normalization/vars/3``;
each ``vars`` group records its layer's name in a ``name`` attribute, and a bfloat16 dataset says so
in a ``dtype`` attribute. Here a tensor's name is its dataset's path.

- ``weights_file``: the file itself: its tensors (every object walked within limits, links refused),
  each read checked against its declared size, and written at Keras's paths.
- ``keras_h5_format``: the file in the format registry (:data:`KERAS_H5`).

Example::

    from subsetsaver.formats.keras_h5 import KERAS_H5
    [t.name for t in KERAS_H5.contents('model.weights.h5').tensors][:2]
    # ['layers/conv2d/vars/0', 'layers/conv2d/vars/1']
"""

from . import weights_file
from .keras_h5_format import KERAS_H5

__all__ = ["KERAS_H5", "weights_file"]
