"""Row maps offline: a stream of ``(name, array)`` tensors in, the same stream with rows moved out.

The offline ``rewrite --rows`` needs no graph: :func:`resolve_rows` finds, in a checkpoint's
catalog, the tensors each ``rows`` key names (a tensor, or every tensor under a scope that is
not optimizer state) and their optimizer slots (by role, the catalog's ``slot_of``), and
checks every map against the tensor's shape before a value is read, all problems in one
:class:`~subsetsaver.errors.RowMapError`. :func:`map_rows` then moves the rows of each
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

from ..errors import RowMapError
from .rows import RowMap, apply_rows

_SHOWN = 5
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
