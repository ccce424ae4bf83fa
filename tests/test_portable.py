"""Graph-mode portable checkpoints: exact resumption in a fresh process, one session.run each way,
no graph growth, validation before any variable changes, every dtype, ram://, partitions, and
``plan(sel, backend='npz')``."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import planning as planner
from subsetsaver import portable
from subsetsaver.formats import npz as npzfile

v1 = tf.compat.v1
HERE = os.path.dirname(os.path.abspath(__file__))


def small_cnn(**options):
    return graphs.mnist_cnn(channels=(4, 8), fc_units=16, input_hw=8, **options)


def initialized_session(built):
    with built.graph.as_default():
        init = v1.global_variables_initializer()
    sess = v1.Session(graph=built.graph)
    sess.run(init)
    return sess


def values(sess, built):
    variables = graphs.variable_map(built.graph)
    fetched = sess.run(list(variables.values()))
    return dict(zip(variables, fetched))


def assert_same_values(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes(), name


class CountingSession:
    """A session that counts its run calls."""

    def __init__(self, sess):
        self._sess, self.runs = sess, 0
        self.graph = sess.graph

    def run(self, *args, **kwargs):
        self.runs += 1
        return self._sess.run(*args, **kwargs)


# ---------------------------------------------------------------------------------
# Exact resumption in a fresh process
# ---------------------------------------------------------------------------------

RESUME_STEPS = 4

RESUME_SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    sys.path.insert(0, sys.argv[1])
    import numpy as np, tensorflow as tf
    import graphs, subsetsaver as ss
    from test_portable import train_resumable

    train_resumable(restore_from=sys.argv[2], out=sys.argv[3], seed=1)
    """
)


def train_resumable(*, out, save_to=None, restore_from=None, seed=0):
    """Train the small CNN with Adam on fixed feeds, deterministically (one thread).

    ``save_to``: train RESUME_STEPS steps, save everything(), go on. ``restore_from``:
    restore instead of those steps. Then two more steps; the losses and every final
    value go to the .npz ``out``.
    """
    built = small_cnn(seed=seed)
    config = v1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
    feeds = [graphs.random_feed(built, batch_size=8, seed=step) for step in range(RESUME_STEPS + 2)]
    with built.graph.as_default():
        init = v1.global_variables_initializer()
    with v1.Session(graph=built.graph, config=config) as sess:
        sess.run(init)
        if restore_from is None:
            for step in range(RESUME_STEPS):
                sess.run(built.tensors["train_op"], feeds[step])
            portable.save_npz(sess, save_to, ss.everything())
        else:
            portable.restore_npz(sess, restore_from)
        losses = [sess.run([built.tensors["train_op"], built.tensors["loss"]], feeds[step])[1]
                  for step in (RESUME_STEPS, RESUME_STEPS + 1)]
        final = values(sess, built)
    np.savez(out, losses=np.array(losses), **{name.replace("/", "|"): value for name, value in final.items()})


def run_script(tmp_path, script, *args):
    path = tmp_path / "script.py"
    path.write_text(script)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, str(path), HERE, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_adam_training_resumes_bit_exact_in_a_fresh_process(tmp_path):
    checkpoint = str(tmp_path / "model.npz")
    train_resumable(save_to=checkpoint, out=str(tmp_path / "straight.npz"))
    run_script(tmp_path, RESUME_SCRIPT, checkpoint, tmp_path / "resumed.npz")
    with np.load(tmp_path / "straight.npz") as straight, np.load(tmp_path / "resumed.npz") as resumed:
        assert sorted(straight.files) == sorted(resumed.files)
        assert len(straight.files) == 44  # 43 variables (weights, bn EMAs, Adam m/v, beta powers, step) + losses
        for key in straight.files:
            assert straight[key].tobytes() == resumed[key].tobytes(), key
        assert int(resumed["opt|global_step"]) == RESUME_STEPS + 2
        assert not np.array_equal(straight["losses"][0], straight["losses"][1])


# ---------------------------------------------------------------------------------
# One session.run, ops built once
# ---------------------------------------------------------------------------------


