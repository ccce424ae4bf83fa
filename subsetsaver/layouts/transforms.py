"""Per-tensor transforms of a layout map: what a shape becomes, and what an array becomes.

Each transform is written in a map as a string or a one-key object:
``"transpose"`` (reverse the axes), ``{"transpose": [1, 0, 2]}``, ``{"reshape": [-1, 768]}``,
``{"squeeze": 0}``, ``{"expand_dims": 0}``, ``{"cast": "float16"}``, ``{"drop_first": 0}`` (leave out the
first entry along an axis: a classifier's background class 0). A rule's ``"concat"`` (several
sources into one) and ``"split"`` (one source into several equal parts, such as a fused QKV
kernel) take an axis. Shapes are worked out first, for the whole checkpoint, so that a shape
a transform cannot produce stops the conversion before anything is written.

Example::

    >>> steps = parse_transforms([{"squeeze": 0}, "transpose"])
    >>> output_spec(steps, (1, 4, 12), "float32")
    ((12, 4), 'float32')
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import LayoutMapError
from ..formats import memory

KINDS = ("transpose", "reshape", "squeeze", "expand_dims", "cast", "drop_first")


ShapeProblem = LayoutMapError
"""A transform that cannot apply to a shape; the engine words it again with the rule at fault."""


@dataclasses.dataclass(frozen=True)
class Transform:
    """One per-tensor step: ``kind`` (one of :data:`KINDS`) and its argument (or None)."""

    kind: str
    argument: object = None

    @property
    def text(self) -> str:
        return self.kind if self.argument is None else f"{self.kind}({_argument_text(self.argument)})"

    def spec(self, shape, dtype):
        """(shape, dtype) after this step; raises :class:`ShapeProblem` when it cannot apply."""
        shape = tuple(shape)
        if self.kind == "transpose":
            axes = tuple(reversed(range(len(shape)))) if self.argument is None else tuple(self.argument)
            if sorted(axes) != list(range(len(shape))):
                raise ShapeProblem(f"cannot transpose shape {list(shape)} by axes {list(axes)}")
            return tuple(shape[axis] for axis in axes), dtype
        if self.kind == "reshape":
            return _reshaped(shape, tuple(self.argument)), dtype
        if self.kind == "squeeze":
            axis = _axis(self.argument, len(shape))
            if axis is None or shape[axis] != 1:
                raise ShapeProblem(f"cannot squeeze axis {self.argument} of shape {list(shape)}: it is not 1")
            return shape[:axis] + shape[axis + 1:], dtype
        if self.kind == "expand_dims":
            axis = _axis(self.argument, len(shape) + 1)
            if axis is None:
                raise ShapeProblem(f"cannot add axis {self.argument} to shape {list(shape)}")
            return shape[:axis] + (1,) + shape[axis:], dtype
        if self.kind == "drop_first":
            axis = _axis(self.argument, len(shape))
            if axis is None or not shape[axis]:
                raise ShapeProblem(f"cannot drop the first entry of axis {self.argument} of shape {list(shape)}")
            return shape[:axis] + (shape[axis] - 1,) + shape[axis + 1:], dtype
        return shape, str(self.argument)  # cast

    def apply(self, array):
        if self.kind == "transpose":
            return _transposed(array, self.argument)
        if self.kind == "reshape":
            return np.reshape(array, self.argument)
        if self.kind == "squeeze":
            return np.squeeze(array, axis=self.argument)
        if self.kind == "expand_dims":
            return np.expand_dims(array, self.argument)
        if self.kind == "drop_first":
            return np.ascontiguousarray(np.delete(array, 0, axis=self.argument))
        return array.astype(_numpy_dtype(self.argument))


_BANDED_UP_TO = 4096  # columns: a wider matrix is transposed faster by numpy's own copy
_LINE_BYTES = 64  # a cache line: one band of rows fills a line of each row of the result


def _transposed(array, axes):
    """``array`` with its axes permuted by ``axes`` (None: reversed), as a new C-ordered array. A matrix no
    wider than a few thousand columns is copied band by band (as many rows as fill a cache line of the
    result, all columns), in one numpy call that leaves the GIL free for the whole copy: 2-3x numpy's own
    transposing copy, and the threads fetching the next tensors are never made to wait for it. Its
    elements move as unsigned integers of their width: bit for bit, NaN payloads too. A wider matrix, any
    other permutation, an array not in C order and an array of objects (strings) are copied by numpy. The result is
    made in memory an earlier tensor let go of where one is idle (:func:`_new_array`).

    >>> _transposed(np.arange(6).reshape(2, 3), None).tolist()
    [[0, 3], [1, 4], [2, 5]]
    """
    array = np.asarray(array)
    if (array.ndim != 2 or axes not in (None, (1, 0)) or not 0 < array.shape[1] <= _BANDED_UP_TO
            or array.itemsize not in (1, 2, 4, 8) or array.dtype.hasobject or not array.flags.c_contiguous):
        permuted = np.transpose(array, axes)
        transposed = _new_array(permuted.shape, array.dtype)
        np.copyto(transposed, permuted)
        return transposed
    rows, columns = array.shape
    band = _LINE_BYTES // array.itemsize
    banded = rows - rows % band
    bits = np.dtype(f"u{array.itemsize}")
    source = array.view(bits)
    transposed = _new_array((columns, rows), array.dtype)
    target = transposed.view(bits)
    # [band, column, row in band], walked in that order: each band is read once, front to back
    np.positive(source[:banded].reshape(banded // band, band, columns).transpose(0, 2, 1),
                out=target[:, :banded].reshape(columns, banded // band, band).transpose(1, 0, 2))
    target[:, banded:] = source[banded:].T
    return transposed


def _new_array(shape, dtype):
    """An uninitialized C-ordered array of ``shape`` and ``dtype``; a large one in memory that an earlier tensor
    let go of, where one of about its size is idle (:func:`~subsetsaver.formats.memory.reused_bytes`). A
    conversion's tensors are read, made and written one after another: the memory of the one just written
    holds the next one's transpose, instead of memory the system must first clear (a 66 MB matrix took 74 ms
    to transpose into new memory here, and 40 ms into the memory of the one before).

    >>> _new_array((2, 3), np.dtype("float32")).shape
    (2, 3)
    """
    if dtype.hasobject:
        return np.empty(shape, dtype=dtype)
    return memory.reused_bytes(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)


def parse_transforms(items) -> tuple:
    """Transforms from a map's ``"transform"`` list; raises ``ValueError`` naming an unknown one."""
    found = []
    for item in items or ():
        if isinstance(item, str):
            kind, argument = item, None
        elif isinstance(item, dict) and len(item) == 1:
            (kind, argument), = item.items()
        else:
            raise ValueError(f"a transform is a name or a one-key object, not {item!r}")
        if kind not in KINDS:
            raise ValueError(f"unknown transform '{kind}' (known: {', '.join(KINDS)})")
        if kind in ("squeeze", "expand_dims", "drop_first") and type(argument) is not int:
            raise ValueError(f"'{kind}' takes an axis, e.g. {{\"{kind}\": 0}}")
        if kind == "reshape" and not _integers(argument):
            raise ValueError("'reshape' takes a list of sizes, one of them -1 at most, e.g. {\"reshape\": [-1, 64]}")
        if kind == "transpose" and argument is not None and not _integers(argument):
            raise ValueError("'transpose' takes a list of axes, or nothing to reverse them")
        if kind == "cast":
            _numpy_dtype(argument)
        found.append(Transform(kind, tuple(argument) if isinstance(argument, list) else argument))
    return tuple(found)


