"""Config values read off a checkpoint's tensors: what a model computes from a small tensor that the target
library takes as configuration instead (``"config_from_tensors"`` in a map).

tf_keras' EfficientNet normalizes its input inside the model: ``Rescaling(1/255)``, then a ``Normalization``
layer, ``(x - mean) / max(sqrt(variance), 1e-7)``, whose ``mean`` and ``variance`` are in the checkpoint. timm
has no such layer: its data config's ``mean`` and ``std`` do the same to an image scaled to [0, 1]. Built with
``weights="imagenet"``, tf_keras also multiplies by ``1 / sqrt(IMAGENET_STDDEV_RGB)``, because the ImageNet
weights hold the standard deviations where the layer expects variances (tensorflow/tensorflow#49930); a
checkpoint holding those values as its variance was built that way, and its ``std`` is those deviations.

    >>> read_value("keras_normalization_std", np.array([0.04, 0.09, 0.16], np.float32))
    ([0.2, 0.3, 0.4], None)
"""

from __future__ import annotations

import numpy as np

from ..errors import LayoutMapError

MAX_VALUES = 4096
"""Most values a reading puts into a config (a per-channel statistic; never a weight)."""
KERAS_EPSILON = 1e-7
"""``keras.backend.epsilon()``: the least deviation tf_keras' ``Normalization`` divides by."""
IMAGENET_STDDEV_RGB = (0.229, 0.224, 0.225)
"""tf_keras EfficientNet's ``IMAGENET_STDDEV_RGB``, which its ImageNet weights hold as the variance."""


def read_value(reading, array):
    """(the config value of ``array`` by ``reading``, a note for the report or None)."""
    values = np.asarray(array, dtype=np.float64).reshape(-1)
    if reading == "values":
        return [_short(value) for value in values], None
    deviations = np.maximum(np.sqrt(np.asarray(array, np.float32)), np.float32(KERAS_EPSILON)).astype(np.float64)
    note = None
    if values.size == 3 and np.allclose(values, IMAGENET_STDDEV_RGB, rtol=1e-6, atol=0):
        deviations = deviations * np.sqrt(IMAGENET_STDDEV_RGB)
        note = ("the input normalization's variance is tf_keras' IMAGENET_STDDEV_RGB, which EfficientNet built "
                "with weights=\"imagenet\" divides by twice (tensorflow/tensorflow#49930): std is "
                "IMAGENET_STDDEV_RGB")
    return [_short(value) for value in deviations.reshape(-1)], note


def read_values(layout, arrays) -> tuple:
    """(config key -> value, notes) for ``layout``'s ``config_from_tensors``; ``arrays``: tensor name -> array."""
    config, notes = {}, []
    for key, entry in layout.config_from_tensors.items():
        array = arrays[entry["tensor"]]
        if array.size > MAX_VALUES or array.dtype.kind != "f":
            raise LayoutMapError(f"'{entry['tensor']}' ({list(array.shape)} {array.dtype.name}) is not the small "
                                 f"float tensor the config's \"{key}\" is read from",
                                 fix=f"use the map for this checkpoint's family; '{layout.name}' reads {layout.family}")
        config[key], note = read_value(entry["reading"], array)
        if note:
            notes.append(note)
    return config, tuple(notes)


def _short(value) -> float:
    """A float32 statistic as the shortest decimal that is the same float32 (0.485, not 0.48500001430511475)."""
    single = np.float32(value)
    return float(np.format_float_positional(single, unique=True)) if np.isfinite(single) else float(single)
