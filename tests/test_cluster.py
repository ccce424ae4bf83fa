"""Partitioned and sharded variables on a real local TensorFlow cluster (two ps tasks, one worker).

The cluster (``cluster_util.LocalCluster``) starts once for the module on free 127.0.0.1
ports and always stops; its teardown asserts that no process survives. Variables are placed
on the ps tasks by ``replica_device_setter``; ``embed/emb`` is split in 3 along axis 0 and
``wide/w`` in 2 along axis 1. A checkpoint saved from the cluster (sharded TF checkpoint, or
a portable npz file) restores bit-exact into the cluster and into single-process graphs
partitioned differently (embed/emb in 2 parts, wide/w in 3 along axis 0; and not at all).
"""

import contextlib
import os
import signal
import socket
import time

import numpy as np
import pytest
import tensorflow as tf
from cluster_util import LocalCluster, free_port, session_config
from kill_util import wait_until_stopped

import subsetsaver as ss
from subsetsaver import catalog as catalog_module
from subsetsaver.formats import npz as npzfile

v1 = tf.compat.v1
PARTITIONED = ("embed/emb", "wide/w", "embed/emb/Momentum", "wide/w/Momentum")
ALL_NAMES = ["embed/emb", "wide/w", "dense/w", "dense/b", "global_step",
             "embed/emb/Momentum", "wide/w/Momentum", "dense/w/Momentum", "dense/b/Momentum"]
PS_DEVICES = ["/job:ps/task:0", "/job:ps/task:1"]


@pytest.fixture(scope="module")
def cluster():
    local = LocalCluster({"ps": 2, "worker": 1})
    try:
        local.start()
        yield local
    finally:
        survivors = local.stop()
        assert survivors == [], f"cluster processes still alive after stop(): {survivors}"
        assert local.pids and not any(os.path.exists(f"/proc/{pid}") for pid in local.pids)


def build(device_setter=None, *, emb_parts=3, wide_parts=2, wide_axis=1, seed=1):
    """embed/emb [30, 8] and wide/w [12, 6] (partitioned unless parts == 1), dense w/b, a global step,
    Momentum at the top level (so the slots of a partitioned variable are partitioned under one name)."""
    graph = tf.Graph()
    with graph.as_default(), graph.device(device_setter) if device_setter else contextlib.nullcontext():
        v1.set_random_seed(seed)

        def partitioner(parts, axis=0):
            return v1.fixed_size_partitioner(parts, axis=axis) if parts > 1 else None

        normal = v1.random_normal_initializer()
        emb = v1.get_variable("embed/emb", [30, 8], initializer=normal, partitioner=partitioner(emb_parts),
                              use_resource=True)
        wide = v1.get_variable("wide/w", [12, 6], initializer=normal, partitioner=partitioner(wide_parts, wide_axis),
                               use_resource=True)
        dense_w = v1.get_variable("dense/w", [8, 6], initializer=normal, use_resource=True)
        dense_b = v1.get_variable("dense/b", [6], initializer=normal, use_resource=True)
        global_step = v1.train.get_or_create_global_step()
        ids = tf.constant([0, 7, 11, 15, 22, 29], tf.int64)
        rows = tf.constant([0, 3, 5, 7, 9, 11], tf.int64)
        hidden = v1.nn.embedding_lookup(emb, ids, partition_strategy="div") @ dense_w + dense_b
        loss = tf.reduce_sum(tf.square(hidden * tf.gather(tf.convert_to_tensor(wide), rows)))
        train_op = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=global_step)
    return graph, train_op


def cluster_graph(cluster):
    return build(v1.train.replica_device_setter(ps_tasks=2, cluster=cluster.cluster_spec))


def logical_values(sess, graph) -> dict:
    """Every logical variable's whole value (partitions joined by their slice info), in ONE session.run."""
    cat = catalog_module.load(graph)
    parts = {name: cat.variables([name]) for name in cat.ordered_names}
    fetched = sess.run(parts)
    values = {}
    for name, pieces in parts.items():
        info = getattr(pieces[0], "_save_slice_info", None)
        if info is None:
            values[name] = fetched[name][0]
            continue
        whole = np.full(info.full_shape, np.nan, dtype=fetched[name][0].dtype)
        for piece, value in zip(pieces, fetched[name]):
            offset = piece._save_slice_info.var_offset
            whole[tuple(slice(o, o + s) for o, s in zip(offset, value.shape))] = value
        values[name] = whole
    return values


def assert_bit_exact(got, expected):
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name].shape == expected[name].shape, name
        assert got[name].dtype == expected[name].dtype, name
        assert got[name].tobytes() == expected[name].tobytes(), name


def differs_everywhere(a, b) -> bool:
    return all(a[name].tobytes() != b[name].tobytes() for name in a)


