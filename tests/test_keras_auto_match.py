"""``match="auto"`` (the default of ``ss.keras.load_checkpoint``): an object-based checkpoint's weights
paired by the object graph's dependency paths, as TensorFlow 2 restores, with no remap; and TF1 slots
kept under the optimizer's variable scope (``opt/conv_1/w/Adam``) found by role."""

import os
import sys

import keras
import numpy as np
import tensorflow as tf
from test_keras_load_legacy import EAGER_SCRIPT, STEPS, TRAINABLE, assert_same_bytes, probe, run_legacy

import subsetsaver as ss
from subsetsaver import catalog


def keras_3_sequential():
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(4, 3, name="conv"),
        keras.layers.BatchNormalization(name="bn"),
        keras.layers.ReLU(name="relu"),
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(2, name="dense"),
    ], name="sequential")


def test_a_tf_keras_sequential_loads_into_the_same_keras_3_sequential_with_no_remap(tmp_path):
    saved = run_legacy(EAGER_SCRIPT, tmp_path)
    expected = saved["expected"]
    model, optimizer = keras_3_sequential(), keras.optimizers.Adam(0.01)
    assert [w.path for w in model.weights][:2] == ["sequential/conv/kernel", "sequential/conv/bias"]
    report = ss.keras.load_checkpoint(model, saved["prefix"], optimizer)

    names = ["conv/kernel", "conv/bias", "bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance",
             "dense/kernel", "dense/bias"]
    assert report.restored == {f"sequential/{name}": name for name in names}
    for weight in model.weights:
        assert_same_bytes(np.asarray(weight.numpy()), expected[weight.path.split("/", 1)[1]])
    state = {v.path.split("/", 1)[1]: np.array(v.numpy()) for v in optimizer.variables}
    for path in TRAINABLE:
        flat = "sequential_" + path.replace("/", "_")
        assert_same_bytes(state[f"{flat}_momentum"], expected[f"Adam/m/{path}"])
        assert_same_bytes(state[f"{flat}_velocity"], expected[f"Adam/v/{path}"])
    assert report.iterations == STEPS == int(optimizer.iterations.numpy())
    assert report.mismatched == () and report.unexpected == ()
    assert_same_bytes(np.asarray(model(probe(), training=False)), expected["prediction"])


def test_match_name_still_needs_the_remap_that_auto_does_without(tmp_path):
    saved = run_legacy(EAGER_SCRIPT, tmp_path)
    assert "conv/kernel" in catalog.file_catalog(saved["prefix"]).all_names
    try:
        ss.keras.load_checkpoint(keras_3_sequential(), saved["prefix"], match="name")
    except ss.CheckpointMismatchError as error:
        assert str(error).splitlines()[0].endswith("8 missing, 8 unexpected")
    else:
        raise AssertionError("match='name' paired sequential/conv/kernel with conv/kernel")


def _tf1_checkpoint_with_scoped_slots(prefix, weights_only=False):
    """The MNIST example's layout: weights conv_1/w, conv_1/b, out/w, out/b; Adam under scope 'opt'."""
    rng = np.random.default_rng(3)
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        x = v1.constant(rng.random((4, 6, 6, 1), dtype=np.float32))
        with v1.variable_scope("conv_1"):
            w = v1.get_variable("w", (3, 3, 1, 2), initializer=v1.random_normal_initializer(seed=1))
            b = v1.get_variable("b", (2,), initializer=v1.random_normal_initializer(seed=2))
        h = tf.reshape(tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID") + b), (4, 32))
        with v1.variable_scope("out"):
            wo = v1.get_variable("w", (32, 3), initializer=v1.random_normal_initializer(seed=3))
            bo = v1.get_variable("b", (3,), initializer=v1.random_normal_initializer(seed=4))
        loss = tf.reduce_sum(tf.square(tf.matmul(h, wo) + bo))
        step = v1.train.get_or_create_global_step()
        with v1.variable_scope("opt"):
            train = v1.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(2):
                sess.run(train)
            v1.train.Saver(v1.trainable_variables() if weights_only else None).save(sess, prefix)
            return {v.op.name: sess.run(v) for v in v1.global_variables()}


def test_slots_under_the_optimizers_scope_are_found_by_role(tmp_path):
    values = _tf1_checkpoint_with_scoped_slots(str(tmp_path / "model"))
    assert "opt/conv_1/w/Adam" in values and "opt/conv_1/w/Adam_1" in values
    model = keras.Sequential([keras.Input((6, 6, 1)), keras.layers.Conv2D(2, 3, name="conv"),
                              keras.layers.Flatten(name="flatten"), keras.layers.Dense(3, name="out")], name="net")
    optimizer = keras.optimizers.Adam(0.01)
    remap = {"conv_1/w": "net/conv/kernel", "conv_1/b": "net/conv/bias", "out/w": "net/out/kernel",
             "out/b": "net/out/bias"}
    report = ss.keras.load_checkpoint(model, str(tmp_path / "model"), optimizer, remap=remap)
    assert report.restored == {new: old for old, new in remap.items()}
    state = {v.path.split("/", 1)[1]: np.array(v.numpy()) for v in optimizer.variables}
    for old, new in remap.items():
        flat = new.replace("/", "_")
        assert_same_bytes(state[f"{flat}_momentum"], values[f"opt/{old}/Adam"])
        assert_same_bytes(state[f"{flat}_velocity"], values[f"opt/{old}/Adam_1"])
    assert report.iterations == 2


BUILDER = """
import keras


def build():
    model = keras.Sequential([keras.Input((6, 6, 1)), keras.layers.Conv2D(2, 3, name="conv"),
                              keras.layers.Flatten(name="flatten"), keras.layers.Dense(3, name="out")], name="net")
    return model, keras.optimizers.Adam(0.01, name="adam")
"""
REMAP_FLAGS = ["--remap", "conv_1/w=net/conv/kernel", "--remap", "conv_1/b=net/conv/bias",
               "--remap", "out/w=net/out/kernel", "--remap", "out/b=net/out/bias"]


def test_no_optimizer_is_the_flag_the_advice_names(tmp_path, run_cli, monkeypatch):
    _tf1_checkpoint_with_scoped_slots(str(tmp_path / "model"), weights_only=True)
    (tmp_path / "models.py").write_text(BUILDER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "models", raising=False)
    out = tmp_path / "tf2" / "ckpt"
    refused = run_cli("convert", tmp_path / "model", out, "--to", "object", "--model", "models:build", *REMAP_FLAGS)
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-5:] == [
        "the checkpoint holds no optimizer slots", "no variable was changed", "Pass --no-optimizer to load the weights alone.",
        "Pass --remap OLD=NEW to pair the names.", "Pass --on-mismatch initialize to leave the unmatched variables as they are."]
    assert not out.parent.exists()
    done = run_cli("convert", tmp_path / "model", out, "--to", "object", "--model", "models:build", *REMAP_FLAGS,
                   "--no-optimizer")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == "loaded 4 of 4 weights; all 4 read back bit-exact"
    sys.modules.pop("models", None)


