"""Where a layout conversion's tensors go: one function per target layout, each taking the output
path and a stream of (name, array) whose names, shapes and dtypes are known up front.

:func:`write_safetensors` writes a ``.safetensors`` file as a stream: the header first (from the
planned shapes), then each array as it comes, into a temporary file renamed into place; then
reads the file back and checks every tensor's bytes against what was written (a file that
does not read back as written is removed, and the error raised).
:func:`write_tf_checkpoint` does the same for a TensorFlow name-based checkpoint prefix.

Example::

    >>> stream = TensorStream({"w": ((2, 3), "float32")}, iter([("w", np.zeros((2, 3), np.float32))]))
    >>> write_safetensors("/out/model.safetensors", stream, {"format": "pt"})
    '/out/model.safetensors'
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import zlib

import numpy as np

from ..errors import CorruptCheckpointError, UnsupportedDtypeError
from ..formats import atomic, safetensors_file, tf_bundle, tf_state

_CODES = {name: code for code, name in safetensors_file.DTYPES.items()}


@dataclasses.dataclass
class TensorStream:
    """``specs``: name -> (shape, dtype name), in order; ``tensors``: an iterator of (name, array) in that order."""

    specs: dict
    tensors: object

    def __iter__(self):
        return iter(self.tensors)


def write_safetensors(path, stream, metadata=None) -> str:
    """Write ``stream`` to the safetensors file ``path`` atomically, then verify it; returns ``path``."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(key): str(value) for key, value in metadata.items()}
    for name, (shape, dtype) in stream.specs.items():
        if dtype not in _CODES:
            raise UnsupportedDtypeError(f"safetensors files hold numbers only; cannot write '{name}' ({dtype})")
        size = nbytes(shape, dtype)
        header[name] = {"dtype": _CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    sums = {}
    with atomic.replacing(path) as sink:
        sink.write(len(encoded).to_bytes(8, "little"))
        sink.write(encoded)
        for name, array in _checked(stream):
            data = memoryview(np.ascontiguousarray(array)).cast("B")
            sums[name] = zlib.crc32(data)
            sink.write(data)
    try:
        found, _ = safetensors_file.specs(path)
        if {name: (tuple(shape), dtype) for name, (shape, dtype) in found.items()} != dict(stream.specs):
            raise CorruptCheckpointError(f"'{path}' does not hold the tensors just written to it")
        _verify_bytes(path, sums)
    except CorruptCheckpointError:
        os.remove(path)
        raise
    return path


def nbytes(shape, dtype) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype`` (a numpy dtype name, ml_dtypes' included)."""
    return math.prod(shape) * np.dtype(_numpy_dtype(dtype)).itemsize


def write_tf_checkpoint(prefix, stream) -> str:
    """Write ``stream`` as the TensorFlow name-based checkpoint ``prefix`` (named latest in its
    directory's state file), then read it back and verify it; returns ``prefix``."""
    sums = {}
    with tf_bundle.BundleWriter(prefix) as writer:
        for name, array in _checked(stream):
            sums[name] = zlib.crc32(memoryview(np.ascontiguousarray(array)).cast("B"))
            writer.add(name, array)
    try:
        with tf_bundle.BundleReader(prefix) as reader:
            _verify(prefix, sums, ((name, reader.read(name)) for name in stream.specs))
    except CorruptCheckpointError:
        for path in (tf_bundle.index_path(prefix), tf_bundle.data_path(prefix, 0, 1)):
            if os.path.exists(path):
                os.remove(path)
        raise
    tf_state.name_latest(prefix)
    return prefix


def _checked(stream):
    expected = iter(stream.specs.items())
    for name, array in stream:
        planned, (shape, dtype) = next(expected)
        if name != planned or tuple(array.shape) != tuple(shape) or array.dtype.name != dtype:
            raise CorruptCheckpointError(f"the stream gave '{name}' {list(array.shape)} {array.dtype.name} where "
                                         f"'{planned}' {list(shape)} {dtype} was planned")
        yield name, array


def _verify(path, sums, tensors):
    for name, array in tensors:
        if zlib.crc32(memoryview(np.ascontiguousarray(array)).cast("B")) != sums.get(name):
            raise CorruptCheckpointError(f"'{path}': tensor '{name}' reads back different from what was written")


def _verify_bytes(path, sums, chunk=16 << 20):
    """Each tensor's bytes in the file at ``path`` against ``sums``, read in chunks through the header's
    offsets: no array is made and nothing is mapped, so the check holds ``chunk`` bytes at a time."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
        for name, expected in sums.items():
            start, end = header[name]["data_offsets"]
            handle.seek(8 + length + start)
            crc, left = 0, end - start
            while left:
                data = handle.read(min(chunk, left))
                if not data:
                    break
                crc, left = zlib.crc32(data, crc), left - len(data)
            if left or crc != expected:
                raise CorruptCheckpointError(f"'{path}': tensor '{name}' reads back different from what was written")


def _numpy_dtype(name):
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return getattr(ml_dtypes, name)
    return name
