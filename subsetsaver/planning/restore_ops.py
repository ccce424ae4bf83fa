"""Every op subsetsaver builds to put checkpoint values into variables: built once, run many times.

Two kinds, both built when a plan (or a portable restore) is prepared, never at restore
time, so restoring a hundred times does not grow the graph:

- :class:`CheckpointRestoreOps`: one ``RestoreV2`` plus assigns per variable, fed a
  checkpoint prefix (and, optionally, the tensor names to read), so any subset of
  variables can be restored from any checkpoint in one ``session.run``. The plan's
  ``on_mismatch='initialize'`` and moving-average evaluation use it.
- :class:`FeedAssignOps`: placeholders plus assigns, for values read by the library's
  own file readers (portable ``.npz`` files). Variables of one dtype and shape share
  one ``[count, *shape]`` placeholder that one ``unstack`` cuts into their values.

Example::

    ops = CheckpointRestoreOps(graph, {'dense/w': [w]}, scope='subsetsaver_restore_some')
    ops.run(sess, 'ckpt/model-100', ['dense/w'])
"""

from __future__ import annotations

import math

from .. import tf_internals
from ..formats import npz
from .rows import STATS_BLOCK

_MAX_BLOCKS = 256  # a bigger tensor sums bigger blocks (than offline), not more ops
_NO_FLAT = frozenset({"int4", "uint4"})  # TF has no Pack/Unpack kernels for these: one feed per part


class CheckpointRestoreOps:
    """``RestoreV2`` + assigns for each variable of ``variables`` (key -> list of parts, one
    part unless partitioned), under ``scope``.

    With ``fed_names``, the tensor names each ``RestoreV2`` reads are fed at run time
    (moving-average evaluation picks a shadow or the variable itself per checkpoint);
    without, each reads its own key. ``together``: keys also read by one ``RestoreV2`` for
    all of them, used when a restore asks for exactly those (each ``RestoreV2`` opens the
    checkpoint's index).
    """

    def __init__(self, graph, variables, *, scope, fed_names=False, together=()):
        import tensorflow as tf

        self.assigns, self._name_feeds, self._parts = {}, {}, {}
        self._together = None  # (keys, names feed, assign op) of one RestoreV2 for the keys ``together``
        with graph.as_default(), tf.compat.v1.name_scope(scope):
            self._prefix_feed = tf.compat.v1.placeholder(tf.string, [], name="prefix")
            for key, parts in variables.items():
                self._parts[key] = list(parts)
                self.assigns[key], feed = self._restore([key], fed_names, name="tensor_names")
                if feed is not None:
                    self._name_feeds[key] = feed
            chosen = set(together)
            together = [key for key in self._parts if key in chosen]
            if fed_names and len(together) > 1:  # every RestoreV2 opens the checkpoint's index again
                assign, feed = self._restore(together, True, name="together_names")
                self._together = (together, feed, assign)

    def _restore(self, keys, fed_names, *, name):
        """``(assign op, tensor names placeholder or None)``: one ``RestoreV2`` of the parts of ``keys``."""
        import tensorflow as tf

        parts = [part for key in keys for part in self._parts[key]]
        if fed_names:
            names = feed = tf.compat.v1.placeholder(tf.string, [len(parts)], name=name)
        else:
            names, feed = [key for key in keys for _part in self._parts[key]], None
        values = tf.raw_ops.RestoreV2(prefix=self._prefix_feed, tensor_names=names,
                                      shape_and_slices=[tf_internals.slice_spec(part) for part in parts],
                                      dtypes=[part.dtype.base_dtype for part in parts])
        return tf.group(*(part.assign(value, read_value=False) for part, value in zip(parts, values))), feed

    def run(self, sess, prefix, keys, tensor_names=None):
        """Restore ``keys`` from checkpoint ``prefix`` in one ``session.run``.

        ``tensor_names``: key -> the checkpoint name to read it from (only with ``fed_names``).
        """
        fetches, feeds = self.fetches(prefix, keys, tensor_names)
        if fetches:
            sess.run(fetches, feeds)

    def fetches(self, prefix, keys, tensor_names=None):
        """``(assign ops, feeds)`` that restore ``keys`` from ``prefix``, to run with other fetches."""
        keys = list(keys)
        feeds = {self._prefix_feed: prefix}
        if self._together is not None and len(keys) == len(self._together[0]) and set(keys) == set(self._together[0]):
            together, feed, assign = self._together
            feeds[feed] = [tensor_names[key] for key in together for _part in self._parts[key]]
            return [assign], feeds
        for key in keys if self._name_feeds else ():
            feeds[self._name_feeds[key]] = [tensor_names[key]] * len(self._parts[key])
        return [self.assigns[key] for key in keys], feeds


