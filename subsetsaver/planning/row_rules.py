"""A plan's ``rows=`` and one-to-many ``remap=`` rules: checked at plan time, decided per checkpoint.

``rows={VARIABLE_OR_SCOPE: RowMap}`` moves the rows of a variable (and of every variable the plan
saves under a scope), and of its optimizer slots, found by role (the catalog's ``slot_of``), not
by name: new slot rows are zero, the step and scalar optimizer state are restored as they are.
``remap={"shared/emb": ["encoder/emb", "decoder/emb"]}`` reads one checkpoint tensor into several
variables (their slots from ``shared/emb/...`` alike). Every rule that cannot apply (a map on a
variable the plan does not save, two tensors sent into one variable, a map on a scalar) is
reported at once, in one :class:`~subsetsaver.errors.RowMapError`, when the plan is built.

Such a variable is still saved under its own name. At restore time, per checkpoint, a variable
whose own tensor already has the graph's shape is restored as it is (a resume); otherwise it
reads its source tensor and, with a row map, gathers its rows. A map whose input cannot be told
from its result (a reordering that keeps the row count; an index map without ``old_rows`` that
could apply to the new shape) applies: resume such a run with a plan without ``rows``, or give
``from_indices`` its ``old_rows``. What each variable reads is
checked with the rest of the plan (a vocabulary of the wrong length is a ``rows`` problem among
the missing and reshaped ones), and everything is restored in one ``session.run`` by ops built
here, at plan time (:mod:`~subsetsaver.planning.restore_ops`).

Example::

    >>> rules = split_remap({"shared/emb": ["encoder/emb", "decoder/emb"], "old/": "new/"})
    >>> rules
    ({'old/': 'new/'}, {'shared/emb': ['encoder/emb', 'decoder/emb']})
"""

from __future__ import annotations

import dataclasses

from ..errors import RowMapError
from ..selectors import variable_name
from .reports import Problem
from .restore_ops import CheckpointRestoreOps, RowRestoreOps
from .rows import RowMap

_SHOWN = 5


def _told_apart(rowmap, shape) -> bool:
    """Whether a tensor of the graph's ``shape`` in the checkpoint is the map's result rather than its
    input: the map's old row count differs from its new one, or (unknown) the map cannot apply to it."""
    rows = shape[rowmap.axis]
    if rowmap.old_rows is not None:
        return rowmap.old_rows != rowmap.new_rows
    return int(rowmap.new_to_old.max(initial=-1)) >= rows


def split_remap(remap):
    """``(plain rules, one-to-many rules)`` of a plan's ``remap``: a list or tuple of targets makes a
    one-to-many rule (a list of one is a plain rule)."""
    plain, fanout = {}, {}
    for source, target in dict(remap or {}).items():
        if isinstance(target, (list, tuple)):
            if len(target) == 1:
                plain[source] = target[0]
            else:
                fanout[source] = list(target)
        else:
            plain[source] = target
    return plain, fanout


@dataclasses.dataclass(frozen=True)
class RowEntry:
    """A row-mapped variable: its ``name``, the checkpoint tensor it reads (``key``), its ``parts``,
    its ``rows`` map and whether it is a ``slot`` (new rows zero)."""

    name: str
    key: str
    parts: tuple
    rows: RowMap
    slot: bool


@dataclasses.dataclass(frozen=True)
class RowDecision:
    """For one checkpoint: ``expected`` entries for the plain comparison, ``problems`` of the
    row-mapped variables, ``plain`` (variable -> tensor read as it is), ``mapped`` (variables whose
    rows are gathered) and ``read`` (every tensor read)."""

    expected: list
    problems: list
    plain: dict
    mapped: tuple
    read: frozenset


