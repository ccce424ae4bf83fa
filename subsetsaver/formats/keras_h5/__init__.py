"""Keras 3's own weights file, ``.weights.h5``: the codec (``codec``) and its entry in the format registry
(``KERAS_H5``).

What ``model.save_weights`` writes and ``model.load_weights`` reads: an HDF5 file (read and written
with h5py, imported on first use) whose datasets sit at the paths Keras's saving walk gives each
layer, ``layers/conv2d/vars/0``; each ``vars`` group records its layer's name in a ``name``
attribute, and a bfloat16 dataset says so in a ``dtype`` attribute. A tensor's name here is its
dataset's path.

Example::

    from subsetsaver.formats import keras_h5
    [t.name for t in keras_h5.KERAS_H5.contents('model.weights.h5').tensors][:2]
    # ['layers/conv2d/vars/0', 'layers/conv2d/vars/1']
"""

from ...lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".codec", "KERAS_PATH", "MAX_DEPTH", "MAX_OBJECTS", "SUFFIX", "layer_names", "read", "specs", "write"),
    **names(".checkpoint_format", "KERAS_H5"),
})

__all__ = ["KERAS_H5", "KERAS_PATH", "MAX_DEPTH", "MAX_OBJECTS", "SUFFIX", "layer_names", "read", "specs", "write"]
