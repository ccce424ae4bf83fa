"""Rewriting a checkpoint: rename, drop and cast its tensors, streamed and verified.

After a scope refactor or a framework upgrade the names in a checkpoint no longer match
the graph. :func:`rewrite` writes a new TensorFlow checkpoint with the tensors ``keep``
selects, renamed by ``remap`` rules (``{old: new}``, the planner's rules read forwards:
scopes end in ``/``, a name rule beats a scope rule, a rule that renames nothing or two
names sent to one is refused), and cast (``cast``: ``{selector: dtype}``, between float
types). Everything is checked before a file is written; then one tensor is held at a
time, every written tensor is read back against its checksum, and the directory's
``checkpoint`` state file names the result. ``dry_run`` returns the old -> new table and
writes nothing.

Example::

    report = rewrite('train/model-9000', 'new/model', remap={'model/': 'net/'},
                     cast={'trainable()': 'bfloat16'}, keep='~slots()')
    report.rows[0]
    # RewriteRow(old='model/conv/w', new='net/conv/w', shape=(5, 5, 1, 32), dtype='float32', new_dtype='bfloat16')
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os

from .. import catalog as catalog_module
from ..errors import CastRuleError
from ..formats import checkpoint_writer, registry
from ..formats.tf import bundle
from ..planning import map_rows, map_rows_by_part, renamed_names, resolve_rows, split_by_rows
from ..selectors import as_selector

FLOAT_TYPES = ("float16", "bfloat16", "float32", "float64")


def _numpy_float(name):
    """The numpy dtype of float type ``name``; ml_dtypes (bfloat16) is imported only when a cast needs it."""
    return next(bundle.dtypes.numpy_dtype(data_type) for data_type in bundle.dtypes.DATA_TYPES
                if data_type.name == name)


@dataclasses.dataclass(frozen=True)
class RewriteRow:
    """One tensor of the output: its ``old`` and ``new`` name, shape, old and new dtype."""

    old: str
    new: str
    shape: tuple
    dtype: str
    new_dtype: str


@dataclasses.dataclass(frozen=True)
class RewriteReport:
    """What :func:`rewrite` wrote (or, with ``dry_run``, would write): ``rows`` in the source's
    order, the ``dropped`` names, and the bytes of the written values."""

    source: str
    output: str
    rows: tuple
    dropped: tuple
    nbytes: int
    written: bool
    row_counts: tuple = ()  # (name, RowCounts) of each tensor whose rows ``rows`` moved
    row_axes: tuple = ()  # (name, the axis of its rows) of the same tensors


    @property
    def renamed(self) -> tuple:
        return tuple(row for row in self.rows if row.old != row.new)

    @property
    def cast(self) -> tuple:
        return tuple(row for row in self.rows if row.dtype != row.new_dtype)


def rewrite(checkpoint, output, *, keep=None, remap=None, cast=None, rows=None, dry_run=False, overwrite=False,
            to=None) -> RewriteReport:
    """Write the tensors of ``checkpoint`` that ``keep`` selects (None: all) to the new checkpoint
    ``output`` (a TensorFlow checkpoint unless ``to`` or its suffix names another format), renamed by
    ``remap``, cast by ``cast`` (``{selector: dtype}``), their rows moved by ``rows``
    (``{NAME_OR_SCOPE: ss.RowMap}``, slots alike: see :mod:`subsetsaver.planning.row_stream`)."""
    selector = as_selector(keep, "keep")
    source = catalog_module.source_path(checkpoint)
    output = os.fspath(output)
    output_format = registry.for_output(output, to)
    cat = catalog_module.file_catalog(source)
    kept = cat.in_order(selector.names(cat))
    new_names = renamed_names(kept, remap)
    new_dtypes = _cast_dtypes(cat, kept, cast)
    records = cat.records_by_name
    mapped = resolve_rows(cat, kept, rows)
    shapes = {name: mapped[name][0].new_shape(records[name].shape) if name in mapped else tuple(records[name].shape)
              for name in kept}
    row_counts = tuple((name, mapped[name][0].counts(records[name].shape[mapped[name][0].axis])) for name in mapped)
    row_axes = tuple((name, mapped[name][0].axis) for name in mapped)
    rows = tuple(RewriteRow(name, new_names[name], shapes[name], records[name].dtype,
                            new_dtypes.get(name, records[name].dtype)) for name in kept)
    kept_set = set(kept)
    dropped = tuple(name for name in cat.ordered_names if name not in kept_set)
    nbytes = sum(catalog_module.value_bytes(row.shape, row.new_dtype) for row in rows)
    if dry_run:
        return RewriteReport(source, output, rows, dropped, nbytes, written=False, row_counts=row_counts,
                             row_axes=row_axes)
    source_format = registry.format_of(source)
    reader = source_format.part_reader(source) if mapped and output_format.holds_parts else None
    with reader if reader is not None else contextlib.nullcontext():
        written = checkpoint_writer.write_checkpoint(
            output, _rewritten(source, rows, mapped, records, reader), checkpoint_format=output_format,
            sources=[source], overwrite=overwrite, specs=[(row.new, row.shape, row.new_dtype) for row in rows])
    return RewriteReport(source, output, rows, dropped, written.nbytes, written=True, row_counts=row_counts,
                         row_axes=row_axes)


def parse_cast(texts) -> dict:
    """``['trainable()=bfloat16', ...]`` -> ``{'trainable()': 'bfloat16'}`` (split at the last '=')."""
    rules = {}
    for text in texts:
        selector, equals, dtype = text.rpartition("=")
        if not equals or not selector.strip() or not dtype.strip():
            raise CastRuleError(f"cast {text!r} is not SELECTOR=DTYPE, e.g. \"trainable()=bfloat16\"", text)
        rules[selector.strip()] = dtype.strip()
    return rules


def _cast_dtypes(cat, kept, cast) -> dict:
    """name -> new dtype of every kept tensor a ``cast`` rule selects; float types only."""
    new_dtypes = {}
    kept_set = set(kept)
    for text, dtype in dict(cast or {}).items():
        rule = f"{text}={dtype}"
        if dtype not in FLOAT_TYPES:
            raise CastRuleError(f"cast to {dtype!r}: a checkpoint's tensors are cast between float types only "
                                f"({', '.join(FLOAT_TYPES)})", rule)
        chosen = [name for name in as_selector(text, "cast").names(cat) if name in kept_set]
        if not chosen:
            raise CastRuleError(f"cast {rule} selects no tensor that is kept; check the selector", rule)
        not_float = [name for name in chosen if cat.record(name).dtype not in FLOAT_TYPES]
        if not_float:
            raise CastRuleError(f"cast {rule} selects {', '.join(not_float[:5])} "
                                f"({cat.record(not_float[0]).dtype}), which is not a float tensor; "
                                f"leave it out, e.g. \"({text}) - name('{not_float[0]}')={dtype}\"", rule)
        new_dtypes.update(dict.fromkeys(chosen, dtype))
    return new_dtypes


def _rewritten(source, rows, mapped, records, reader=None):
    """Yield ``(new name, array)`` for ``rows``, reading one tensor at a time, its rows moved by
    ``mapped`` and cast; with a ``reader`` of the source's parts, a row-mapped tensor stored in
    parts along its rows is read and written part by part (``(new name, part, (shape, offset))``)."""
    casts = {row.old: _numpy_float(row.new_dtype) for row in rows if row.dtype != row.new_dtype}
    new_names = {row.old: row.new for row in rows}

    def cast(name, value):
        return value.astype(casts[name]) if name in casts else value

    def whole(batch):
        names = [row.old for row in batch]
        moved = {name: mapped[name] for name in names if name in mapped}
        values = reader.read_many(names) if reader is not None else catalog_module.read_tensors(source, names)
        for name, value in map_rows(values, moved):
            yield new_names[name], cast(name, value)
            del value

    batch = []
    for row in rows:
        old_shape = tuple(records[row.old].shape)
        parts = None
        if reader is not None and row.old in mapped:
            parts = split_by_rows(old_shape, reader.parts(row.old), mapped[row.old][0])
        if parts is None:
            batch.append(row)
            continue
        yield from whole(batch)
        batch = []
        rowmap, slot = mapped[row.old]
        for part, offset in map_rows_by_part(old_shape, parts, functools.partial(reader.read_part, row.old), rowmap,
                                             slot=slot):
            yield row.new, cast(row.old, part), (row.shape, offset)
            del part
    yield from whole(batch)
