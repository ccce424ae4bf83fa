"""TensorFlow object-based checkpoints (``tf.train.Checkpoint``, Keras ``save_weights``) in the format registry.

The same bundle files as a name-based checkpoint, with an object graph among its tensors.
Each tensor is named by the full name TensorFlow recorded for it (what
``tf.compat.v1.train.Saver`` finds it by), or by its object path where it has none or two
share one (:func:`object_checkpoint_names`), and read by that name. Such a checkpoint is
written from a model (``convert --to object --model``), not from a stream of tensors.

Example::

    [t.name for t in OBJECT.contents('keras/weights').tensors][:1]
    # ['dense/kernel']
"""

from __future__ import annotations

from ..format_protocol import Contents, TensorInfo
from . import bundle, object_graph
from .name_format import BOOKKEEPING, BundleFormat, checkpoint_prefix, open_checked


def object_checkpoint_names(graph, keys) -> dict:
    """Key -> catalog name of each of ``keys`` of an object-based checkpoint (``graph``: its
    :class:`~subsetsaver.formats.tf.object_graph.ObjectGraph`): the full name TensorFlow recorded;
    the object path where it recorded none, or where its full name is another tensor's too (or
    another's object path); the key itself for a tensor the graph does not name, or when even an
    object path clashes.

    object_checkpoint_names(graph, ['layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE'])
    # {'layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE': 'dense/kernel'}
    """
    keys = list(keys)
    choices = {}  # key -> [(rank, name)]: full name 0, object path 1, key 2; a name repeated is kept once
    for key in keys:
        tensor = graph.tensors.get(key)
        found = [(0, tensor.full_name), (1, tensor.object_path)] if tensor is not None else []
        unique = {}
        for rank, name in found + [(2, key)]:
            if name and name not in unique:
                unique[name] = rank
        choices[key] = [(rank, name) for name, rank in unique.items()]
    level = dict.fromkeys(keys, 0)
    while True:  # in each clash the names of the lowest rank that can move do, towards the keys, which never clash
        holders = {}
        for key in keys:
            holders.setdefault(choices[key][level[key]][1], []).append(key)
        moving = []
        for group in holders.values():
            movable = [key for key in group if len(group) > 1 and level[key] < len(choices[key]) - 1]
            if movable:
                lowest = min(choices[key][level[key]][0] for key in movable)
                moving += [key for key in movable if choices[key][level[key]][0] == lowest]
        if not moving:
            return {key: choices[key][level[key]][1] for key in keys}
        for key in moving:
            level[key] += 1


class ObjectBasedFormat(BundleFormat):
    name = "object"
    description = "TensorFlow object-based (tf.train.Checkpoint, Keras save_weights)"
    writable = False
    noun = "object-based checkpoint"

    def recognises(self, path) -> bool:
        return bool(self._is_object_based(path))

    def contents(self, path) -> Contents:
        prefix = checkpoint_prefix(path)
        with open_checked(prefix) as reader:
            specs = {name: spec for name, spec in reader.specs.items() if name not in BOOKKEEPING}
            graph = object_graph.read_object_graph(reader)
        names = object_checkpoint_names(graph, specs)
        tensors = []
        for key in sorted(specs, key=names.__getitem__):
            tensor = graph.tensors.get(key)
            tensors.append(TensorInfo(names[key], tuple(specs[key].shape), specs[key].dtype, key=key,
                                      object_path=tensor.object_path if tensor else None))
        return Contents(prefix, self.name, tuple(tensors), object_graph=graph)

    def read(self, path, names):
        with bundle.BundleReader(checkpoint_prefix(path)) as reader:
            keys = self._keys(reader)
            for name in names:
                if name not in keys:
                    raise KeyError(f"checkpoint '{reader.prefix}' holds no tensor '{name}'")
                yield name, reader.read(keys[name])

    def _keys(self, reader) -> dict:
        graph = object_graph.read_object_graph(reader)
        return {name: key for key, name in object_checkpoint_names(
            graph, [key for key in reader.names if key not in BOOKKEEPING]).items()}


OBJECT = ObjectBasedFormat()
