"""``subsetsaver convert``: TensorFlow checkpoint -> portable .npz (with --keep) and back to a checkpoint
that tf.compat.v1.train.Saver restores, bit for bit, partitioned variables included."""

import os

import graphs
import numpy as np
import tensorflow as tf

from subsetsaver import portable
from subsetsaver.formats import npz as npzfile
from subsetsaver.tools import convert

v1 = tf.compat.v1


def trained_session(built, steps=1):
    with built.graph.as_default():
        init = v1.global_variables_initializer()
        saver = v1.train.Saver()
    sess = v1.Session(graph=built.graph)
    sess.run(init)
    for step in range(steps):
        sess.run(built.tensors["train_op"], graphs.random_feed(built, seed=step))
    return sess, saver


def all_values(sess, built):
    variables = graphs.variable_map(built.graph)
    return dict(zip(variables, sess.run(list(variables.values()))))


def small_cnn(seed=0):
    return graphs.mnist_cnn(channels=(4, 8), fc_units=16, input_hw=8, seed=seed)


def test_checkpoint_to_npz_with_and_without_keep(tmp_path, run_cli):
    built = small_cnn()
    sess, saver = trained_session(built)
    with built.graph.as_default():  # Saver.save builds nothing, but checks eager mode
        prefix = saver.save(sess, str(tmp_path / "ckpt" / "model"), global_step=1, write_meta_graph=False)
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_shape_map())

    code, out, err = run_cli("convert", str(tmp_path / "ckpt"), str(tmp_path / "all.npz"))
    assert (code, err) == (0, "")
    total = sum(reader.get_tensor(n).nbytes for n in names)
    assert out == f"wrote portable file {tmp_path}/all.npz: 43 of 43 tensors, {format_size(total)} (from {prefix})\n"
    manifest, arrays = npzfile.read(str(tmp_path / "all.npz"))
    assert sorted(manifest.names) == names
    for name in names:
        assert arrays[name].tobytes() == reader.get_tensor(name).tobytes(), name

    code, out, _ = run_cli("convert", prefix, str(tmp_path / "slim.npz"), "--keep", "~slots()")
    assert code == 0 and out.startswith(f"wrote portable file {tmp_path}/slim.npz: 17 of 43 tensors")
    kept = npzfile.read_manifest(str(tmp_path / "slim.npz"))
    assert not [n for n in kept.names if n.endswith(("/Adam", "/Adam_1", "_power"))]
    assert kept.selector == "~slots()"


def format_size(count):
    from subsetsaver.selectors import format_bytes

    return format_bytes(count)


def test_npz_to_a_checkpoint_that_the_saver_restores(tmp_path, run_cli):
    built = small_cnn()
    sess, _ = trained_session(built, steps=2)
    expected = all_values(sess, built)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"))
    code, out, err = run_cli("convert", path, str(tmp_path / "restored"))
    assert (code, err) == (0, "")
    assert out.startswith(f"wrote checkpoint {tmp_path}/restored: 43 of 43 tensors")

    fresh = small_cnn(seed=5)
    with fresh.graph.as_default():
        saver = v1.train.Saver()
    with v1.Session(graph=fresh.graph) as fresh_sess:
        saver.restore(fresh_sess, str(tmp_path / "restored"))
        restored = all_values(fresh_sess, fresh)
    assert sorted(restored) == sorted(expected)
    for name, value in expected.items():
        assert restored[name].tobytes() == value.tobytes(), name


def test_partitioned_variables_convert_back_to_slices(tmp_path):
    built = graphs.partitioned_model()
    sess, _ = trained_session(built, steps=2)
    expected = all_values(sess, built)
    path = portable.save_npz(sess, str(tmp_path / "p.npz"))
    report = convert.npz_to_checkpoint(path, str(tmp_path / "p"))
    assert report.kept == npzfile.read_manifest(path).names and report.dropped == ()

    fresh = graphs.partitioned_model(seed=9)
    with fresh.graph.as_default():
        saver = v1.train.Saver()
    with v1.Session(graph=fresh.graph) as fresh_sess:
        saver.restore(fresh_sess, str(tmp_path / "p"))
        restored = all_values(fresh_sess, fresh)
    for name, value in expected.items():
        assert restored[name].tobytes() == value.tobytes(), name


def test_every_dtype_survives_npz_checkpoint_npz(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {}
    for name in npzfile.STORED_AS:
        dtype = npzfile.numpy_dtype(name)
        if name == "bool":
            arrays[name] = rng.integers(0, 2, 5).astype(bool)
        elif name in ("int4", "uint4"):
            arrays[name] = rng.integers(0, 8, 5).astype(dtype)
        else:
            arrays[name] = rng.integers(0, 256, 5 * dtype.itemsize, dtype=np.uint8).view(dtype)
    npzfile.write(str(tmp_path / "d.npz"), arrays)
    convert.npz_to_checkpoint(str(tmp_path / "d.npz"), str(tmp_path / "d"))
    convert.checkpoint_to_npz(str(tmp_path / "d"), str(tmp_path / "back.npz"))
    _, back = npzfile.read(str(tmp_path / "back.npz"))
    for name, value in arrays.items():
        assert back[name].dtype == value.dtype and back[name].tobytes() == value.tobytes(), name


def test_bad_input_ends_in_one_line(tmp_path, run_cli):
    graph = tf.Graph()
    with graph.as_default():
        v1.Variable(tf.constant(["a"]), name="vocab")
        v1.Variable(1.0, name="w")
        saver = v1.train.Saver()
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        prefix = saver.save(sess, str(tmp_path / "s"), write_meta_graph=False)
    code, out, err = run_cli("convert", prefix, str(tmp_path / "s.npz"))
    assert (code, out) == (2, "")
    assert err == (f"subsetsaver: error: portable files hold numeric tensors only; '{prefix}' has vocab "
                   "(string): leave them out, e.g. --keep \"everything() - name('vocab')\"\n")
    code, out, err = run_cli("convert", prefix, str(tmp_path / "s.npz"), "--keep", "everything() - name('vocab')")
    assert code == 0 and out.startswith(f"wrote portable file {tmp_path}/s.npz: 1 of 2 tensors")

    code, _, err = run_cli("convert", prefix, str(tmp_path / "out.bin"))
    assert (code, err) == (2, f"subsetsaver: error: output '{tmp_path}/out.bin' would be a checkpoint like its "
                              "source; name one ending in '.npz', '.safetensors', '.safetensors.index.json' or '.weights.h5' (to keep part of a checkpoint, use "
                              "`subsetsaver slim`); pass --to npz to write another format\n")
    code, _, err = run_cli("convert", str(tmp_path / "missing.npz"), str(tmp_path / "x"))
    assert (code, err) == (2, f"subsetsaver: error: no portable .npz checkpoint at '{tmp_path}/missing.npz'\n")
    assert not os.path.exists(tmp_path / "x.index")