def test_save_and_restore_each_take_one_session_run(tmp_path):
    built = small_cnn()
    sess = initialized_session(built)
    sess.run(built.tensors["train_op"], graphs.random_feed(built))
    saved = values(sess, built)
    counting = CountingSession(sess)
    path = portable.save_npz(counting, str(tmp_path / "m.npz"))
    assert counting.runs == 1
    sess.run(built.graph.get_operation_by_name("init"))
    counting.runs = 0
    report = portable.restore_npz(counting, path)
    assert counting.runs == 1
    assert report.complete and len(report.restored) == 43
    assert_same_values(values(sess, built), saved)


def test_restores_do_not_grow_the_graph_and_work_after_finalize(tmp_path):
    built = small_cnn()
    sess = initialized_session(built)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"))
    assert portable.prepare_npz(ss.everything(), built.graph) == 43
    built.graph.finalize()
    version = built.graph.version
    for _ in range(100):
        portable.restore_npz(sess, path)
    assert built.graph.version == version


def test_a_finalized_graph_without_prepared_ops_says_how_to_fix_it(tmp_path):
    built = small_cnn()
    sess = initialized_session(built)
    expected = values(sess, built)
    built.graph.finalize()
    counting = CountingSession(sess)
    path = portable.save_npz(counting, str(tmp_path / "m.npz"))  # needs no new op: fetches the variables
    assert counting.runs == 1
    _, arrays = npzfile.read(path)
    assert all(arrays[name].tobytes() == value.tobytes() for name, value in expected.items())
    with pytest.raises(ss.RestoreOpsMissingError) as error:
        portable.restore_npz(sess, path)
    assert str(error.value) == (
        "the graph is finalized and has no npz restore ops for these 43 variables (conv_1/w, conv_1/b, "
        "conv_1/bn/beta, conv_1/bn/gamma, conv_1/bn/conv_1/bn/moments/Squeeze/ExponentialMovingAverage, ...); call "
        "ss.portable.prepare_npz(sel, graph) (or build ss.plan(sel, graph, backend='npz')) before graph.finalize()"
    )


# ---------------------------------------------------------------------------------
# Validation first: mismatches and damage change no variable
# ---------------------------------------------------------------------------------


def test_strict_restore_of_another_selection_raises_and_changes_nothing(tmp_path):
    built = small_cnn()
    sess = initialized_session(built)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"), ss.trainable())
    sess.run(built.tensors["train_op"], graphs.random_feed(built))
    before = values(sess, built)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        portable.restore_npz(sess, path, ss.trainable() | ss.global_step())
    assert str(error.value) == (
        f"portable checkpoint '{path}' does not match the selection trainable() | global_step(): 1 missing\n"
        "  missing: opt/global_step, expected [] int64\n"
        "the file was saved with selector trainable()\n"
        "no variable was changed; fix: pass strict=False to restore the 12 variables both hold, or a sel that "
        "matches the file"
    )
    assert [p.kind for p in error.value.problems] == ["missing"]
    assert_same_values(values(sess, built), before)
    report = portable.restore_npz(sess, path, ss.trainable() | ss.global_step(), strict=False)
    assert report.missing == ("opt/global_step",) and len(report.restored) == 12 and report.unexpected == ()


def test_non_strict_restore_reports_what_the_file_has_besides(tmp_path):
    built = small_cnn()
    sess = initialized_session(built)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"))
    report = portable.restore_npz(sess, path, ss.scope("fc"), strict=False)
    assert report.restored == ("fc/w", "fc/b")
    assert len(report.unexpected) == 41 and "opt/fc/w/Adam" in report.unexpected


def test_strict_restore_refuses_a_file_with_arrays_the_selection_does_not_choose(tmp_path):
    built = small_cnn()
    sess = initialized_session(built)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"), ss.scope("out") | ss.global_step())
    sess.run(built.graph.get_operation_by_name("init"))
    before = values(sess, built)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        portable.restore_npz(sess, path, ss.scope("out"))
    assert str(error.value) == (
        f"portable checkpoint '{path}' does not match the selection scope('out'): 1 not chosen\n"
        "  not chosen: opt/global_step [] int64\n"
        "the file was saved with selector scope('out') | global_step()\n"
        "no variable was changed; fix: pass strict=False to restore the 2 variables both hold, or a sel that "
        "matches the file"
    )
    assert error.value.problems == ()
    assert_same_values(values(sess, built), before)


