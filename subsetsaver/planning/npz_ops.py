"""The graph side of portable checkpoints: one ``session.run`` to save, one to restore.

:class:`NpzOps` holds, for one ordered set of variables, what a save fetches and what
a restore feeds (:class:`~subsetsaver.planning.restore_ops.FeedAssignOps`), built once
per graph and variable set and cached (:func:`ops_for`); :class:`RestoreProgram` is how
one set of names is read from one validated file and fed, reused by later restores.

Variables of one dtype and shape travel together: a restore feeds one ``[count,
*shape]`` buffer, a save fetches one ``stack`` of the small ones. A handful of feeds
and fetches instead of thousands keeps ``session.run``'s per-tensor cost out of the
way, and the graph has about as many nodes as a Saver's. Variables of 64 KiB and more
are fetched one by one: a stack would copy their bytes twice, and the per-tensor cost
is small next to theirs.

Example::

    >>> ops = ops_for(graph, [layout_of(name, catalog.variables([name])) for name in names])
    >>> arrays, _ = ops.fetch(sess)
"""

from __future__ import annotations

import threading
import weakref

from ..errors import RestoreOpsMissingError
from ..formats.npz import aligned_bytes, evict_oldest
from .npz_layout import joined, part_slices
from .restore_ops import FeedAssignOps, feed_groups

_STACK_BELOW = 64 << 10   # save: variables under this size are fetched in stacks; larger ones one by one
_GATHER_BELOW = 64 << 10  # restore: arrays under this size are gathered from the file in one pass per group


class NpzOps:
    """The save fetches and restore feeds of one ordered set of layouts, built once (see :func:`ops_for`).

    Partitioned variables, dtypes without Pack/Unpack kernels (int4, uint4) and shapes
    not fully known get one placeholder per part.
    """

    def __init__(self, graph, layouts):
        import tensorflow as tf

        self.layouts = {layout.name: layout for layout in layouts}
        grouped = feed_groups(layouts)
        self.feeds = FeedAssignOps(graph, layouts, grouped, scope="subsetsaver_npz/")
        self._fetches = []     # what a save fetches, in order
        self._takes = []       # per layout: (name, index in the fetched values, position in a stack or None)
        stacks = {}  # layout name -> (index of its stack in _fetches, position)
        with graph.as_default(), graph.control_dependencies(None), tf.compat.v1.name_scope("subsetsaver_npz/"):
            for group, members in zip(self.feeds.groups, grouped.values()):
                if len(members) > 1 and group["nbytes"] < _STACK_BELOW:
                    stacks.update((layout.name, (len(self._fetches), position))
                                  for position, layout in enumerate(members))
                    self._fetches.append(tf.stack([layout.parts[0].value() for layout in members]))
        for layout in layouts:
            if layout.name in stacks:
                self._takes.append((layout.name, *stacks[layout.name]))
            else:
                self._takes.append((layout.name, len(self._fetches), None))
                self._fetches.extend(layout.parts)  # the variable itself: its read op, no new op
        self._programs = {}  # names -> (manifest, RestoreProgram): repeated restores of one file

    # -- save ---------------------------------------------------------------------------
    def fetch(self, sess, extra_fetches=()):
        """Every layout's stored array (views into the fetched stacks) in ONE session.run."""
        values = sess.run(self._fetches + list(extra_fetches))
        arrays = {}
        for name, index, position in self._takes:
            if position is not None:
                arrays[name] = values[index][position]
                continue
            layout = self.layouts[name]
            arrays[name] = joined(layout, values[index:index + len(layout.parts)]) if layout.partitioned \
                else values[index]
        return arrays, values[len(self._fetches):]

    # -- restore --------------------------------------------------------------------------
    def restore(self, sess, archive, names):
        """Read, checksum and assign the arrays ``names`` of ``archive`` (an open ``subsetsaver.formats.npz.Archive``)
        in ONE session.run; nothing is assigned unless every array passed."""
        key = tuple(names)
        known = self._programs.get(key)
        if known is None or known[0] is not archive.manifest:
            known = self._programs[key] = (archive.manifest, RestoreProgram(self, archive, key))
            evict_oldest(self._programs, keep=4)
        program = known[1]
        feeds = program.load(archive)
        if program.target is not None:
            sess.run(program.target, feeds)


