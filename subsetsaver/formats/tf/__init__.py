"""TensorFlow's checkpoint files, read and written without TensorFlow.

- ``bundle``: tensor bundles (``.index`` and ``.data-*``): table, dtypes, validating reader,
  streaming writer (a package);
- ``object_graph``: the object graph of a TensorFlow 2 object-based checkpoint
  (``tf.train.Checkpoint``, Keras ``save_weights``): each tensor's key, object path and
  recorded full name; optimizers' slots, counters and hyperparameters;
- ``meta_graph``: MetaGraph files (``.meta``): the graph's ops and function library, the op
  list, the collections and their ``VariableDef`` messages;
- ``checkpoint_state``: the ``checkpoint`` state file a Saver keeps, and the checkpoints of a
  directory that no state file names;
- ``declared_sizes``: a checkpoint's declared tensor sizes checked against its files, before
  TensorFlow allocates them;
- ``name_format``, ``object_format``: the two formats in the registry (``NAME``, ``OBJECT``).

Other rooms import these names from here (``from subsetsaver.formats.tf import bundle``).

Example::

    from subsetsaver.formats.tf import bundle, checkpoint_state
    bundle.write('/ckpt/model-5', {'dense/w': w})
    checkpoint_state.name_latest('/ckpt/model-5')
"""

from ...lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".name_format", "NAME", "checkpoint_prefix"),
    **names(".object_format", "OBJECT"),
})

__all__ = ["NAME", "OBJECT", "bundle", "checkpoint_prefix", "checkpoint_state", "declared_sizes", "meta_graph",
           "name_format", "object_format", "object_graph"]
