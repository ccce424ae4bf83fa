"""The set algebra behind a set picture: which variables lie in exactly which sets, and their sizes.

``set_regions`` splits every variable of a graph by the sets it belongs to (one
:class:`Region` per combination that holds any), and ``checkpoint_bytes`` says how big a
checkpoint of some of them is, so a picture's labels and caption are plain arithmetic
over the selectors, independent of how they are drawn.

Example::

    [(r.code, r.count) for r in set_regions({"t": ss.trainable(), "bn": ss.bn_stats()}, graph=g)]
    # [('00', 27), ('01', 4), ('10', 12)]
"""

from __future__ import annotations

import dataclasses

from .. import catalog as catalog_module
from ..catalog import GLOBAL_VARIABLES
from ..planning import SavedTensor, data_bytes, index_bytes
from ..selectors import Selector


def checkpoint_bytes(catalog, names) -> int:
    """Estimated bytes (``.data`` plus ``.index``) of a TensorFlow checkpoint holding ``names``.

    The one place the pictures size a checkpoint: ``sizes`` replays the file layout. A
    partitioned variable counts as one tensor (its ``.data`` bytes are the same).

    checkpoint_bytes(cat, ["conv_1/w", "conv_1/b"])   # 3328 bytes of values + the index
    # 3492
    """
    records = catalog.records_by_name
    tensors = [SavedTensor(name, records[name].dtype, tuple(records[name].shape)) for name in sorted(names)]
    return data_bytes(tensors) + index_bytes(tensors)


def full_saver_names(catalog) -> list:
    """What ``tf.compat.v1.train.Saver()`` writes: every global variable (all of a checkpoint's)."""
    global_names = catalog.collection(GLOBAL_VARIABLES)
    return list(catalog.ordered_names) if catalog.kind == "checkpoint" else catalog.in_order(global_names)


@dataclasses.dataclass(frozen=True)
class Region:
    """The variables in exactly the sets marked '1' in ``code`` (one character per set, in order).

    ``code`` of all zeros is the part of the frame outside every set.
    """

    code: str
    labels: tuple       # labels of the sets the region lies in
    names: tuple        # variables, in creation order
    nbytes: int
    saved_names: tuple  # the part of ``names`` that ``saved`` covers
    saved_bytes: int

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def saved_state(self) -> str:
        """'all', 'part' or 'none' of the region is saved."""
        if not self.saved_names:
            return "none"
        return "all" if len(self.saved_names) == len(self.names) else "part"

    @property
    def title(self) -> str:
        return region_title(self.labels)


def region_title(labels) -> str:
    """How a region is named: 'in none of the sets', 'bn only' or 'trainable ∩ bn'."""
    if not labels:
        return "in none of the sets"
    if len(labels) == 1:
        return f"{labels[0]} only"
    return " ∩ ".join(labels)


def set_regions(sets: dict, saved=None, graph=None) -> list:
    """The non-empty regions of ``sets`` (label -> selector) over every variable of ``graph``.

    [(r.code, r.count) for r in set_regions({"t": ss.trainable(), "bn": ss.bn_stats()}, graph=g)]
    # [('00', 27), ('01', 4), ('10', 12)]
    """
    catalog = catalog_module.load(graph)
    labels, chosen = _named_sets(sets, catalog)
    saved_set = frozenset(_as_selector("saved", saved).names(catalog, allow_empty=True)) if saved is not None else ()
    members = {}
    for name in catalog.ordered_names:
        code = "".join("1" if name in group else "0" for group in chosen)
        members.setdefault(code, []).append(name)
    regions = []
    for code in sorted(members):
        names = tuple(members[code])
        saved_names = tuple(n for n in names if n in saved_set)
        regions.append(
            Region(
                code=code,
                labels=tuple(label for label, bit in zip(labels, code) if bit == "1"),
                names=names,
                nbytes=catalog.nbytes(names),
                saved_names=saved_names,
                saved_bytes=catalog.nbytes(saved_names),
            )
        )
    return regions


def _named_sets(sets, catalog):
    if not isinstance(sets, dict) or not sets:
        raise ValueError("draw_sets needs a dict of at least one label -> selector, e.g. {'trainable': trainable()}")
    labels = tuple(str(label) for label in sets)
    chosen = [frozenset(_as_selector(label, sel).names(catalog, allow_empty=True)) for label, sel in sets.items()]
    return labels, chosen


def _as_selector(label, value):
    if not isinstance(value, Selector):
        raise TypeError(f"set '{label}' must be a selector such as trainable() or scope('conv_1'), "
                        f"got {type(value).__name__}: {value!r}")
    return value
