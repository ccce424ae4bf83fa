"""The graph side of portable checkpoints: a save streamed in runs, a restore in one ``session.run``.

:class:`SaveFetches` holds what a save fetches, in runs of about 32 MB (one
``session.run`` each, the next fetched in a worker while the current one is written),
built once per graph and variable set and never with restore ops (:func:`save_fetches_for`).
:class:`NpzOps` adds what a restore feeds (:class:`~subsetsaver.planning.restore_ops.FeedAssignOps`),
cached (:func:`ops_for`); :class:`RestoreProgram` is how one set of names is read from one
validated file and fed, reused by later restores.

Variables of one dtype and shape travel together: a restore feeds one ``[count,
*shape]`` buffer, a save fetches neighbouring small ones as one ``stack`` (written as one
zip block). A handful of feeds and fetches instead of thousands keeps ``session.run``'s
per-tensor cost out of the way, and the graph has about as many nodes as a Saver's.
Variables of 64 KiB and more are fetched one by one: a stack would copy their bytes
twice, and the per-tensor cost is small next to theirs.

Example::

    fetches = save_fetches_for(graph, [layout_of(name, catalog.variables([name])) for name in names])
    _, arrays = fetches.stream(sess)
"""

from __future__ import annotations

import threading
import weakref

from .. import tf_internals, workers
from ..errors import RestoreOpsMissingError
from ..formats import npz
from .npz_layout import joined, part_slices
from .restore_ops import FeedAssignOps, feed_groups

_STACK_BELOW = 64 << 10   # save: variables under this size are fetched in stacks; larger ones one by one
_RUN_BYTES = 32 << 20     # save: one session.run fetches about this much (a larger variable alone)
_OVERLAP_BYTES = 64 << 20  # save: what the next run may add to the largest while the current one is written
_GATHER_BELOW = 64 << 10  # restore: arrays under this size are gathered from the file in one pass per group


