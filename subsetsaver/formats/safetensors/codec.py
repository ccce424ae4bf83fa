"""safetensors files, for moving weights to PyTorch, JAX and other frameworks (no TensorFlow).

The layout is simple: an 8-byte little-endian header length, a JSON header (each tensor's
dtype, shape and ``data_offsets``, plus string ``__metadata__``), then the raw bytes. It is
read and written here rather than through the ``safetensors`` package because the package
writes from a dict held whole in memory and reads by mapping a local file: here a file is
written tensor by tensor (the header first, from the specs known in advance) and read
through the file layer, so a bucket's file costs its header and the tensors asked for. The
package reads what is written here (the tests prove it), and nothing here can run code.

Example::

    write('/out/model.safetensors', [('dense/w', w)], {'selector': 'trainable()'},
          specs=[('dense/w', w.shape, 'float32')])
    specs('/out/model.safetensors')
    # ({'dense/w': ((3, 4), 'float32')}, {'selector': 'trainable()'})
"""

from __future__ import annotations

import json
import math
import os
import re

from ... import bounded_json, storage
from ...errors import CheckpointNotFoundError, CorruptCheckpointError, InvalidNameError, UnsupportedDtypeError

# safetensors dtype codes -> numpy dtype names (bfloat16 and float8 through ml_dtypes)
DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16", "U32": "uint32",
          "I32": "int32", "U64": "uint64", "I64": "int64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
          "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
CODES = {name: code for code, name in DTYPES.items()}
ITEM_BYTES = {"bool": 1, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "uint32": 4, "int32": 4, "uint64": 8,
              "int64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8,
              "float8_e4m3fn": 1, "float8_e5m2": 1}
SUFFIX = ".safetensors"
MAX_HEADER_BYTES = 100 << 20  # the package's own limit
_INT64_MAX = (1 << 63) - 1
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def name_problem(name) -> str | None:
    """Why ``name`` cannot name a tensor of a safetensors file, or None."""
    if not isinstance(name, str) or not name:
        return "an empty name"
    if name == "__metadata__":
        return "the name the header keeps for metadata"
    if _CONTROL_CHARACTER.search(name):
        return "a control character"
    return None


def header(path):
    """``(tensors, metadata, data start)``: ``tensors`` maps each name to ``(shape, dtype name, begin, end)``
    (offsets into the data) in the order of the data; every field checked against the file's size."""
    path = os.fspath(path)
    try:
        with storage.open_reader(path) as reader:
            size = reader.size
            if size < 8:
                raise _corrupt(path, f"it has {size} bytes, fewer than a header")
            length = int.from_bytes(reader.read(0, 8), "little")
            if length > min(MAX_HEADER_BYTES, size - 8):
                raise _corrupt(path, f"its header declares {length:,} bytes, more than the file's {size:,} allow")
            raw = reader.read(8, length)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise CheckpointNotFoundError(f"no safetensors file at '{path}'", path=path) from None
    try:
        parsed = bounded_json.loads(raw, max_bytes=MAX_HEADER_BYTES)
    except ValueError as error:
        raise _corrupt(path, f"its header is not JSON ({str(error)[:100]})") from None
    if not isinstance(parsed, dict):
        raise _corrupt(path, "its header is not a JSON object")
    metadata = parsed.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _corrupt(path, "its __metadata__ is not a map of strings")
    tensors, start = {}, 8 + length
    for name, field in parsed.items():
        tensors[name] = _checked_field(path, name, field)
    expected = 0
    for name, (_shape, _dtype, begin, end) in sorted(tensors.items(), key=lambda item: item[1][2:]):
        if begin != expected:
            raise _corrupt(path, f"tensor '{_shown(name)}' starts at byte {begin} of the data, not {expected}: the "
                                 "tensors must fill the data without gaps or overlaps")
        expected = end
    if start + expected != size:
        raise _corrupt(path, f"its tensors hold {expected:,} bytes but the file has {size - start:,} after the header")
    ordered = dict(sorted(tensors.items(), key=lambda item: item[1][2:]))
    return ordered, metadata, start