class RowRules:
    """The ``rows`` and one-to-many ``fanout`` rules of ``plan``, checked now; :meth:`build` makes the ops."""

    def __init__(self, plan, rows, fanout):
        self.plan = plan
        saved = list(plan.saved_names)
        saved_set = set(saved)
        roles = plan.catalog.roles
        slots = set(roles.by_role.get("slot", ()))
        problems = []
        self.maps = {}  # variable -> (RowMap, is a slot)
        for key, rowmap in dict(rows or {}).items():
            text = key if isinstance(key, str) else variable_name(key)
            if not isinstance(rowmap, RowMap):
                problems.append(f"rows[{text!r}] is a {type(rowmap).__name__}, not an ss.RowMap")
                continue
            names = [text] if text in saved_set else [
                n for n in saved if n.startswith(text.rstrip("/") + "/") and n not in slots]
            if not names:
                problems.append(self._not_saved(text))
            for name in names:
                if name not in self.maps or text == name:
                    self.maps[name] = (rowmap, False)
        for name in saved:  # slots move with their variable, found by role
            primary = roles.slot_of.get(name)
            if primary in self.maps and name not in self.maps and plan.spec(name)[0] == plan.spec(primary)[0]:
                self.maps[name] = (self.maps[primary][0], True)
        for name, (rowmap, slot) in list(self.maps.items()):
            shape = plan.spec(name)[0]
            axis = rowmap.axis_for(new_shape=shape) if shape else None
            if not shape:
                problems.append(f"rows: {name} is a scalar, it has no rows to map")
            elif axis is None and rowmap.axis is None:
                problems.append(f"rows: no axis of {name} {list(shape)} has the {rowmap.new_rows:,} rows the map from "
                                f"{rowmap.source} makes, or several have; pass axis= to the RowMap")
            elif axis is None:
                problems.append(f"rows: axis {rowmap.axis} is out of range for {name} of shape {list(shape)}")
            elif shape[axis] is not None and shape[axis] != rowmap.new_rows:
                problems.append(f"rows: {name} has {shape[axis]:,} rows on axis {axis}, the map from "
                                f"{rowmap.source} makes {rowmap.new_rows:,}")
            else:
                self.maps[name] = (rowmap.along(axis), slot)
        self.sources = {}  # variable -> the tensor it reads when its own is not in the checkpoint
        readers = {}
        plain, _ = split_remap(plan.remap)
        for source, target in plain.items():
            if isinstance(source, str) and not source.endswith("/"):
                readers.setdefault(target if isinstance(target, str) else variable_name(target), []).append(source)
        for source, targets in fanout.items():
            for target in targets:
                target = target if isinstance(target, str) else variable_name(target)
                if target.endswith("/") or source.endswith("/"):
                    problems.append(f"remap {source!r}: {targets!r}: a rule into several variables names variables, "
                                    "not scopes")
                    break
                if target not in saved_set:
                    problems.append(self._not_saved(target, f"remap {source!r}"))
                readers.setdefault(target, []).append(source)
                self.sources[target] = source
        for target, sources in readers.items():
            if len(sources) > 1:
                problems.append(f"remap sends {len(sources)} tensors into {target} ({', '.join(map(repr, sources))}); "
                                "keep one rule for it")
        for name in saved:  # a fanned variable's slots read the source's slots
            primary = roles.slot_of.get(name)
            if primary in self.sources and name.startswith(primary + "/") and name not in self.sources:
                self.sources[name] = self.sources[primary] + name[len(primary):]
        if problems:
            shown = problems[:_SHOWN] + ([f"... and {len(problems) - _SHOWN} more"] if len(problems) > _SHOWN else [])
            raise RowMapError(f"{len(problems)} problem{'s' if len(problems) > 1 else ''} with the plan's rows/remap "
                              "rules, found before anything was built:\n" + "\n".join("  " + p for p in shown))
        self._plain_ops = self._row_ops = None

    def _not_saved(self, text, what="rows"):
        catalog = self.plan.catalog
        if text in catalog.all_names:
            return f"{what} names {text}, which the plan does not save (it initializes it); select it, or drop the rule"
        return f"{what} names {text}, which is neither a variable the plan saves nor a scope holding one"

    def build(self):
        """Every op a restore with these rules runs: fed-name restores for the plain variables and a
        gather per row-mapped one."""
        plan = self.plan
        self._plain_ops = CheckpointRestoreOps(plan.graph, {n: plan.catalog.variables([n]) for n in plan.saved_names},
                                               scope="subsetsaver_restore_rules", fed_names=True,
                                               together=[n for n in plan.saved_names if n not in self.maps])
        entries = [RowEntry(name, self.sources.get(name, plan.checkpoint_names[name]),
                            tuple(plan.catalog.variables([name])), rowmap, slot)
                   for name, (rowmap, slot) in self.maps.items()]
        self._row_ops = RowRestoreOps(plan.graph, entries, scope="subsetsaver_rows")

    def decide(self, contents) -> RowDecision:
        """What each saved variable reads from a checkpoint holding ``contents`` (key -> (shape, dtype))."""
        plan = self.plan
        expected, problems, plain, mapped, read = [], [], {}, [], set()
        for name in plan.saved_names:
            own = plan.checkpoint_names[name]
            shape, dtype = plan.spec(name)
            source = self.sources.get(name, own)
            found_own = contents.get(own)
            resumed = found_own is not None and tuple(found_own[0]) == tuple(shape)
            rowmap = self.maps.get(name, (None,))[0]
            if rowmap is not None and resumed and name not in self.sources and not _told_apart(rowmap, shape):
                resumed = False  # the map could have made this tensor or apply to it: it applies
            if rowmap is None or resumed or source not in contents:
                key = own if (resumed or found_own is not None or name not in self.sources) else source
                expected.append((name, key, shape, dtype))
                plain[name] = key
                read.add(key)
                continue
            read.add(source)
            found_shape, found_dtype = contents[source]
            problem = self._row_problem(name, source, shape, dtype, found_shape, found_dtype, rowmap)
            if problem is None:
                mapped.append(name)
            else:
                problems.append(problem)
        return RowDecision(expected, problems, plain, tuple(mapped), frozenset(read))

    @staticmethod
    def _row_problem(name, key, shape, dtype, found_shape, found_dtype, rowmap):
        found_shape = tuple(found_shape)
        if found_dtype != dtype:
            return Problem("dtype", name, key, shape, dtype, found_shape, found_dtype)
        axis = rowmap.axis % len(shape)
        if len(found_shape) != len(shape) or any(a != b for d, (a, b) in enumerate(zip(shape, found_shape))
                                                 if d != axis and a is not None):
            return Problem("shape", name, key, shape, dtype, found_shape, found_dtype,
                           detail=f"only axis {axis} (rows) may differ")
        text = rowmap.problem(found_shape, shape)
        if text is None:
            return None
        return Problem("rows", name, key, shape, dtype, found_shape, found_dtype, detail=text)

    def restore(self, sess, prefix, decision, skip=()):
        """Restore every saved variable but ``skip`` from ``prefix`` in one ``session.run``."""
        plain = [name for name in decision.plain if name not in skip]
        mapped = [name for name in decision.mapped if name not in skip]
        fetches, feeds = self._plain_ops.fetches(prefix, plain, decision.plain)
        row_fetches, row_feeds = self._row_ops.fetches(prefix, mapped)
        if fetches or row_fetches:
            sess.run(fetches + row_fetches, {**feeds, **row_feeds})
