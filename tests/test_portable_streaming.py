"""A portable save streams: runs of variables fetched while earlier ones are written, bounded memory,
no restore op built, and an abandoned save leaves nothing behind."""

import dataclasses
import os
import threading
import zlib

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
    log, added, added_rows = [], npz_writer.ZipWriter.add, npz_writer.ZipWriter.add_rows
    monkeypatch.setattr(npz_writer.ZipWriter, "add",
                        lambda self, name, *rest: (log.append(("write", name)), added(self, name, *rest))[1])
    monkeypatch.setattr(npz_writer.ZipWriter, "add_rows", lambda self, layout, rows: (
        log.extend(("write", member) for member in layout.members), added_rows(self, layout, rows))[1])
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


def saved_building(sess, path):
    """``(names of the ops before, ops built)`` by a save of everything to ``path``."""
    before = {op.name for op in sess.graph.get_operations()}
    portable.save_npz(sess, path)
    return before, [op for op in sess.graph.get_operations() if op.name not in before]


def test_the_first_save_builds_no_restore_op_and_the_first_restore_builds_them(tmp_path):
    graph, init = large_graph(count=2, megabytes=1)
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        before, built = saved_building(sess, str(tmp_path / "a.npz"))
        # the five small ones into one stack, from the reads TensorFlow built with them: nothing else
        assert [op.type for op in built] == ["Pack"]
        assert [t.op.name for t in built[0].inputs] == [f"small/b{i}/Read/ReadVariableOp" for i in range(5)]
        portable.save_npz(sess, str(tmp_path / "b.npz"))
        assert len(graph.get_operations()) == len(before) + 1  # built once
        portable.restore_npz(sess, str(tmp_path / "a.npz"))
        types = {op.type for op in graph.get_operations() if op.name not in before}
        assert {"Placeholder", "AssignVariableOp", "Pack"} <= types
        size = len(graph.get_operations())
        for _ in range(3):
            portable.save_npz(sess, str(tmp_path / "a.npz"))
            portable.restore_npz(sess, str(tmp_path / "a.npz"))
        assert len(graph.get_operations()) == size


def test_a_stack_of_reference_variables_reads_their_snapshots_and_saves_their_values(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        values = [np.arange(3, dtype=np.float32) + 10 * index for index in range(4)]
        for index, value in enumerate(values):
            v1.get_variable(f"ref/b{index}", initializer=value, use_resource=False)
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        _, built = saved_building(sess, str(tmp_path / "ref.npz"))
    assert [op.type for op in built] == ["Pack"]
    assert [t.op.name for t in built[0].inputs] == [f"ref/b{i}/read" for i in range(4)]
    _, arrays = npzfile.read(str(tmp_path / "ref.npz"))
    assert [arrays[f"ref/b{i}"].tobytes() for i in range(4)] == [value.tobytes() for value in values]


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


# -- blocks of small arrays -------------------------------------------------------------


def test_rows_written_as_one_block_read_back_exactly_and_stay_a_valid_npz(tmp_path):
    import json
    import zipfile

    import ml_dtypes

    path = str(tmp_path / "rows.npz")
    for seed in range(3):  # the second and third writes reuse the cached layout: no stale bytes may leak
        rng = np.random.default_rng(seed)
        stack = rng.normal(size=(50, 3)).astype(np.float32)
        halves = rng.normal(size=(4, 5)).astype(ml_dtypes.bfloat16)
        names = tuple(f"scope_{i % 3}/{'x' * (i % 7)}v{i}" for i in range(50))  # names of many lengths
        manifest = npzfile.write(path, iter([("big/w", np.arange(70_000, dtype=np.float64)),
                                             npzfile.prepare_rows(names, stack),
                                             npzfile.prepare_rows((f"h/{i}" for i in range(4)), halves),
                                             ("tail/step", np.int64(seed))]))
        read_manifest, arrays = npzfile.read(path)
        assert read_manifest.names == manifest.names == ("big/w",) + names + tuple(f"h/{i}" for i in range(4)) + \
            ("tail/step",)
        for index, name in enumerate(names):
            assert arrays[name].tobytes() == stack[index].tobytes() and arrays[name].shape == (3,)
        assert arrays["h/2"].dtype == ml_dtypes.bfloat16 and arrays["h/2"].tobytes() == halves[2].tobytes()
        assert int(arrays["tail/step"]) == seed
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None
            raw = archive.read("__subsetsaver__.json")
            offsets = {info.filename: info.header_offset for info in archive.infolist()}
            crcs = {info.filename: info.CRC for info in archive.infolist()}
        assert json.loads(raw) == npzfile.format.manifest_to_json(manifest)
        with open(path, "rb") as handle:
            data = handle.read()
        for info_name, offset in offsets.items():  # local headers agree with the directory; data 64-byte aligned
            assert int.from_bytes(data[offset + 14:offset + 18], "little") == crcs[info_name], info_name
            name_length, extra_length = (int(n) for n in np.frombuffer(data[offset + 26:offset + 30], "<u2"))
            header_length = 0 if info_name.endswith(".json") else 10 + int.from_bytes(
                data[offset + 30 + name_length + extra_length + 8:offset + 30 + name_length + extra_length + 10],
                "little")
            if not info_name.endswith(".json"):
                assert (offset + 30 + name_length + extra_length + header_length) % 64 == 0, info_name
        with np.load(path, allow_pickle=False) as opened:
            assert opened["scope_1.xv1"].tobytes() == stack[1].tobytes()


def test_a_write_that_describes_nothing_writes_the_same_file(tmp_path):
    rng = np.random.default_rng(4)
    stack = rng.normal(size=(300, 2)).astype(np.float32)
    names = tuple(f"s/ünï{i}" if i % 5 == 0 else f"s/v{i}" for i in range(300))  # escaped in the JSON

    def items():
        return iter([("big/w", np.arange(9, dtype=np.float64)), npzfile.prepare_rows(names, stack)])

    described = npzfile.write(str(tmp_path / "a.npz"), items())
    assert npzfile.write(str(tmp_path / "b.npz"), items(), describe=False) is None
    empty = npzfile.prepare_rows((), np.zeros((0, 2), np.float32))  # a block of no rows adds nothing
    assert npzfile.write(str(tmp_path / "c.npz"), iter([empty, ("x", np.ones(1))])).names == ("x",)
    read_back = npzfile.read_manifest(str(tmp_path / "b.npz"))
    assert read_back.arrays == described.arrays
    assert dataclasses.replace(read_back, path="", written=None) == dataclasses.replace(described, path="",
                                                                                        written=None)
    assert [entry.checksum for entry in described.arrays[1:4]] == [
        f"{zlib.crc32(stack[i].tobytes(), zlib.crc32(npzfile.format.npy_header('<f4', (2,)))):08x}" for i in range(3)]


def test_rows_refuse_what_a_file_cannot_hold(tmp_path):
    stack = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"^3 names for rows of shape \[2, 3\]; give one name per row$"):
        npzfile.prepare_rows(("a", "b", "c"), stack)
    with pytest.raises(ValueError, match=r"^cannot write an array named '\.\./a': a '\.\.' part"):
        npzfile.prepare_rows(("../a", "b"), stack)
    with pytest.raises(ValueError, match=r"^array 'b' is written twice; names must be unique$"):
        npzfile.prepare_rows(("b", "b"), stack)
    with pytest.raises(ValueError, match=r"^array 'a' is written twice; names must be unique$"):
        npzfile.write(str(tmp_path / "bad.npz"), iter([("a", np.ones(1)), npzfile.prepare_rows(("a", "b"), stack)]))
    assert not (tmp_path / "bad.npz").exists()
