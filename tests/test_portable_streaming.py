"""A portable save streams: runs of variables fetched while earlier ones are written, bounded memory,
no restore op built, and an abandoned save leaves nothing behind."""

import os
import threading

import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import portable
from subsetsaver.formats import npz as npzfile
from subsetsaver.formats.npz import writer as npz_writer
from subsetsaver.planning import npz_ops

v1 = tf.compat.v1
MB = 2**20


def large_graph(count=6, megabytes=12):
    graph = tf.Graph()
    with graph.as_default():
        for index in range(count):
            v1.get_variable(f"large/v{index}", [megabytes * MB // 4], initializer=v1.random_uniform_initializer(seed=index))
        for index in range(5):
            v1.get_variable(f"small/b{index}", [3], initializer=v1.constant_initializer(index))
        init = v1.global_variables_initializer()
    return graph, init


class LoggedSession:
    """A session that logs each run's fetches, beside a zip writer that logs each member written."""

    def __init__(self, sess, log):
        self._sess, self._log, self.graph = sess, log, sess.graph

    def run(self, fetches, *args, **kwargs):
        self._log.append(("fetch", len(fetches)))
        return self._sess.run(fetches, *args, **kwargs)


def test_a_save_writes_earlier_runs_before_it_fetches_the_last(tmp_path, monkeypatch):
    monkeypatch.setattr(npz_ops, "_RUN_BYTES", 16 * MB)  # a 12 MB variable per run (and the smalls with the first)
    monkeypatch.setattr(npz_ops, "_OVERLAP_BYTES", 0)    # no run is fetched while two are held
    graph, init = large_graph()
    log, added = [], npz_writer.ZipWriter.add
    monkeypatch.setattr(npz_writer.ZipWriter, "add",
                        lambda self, name, *rest: (log.append(("write", name)), added(self, name, *rest))[1])
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        expected = {v.op.name: value for v, value in zip(v1.global_variables(), sess.run(v1.global_variables()))}
        path = portable.save_npz(LoggedSession(sess, log), str(tmp_path / "model.npz"), graph=graph)
    fetches = [index for index, (kind, _) in enumerate(log) if kind == "fetch"]
    writes = [name for kind, name in log if kind == "write"]
    assert len(fetches) == 6  # one run per large variable, never one run for everything
    assert writes == [f"large.v{i}.npy" for i in range(6)] + [f"small.b{i}.npy" for i in range(5)] + \
        ["__subsetsaver__.json"]
    # With no overlap allowed, run k + 1 is fetched only after run k was written whole
    for run in range(1, 6):
        assert log.index(("write", f"large.v{run - 1}.npy")) < fetches[run], log
    _, arrays = npzfile.read(path)
    assert set(arrays) == set(expected)
    for name, value in expected.items():
        assert arrays[name].tobytes() == value.tobytes(), name


def test_the_first_save_builds_no_restore_op_and_the_first_restore_builds_them(tmp_path):
    graph, init = large_graph(count=2, megabytes=1)
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        before = {op.name for op in graph.get_operations()}
        portable.save_npz(sess, str(tmp_path / "a.npz"))
        built = [op for op in graph.get_operations() if op.name not in before]
        # the five small ones read into one stack, nothing else
        assert sorted(op.type for op in built) == ["Pack"] + ["ReadVariableOp"] * 5
        portable.save_npz(sess, str(tmp_path / "b.npz"))
        assert len(graph.get_operations()) == len(before) + 6  # built once
        portable.restore_npz(sess, str(tmp_path / "a.npz"))
        types = {op.type for op in graph.get_operations() if op.name not in before}
        assert {"Placeholder", "AssignVariableOp", "Pack"} <= types
        size = len(graph.get_operations())
        for _ in range(3):
            portable.save_npz(sess, str(tmp_path / "a.npz"))
            portable.restore_npz(sess, str(tmp_path / "a.npz"))
        assert len(graph.get_operations()) == size


def test_an_abandoned_save_leaves_no_file_no_thread_and_the_next_save_works(tmp_path, monkeypatch):
    monkeypatch.setattr(npz_ops, "_RUN_BYTES", 4 * MB)
    graph, init = large_graph(count=6, megabytes=3)
    target = tmp_path / "model.npz"
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        portable.save_npz(sess, str(target))
        before = target.read_bytes()
        threads = threading.active_count()
        added, calls = npz_writer.ZipWriter.add, []

        def failing(self, name, *rest):
            calls.append(name)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            return added(self, name, *rest)

        monkeypatch.setattr(npz_writer.ZipWriter, "add", failing)
        with pytest.raises(OSError, match="No space left on device"):
            portable.save_npz(sess, str(target))
        monkeypatch.setattr(npz_writer.ZipWriter, "add", added)
        assert threading.active_count() == threads  # the fetching worker stopped
        assert sorted(os.listdir(tmp_path)) == ["model.npz"] and target.read_bytes() == before
        sess.run(v1.assign_add(v1.global_variables()[0], tf.ones_like(v1.global_variables()[0])))
        portable.save_npz(sess, str(target))
        _, arrays = npzfile.read(str(target))
        assert np.array_equal(arrays["large/v0"], sess.run(v1.global_variables()[0]))


def test_a_plan_streams_its_saves_and_fetches_the_step_with_the_first_run(tmp_path, monkeypatch):
    monkeypatch.setattr(npz_ops, "_RUN_BYTES", 4 * MB)
    graph, init = large_graph(count=4, megabytes=3)
    with graph.as_default():
        step = v1.train.get_or_create_global_step()
        the_plan = ss.plan(ss.everything(), graph, backend="npz")
        bump = v1.assign_add(step, 7)
    graph.finalize()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(step.initializer)
        sess.run(bump)
        log = []
        path = the_plan.save(LoggedSession(sess, log), str(tmp_path / "model"), global_step=step)
        assert path == str(tmp_path / "model-7.npz") and len(log) == 4
        saved = dict(zip(the_plan.saved_names, sess.run(the_plan.saved)))
    _, arrays = npzfile.read(path)
    assert {name: arrays[name].tobytes() for name in saved} == {name: v.tobytes() for name, v in saved.items()}
