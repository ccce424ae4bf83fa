"""The variables a checkpoint load writes: a model's weights and its optimizer's state.

A Keras 3 model's weights are named by their path (``conv/kernel``) in ``model.weights``
order; a ``tf.Module``'s by their variable name without ``:0`` in ``module.variables``
order. An optimizer's variables are found through its public ``variables``: each slot
is named ``OPTIMIZER/REFERENCE_KIND`` (``adam/conv_kernel_momentum``), where REFERENCE is
the model variable's path (or, for a ``tf.Variable``, its name) with ``/`` and ``:`` as
``_``, so the slot's model variable and its kind (``momentum``, ``velocity``, ...) are
read from that; the iteration counter is ``optimizer.iterations``.

Example::

    weights = model_weights(model)
    list(weights.variables)[:2]
    # ['conv/kernel', 'conv/bias']
    optimizer_state(optimizer, weights).slots['adam/conv_kernel_momentum']
    # ('conv/kernel', 'momentum')
"""

from __future__ import annotations

import dataclasses
import re

from ..catalog import (
    GLOBAL_VARIABLES,
    TRAINABLE_VARIABLES,
    Catalog,
    CatalogEntry,
    is_keras_model,
    keras_dtype_name,
    keras_slot_owner,
    read_keras,
    value_bytes,
)
from .common import is_tf_module, require_built
from .legacy_names import TfKerasDifferences, tf_keras_differences

_DEVICE_SUFFIX = re.compile(r":\d+$")


@dataclasses.dataclass(frozen=True)
class ModelWeights:
    """The weights of a model: ``variables`` (name -> variable, in the model's order),
    ``catalog`` (what selectors choose from), ``flat`` (name -> the name an optimizer
    gives its slots of that variable, before ``_KIND``), ``label`` (for messages), ``tf_keras`` (the names
    and dtypes tf_keras gives these weights where they differ: :mod:`.legacy_names`)."""

    label: str
    variables: dict
    catalog: Catalog
    flat: dict
    tf_keras: TfKerasDifferences = dataclasses.field(default_factory=TfKerasDifferences)

    def spec(self, name) -> tuple:
        """(shape, dtype name) of weight ``name``."""
        return variable_spec(self.variables[name])


@dataclasses.dataclass(frozen=True)
class OptimizerState:
    """An optimizer's variables: ``variables`` (path -> variable), ``slots`` (path -> (model
    weight name, kind)), ``iterations`` (the counter's path, or None) and ``own`` (the rest:
    learning rate and other hyperparameters, which no checkpoint load changes)."""

    label: str
    variables: dict
    slots: dict
    iterations: str | None
    own: tuple

    def spec(self, path) -> tuple:
        return variable_spec(self.variables[path])

    def slots_of(self, weight) -> dict:
        """kind -> slot path, for model weight ``weight``."""
        return {kind: path for path, (name, kind) in self.slots.items() if name == weight}


def model_weights(model) -> ModelWeights:
    """The weights of a built Keras 3 model or of a ``tf.Module``."""
    if not is_keras_model(model) and not is_tf_module(model):
        raise TypeError(f"load_checkpoint() takes a Keras 3 model or a tf.Module, got {type(model).__name__}")
    require_built(model)
    if is_keras_model(model):
        variables = {weight.path: weight for weight in model.weights}
        catalog = read_keras(model).catalog
        flat = {name: name.replace("/", "_") for name in variables}
        return ModelWeights(f"Keras model '{model.name}'", variables, catalog, flat, tf_keras_differences(model))
    variables, flat = {}, {}
    for variable in model.variables:
        name = _DEVICE_SUFFIX.sub("", variable.name)
        if name in variables:
            raise ValueError(
                f"two variables of {type(model).__name__} are named '{name}'; "
                "give them distinct names (tf.Variable(..., name=...))"
            )
        variables[name] = variable
        flat[name] = str(variable.name).replace("/", "_").replace(":", "_")
    entries = [CatalogEntry(name=name, shape=variable_spec(v)[0], dtype=variable_spec(v)[1],
                            nbytes=value_bytes(variable_spec(v)[0], variable_spec(v)[1]), parts=(name,), index=index)
               for index, (name, v) in enumerate(variables.items())]
    collections = {GLOBAL_VARIABLES: list(variables),
                   TRAINABLE_VARIABLES: [name for name, v in variables.items() if v.trainable]}
    catalog = Catalog(entries, collections, kind="module")
    label = f"module '{model.name}'" if getattr(model, "name", None) else type(model).__name__
    return ModelWeights(label, variables, catalog, flat)


def optimizer_state(optimizer, weights) -> OptimizerState:
    """The state of a built Keras 3 optimizer over ``weights`` (a :class:`ModelWeights`)."""
    prefix = optimizer.name + "/"
    iterations = getattr(optimizer, "iterations", None)
    by_flat = {weights.flat[name]: name for name, v in weights.variables.items() if v.trainable}
    variables, slots, own, counter = {}, {}, [], None
    for variable in optimizer.variables:
        path = variable.path
        variables[path] = variable
        if iterations is not None and variable is iterations:
            counter = path
            continue
        short = path[len(prefix):] if path.startswith(prefix) else path
        reference = keras_slot_owner(short, by_flat)
        if reference is not None and variable_spec(variable)[0] == weights.spec(reference)[0]:
            slots[path] = (reference, short[len(weights.flat[reference]) + 1:])
        else:
            own.append(path)
    return OptimizerState(f"optimizer '{optimizer.name}'", variables, slots, counter, tuple(own))


def variable_spec(variable) -> tuple:
    """(shape tuple, dtype name) of a Keras variable or ``tf.Variable``."""
    shape = tuple(None if d is None else int(d) for d in variable.shape)
    return shape, keras_dtype_name(variable.dtype)