def test_every_array_is_checksummed_whatever_its_size(tmp_path):
    """Arrays from 1 byte to several MiB (hashed in worker threads from 1 MiB on): one flipped bit
    in any of them is caught, and nothing is assigned."""
    graph = tf.Graph()
    with graph.as_default():
        sizes = {"tiny": (1,), "small": (1000,), "just_under": ((1 << 20) // 4 - 1,), "one_mib": ((1 << 20) // 4,),
                 "large": (3 << 20,)}
        variables = {name: v1.Variable(tf.fill(shape, float(index + 2)), name=name)  # distinct bytes per array
                     for index, (name, shape) in enumerate(sizes.items())}
        init = v1.global_variables_initializer()
    sess = v1.Session(graph=graph)
    sess.run(init)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"))
    pristine = open(path, "rb").read()
    for name in sizes:
        data = bytearray(pristine)
        start = data.index(sess.run(variables[name]).tobytes())
        data[start + variables[name].shape.num_elements() * 2] ^= 0x01  # inside the array's bytes
        damaged = tmp_path / f"damaged-{name}.npz"
        damaged.write_bytes(bytes(data))
        with pytest.raises(ss.CorruptCheckpointError) as error:
            portable.restore_npz(sess, str(damaged))
        assert f"checksum mismatch for array '{name}'" in str(error.value)
        with pytest.raises(ss.CorruptCheckpointError) as error:
            npzfile.read(str(damaged))
        assert f"checksum mismatch for array '{name}'" in str(error.value)


def test_shape_mismatches_are_listed_before_anything_changes(tmp_path):
    saved_from = small_cnn()
    sess = initialized_session(saved_from)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"), ss.scope("out"))
    other = graphs.mnist_cnn(channels=(4, 8), fc_units=16, input_hw=8, num_classes=3)
    other_sess = initialized_session(other)
    before = values(other_sess, other)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        portable.restore_npz(other_sess, path, ss.scope("out"))
    assert str(error.value).splitlines()[:3] == [
        f"portable checkpoint '{path}' does not match the selection scope('out'): 2 shape/dtype mismatches",
        "  shape mismatch: out/w, expected [16, 3] float32, checkpoint has [16, 10] float32",
        "  shape mismatch: out/b, expected [3] float32, checkpoint has [10] float32",
    ]
    assert_same_values(values(other_sess, other), before)
    report = portable.restore_npz(other_sess, path, ss.scope("out"), strict=False)
    assert report.restored == () and [p.name for p in report.mismatched] == ["out/w", "out/b"]


def damage(path, how, value):
    data = bytearray(open(path, "rb").read())
    if how == "truncated":
        data = data[: len(data) * 2 // 3]
    else:  # flip one bit in the middle of the array ``value``
        start = data.index(value.tobytes())
        data[start + value.nbytes // 2] ^= 0x10
    with open(path, "wb") as handle:
        handle.write(data)


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_a_damaged_file_changes_no_variable(tmp_path, how, monkeypatch):
    built = small_cnn()
    sess = initialized_session(built)
    sess.run(built.tensors["train_op"], graphs.random_feed(built))
    path = portable.save_npz(sess, str(tmp_path / "m.npz"))
    saved_fc = values(sess, built)["fc/w"]
    sess.run(built.graph.get_operation_by_name("init"))
    before = values(sess, built)
    damage(path, how, saved_fc)
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, lambda *a, **k: pytest.fail("unpickled"))
    with pytest.raises(ss.CorruptCheckpointError) as error:
        portable.restore_npz(sess, path)
    expected = "not a complete npz archive" if how == "truncated" else "checksum mismatch for array"
    assert str(error.value).startswith(f"'{path}'") and expected in str(error.value)
    assert_same_values(values(sess, built), before)


def test_save_and_restore_never_unpickle(tmp_path, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("something tried to unpickle")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, forbidden)
    monkeypatch.setattr(np, "load", forbidden)
    built = small_cnn()
    sess = initialized_session(built)
    path = portable.save_npz(sess, str(tmp_path / "m.npz"))
    assert len(portable.restore_npz(sess, path).restored) == 43


# ---------------------------------------------------------------------------------
# Dtypes, filesystems, partitions
# ---------------------------------------------------------------------------------

RESOURCE_ONLY = {"float8_e4m3fn", "float8_e5m2", "int4", "uint4"}  # TF's ref variables cannot hold these


def dtype_graph(resource):
    graph = tf.Graph()
    rng = np.random.default_rng(3)
    expected = {}
    with graph.as_default():
        for name in npzfile.STORED_AS:
            if not resource and name in RESOURCE_ONLY:
                continue
            dtype = npzfile.numpy_dtype(name)
            if name == "bool":
                value = rng.integers(0, 2, size=(2, 3)).astype(bool)
            elif name in ("int4", "uint4"):
                value = rng.integers(0 if name == "uint4" else -8, 8, size=(2, 3)).astype(dtype)
            else:
                value = rng.integers(0, 256, size=6 * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(2, 3)
            v1.Variable(tf.zeros([2, 3], dtype=tf.as_dtype(dtype)), name=f"v_{name}", use_resource=resource)
            expected[f"v_{name}"] = value
    return graph, expected


@pytest.mark.parametrize("resource", [True, False])
def test_every_numeric_dtype_round_trips_through_variables_bit_exact(tmp_path, resource):
    graph, expected = dtype_graph(resource)
    with graph.as_default():
        init = v1.global_variables_initializer()
    variables = {v.op.name: v for v in graph.get_collection("variables")}
    path = str(tmp_path / "d.npz")
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        npzfile.write(path, expected, selector="everything()")  # the file a save of these values writes
        portable.restore_npz(sess, path)
        restored = dict(zip(variables, sess.run(list(variables.values()))))
        portable.save_npz(sess, str(tmp_path / "again.npz"))
    for name, value in expected.items():
        assert restored[name].dtype == value.dtype and restored[name].tobytes() == value.tobytes(), name
    _, again = npzfile.read(str(tmp_path / "again.npz"))
    for name, value in expected.items():
        assert again[name].dtype == value.dtype and again[name].tobytes() == value.tobytes(), name
    assert len(expected) == (19 if resource else 15)


def test_string_variables_get_a_clear_error(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        v1.Variable(1.0, name="w")
        v1.Variable(tf.constant(["a", "b"]), name="vocab")
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        with pytest.raises(npzfile.UnsupportedDtypeError) as error:
            portable.save_npz(sess, str(tmp_path / "s.npz"))
    assert str(error.value) == (
        "portable checkpoints hold numeric variables only; cannot store vocab (string): leave it out of the "
        "selection (e.g. sel - name('vocab')) or use the 'tf' backend"
    )
    assert os.listdir(tmp_path) == []


def test_ram_filesystem_save_and_restore():
    built = small_cnn()
    sess = initialized_session(built)
    sess.run(built.tensors["train_op"], graphs.random_feed(built))
    saved = values(sess, built)
    path = portable.save_npz(sess, "ram://portable_test/model.npz")
    sess.run(built.graph.get_operation_by_name("init"))
    portable.restore_npz(sess, path)
    assert_same_values(values(sess, built), saved)


def test_partitioned_variables_are_stored_whole(tmp_path):
    built = graphs.partitioned_model()
    sess = initialized_session(built)
    sess.run(built.tensors["train_op"], graphs.random_feed(built))
    saved = values(sess, built)
    path = portable.save_npz(sess, str(tmp_path / "p.npz"))
    with np.load(path, allow_pickle=False) as opened:
        parts = [saved[name] for name in built.partitions["embed/emb"]]
        assert opened["embed.emb"].shape == (30, 4)
        assert opened["embed.emb"].tobytes() == np.concatenate(parts).tobytes()
    manifest = npzfile.read_manifest(path)
    # TF names each part's Adagrad slot on its own, with the full shape of the whole variable:
    assert manifest.entry("embed/emb/t_1/Adagrad").info == {"full_shape": [30, 4], "offset": [10, 0]}
    sess.run(built.graph.get_operation_by_name("init"))
    portable.restore_npz(sess, path)
    assert_same_values(values(sess, built), saved)


# ---------------------------------------------------------------------------------
# plan(sel, backend='npz')
# ---------------------------------------------------------------------------------


def test_plan_with_the_npz_backend_numbers_keeps_and_finds_the_latest(tmp_path):
    built = small_cnn()
    plan = ss_plan(ss.everything(), built.graph, max_to_keep=2)
    built.graph.finalize()
    directory = str(tmp_path)
    feed = graphs.random_feed(built)
    with v1.Session(graph=built.graph) as sess:
        assert plan.restore_or_initialize(sess, directory).checkpoint is None
        written = []
        for _ in range(3):
            sess.run(built.tensors["train_op"], feed)
            written.append(plan.save(sess, directory + "/model", global_step=built.tensors["global_step"]))
        assert written == [f"{directory}/model-{step}.npz" for step in (1, 2, 3)]
        assert sorted(os.listdir(directory)) == ["checkpoint_npz.json", "model-2.npz", "model-2.npz.subset.json",
                                                 "model-3.npz", "model-3.npz.subset.json"]
        state = json.loads(open(f"{directory}/checkpoint_npz.json").read())
        assert state == {"format": "subsetsaver.npz-state", "latest": "model-3.npz",
                         "kept": ["model-2.npz", "model-3.npz"]}
        saved = values(sess, built)
        sess.run(built.tensors["train_op"], feed)
        version = built.graph.version
        for _ in range(5):
            report = plan.restore_or_initialize(sess, directory)
        assert report.checkpoint == f"{directory}/model-3.npz" and len(report.restored) == 43
        assert built.graph.version == version
        assert_same_values(values(sess, built), saved)


def ss_plan(sel, graph, **options):
    return planner.plan(sel, graph, backend="npz", **options)


def test_latest_checkpoint_skips_partial_and_damaged_files(tmp_path):
    built = small_cnn()
    plan = ss_plan(ss.everything(), built.graph)
    directory = str(tmp_path)
    sess = initialized_session(built)
    good = plan.save(sess, directory + "/model", global_step=5)
    os.remove(directory + "/checkpoint_npz.json")
    with open(directory + "/model-9.npz", "wb") as handle:  # a file cut short by a crash of some other writer
        handle.write(open(good, "rb").read()[:500])
    with open(directory + "/model-12.npz.tmp-1-abcdef01", "wb") as handle:  # a temporary never renamed
        handle.write(b"partial")
    assert planner.NpzBackend.latest_checkpoint(directory) == good
    assert plan.restore_or_initialize(sess, directory).checkpoint == good
    assert plan.check(directory).ok


def test_plan_options_that_mean_nothing_for_npz_are_refused():
    built = small_cnn()
    with pytest.raises(TypeError) as error:
        ss_plan(ss.everything(), built.graph, sharded=True)
    assert str(error.value) == ("backend 'npz' does not take the Saver option 'sharded'; it takes max_to_keep, "
                                "pad_step_number, save_relative_paths, name, checksum")


def test_plan_remap_writes_checkpoint_names_and_shares_no_ops_by_mistake(tmp_path):
    built = small_cnn()
    plan = ss_plan(ss.everything(), built.graph, remap={"dense_head/": "fc/"})
    sess = initialized_session(built)
    sess.run(built.tensors["train_op"], graphs.random_feed(built))
    saved = values(sess, built)
    path = plan.save(sess, str(tmp_path / "model"))
    names = npzfile.read_manifest(path).names
    assert "dense_head/w" in names and "fc/w" not in names
    by_graph_names = portable.save_npz(sess, str(tmp_path / "plain.npz"))
    sess.run(built.graph.get_operation_by_name("init"))
    assert plan.restore_or_initialize(sess, path).checkpoint == path
    assert_same_values(values(sess, built), saved)
    sess.run(built.graph.get_operation_by_name("init"))
    portable.restore_npz(sess, by_graph_names)
    assert_same_values(values(sess, built), saved)
