"""Slimming real checkpoints: smaller files, bit-exact values, bounded memory."""

import os

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver.errors import CheckpointMismatchError
from subsetsaver.formats import subset_manifest as manifest
from subsetsaver.formats.tf.bundle import checkpoint_bytes as checkpoint_file_bytes
from subsetsaver.planning import plan
from subsetsaver.tools.slim import slim

v1 = tf.compat.v1
SMALL = dict(channels=(4, 8), fc_units=32)


@pytest.fixture(scope="module")
def adam_checkpoint(tmp_path_factory):
    """A full tf.compat.v1.train.Saver checkpoint of the small MNIST CNN after 3 Adam steps."""
    built = graphs.mnist_cnn(**SMALL)
    prefix, values = graphs.trained_checkpoint(built, str(tmp_path_factory.mktemp("adam") / "model"), steps=3)
    return prefix, values, built.expected, prefix + ".meta"


def test_dropping_adam_slots_leaves_a_third_that_restores_bit_exact(tmp_path, adam_checkpoint):
    prefix, values, expected, _ = adam_checkpoint
    report = slim(prefix, "~slots()", str(tmp_path / "slim" / "model"))
    kept = sorted(expected["model"] + expected["global_step"])
    assert list(report.kept) == kept
    assert list(report.dropped) == sorted(expected["slots"])
    assert report.verified and report.data_files == 1
    assert report.source_bytes == checkpoint_file_bytes(prefix)
    data = os.path.getsize(tmp_path / "slim" / "model.data-00000-of-00001")
    assert data == sum(values[name].nbytes for name in kept)
    assert report.output_bytes == data + os.path.getsize(tmp_path / "slim" / "model.index")
    assert 0.30 < report.output_bytes / report.source_bytes < 0.36, report.output_bytes / report.source_bytes
    assert manifest.read_manifest(report.output)["dropped"] == sorted(expected["slots"])

    fresh = graphs.mnist_cnn(**SMALL)
    restore = plan(~ss.slots(), fresh.graph)
    with v1.Session(graph=fresh.graph) as sess:
        result = restore.restore_or_initialize(sess, report.output)
        got = dict(zip(restore.saved_names, sess.run(restore.saved)))
    assert sorted(result.restored) == kept
    for name in kept:
        assert np.array_equal(got[name], values[name]), name


def test_graph_roles_choose_the_same_tensors(tmp_path, adam_checkpoint):
    prefix, values, expected, meta = adam_checkpoint
    report = slim(prefix, ss.trainable(), str(tmp_path / "weights"), graph=meta)
    assert list(report.kept) == sorted(expected["trainable"])
    reader = tf.train.load_checkpoint(report.output)
    for name in report.kept:
        assert np.array_equal(reader.get_tensor(name), values[name])
    with pytest.raises(CheckpointMismatchError) as error:
        slim(report.output, ss.trainable() | ss.global_step(), str(tmp_path / "again"), graph=meta)
    assert str(error.value) == (
        f"the graph's selection trainable() | global_step() names 1 variable that checkpoint "
        f"'{report.output}' lacks: opt/global_step; pass the graph the checkpoint was written from"
    )


def test_refuses_to_overwrite_or_to_write_over_the_source(tmp_path, adam_checkpoint):
    prefix, _, _, _ = adam_checkpoint
    output = str(tmp_path / "out")
    slim(prefix, "trainable()", output)
    with pytest.raises(FileExistsError) as error:
        slim(prefix, "trainable()", output)
    assert str(error.value) == (
        f"checkpoint '{output}' already exists ({output}.data-00000-of-00001); pass overwrite=True to replace it"
    )
    replaced = slim(prefix, "scope('fc')", output, overwrite=True)
    assert sorted(tf.train.load_checkpoint(output).get_variable_to_shape_map()) == ["fc/b", "fc/w"]
    assert replaced.kept == ("fc/b", "fc/w")
    with pytest.raises(ValueError) as error:
        slim(prefix, "trainable()", prefix)
    assert str(error.value) == f"output '{prefix}' is the source checkpoint '{prefix}'; write to a new path"
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith(".")) == []  # no workspace left behind


def test_memory_is_bounded_by_two_tensors_not_the_checkpoint(tmp_path):
    """Eight 4 MB tensors and a slot: the peak of traced allocations (numpy reports its buffers to
    tracemalloc) stays near a tensor and a copy plus the bounded piece checksums copy, not the 36 MB
    checkpoint."""
    import tracemalloc

    big = [np.full((1024, 1024), i, np.float32) for i in range(8)]  # 4 MB each
    names = [f"layer_{i}/w" for i in range(8)] + ["layer_0/w/Adam", "step"]
    tensors = big + [np.ones((1024, 1024), np.float32), np.int64(7)]
    source = str(tmp_path / "big")
    tf.raw_ops.SaveV2(prefix=source, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)
    megabyte = 2**20
    tracemalloc.start()
    try:
        report = slim(source, "~slots()", str(tmp_path / "small"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.data_files == 1
    assert peak <= 2 * 4 * megabyte + 4 * megabyte + megabyte, peak  # a tensor, a copy, a checksum piece
    assert sum(t.nbytes for t in tensors) >= 2.5 * peak
    reader = tf.train.load_checkpoint(report.output)
    for name, value in zip(names, tensors):
        if name != "layer_0/w/Adam":
            assert np.array_equal(reader.get_tensor(name), value)
    assert sorted(os.listdir(tmp_path)) == [
        "big.data-00000-of-00001", "big.index", "checkpoint", "small.data-00000-of-00001", "small.index",
        "small.subset.json"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == report.output