class RestoreProgram:
    """How one set of names is read from one validated file and fed: built once, reused by later restores.

    Each group of equally shaped variables fills one buffer: small arrays are gathered
    from the file in one pass (:meth:`subsetsaver.formats.npz.Archive.load_rows`), large ones read
    straight into their row. The rest (partitioned variables, ...) are loaded as arrays.
    """

    def __init__(self, ops, archive, names):
        feeds = ops.feeds
        rows = {}  # group index -> ([name], [position])
        self.singles = []
        for name in names:
            slot = feeds.slot.get(name)
            if slot is None:
                self.singles.append(name)
            else:
                chosen = rows.setdefault(slot[0], ([], []))
                chosen[0].append(name)
                chosen[1].append(slot[1])
        self.groups = []  # (group info, row plan or None, {name: row position} for direct reads)
        for group, (chosen, positions) in rows.items():
            info = feeds.groups[group]
            if info["nbytes"] < _GATHER_BELOW:
                self.groups.append((info, archive.plan_rows(chosen, positions, info["nbytes"]), None))
            else:
                self.groups.append((info, None, dict(zip(chosen, positions))))
        self.part_feeds = []  # (name, part index, placeholder)
        for name in self.singles:
            layout = ops.layouts[name]
            for index, part in enumerate(layout.parts):
                self.part_feeds.append((name, index, feeds.part_feeds[part.op.name]))
        if names and len(names) == len(ops.layouts):
            self.target = feeds.assign_all
        else:
            self.target = [op for name in names for op in feeds.assigns[name]] or None
        self._layouts = ops.layouts

    def load(self, archive) -> dict:
        """The feed dict: every array read and checked (raises before returning anything on any problem)."""
        feeds, into = {}, {}
        for info, plan, direct in self.groups:
            buffer = aligned_bytes(info["nbytes"] * info["count"])
            if plan is not None:
                archive.load_rows(plan, buffer.reshape(info["count"], info["nbytes"]))
            else:
                for name, position in direct.items():
                    into[name] = buffer[position * info["nbytes"]:(position + 1) * info["nbytes"]]
            feeds[info["feed"]] = buffer.view(info["dtype"]).reshape(info["shape"])
        arrays = archive.load(self.singles + list(into), into=into) if self.singles or into else {}
        for name, index, feed in self.part_feeds:
            layout = self._layouts[name]
            feeds[feed] = arrays[name][part_slices(layout, index)] if layout.partitioned else arrays[name]
        return feeds


# graph -> {((file name, id of first part), ...): NpzOps}; weak, so graphs can be collected.
_ops_by_graph = weakref.WeakKeyDictionary()


def ops_for(graph, layouts, *, build=True):
    """The cached NpzOps of this graph and variable set; built on first use unless the graph is finalized."""
    # File name and variable: a plan's remap may store variable 'b' under the name 'a'. The cached
    # NpzOps holds the variables, so their ids stay theirs.
    cache = _ops_by_graph.get(graph)
    known = cache.get(id(layouts)) if cache else None  # the same (cached) list again: skip the key
    if known is not None and known[0] is layouts:
        return known[1]
    key = tuple((layout.name, id(layout.parts[0])) for layout in layouts)
    with _build_lock:
        ops = _cached_ops(graph, layouts, key, build)
        if ops is not None and isinstance(layouts, list):
            _ops_by_graph[graph][id(layouts)] = (layouts, ops)
        return ops


_build_lock = threading.RLock()


def _cached_ops(graph, layouts, key, build):
    cache = _ops_by_graph.setdefault(graph, {})
    ops = cache.get(key)
    if ops is None and build:
        if graph.finalized:
            names = [layout.name for layout in layouts]
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise RestoreOpsMissingError(
                f"the graph is finalized and has no npz restore ops for these {len(names)} variable"
                f"{'s' if len(names) > 1 else ''} ({shown}); call ss.portable.prepare_npz(sel, graph) "
                "(or build ss.plan(sel, graph, backend='npz')) before graph.finalize()"
            )
        ops = cache[key] = NpzOps(graph, layouts)
    return ops


def _fetch_directly(sess, layouts, extra_fetches=()):
    """Without prepared ops (a finalized graph): fetch every part itself, still in ONE session.run."""
    fetches = [part for layout in layouts for part in layout.parts] + list(extra_fetches)
    values = sess.run(fetches)
    arrays, position = {}, 0
    for layout in layouts:
        parts = values[position:position + len(layout.parts)]
        position += len(layout.parts)
        arrays[layout.name] = joined(layout, parts) if layout.partitioned else parts[0]
    return arrays, values[position:]


def fetch(sess, layouts, extra_fetches=()):
    ops = ops_for(sess.graph, layouts, build=not sess.graph.finalized)
    if ops is None:
        return _fetch_directly(sess, layouts, extra_fetches)
    return ops.fetch(sess, extra_fetches)
