"""The planning room: one Saver (or portable writer) over the chosen variables, one initializer for the rest.

Flow inside the room: ``planner`` resolves a selector into a :class:`Plan`; the plan
names its checkpoint keys (``remap``), knows its exact sizes (``sizes``) and talks to a
backend (``backends``: ``tf_backend`` writes TensorFlow checkpoints through a staged
Saver, ``staging``; ``npz_backend`` writes portable files through ``npz_ops`` and
``npz_layout``). Every op that puts checkpoint values into variables is built in
``restore_ops``. Every difference between a plan and a checkpoint is a ``reports.Problem``.
``background`` writes saves with ``blocking=False`` from a snapshot queued in the graph;
``averages`` restores moving-average shadows for evaluation; ``scaffold`` runs a plan
inside ``MonitoredTrainingSession``; ``preview`` is a plan's dry run without TensorFlow
(names, sizes, the check against a checkpoint) for a ``.meta`` file; ``arguments`` checks
what both are given.

This room imports ``catalog``, ``selectors``, ``audit``, ``formats``, ``errors`` and
``tf_internals``. Other rooms use the names in ``__all__``.

Example::

    from subsetsaver.planning import plan
    p = plan("trainable() | bn_stats()", graph, max_to_keep=3)
    print(p.summary())
"""

from ..lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".arguments", "ON_MISMATCH"),
    **names(".averages", "DEFAULT_EMA_NAME", "AverageRestorer", "AverageRestoreReport", "average_restore_map",
            "shadow_names"),
    **names(".backends", "BACKENDS", "Backend", "backend_class"),
    **names(".background", "PendingSave", "SnapshotSession", "queues_for", "snapshot"),
    **names(".npz_backend", "STATE_FILENAME", "STATE_FORMAT", "NpzBackend"),
    **names(".npz_layout", "check_storable", "compare_with_manifest", "joined", "layout_of"),
    **names(".npz_ops", "save_fetches_for"),
    **names(".planner", "Plan", "plan"),
    **names(".preview", "PlanPreview", "plan_preview"),
    **names(".remap", "checkpoint_names", "renamed_names", "suggest_remap"),
    **names(".reports", "CheckReport", "Problem", "RestoreReport", "compare_contents", "describe_all",
            "remap_in_words"),
    **names(".row_rules", "RowRules", "split_remap"),
    **names(".row_stream", "map_rows", "map_rows_by_part", "parse_rows_option", "resolve_rows", "split_by_rows"),
    **names(".rows", "INITS", "RowCounts", "RowMap", "apply_rows"),
    **names(".scaffold", "initialize_if_uninitialized", "scaffold"),
    **names(".sizes", "SavedTensor", "data_bytes", "index_bytes", "smaller_text"),
    **names(".tf_backend", "TfBackend"),
    "npz_ops_for": (".npz_ops", "ops_for"),
})

__all__ = [
    "BACKENDS",
    "DEFAULT_EMA_NAME",
    "INITS",
    "ON_MISMATCH",
    "STATE_FILENAME",
    "STATE_FORMAT",
    "AverageRestoreReport",
    "AverageRestorer",
    "Backend",
    "CheckReport",
    "NpzBackend",
    "PendingSave",
    "Plan",
    "PlanPreview",
    "Problem",
    "RestoreReport",
    "RowCounts",
    "RowMap",
    "RowRules",
    "SavedTensor",
    "SnapshotSession",
    "TfBackend",
    "apply_rows",
    "average_restore_map",
    "backend_class",
    "check_storable",
    "checkpoint_names",
    "compare_contents",
    "compare_with_manifest",
    "data_bytes",
    "describe_all",
    "index_bytes",
    "initialize_if_uninitialized",
    "joined",
    "layout_of",
    "map_rows",
    "map_rows_by_part",
    "npz_ops_for",
    "parse_rows_option",
    "plan",
    "plan_preview",
    "queues_for",
    "remap_in_words",
    "renamed_names",
    "resolve_rows",
    "save_fetches_for",
    "scaffold",
    "shadow_names",
    "smaller_text",
    "snapshot",
    "split_by_rows",
    "split_remap",
    "suggest_remap",
]
