"""Model families that another library has no exact twin of: recognized by their tensors' names, and refused
with the reason, so that ``convert --map`` says why there is no map instead of a generic mismatch.

A near twin loads without a missing tensor and computes something else. Each entry names the family, how
its checkpoints are recognized (globs of the selector language over tensor names), the target library,
the nearest model there, and what differs. A map into that library refuses a checkpoint of the family
(before reading its config or writing anything), and so does asking for one of the map names people
would try.

    >>> no_twin_for(["resnet_v1_50/block1/unit_1/bottleneck_v1/conv1/weights"], "timm").nearest
    'timm resnet50 (torchvision ResNet-50)'
"""

from __future__ import annotations

import dataclasses

from ..selectors import glob_captures


@dataclasses.dataclass(frozen=True)
class NoTwin:
    """A family with no exact twin in a library."""

    family: str
    library: str
    signature: tuple
    """Globs: any one matching a tensor name recognizes the family."""
    nearest: str
    """The library's nearest model."""
    reason: str
    """How it differs, measured."""
    names: tuple = ()
    """Map names people try for it."""

    @property
    def message(self) -> str:
        return (f"this is a {self.family} checkpoint, which {self.library} has no exact twin of: the nearest, "
                f"{self.nearest}, {self.reason}")

    def named(self, map_name) -> str:
        """The refusal of a map asked for by ``map_name``, which would convert this family."""
        return (f"no map '{map_name}': {self.library} has no exact twin of the {self.family}: the nearest, "
                f"{self.nearest}, {self.reason}")

    @property
    def fix(self) -> str:
        return ("no map converts it, since a near twin loads and computes something else; a map of your own "
                "(--map FILE) is checked the same way")


NO_TWINS = (
    NoTwin(family="tf-slim ResNet v1 (tf_slim.nets.resnet_v1)", library="timm",
           signature=("resnet_v1_*/block1/unit_1/bottleneck_v1/conv1/weights",),
           nearest="timm resnet50 (torchvision ResNet-50)",
           reason="strides in the first unit of each block where tf-slim's resnet_v1 strides in the last "
                  "(block1/unit_3, ...), so every feature map after block1 is computed at other positions",
           names=("resnet-v1-to-timm", "slim-resnet-v1-to-timm", "resnet_v1-to-timm")),
    NoTwin(family="tf-slim ResNet v2 (tf_slim.nets.resnet_v2)", library="timm",
           signature=("resnet_v2_*/block1/unit_1/bottleneck_v2/conv1/weights",),
           nearest="timm resnetv2_50",
           reason="strides in the first unit of each block where tf-slim's resnet_v2 strides in the last",
           names=("resnet-v2-to-timm", "slim-resnet-v2-to-timm", "resnet_v2-to-timm")),
    NoTwin(family="tf-slim Inception v3 (tf_slim.nets.inception_v3)", library="timm",
           signature=("InceptionV3/Conv2d_1a_3x3/weights",),
           nearest="timm inception_v3",
           reason="counts the zero padding in the 3x3 average pools of its Mixed blocks (F.avg_pool2d's "
                  "count_include_pad) where TensorFlow's \"SAME\" pools average over the window inside the "
                  "image only, so every border value of every Mixed block differs (measured on tf-slim's own network: "
                  "5.1 apart after Mixed_5b, logits 3.2 apart); keras.applications.InceptionV3 is an exact twin: "
                  "convert --to keras --model keras.applications.InceptionV3",
           names=("inception-v3-to-timm", "slim-inception-v3-to-timm", "inception_v3-to-timm")),
    NoTwin(family="tf_keras ResNet50 (tf_keras.applications.ResNet50)", library="timm",
           signature=("conv2_block1_1_conv/kernel",),
           nearest="timm resnet50",
           reason="strides in each stage's first 3x3 convolution where tf_keras' ResNet50 strides in the first "
                  "1x1 convolution (conv3_block1_1_conv, ...)",
           names=("keras-resnet50-to-timm", "keras-resnet-to-timm")),
)
"""The families known to have no exact twin, by target library."""


def no_twin_for(names, library):
    """The :class:`NoTwin` entry of ``library`` that recognizes one of ``names`` (tensor names), or None."""
    matchers = [(entry, [glob_captures(glob) for glob in entry.signature]) for entry in NO_TWINS
                if entry.library == library]
    for name in names:
        for entry, globs in matchers:
            if any(match(name) is not None for match in globs):
                return entry
    return None


def no_twin_named(map_name):
    """The :class:`NoTwin` entry whose map names include ``map_name``, or None."""
    return next((entry for entry in NO_TWINS if map_name in entry.names), None)
