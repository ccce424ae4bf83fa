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

    >>> ops = CheckpointRestoreOps(graph, {'dense/w': [w]}, scope='subsetsaver_restore_some')
    >>> ops.run(sess, 'ckpt/model-100', ['dense/w'])
"""

from __future__ import annotations

import math

from .. import tf_internals
from ..formats.npz import numpy_dtype

_NO_FLAT = frozenset({"int4", "uint4"})  # TF has no Pack/Unpack kernels for these: one feed per part


class CheckpointRestoreOps:
    """``RestoreV2`` + assigns for each variable of ``variables`` (key -> list of parts, one
    part unless partitioned), under ``scope``.

    With ``fed_names``, the tensor names each ``RestoreV2`` reads are fed at run time
    (moving-average evaluation picks a shadow or the variable itself per checkpoint);
    without, each reads its own key.
    """

    def __init__(self, graph, variables, *, scope, fed_names=False):
        import tensorflow as tf

        self.assigns, self._name_feeds, self._parts = {}, {}, {}
        with graph.as_default(), tf.compat.v1.name_scope(scope):
            self._prefix_feed = tf.compat.v1.placeholder(tf.string, [], name="prefix")
            for key, parts in variables.items():
                parts = list(parts)
                self._parts[key] = parts
                if fed_names:
                    names = self._name_feeds[key] = tf.compat.v1.placeholder(tf.string, [len(parts)],
                                                                            name="tensor_names")
                else:
                    names = [key] * len(parts)
                values = tf.raw_ops.RestoreV2(
                    prefix=self._prefix_feed,
                    tensor_names=names,
                    shape_and_slices=[tf_internals.slice_spec(part) for part in parts],
                    dtypes=[part.dtype.base_dtype for part in parts],
                )
                self.assigns[key] = tf.group(*(part.assign(value, read_value=False)
                                               for part, value in zip(parts, values)))

    def run(self, sess, prefix, keys, tensor_names=None):
        """Restore ``keys`` from checkpoint ``prefix`` in one ``session.run``.

        ``tensor_names``: key -> the checkpoint name to read it from (only with ``fed_names``).
        """
        keys = list(keys)
        feeds = {self._prefix_feed: prefix}
        for key in keys if self._name_feeds else ():
            feeds[self._name_feeds[key]] = [tensor_names[key]] * len(self._parts[key])
        if keys:
            sess.run([self.assigns[key] for key in keys], feeds)


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
                                    "count": len(members), "dtype": numpy_dtype(dtype),
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

