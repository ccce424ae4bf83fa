"""Checkpoint files and durable writes: the bottom floor, with no TensorFlow graph code.

- ``registry``: every checkpoint format, found by path or by name; each is one module behind
  the protocol of ``format_protocol`` (recognise a path, list its tensors, stream them out,
  write a stream): ``name_format`` (TensorFlow name-based), ``object_format`` (TensorFlow
  object-based), ``npz_format``, ``safetensors_format``.
- ``checkpoint_writer``: the one writer every writing command uses (checks the output, takes
  the directory's lock, streams, verifies, publishes, names the latest).
- ``progress``: the progress bar of a long file command (writes, ``diff``), shown on a terminal only.
- ``publish``: putting a written checkpoint in place so that at every instant the old or the
  new one restores whole; the listing of a checkpoint prefix's files.
- ``storage``: the file layer: every file question (exists, list, ranged reads, atomic
  writes, rename, remove, the writer lock) for local paths and URLs, answered by one
  backend per scheme: ``local_files`` (the operating system; durable writes, ``flock``),
  ``remote_storage`` (buckets through fsspec; ``remote_ranges``: which requests wanted ranges become, a
  long run read in one streamed request), ``gfile_files`` (schemes only TensorFlow serves).
- ``npz``: the portable ``.npz`` checkpoint format (a package: format, writer, reader, ...).
- ``npz_state``: ``checkpoint_npz.json``, the state file of a directory of portable
  checkpoints (the latest file, the kept ones).
- ``safetensors_file``: safetensors files (through the ``safetensors`` package), for PyTorch and JAX.
- ``meta_graph``: MetaGraph files (``.meta``) decoded without TensorFlow: the graph's ops and
  function library, the op list, the collections and their ``VariableDef`` messages.
- ``subset_manifest``: the ``PREFIX.subset.json`` file a plan writes beside its checkpoints.
- ``tf_bundle``: TensorFlow's checkpoint files (tensor bundles: ``.index`` and ``.data-*``),
  read and written without TensorFlow (a package: wire format, table, dtypes, reader, writer).
- ``tf_object_graph``: the object graph of a TensorFlow 2 object-based checkpoint
  (``tf.train.Checkpoint``, Keras ``save_weights``), decoded without TensorFlow: each tensor's
  key, object path and recorded full name; optimizers' slots, counters and hyperparameters.
- ``tf_index``: the check of a TensorFlow checkpoint's declared tensor sizes against its
  files, before TensorFlow allocates them (on top of ``tf_bundle``).
- ``tf_state``: the ``checkpoint`` state file a TensorFlow Saver keeps (read and written
  without TensorFlow), and the checkpoints of a directory that no state file names.

These modules import only ``subsetsaver.errors``, ``subsetsaver.version`` and each other
(TensorFlow only lazily, for ``ram://`` paths). Other rooms import them by name
(``from subsetsaver.formats import npz``).

Example::

    from subsetsaver.formats import npz, npz_state
    npz.write('/ckpt/model-5.npz', {'dense/w': w}).names
    # ('dense/w',)
    npz_state.write_state('/ckpt/checkpoint_npz.json', 'model-5.npz', ['model-5.npz'])
"""

__all__ = ["checkpoint_writer", "format_protocol", "gfile_files", "keras_h5", "local_files", "meta_graph", "name_format", "npz",
           "npz_format", "npz_state", "object_format", "progress", "publish", "registry", "remote_ranges", "remote_storage", "safetensors_file",
           "safetensors_format", "storage", "subset_manifest", "tf_bundle", "tf_index", "tf_object_graph", "tf_state"]
