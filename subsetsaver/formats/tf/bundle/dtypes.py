"""TensorFlow's ``DataType`` enum (types.proto) and the numpy dtype of each type a bundle can hold.

Every fixed-width type is stored as its elements' little-endian bytes, one element after
another: the sub-byte types (int4, uint4, int2, uint2, float4_e2m1fn) take one byte each,
as ml_dtypes does. Quantized types (qint8, ...) read as their plain integer type, as
``tf.train.load_checkpoint(...).get_tensor`` gives them. Strings (and variants, serialized
C++ objects) have no fixed width. The names are TensorFlow's (``tf.as_dtype(enum).name``),
which for everything numpy or ml_dtypes knows are also numpy's.

Example::

    >>> by_enum(14).name, by_enum(14).itemsize, numpy_dtype(by_enum(14))
    ('bfloat16', 2, dtype(bfloat16))
    >>> for_numpy(np.dtype('float32')).enum
    1
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ....errors import UnsupportedDtypeError


@dataclasses.dataclass(frozen=True)
class DataType:
    """One ``DataType`` enum value: its TensorFlow name, its stored bytes per element (None:
    variable width) and the numpy dtype its values read as (None: no numpy equivalent)."""

    enum: int
    name: str
    itemsize: int | None
    numpy_name: str | None

    @property
    def fixed_width(self) -> bool:
        return self.itemsize is not None


_ML_DTYPES = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz",
              "float8_e5m2fnuz", "int4", "uint4", "int2", "uint2", "float4_e2m1fn")
DATA_TYPES = tuple(DataType(*row) for row in [
    (1, "float32", 4, "float32"),
    (2, "float64", 8, "float64"),
    (3, "int32", 4, "int32"),
    (4, "uint8", 1, "uint8"),
    (5, "int16", 2, "int16"),
    (6, "int8", 1, "int8"),
    (7, "string", None, "object"),
    (8, "complex64", 8, "complex64"),
    (9, "int64", 8, "int64"),
    (10, "bool", 1, "bool"),
    (11, "qint8", 1, "int8"),
    (12, "quint8", 1, "uint8"),
    (13, "qint32", 4, "int32"),
    (14, "bfloat16", 2, "bfloat16"),
    (15, "qint16", 2, "int16"),
    (16, "quint16", 2, "uint16"),
    (17, "uint16", 2, "uint16"),
    (18, "complex128", 16, "complex128"),
    (19, "float16", 2, "float16"),
    # 20 is DT_RESOURCE: a handle, never stored in a checkpoint
    (21, "variant", None, None),
    (22, "uint32", 4, "uint32"),
    (23, "uint64", 8, "uint64"),
    (24, "float8_e5m2", 1, "float8_e5m2"),
    (25, "float8_e4m3fn", 1, "float8_e4m3fn"),
    (26, "float8_e4m3fnuz", 1, "float8_e4m3fnuz"),
    (27, "float8_e4m3b11fnuz", 1, "float8_e4m3b11fnuz"),
    (28, "float8_e5m2fnuz", 1, "float8_e5m2fnuz"),
    (29, "int4", 1, "int4"),
    (30, "uint4", 1, "uint4"),
    (31, "int2", 1, "int2"),
    (32, "uint2", 1, "uint2"),
    (33, "float4_e2m1fn", 1, "float4_e2m1fn"),
])
_BY_ENUM = {data_type.enum: data_type for data_type in DATA_TYPES}
# numpy dtype name -> the type written for it (the plain types, not the quantized ones that read as them)
_FOR_NUMPY = {data_type.numpy_name: data_type for data_type in DATA_TYPES
              if data_type.numpy_name not in (None, "object") and not data_type.name.startswith("q")}
STRING = _BY_ENUM[7]


def by_enum(enum) -> DataType | None:
    """The :class:`DataType` of enum value ``enum``; None for values a bundle cannot hold."""
    return _BY_ENUM.get(enum)


def numpy_dtype(data_type) -> np.dtype:
    """The numpy dtype ``data_type``'s values read as (ml_dtypes' for bfloat16, float8, int4, ...)."""
    if data_type.numpy_name in _ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, data_type.numpy_name))
    if data_type.numpy_name is None:
        raise UnsupportedDtypeError(f"{data_type.name} tensors have no numpy equivalent")
    return np.dtype(data_type.numpy_name)


def for_numpy(dtype) -> DataType:
    """The :class:`DataType` written for arrays of numpy ``dtype``: bytes, str and object arrays
    are strings; UnsupportedDtypeError for dtypes TensorFlow has no type for."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return STRING
    found = _FOR_NUMPY.get(dtype.name) if dtype.fields is None else None
    if found is None:
        raise UnsupportedDtypeError(f"TensorFlow has no dtype for numpy arrays of {dtype}")
    return found
