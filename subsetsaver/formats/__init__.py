"""Checkpoint files: one package per format, the registry, and the one writer (no TensorFlow graph code).

Files are opened, listed, written and renamed only through :mod:`subsetsaver.storage`, the room below.

- ``registry``: every checkpoint format, found by path or by name; each is one package's entry
  behind the protocol of ``format_protocol`` (recognise a path, list its tensors, stream them
  out, write a stream).
- ``tf``: TensorFlow's files (tensor bundles, the object graph, MetaGraph files, the
  ``checkpoint`` state file), and the name-based and object-based formats.
- ``npz``: the portable ``.npz`` checkpoint format and the state file of its directories.
- ``safetensors``: safetensors files, for PyTorch and JAX, read and written by the project's
  own streaming code.
- ``keras_h5``: Keras 3's own ``.weights.h5`` (through h5py, imported on first use).
- ``wire``: what formats share at the wire level: CRC32C, the protocol-buffer wire format.
- ``memory``: aligned and recycled buffers for the tensors read and written.
- ``checkpoint_writer``: the one writer every writing command uses (checks the output, takes
  the directory's lock, streams, verifies, publishes, names the latest).
- ``publish``: putting a written checkpoint in place so that at every instant the old or the
  new one restores whole; the listing of a checkpoint prefix's files.
- ``progress``: the progress bar of a long file command (writes, ``diff``), shown on a terminal only.
- ``subset_manifest``: the ``PREFIX.subset.json`` file a plan writes beside its checkpoints.

These modules import only ``subsetsaver.storage``, ``subsetsaver.errors``, ``subsetsaver.version``
and each other (TensorFlow never). A module outside a format's package imports only that
package's public names (``from subsetsaver.formats.tf import bundle``).

Example::

    from subsetsaver.formats import npz
    npz.write('/ckpt/model-5.npz', {'dense/w': w}).names
    # ('dense/w',)
    npz.write_state('/ckpt/checkpoint_npz.json', 'model-5.npz', ['model-5.npz'])
"""

__all__ = ["checkpoint_writer", "format_protocol", "keras_h5", "memory", "npz", "progress", "publish", "registry",
           "safetensors", "subset_manifest", "tf", "wire"]
