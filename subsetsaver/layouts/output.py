"""Where a layout conversion's tensors go: one function per target layout, each taking the output
path and a stream of (name, array) whose names, shapes and dtypes are known up front.

Both write through the project's one writer (:func:`subsetsaver.formats.checkpoint_writer.
write_checkpoint`): the output checked, the directory locked, the tensors streamed one at a time
under a staging name, every one read back against the checksum of the bytes given, then
published atomically. :func:`write_safetensors` writes a ``.safetensors`` file (the header from
the planned shapes, then each array as it comes); :func:`write_tf_checkpoint` a TensorFlow
name-based checkpoint prefix, named the latest of its directory. :func:`largest_first` orders a
conversion's steps for writing: the largest tensors of each file first, so that once the last byte
has arrived only the smallest are left to transform, write and check.

Example::

    stream = TensorStream({"w": ((2, 3), "float32")}, iter([("w", np.zeros((2, 3), np.float32))]))
    write_safetensors("/out/model.safetensors", stream, {"format": "pt"})
    # '/out/model.safetensors'
"""

from __future__ import annotations

import dataclasses
import math

from .. import storage
from ..errors import CorruptCheckpointError
from ..formats import checkpoint_writer, registry, safetensors

SAFETENSORS_FILE = "model.safetensors"


@dataclasses.dataclass
class TensorStream:
    """``specs``: name -> (shape, dtype name), in order; ``tensors``: an iterator of (name, array) in that order."""

    specs: dict
    tensors: object

    def __iter__(self):
        return iter(self.tensors)


def write_safetensors(path, stream, metadata=None, *, overwrite=False) -> str:
    """Write ``stream`` to the safetensors file ``path`` through the one writer; returns ``path``."""
    _write(path, stream, registry.SAFETENSORS, metadata, overwrite)
    return str(path)


def write_huggingface_weights(out_dir, stream, metadata=None, *, max_shard_bytes=None, overwrite=False) -> tuple:
    """Write ``stream`` into ``out_dir`` as Hugging Face's loaders read it: ``model.safetensors``, or, past
    ``max_shard_bytes`` (default: transformers' ``save_pretrained``'s), shards and
    ``model.safetensors.index.json``, published all or none. Files of the other layout that a replaced
    output left are removed once the new one is in place (a loader takes ``model.safetensors`` first).
    Returns the files written."""
    limit = shard_limit(max_shard_bytes)
    single = storage.join(out_dir, SAFETENSORS_FILE)
    index = storage.join(out_dir, safetensors.INDEX_NAME)
    if sum(nbytes(shape, dtype) for shape, dtype in stream.specs.values()) > limit:
        written = _write(index, stream, safetensors.sharded(limit), metadata, overwrite)
        stale = registry.SAFETENSORS.files(single)
    else:
        written = _write(single, stream, registry.SAFETENSORS, metadata, overwrite)
        stale = safetensors.SHARDED_SAFETENSORS.files(index)
    for path in stale:
        storage.remove(path)
    return written


def shard_limit(max_shard_bytes=None) -> int:
    """The bytes past which a Hugging Face output is sharded: ``max_shard_bytes``, else ``save_pretrained``'s."""
    return max_shard_bytes or safetensors.SHARDED_SAFETENSORS.max_shard_bytes


def largest_first(plan, max_shard_bytes=None):
    """``plan`` (a :class:`~.engine.ConversionPlan`) with its steps in the order they are written: within each
    file, the steps of the largest tensors first, ties in the map's order. The files are the shards
    ``save_pretrained`` would cut at ``max_shard_bytes`` from the map's order (one file when None), and they
    stay so: the writer cuts greedily, and a shard that starts with its largest tensor ends where it did.
    ``plan`` as it is where a step's tensors fall in two shards.

    largest_first(plan).rows()[0][1]      # the embedding, say, where the map put it anywhere
    """
    specs = [(name, shape, dtype) for name, (shape, dtype) in plan.specs.items()]
    limit = max_shard_bytes or sum(nbytes(shape, dtype) for _, shape, dtype in specs) + 1
    file_of = {name: number for number, names in enumerate(safetensors.plan_shards(specs, limit)) for name in names}
    keys = []
    for position, step in enumerate(plan.steps):
        files = {file_of[target] for target in step.targets}
        if len(files) > 1:
            return plan
        keys.append((files.pop(), -max(nbytes(shape, dtype) for shape, dtype in step.specs), position))
    return dataclasses.replace(plan, steps=tuple(plan.steps[position] for _, _, position in sorted(keys)))


def huggingface_weights(directory) -> str | None:
    """The weights Hugging Face's loaders read in ``directory``: ``model.safetensors``, else the shards'
    index; None when it holds neither."""
    for name in (SAFETENSORS_FILE, safetensors.INDEX_NAME):
        path = storage.join(directory, name)
        if storage.exists(path):
            return path
    return None


def write_tf_checkpoint(prefix, stream, *, overwrite=False) -> str:
    """Write ``stream`` as the TensorFlow name-based checkpoint ``prefix`` (named latest in its
    directory's state file) through the one writer; returns ``prefix``."""
    _write(prefix, stream, registry.NAME, None, overwrite)
    return str(prefix)


def nbytes(shape, dtype) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype`` (a numpy dtype name, ml_dtypes' included)."""
    return math.prod(shape) * safetensors.ITEM_BYTES.get(dtype, 4)


def _write(path, stream, checkpoint_format, metadata, overwrite):
    specs = [(name, shape, dtype) for name, (shape, dtype) in stream.specs.items()]
    return checkpoint_writer.write_checkpoint(path, _checked(stream), checkpoint_format=checkpoint_format, specs=specs,
                                              metadata=metadata, overwrite=overwrite, progress=False).files


def _checked(stream):
    expected = iter(stream.specs.items())
    for name, array in stream:
        planned, (shape, dtype) = next(expected)
        if name != planned or tuple(array.shape) != tuple(shape) or array.dtype.name != dtype:
            raise CorruptCheckpointError(f"the stream gave '{name}' {list(array.shape)} {array.dtype.name} where "
                                         f"'{planned}' {list(shape)} {dtype} was planned")
        yield name, array
        del array  # gone before the next tensor is read and made: its memory can hold that one
