"""The file commands, and the commands that read a ``.meta`` file, where TensorFlow is not installed.

The tests marked ``without_tensorflow`` import no TensorFlow themselves: ``.ci/run`` runs them in a virtual
environment holding ``pip install .`` alone (the bucket test after ``pip install '.[gcs]'``). Each runs its
commands through the real entry point in a child process that reports whether ``tensorflow`` was ever
imported; where TensorFlow is installed that proves the commands never reach for it. Their inputs are
written by subsetsaver's own writer, or by TensorFlow elsewhere (``tests/data/written_by_tensorflow``,
see its ``make.py``). The last test, unmarked, has TensorFlow read back what a process without it wrote.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from cli_children import CHILD_PATH
from object_servers import Place, object_server
from test_layout_maps import bert_checkpoint

from subsetsaver import catalog
from subsetsaver.formats.tf import bundle as tf_bundle

HERE = os.path.dirname(os.path.abspath(__file__))
WRITTEN_BY_TENSORFLOW = os.path.join(HERE, "data", "written_by_tensorflow")
MNIST_META = os.path.join(WRITTEN_BY_TENSORFLOW, "mnist", "model-1.meta")
MNIST_CHECKPOINT = os.path.join(WRITTEN_BY_TENSORFLOW, "mnist", "model-1")
OBJECT_CHECKPOINT = os.path.join(WRITTEN_BY_TENSORFLOW, "object", "ckpt-1")
INSTALL_TF = "pip install 'subsetsaver[tf]'"

CHILD = textwrap.dedent("""
    import json, sys
    if sys.argv[2] == "block":
        sys.modules["tensorflow"] = None  # every import of tensorflow fails, as where it is not installed
    from cli_children import run_commands
    results = run_commands(json.loads(sys.argv[1]))
    print(json.dumps({"results": results, "tensorflow_imported": sys.modules.get("tensorflow") is not None}))
""")


def run_commands(*commands, block=False):
    """Run each of ``commands`` (argument lists) through ``subsetsaver.cli.main`` in one child process:
    [(exit code, stdout, stderr)], after checking that the child never imported TensorFlow. ``block``:
    every import of TensorFlow fails in the child, as where it is not installed."""
    argv = [[str(arg) for arg in command] for command in commands]
    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv), "block" if block else "allow"],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": CHILD_PATH})
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout)
    assert report["tensorflow_imported"] is False
    return [(result["code"], result["out"], result["err"]) for result in report["results"]]


def tensors(path) -> dict:
    """name -> array of the checkpoint or file at ``path``, read by subsetsaver's own readers."""
    source = catalog.source_path(path)
    return dict(catalog.read_tensors(source, catalog.file_catalog(source).ordered_names))


def assert_same_tensors(path, expected):
    found = tensors(path)
    assert sorted(found) == sorted(expected)
    for name, value in expected.items():
        assert (found[name].dtype, found[name].tobytes()) == (value.dtype, value.tobytes()), name


def trained_arrays(rng=None):
    """A small trained model's tensors: weights, Adam slots, beta powers, an embedding and the step."""
    rng = rng or np.random.default_rng(0)
    arrays = {"dense/w": rng.normal(size=(3, 4)).astype(np.float32), "dense/b": rng.normal(size=4).astype(np.float32),
              "emb": rng.normal(size=(3, 2)).astype(np.float32), "global_step": np.int64(7)}
    for name in ("dense/w", "dense/b", "emb"):
        arrays[f"{name}/Adam"] = rng.normal(size=arrays[name].shape).astype(np.float32)
        arrays[f"{name}/Adam_1"] = rng.random(size=arrays[name].shape).astype(np.float32)
    arrays.update({"beta1_power": np.float32(0.9 ** 7), "beta2_power": np.float32(0.999 ** 7)})
    return arrays


def written_checkpoint(directory, arrays) -> str:
    """The prefix of a TensorFlow checkpoint holding ``arrays``, written by subsetsaver in ``directory`` (which
    this process then holds as its writer: the commands write elsewhere)."""
    os.makedirs(directory)
    return tf_bundle.write(os.path.join(directory, "model"), arrays)


