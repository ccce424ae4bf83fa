"""How the audit scales: 10^3, 10^4 and 10^5 ops of a ResNet-like training graph.

The graph is a chain of conv + fused batch-norm blocks trained with Momentum, the
moving-average updates wired through UPDATE_OPS (the shape of ResNet-50, ~95 ops a
block). TensorFlow builds one tile of blocks; larger graphs chain copies of that tile
at the GraphDef level (one ``import_meta_graph``), because building 10^5 ops op by op
in Python takes minutes.

"ours" is a cold ``ss.audit(ss.trainable(), graph)`` on a fresh graph: reading the
catalog and its roles, tracing the dataflow, all findings. "tf" is what building
``tf.compat.v1.train.Saver`` over the same variables costs, for scale: a price every
TF1 program pays once, as the audit does. Both are process CPU seconds (steady on a
shared machine); the note adds the audit's wall-clock seconds.

Run: ``python bench/bench_audit.py``
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BLOCKS_PER_TILE = 12
SIZES = (1_000, 10_000, 100_000)


def resnet_like(blocks, *, resource=True, wire_updates=True):
    """A fresh graph: ``blocks`` x (1x1 conv, fused batch norm with moving statistics,
    relu) on a [None, 4, 4, 2] placeholder ``x``, Momentum under ``opt``."""
    import tensorflow as tf
    from tensorflow.python.training import moving_averages

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope(v1.get_variable_scope(), use_resource=resource):
        h = v1.placeholder(tf.float32, [None, 4, 4, 2], name="x")
        for index in range(blocks):
            with v1.variable_scope(f"block_{index}"):
                weights = v1.get_variable("w", [1, 1, 2, 2])
                conv = tf.nn.conv2d(h, weights, strides=[1, 1, 1, 1], padding="SAME")
                with v1.variable_scope("bn"):
                    scale = v1.get_variable("scale", [2], initializer=v1.ones_initializer())
                    offset = v1.get_variable("offset", [2], initializer=v1.zeros_initializer())
                    mean = v1.get_variable("moving_mean", [2], initializer=v1.zeros_initializer(), trainable=False)
                    variance = v1.get_variable(
                        "moving_variance", [2], initializer=v1.ones_initializer(), trainable=False
                    )
                    normed, batch_mean, batch_variance = v1.nn.fused_batch_norm(
                        conv, scale, offset, epsilon=1e-3, is_training=True
                    )
                    for statistic, value in ((mean, batch_mean), (variance, batch_variance)):
                        update = moving_averages.assign_moving_average(statistic, value, 0.9, zero_debias=False)
                        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, update)
                    inference, _, _ = v1.nn.fused_batch_norm(
                        conv, scale, offset, mean=mean, variance=variance, epsilon=1e-3, is_training=False,
                        name="inference",
                    )
                h = tf.nn.relu(normed, name="relu")
                tf.identity(tf.nn.relu(inference), name="output")
        loss = tf.reduce_mean(h, name="loss")
        with v1.variable_scope("opt"):
            step = v1.train.get_or_create_global_step()
            updates = v1.get_collection(v1.GraphKeys.UPDATE_OPS) if wire_updates else []
            with tf.control_dependencies(updates):
                v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=step)
    return graph


def tiled(tiles, template=None):
    """A fresh graph of ``tiles`` chained copies of ``template`` (default: a
    :func:`resnet_like` of BLOCKS_PER_TILE blocks), under scopes ``tile_0``, ``tile_1``...
    Each tile's input is the previous tile's last relu."""
    import tensorflow as tf
    from tensorflow.core.framework import variable_pb2
    from tensorflow.core.protobuf import meta_graph_pb2

    v1 = tf.compat.v1
    template = template or resnet_like(BLOCKS_PER_TILE)
    with template.as_default():
        meta = v1.train.export_meta_graph(graph=template)
    last_relu = [op.name for op in template.get_operations() if op.type == "Relu" and op.name.endswith("/relu")][-1]

    combined = meta_graph_pb2.MetaGraphDef()
    combined.meta_info_def.CopyFrom(meta.meta_info_def)
    for tile in range(tiles):
        prefix = f"tile_{tile}/"
        for node in meta.graph_def.node:
            copy = combined.graph_def.node.add()
            copy.CopyFrom(node)
            copy.name = prefix + node.name
            copy.input[:] = [_prefixed(prefix, text) for text in node.input]
            if "_class" in copy.attr:
                copy.attr["_class"].list.s[:] = [
                    b"loc:@" + (prefix + s.decode()[5:]).encode() for s in copy.attr["_class"].list.s
                ]
            if node.name == "x" and tile > 0:  # chain: this tile reads the previous tile's output
                dtype = copy.attr["dtype"].type
                copy.op = "Identity"
                copy.ClearField("attr")
                copy.attr["T"].type = dtype
                copy.input[:] = [f"tile_{tile - 1}/{last_relu}"]
        for key, collection in meta.collection_def.items():
            target = combined.collection_def[key]
            if collection.HasField("node_list"):
                target.node_list.value.extend(prefix + v for v in collection.node_list.value)
            else:
                for blob in collection.bytes_list.value:
                    variable = variable_pb2.VariableDef()
                    variable.ParseFromString(blob)
                    for field in ("variable_name", "initial_value_name", "initializer_name", "snapshot_name"):
                        if getattr(variable, field):
                            setattr(variable, field, prefix + getattr(variable, field))
                    target.bytes_list.value.append(variable.SerializeToString())
    graph = tf.Graph()
    with graph.as_default():
        v1.train.import_meta_graph(combined)
    return graph


def _prefixed(prefix, text):
    return "^" + prefix + text[1:] if text.startswith("^") else prefix + text


def operation_count(graph):
    return len(graph.get_operations())


def time_audit(graph):
    """(CPU seconds, wall seconds, findings) of a cold audit of ``graph``."""
    import subsetsaver as ss
    from subsetsaver.audit import audit

    cpu, wall = time.process_time(), time.perf_counter()
    findings = audit(ss.trainable(), graph)
    return time.process_time() - cpu, time.perf_counter() - wall, findings


def time_saver(graph):
    """CPU seconds to build a Saver over every global variable of ``graph``."""
    import tensorflow as tf

    with graph.as_default():
        started = time.process_time()
        tf.compat.v1.train.Saver(tf.compat.v1.global_variables())
        return time.process_time() - started


def run(report):
    """Report the cold audit time at 10^3, 10^4 and 10^5 ops, against building a Saver."""
    import subsetsaver.audit  # noqa: F401  (imports are not what we measure)
    import subsetsaver.catalog.dataflow  # noqa: F401

    template = resnet_like(BLOCKS_PER_TILE)
    per_tile = operation_count(template)
    warm_up = tiled(1, template)
    time_audit(warm_up)
    previous = None
    for size in SIZES:
        tiles = max(1, round(size / per_tile))
        graph = tiled(tiles, template)
        ops = operation_count(graph)
        seconds, wall, findings = time_audit(graph)
        flagged = sum(len(f.variables) for f in findings if f.code == "unsaved-state")
        saver_seconds = time_saver(graph)
        per_op = seconds / ops * 1e6
        note = f"{ops} ops, {flagged} statistics flagged, {per_op:.1f} us/op, wall {wall:.3f} s"
        if previous is not None:
            note += f", x{seconds / previous[0]:.1f} time for x{ops / previous[1]:.1f} ops"
        report(f"audit {ops:>7} ops", seconds, saver_seconds, note)
        previous = (seconds, ops)


def _print_report(label, ours_seconds, tf_seconds, note):
    ratio = f"  ({ours_seconds / tf_seconds:.2f}x tf.train.Saver build {tf_seconds:.3f} s)" if tf_seconds else ""
    print(f"{label:<22} {ours_seconds:8.3f} s{ratio}  {note}")


if __name__ == "__main__":
    run(_print_report)
