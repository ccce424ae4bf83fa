"""How a (possibly partitioned) variable maps to one array of a portable checkpoint.

A partitioned variable is stored whole, under its full name: its parts are joined
into one array on save and cut out of it on restore. TensorFlow gives some slots of
partitioned variables a full shape larger than their one part; such a variable stores
only the box its parts cover (its ``region``).

Example::

    layout = layout_of('emb', partitioned_parts)
    layout.shape, layout.region, layout.offsets
    # ((20, 8), None, ((0, 0), (10, 0)))
"""

from __future__ import annotations

import dataclasses
import math

from .. import tf_internals
from ..errors import UnsupportedDtypeError
from ..formats import npz
from .reports import compare_contents


@dataclasses.dataclass(frozen=True)
class Layout:
    """One logical variable: its parts and where each sits in the stored array.

    ``shape``: the logical (full) shape, None dims where unknown; ``region``: the stored
    array's (offset, shape) inside the full shape when the parts do not cover it (TF
    gives some slots of partitioned variables a full shape larger than their one part),
    else None; ``offsets``: each part's offset inside the stored array.
    """

    name: str
    parts: tuple
    dtype: str
    shape: tuple | None
    region: tuple | None = None
    offsets: tuple = ()

    @property
    def partitioned(self) -> bool:
        return bool(self.offsets)

    def info(self) -> dict:
        if self.region is None:
            return {}
        offset, _shape = self.region
        return {"full_shape": list(self.shape), "offset": list(offset)}

    def stored_shape(self):
        return self.region[1] if self.region is not None else self.shape

    def stored_nbytes(self) -> int:
        return math.prod(self.stored_shape()) * npz.numpy_dtype(self.dtype).itemsize


def layout_of(name, parts) -> Layout:
    head = parts[0]
    dtype = head.dtype.base_dtype.name
    info = tf_internals.slice_info(head)
    if info is None:
        shape = tuple(head.shape.as_list()) if head.shape.dims is not None else None
        return Layout(name, tuple(parts), dtype, shape)
    full = tuple(info.full_shape)
    slices = [(tuple(tf_internals.slice_info(p).var_offset), tuple(tf_internals.slice_info(p).var_shape))
              for p in parts]
    low = tuple(min(o[d] for o, _ in slices) for d in range(len(full)))
    high = tuple(max(o[d] + s[d] for o, s in slices) for d in range(len(full)))
    box = tuple(h - lo for h, lo in zip(high, low))
    covered = sum(math.prod(s) for _, s in slices)
    if covered != math.prod(box):
        raise ValueError(f"the parts of partitioned variable '{name}' do not tile a box; cannot store it whole")
    region = None if box == full else (low, box)
    offsets = tuple(tuple(o[d] - low[d] for d in range(len(full))) for o, _ in slices)
    return Layout(name, tuple(parts), dtype, full, region, offsets)


def part_slices(layout, index):
    offset = layout.offsets[index]
    shape = tf_internals.slice_info(layout.parts[index]).var_shape
    return tuple(slice(o, o + s) for o, s in zip(offset, shape))


def check_storable(layouts):
    unsupported = [lay for lay in layouts if lay.dtype not in npz.STORED_AS]
    if unsupported:
        listed = ", ".join(f"{lay.name} ({lay.dtype})" for lay in unsupported)
        raise UnsupportedDtypeError(
            f"portable checkpoints hold numeric variables only; cannot store {listed}: leave "
            f"{'them' if len(unsupported) > 1 else 'it'} out of the selection (e.g. sel - name('{unsupported[0].name}')) "
            "or use the 'tf' backend"
        )


def joined(layout, parts):
    import numpy as np

    whole = np.empty(layout.stored_shape(), dtype=parts[0].dtype)
    for index, value in enumerate(parts):
        whole[part_slices(layout, index)] = value
    return whole


def compare_with_manifest(layouts, manifest, keys) -> tuple:
    """(missing, mismatched) Problems between ``layouts`` (each stored as ``keys[layout.name]``)
    and a portable file's manifest: the one comparison (:func:`~subsetsaver.planning.reports.compare_contents`)."""
    contents = {entry.name: npz.entry_spec(entry) for entry in manifest.arrays}
    expected = [(layout.name, keys[layout.name], layout.shape, layout.dtype, layout.region) for layout in layouts]
    problems = compare_contents(expected, contents)
    return ([p for p in problems if p.kind == "missing"], [p for p in problems if p.kind != "missing"])