def _checked_field(path, name, field):
    problem = name_problem(name)
    if problem:
        raise _corrupt(path, f"a tensor has {problem}")
    if not isinstance(field, dict) or set(field) != {"dtype", "shape", "data_offsets"}:
        raise _corrupt(path, f"tensor '{_shown(name)}' is not described by dtype, shape and data_offsets")
    code, shape, offsets = field["dtype"], field["shape"], field["data_offsets"]
    if code not in DTYPES:
        raise _corrupt(path, f"tensor '{_shown(name)}' has dtype {str(code)[:20]!r}, which subsetsaver does not read "
                             f"({', '.join(DTYPES)})")
    if (not isinstance(shape, list) or len(shape) > 64
            or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 62 for d in shape)):
        raise _corrupt(path, f"tensor '{_shown(name)}' has a shape that is not a list of at most 64 sizes")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and 0 <= o < 1 << 62 for o in offsets)
            or offsets[0] > offsets[1]):
        raise _corrupt(path, f"tensor '{_shown(name)}' has data_offsets that are not two ordered byte offsets")
    dtype = DTYPES[code]
    if math.prod(d for d in shape if d) * ITEM_BYTES[dtype] > _INT64_MAX:  # numpy counts them even beside a 0
        raise _corrupt(path, f"tensor '{_shown(name)}' declares the shape {shape}, which no numpy array can hold")
    if math.prod(shape) * ITEM_BYTES[dtype] != offsets[1] - offsets[0]:
        raise _corrupt(path, f"tensor '{_shown(name)}' {dtype} {shape} needs "
                             f"{math.prod(shape) * ITEM_BYTES[dtype]:,} bytes, but its offsets hold "
                             f"{offsets[1] - offsets[0]:,}")
    return tuple(shape), dtype, offsets[0], offsets[1]


def specs(path) -> tuple:
    """(``{name: (shape, dtype name)}`` in file order, string metadata) from the header alone."""
    tensors, metadata, _ = header(path)
    return {name: (shape, dtype) for name, (shape, dtype, _, _) in tensors.items()}, metadata


def stored_bytes(path) -> dict:
    """Name -> ``(offset, length)`` of each tensor's bytes in the file at ``path``, from the header alone."""
    tensors, _, start = header(path)
    return {name: (start + begin, end - begin) for name, (_, _, begin, end) in tensors.items()}


def read(path, names):
    """Yield ``(name, array)`` for ``names``, one tensor in memory at a time."""
    import numpy as np

    tensors, _, start = header(path)
    with storage.open_reader(path) as reader:
        for name in names:
            if name not in tensors:
                raise KeyError(f"'{path}' holds no tensor '{name}'")
            shape, dtype, begin, end = tensors[name]
            raw = reader.read_into(start + begin, np.empty(end - begin, dtype=np.uint8))
            if dtype == "bool" and raw.size and raw.max() > 1:  # numpy would keep the byte: a third truth value
                raise _corrupt(path, f"tensor '{_shown(name)}' holds a bool byte other than 0 and 1")
            yield name, raw.view(_numpy_dtype(dtype)).reshape(shape)
            del raw  # not kept while the next one is read


def write(path, tensors, metadata=None, *, specs) -> None:
    """Write ``tensors`` (an iterable of ``(name, array)``, in the order of ``specs``) to ``path``
    atomically, holding one at a time: ``specs`` (``(name, shape, dtype name)`` of each, known in
    advance) make the header, which comes first."""
    import numpy as np

    specs = [(name, tuple(int(d) for d in shape), str(dtype)) for name, shape, dtype in specs]
    fields, offset = {}, 0
    for name, shape, dtype in specs:
        problem = name_problem(name)
        if problem:
            raise InvalidNameError(f"cannot write tensor {_shown(name)!r} to a safetensors file: it has {problem}")
        if dtype not in CODES:
            raise UnsupportedDtypeError(f"safetensors files hold numbers only; cannot write '{name}' ({dtype}): "
                                        "leave it out of the selection")
        if name in fields:
            raise ValueError(f"tensor '{name}' is written twice; names must be unique")
        size = math.prod(shape) * ITEM_BYTES[dtype]
        fields[name] = {"dtype": CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps({"__metadata__": {str(k): str(v) for k, v in (metadata or {}).items()}, **fields},
                      separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the package writes it
    order = iter(specs)
    with storage.replacing(path) as sink:
        sink.write(len(text).to_bytes(8, "little") + text)
        for name, array in tensors:
            expected = next(order, None)
            array = np.asarray(array)
            if expected is None or expected[0] != name or tuple(array.shape) != expected[1] \
                    or array.dtype.name != expected[2]:
                raise ValueError(f"tensor '{name}' {array.dtype.name} {list(array.shape)} comes where the header "
                                 f"promised {expected and (expected[0], expected[2], list(expected[1]))}")
            raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            if array.dtype.byteorder == ">":
                raw = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"))).reshape(-1).view(np.uint8)
            sink.write(memoryview(raw))
            del array, raw
        if next(order, None) is not None:
            raise ValueError(f"'{path}': fewer tensors came than the header promised")


def _numpy_dtype(name):
    import numpy as np

    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _shown(name) -> str:
    return name if len(name) <= 80 else name[:77] + "..."


def _corrupt(path, problem) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"'{path}' is not a readable safetensors file: {problem}; convert it again from "
                                  "its source", path=path)
