"""Built-in pairings: a checkpoint whose names say nothing of a Keras 3 model's, paired by the model's structure.

tf-slim's ``inception_v3`` (``InceptionV3/Mixed_5b/Branch_1/Conv2d_0b_5x5/weights``) and Keras 3's
``keras.applications.InceptionV3`` (``conv2d_7/kernel``, ``batch_normalization_7/beta``, numbered in the
order a process happens to create layers) are the same network: the same convolutions in the same
blocks and branches, batch norms without a scale (epsilon 0.001 in both), 3x3 average pools that leave
the padding out of the mean (TensorFlow's ``avg_pool`` SAME; Keras 3's ``AveragePooling2D(padding="same")``,
on every backend) and a classifier on the global average. Its pairing is the structure's order: each
convolution tf-slim builds (:data:`INCEPTION_V3_CONVOLUTIONS`, in the order of the blocks and their
branches) with the Keras convolution at the same place of the model's graph (the graph walked from the
output, each layer's inputs in order, a layer after everything it reads), each with the batch norm that
follows it. The logits' 1x1 convolution ``[1, 1, 2048, C]`` fills the ``Dense`` kernel ``[2048, C]``.
tf-slim's auxiliary head (``AuxLogits``, a training-time loss) has no Keras counterpart and is left out,
with a note. The pairing is chosen when the checkpoint holds tf-slim's InceptionV3 and the model is
built as ``keras.applications.InceptionV3`` builds it; every shape is still checked.

Example::

    pairing = builtin_pairing(model, view)
    pairing.name, pairing.remap['InceptionV3/Conv2d_1a_3x3/weights']
    # ('tf-slim inception_v3 -> keras.applications.InceptionV3', 'conv2d/kernel')
"""

from __future__ import annotations

import dataclasses

from ..errors import CheckpointMismatchError
from .checkpoint_side import squeeze_1x1

INCEPTION_V3 = "InceptionV3"
_BRANCHES = {  # block -> its branches, each the convolutions of the branch in order (scopes under Branch_N)
    "Mixed_5b": (("Conv2d_0a_1x1",), ("Conv2d_0a_1x1", "Conv2d_0b_5x5"),
                 ("Conv2d_0a_1x1", "Conv2d_0b_3x3", "Conv2d_0c_3x3"), ("Conv2d_0b_1x1",)),
    "Mixed_5c": (("Conv2d_0a_1x1",), ("Conv2d_0b_1x1", "Conv_1_0c_5x5"),
                 ("Conv2d_0a_1x1", "Conv2d_0b_3x3", "Conv2d_0c_3x3"), ("Conv2d_0b_1x1",)),
    "Mixed_5d": (("Conv2d_0a_1x1",), ("Conv2d_0a_1x1", "Conv2d_0b_5x5"),
                 ("Conv2d_0a_1x1", "Conv2d_0b_3x3", "Conv2d_0c_3x3"), ("Conv2d_0b_1x1",)),
    "Mixed_6a": (("Conv2d_1a_1x1",), ("Conv2d_0a_1x1", "Conv2d_0b_3x3", "Conv2d_1a_1x1"), ()),
    **{block: (("Conv2d_0a_1x1",), ("Conv2d_0a_1x1", "Conv2d_0b_1x7", "Conv2d_0c_7x1"),
               ("Conv2d_0a_1x1", "Conv2d_0b_7x1", "Conv2d_0c_1x7", "Conv2d_0d_7x1", "Conv2d_0e_1x7"),
               ("Conv2d_0b_1x1",))
       for block in ("Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e")},
    "Mixed_7a": (("Conv2d_0a_1x1", "Conv2d_1a_3x3"),
                 ("Conv2d_0a_1x1", "Conv2d_0b_1x7", "Conv2d_0c_7x1", "Conv2d_1a_3x3"), ()),
    "Mixed_7b": (("Conv2d_0a_1x1",), ("Conv2d_0a_1x1", "Conv2d_0b_1x3", "Conv2d_0b_3x1"),
                 ("Conv2d_0a_1x1", "Conv2d_0b_3x3", "Conv2d_0c_1x3", "Conv2d_0d_3x1"), ("Conv2d_0b_1x1",)),
    "Mixed_7c": (("Conv2d_0a_1x1",), ("Conv2d_0a_1x1", "Conv2d_0b_1x3", "Conv2d_0c_3x1"),
                 ("Conv2d_0a_1x1", "Conv2d_0b_3x3", "Conv2d_0c_1x3", "Conv2d_0d_3x1"), ("Conv2d_0b_1x1",)),
}
INCEPTION_V3_CONVOLUTIONS = (
    *(f"{INCEPTION_V3}/{scope}" for scope in ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "Conv2d_3b_1x1",
                                              "Conv2d_4a_3x3")),
    *(f"{INCEPTION_V3}/{block}/Branch_{number}/{scope}"
      for block, branches in _BRANCHES.items() for number, branch in enumerate(branches) for scope in branch),
)
"""tf-slim's InceptionV3 convolutions (each followed by a batch norm) in the order the network builds them."""
INCEPTION_V3_LOGITS = f"{INCEPTION_V3}/Logits/Conv2d_1c_1x1"
_BATCH_NORM = ("beta", "moving_mean", "moving_variance")  # scale=False: no gamma, in tf-slim and in Keras