@pytest.mark.without_tensorflow
def test_inspect_and_a_conversion_between_every_two_formats(tmp_path):
    arrays = trained_arrays()
    prefix = written_checkpoint(tmp_path / "source", arrays)
    out = {name: str(tmp_path / name) for name in ("n.npz", "n.safetensors", "np.safetensors", "ns.npz")}
    out.update({name: str(tmp_path / name / "model") for name in ("nps", "nsp", "object")})
    commands = [["inspect", prefix, "--json"],
                ["convert", prefix, out["n.npz"]], ["convert", out["n.npz"], out["np.safetensors"]],
                ["convert", out["np.safetensors"], out["nps"]],
                ["convert", prefix, out["n.safetensors"]], ["convert", out["n.safetensors"], out["ns.npz"]],
                ["convert", out["ns.npz"], out["nsp"]],
                ["convert", OBJECT_CHECKPOINT, out["object"], "--to", "name"]]
    results = run_commands(*commands)
    assert [(code, err) for code, _, err in results] == [(0, "")] * len(commands)
    inspected = json.loads(results[0][1])
    assert [(t["name"], t["shape"], t["dtype"]) for t in inspected["tensors"]] == [
        (name, list(np.shape(arrays[name])), arrays[name].dtype.name) for name in sorted(arrays)]
    for written in ("n.npz", "np.safetensors", "nps", "n.safetensors", "ns.npz", "nsp"):
        assert_same_tensors(out[written], arrays)
    written = tensors(out["object"])
    assert sorted(written) == ["adam/learning_rate", "beta1_power", "beta2_power", "global_step", "net/dense/bias",
                               "net/dense/bias/Adam", "net/dense/bias/Adam_1", "net/dense/kernel",
                               "net/dense/kernel/Adam", "net/dense/kernel/Adam_1"]
    source = tensors(OBJECT_CHECKPOINT)
    assert written["net/dense/kernel"].tobytes() == source["net/dense/kernel"].tobytes()
    assert written["net/dense/kernel/Adam_1"].tobytes() == source["adam/net_dense_kernel_velocity"].tobytes()
    assert written["global_step"] == source["adam/iteration"] == 1


@pytest.mark.without_tensorflow
def test_diff_slim_and_rows(tmp_path):
    arrays = trained_arrays()
    a = written_checkpoint(tmp_path / "a", arrays)
    b = written_checkpoint(tmp_path / "b", {**arrays, "dense/b": arrays["dense/b"] + 1})
    (tmp_path / "old.txt").write_text("cat\ndog\nfish\n")
    (tmp_path / "new.txt").write_text("fish\nbird\ncat\n")
    slimmed, grown = str(tmp_path / "serve" / "model"), str(tmp_path / "grown" / "model")
    results = run_commands(["diff", a, b, "--json"], ["slim", a, "--keep", "~slots()", "-o", slimmed],
                           ["rewrite", a, "-o", grown, "--rows", f"emb={tmp_path / 'old.txt'}:{tmp_path / 'new.txt'}",
                            "--init", "zeros"])
    assert [(code, err) for code, _, err in results] == [(1, ""), (0, ""), (0, "")]
    statuses = {t["name"]: t["status"] for t in json.loads(results[0][1])["tensors"]}
    assert statuses == {name: "changed" if name == "dense/b" else "equal" for name in arrays}
    assert_same_tensors(slimmed, {name: arrays[name] for name in ("dense/w", "dense/b", "emb", "global_step")})
    rows = tensors(grown)
    for name in ("emb", "emb/Adam", "emb/Adam_1"):  # fish, bird (new: zeros), cat
        expected = np.stack([arrays[name][2], np.zeros(2, np.float32), arrays[name][0]])
        assert rows[name].tobytes() == expected.tobytes(), name
    assert rows["dense/w"].tobytes() == arrays["dense/w"].tobytes()


@pytest.mark.without_tensorflow
def test_a_layout_map(tmp_path):
    checkpoint, arrays = bert_checkpoint(tmp_path / "bert")
    [(code, out, err)] = run_commands(["convert", checkpoint, tmp_path / "hf", "--map", "bert-to-hf"])
    assert (code, err) == (0, ""), out
    hf = tensors(tmp_path / "hf" / "model.safetensors")
    kernel = arrays["bert/encoder/layer_0/attention/self/key/kernel"]
    assert hf["bert.encoder.layer.0.attention.self.key.weight"].tobytes() == np.ascontiguousarray(kernel.T).tobytes()
    assert len(hf) == len(arrays) - 2  # AdamWeightDecay's two slots dropped
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["hidden_size"] == 4


@pytest.mark.without_tensorflow
def test_select_audit_and_plan_read_a_meta_file_written_by_tensorflow():
    results = run_commands(["select", "--graph", MNIST_META, "bn_stats()", "--json"],
                           ["audit", "--graph", MNIST_META, "--save", "trainable()", "--json"],
                           ["plan", "--graph", MNIST_META, "--save", "trainable() | bn_stats()", "--checkpoint",
                            MNIST_CHECKPOINT, "--json"])
    assert [(code, err) for code, _, err in results] == [(0, ""), (1, ""), (0, "")]
    statistics = [f"conv_{k}/bn/conv_{k}/bn/moments/{moment}/ExponentialMovingAverage"
                  for k in (1, 2) for moment in ("Squeeze", "Squeeze_1")]
    assert [v["name"] for v in json.loads(results[0][1])["variables"]] == statistics
    findings = json.loads(results[1][1])["findings"]
    assert [(f["severity"], f["code"], f["variables"]) for f in findings] == [
        ("error", "unsaved-state", statistics[:2]), ("error", "unsaved-state", statistics[2:])]
    plan = json.loads(results[2][1])
    assert plan["check"]["ok"] is True
    assert [v["name"] for v in plan["saved"]] == ["conv_1/w", "conv_1/b", "conv_1/bn/beta", "conv_1/bn/gamma",
                                                  statistics[0], statistics[1], "conv_2/w", "conv_2/b",
                                                  "conv_2/bn/beta", "conv_2/bn/gamma", statistics[2], statistics[3],
                                                  "fc/w", "fc/b", "out/w", "out/b"]


