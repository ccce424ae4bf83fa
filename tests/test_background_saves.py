"""Saves that don't stop training (planning/background.py): plan.save(blocking=False) and
ss.save_npz(blocking=False) on real graphs (Adam slots, batch norm, reference, resource and
partitioned variables): the files are byte-identical to a blocking save's, hold the values of
the moment the save was asked for while training goes on, are named latest only once written,
one save is in flight, and a background error comes back at the next save or wait()."""

import contextlib
import errno
import filecmp
import json
import os
import threading
import warnings
import zipfile

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver.errors import CheckpointWriteError, RestoreOpsMissingError, UninitializedVariablesError
from subsetsaver.formats.npz.format import MANIFEST_MEMBER
from subsetsaver.planning import PendingSave, background

v1 = tf.compat.v1
SMALL = dict(channels=(4, 8), fc_units=16, input_hw=12)
SUBSET = ss.trainable() | ss.bn_stats() | ss.slots() | ss.global_step()
TF_FILES = (".index", ".data-00000-of-00001")


def values_of(sess, plan) -> dict:
    """Each saved variable's whole value (partitions joined), fetched now."""
    parts = {name: plan.catalog.variables([name]) for name in plan.saved_names}
    fetched = sess.run(parts)
    joined = {}
    for name, values in fetched.items():
        infos = [variable._get_save_slice_info() for variable in parts[name]]
        if infos[0] is None:
            joined[name] = values[0]
            continue
        whole = np.empty(infos[0].full_shape, values[0].dtype)
        for info, value in zip(infos, values):
            whole[tuple(slice(o, o + n) for o, n in zip(info.var_offset, value.shape))] = value
        joined[name] = whole
    return joined


def checkpoint_values(prefix) -> dict:
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def assert_bit_equal(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype and actual[name].tobytes() == value.tobytes(), name


def same_npz(a, b) -> bool:
    """The same members with the same bytes, and the same manifest but for when it was written."""
    with zipfile.ZipFile(a) as first, zipfile.ZipFile(b) as second:
        members = [[(i.filename, i.CRC, i.file_size, i.header_offset) for i in z.infolist()
                    if i.filename != MANIFEST_MEMBER] for z in (first, second)]
        manifests = [json.loads(z.read(MANIFEST_MEMBER)) for z in (first, second)]
    for manifest in manifests:
        manifest.pop("written")
    return members[0] == members[1] and manifests[0] == manifests[1]


def trained(built, plan, sess, steps=2):
    feed = graphs.random_feed(built, batch_size=4)
    plan.restore_or_initialize(sess, None)
    for _ in range(steps):
        sess.run(built.tensors["train_op"], feed)
    return feed


@contextlib.contextmanager
def held_writes(monkeypatch):
    """Background bundle writes wait for the event the block gets (set it to let them go)."""
    release = threading.Event()
    original = background.bundle.BundleWriter

    class HeldWriter(original):
        def __enter__(self):
            release.wait(120)
            return super().__enter__()

    monkeypatch.setattr(background.bundle, "BundleWriter", HeldWriter)
    try:
        yield release
    finally:
        release.set()


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
def test_files_are_those_of_a_blocking_save_and_hold_the_values_of_the_moment_asked(tmp_path, resource):
    built = graphs.mnist_cnn(**SMALL, resource=resource)
    plan = ss.plan(SUBSET, built.graph)
    built.graph.finalize()
    version = built.graph.version
    (tmp_path / "blocking").mkdir()
    (tmp_path / "background").mkdir()
    with v1.Session(graph=built.graph) as sess:
        feed = trained(built, plan, sess)
        step = v1.train.get_global_step(built.graph)
        at_save = values_of(sess, plan)
        blocking = plan.save(sess, str(tmp_path / "blocking" / "model"), global_step=step)
        pending = plan.save(sess, str(tmp_path / "background" / "model"), global_step=step, blocking=False)
        for _ in range(3):  # training changes every saved variable while (or before) the file is written
            sess.run(built.tensors["train_op"], feed)
        assert pending.wait() == str(tmp_path / "background" / "model-2")
        assert not np.array_equal(values_of(sess, plan)["conv_1/w"], at_save["conv_1/w"])
    assert built.graph.version == version  # no op was built by the saves
    for suffix in TF_FILES:
        assert filecmp.cmp(blocking + suffix, pending.path + suffix, shallow=False), suffix
    assert_bit_equal(checkpoint_values(pending.path), at_save)
    assert sorted(os.listdir(tmp_path / "background")) == [
        "checkpoint", "model-2.data-00000-of-00001", "model-2.index", "model-2.meta", "model-2.subset.json"]
    assert tf.train.latest_checkpoint(str(tmp_path / "background")) == pending.path
    restored = graphs.mnist_cnn(**SMALL, resource=resource)
    plan_again = ss.plan(SUBSET, restored.graph)
    with v1.Session(graph=restored.graph) as sess:
        report = plan_again.restore_or_initialize(sess, str(tmp_path / "background"))
        assert report.checkpoint == pending.path
        assert_bit_equal(values_of(sess, plan_again), at_save)


def test_partitioned_variables_are_written_as_a_saver_writes_their_slices(tmp_path):
    built = graphs.partitioned_model(num_shards=3, opt_scope=None)
    plan = ss.plan(ss.everything(), built.graph)
    with v1.Session(graph=built.graph) as sess:
        trained(built, plan, sess)
        blocking = plan.save(sess, str(tmp_path / "a"))
        pending = plan.save(sess, str(tmp_path / "b"), blocking=False)
        assert pending.wait() == str(tmp_path / "b")
        at_save = values_of(sess, plan)
    for suffix in TF_FILES:
        assert filecmp.cmp(blocking + suffix, pending.path + suffix, shallow=False), suffix
    assert_bit_equal(checkpoint_values(pending.path), at_save)


def test_npz_backend_and_save_npz_write_what_a_blocking_save_writes(tmp_path):
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph, backend="npz")
    ss.portable.prepare_npz(SUBSET, built.graph)
    built.graph.finalize()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with v1.Session(graph=built.graph) as sess:
        feed = trained(built, plan, sess)
        blocking = plan.save(sess, str(tmp_path / "a" / "model"), global_step=2)
        portable = ss.save_npz(sess, str(tmp_path / "a.npz"), SUBSET)
        pending = plan.save(sess, str(tmp_path / "b" / "model"), global_step=2, blocking=False)
        portable_pending = ss.save_npz(sess, str(tmp_path / "b.npz"), SUBSET, blocking=False)
        sess.run(built.tensors["train_op"], feed)
        assert pending.wait() == str(tmp_path / "b" / "model-2.npz")
        assert portable_pending.wait() == str(tmp_path / "b.npz")
    assert same_npz(blocking, pending.path)
    assert same_npz(portable, portable_pending.path)
    assert plan.backend.latest_checkpoint(str(tmp_path / "b")) == pending.path


