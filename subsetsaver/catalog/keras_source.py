"""The catalog of a Keras 3 model and optimizer (TF2, eager): the one place that reads Keras objects.

Names are Keras variable paths (``dense/kernel``, ``bn/moving_mean``,
``adam/dense_kernel_momentum``, ``adam/iteration``), so every selector works on them:
``trainable()`` is the model's trainable variables, ``slots()`` the optimizer's
(moments, and its own variables such as ``learning_rate``), ``global_step()`` the
optimizer's ``iterations``, ``bn_stats()`` the moving mean/variance of
``BatchNormalization`` layers. Collections: ``variables`` (all), ``trainable_variables``,
``model`` and ``optimizer``.

Example::

    found = read(model, optimizer)
    (ss.trainable() | ss.bn_stats()).names(found.catalog)
    # ['dense/kernel', 'dense/bias', 'bn/gamma', 'bn/beta', 'bn/moving_mean', ...]
"""

from __future__ import annotations

import dataclasses
import math
import sys

from .. import tf_internals
from ..formats import npz
from .records import GLOBAL_VARIABLES, TRAINABLE_VARIABLES, Catalog, CatalogEntry
from .roles import Roles, by_role, named


@dataclasses.dataclass(frozen=True)
class KerasVariables:
    """A Keras catalog and what it stands for.

    ``variables``: name -> Keras variable; ``owner``: name -> 'model' or 'optimizer';
    ``local``: name -> the path without the optimizer's own name (``adam/dense_kernel_momentum``
    -> ``dense_kernel_momentum``), which is how a fresh optimizer (maybe named ``adam_1``)
    finds its variables again; model variables keep their path.
    """

    catalog: Catalog
    variables: dict
    owner: dict
    local: dict


def is_keras_model(source) -> bool:
    """Whether ``source`` is a Keras 3 layer/model (without importing Keras if it is not loaded)."""
    keras = sys.modules.get("keras")
    layer = getattr(getattr(keras, "layers", None), "Layer", None)
    return layer is not None and isinstance(source, layer)


def load(model, optimizer=None) -> Catalog:
    """The catalog of ``model`` (and ``optimizer``); what ``catalog.load`` returns for a Keras model."""
    return read(model, optimizer).catalog


def read(model, optimizer=None) -> KerasVariables:
    """Catalog the variables of ``model`` and ``optimizer`` (built ones only), in that order."""
    import keras

    variables, owner, local = {}, {}, {}
    trainable, bn_stats = set(), set()

    def add(variable, kind, local_name):
        name = variable.path
        if name in variables:
            raise ValueError(
                f"two Keras variables share the path '{name}'; give the layers (or optimizers) distinct names"
            )
        variables[name] = variable
        owner[name] = kind
        local[name] = local_name

    for variable in model.variables:
        add(variable, "model", variable.path)
        if variable.trainable:
            trainable.add(variable.path)
    for layer in tf_internals.keras_sublayers(model):
        if isinstance(layer, keras.layers.BatchNormalization) and getattr(layer, "built", False):
            bn_stats.update({layer.moving_mean.path, layer.moving_variance.path})

    slot_of, optimizer_own, steps = {}, set(), set()
    if optimizer is not None:
        prefix = optimizer.name + "/"
        references = {v.path.replace("/", "_"): v.path for v in model.trainable_variables}
        iterations = getattr(optimizer, "iterations", None)
        for variable in optimizer.variables:
            path = variable.path
            short = path[len(prefix):] if path.startswith(prefix) else path
            add(variable, "optimizer", short)
            if iterations is not None and variable is iterations:
                steps.add(path)
                continue
            reference = slot_owner(short, references)
            if reference is not None and tuple(variables[reference].shape) == tuple(variable.shape):
                slot_of[path] = reference
            else:
                optimizer_own.add(path)

    entries = [
        CatalogEntry(name=name, shape=tuple(int(d) for d in v.shape), dtype=dtype_name(v.dtype),
               nbytes=_nbytes(v), parts=(name,), index=index)
        for index, (name, v) in enumerate(variables.items())
    ]
    collections = {
        GLOBAL_VARIABLES: list(variables),
        TRAINABLE_VARIABLES: [n for n in variables if n in trainable],
        "model": [n for n in variables if owner[n] == "model"],
        "optimizer": [n for n in variables if owner[n] == "optimizer"],
    }
    roles = Roles(
        by_role=by_role({"slot": set(slot_of), "optimizer": optimizer_own, "bn_stat": bn_stats, "global_step": steps,
                         "hyperparameter": named("hyperparameter", optimizer_own)}),
        slot_of=slot_of,
        average_of={},
    )
    catalog = Catalog(entries, collections, kind="keras", roles=lambda *_: roles)
    return KerasVariables(catalog, variables, owner, local)


def slot_owner(short, references):
    """What ``references`` (flat name -> anything) holds for the model variable an optimizer slot named
    ``short`` belongs to: that of the longest flat name it starts with (then ``_``), or None.

    >>> slot_owner("dense_kernel_momentum", {"dense": "a", "dense_kernel": "b"})
    'b'
    """
    best = None
    for flat, path in references.items():
        if short.startswith(flat + "_") and (best is None or len(flat) > len(best[0])):
            best = (flat, path)
    return best[1] if best else None


def dtype_name(dtype) -> str:
    import numpy as np

    name = getattr(dtype, "name", None) or str(dtype)
    try:
        return np.dtype(name).name
    except TypeError:
        return name  # bfloat16 and friends: numpy knows them only through ml_dtypes


def _nbytes(variable) -> int:
    if any(d is None for d in variable.shape):
        return 0
    try:
        itemsize = npz.numpy_dtype(dtype_name(variable.dtype)).itemsize
    except (TypeError, AttributeError):
        return 0  # strings: no fixed size
    return math.prod(int(d) for d in variable.shape) * itemsize
