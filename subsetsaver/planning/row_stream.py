"""Row maps offline: a stream of ``(name, array)`` tensors in, the same stream with rows moved out.

The offline ``rewrite --rows`` needs no graph: :func:`resolve_rows` finds, in a checkpoint's
catalog, the tensors each ``rows`` key names (a tensor, or every tensor under a scope that is
not optimizer state) and their optimizer slots (by role, the catalog's ``slot_of``), and
checks every map against the tensor's shape before a value is read, all problems in one
:class:`~subsetsaver.errors.RowMapError` (one line when there is one). :func:`map_rows` then moves the rows of each
tensor as it passes (new rows of a slot are zero), holding the old and the new tensor of one
variable at a time; :func:`parse_rows_option` reads the command line's ``NAME=OLD:NEW`` and
``NAME=keep:FILE``.

Example::

    mapped = resolve_rows(catalog, catalog.ordered_names, {'body/emb': RowMap.keep([2, 0])})
    dict(map_rows([('body/emb', np.arange(3.0))], mapped))['body/emb'].tolist()
    # [2.0, 0.0]
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import RowMapError
from .rows import RowMap, RowStats, apply_rows, fill_rows

_SHOWN = 5
_COPY_BYTES = 1 << 16  # bytes of rows copied from an old part into a new one at a time
_PATH_COLON = re.compile(r":(?!//)")  # a ':' that separates two files, not the one of 'gs://'


def resolve_rows(catalog, names, rows) -> dict:
    """Tensor name -> ``(RowMap, is a slot)`` for the ``rows`` rules over ``names`` of ``catalog``."""
    names = list(names)
    present = set(names)
    slots = catalog.role("slot")
    problems, mapped = [], {}
    for key, rowmap in dict(rows or {}).items():
        if not isinstance(rowmap, RowMap):
            problems.append(f"rows[{key!r}] is a {type(rowmap).__name__}, not an ss.RowMap")
            continue
        chosen = [key] if key in present else [n for n in names if n.startswith(key.rstrip("/") + "/") and n not in slots]
        if not chosen:
            problems.append(f"rows names {key}, which is neither a tensor that is kept nor a scope holding one")
        for name in chosen:
            if name not in mapped or name == key:
                mapped[name] = (rowmap, False)
    slot_of = catalog.roles.slot_of
    for name in names:
        primary = slot_of.get(name)
        if primary in mapped and name not in mapped and catalog.record(name).shape == catalog.record(primary).shape:
            mapped[name] = (mapped[primary][0], True)
    for name, (rowmap, slot) in list(mapped.items()):
        problem = rowmap.problem(catalog.record(name).shape)
        if problem is None:
            mapped[name] = (rowmap.along(rowmap.axis_for(old_shape=catalog.record(name).shape)), slot)
        if problem is None and rowmap.init == "variable" and not slot and rowmap.is_new.any():
            problem = "init='variable' needs the graph's initializer; offline, use init='zeros', 'mean' or 'normal'"
        if problem is not None:
            problems.append(f"{name}: {problem}")
    if len(problems) == 1:
        raise RowMapError(f"row map problem, found before anything was read: {problems[0]}")
    if problems:
        shown = problems[:_SHOWN] + ([f"... and {len(problems) - _SHOWN} more"] if len(problems) > _SHOWN else [])
        raise RowMapError(f"{len(problems)} problem{'s' if len(problems) > 1 else ''} with the row maps, found before "
                          "anything was read:\n" + "\n".join("  " + p for p in shown))
    return {name: mapped[name] for name in names if name in mapped}


def map_rows(tensors, mapped):
    """Yield ``(name, array)`` of ``tensors``, the rows of those ``mapped`` (see :func:`resolve_rows`) moved."""
    for name, array in tensors:
        if name in mapped:
            rowmap, slot = mapped[name]
            array = apply_rows(array, rowmap, slot=slot)
        yield name, array
        del array  # held here, the last tensor would stay in memory while the next one is read


def split_by_rows(old_shape, regions, rowmap) -> list | None:
    """``[(old start row, old stop row, region), ...]`` of the stored parts ``regions`` of a tensor of
    ``old_shape``, in row order, when the parts split it along the map's rows (axis 0) only: what
    :func:`map_rows_by_part` streams; None otherwise (read such a tensor whole).

    >>> split_by_rows((4, 2), [((2, 4), (0, 2)), ((0, 2), (0, 2))], RowMap.keep([3, 0], axis=0))
    [(0, 2, ((0, 2), (0, 2))), (2, 4, ((2, 4), (0, 2)))]
    """
    if len(regions) < 2 or rowmap.axis != 0 or not rowmap.new_rows:
        return None
    whole = tuple((0, n) for n in old_shape[1:])
    if any(tuple(region[1:]) != whole for region in regions):
        return None
    return sorted((region[0][0], region[0][1], tuple(region)) for region in regions)


def map_rows_by_part(old_shape, parts, read_part, rowmap, *, slot=False):
    """Yield ``(array, offset)`` for each part of the new tensor: as many parts as the old one has
    (rows split as ``fixed_size_partitioner`` splits them), each filled from the old parts its rows
    take, read one at a time with ``read_part(region)``. ``parts``: :func:`split_by_rows`.

    What is held: one new part and one old part (the one read last is kept while the next new part
    still needs it), and, for ``init='mean'`` or ``'normal'``, the new rows' fill. A new part whose
    rows come from far apart reads each old part they lie in (a shuffled vocabulary reads every old
    part once per new part: memory stays at two parts, the reading grows). The mean and
    standard deviation of the old rows are summed part by part first (a second read of each),
    in the blocks :func:`~subsetsaver.planning.rows.apply_rows` sums: the result is the same, bit for bit.

        parts = split_by_rows(reader.spec('emb').shape, reader.parts('emb'), rowmap)
        for array, offset in map_rows_by_part(shape, parts, lambda r: reader.read_part('emb', r), rowmap): ...
    """
    indices = rowmap.new_to_old
    added = np.flatnonzero(indices < 0)
    row_shape = tuple(old_shape[1:])
    stats, dtype = None, None
    if added.size and not slot and rowmap.init in ("mean", "normal"):
        stats = RowStats()
        for _start, _stop, region in parts:
            value = read_part(region)
            stats.add(value)
            del value
        stats = stats.result()
    fill = None
    count = len(parts) if len(parts) <= rowmap.new_rows else rowmap.new_rows
    bounds = np.cumsum([0] + [rowmap.new_rows // count + (1 if i < rowmap.new_rows % count else 0)
                              for i in range(count)])
    held = None  # (region, value) of the old part read last
    for begin, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        taken = indices[begin:end]
        new = None
        for start, stop, region in parts:
            inside = np.flatnonzero((taken >= start) & (taken < stop))
            if not inside.size:
                continue
            if held is None or held[0] != region:
                held = None  # let go of the last part before the next is read
                held = (region, read_part(region))
            if new is None:
                dtype = held[1].dtype
                new = np.empty((end - begin, *row_shape), dtype)
            step = max(1, _COPY_BYTES // max(1, new[0].nbytes))  # a small temporary, not a part's worth
            for at in range(0, inside.size, step):
                rows = inside[at:at + step]
                new[rows] = held[1][taken[rows] - start]
        if new is None:  # every row of this part is new: the dtype of any old part
            dtype = read_part(parts[0][2]).dtype if dtype is None else dtype
            new = np.empty((end - begin, *row_shape), dtype)
        fresh = np.flatnonzero(taken < 0)
        if fresh.size and (slot or rowmap.init == "zeros"):
            new[fresh] = 0
        elif fresh.size:
            if fill is None:  # every new row's fill, drawn once as apply_rows draws it
                fill = fill_rows(rowmap, stats, added.size, row_shape, new.dtype, slot=slot)
            new[fresh] = fill[np.searchsorted(added, fresh + begin)]
        yield new, (begin,) + (0,) * len(row_shape)
        del new


def parse_rows_option(text, init="mean", seed=None) -> tuple:
    """``'body/emb=old.txt:new.txt'`` -> ``('body/emb', RowMap.from_vocab(...))``; ``'NAME=keep:FILE'``
    keeps the old rows FILE lists (one index a line)."""
    name, equals, spec = text.partition("=")
    if not equals or not name or not spec:
        raise RowMapError(f"--rows {text!r} is not NAME=OLD_VOCAB:NEW_VOCAB or NAME=keep:FILE, "
                          "e.g. body/emb=old_vocab.txt:new_vocab.txt")
    if spec.startswith("keep:"):
        return name, RowMap.keep(spec[len("keep:"):])
    pieces = _PATH_COLON.split(spec)
    if len(pieces) != 2 or not all(pieces):
        raise RowMapError(f"--rows {text!r}: {spec!r} is not OLD_VOCAB:NEW_VOCAB (two files, one token a line)")
    return name, RowMap.from_vocab(pieces[0], pieces[1], init=init, seed=seed)
