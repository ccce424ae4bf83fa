"""Known differences between tf_keras and Keras 3: weights a layer class names (or types) differently in each.

A tf_keras ``DepthwiseConv2D`` (and ``DepthwiseConv1D``) names its kernel ``depthwise_kernel`` where Keras 3's names it
``kernel`` (``block_1_depthwise/depthwise_kernel`` in a tf_keras checkpoint is
``block_1_depthwise/kernel`` in Keras 3); tf_keras's ConvNeXt ``LayerScale`` names its scale
``gamma`` where Keras 3's leaves it unnamed (``variable_3``). A checkpoint that lacks a model
weight under its own name is read under the tf_keras name, where it holds that: the matching
(:mod:`.matching`) reads them from :func:`tf_keras_differences`. Found by building every ``tf_keras.applications``
model and its Keras 3 twin: MobileNet, MobileNetV2, EfficientNet and EfficientNetV2 (depthwise
kernels) and ConvNeXt (layer scales) differ so; ResNet, Xception (``SeparableConv2D`` keeps its
names), DenseNet's blocks and InceptionV3's named layers do not. EfficientNet's input ``Normalization``
counts its samples in an int64 in tf_keras and an int32 in Keras 3: :func:`legacy_dtypes` names such
weights, which a load reads by value (refusing a count the narrower type cannot hold).

Example::

    legacy_names(keras.applications.MobileNetV2(weights=None))['block_1_depthwise/kernel']
    # 'depthwise_kernel'
"""

from __future__ import annotations

import dataclasses

from .. import tf_internals

# Layer class -> the tf_keras name of each of its weights, in the order of layer.weights.
RENAMES = {
    "DepthwiseConv1D": ("depthwise_kernel", "bias"),
    "DepthwiseConv2D": ("depthwise_kernel", "bias"),
    "LayerScale": ("gamma",),
}


# Layer class -> weight -> the dtype tf_keras keeps it in, where Keras 3 keeps a narrower one (read by value).
RETYPED = {
    "Normalization": {"count": "int64"},
}


@dataclasses.dataclass(frozen=True)
class TfKerasDifferences:
    """What tf_keras names or types otherwise in one model: ``names`` (weight path -> the last part of the
    name tf_keras gives it, :func:`legacy_names`) and ``dtypes`` (weight path -> the wider dtype tf_keras keeps
    it in, :func:`legacy_dtypes`). A model tf_keras has no twin of (a ``tf.Module``) differs in nothing.

    Example::

        tf_keras_differences(keras.applications.MobileNetV2(weights=None)).names['block_1_depthwise/kernel']
        # 'depthwise_kernel'
    """

    names: dict = dataclasses.field(default_factory=dict)
    dtypes: dict = dataclasses.field(default_factory=dict)


def tf_keras_differences(model) -> TfKerasDifferences:
    """Every known difference between tf_keras and Keras 3 in the weights of ``model``."""
    return TfKerasDifferences(names=legacy_names(model), dtypes=legacy_dtypes(model))


def legacy_dtypes(model) -> dict:
    """Model weight path -> the dtype tf_keras keeps it in, for each weight Keras 3 keeps in a narrower one
    (``Normalization``'s sample count: int64 in tf_keras, int32 in Keras 3)."""
    found = {}
    for layer in tf_internals.keras_sublayers(model):
        for weight in layer.weights:
            dtype = RETYPED.get(type(layer).__name__, {}).get(weight.path.rpartition("/")[2])
            if dtype is not None:
                found[weight.path] = dtype
    return found


def legacy_names(model) -> dict:
    """Model weight path -> the last part of the name tf_keras gives it, for each weight tf_keras names otherwise."""
    found = {}
    for layer in tf_internals.keras_sublayers(model):
        names = RENAMES.get(type(layer).__name__)
        if names is None:
            continue
        for weight, legacy in zip(layer.weights, names):
            if weight.path.rpartition("/")[2] != legacy:
                found[weight.path] = legacy
    return found


def legacy_key(key, leaf) -> str:
    """``key`` (a checkpoint name or object path) with its last part ``leaf``."""
    parent = key.rpartition("/")[0]
    return f"{parent}/{leaf}" if parent else leaf