@dataclasses.dataclass(frozen=True)
class BuiltinPairing:
    """``name``; ``remap``: checkpoint name -> model weight; ``transforms``: checkpoint name -> Transform;
    ``left_out``: checkpoint weights no model weight reads, and ``notes`` saying why."""

    name: str
    remap: dict
    transforms: dict
    left_out: tuple = ()
    notes: tuple = ()


def builtin_pairing(model, view) -> BuiltinPairing | None:
    """The built-in pairing of ``model`` (a built Keras 3 model) with ``view``'s checkpoint, or None when
    none applies. A checkpoint of tf-slim's InceptionV3 into a model that is not built as
    ``keras.applications.InceptionV3`` builds it is refused (CheckpointMismatchError): its names pair
    with nothing else."""
    if f"{INCEPTION_V3_CONVOLUTIONS[0]}/weights" not in view.contents:
        return None
    pairs = _convolutions_with_batch_norms(model)
    dense = [layer for layer in getattr(model, "layers", ()) if type(layer).__name__ == "Dense"]
    if pairs is None or len(pairs) != len(INCEPTION_V3_CONVOLUTIONS) or len(dense) > 1:
        found = "no Keras functional model" if pairs is None else \
            f"{len(pairs)} convolutions with batch norms and {len(dense)} dense layers"
        raise CheckpointMismatchError(
            f"checkpoint '{view.path}' is tf-slim's InceptionV3, which pairs only with keras.applications.InceptionV3 "
            f"({len(INCEPTION_V3_CONVOLUTIONS)} convolutions with batch norms and a dense classifier, or none with "
            "include_top=False); the model "
            f"has {found}: build it with keras.applications.InceptionV3(weights=None, classes=...)", path=view.path)
    remap, transforms = {}, {}
    for scope, (convolution, batch_norm) in zip(INCEPTION_V3_CONVOLUTIONS, pairs):
        remap[f"{scope}/weights"] = convolution.kernel.path
        for name, variable in zip(_BATCH_NORM, batch_norm.weights):
            remap[f"{scope}/BatchNorm/{name}"] = variable.path
    notes = ()
    if dense:
        remap[f"{INCEPTION_V3_LOGITS}/weights"] = dense[0].kernel.path
        remap[f"{INCEPTION_V3_LOGITS}/biases"] = dense[0].bias.path
        transforms[f"{INCEPTION_V3_LOGITS}/weights"] = squeeze_1x1()
    elif f"{INCEPTION_V3_LOGITS}/weights" in view.contents:
        notes += (f"left out tf-slim's logits ({INCEPTION_V3_LOGITS}): the model has no classifier",)
    auxiliary = tuple(name for name in view.weights if name.startswith(f"{INCEPTION_V3}/AuxLogits/"))
    if auxiliary:
        notes += (f"left out tf-slim's auxiliary head ({len(auxiliary)} tensors under {INCEPTION_V3}/AuxLogits): "
                  "keras.applications.InceptionV3 has none",)
    return BuiltinPairing("tf-slim inception_v3 -> keras.applications.InceptionV3", remap, transforms, auxiliary,
                          notes)


def build_order(model) -> list | None:
    """The layers of a Keras functional ``model`` in the order its graph computes them: walked from the
    outputs, each layer's inputs in order, every layer after all it reads (the order a network written
    branch by branch creates its layers). None for a model without a graph of layers."""
    layers = getattr(model, "layers", None)
    outputs = getattr(model, "outputs", None)
    if not layers or not outputs:
        return None
    producer = {}
    for layer in layers:
        try:
            produced = layer.output
        except (AttributeError, ValueError):
            return None
        for tensor in _flat(produced):
            producer[id(tensor)] = layer
    order, visited = [], set()
    stack = [(producer[id(tensor)], False) for tensor in reversed(_flat(outputs)) if id(tensor) in producer]
    while stack:
        layer, inputs_done = stack.pop()
        if inputs_done:
            order.append(layer)
            continue
        if id(layer) in visited:
            continue
        visited.add(id(layer))
        stack.append((layer, True))
        try:
            inputs = _flat(layer.input)
        except (AttributeError, ValueError):
            inputs = []
        for tensor in reversed(inputs):
            before = producer.get(id(tensor))
            if before is not None and before is not layer and id(before) not in visited:
                stack.append((before, False))
    return order


def _convolutions_with_batch_norms(model):
    """(Conv2D, the BatchNormalization that reads it) in build order; None without a graph."""
    order = build_order(model)
    if order is None:
        return None
    pairs = []
    for layer, following in zip(order, order[1:] + [None]):
        if type(layer).__name__ == "Conv2D":
            if type(following).__name__ != "BatchNormalization":
                return []
            pairs.append((layer, following))
    return pairs


def _flat(value) -> list:
    if isinstance(value, (list, tuple)):
        return [item for part in value for item in _flat(part)]
    if isinstance(value, dict):
        return [item for part in value.values() for item in _flat(part)]
    return [value]