class RowRestoreOps:
    """For each row-mapped variable: one ``RestoreV2`` of its old tensor (whole, however the
    checkpoint partitions it), and per part of the variable a gather of the old rows its rows
    take, new rows filled in the gathered buffer (see :class:`~subsetsaver.planning.rows.RowMap`),
    and an assign that adopts that buffer: one copy of each row beyond what a plain restore does.

    ``entries``: objects with ``name``, ``key`` (the checkpoint tensor to read), ``parts``
    (tf.Variable list), ``rows`` (a RowMap) and ``slot`` (True: new rows are zero). Built now,
    under ``scope``; :meth:`fetches` names what a restore runs.

    ops = RowRestoreOps(graph, [entry], scope='subsetsaver_rows')
    sess.run(*ops.fetches('ckpt/model', ['body/emb']))
    """

    def __init__(self, graph, entries, *, scope):
        import tensorflow as tf

        self.assigns = {}
        with graph.as_default(), graph.control_dependencies(None), tf.compat.v1.name_scope(scope):
            self._prefix_feed = tf.compat.v1.placeholder(tf.string, [], name="prefix")
            for entry in entries:
                dtype = entry.parts[0].dtype.base_dtype
                old = tf.raw_ops.RestoreV2(prefix=self._prefix_feed, tensor_names=[entry.key],
                                           shape_and_slices=[""], dtypes=[dtype])[0]
                ndim = len(_full_shape(entry.parts[0]))
                fill = _RowFill(entry, old, ndim)
                gathered_by = set()
                self.assigns[entry.name] = tf.group(*(_assign_mapped_part(part, old, entry.rows, ndim, fill, gathered_by)
                                                      for part in entry.parts))

    def fetches(self, prefix, names):
        """``(assign ops, feeds)`` that restore the variables ``names`` from ``prefix``."""
        return [self.assigns[name] for name in names], {self._prefix_feed: prefix}


def _full_shape(part) -> list:
    info = tf_internals.slice_info(part)
    return list(info.full_shape) if info is not None else part.shape.as_list()


def _region(part):
    """(offset, shape) of ``part`` in its full variable."""
    info = tf_internals.slice_info(part)
    if info is not None:
        return list(info.var_offset), list(info.var_shape)
    shape = part.shape.as_list()
    return [0] * len(shape), shape


def _to_front(tensor, axis, ndim):
    import tensorflow as tf

    if axis == 0:
        return tensor
    return tf.transpose(tensor, [axis] + [d for d in range(ndim) if d != axis])


def _from_front(tensor, axis, ndim):
    import tensorflow as tf

    if axis == 0:
        return tensor
    order = [axis] + [d for d in range(ndim) if d != axis]
    return tf.transpose(tensor, [order.index(d) for d in range(ndim)])


