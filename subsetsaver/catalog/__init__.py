"""The catalog room: one picture of a program's variables, read once from its source.

Flow: a source (``tf.Graph``, ``.meta`` file, checkpoint (name- or object-based), Keras model) is read into a
:class:`Catalog` (``sources``, ``meta_source`` (a ``.meta`` file without TensorFlow), ``checkpoints``,
``keras_source``); the graph's ops, live or from the file, are joined with their function bodies
in one view (``op_graph``); each variable's role (optimizer slot,
batch-norm statistic, moving average, step) is found from that structure (``roles``);
and who reads and writes each variable (``dataflow``) is what the audit reasons over.

This room imports only ``formats``, ``errors`` and ``tf_internals``. Other rooms use the
names in ``__all__``.

Example::

    from subsetsaver import catalog
    cat = catalog.load(graph)
    sorted(cat.role('slot'))[:2]
    # ['conv_1/b/Adam', 'conv_1/b/Adam_1']
"""

from .checkpoints import (
    checkpoint_catalog,
    checkpoint_contents,
    checkpoint_kind,
    checkpoint_prefix,
    file_catalog,
    file_format,
    object_checkpoint_names,
    read_tensors,
    source_path,
    unlisted_checkpoints_error,
)
from .dataflow import Dataflow, dataflow, no_garbage_collection
from .keras_source import KerasVariables, is_keras_model
from .keras_source import dtype_name as keras_dtype_name
from .keras_source import read as read_keras
from .records import (
    GLOBAL_STEP,
    GLOBAL_VARIABLES,
    LOCAL_VARIABLES,
    TRAINABLE_VARIABLES,
    Catalog,
    CatalogEntry,
    VariableRecord,
    value_bytes,
)
from .roles import ROLES, Roles, roles_from_names, roles_from_object_graph, warn_missed_optimizer_state
from .sources import load

__all__ = [
    "GLOBAL_STEP",
    "GLOBAL_VARIABLES",
    "LOCAL_VARIABLES",
    "ROLES",
    "TRAINABLE_VARIABLES",
    "Catalog",
    "CatalogEntry",
    "Dataflow",
    "KerasVariables",
    "Roles",
    "VariableRecord",
    "checkpoint_catalog",
    "checkpoint_contents",
    "checkpoint_kind",
    "checkpoint_prefix",
    "dataflow",
    "file_catalog",
    "file_format",
    "is_keras_model",
    "load",
    "no_garbage_collection",
    "object_checkpoint_names",
    "keras_dtype_name",
    "read_keras",
    "read_tensors",
    "roles_from_names",
    "roles_from_object_graph",
    "source_path",
    "unlisted_checkpoints_error",
    "value_bytes",
    "warn_missed_optimizer_state",
]