def data_files(prefix):
    directory, base = os.path.split(prefix)
    return sorted(name for name in os.listdir(directory) if name.startswith(base + ".data-"))


# ---------------------------------------------------------------------------------
# Placement and selectors
# ---------------------------------------------------------------------------------


def test_variables_and_their_parts_sit_on_both_ps_tasks(cluster):
    graph, _ = cluster_graph(cluster)
    cat = catalog_module.load(graph)
    assert list(cat.ordered_names) == ALL_NAMES
    devices = {name: [v.device for v in cat.variables([name])] for name in cat.ordered_names}
    assert devices["embed/emb"] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    assert devices["wide/w"] == ["/job:ps/task:1", "/job:ps/task:0"]
    assert sorted({d for placed in devices.values() for d in placed}) == PS_DEVICES
    assert [cat.record(n).parts for n in PARTITIONED] == [
        ("embed/emb/part_0", "embed/emb/part_1", "embed/emb/part_2"), ("wide/w/part_0", "wide/w/part_1"),
        ("embed/emb/part_0/Momentum", "embed/emb/part_1/Momentum", "embed/emb/part_2/Momentum"),
        ("wide/w/part_0/Momentum", "wide/w/part_1/Momentum"),
    ]


SELECTIONS = [
    (ss.scope("embed"), ["embed/emb", "embed/emb/Momentum"]),
    (ss.scope("embed/emb"), ["embed/emb", "embed/emb/Momentum"]),
    (ss.name("embed/emb"), ["embed/emb"]),
    (ss.name("*/w"), ["wide/w", "dense/w"]),
    (ss.regex(r"^(embed|wide)/\w+$"), ["embed/emb", "wide/w"]),
    (ss.trainable(), ["embed/emb", "wide/w", "dense/w", "dense/b"]),
    (ss.slots(), ["embed/emb/Momentum", "wide/w/Momentum", "dense/w/Momentum", "dense/b/Momentum"]),
    (ss.everything() - ss.scope("wide") - ss.slots(), ["embed/emb", "dense/w", "dense/b", "global_step"]),
    # the part names are not variable names: nothing matches them
    (ss.name("embed/emb/part_*"), []),
    (ss.regex("part_[0-9]"), []),
    (ss.scope("embed/emb/part_0"), []),
]


@pytest.mark.parametrize("selector, expected", SELECTIONS, ids=[repr(s) for s, _ in SELECTIONS])
def test_selectors_treat_a_partitioned_variable_as_one_unit(cluster, selector, expected):
    graph, _ = cluster_graph(cluster)
    cat = catalog_module.load(graph)
    assert selector.names(graph, allow_empty=True) == expected
    chosen = {v.op.name for v in selector.resolve(graph, allow_empty=True)}
    for name in PARTITIONED:  # all of its parts, or none
        parts = set(cat.record(name).parts)
        assert parts <= chosen if name in expected else not parts & chosen, name
    assert chosen == {part.op.name for name in expected for part in cat.variables([name])}


def test_an_explicit_part_selects_the_whole_partitioned_variable(cluster):
    graph, _ = cluster_graph(cluster)
    (variable,) = [v for v in graph.get_collection("variables") if v.op.name == "wide/w/part_1"]
    assert ss.variables([variable]).names(graph) == ["wide/w"]
    assert [v.op.name for v in ss.variables([variable]).resolve(graph)] == ["wide/w/part_0", "wide/w/part_1"]


# ---------------------------------------------------------------------------------
# Saving from the cluster, restoring anywhere
# ---------------------------------------------------------------------------------


OTHER_PARTITIONINGS = {
    "2 and 3 parts on axis 0": dict(emb_parts=2, wide_parts=3, wide_axis=0),
    "unpartitioned": dict(emb_parts=1, wide_parts=1),
}


def save_from_the_cluster(cluster, directory, backend):
    """Train two steps on the cluster and save everything; (prefix, values saved, cluster graph, plan)."""
    graph, train_op = cluster_graph(cluster)
    options = {"sharded": True} if backend == "tf" else {}
    the_plan = ss.plan(ss.everything(), graph, backend=backend, **options)
    with v1.Session(cluster.target, graph=graph, config=session_config()) as sess:
        the_plan.restore_or_initialize(sess, None)
        sess.run(train_op)
        sess.run(train_op)
        saved = logical_values(sess, graph)
        prefix = the_plan.save(sess, os.path.join(directory, "model"), global_step=2)
        # back in the cluster: one more step changes every variable, the restore brings them back
        sess.run(train_op)
        assert differs_everywhere(logical_values(sess, graph), saved)
        report = the_plan.restore_or_initialize(sess, prefix)
        assert report.checkpoint == prefix and list(report.restored) == ALL_NAMES and report.initialized == ()
        assert_bit_exact(logical_values(sess, graph), saved)
    assert saved["global_step"] == 2 and np.count_nonzero(saved["embed/emb/Momentum"]) > 0
    return prefix, saved, the_plan