class _RowFill:
    """What fills new rows of one variable: zeros, the old rows' mean, a seeded normal (its numbers
    drawn now, as the offline rewrite draws them) or the variable's own initializer."""

    def __init__(self, entry, old, ndim):
        import numpy as np

        rows, self.kind = entry.rows, "zeros" if entry.slot else entry.rows.init
        self.axis = rows.axis % ndim
        self.dtype = entry.parts[0].dtype.base_dtype
        self.added = {int(row): position for position, row in enumerate(np.flatnonzero(rows.is_new))}
        self.mean = self.std = None
        full = _full_shape(entry.parts[0])
        if self.kind in ("mean", "normal") and self.added:
            self.mean, self.std = _row_stats(old, self.axis, full, rows.old_rows or full[self.axis],
                                             self.kind == "normal" and rows.stddev is None)
        if self.kind == "normal" and self.added:
            row_shape = [n for d, n in enumerate(full) if d != self.axis]
            self.normal = np.random.default_rng(rows.seed).standard_normal((len(self.added), *row_shape))
            self.stddev = rows.stddev

    def rows_for(self, part, new_positions, region, ndim):
        """``[len(new_positions), *row shape of part]``: the fill of the part's new rows."""
        import numpy as np
        import tensorflow as tf

        offset, shape = region
        front_shape = [len(new_positions)] + [n for d, n in enumerate(shape) if d != self.axis]
        others = [slice(o, o + n) for d, (o, n) in enumerate(zip(offset, shape)) if d != self.axis]
        if self.kind == "zeros":
            return tf.zeros(front_shape, self.dtype)
        if self.kind == "variable":
            local = np.asarray(new_positions) - offset[self.axis]
            return _to_front(tf.gather(part.initial_value, local, axis=self.axis), self.axis, ndim)
        if self.kind == "mean":
            mean = _to_front(self.mean, self.axis, ndim)[(slice(None), *others)]
            return tf.broadcast_to(tf.cast(mean, self.dtype), front_shape)
        drawn = self.normal[[self.added[int(row)] for row in new_positions]][(slice(None), *others)]
        if self.stddev is not None:
            return tf.constant((drawn * self.stddev).astype(self.dtype.as_numpy_dtype))
        return tf.cast(tf.constant(drawn) * self.std, self.dtype)


def _assign_mapped_part(part, old, rows, ndim, fill, gathered_by):
    """The op that writes ``part``: the old rows its rows take (``old`` cut to its region on the other
    axes), its new rows filled. ``gathered_by``: the index arrays already gathered from ``old``."""
    import numpy as np
    import tensorflow as tf

    axis = fill.axis
    offset, shape = _region(part)
    indices = rows.new_to_old[offset[axis]:offset[axis] + shape[axis]]
    full = _full_shape(part)
    if any(o != 0 or n != full[d] for d, (o, n) in enumerate(zip(offset, shape)) if d != axis):
        begin = [0 if d == axis else o for d, o in enumerate(offset)]
        old = tf.slice(old, begin, [-1 if d == axis else n for d, n in enumerate(shape)])
    new_local = np.flatnonzero(indices < 0)
    taken = np.maximum(indices, 0)  # a new row takes old row 0 until it is filled
    gathered = tf.gather(old, taken, axis=axis)
    if not new_local.size:
        return part.assign(gathered, read_value=False)
    filled = fill.rows_for(part, new_local + offset[axis], (offset, shape), ndim)
    front = _to_front(gathered, axis, ndim)
    key = (tuple(o for d, o in enumerate(offset) if d != axis), taken.tobytes())  # what the gather reads
    if axis == 0 and key not in gathered_by:
        # The new rows are written into the gathered copy's own buffer (its one reader is this op):
        # one copy of the part. A scatter into a new tensor or a stitch would copy it twice. Two
        # equal gathers could be merged into one buffer by the graph optimizer: only the first is
        # written in place.
        gathered_by.add(key)
        front = tf.raw_ops.InplaceUpdate(x=front, i=new_local.astype(np.int32), v=filled)
    else:
        front = tf.tensor_scatter_nd_update(front, new_local[:, None], filled)
    return part.assign(_from_front(front, axis, ndim), read_value=False)