@pytest.mark.without_tensorflow
def test_what_needs_tensorflow_says_so_in_one_line(tmp_path):
    [(code, out, err)] = run_commands(["convert", MNIST_CHECKPOINT, tmp_path / "tf2" / "ckpt", "--to", "object",
                                       "--model", "models.py:build"], block=True)
    assert (code, out) == (2, "")
    assert err == ("subsetsaver: error: writing a TF2 object-based checkpoint (convert --to object) needs TensorFlow "
                   f"(graph mode): {INSTALL_TF}\n")
    assert not os.path.exists(tmp_path / "tf2")
    calls = ["ss.plan('trainable()')", f"ss.save_npz(None, {str(tmp_path / 'm.npz')!r})",
             f"ss.restore_npz(None, {str(tmp_path / 'm.npz')!r})", f"ss.warm_start('trainable()', {MNIST_CHECKPOINT!r})",
             "ss.trainable().resolve()"]
    script = ("import sys; sys.modules['tensorflow'] = None\n"
              "import subsetsaver as ss\n"
              "for call in sys.argv[1:]:\n"
              "    try:\n"
              "        eval(call)\n"
              "    except ss.SubsetSaverError as error:\n"
              "        print(type(error).__name__, isinstance(error, ImportError), error)\n")
    done = subprocess.run([sys.executable, "-c", script, *calls], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(HERE)})
    needed_for = ["ss.plan", "ss.save_npz", "ss.restore_npz", "ss.warm_start", "reading the variables of a tf.Graph"]
    assert done.stdout.splitlines() == [f"TensorFlowNeededError True {what} needs TensorFlow (graph mode): {INSTALL_TF}"
                                        for what in needed_for]
    assert not os.path.exists(tmp_path / "m.npz")


@pytest.mark.without_tensorflow
def test_a_bucket_path(tmp_path):
    """With ``pip install '.[gcs]'``: a checkpoint written to gs:// (fake-gcs-server), inspected and read back."""
    place = Place("gs", object_server("gs"))
    arrays = trained_arrays()
    prefix = written_checkpoint(tmp_path / "source", arrays)
    back = str(tmp_path / "back" / "model")
    results = run_commands(["convert", prefix, place.url("model.npz")], ["inspect", place.url("model.npz"), "--json"],
                           ["convert", place.url("model.npz"), back])
    assert [(code, err) for code, _, err in results] == [(0, ""), (0, ""), (0, "")]
    assert [t["name"] for t in json.loads(results[1][1])["tensors"]] == sorted(arrays)
    assert_same_tensors(back, arrays)


def test_tensorflow_reads_what_a_process_without_it_wrote(tmp_path):
    """TensorFlow writes a checkpoint; a child where it cannot be imported slims and converts it both ways;
    TensorFlow restores what the child wrote, bit for bit, and finds it the latest of its directory."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        weights = v1.get_variable("dense/w", initializer=tf.reshape(tf.range(12.0), [3, 4]))
        bias = v1.get_variable("dense/b", initializer=tf.constant([1.0, 2.0, 3.0, 4.0]))
        loss = tf.reduce_sum(tf.matmul(tf.ones([2, 3]), weights) + bias)
        step = v1.train.get_or_create_global_step()
        train = v1.train.AdamOptimizer(0.1).minimize(loss, global_step=step)
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train)
            prefix = saver.save(sess, str(tmp_path / "train" / "model"), global_step=1)
            trained = {"dense/w": sess.run(weights), "dense/b": sess.run(bias)}
    slim_out, npz_out, back = str(tmp_path / "serve" / "model"), str(tmp_path / "m.npz"), str(tmp_path / "back" / "m")
    results = run_commands(["slim", prefix, "--keep", "~slots()", "-o", slim_out], ["convert", slim_out, npz_out],
                           ["convert", npz_out, back], block=True)
    assert [(code, err) for code, _, err in results] == [(0, ""), (0, ""), (0, "")]
    for written in (slim_out, back):
        reader = tf.train.load_checkpoint(written)
        assert sorted(reader.get_variable_to_shape_map()) == ["dense/b", "dense/w", "global_step"]
        for name, value in trained.items():
            np.testing.assert_array_equal(reader.get_tensor(name), value)
        assert reader.get_tensor("global_step") == 1
        assert tf.train.latest_checkpoint(written.rsplit("/", 1)[0]) == written
