"""A Keras 3 ``.weights.h5`` file, read and written with h5py (imported on first use).

A tensor is named by its dataset's path (``layers/dense/vars/0``). Reading walks every group from
the root, at most :data:`MAX_DEPTH` deep and :data:`MAX_OBJECTS` objects in all, and refuses soft
and external links (an external link would open another file); a dataset must hold numbers (or
bfloat16, as Keras marks it), stored whole: its bytes on disk equal its shape times its item
size, so a crafted header cannot make a read allocate more than the file holds. Every refusal is
a :class:`~subsetsaver.errors.CorruptCheckpointError` naming the file; no h5py error escapes.

Writing puts each tensor at its path (``PATH/vars/INDEX``, the only form Keras reads), creating
the groups, with Keras's ``dtype`` mark on bfloat16 datasets.

Example::

    write('model.weights.h5', [('layers/dense/vars/0', w)])
    specs('model.weights.h5')
    # {'layers/dense/vars/0': ((3, 4), 'float32')}
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re

from ... import storage
from ...errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    InvalidNameError,
    InvalidOutputError,
    UnsupportedDtypeError,
)

SUFFIX = ".weights.h5"
MAX_DEPTH = 64
MAX_OBJECTS = 100_000
KERAS_PATH = re.compile(r"^(?:[^/]+/)*vars/(?:0|[1-9]\d*)$")
_NUMBER_KINDS = "biuf"


def specs(path) -> dict:
    """``{name: (shape, dtype name)}`` of every dataset, in the order of their paths (``vars/10`` after ``vars/9``)."""
    with _opened(path) as h5:
        return {name: (tuple(int(d) for d in dataset.shape), _dtype_name(path, name, dataset))
                for name, dataset in _datasets(path, h5)}


def layer_names(path) -> dict:
    """``{group path: name}``: the layer (or other object) name Keras records on each ``vars`` group,
    ``{'layers/conv2d': 'Conv1'}``."""
    with _opened(path) as h5:
        found = {}
        for name, _ in _datasets(path, h5):
            group = name.rpartition("/vars/")[0] if "/vars/" in name else ""
            if group not in found:
                found[group] = _attribute(path, h5[name].parent, "name")
        return {group: name for group, name in found.items() if isinstance(name, str)}


def read(path, names):
    """Yield ``(name, array)`` for each of ``names``, one in memory at a time."""
    import numpy as np

    with _opened(path) as h5:
        found = dict(_datasets(path, h5))
        for name in names:
            if name not in found:
                raise KeyError(f"'{path}' holds no tensor '{name}'")
            dataset = found[name]
            dtype = _dtype_name(path, name, dataset)
            array = np.empty(dataset.shape, dtype=dataset.dtype)
            try:
                if array.size:
                    dataset.read_direct(array)
            except (OSError, RuntimeError, ValueError, TypeError) as error:
                raise _corrupt(path, f"tensor '{name}' cannot be read ({_first_line(error)})") from None
            yield name, array.view(_numpy_dtype(dtype)) if dtype == "bfloat16" else array
            del array


def write(path, tensors) -> None:
    """Write ``tensors`` (``(name, array)`` pairs, names of Keras's form ``PATH/vars/INDEX``) as a weights file."""
    import numpy as np

    if not storage.is_local(path):
        raise InvalidOutputError(f"cannot write '{path}': Keras weights files are written to local paths; write "
                                 "it locally, then copy it", path=path)
    import h5py

    with h5py.File(storage.local_path(path), "w") as h5:
        for name, array in tensors:
            if not isinstance(name, str) or not KERAS_PATH.match(name):
                raise InvalidNameError(f"cannot write tensor {str(name)[:80]!r} to a Keras weights file: Keras reads "
                                       "tensors at PATH/vars/INDEX only; write a checkpoint of another format into "
                                       "one with --to keras --model MODULE:FUNCTION")
            array = np.asarray(array)
            dtype = array.dtype.name
            if dtype != "bfloat16" and array.dtype.kind not in _NUMBER_KINDS:
                raise UnsupportedDtypeError(f"Keras weights files hold numbers only; cannot write '{name}' ({dtype}): "
                                            "leave it out of the selection")
            dataset = h5.create_dataset(name, data=array)  # bfloat16 as h5py stores it: two opaque bytes
            if dtype == "bfloat16":
                dataset.attrs["dtype"] = "bfloat16"
            del array


# ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _opened(path):
    """The file as an ``h5py.File``, read-only; a file that is no HDF5 file is a CorruptCheckpointError."""
    import h5py

    path = os.fspath(path)
    with contextlib.ExitStack() as stack:
        try:
            if storage.is_local(path):
                source = storage.local_path(path)
            else:
                source = stack.enter_context(_RangedFile(storage.open_reader(path)))
            h5 = stack.enter_context(h5py.File(source, "r"))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise CheckpointNotFoundError(f"no Keras weights file at '{path}'", path=path) from None
        except (OSError, RuntimeError, ValueError) as error:
            raise _corrupt(path, f"it is not an HDF5 file ({_first_line(error)})") from None
        yield h5


def _datasets(path, h5):
    """``(name, dataset)`` of every dataset under the root, depth first; links and crafted shapes refused."""
    import h5py

    size = _file_size(path)
    found, stack, seen = [], [("", h5, 0)], 0
    while stack:
        prefix, group, depth = stack.pop()
        try:
            members = sorted(group.keys(), reverse=True)
            children = []
            for key in members:
                seen += 1
                if seen > MAX_OBJECTS:
                    raise _corrupt(path, f"it holds more than {MAX_OBJECTS:,} objects")
                link = group.get(key, getlink=True)
                name = prefix + key
                if not isinstance(link, h5py.HardLink):
                    raise _corrupt(path, f"'{_shown(name)}' is a {type(link).__name__}, which Keras never writes")
                children.append((name, group[key]))
        except CorruptCheckpointError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as error:
            raise _corrupt(path, f"group '{_shown(prefix) or '/'}' cannot be read ({_first_line(error)})") from None
        for name, member in children:
            if isinstance(member, h5py.Group):
                if depth + 1 > MAX_DEPTH:
                    raise _corrupt(path, f"its groups nest more than {MAX_DEPTH} deep")
                stack.append((name + "/", member, depth + 1))
            elif isinstance(member, h5py.Dataset):
                _check_dataset(path, name, member, size)
                found.append((name, member))
            else:
                raise _corrupt(path, f"'{_shown(name)}' is a {type(member).__name__}, not a group or dataset")
    return sorted(found, key=lambda item: _natural(item[0]))


def _check_dataset(path, name, dataset, file_size) -> None:
    shape = dataset.shape
    if shape is None or len(shape) > 64:
        raise _corrupt(path, f"tensor '{_shown(name)}' has no shape of at most 64 sizes")
    dtype = _dtype_name(path, name, dataset)
    nbytes = math.prod(shape) * (2 if dtype == "bfloat16" else dataset.dtype.itemsize)
    try:
        stored = dataset.id.get_storage_size()
    except (OSError, RuntimeError, ValueError) as error:
        raise _corrupt(path, f"tensor '{_shown(name)}' cannot be read ({_first_line(error)})") from None
    if nbytes and (stored != nbytes or nbytes > file_size):
        raise _corrupt(path, f"tensor '{_shown(name)}' {dtype} {list(shape)} needs {nbytes:,} bytes but the file "
                             f"stores {stored:,} for it")


def _dtype_name(path, name, dataset) -> str:
    dtype = dataset.dtype
    marked = _attribute(path, dataset, "dtype")
    if marked == "bfloat16" and dtype.itemsize == 2 and dtype.kind in "Vu":
        return "bfloat16"
    if dtype.kind not in _NUMBER_KINDS or dtype.byteorder == ">" or dtype.itemsize > 8:
        raise _corrupt(path, f"tensor '{_shown(name)}' holds {dtype}, not numbers Keras writes")
    return dtype.name


def _attribute(path, h5_object, key):
    """The string attribute ``key`` of a group or dataset, or None (absent, or not a string)."""
    try:
        value = h5_object.attrs.get(key)
    except (OSError, RuntimeError, ValueError, TypeError, KeyError) as error:
        raise _corrupt(path, f"'{_shown(h5_object.name or '/')}' has an unreadable attribute "
                             f"({_first_line(error)})") from None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _numpy_dtype(name):
    import ml_dtypes
    import numpy as np

    return np.dtype(getattr(ml_dtypes, name))


def _file_size(path) -> int:
    try:
        return storage.size(path)
    except OSError:
        return 0


def _natural(name):
    """Sort key: ``vars/10`` after ``vars/9``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _first_line(error) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


def _shown(name) -> str:
    return name if len(name) <= 80 else name[:77] + "..."


def _corrupt(path, problem) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"'{path}' is not a readable Keras weights file: {problem}; write it again from "
                                  "its source", path=path)


class _RangedFile(io.RawIOBase):
    """A file of the storage layer (``open_reader``) as the seekable binary file h5py reads."""

    def __init__(self, reader):
        super().__init__()
        self._reader, self._position = reader, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset, whence=io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._reader.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer) -> int:
        count = max(0, min(len(buffer), self._reader.size - self._position))
        data = self._reader.read(self._position, count) if count else b""
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()