def _row_stats(old, axis, full_shape, expected_rows, with_std):
    """``(mean row [1 on axis], std of every value or None)`` of ``old``'s rows, summed in float64 a
    block of rows at a time, the blocks the offline rewrite sums (:class:`~subsetsaver.planning.rows.RowStats`;
    past 256 blocks, bigger ones): a float64 copy of a whole 30,718 x 64 embedding took five times as
    long as its 256 KiB blocks, which stay in cache."""
    import tensorflow as tf

    row_values = max(1, math.prod(n for d, n in enumerate(full_shape) if d != axis))
    step = max(1, STATS_BLOCK // row_values)
    blocks = min(_MAX_BLOCKS, max(1, -(-expected_rows // step)))
    rows = tf.shape(old, out_type=tf.int64)[axis]
    ndim = len(full_shape)
    totals, squares = [], []
    for index in range(blocks):
        begin = tf.minimum(rows, index * step)
        end = rows if index == blocks - 1 else tf.minimum(rows, (index + 1) * step)
        starts = tf.stack([begin if d == axis else tf.constant(0, tf.int64) for d in range(ndim)])
        sizes = tf.stack([end - begin if d == axis else tf.constant(-1, tf.int64) for d in range(ndim)])
        values = tf.cast(tf.slice(old, starts, sizes), tf.float64)
        totals.append(tf.reduce_sum(values, axis=axis, keepdims=True))
        if with_std:
            squares.append(tf.reduce_sum(tf.square(values)))
    count = tf.cast(rows, tf.float64)
    mean = tf.add_n(totals) / count
    if not with_std:
        return mean, None
    variance = tf.add_n(squares) / (count * row_values) - tf.square(tf.reduce_mean(mean))
    return mean, tf.sqrt(tf.maximum(variance, 0.0))


def feed_groups(layouts) -> dict:
    """(dtype, shape) -> the layouts that can share one ``[count, *shape]`` feed, in order.

    ``layouts``: objects with ``name``, ``parts`` (tf.Variable list), ``dtype`` and
    ``partitioned``; partitioned variables, dtypes without Pack/Unpack kernels and shapes
    not fully known are left out (they get one placeholder per part).
    """
    grouped = {}
    for layout in layouts:
        head = layout.parts[0]
        if not layout.partitioned and layout.dtype not in _NO_FLAT and head.shape.is_fully_defined():
            grouped.setdefault((layout.dtype, tuple(head.shape.as_list())), []).append(layout)
    return grouped


class FeedAssignOps:
    """Placeholders and assigns for ``layouts`` (see :func:`feed_groups`), built in ``graph`` now.

    ``groups``: per shared feed, a dict with ``feed``, ``nbytes`` (of each value), ``count``,
    ``dtype`` (numpy) and ``shape`` (what to feed); ``slot``: layout name -> (group index,
    position); ``part_feeds``: part op name -> placeholder, for the layouts fed part by part;
    ``assigns``: layout name -> [assign op per part]; ``assign_all``: one op for all of them.
    Fed regions are 64-byte aligned by the caller, so TensorFlow can use the memory without copying.
    """

    def __init__(self, graph, layouts, grouped, *, scope):
        import tensorflow as tf

        self.groups, self.slot, self.part_feeds, self.assigns = [], {}, {}, {}
        with graph.as_default(), graph.control_dependencies(None), tf.compat.v1.name_scope(scope):
            for (dtype, shape), members in grouped.items():
                if len(members) == 1:
                    feed = tf.compat.v1.placeholder(tf.as_dtype(dtype), shape, name="value")
                    values = [feed]
                else:
                    feed = tf.compat.v1.placeholder(tf.as_dtype(dtype), [len(members), *shape], name="values")
                    values = tf.unstack(feed, num=len(members))
                for position, (layout, value) in enumerate(zip(members, values)):
                    self.slot[layout.name] = (len(self.groups), position)
                    self.assigns[layout.name] = [layout.parts[0].assign(value, read_value=False)]
                self.groups.append({"feed": feed, "nbytes": math.prod(shape) * tf.as_dtype(dtype).size,
                                    "count": len(members), "dtype": npz.numpy_dtype(dtype),
                                    "shape": [len(members), *shape] if len(members) > 1 else list(shape)})
            for layout in layouts:
                if layout.name in self.slot:
                    continue
                self.assigns[layout.name] = []
                for part in layout.parts:
                    feed = tf.compat.v1.placeholder(part.dtype.base_dtype, part.shape, name="value")
                    self.part_feeds[part.op.name] = feed
                    self.assigns[layout.name].append(part.assign(feed, read_value=False))
            every = [op for layout in layouts for op in self.assigns[layout.name]]
            self.assign_all = tf.group(*every, name="assign_all") if every else None

