"""Checking a TensorFlow checkpoint's declared tensor sizes before anything is allocated.

TensorFlow allocates a tensor's declared shape before it compares that with the bytes
stored, so an ``.index`` that declares 8 GiB over a 2 MiB ``.data`` file exhausts memory
on restore instead of failing. :func:`check_declared_sizes` opens the checkpoint with
:class:`~subsetsaver.formats.tf.bundle.BundleReader`, which checks the ``.index`` (its
table, header and every entry: dtype, shape, shard, offset and size) and compares each
tensor's bytes with its ``.data`` file on disk, never reading a value, and without
TensorFlow for local files. :func:`subsetsaver.catalog.checkpoint_contents` makes the same
checks on every checkpoint it opens.

Example::

    check_declared_sizes('train/model-9000')   # None, or CorruptCheckpointError naming the tensor
"""

from __future__ import annotations

from ... import storage
from .bundle import BundleReader


def check_declared_sizes(prefix) -> None:
    """CorruptCheckpointError unless every tensor of checkpoint ``prefix`` fits the bytes stored for it.

    A tensor whose shape x dtype size is not the size of its entry, or whose entry ends past
    the end of its ``.data`` file, is truncated or tampered; so is an ``.index`` that fails its
    own checks (see :mod:`subsetsaver.formats.tf.bundle.index`). Tensors in a missing ``.data``
    file are left to the caller (it names the missing file).

    check_declared_sizes('train/model-9000')  # None, or CorruptCheckpointError
    """
    with BundleReader(prefix, require_data_files=False):
        pass


def file_bytes(path) -> bytes:
    """The bytes of the file at ``path`` (local, or through ``tf.io.gfile`` for other schemes)."""
    return storage.read_bytes(path)
