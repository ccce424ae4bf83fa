"""Row maps: which old row each new row of a variable comes from, and what fills the new ones.

A :class:`RowMap` says, for every row of the new variable, the row of the checkpoint's tensor it
takes (or -1: a new row). It is built from two vocabulary files (one token a line, as
``tf.compat.v1.train.VocabInfo`` reads them), from an index array, or from the list of old rows
to keep (700 of 1,000 classes). New rows of the variable are filled by ``init``: ``'variable'``
(the variable's own initializer, in a plan only), ``'zeros'``, ``'mean'`` (the mean of the old
rows) or ``'normal'`` (a seeded normal, by default as wide as the old rows' values). New rows of
its optimizer slots (Adam's m and v, momentum, accumulators) are always zero.

:func:`apply_rows` applies a map to numpy arrays (what the offline ``rewrite`` does); the plan
builds the same gathers as TensorFlow ops (:class:`~subsetsaver.planning.restore_ops.RowRestoreOps`).

Example::

    >>> rows = RowMap.from_vocab(['a', 'b', 'c'], ['c', 'a', 'z'], init='zeros')
    >>> rows.new_to_old.tolist(), rows.counts(3)
    ([2, 0, -1], RowCounts(kept=2, added=1, dropped=1))
    >>> apply_rows(np.array([[1.], [2.], [3.]], np.float32), rows).ravel().tolist()
    [3.0, 1.0, 0.0]
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import typing

import numpy as np

from ..errors import RowMapError

INITS = ("variable", "zeros", "mean", "normal")
_SHOWN = 3  # duplicate tokens or bad indices named in a message
STATS_BLOCK = 1 << 15  # values per float64 block when old rows are summed (256 KiB: a block stays in cache)


class RowCounts(typing.NamedTuple):
    """How many rows a map keeps (old rows that reach the new variable), adds and drops."""

    kept: int
    added: int
    dropped: int


@dataclasses.dataclass(frozen=True, eq=False)
class RowMap:
    """New row ``i`` takes old row ``new_to_old[i]``, or is new (-1) and filled by ``init``.

    ``old_rows``: the row count the old tensor must have (a vocabulary's length), or None (any
    count above the largest index). ``axis``: the axis of rows (``-1`` for a dense layer's classes,
    ``[units]`` bias and ``[inputs, units]`` kernel alike); None: found per variable by
    :meth:`axis_for` (the first axis for a map that knows its old row count, as a vocabulary's does;
    for an index map, the first axis unless only another one has the map's row count). ``seed``/``stddev``: for ``'normal'``
    (stddev None: the standard deviation of the old rows). ``source``: how it was made, for messages.
    """

    new_to_old: np.ndarray
    init: str = "zeros"
    old_rows: int | None = None
    axis: int | None = None
    seed: int | None = None
    stddev: float | None = None
    source: str = "an index array"

    def __post_init__(self):
        indices = np.asarray(self.new_to_old)
        if indices.ndim != 1 or not (indices.size == 0 or np.issubdtype(indices.dtype, np.integer)):
            raise RowMapError(f"a row map is a 1-D array of integer row indices, got {indices.dtype} "
                              f"{list(indices.shape)}; e.g. RowMap.from_indices([2, 0, -1])")
        if indices.dtype != np.int64 or indices.flags.writeable:  # another map's indices are shared, not copied
            indices = indices.astype(np.int64)
        below = np.flatnonzero(indices < -1)
        if below.size:
            raise RowMapError(f"row map from {self.source}: new row {below[0]} takes old row {indices[below[0]]}; "
                              "an index is an old row (0 or more) or -1 for a new row")
        if self.init not in INITS:
            raise RowMapError(f"init={self.init!r} is not one of {', '.join(map(repr, INITS))}")
        if self.init == "normal" and self.seed is None:
            raise RowMapError("init='normal' needs a seed, so that every restore fills the same rows: "
                              "e.g. RowMap.from_vocab(old, new, init='normal', seed=0)")
        indices.setflags(write=False)
        object.__setattr__(self, "new_to_old", indices)

    # -- building --------------------------------------------------------------------
    @classmethod
    def from_vocab(cls, old_vocab, new_vocab, init="mean", *, axis=None, seed=None, stddev=None) -> RowMap:
        """The rows of ``new_vocab`` from those of ``old_vocab`` (files, one token a line, or lists
        of tokens): a token of both keeps its row, a new token gets a new row, a token only the
        old vocabulary has is dropped.

        RowMap.from_vocab('old_vocab.txt', 'new_vocab.txt', init='mean').counts()
        # RowCounts(kept=30600, added=1236, dropped=118)
        """
        old_tokens, old_name = _tokens(old_vocab, "old")
        new_tokens, new_name = _tokens(new_vocab, "new")
        position = {token: row for row, token in enumerate(old_tokens)}
        indices = np.fromiter((position.get(token, -1) for token in new_tokens), np.int64, len(new_tokens))
        source = f"vocabularies {old_name} ({len(old_tokens):,} tokens) -> {new_name} ({len(new_tokens):,} tokens)"
        return cls(indices, init, old_rows=len(old_tokens), axis=axis, seed=seed, stddev=stddev, source=source)

    @classmethod
    def from_indices(cls, new_to_old, init="zeros", *, old_rows=None, axis=None, seed=None, stddev=None) -> RowMap:
        """New row ``i`` takes old row ``new_to_old[i]``; -1 makes a new row.

        >>> RowMap.from_indices([3, -1, 0], init='zeros').counts(4)
        RowCounts(kept=2, added=1, dropped=2)
        """
        return cls(np.asarray(new_to_old), init, old_rows=old_rows, axis=axis, seed=seed, stddev=stddev)

    @classmethod
    def keep(cls, kept_old_rows, *, old_rows=None, axis=None) -> RowMap:
        """Keep these old rows, in this order, and drop the others (a head trained on 700 of 1,000
        classes). ``kept_old_rows``: indices, or a file of one index a line.

        >>> RowMap.keep(range(0, 1000, 2), axis=-1).counts(1000)
        RowCounts(kept=500, added=0, dropped=500)
        """
        source = "a list of kept rows"
        if isinstance(kept_old_rows, (str, os.PathLike)):
            tokens, source = _tokens(kept_old_rows, "kept rows")
            try:
                kept_old_rows = [int(token) for token in tokens]
            except ValueError as error:
                raise RowMapError(f"{source} holds {str(error).split(': ', 1)[-1]}, not a row index; "
                                  "write one old row index a line") from None
        indices = np.asarray(list(kept_old_rows) if not isinstance(kept_old_rows, np.ndarray) else kept_old_rows)
        if indices.size and (indices < 0).any():
            raise RowMapError(f"RowMap.keep takes old row indices (0 or more), got {int(indices.min())}; "
                              "to add rows use RowMap.from_indices with -1")
        return cls(indices if indices.size else np.zeros(0, np.int64), "zeros", old_rows=old_rows, axis=axis,
                   source=source)

    # -- what it does ------------------------------------------------------------------
    @property
    def new_rows(self) -> int:
        return int(self.new_to_old.size)

    @property
    def is_new(self) -> np.ndarray:
        return self.new_to_old < 0

    def counts(self, old_rows=None) -> RowCounts:
        """Kept, added and dropped rows against an old tensor of ``old_rows`` rows (default: ``self.old_rows``)."""
        old_rows = self.old_rows if old_rows is None else old_rows
        taken = self.new_to_old[self.new_to_old >= 0]
        dropped = (old_rows - np.unique(taken).size) if old_rows is not None else 0
        return RowCounts(int(taken.size), int(self.new_rows - taken.size), int(dropped))

    def axis_for(self, *, new_shape=None, old_shape=None) -> int | None:
        """The axis of rows of a variable of ``new_shape`` (or, offline, a tensor of ``old_shape``): ``axis``
        when given; else 0 for a map that knows its old row count (a vocabulary of 4 tokens never moves
        the 4 columns of a [6, 4] embedding: its length is checked against the 6 rows); else 0 when it
        can hold the rows, else the one other axis that can; None if none can or several can.

        >>> RowMap.keep(range(700)).axis_for(new_shape=(64, 700)), RowMap.keep(range(700)).axis_for(new_shape=(700,))
        (1, 0)
        >>> RowMap.from_vocab(['a', 'b', 'c', 'd'], ['a', 'b']).axis_for(old_shape=(6, 4))
        0
        """
        shape = tuple(new_shape if new_shape is not None else old_shape)
        if self.axis is not None:
            return self.axis % len(shape) if shape and -len(shape) <= self.axis < len(shape) else None
        if self.old_rows is not None:
            return 0 if shape else None
        if new_shape is not None:
            fits = [d for d, n in enumerate(shape) if n == self.new_rows]
        else:
            largest = int(self.new_to_old.max(initial=-1))
            fits = [d for d, n in enumerate(shape) if n > largest and self.old_rows in (None, n)]
        if 0 in fits:
            return 0
        return fits[0] if len(fits) == 1 else None

    def along(self, axis) -> RowMap:
        """This map on ``axis``."""
        return dataclasses.replace(self, axis=axis)

    def problem(self, old_shape, new_shape=None) -> str | None:
        """Why this map cannot take an old tensor of ``old_shape`` into one of ``new_shape`` (None: it can)."""
        old_shape = tuple(old_shape)
        if not old_shape:
            return "a scalar has no rows"
        axis = self.axis_for(new_shape=new_shape, old_shape=old_shape)
        if axis is None:
            wanted = f"axis {self.axis}" if self.axis is not None else "which axis holds the rows"
            return f"{wanted} is not clear for a tensor of shape {list(old_shape)}; pass axis= to the RowMap"
        rows = old_shape[axis]
        if self.old_rows is not None and rows != self.old_rows:
            return (f"{self.source} expects {self.old_rows:,} old rows, the checkpoint's tensor has {rows:,} on axis "
                    f"{axis} (shape {list(old_shape)}); use the vocabulary the checkpoint was trained with")
        beyond = np.flatnonzero(self.new_to_old >= rows)
        if beyond.size:
            shown = ", ".join(f"new row {i} <- {self.new_to_old[i]}" for i in beyond[:_SHOWN])
            return f"{beyond.size} row{'s' if beyond.size > 1 else ''} of {self.source} past the {rows:,} old rows ({shown})"
        if new_shape is not None:
            expected = self.new_shape(old_shape)
            if tuple(new_shape) != expected:
                return (f"mapping {list(old_shape)} by {self.source} gives {list(expected)}, the graph's variable is "
                        f"{list(new_shape)}")
        return None

    def new_shape(self, old_shape) -> tuple:
        shape = list(old_shape)
        shape[self.axis_for(old_shape=old_shape)] = self.new_rows
        return tuple(shape)

    def describe(self, old_rows=None) -> str:
        kept, added, dropped = self.counts(old_rows)
        return f"{kept:,} rows kept, {added:,} added ({self.init}), {dropped:,} dropped"


def _tokens(source, what):
    """The lines of a vocabulary file (see :func:`_file_lines`), or a list as given."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        tokens, name = _file_lines(path, what), f"'{path}'"
    else:
        tokens, name = [str(token) for token in source], f"the {what} list"
    seen, repeated = set(), []
    for token in tokens:
        if token in seen:
            repeated.append(token)
        seen.add(token)
    if repeated and what != "kept rows":
        shown = ", ".join(repr(token) for token in repeated[:_SHOWN])
        raise RowMapError(f"{name} repeats {len(repeated)} token{'s' if len(repeated) > 1 else ''} ({shown}); "
                          "a vocabulary names each token once")
    return tokens, name


def _file_lines(path, what) -> list:
    """The lines of a UTF-8 file, as TensorFlow's vocabulary readers take them: a byte-order mark at the
    start left out (so a file saved with one and a file saved without give the same first token) and
    each line's ending, ``\\n`` or ``\\r\\n``, stripped; a file that is not UTF-8 is refused with the
    offset of its first bad byte."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise RowMapError(f"cannot read the {what} file '{path}': {error.strerror or error}") from None
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        raise RowMapError(f"the {what} file '{path}' is not UTF-8: byte {start + error.start:,} "
                          f"(0x{data[start + error.start]:02x}) {error.reason}; save it as UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# -- applying a map to arrays -------------------------------------------------------------

def fill_rows(rows, old_stats, count, row_shape, dtype, *, slot=False):
    """``count`` new rows of ``row_shape``: zeros for a slot or ``init='zeros'``; else from the old
    rows' ``old_stats`` (:func:`row_stats`)."""
    shape = (count, *row_shape)
    if slot or rows.init == "zeros":
        return np.zeros(shape, dtype)
    if rows.init == "mean":
        return np.broadcast_to(old_stats["mean"].astype(dtype), shape)
    if rows.init == "normal":
        stddev = old_stats["std"] if rows.stddev is None else rows.stddev
        return (np.random.default_rng(rows.seed).standard_normal(shape) * stddev).astype(dtype)
    raise RowMapError("init='variable' fills new rows with the variable's own initializer, which only a graph has; "
                      "offline, use init='zeros', 'mean' or 'normal'")


class RowStats:
    """The sum and sum of squares of old rows, added part by part (float64), for 'mean' and 'normal'.

    Rows are summed in blocks counted from the tensor's first row, however they arrive (whole, or
    part by part), so a tensor read in parts gives the very sums it gives read whole.
    """

    def __init__(self):
        self.count, self.total, self.squares = 0, None, 0.0
        self._pending = None  # float64 rows of a block that the next part completes

    def add(self, rows_first):
        """Add the next old rows (rows on the first axis), a few thousand at a time: a float64 copy
        of a whole embedding would double the memory the rows take."""
        step = max(1, STATS_BLOCK // max(1, int(np.prod(rows_first.shape[1:]))))
        first = 0
        if self._pending is not None:
            first = step - self._pending.shape[0]
            values = np.concatenate([self._pending, rows_first[:first].astype(np.float64)])
            self._pending = None
            if values.shape[0] < step:
                self._pending = values
                return
            self._sum(values)
        for start in range(first, rows_first.shape[0], step):
            values = rows_first[start:start + step].astype(np.float64)
            if values.shape[0] < step:
                self._pending = values
                return
            self._sum(values)

    def _sum(self, values):
        total = values.sum(axis=0)
        self.total = total if self.total is None else self.total + total
        self.squares += float(np.vdot(values, values))
        self.count += values.shape[0]

    def result(self) -> dict:
        if self._pending is not None:
            self._sum(self._pending)
            self._pending = None
        if not self.count:
            return {"mean": np.zeros(()), "std": 0.0}
        mean = self.total / self.count
        variance = self.squares / (self.count * max(1, mean.size)) - float(mean.mean()) ** 2
        return {"mean": mean, "std": float(np.sqrt(max(variance, 0.0)))}


def row_stats(old, axis=0) -> dict:
    """``{'mean': the mean row, 'std': the standard deviation of every value}`` of ``old``'s rows."""
    stats = RowStats()
    stats.add(np.moveaxis(np.asarray(old), axis, 0))
    return stats.result()


def apply_rows(old, rows, *, slot=False, stats=None) -> np.ndarray:
    """The new array: ``old``'s rows moved by ``rows``, new rows filled (zeros for a ``slot``).

    >>> apply_rows(np.arange(3.0), RowMap.keep([2, 0])).tolist()
    [2.0, 0.0]
    """
    old = np.asarray(old)
    problem = rows.problem(old.shape)
    if problem is not None:
        raise RowMapError(problem)
    axis = rows.axis_for(old_shape=old.shape)
    new = np.take(old, np.maximum(rows.new_to_old, 0), axis=axis) if old.shape[axis] else np.zeros(
        rows.new_shape(old.shape), old.dtype)
    added = np.flatnonzero(rows.is_new)
    if added.size:
        moved = np.moveaxis(new, axis, 0)  # a view: writing it writes ``new``
        if stats is None and not slot and rows.init in ("mean", "normal"):
            stats = row_stats(old, axis)
        moved[added] = fill_rows(rows, stats, added.size, moved.shape[1:], old.dtype, slot=slot)
    return new