def test_the_checkpoint_is_named_latest_only_once_written_and_one_save_is_in_flight(tmp_path, monkeypatch):
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph, max_to_keep=2)
    with v1.Session(graph=built.graph) as sess, held_writes(monkeypatch) as release:
        trained(built, plan, sess)
        first = plan.save(sess, str(tmp_path / "model"), global_step=1)
        pending = plan.save(sess, str(tmp_path / "model"), global_step=2, blocking=False)
        assert not pending.done() and repr(pending) == f"<PendingSave '{tmp_path}/model-2' writing>"
        assert tf.train.latest_checkpoint(str(tmp_path)) == first
        with pytest.warns(ss.SubsetSaverWarning) as caught:
            skipped = plan.save(sess, str(tmp_path / "model"), global_step=3, blocking=False, if_busy="skip")
        assert [str(w.message) for w in caught] == [
            "a background save is still being written; this save was skipped (if_busy='skip')"]
        assert skipped.skipped and skipped.wait() is None and skipped.path is None
        release.set()
        third = plan.save(sess, str(tmp_path / "model"), global_step=3, blocking=False)  # waits for model-2
        assert pending.done() and pending.wait() == str(tmp_path / "model-2")
        assert plan.wait() == third.path == str(tmp_path / "model-3")
        assert plan.wait() is None  # nothing in flight
    assert tf.train.latest_checkpoint(str(tmp_path)) == third.path
    assert sorted(os.listdir(tmp_path)) == ["checkpoint"] + [
        f"model-{step}{suffix}" for step in (2, 3)
        for suffix in (".data-00000-of-00001", ".index", ".meta", ".subset.json")]  # max_to_keep=2


def test_an_error_in_the_background_comes_back_at_wait_and_the_next_save_works(tmp_path, monkeypatch):
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph)

    class FullDisk(background.bundle.BundleWriter):
        def add(self, name, array):
            raise OSError(errno.ENOSPC, "No space left on device")

    with v1.Session(graph=built.graph) as sess:
        trained(built, plan, sess)
        first = plan.save(sess, str(tmp_path / "model"), global_step=1)
        monkeypatch.setattr(background.bundle, "BundleWriter", FullDisk)
        pending = plan.save(sess, str(tmp_path / "model"), global_step=2, blocking=False)
        with pytest.raises(CheckpointWriteError) as caught:
            pending.wait()
        sizes = plan.sizes
        assert str(caught.value) == (
            f"cannot save '{tmp_path}/model' (step 2): no space left on device; it needs about "
            f"{sizes.checkpoint_bytes:,} bytes (.data {sizes.data_bytes:,}, .index ~{sizes.index_bytes:,}); nothing "
            f"was left under its name and the latest checkpoint is still '{first}'; free space or save elsewhere")
        assert pending.wait() == pending.path  # raised once
        plan.save(sess, str(tmp_path / "model"), global_step=3, blocking=False)
        with pytest.raises(CheckpointWriteError):  # the next save raises it before doing anything
            plan.save(sess, str(tmp_path / "model"), global_step=4)
        monkeypatch.undo()
        assert plan.save(sess, str(tmp_path / "model"), global_step=5, blocking=False).wait() == \
            str(tmp_path / "model-5")  # the queues were emptied by the failed saves
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model-5")
    assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]


