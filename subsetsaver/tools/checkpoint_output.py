"""Writing a new TensorFlow checkpoint from a stream of tensors: checked, verified, and named latest.

Every tool that writes a checkpoint (``rewrite``, ``average``) goes through here:
:func:`prepare` refuses an output that is a source, a directory or (without ``overwrite``)
an existing checkpoint, before anything is read; :func:`write_verified` writes the tensors
as they come (one in memory at a time), reads every one back against the checksum of the
bytes it was given, and then the ``checkpoint`` state file of the output's directory names
it, so ``latest_checkpoint`` and ``restore_or_initialize(sess, directory)`` find it.

Example::

    >>> prepare('serve/model', sources=['train/model-9000'])
    >>> write_verified('serve/model', iter([('w', np.zeros(3, np.float32))]))
    12
"""

from __future__ import annotations

import glob
import os

from ..errors import CorruptCheckpointError
from ..formats import tf_bundle, tf_state


def prepare(output, *, sources, overwrite=False) -> None:
    """Refuse ``output`` (a checkpoint prefix) when it is one of ``sources``, a directory, or exists
    and ``overwrite`` is False; create its directory."""
    output = os.fspath(output)
    for source in sources:
        if os.path.abspath(output) == os.path.abspath(os.fspath(source)):
            raise ValueError(f"output '{output}' is the source checkpoint '{source}'; write to a new prefix")
    if os.path.isdir(output):
        raise IsADirectoryError(f"output '{output}' is a directory; name a checkpoint prefix such as '{output}/model'")
    existing = sorted(glob.glob(glob.escape(output) + ".data-*")) + [
        path for path in (f"{output}.index",) if os.path.exists(path)]
    if existing and not overwrite:
        raise FileExistsError(f"checkpoint '{output}' already exists ({existing[0]}); pass overwrite=True (--force) to replace it")
    parent = os.path.dirname(output)
    if parent:
        os.makedirs(parent, exist_ok=True)


def write_verified(output, tensors) -> int:
    """Write ``tensors`` (an iterable of ``(name, array)``) as the checkpoint ``output``, verify every
    tensor, name it the latest of its directory; returns the bytes of the values."""
    output = os.fspath(output)
    written, nbytes = {}, 0
    with tf_bundle.BundleWriter(output) as writer:
        for name, array in tensors:
            writer.add(name, array)
            written[name] = (array.shape, array.dtype)
            nbytes += array.nbytes
            del array  # one tensor in memory at a time
    verify_written(output, written)
    tf_state.name_latest(output)
    return nbytes


def verify_written(output, expected, parts=()) -> None:
    """Re-read every tensor of the checkpoint ``output``, one at a time: its bytes must match the checksum
    the writer took of the source's bytes, and its shape and dtype ``expected`` (name -> (shape, dtype)).
    ``output`` must hold exactly those names and ``parts`` (tensors written as parts, not read whole).
    CorruptCheckpointError otherwise."""
    with tf_bundle.BundleReader(output) as written:
        names, wanted = set(written.names), set(expected) | set(parts)
        if names != wanted:
            raise CorruptCheckpointError(
                f"checkpoint '{output}' holds {sorted(names ^ wanted)[:5]} unexpectedly; it was not completed"
            )
        for name, (shape, dtype) in expected.items():
            value = written.read(name)  # CorruptCheckpointError if its bytes are not what was written
            if value.shape != tuple(shape) or value.dtype != dtype:
                raise CorruptCheckpointError(f"checkpoint '{output}': tensor {name} differs from the source")
            del value
