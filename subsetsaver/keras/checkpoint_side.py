"""What a checkpoint file holds, as a load into Keras sees it: weights, optimizer slots, the step.

The file's catalog (:func:`subsetsaver.catalog.file_catalog`, read without TensorFlow) says
each tensor's role: optimizer slots (``role 'slot'`` with ``slot_of``), the optimizer's own
scalars (``beta1_power``), the step (``global_step``, or a Keras optimizer's ``iter``),
moving-average shadows and loss scales; every other tensor is a *weight*, which some model
variable should read.

A slot's kind is read from its name around its variable's: a named kind (``m``, ``v``,
``momentum``, ``accumulator``, ``rms``, ...: tf.keras's ``Adam/m/dense/kernel`` or
``dense/kernel/m``) wins; otherwise the name is a TF1 slot, ``VARIABLE/OPTIMIZER`` with
``_1``, ``_2`` for the optimizer's second and third slot (``conv_1/w/Adam_1`` is Adam's
second slot, v), and the position says the kind for the Keras optimizer at hand
(:func:`slot_kind`).

Example::

    view = checkpoint_view('train/model.ckpt-3')
    view.slots['conv_1/w/Adam_1'], view.steps
    # ('conv_1/w', ('global_step',))
    slot_kind('conv_1/w/Adam_1', 'conv_1/w', keras.optimizers.Adam())
    # ('velocity', None)
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from .. import catalog as catalog_module
from ..catalog import read_tensors

# Keras 3 kinds by tf.keras's slot names (OptimizerV2 and the newer tf_keras optimizers).
_NAMED_KINDS = {
    "m": "momentum", "v": "velocity", "vhat": "velocity_hat", "momentum": "momentum", "velocity": "velocity",
    "velocity_hat": "velocity_hat", "accumulator": "accumulator", "rms": "velocity", "mg": "average_gradient",
    "average_gradient": "average_gradient", "linear": "linear", "accum_grad": "accumulated_grad",
    "accum_var": "accumulated_delta_var", "accumulated_grad": "accumulated_grad",
    "accumulated_delta_var": "accumulated_delta_var", "norm": "norm", "u": "norm",
}
# Where a Keras optimizer keeps what tf.keras calls differently.
_NAMED_KINDS_BY_OPTIMIZER = {"Adamax": {"v": "norm"}}
# The slots a TF1 optimizer (by its default name) makes per variable, in order (VAR/NAME,
# VAR/NAME_1, ...), as the Keras 3 optimizers of that algorithm call them.
_TF1_SLOT_ORDER = {
    "Adam": ("momentum", "velocity"),
    "Momentum": ("momentum",),
    "Adagrad": ("accumulator",),
    "RMSProp": ("velocity", "momentum"),
    "Adadelta": ("accumulated_grad", "accumulated_delta_var"),
    "Ftrl": ("accumulator", "linear"),
}
_CENTERED_RMSPROP_ORDER = ("velocity", "average_gradient", "momentum")  # TF1 makes mg before momentum
_KERAS_ALGORITHMS = {"Adam": ("Adam", "AdamW"), "Momentum": ("SGD",), "Adagrad": ("Adagrad",),
                     "RMSProp": ("RMSprop",), "Adadelta": ("Adadelta",), "Ftrl": ("Ftrl",)}
_NUMBERED = re.compile(r"^(?P<base>.*?)(_(?P<number>\d+))?$")
_STEP_ROLES = ("global_step", "step")
_NEVER_WEIGHTS = tuple(role.name for role in catalog_module.ROLE_TABLE if not role.weight)


@dataclasses.dataclass(frozen=True)
class CheckpointView:
    """``path``: what to read from (a TensorFlow checkpoint's prefix, or the file);
    ``contents``: name -> (shape, dtype) of every tensor; ``weights``: the tensors some
    model variable should read, in the catalog's order; ``slots``: slot -> its variable;
    ``steps``: step counters; ``catalog``: the file's catalog. ``read_from``: name -> the tensor its
    values are read from (a weight's moving average, :func:`~subsetsaver.catalog.choose_weights`);
    ``transforms``: name -> the :class:`Transform` its values go through (``contents`` holds the shape
    it gives)."""

    path: str
    contents: dict
    weights: tuple
    slots: dict
    steps: tuple
    catalog: object
    read_from: dict = dataclasses.field(default_factory=dict)
    transforms: dict = dataclasses.field(default_factory=dict)

    def slots_of(self, name) -> list:
        """The slots of checkpoint variable ``name``, in the catalog's order."""
        return [slot for slot, variable in self.slots.items() if variable == name]

    def read(self, names):
        """Yield ``(name, array)`` for each of ``names``, one tensor in memory at a time: read from the tensor
        :attr:`read_from` names (checked against its checksum), through its transform."""
        keys = [self.read_from.get(name, name) for name in names]
        for name, (_, array) in zip(names, read_tensors(self.path, keys)):
            transform = self.transforms.get(name)
            yield name, (array if transform is None else transform.apply(array))
            del array

    def reading(self, read_from=None, transforms=None) -> CheckpointView:
        """This view with ``read_from`` and ``transforms`` added (``contents`` then holds each transform's shape)."""
        contents, combined = dict(self.contents), dict(self.transforms)
        for name, transform in (transforms or {}).items():
            shape, dtype = self.contents[name]
            contents[name] = (transform.shape(shape), dtype)
            combined[name] = transform if name not in combined else _then(combined[name], transform)
        return dataclasses.replace(self, contents=contents, read_from={**self.read_from, **(read_from or {})},
                                   transforms=combined)


@dataclasses.dataclass(frozen=True)
class Transform:
    """What a tensor goes through between the checkpoint and the model: ``text`` (as reports say it),
    ``apply`` (array -> array) and ``shape`` (its shape -> the shape ``apply`` gives)."""

    text: str
    apply: object
    shape: object


def _then(first, second) -> Transform:
    return Transform(f"{first.text}, {second.text}", lambda array: second.apply(first.apply(array)),
                     lambda shape: second.shape(first.shape(shape)))


def drop_first_class() -> Transform:
    """Class 0 left out along the last axis: tf-slim's 1001 ImageNet classes, the background first."""
    return Transform("drop class 0", lambda array: np.ascontiguousarray(array[..., 1:]),
                     lambda shape: (*shape[:-1], shape[-1] - 1))


def squeeze_1x1() -> Transform:
    """A 1x1 convolution's kernel ``[1, 1, IN, OUT]`` as a dense layer's ``[IN, OUT]``."""
    return Transform("squeeze 1x1", lambda array: np.ascontiguousarray(array.reshape(array.shape[2:])),
                     lambda shape: tuple(shape[2:]))


def checkpoint_view(checkpoint) -> CheckpointView:
    """Read what ``checkpoint`` (prefix, directory, file of it, ``.npz`` or ``.safetensors``) holds."""
    path = checkpoint_path(checkpoint)
    cat = catalog_module.file_catalog(path)
    contents, slots, steps, other = {}, {}, [], set()
    for record in cat.records:
        contents[record.name] = (tuple(record.shape), record.dtype)
    for record in cat.records:
        if any(role in record.roles for role in _STEP_ROLES):
            steps.append(record.name)
        elif "slot" in record.roles:
            variable = _unscoped(record.slot_of, contents)
            if variable is not None:
                slots[record.name] = variable
            else:
                other.add(record.name)
        elif any(role in record.roles for role in _NEVER_WEIGHTS):
            other.add(record.name)
    weights = tuple(name for name in cat.ordered_names if name not in slots and name not in other
                    and name not in steps)
    return CheckpointView(path, contents, weights, slots, tuple(steps), cat)


def _unscoped(variable, contents):
    """The checkpoint variable a slot belongs to: ``variable`` itself, or, for a slot kept under the
    optimizer's variable scope (``opt/conv_1/w/Adam`` of ``conv_1/w``), ``variable`` without its leading
    scopes; None when no such variable is in ``contents``."""
    while variable is not None:
        if variable in contents:
            return variable
        variable = variable.split("/", 1)[1] if "/" in variable else None
    return None


def checkpoint_path(checkpoint) -> str:
    """The prefix of a TensorFlow checkpoint (a directory's latest), or the path of a ``.npz``/``.safetensors``."""
    if catalog_module.file_format(checkpoint) == "name":
        return catalog_module.checkpoint_prefix(checkpoint)
    return os.fspath(checkpoint)


def slot_kind(slot, variable, optimizer, siblings=()) -> tuple:
    """``(kind, None)``: the kind of Keras 3 ``optimizer`` variable ('momentum', 'velocity', ...)
    that checkpoint slot ``slot`` of ``variable`` fills; or ``(None, why)`` when its name does
    not say, or says another algorithm. ``siblings``: every slot of ``variable`` (TF1's
    centered RMSProp has three).

    slot_kind('Adam/m/dense/kernel', 'dense/kernel', keras.optimizers.Adam())
    # ('momentum', None)
    slot_kind('conv_1/w/Adam_1', 'conv_1/w', keras.optimizers.SGD(momentum=0.9))
    # (None, "a slot of conv_1/w made by TF1's Adam, not SGD")
    """
    tokens = _around(slot, variable)
    algorithm = type(optimizer).__name__
    named = {**_NAMED_KINDS, **_NAMED_KINDS_BY_OPTIMIZER.get(algorithm, {})}
    for token in reversed(tokens):
        if token in named:
            return named[token], None
    base = _tf1_base(slot, variable)
    order = _TF1_SLOT_ORDER.get(base)
    if order is None:
        return None, f"a slot of {variable} whose name does not say its kind"
    if algorithm not in _KERAS_ALGORITHMS[base]:
        return None, f"a slot of {variable} made by TF1's {base}, not {algorithm}"
    if base == "RMSProp" and sum(1 for sibling in siblings if _tf1_base(sibling, variable) == base) == 3:
        order = _CENTERED_RMSPROP_ORDER
    position = int(_NUMBERED.match(_tf1_suffix(slot, variable))["number"] or 0)
    if position >= len(order):
        return None, f"slot {position + 1} of {variable} made by TF1's {base}, which makes {len(order)}"
    return order[position], None


def _tf1_base(slot, variable):
    """'Adam' for 'conv_1/w/Adam_1' of 'conv_1/w', and for 'opt/conv_1/w/Adam_1' (an optimizer made under
    a variable scope); None for a name of another shape."""
    suffix = _tf1_suffix(slot, variable)
    return _NUMBERED.match(suffix)["base"] if suffix else None


def _tf1_suffix(slot, variable):
    """The last part of a TF1 slot name, ``[SCOPE/]VARIABLE/SUFFIX``; None for a name of another shape."""
    head, _, last = slot.rpartition("/")
    return last if head == variable or head.endswith("/" + variable) else None


def _around(slot, variable) -> list:
    """The name parts of ``slot`` outside its variable's: ['Adam_1'] for 'conv_1/w/Adam_1',
    ['Adam', 'm'] for 'Adam/m/dense/kernel' and for 'Adam/dense/kernel/m'."""
    parts, inner = slot.split("/"), variable.split("/")
    for start in range(len(parts) - len(inner), -1, -1):
        if parts[start:start + len(inner)] == inner:
            return parts[:start] + parts[start + len(inner):]
    return []