def _mnist_example_checkpoint(prefix):
    """The worked example's own graph (examples/mnist_cnn/model.py), small, trained two steps, saved whole."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                                    "mnist_cnn"))
    try:
        import model as mnist_model
    finally:
        sys.path.pop(0)
    rng = np.random.default_rng(0)
    net = mnist_model.build(channels=(4, 8), fc_units=16)
    images = rng.random((8, 784), dtype=np.float32)
    t = net.tensors
    with net.graph.as_default(), tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(2):
            sess.run(t["train_op"], {t["x"]: images, t["labels"]: rng.integers(0, 10, 8), t["phase_train"]: True})
        tf.compat.v1.train.Saver().save(sess, prefix)
        values = {v.op.name: sess.run(v) for v in tf.compat.v1.global_variables()}
        logits = sess.run(t["logits"], {t["x"]: images})
    return values, images, logits


def mnist_keras_3():
    inputs = keras.Input((784,))
    h = keras.layers.Reshape((28, 28, 1))(inputs)
    for index, channels in ((1, 4), (2, 8)):
        h = keras.layers.Conv2D(channels, 5, padding="same", name=f"conv_{index}")(h)
        h = keras.layers.BatchNormalization(epsilon=1e-3, name=f"bn_{index}")(h)
        h = keras.layers.MaxPool2D(2, padding="same")(keras.layers.ReLU()(h))
    h = keras.layers.Dense(16, activation="relu", name="fc")(keras.layers.Flatten()(h))
    return keras.Model(inputs, keras.layers.Dense(10, name="out")(h), name="mnist")


MNIST_REMAP = {"fc/w": "fc/kernel", "fc/b": "fc/bias", "out/w": "out/kernel", "out/b": "out/bias"}
for _index in (1, 2):
    _bn = f"conv_{_index}/bn"
    MNIST_REMAP.update({f"conv_{_index}/w": f"conv_{_index}/kernel", f"conv_{_index}/b": f"conv_{_index}/bias",
                        f"{_bn}/beta": f"bn_{_index}/beta", f"{_bn}/gamma": f"bn_{_index}/gamma",
                        f"{_bn}/{_bn}/moments/Squeeze/ExponentialMovingAverage": f"bn_{_index}/moving_mean",
                        f"{_bn}/{_bn}/moments/Squeeze_1/ExponentialMovingAverage": f"bn_{_index}/moving_variance"})


def test_the_mnist_examples_checkpoint_loads_with_weight_rules_only_and_its_scoped_slots(tmp_path):
    values, images, logits = _mnist_example_checkpoint(str(tmp_path / "model"))
    model, optimizer = mnist_keras_3(), keras.optimizers.Adam(1e-3)
    report = ss.keras.load_checkpoint(model, str(tmp_path / "model"), optimizer, remap=MNIST_REMAP)
    assert report.restored == {new: old for old, new in MNIST_REMAP.items()}
    for weight in model.weights:
        assert_same_bytes(np.asarray(weight.numpy()), values[report.restored[weight.path]])
    state = {v.path.split("/", 1)[1]: np.array(v.numpy()) for v in optimizer.variables}
    trainable = [w.path for w in model.trainable_weights]
    assert len(trainable) == 12
    for path in trainable:
        flat = path.replace("/", "_")
        assert_same_bytes(state[f"{flat}_momentum"], values[f"opt/{report.restored[path]}/Adam"])
        assert_same_bytes(state[f"{flat}_velocity"], values[f"opt/{report.restored[path]}/Adam_1"])
        assert np.any(state[f"{flat}_velocity"] != 0)
    assert report.iterations == 2 == int(optimizer.iterations.numpy())

    by_hand = mnist_keras_3()
    for weight in by_hand.weights:
        weight.assign(values[report.restored[weight.path]])
    loaded = np.asarray(model(images, training=False))
    assert_same_bytes(loaded, np.asarray(by_hand(images, training=False)))
    assert float(np.abs(loaded - logits).max()) <= 1e-5