def restore_into_other_partitionings(prefix, saved, backend):
    for label, layout in OTHER_PARTITIONINGS.items():
        graph, _ = build(**layout, seed=7)
        the_plan = ss.plan(ss.everything(), graph, backend=backend)
        with v1.Session(graph=graph) as sess:
            the_plan.restore_or_initialize(sess, None)
            assert differs_everywhere(
                {k: v for k, v in logical_values(sess, graph).items() if k != "global_step" and "Momentum" not in k},
                {k: v for k, v in saved.items() if k != "global_step" and "Momentum" not in k}), label
            report = the_plan.restore_or_initialize(sess, prefix)
            assert list(report.restored) == ALL_NAMES, label
            assert_bit_exact(logical_values(sess, graph), saved)


def test_a_sharded_checkpoint_from_the_cluster_restores_into_any_partitioning(cluster, tmp_path):
    prefix, saved, the_plan = save_from_the_cluster(cluster, str(tmp_path), "tf")
    holding = sorted({tf.DeviceSpec.from_string(v.device).to_string() for v in the_plan.saved})
    assert holding == PS_DEVICES
    assert data_files(prefix) == [f"model-2.data-0000{k}-of-00002" for k in range(len(holding))]
    assert the_plan.sizes.data_files == len(holding)
    assert the_plan.sizes.data_bytes == sum(os.path.getsize(os.path.join(tmp_path, n)) for n in data_files(prefix))
    # the checkpoint holds each partitioned variable once, under its full name and full shape
    reader = tf.train.load_checkpoint(prefix)
    shapes = {k: tuple(v) for k, v in reader.get_variable_to_shape_map().items()}
    assert shapes == {name: value.shape for name, value in saved.items()}
    assert reader.get_tensor("embed/emb").tobytes() == saved["embed/emb"].tobytes()
    restore_into_other_partitionings(prefix, saved, "tf")


def test_an_npz_checkpoint_from_the_cluster_joins_partitions_and_splits_them_again(cluster, tmp_path):
    prefix, saved, _ = save_from_the_cluster(cluster, str(tmp_path), "npz")
    assert prefix == str(tmp_path / "model-2.npz")
    manifest, arrays = npzfile.read(prefix)
    assert list(manifest.names) == ALL_NAMES
    assert_bit_exact(arrays, saved)  # whole arrays, joined from the parts on both ps tasks
    with np.load(prefix, allow_pickle=False) as opened:
        assert opened["wide.w"].shape == (12, 6)
        assert opened["wide.w"].tobytes() == saved["wide/w"].tobytes()
    restore_into_other_partitionings(prefix, saved, "npz")


def test_a_hung_cluster_fails_fast_instead_of_hanging(cluster):
    """operation_timeout_in_ms: a ps task that stops answering costs seconds, not forever."""
    graph, _ = cluster_graph(cluster)
    with graph.as_default():
        probe = tf.constant(1.0) + 1.0
        with graph.device("/job:ps/task:1"):
            on_ps = tf.identity(tf.constant(2.0)) * 3.0
    ps = cluster.task_pids["/job:ps/task:1"]
    with v1.Session(cluster.target, graph=graph, config=session_config(timeout_ms=3000)) as sess:
        assert sess.run(on_ps) == 6.0
        os.kill(ps, signal.SIGSTOP)
        assert wait_until_stopped(ps, 30)  # on a loaded machine the signal takes a while: until then ps answers
        try:
            start = time.monotonic()
            with pytest.raises(tf.errors.DeadlineExceededError):
                sess.run(on_ps)
            assert time.monotonic() - start < 30
        finally:
            os.kill(ps, signal.SIGCONT)
        assert sess.run(probe) == 2.0


def test_a_port_clash_is_retried_and_every_process_is_cleaned_up():
    """The first port offered is taken: the failed attempt's processes go away, the retry comes up."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        offered = iter([taken.getsockname()[1]])
        local = LocalCluster({"ps": 1}, port_source=lambda: next(offered, None) or free_port())
        try:
            local.start()
            assert local.attempts == 2
            assert local.spec["ps"] != [f"127.0.0.1:{taken.getsockname()[1]}"]
            # pids: the first launcher (which found its port taken), the second launcher and its task
            assert len(local.pids) == 3 and list(local.task_pids.values()) == [local.pids[2]]
            assert local.survivors() == local.pids[1:]
        finally:
            assert local.stop() == []