class SaveFetches:
    """What a save fetches for one ordered set of layouts, in runs of about 32 MB (a larger variable
    alone): one ``session.run`` per run, neighbouring small variables of one dtype and shape as one
    ``stack``.

    Built once per graph and variable set (:func:`save_fetches_for`); with ``stacks=False`` (a
    finalized graph) no op is built and every variable is fetched itself.
    """

    def __init__(self, graph, layouts, *, stacks=True):
        import tensorflow as tf

        self.layouts = {layout.name: layout for layout in layouts}
        self.array_info = {layout.name: info for layout in layouts if (info := layout.info())}  # for the manifest
        self.runs = []  # (fetches, takes, bytes); takes: (name, index in the fetched values, False) or
        #                 (names, index of their stack, True)
        with graph.as_default(), graph.control_dependencies(None), tf.compat.v1.name_scope("subsetsaver_npz/"):
            for members in _runs(layouts):
                self.runs.append(self._run(members, stacks))

    @staticmethod
    def _run(members, stacks):
        import tensorflow as tf

        stack_of = {}  # name -> (dtype, shape) of the stack it may join
        if stacks:
            for key, group in feed_groups(members).items():
                if _stored_bytes(group[0]) < _STACK_BELOW:
                    stack_of.update((layout.name, key) for layout in group)
        fetches, takes, index = [], [], 0
        while index < len(members):  # equal-shaped neighbours share a stack, so the order stays the layouts'
            key, end = stack_of.get(members[index].name), index + 1
            while key is not None and end < len(members) and stack_of.get(members[end].name) == key:
                end += 1
            if end - index > 1:
                group = members[index:end]
                takes.append((tuple(layout.name for layout in group), len(fetches), True))
                fetches.append(tf.stack([_read(layout.parts[0]) for layout in group]))
            else:
                takes.append((members[index].name, len(fetches), False))
                fetches.extend(members[index].parts)  # the variable itself: its read op, no new op
            index = end
        return fetches, takes, sum(_stored_bytes(layout) for layout in members)

    def stream(self, sess, extra_fetches=(), prepare=None, prepare_rows=None):
        """``(values of extra_fetches, iterator of every layout's stored array)``, in layout order.

        The first run is fetched now, with ``extra_fetches``; the iterator fetches the next run
        in a worker thread while the caller writes the current one, as far as a budget of the
        largest run plus 64 MB allows, so a save holds about two runs, never the whole set.
        ``prepare(name, array)``, if given, runs in the worker on each array (hashing it) and
        the iterator gives its results; ``prepare_rows(names, stack)``, if given, takes each
        stack of small variables whole instead.
        """
        prepare = prepare or (lambda name, array: (name, array))
        first = self.runs[0][0] if self.runs else []
        values = sess.run(first + list(extra_fetches))
        extra = values[len(first):]
        if not self.runs:
            return extra, iter(())
        prepared = (prepare, prepare_rows)
        return extra, self._streamed(sess, self._taken(0, values[:len(first)], prepared), prepared)

    def _taken(self, index, values, prepared) -> list:
        prepare, prepare_rows = prepared
        arrays = []
        for name, position, stacked in self.runs[index][1]:
            if not stacked:
                layout = self.layouts[name]
                array = joined(layout, values[position:position + len(layout.parts)]) if layout.partitioned \
                    else values[position]
                arrays.append(prepare(name, array))
            elif prepare_rows is None:
                arrays.extend(prepare(member, row) for member, row in zip(name, values[position]))
            else:
                arrays.append(prepare_rows(name, values[position]))
        return arrays

    def _streamed(self, sess, first, prepared):
        budget = _Budget(max(run[2] for run in self.runs) + _OVERLAP_BYTES)
        budget.take(self.runs[0][2])

        def fetched(index):
            if not budget.take(self.runs[index][2]):
                return None  # the save was abandoned
            return self._taken(index, sess.run(self.runs[index][0]), prepared)

        with workers.scoped_pool(1, "subsetsaver-fetch") as worker:
            try:
                upcoming = worker.submit(fetched, 1) if len(self.runs) > 1 else None
                current, first = first, None  # the argument would keep the first run alive to the end
                for index in range(len(self.runs)):
                    yield from current
                    current = None
                    budget.give(self.runs[index][2])
                    if upcoming is not None:
                        current = upcoming.result()
                        upcoming = worker.submit(fetched, index + 2) if index + 2 < len(self.runs) else None
            finally:
                budget.cancel()


class _Budget:
    """Bytes the arrays of a streamed save may hold at once; a run waits for its share."""

    def __init__(self, limit):
        self._limit, self._held, self._cancelled = limit, 0, False
        self._changed = threading.Condition()

    def take(self, nbytes) -> bool:
        with self._changed:
            self._changed.wait_for(lambda: self._cancelled or self._held == 0 or self._held + nbytes <= self._limit)
            self._held += nbytes
            return not self._cancelled

    def give(self, nbytes):
        with self._changed:
            self._held -= nbytes
            self._changed.notify_all()

    def cancel(self):
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()


def _read(variable):
    """The variable's value: the read TensorFlow built with it (no new op), else a new read."""
    read = tf_internals.standalone_read(variable)
    return read if read is not None else variable.value()


def _stored_bytes(layout) -> int:
    shape = layout.stored_shape()
    return 0 if shape is None or any(d is None for d in shape) else layout.stored_nbytes()


def _runs(layouts):
    """Layouts in order, cut into runs of about _RUN_BYTES (a larger one alone)."""
    run, size = [], 0
    for layout in layouts:
        nbytes = _stored_bytes(layout)
        if run and size + nbytes > _RUN_BYTES:
            yield run
            run, size = [], 0
        run.append(layout)
        size += nbytes
    if run:
        yield run


