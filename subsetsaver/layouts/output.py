"""Where a layout conversion's tensors go: one function per target layout, each taking the output
path and a stream of (name, array) whose names, shapes and dtypes are known up front.

Both write through the project's one writer (:func:`subsetsaver.formats.checkpoint_writer.
write_checkpoint`): the output checked, the directory locked, the tensors streamed one at a time
under a staging name, every one read back against the checksum of the bytes given, then
published atomically. :func:`write_safetensors` writes a ``.safetensors`` file (the header from
the planned shapes, then each array as it comes); :func:`write_tf_checkpoint` a TensorFlow
name-based checkpoint prefix, named the latest of its directory.

Example::

    stream = TensorStream({"w": ((2, 3), "float32")}, iter([("w", np.zeros((2, 3), np.float32))]))
    write_safetensors("/out/model.safetensors", stream, {"format": "pt"})
    # '/out/model.safetensors'
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import CorruptCheckpointError
from ..formats import checkpoint_writer, registry, safetensors


@dataclasses.dataclass
class TensorStream:
    """``specs``: name -> (shape, dtype name), in order; ``tensors``: an iterator of (name, array) in that order."""

    specs: dict
    tensors: object

    def __iter__(self):
        return iter(self.tensors)


def write_safetensors(path, stream, metadata=None, *, overwrite=False) -> str:
    """Write ``stream`` to the safetensors file ``path`` through the one writer; returns ``path``."""
    return _write(path, stream, registry.SAFETENSORS, metadata, overwrite)


def write_tf_checkpoint(prefix, stream, *, overwrite=False) -> str:
    """Write ``stream`` as the TensorFlow name-based checkpoint ``prefix`` (named latest in its
    directory's state file) through the one writer; returns ``prefix``."""
    return _write(prefix, stream, registry.NAME, None, overwrite)


def nbytes(shape, dtype) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype`` (a numpy dtype name, ml_dtypes' included)."""
    return math.prod(shape) * safetensors.ITEM_BYTES.get(dtype, 4)


def _write(path, stream, checkpoint_format, metadata, overwrite):
    specs = [(name, shape, dtype) for name, (shape, dtype) in stream.specs.items()]
    checkpoint_writer.write_checkpoint(path, _checked(stream), checkpoint_format=checkpoint_format, specs=specs,
                                       metadata=metadata, overwrite=overwrite, progress=False)
    return str(path)


def _checked(stream):
    expected = iter(stream.specs.items())
    for name, array in stream:
        planned, (shape, dtype) = next(expected)
        if name != planned or tuple(array.shape) != tuple(shape) or array.dtype.name != dtype:
            raise CorruptCheckpointError(f"the stream gave '{name}' {list(array.shape)} {array.dtype.name} where "
                                         f"'{planned}' {list(shape)} {dtype} was planned")
        yield name, array
