"""safetensors files, for moving weights to PyTorch, JAX and other frameworks (no TensorFlow).

A thin adapter over the ``safetensors`` package's numpy API: its loader cannot run code
and its header (names, dtypes, shapes) is read without the data. Writes are atomic
(a temporary name beside the target, fsync, rename). String metadata carries what
subsetsaver knows: the selector, each tensor's roles, the source checkpoint.

Example::

    >>> write('/out/model.safetensors', {'dense/w': w}, {'selector': 'trainable()'})
    >>> specs('/out/model.safetensors')
    ({'dense/w': ((3, 4), 'float32')}, {'selector': 'trainable()'})
"""

from __future__ import annotations

import os

from ..errors import CheckpointNotFoundError, CorruptCheckpointError, UnsupportedDtypeError
from . import storage

# safetensors dtype codes -> numpy dtype names (bfloat16 and float8 through ml_dtypes)
DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
          "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
          "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
SUFFIX = ".safetensors"


def specs(path) -> tuple:
    """(``{name: (shape, dtype name)}`` in file order, string metadata) from the header alone."""
    with _opened(path) as handle:
        found = {}
        for name in handle.keys():
            part = handle.get_slice(name)
            code = part.get_dtype()
            if code not in DTYPES:
                raise CorruptCheckpointError(f"'{path}': tensor '{name}' has dtype {code}, which subsetsaver does "
                                             f"not read ({', '.join(DTYPES)})")
            found[name] = (tuple(int(d) for d in part.get_shape()), DTYPES[code])
        return found, dict(handle.metadata() or {})


def read(path, names):
    """Yield ``(name, array)`` for ``names``, one tensor in memory at a time."""
    with _opened(path) as handle:
        for name in names:
            try:
                yield name, handle.get_tensor(name)
            except Exception as error:  # SafetensorError and friends: the header promised bytes that are not there
                raise CorruptCheckpointError(f"cannot read tensor '{name}' of '{path}': {error}") from error


def write(path, arrays, metadata=None) -> str:
    """Write ``arrays`` (name -> numpy array) with string ``metadata`` to ``path`` atomically."""
    import numpy as np
    from safetensors.numpy import save_file

    names = {"bool": "BOOL", **{value: key for key, value in DTYPES.items()}}
    for name, array in arrays.items():
        if np.asarray(array).dtype.name not in names:
            raise UnsupportedDtypeError(
                f"safetensors files hold numbers only; cannot write '{name}' ({np.asarray(array).dtype}): leave it "
                "out of the selection")
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise CheckpointNotFoundError(f"cannot write '{path}': directory '{directory}' does not exist; create it first")
    temporary = storage.temporary_name(path)
    try:
        save_file({name: np.ascontiguousarray(array) for name, array in arrays.items()}, temporary,
                  metadata={str(key): str(value) for key, value in (metadata or {}).items()})
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    storage.fsync_directory(directory)
    return path


class _opened:
    """``safe_open`` with the library's errors: a missing file or a damaged header is named, not raised raw."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def __enter__(self):
        from safetensors import safe_open

        if not os.path.exists(self.path):
            raise CheckpointNotFoundError(f"no safetensors file at '{self.path}'")
        try:
            self._context = safe_open(self.path, framework="np")
            return self._context.__enter__()
        except Exception as error:  # SafetensorError: header too large, not JSON, offsets out of bounds, ...
            raise CorruptCheckpointError(f"'{self.path}' is not a readable safetensors file: {error}") from error

    def __exit__(self, *exc_info):
        return self._context.__exit__(*exc_info)