def output_spec(transforms, shape, dtype):
    """(shape, dtype) after every transform in turn."""
    for transform in transforms:
        shape, dtype = transform.spec(shape, dtype)
    return tuple(shape), dtype


def apply_all(transforms, array):
    for transform in transforms:
        array = transform.apply(array)
    return array


def concat_spec(specs, axis):
    """The (shape, dtype) of ``specs`` concatenated along ``axis``; :class:`ShapeProblem` if they differ elsewhere."""
    shapes = [tuple(shape) for shape, _ in specs]
    dtypes = {dtype for _, dtype in specs}
    rank = len(shapes[0])
    where = _axis(axis, rank)
    if where is None or any(len(shape) != rank for shape in shapes):
        raise ShapeProblem(f"cannot concatenate shapes {[list(s) for s in shapes]} along axis {axis}")
    if any(shape[:where] + shape[where + 1:] != shapes[0][:where] + shapes[0][where + 1:] for shape in shapes):
        raise ShapeProblem(f"cannot concatenate shapes {[list(s) for s in shapes]} along axis {axis}: "
                           "they differ on another axis")
    if len(dtypes) > 1:
        raise ShapeProblem(f"cannot concatenate dtypes {sorted(dtypes)}")
    size = sum(shape[where] for shape in shapes)
    return shapes[0][:where] + (size,) + shapes[0][where + 1:], specs[0][1]


def split_spec(shape, dtype, axis, parts):
    """The (shape, dtype) of each of ``parts`` equal pieces of ``shape`` along ``axis``."""
    shape = tuple(shape)
    where = _axis(axis, len(shape))
    if where is None or shape[where] % parts:
        raise ShapeProblem(f"cannot split shape {list(shape)} into {parts} equal parts along axis {axis}")
    return shape[:where] + (shape[where] // parts,) + shape[where + 1:], dtype


def _reshaped(shape, target):
    size = math.prod(shape)
    unknown = [index for index, dim in enumerate(target) if dim == -1]
    known = math.prod(dim for dim in target if dim != -1)
    if len(unknown) > 1 or any(dim < -1 for dim in target):
        raise ShapeProblem(f"cannot reshape to {list(target)}: at most one -1, no other negative size")
    if unknown:
        if known == 0 or size % known:
            raise ShapeProblem(f"cannot reshape shape {list(shape)} ({size} values) to {list(target)}")
        target = tuple(size // known if dim == -1 else dim for dim in target)
    elif known != size:
        raise ShapeProblem(f"cannot reshape shape {list(shape)} ({size} values) to {list(target)} ({known} values)")
    return target


def _axis(axis, rank):
    if not isinstance(axis, int) or not -rank <= axis < rank:
        return None
    return axis % rank


def _integers(argument) -> bool:
    return isinstance(argument, list) and all(type(item) is int for item in argument)


def _numpy_dtype(name):
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8 types with numpy)

        dtype = np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "fiub" and dtype.name != "bfloat16":
        raise ValueError(f"'cast' takes a numeric dtype name such as \"float16\", not {name!r:.40}")
    return dtype


def _argument_text(argument):
    return ",".join(str(a) for a in argument) if isinstance(argument, tuple) else str(argument)
