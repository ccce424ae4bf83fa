"""What the Keras tools share: the optimizer a model was compiled with, the built-model check, the
``tf.distribute`` scope the variables belong to, a variable's value as numpy, and whether an object is a
``tf.Module`` (TensorFlow is never imported here for it: Keras on torch or jax runs without it).

Example::

    with strategy_scope(model):
        optimizer.build(model.trainable_variables)
"""

from __future__ import annotations

import contextlib
import sys

from .. import tf_internals


def compiled_optimizer(model, optimizer):
    """``optimizer``, or the optimizer ``model`` was compiled with (None when neither)."""
    if optimizer is not None:
        return optimizer
    compiled = getattr(model, "optimizer", None)
    return compiled if compiled is not None and hasattr(compiled, "variables") else None


def is_tf_module(model) -> bool:
    """Whether ``model`` is a ``tf.Module`` (without importing TensorFlow: none exists before it is imported)."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(model, tf.Module)


def require_built(model):
    """A ValueError for a model (or module) that has no variables yet."""
    if not model.variables:
        name = getattr(model, "name", None) or type(model).__name__
        raise ValueError(
            f"model '{name}' has no variables yet; build it first "
            "(model.build(input_shape), or call it once on a batch)"
        )


def value(variable):
    """The variable's value as a numpy array (its true dtype, bfloat16 included)."""
    import numpy as np

    return np.asarray(variable.numpy())


def strategy_scope(model):
    """The scope of the tf.distribute strategy the model's variables belong to, unless already in one (none
    without TensorFlow: Keras on the torch or jax backend)."""
    if sys.modules.get("tensorflow") is None:
        return contextlib.nullcontext()
    import tensorflow as tf

    strategy = tf_internals.distribute_strategy_of(model.variables[0])
    if strategy is None or tf.distribute.has_strategy():
        return contextlib.nullcontext()
    return strategy.scope()
