"""Comparing two checkpoints tensor by tensor, with totals per scope and per role.

Either side is a checkpoint file of any format the catalog reads (a TensorFlow checkpoint
prefix or directory, ``.npz``, ``.safetensors``) or a live ``tf.compat.v1.Session``
(its graph's variables, fetched in bounded groups). Each tensor is one of:

* ``equal``: the same values (NaN where the other has NaN);
* ``close``: different values, all within ``atol + rtol * |b|``;
* ``changed``: some element beyond the tolerances, with the largest absolute difference,
  the relative L2 distance ``|a - b| / |a|`` and the fraction of elements beyond them;
* ``only_a`` / ``only_b``: held by one side only;
* ``shape`` / ``dtype``: the two disagree on it (values not compared).

``remap`` renames A's tensors (``{old: new}`` rules, as ``rewrite`` reads them) before
pairing them with B's. Two local TensorFlow checkpoints are compared in 1 MiB pieces read
into reused buffers, each side verified against its checksums: pieces of equal bytes
cost one comparison, only differing ones are measured. Other sources give one tensor of
each side at a time. Differences are taken in chunks, never as float64 copies of whole tensors.

Example::

    report = diff('pretrained/model', 'finetuned/model-900', keep="scope('backbone')")
    report.different, report.counts()
    # (False, {'equal': 96})
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import threading

import numpy as np

from .. import catalog as catalog_module
from ..errors import EmptySelectionError
from ..formats import progress as progress_bars
from ..formats import registry
from ..planning import joined, layout_of, renamed_names
from ..selectors import as_selector

STATUSES = ("equal", "close", "changed", "only_a", "only_b", "shape", "dtype")
DIFFERENT = frozenset({"changed", "only_a", "only_b", "shape", "dtype"})
_CHUNK = 1 << 18  # elements measured at a time (a float32 piece): fewer calls, the float64 copies in the last-level cache
_PIECE_BYTES = 1 << 20  # bytes read and compared at a time: a piece of each side stays in the processor's cache
_DOT = 8192  # elements a dot product takes: OpenBLAS computes up to 10,000 on the calling thread
_BUFFERS = 3  # per side: one compared, one checksummed, one read
_SESSION_GROUP_BYTES = 64 << 20  # variables fetched by one session.run


@dataclasses.dataclass(frozen=True)
class TensorDiff:
    """How one tensor differs: ``name`` (B's name; A's after ``remap`` for a tensor only A holds),
    ``a_name`` (A's own name), ``status`` (one of :data:`STATUSES`), shapes and dtypes of each side
    (None where absent), and for compared values the largest absolute difference, the relative L2
    distance (None when A's norm is 0 and the values differ) and the fraction of elements beyond the
    tolerances."""

    name: str
    a_name: str | None
    status: str
    shape_a: tuple | None
    shape_b: tuple | None
    dtype_a: str | None
    dtype_b: str | None
    nbytes: int
    roles: tuple
    max_abs: float | None = None
    rel_l2: float | None = None
    changed_fraction: float | None = None


@dataclasses.dataclass(frozen=True)
class DiffReport:
    """Every tensor's :class:`TensorDiff`, B's order first, then what only A holds."""

    a: str
    b: str
    tensors: tuple
    atol: float
    rtol: float

    @property
    def different(self) -> bool:
        """True when a tensor changed beyond the tolerances, is held by one side only, or disagrees
        in shape or dtype."""
        return any(t.status in DIFFERENT for t in self.tensors)

    def counts(self, tensors=None) -> dict:
        """status -> number of tensors, for the statuses that occur, in :data:`STATUSES` order."""
        found = collections.Counter(t.status for t in (self.tensors if tensors is None else tensors))
        return {status: found[status] for status in STATUSES if found[status]}

    def by_scope(self) -> dict:
        """Top-level scope ('(root)' for names without one) -> its tensors' counts."""
        return self._grouped(lambda t: [t.name.split("/", 1)[0] if "/" in t.name else "(root)"])

    def by_role(self) -> dict:
        """Role ('trainable', 'slot', 'bn_stat', ...; '(none)') -> its tensors' counts."""
        return self._grouped(lambda t: t.roles or ("(none)",))

    def _grouped(self, keys_of) -> dict:
        groups = collections.OrderedDict()
        for tensor in self.tensors:
            for key in keys_of(tensor):
                groups.setdefault(key, []).append(tensor)
        return {key: self.counts(members) for key, members in groups.items()}


def diff(a, b, *, keep=None, remap=None, atol=0.0, rtol=0.0, progress=True) -> DiffReport:
    """Compare ``a`` and ``b`` (checkpoint paths or sessions) on the tensors ``keep`` selects on
    either side (None: all). ``progress``: a bar on a terminal once the comparison takes over two seconds."""
    if atol < 0 or rtol < 0 or math.isnan(atol) or math.isnan(rtol):
        raise ValueError(f"tolerances must be 0 or more, got atol={atol}, rtol={rtol}")
    side_a, side_b = _side(a), _side(b)
    selector = as_selector(keep, "keep")
    a_names = side_a.catalog.in_order(selector.names(side_a.catalog, allow_empty=True))
    b_names = side_b.catalog.in_order(selector.names(side_b.catalog, allow_empty=True))
    if not a_names and not b_names:
        raise EmptySelectionError(f"{selector!r} selects no tensor of '{side_a.label}' or '{side_b.label}'; "
                                  "check the selector with `subsetsaver select --checkpoint CKPT EXPR`")
    new_of_a = renamed_names(side_a.catalog.ordered_names, remap)
    a_of_new = {new: old for old, new in new_of_a.items()}
    b_set = set(b_names)
    wanted = list(b_names) + [new_of_a[name] for name in a_names if new_of_a[name] not in b_set]
    a_records, b_records = side_a.catalog.records_by_name, side_b.catalog.records_by_name
    found, compared = {}, []
    for name in wanted:
        a_record, b_record = a_records.get(a_of_new.get(name)), b_records.get(name)
        if a_record is None or b_record is None:
            record = a_record or b_record
            found[name] = _entry(name, a_record, b_record, "only_b" if a_record is None else "only_a", record)
        elif tuple(a_record.shape) != tuple(b_record.shape):
            found[name] = _entry(name, a_record, b_record, "shape", b_record)
        elif a_record.dtype != b_record.dtype:
            found[name] = _entry(name, a_record, b_record, "dtype", b_record)
        else:
            compared.append((name, a_record, b_record))
    total = sum(a_record.nbytes + b_record.nbytes for _, a_record, b_record in compared)
    with contextlib.ExitStack() as stack, \
            progress_bars.progress_bar(total, f"diff {os.path.basename(side_b.label) or side_b.label}", progress) as bar:
        streams = [side.streams() if compared else None for side in (side_a, side_b)]
        for opened in streams:
            if opened is not None:
                stack.enter_context(opened)
        if None in streams:
            measured = _whole_values(side_a, side_b, compared, atol, rtol)
        else:
            measured = _streamed_values(*streams, compared, atol, rtol)
        for (name, a_record, b_record), measurement in zip(compared, measured):
            found[name] = _entry(name, a_record, b_record, None, b_record, measurement)
            bar.update(a_record.nbytes + b_record.nbytes)
    return DiffReport(side_a.label, side_b.label, tuple(found[name] for name in wanted), float(atol), float(rtol))


def _whole_values(side_a, side_b, compared, atol, rtol):
    """The measurement of each pair ``compared``, read whole: one tensor of each side in memory at a time."""
    reader_a = side_a.read([a.name for _, a, _ in compared])
    reader_b = side_b.read([b.name for _, _, b in compared])
    for _ in compared:
        (_, value_a), (_, value_b) = next(reader_a), next(reader_b)
        yield _measure(value_a, value_b, atol, rtol)
        del value_a, value_b


def _streamed_values(streams_a, streams_b, compared, atol, rtol):
    """The measurement of each pair ``compared``, the plain tensors streamed through ``_BUFFERS`` small
    buffers a side (compared where they were read), any other read whole."""
    buffers = [[np.empty(_PIECE_BYTES, dtype=np.uint8) for _ in range(_BUFFERS)] for _ in range(2)]
    for _, a_record, b_record in compared:
        if streams_a.streamable(a_record.name) and streams_b.streamable(b_record.name):
            yield _measure_streamed(streams_a, a_record.name, streams_b, b_record.name, b_record.dtype, buffers,
                                    atol, rtol)
        else:
            value_a, value_b = streams_a.read(a_record.name), streams_b.read(b_record.name)
            yield _measure(value_a, value_b, atol, rtol)
            del value_a, value_b


@dataclasses.dataclass(frozen=True)
class _Side:
    label: str
    catalog: object
    read: object  # names -> iterator of (name, array)
    streams: object = lambda: None  # () -> the checkpoint's streams (CheckpointFormat.streams), or None


def _side(source) -> _Side:
    if hasattr(source, "run") and hasattr(source, "graph"):
        cat = catalog_module.load(source.graph)
        return _Side("session", cat, lambda names: _session_tensors(source, cat, names))
    path = catalog_module.source_path(source)
    return _Side(path, catalog_module.file_catalog(path), lambda names: catalog_module.read_tensors(path, names),
                 lambda: registry.format_of(path).streams(path))


def _entry(name, a_record, b_record, status, record, measured=None) -> TensorDiff:
    roles = tuple(sorted(record.roles - {"partitioned"})) + (("trainable",) if record.trainable else ())
    max_abs = rel_l2 = fraction = None
    if measured is not None:
        status, max_abs, rel_l2, fraction = measured
    return TensorDiff(
        name=name,
        a_name=a_record.name if a_record is not None else None,
        status=status,
        shape_a=tuple(a_record.shape) if a_record is not None else None,
        shape_b=tuple(b_record.shape) if b_record is not None else None,
        dtype_a=a_record.dtype if a_record is not None else None,
        dtype_b=b_record.dtype if b_record is not None else None,
        nbytes=record.nbytes,
        roles=roles,
        max_abs=max_abs,
        rel_l2=rel_l2,
        changed_fraction=fraction,
    )


def _measure(a, b, atol, rtol):
    """(status, max abs difference, relative L2, fraction beyond the tolerances) of two arrays of one
    shape and dtype, taken in pieces."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    measure, step = _Measure(a.dtype.kind, atol, rtol), max(1, _PIECE_BYTES // max(a.itemsize, 1))
    for start in range(0, a.size, step):
        measure.add(a[start:start + step], b[start:start + step])
    owed = measure.unreferenced if measure.differs else 0
    for start in range(0, owed, step):  # piece by piece, as a stream takes it: the same sums in the same order
        measure.add_reference(a[start:min(start + step, owed)])
    return measure.result()


def _measure_streamed(streams_a, name_a, streams_b, name_b, dtype, buffers, atol, rtol):
    """:func:`_measure` of tensor ``name_a`` of ``streams_a`` and ``name_b`` of ``streams_b`` (see
    :meth:`CheckpointFormat.streams`; ``dtype``: their dtype's name), read in pieces into ``buffers``
    (a list a side) and compared where they lie: both sides verified before the answer is given."""
    measure = None
    for x, y in zip(streams_a.pieces(name_a, buffers[0]), streams_b.pieces(name_b, buffers[1]), strict=True):
        measure = measure or _Measure(x.dtype.kind, atol, rtol)
        measure.add(x, y)  # strict: the side that ends second is checked too
    if measure is None:  # no elements
        return _Measure("b" if dtype == "bool" else "f", atol, rtol).result()
    owed, seen = measure.unreferenced if measure.differs else 0, 0
    if owed:  # equal bytes, then a difference: A's start again (verified again) for its norm
        for x in streams_a.pieces(name_a, buffers[0]):
            if seen < owed:
                measure.add_reference(x[:owed - seen])
            seen += x.size
    return measure.result()


class _Measure:
    """The statistics :func:`_measure` gives, of two flat arrays of one dtype fed in consecutive pieces.

    A piece whose bytes are the same on both sides costs one comparison of its bytes; the norm
    of A (for the relative L2 distance) is taken only once a difference is found, so the pieces of
    equal bytes before it are owed: ``unreferenced`` elements from the start, for
    :meth:`add_reference` to take before :meth:`result`.
    """

    def __init__(self, kind, atol, rtol):
        self.kind, self.atol, self.rtol = kind, atol, rtol  # kind: numpy's, of the arrays to come
        self.size = self.beyond = self.unreferenced = 0
        self.largest = self.squared = self.reference = 0.0
        self.differs = self._measured = False

    def add(self, a, b):
        self.size += a.size
        if self.kind in "OSUb":
            if self.kind != "b" or not _same_bytes(a, b):
                self.beyond += sum(int(np.count_nonzero(a[i:i + _CHUNK] != b[i:i + _CHUNK]))
                                   for i in range(0, a.size, _CHUNK))
            return
        if not self._measured and _same_bytes(a, b):  # its norm is owed until a difference shows
            self.unreferenced = self.size
            return
        self._measured = True
        with np.errstate(invalid="ignore", over="ignore"):
            for start in range(0, a.size, _CHUNK):
                self._add_chunk(a[start:start + _CHUNK], b[start:start + _CHUNK])

    def add_reference(self, a):
        """Take the norm of ``a``, the owed start of A."""
        as_type = np.complex128 if self.kind == "c" else np.float64
        with np.errstate(invalid="ignore", over="ignore"):
            for start in range(0, a.size, _CHUNK):
                x = a[start:start + _CHUNK].astype(as_type)
                self.reference += float(np.sum(np.abs(np.where(np.isnan(x), 0, x)) ** 2))
        self.unreferenced = max(0, self.unreferenced - a.size)

    def result(self):
        if self.kind in "OSUb":
            return ("changed" if self.beyond else "equal"), None, None, self.beyond / max(self.size, 1)
        if not self.differs:
            return "equal", 0.0, 0.0, 0.0
        rel_l2 = math.sqrt(self.squared) / math.sqrt(self.reference) if self.reference > 0 else None
        return ("changed" if self.beyond else "close"), self.largest, rel_l2, self.beyond / self.size

    def _add_chunk(self, native_x, native_y):
        if self.kind not in "iuc" and self._add_real_chunk(native_x, native_y):
            return
        as_type = np.complex128 if self.kind == "c" else np.float64
        x, y = native_x.astype(as_type), native_y.astype(as_type)
        nan_x = np.isnan(x)
        self.reference += float(np.sum(np.abs(np.where(nan_x, 0, x)) ** 2))
        # integers compare in their own type: float64 cannot tell 2**53 from 2**53 + 1
        same = (native_x == native_y) if self.kind in "iu" else (x == y) | (nan_x & np.isnan(y))
        if same.all():
            return
        self.differs = True
        gap = np.where(same, 0.0, _integer_gap(native_x, native_y) if self.kind in "iu" else np.abs(x - y))
        gap[np.isnan(gap)] = np.inf  # a NaN on one side only, or inf - inf
        self.largest = max(self.largest, float(gap.max()))
        self.squared += float(np.sum(gap ** 2))
        self.beyond += int(np.count_nonzero(~same & ~(gap <= self.atol + self.rtol * np.abs(y))))

    def _add_real_chunk(self, native_x, native_y) -> bool:
        """:meth:`_add_chunk` of real numbers in float64 scratch memory; False (nothing taken) where either
        side holds a NaN or both an infinity at one place, for the general way to measure."""
        x, gap, flags = _scratch(native_x.size)
        np.copyto(x, native_x, casting="unsafe")
        np.copyto(gap, native_y, casting="unsafe")  # two copies and a subtraction of one dtype beat a mixed one
        np.subtract(x, gap, out=gap)
        highest, lowest = (float(gap.max()), float(gap.min())) if gap.size else (0.0, 0.0)
        if math.isnan(highest):  # numpy's max is NaN wherever a NaN is
            return False
        self.reference += _sum_of_squares(x)
        if highest == lowest == 0:  # no NaN anywhere: the same values are gap == 0
            return True
        self.differs = True
        self.largest = max(self.largest, highest, -lowest)
        self.squared += _sum_of_squares(gap)
        if self.atol == 0 and self.rtol == 0:  # beyond: every element that changed
            self.beyond += int(np.count_nonzero(np.not_equal(gap, 0, out=flags)))
            return True
        np.abs(gap, out=gap)
        if self.rtol == 0 and math.isfinite(self.atol):  # beyond: changed, and not within atol + rtol * |y|
            self.beyond += int(np.count_nonzero(np.greater(gap, self.atol, out=flags)))
            return True
        bound = x  # A's values are taken: the scratch holds atol + rtol * |y| now
        np.copyto(bound, native_y, casting="unsafe")
        np.abs(bound, out=bound)
        np.multiply(bound, self.rtol, out=bound)
        np.add(bound, self.atol, out=bound)
        within = np.less_equal(gap, bound, out=flags)
        within |= gap == 0
        self.beyond += gap.size - int(np.count_nonzero(within))
        return True


_local = threading.local()
_dot_rows = getattr(np, "vecdot", None) or (lambda a, b: np.einsum("ij,ij->i", a, b))  # numpy 1.x has no vecdot


def _scratch(count):
    """Two float64 arrays and a bool array of ``count`` (at most _CHUNK) elements, this thread's own."""
    if not hasattr(_local, "scratch"):
        _local.scratch = [np.empty(_CHUNK) for _ in range(2)] + [np.empty(_CHUNK, dtype=bool)]
    return [array[:count] for array in _local.scratch]


def _sum_of_squares(values) -> float:
    """The sum of the squares of a flat float64 array: dot products of rows of _DOT elements, each short
    enough that the linear algebra library computes it on the calling thread (longer ones wake its own threads)."""
    rows = values.size // _DOT
    head, tail = values[:rows * _DOT].reshape(rows, _DOT), values[rows * _DOT:]
    return float(_dot_rows(head, head).sum()) + float(np.dot(tail, tail))


def _same_bytes(a, b) -> bool:
    """Whether two arrays of one size hold the same bytes in the same dtype (their values need no measuring)."""
    if a.dtype != b.dtype:  # a byte order of its own, say: equal bytes would not be equal values
        return False
    raw_a, raw_b = a.view(np.uint8), b.view(np.uint8)
    if raw_a.size % 8 == 0:  # eight bytes a comparison
        raw_a, raw_b = raw_a.view(np.uint64), raw_b.view(np.uint64)
    return np.array_equal(raw_a, raw_b)


def _integer_gap(x, y):
    """|x - y| of two integer arrays, exact in uint64 before it becomes float64 (no overflow)."""
    wide = np.int64 if x.dtype.kind == "i" else np.uint64
    larger, smaller = np.maximum(x, y).astype(wide), np.minimum(x, y).astype(wide)
    return (larger - smaller).view(np.uint64).astype(np.float64)


def _session_tensors(session, cat, names):
    """Yield ``(name, array)`` of the session's variables, a partitioned one joined from its parts,
    fetched by one ``session.run`` per group of about 64 MB."""
    group, group_bytes = [], 0
    for name in names:
        group.append(name)
        group_bytes += cat.record(name).nbytes
        if group_bytes >= _SESSION_GROUP_BYTES:
            yield from _fetched(session, cat, group)
            group, group_bytes = [], 0
    if group:
        yield from _fetched(session, cat, group)


def _fetched(session, cat, names):
    parts = {name: cat.variables([name]) for name in names}
    values = session.run({name: list(variables) for name, variables in parts.items()})
    for name in names:
        if len(parts[name]) == 1:
            yield name, values[name][0]
        else:
            yield name, joined(layout_of(name, parts[name]), values[name])