class NpzOps:
    """The save fetches and restore feeds of one ordered set of layouts, built once (see :func:`ops_for`).

    Partitioned variables, dtypes without Pack/Unpack kernels (int4, uint4) and shapes
    not fully known get one placeholder per part.
    """

    def __init__(self, graph, layouts, save=None):
        self.layouts = {layout.name: layout for layout in layouts}
        self.feeds = FeedAssignOps(graph, layouts, feed_groups(layouts), scope="subsetsaver_npz/")
        self.save = save if save is not None else SaveFetches(graph, layouts)
        self._programs = {}  # names -> (manifest, RestoreProgram): repeated restores of one file

    # -- restore --------------------------------------------------------------------------
    def restore(self, sess, archive, names):
        """Read, checksum and assign the arrays ``names`` of ``archive`` (an open ``subsetsaver.formats.npz.Archive``)
        in ONE session.run; nothing is assigned unless every array passed."""
        key = tuple(names)
        known = self._programs.get(key)
        if known is None or known[0] is not archive.manifest:
            known = self._programs[key] = (archive.manifest, RestoreProgram(self, archive, key))
            npz.evict_oldest(self._programs, keep=4)
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
            buffer = npz.recycled_bytes(info["nbytes"] * info["count"])  # TensorFlow keeps it; given back later
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


# graph -> {key: NpzOps, ("save", key): SaveFetches, (kind, id of a layout list): (list, either)}, key
# ((file name, id of first part), ...); weak, so graphs can be collected.
_ops_by_graph = weakref.WeakKeyDictionary()
_build_lock = threading.RLock()


def ops_for(graph, layouts, *, build=True):
    """The cached NpzOps (restore feeds and save fetches) of this graph and variable set; built on
    first use unless the graph is finalized."""
    # File name and variable: a plan's remap may store variable 'b' under the name 'a'. The cached
    # NpzOps holds the variables, so their ids stay theirs.
    def find(cache, key):
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
            ops = cache[key] = NpzOps(graph, layouts, save=cache.get(("save", key)))
        return ops, ops is not None

    return _cached(graph, "ops", layouts, find)


def save_fetches_for(graph, layouts) -> SaveFetches:
    """What a save of these layouts fetches: the NpzOps' when restore ops exist, else save fetches
    alone (a save never builds restore ops), built once; without new ops in a finalized graph."""
    def find(cache, key):
        ops = cache.get(key)
        if ops is not None:
            return ops.save, True
        fetches = cache.get(("save", key))
        if fetches is None:
            fetches = SaveFetches(graph, layouts, stacks=not graph.finalized)
            if graph.finalized:
                return fetches, False  # built with no new ops, and kept nowhere
            cache[("save", key)] = fetches
        return fetches, True

    return _cached(graph, "save", layouts, find)


def _cached(graph, kind, layouts, find):
    """What ``find(cache, key)`` gives for the layouts, as ``(value, keep)``, under the build lock; a kept value
    is remembered for this very list, so that the next call with it computes no key."""
    known = _known_for_list(graph, kind, layouts)
    if known is not None:
        return known
    key = _key(layouts)
    with _build_lock:
        cache = _ops_by_graph.setdefault(graph, {})
        value, keep = find(cache, key)
        if keep:
            _remember_for_list(cache, kind, layouts, value)
        return value


def _known_for_list(graph, kind, layouts):
    """What ``kind`` ('ops' or 'save') was cached for this very list of layouts (the portable API
    passes its cached list again), without computing the key of every layout; else None."""
    cache = _ops_by_graph.get(graph)
    known = cache.get((kind, id(layouts))) if cache else None
    return known[1] if known is not None and known[0] is layouts else None


def _remember_for_list(cache, kind, layouts, value):
    if isinstance(layouts, list):  # the list is kept with it, so its id stays its own
        cache[(kind, id(layouts))] = (layouts, value)


def _key(layouts):
    return tuple((layout.name, id(layout.parts[0])) for layout in layouts)