def test_saving_again_under_one_prefix_replaces_it_whole(tmp_path):
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph)
    with v1.Session(graph=built.graph) as sess:
        feed = trained(built, plan, sess)
        plan.save(sess, str(tmp_path / "model"), blocking=False).wait()
        sess.run(built.tensors["train_op"], feed)
        at_save = values_of(sess, plan)
        assert plan.save(sess, str(tmp_path / "model"), blocking=False).wait() == str(tmp_path / "model")
    assert_bit_equal(checkpoint_values(str(tmp_path / "model")), at_save)
    # the replacing checkpoint takes a shard count the replaced one did not use (formats/publish.py)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.data-00000-of-00002", "model.data-00001-of-00002",
                                            "model.index", "model.meta", "model.subset.json"]


def test_bad_requests_fail_before_any_snapshot(tmp_path):
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph)
    finalized = graphs.mnist_cnn(**SMALL)
    finalized.graph.finalize()
    with v1.Session(graph=built.graph) as sess:
        with pytest.raises(UninitializedVariablesError) as caught:
            plan.save(sess, str(tmp_path / "model"), blocking=False)
        assert str(caught.value).startswith("cannot save: ") and str(caught.value).endswith(
            "; run plan.restore_or_initialize(sess, None) first")
        trained(built, plan, sess, steps=0)
        with pytest.raises(ValueError) as caught:
            plan.save(sess, str(tmp_path / "model"), blocking=False, if_busy="queue")
        assert str(caught.value) == "if_busy='queue' is not one of 'wait', 'skip'"
        with pytest.raises(TypeError) as caught:
            plan.save(sess, str(tmp_path / "model"), blocking=False, save_debug_info=True)
        assert str(caught.value) == ("a save with blocking=False does not take 'save_debug_info'; it takes "
                                     "write_meta_graph, meta_graph_suffix, write_state, latest_filename, "
                                     "strip_default_attrs")
        assert os.listdir(tmp_path) == []
        assert plan.save(sess, str(tmp_path / "model"), blocking=False).wait() == str(tmp_path / "model")
    with v1.Session(graph=finalized.graph) as sess:
        with pytest.raises(RestoreOpsMissingError) as caught:
            ss.save_npz(sess, str(tmp_path / "m.npz"), blocking=False)
        assert str(caught.value) == (
            "the graph is finalized and has no snapshot ops for a save with blocking=False of this selection; "
            "call ss.portable.prepare_npz(sel, graph) before graph.finalize()")


def test_a_failed_snapshot_queues_nothing_so_the_next_save_does_not_block(tmp_path, monkeypatch):
    monkeypatch.setattr(background, "RUN_BYTES", 1024)  # a queue per variable or so
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph)
    assert len(plan._background.queues.runs) > 10
    late = [v for v in plan.saved if v.op.name == "out/b"]
    config = v1.ConfigProto(operation_timeout_in_ms=120_000)  # a full queue fails the save instead of hanging
    with v1.Session(graph=built.graph, config=config) as sess:
        sess.run([v.initializer for v in plan.saved if v not in late])
        with pytest.raises(UninitializedVariablesError) as caught:
            plan.save(sess, str(tmp_path / "model"), blocking=False)
        assert str(caught.value) == ("cannot save: 1 variable not initialized: out/b; "
                                     "run plan.restore_or_initialize(sess, None) first")
        sess.run(late[0].initializer)
        assert plan.save(sess, str(tmp_path / "model"), blocking=False).wait() == str(tmp_path / "model")


def test_a_pending_save_says_how_long_it_blocked_and_the_plan_estimates_the_next(tmp_path):
    built = graphs.mnist_cnn(**SMALL)
    plan = ss.plan(SUBSET, built.graph)
    with v1.Session(graph=built.graph) as sess:
        trained(built, plan, sess)
        assert plan.estimated_save_secs() is None
        pending = plan.save(sess, str(tmp_path / "model"), blocking=False)
        assert isinstance(pending, PendingSave) and pending.blocked_secs > 0
        pending.wait()
        assert plan.estimated_save_secs() > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan.close()
