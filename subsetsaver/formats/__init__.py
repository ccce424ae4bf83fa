"""Checkpoint files and durable writes: the bottom floor, with no TensorFlow graph code.

- ``atomic``: the one place files are replaced: atomic and durable writes (temporary
  name beside the target, fsync, rename, fsync of the directory; ``tf.io.gfile`` for
  ``gs://`` and other schemes), temporary names that say who wrote them, and the
  removal of what killed writers left.
- ``npz``: the portable ``.npz`` checkpoint format (a package: format, writer, reader, ...).
- ``npz_state``: ``checkpoint_npz.json``, the state file of a directory of portable
  checkpoints (the latest file, the kept ones).
- ``subset_manifest``: the ``PREFIX.subset.json`` file a plan writes beside its checkpoints.
- ``tf_index``: a reader of a TensorFlow checkpoint's ``.index`` table, to check declared
  tensor sizes before TensorFlow allocates them.
- ``tf_state``: the ``checkpoint`` state file a TensorFlow Saver keeps (read and written
  without TensorFlow), and the checkpoints of a directory that no state file names.

These modules import only ``subsetsaver.errors``, ``subsetsaver.version`` and each other
(TensorFlow only lazily, for non-local paths). Other rooms import them by name
(``from subsetsaver.formats import npz``).

Example::

    >>> from subsetsaver.formats import npz, npz_state
    >>> npz.write('/ckpt/model-5.npz', {'dense/w': w}).names
    ('dense/w',)
    >>> npz_state.write_state('/ckpt/checkpoint_npz.json', 'model-5.npz', ['model-5.npz'])
"""

__all__ = ["atomic", "npz", "npz_state", "subset_manifest", "tf_index", "tf_state"]
