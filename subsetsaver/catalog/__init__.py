"""The catalog room: one picture of a program's variables, read once from its source.

Flow: a source (``tf.Graph``, ``.meta`` file, checkpoint (name- or object-based), Keras model) is read into a
:class:`Catalog` (``sources``, ``meta_source`` (a ``.meta`` file without TensorFlow), ``checkpoints``,
``keras_source``); the graph's ops, live or from the file, are joined with their function bodies
in one view (``op_graph``); each variable's role (optimizer slot,
batch-norm statistic, moving average, step) is found from that structure (``dataflow_roles``,
or from names where there is no graph: ``roles``);
and who reads and writes each variable (``dataflow``) is what the audit reasons over.

This room imports only ``formats``, ``errors`` and ``tf_internals``. Other rooms use the
names in ``__all__``.

Example::

    from subsetsaver import catalog
    cat = catalog.load(graph)
    sorted(cat.role('slot'))[:2]
    # ['conv_1/b/Adam', 'conv_1/b/Adam_1']
"""

from ..lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".checkpoints", "checkpoint_catalog", "checkpoint_contents", "checkpoint_kind", "checkpoint_prefix",
            "file_catalog", "file_format", "object_checkpoint_names", "read_tensors", "source_path",
            "unlisted_checkpoints_error"),
    **names(".dataflow", "Dataflow", "dataflow", "may_be_read_forward", "no_garbage_collection"),
    **names(".keras_source", "KerasVariables", "is_keras_model"),
    "keras_dtype_name": (".keras_source", "dtype_name"),
    "read_keras": (".keras_source", "read"),
    "keras_slot_owner": (".keras_source", "slot_owner"),
    **names(".moving_averages", "SLIM_IMAGENET_CLASSES", "WEIGHTS", "WeightsChoice", "choose_weights", "classes_note"),
    **names(".records", "GLOBAL_STEP", "GLOBAL_VARIABLES", "LOCAL_VARIABLES", "TRAINABLE_VARIABLES", "Catalog",
            "CatalogEntry", "VariableRecord", "value_bytes"),
    **names(".roles", "ROLE_TABLE", "ROLES", "Role", "Roles", "roles_from_names", "roles_from_object_graph", "warn_missed_optimizer_state"),
    **names(".sources", "load"),
})

__all__ = [
    "GLOBAL_STEP",
    "GLOBAL_VARIABLES",
    "LOCAL_VARIABLES",
    "ROLE_TABLE",
    "ROLES",
    "Role",
    "SLIM_IMAGENET_CLASSES",
    "TRAINABLE_VARIABLES",
    "WEIGHTS",
    "WeightsChoice",
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
    "choose_weights",
    "classes_note",
    "dataflow",
    "file_catalog",
    "file_format",
    "is_keras_model",
    "load",
    "may_be_read_forward",
    "no_garbage_collection",
    "object_checkpoint_names",
    "keras_dtype_name",
    "keras_slot_owner",
    "read_keras",
    "read_tensors",
    "roles_from_names",
    "roles_from_object_graph",
    "source_path",
    "unlisted_checkpoints_error",
    "value_bytes",
    "warn_missed_optimizer_state",
]
