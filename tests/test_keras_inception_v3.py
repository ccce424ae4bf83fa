"""tf-slim's ``inception_v3`` (tf-slim 1.1.0, the original code) into Keras 3's ``keras.applications.InceptionV3``
as a ``.weights.h5``, and why timm's ``inception_v3`` is no twin of it.

A process of its own builds ``tf_slim.nets.inception_v3`` in graph mode on 139 x 139 inputs (1001 classes,
auxiliary head), gives the batch norms random moving statistics, takes one step as tf-slim's
``train_image_classifier`` does (RMSProp with decay 0.9, momentum 0.9, epsilon 1.0; the batch norms' update
ops; ``ExponentialMovingAverage(0.9999, global_step)`` over the model variables) and saves with a plain Saver.
It then evaluates 8 inputs in [-1, 1] (what tf-slim's inception preprocessing gives) twice: restored as
``eval_image_classifier`` restores (``variables_to_restore`` of the averages) and restored raw. The
conversions run on Keras 3's torch backend with no TensorFlow imported; another process, with neither
TensorFlow nor subsetsaver, reads the files with ``model.load_weights``.

tf-slim 1.1.0's batch norm builds TensorFlow's ``tf.compat.v1.layers.BatchNormalization``, which TensorFlow
2.21 looks up under ``tf_keras.legacy_tf_layers``; tf_keras 2.21 keeps that module under ``tf_keras.src``,
so the graph process names it where TensorFlow looks.
"""

import importlib.util
import json
import os
import textwrap

import numpy as np
import pytest
from cli_children import CHILD_PATH, run_script

from subsetsaver.keras.pairings import INCEPTION_V3_CONVOLUTIONS

SIZE = 139  # tf-slim's inception_v3 reduces its last pool's kernel for inputs this small; Keras pools globally

TF1_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    # each new fetch or feed of a session re-optimizes the whole graph; the set-up loads variables one by one
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    import tf_keras.src.legacy_tf_layers as legacy_tf_layers
    sys.modules.setdefault("tf_keras.legacy_tf_layers", legacy_tf_layers)
    import tf_slim as slim
    from tf_slim.nets import inception_v3

    directory, size = sys.argv[1], int(sys.argv[2])
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(1)
        images = tf.compat.v1.placeholder(tf.float32, [None, size, size, 3])
        labels = tf.compat.v1.placeholder(tf.int32, [None])
        with slim.arg_scope(inception_v3.inception_v3_arg_scope()):
            logits, end_points = inception_v3.inception_v3(images, num_classes=1001, is_training=True)
        onehot = tf.one_hot(labels, 1001)
        tf.compat.v1.losses.softmax_cross_entropy(onehot, end_points["AuxLogits"], weights=0.4)
        tf.compat.v1.losses.softmax_cross_entropy(onehot, logits)
        step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = tf.compat.v1.train.RMSPropOptimizer(0.01, decay=0.9, momentum=0.9, epsilon=1.0)
        averages = tf.compat.v1.train.ExponentialMovingAverage(0.9999, step)
        update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
        update_ops.append(averages.apply(slim.get_model_variables()))
        train_op = slim.learning.create_train_op(tf.compat.v1.losses.get_total_loss(), optimizer, global_step=step,
                                                 update_ops=update_ops)
        rng = np.random.default_rng(0)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for variable in tf.compat.v1.global_variables():
                name, shape = variable.op.name, variable.shape.as_list()
                if name.endswith("moving_variance"):
                    variable.load(rng.uniform(0.5, 1.5, shape).astype(np.float32), sess)
                elif name.endswith(("moving_mean", "BatchNorm/beta")):
                    variable.load(rng.normal(0, 0.2, shape).astype(np.float32), sess)
            sess.run(train_op, {images: rng.uniform(-1, 1, (8, size, size, 3)).astype(np.float32),
                                labels: rng.integers(0, 1001, 8)})
            tf.compat.v1.train.Saver().save(sess, os.path.join(directory, "model.ckpt"), global_step=step)
            order = [v.op.name for v in slim.get_model_variables()]
    inputs = rng.uniform(-1, 1, (8, size, size, 3)).astype(np.float32)
    found = {}
    for kind in ("averages", "raw"):
        with tf.Graph().as_default():
            images = tf.compat.v1.placeholder(tf.float32, [None, size, size, 3])
            with slim.arg_scope(inception_v3.inception_v3_arg_scope()):
                logits, end_points = inception_v3.inception_v3(images, num_classes=1001, is_training=False)
            restore = (tf.compat.v1.train.ExponentialMovingAverage(0.9999).variables_to_restore(
                slim.get_model_variables()) if kind == "averages" else None)
            with tf.compat.v1.Session() as sess:
                tf.compat.v1.train.Saver(restore).restore(sess, os.path.join(directory, "model.ckpt-1"))
                found[kind], found[kind + "_mixed_5b"] = sess.run([logits, end_points["Mixed_5b"]], {images: inputs})
    np.savez(os.path.join(directory, "expected.npz"), inputs=inputs, **found)
    print("RESULT " + json.dumps({"order": order}))
""")

# Converts in a Keras 3 process on the torch backend: peak memory of the first conversion past what the
# imports hold (the peak reset after them, since loading torch's libraries passes higher for a moment); then timm's inception_v3 with the same raw weights, as it is and with its average pools
# leaving the padding out.
CONVERT_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    import keras, torch, h5py
    import torch.nn.functional as F
    from cli_children import run_commands
    import subsetsaver.cli, subsetsaver.keras.weights_h5, subsetsaver.keras.pairings

    def resident():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()

    def peak():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

    with open("/proc/self/clear_refs", "w") as refs:  # the peak so far (the imports' passing high) reset to now
        refs.write("5")
    imports = resident()
    results = run_commands(json.loads(sys.argv[1]), measure=lambda: {"peak": peak()})
    tensorflow = "tensorflow" in sys.modules

    import timm
    from subsetsaver.catalog import read_tensors
    from subsetsaver.keras.pairings import INCEPTION_V3_CONVOLUTIONS, INCEPTION_V3_LOGITS
    expected = np.load("expected.npz")
    names = [f"{INCEPTION_V3_LOGITS}/weights", f"{INCEPTION_V3_LOGITS}/biases"]
    for scope in INCEPTION_V3_CONVOLUTIONS:
        names += [f"{scope}/weights"] + [f"{scope}/BatchNorm/{part}" for part in ("beta", "moving_mean", "moving_variance")]
    values = dict(read_tensors("model.ckpt-1", names))
    measured = {}
    for padding in ("counted", "left out"):
        model = timm.create_model("inception_v3", pretrained=False, num_classes=1001, aux_logits=False).eval()
        blocks = [module for name, module in model.named_modules()
                  if hasattr(module, "conv") and hasattr(module, "bn") and "AuxLogits" not in name]
        with torch.no_grad():
            for scope, block in zip(INCEPTION_V3_CONVOLUTIONS, blocks, strict=True):
                block.conv.weight.copy_(torch.from_numpy(values[f"{scope}/weights"].transpose(3, 2, 0, 1)))
                block.bn.weight.fill_(1.0)  # tf-slim's batch norms have no scale
                block.bn.bias.copy_(torch.from_numpy(values[f"{scope}/BatchNorm/beta"]))
                block.bn.running_mean.copy_(torch.from_numpy(values[f"{scope}/BatchNorm/moving_mean"]))
                block.bn.running_var.copy_(torch.from_numpy(values[f"{scope}/BatchNorm/moving_variance"]))
            model.fc.weight.copy_(torch.from_numpy(values[f"{INCEPTION_V3_LOGITS}/weights"][0, 0].T))
            model.fc.bias.copy_(torch.from_numpy(values[f"{INCEPTION_V3_LOGITS}/biases"]))
            seen = {}
            model.Mixed_5b.register_forward_hook(lambda module, inputs, output: seen.update(block=output))
            pool = F.avg_pool2d
            if padding == "left out":
                F.avg_pool2d = lambda *args, **kwargs: pool(*args, **{**kwargs, "count_include_pad": False})
            try:
                logits = model(torch.from_numpy(expected["inputs"].transpose(0, 3, 1, 2).copy())).numpy()
            finally:
                F.avg_pool2d = pool
        measured[padding] = {
            "mixed_5b": float(np.abs(seen["block"].numpy().transpose(0, 2, 3, 1) - expected["raw_mixed_5b"]).max()),
            "logits": float(np.abs(logits - expected["raw"]).max()),
            "top1": int((logits.argmax(1) == expected["raw"].argmax(1)).sum()), "eps": blocks[0].bn.eps}
    print("RESULT " + json.dumps({"results": results, "imports": imports, "tensorflow": tensorflow,
                                  "timm": measured}))
""")

LOAD_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import keras

    found = {}
    inputs = np.load("expected.npz")["inputs"]
    for path in json.loads(sys.argv[1]):
        model = keras.applications.InceptionV3(weights=None, input_shape=inputs.shape[1:], classifier_activation=None)
        model.load_weights(path)
        np.save(path + ".npy", np.asarray(model.predict(inputs, verbose=0)))
    print("RESULT " + json.dumps({"modules": sorted(m for m in ("tensorflow", "subsetsaver") if m in sys.modules),
                                  "backend": keras.backend.backend()}))
""")

CONVERT = ["convert", "model.ckpt-1", "--to", "keras", "--model", "keras.applications.InceptionV3"]
COMMANDS = {
    "averages": [*CONVERT[:2], "averages.weights.h5", *CONVERT[2:], "--drop-background-class"],
    "refused": [*CONVERT[:2], "refused.weights.h5", *CONVERT[2:]],
    "raw": [*CONVERT[:2], "raw.weights.h5", *CONVERT[2:], "--drop-background-class", "--weights", "raw", "--json"],
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    for module in ("torch", "timm", "tf_slim"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (CI installs it): tf-slim builds the original network, Keras 3's "
                        "torch backend reads the files, timm is measured")
    root = tmp_path_factory.mktemp("inception_v3")
    graph = run_script(TF1_SCRIPT, [str(root), str(SIZE)], {}, root)
    conversions = run_script(CONVERT_SCRIPT, [json.dumps(list(COMMANDS.values()))],
                             {"KERAS_BACKEND": "torch", "PYTHONPATH": CHILD_PATH}, root)
    loaded = run_script(LOAD_SCRIPT, [json.dumps([str(root / "averages.weights.h5"), str(root / "raw.weights.h5")])],
                        {"KERAS_BACKEND": "torch", "PYTHONPATH": ""}, root)
    expected = dict(np.load(root / "expected.npz"))
    got = {kind: np.load(root / f"{kind}.weights.h5.npy") for kind in ("averages", "raw")}
    results = dict(zip(COMMANDS, conversions["results"]))
    return graph, conversions, loaded, expected, got, results, root


def test_the_pairing_is_tf_slims_own_order_of_convolutions(converted):
    graph = converted[0]
    weights = [name[:-len("/weights")] for name in graph["order"]
               if name.endswith("/weights") and "/AuxLogits/" not in name and "/Logits/" not in name]
    assert tuple(weights) == INCEPTION_V3_CONVOLUTIONS


def test_the_averages_load_in_keras_3_on_torch_as_tf_slims_evaluation_computes(converted):
    _, conversions, loaded, expected, got, results, _ = converted
    assert conversions["tensorflow"] is False
    assert loaded == {"modules": [], "backend": "torch"}
    result = results["averages"]
    assert result["code"] == 0, result["err"]
    assert result["out"].splitlines() == [
        "wrote Keras weights file averages.weights.h5: 378 tensors, 91.0 MB (from model.ckpt-1, through "
        "keras.applications.InceptionV3); all 378 weights read back bit-exact",
        "paired by the built-in pairing tf-slim inception_v3 -> keras.applications.InceptionV3",
        "weights: moving averages (ExponentialMovingAverage) of 378 of 378",
        "classes: 1000 of the checkpoint's 1001 (class 0, the background, dropped)",
        "left out tf-slim's auxiliary head (10 tensors under InceptionV3/AuxLogits): keras.applications.InceptionV3 "
        "has none",
        "not read: 791 tensors (InceptionV3/AuxLogits/Conv2d_1b_1x1/BatchNorm/beta, "
        "InceptionV3/AuxLogits/Conv2d_1b_1x1/BatchNorm/beta/ExponentialMovingAverage, "
        "InceptionV3/AuxLogits/Conv2d_1b_1x1/BatchNorm/beta/RMSProp ...)"]
    want = expected["averages"][:, 1:]
    assert got["averages"].shape == want.shape == (8, 1000)
    np.testing.assert_allclose(got["averages"], want, atol=1e-4, rtol=0)
    assert list(got["averages"].argmax(axis=1)) == list(want.argmax(axis=1))


def test_weights_raw_converts_what_training_left_and_that_is_another_model(converted):
    _, _, _, expected, got, results, _ = converted
    result = results["raw"]
    assert result["code"] == 0, result["err"]
    report = json.loads(result["out"])
    assert (report["weights"], report["read_from"], report["classes"], report["background_class"]) == (
        "raw", {}, [1001, 1000], "dropped")
    assert report["pairing"] == "tf-slim inception_v3 -> keras.applications.InceptionV3"
    np.testing.assert_allclose(got["raw"], expected["raw"][:, 1:], atol=1e-4, rtol=0)
    assert list(got["raw"].argmax(axis=1)) == list(expected["raw"][:, 1:].argmax(axis=1))
    # the trap: the raw values give a model that loads and computes something else
    assert np.abs(expected["raw"] - expected["averages"]).max() > 1


def test_1001_classes_into_1000_are_refused_without_the_flag(converted):
    result, root = converted[5]["refused"], converted[6]
    assert (result["code"], result["out"]) == (2, "")
    assert result["err"] == (
        "subsetsaver: error: checkpoint 'model.ckpt-1' classifies into 1001 classes "
        "('InceptionV3/Logits/Conv2d_1c_1x1/biases'), the Keras model 'inception_v3' into 1000 ('predictions/bias'): "
        "tf-slim's class 0 is the background; pass --drop-background-class to drop class 0 and keep the other 1000\n")
    assert not (root / "refused.weights.h5").exists()


def test_memory_peaks_within_the_largest_tensor_the_model_and_128_mb(converted):
    """The checkpoint holds 379 MiB (the weights, their averages and RMSProp's two slots); the model 91 MiB.
    Measured here: 172 MiB past what the imports hold, of a budget of 227 MiB."""
    _, conversions, _, _, _, results, root = converted
    model_bytes = 95_407_136  # the model's 378 float32 weights (the report's 91.0 MB, in MiB)
    largest = 2048 * 1001 * 4  # the logits' kernel, as the checkpoint holds it
    grown = results["averages"]["peak"] - conversions["imports"]
    assert os.path.getsize(root / "model.ckpt-1.data-00000-of-00001") > 350 * 2 ** 20
    assert grown <= largest + model_bytes + 128 * 2 ** 20, grown


def test_timms_inception_v3_is_no_twin_its_average_pools_count_the_padding(converted):
    """What timm's inception_v3 computes from the same raw weights: batch-norm epsilon 0.001 as tf-slim's,
    yet 5.1 apart after Mixed_5b (the first average pool) and no top-1 in common here; leaving the padding out
    of its 3x3 average pools (what TensorFlow's SAME pools do) makes it exact, so that is the whole
    difference. A map into timm is refused (docs/keras3.md)."""
    measured = converted[1]["timm"]
    counted, left_out = measured["counted"], measured["left out"]
    assert counted["eps"] == left_out["eps"] == 0.001
    assert counted["mixed_5b"] > 1 and counted["logits"] > 1, counted
    assert left_out["mixed_5b"] < 1e-4 and left_out["logits"] < 1e-4 and left_out["top1"] == 8, left_out


def test_tf_slims_inception_v3_into_another_model_is_refused_before_anything_is_written(tmp_path):
    import keras
    from safetensors.numpy import save_file

    import subsetsaver as ss

    source = str(tmp_path / "slim.safetensors")
    save_file({"InceptionV3/Conv2d_1a_3x3/weights": np.zeros((3, 3, 3, 32), np.float32)}, source)

    def build():
        inputs = keras.Input((8,))
        return keras.Model(inputs, keras.layers.Dense(3, name="dense")(inputs))

    with pytest.raises(ss.CheckpointMismatchError) as refused:
        ss.keras.convert_weights(source, tmp_path / "net.weights.h5", build)
    assert str(refused.value) == (
        f"checkpoint '{source}' is tf-slim's InceptionV3, which pairs only with keras.applications.InceptionV3 (94 "
        "convolutions with batch norms and a dense classifier, or none with include_top=False); the model has 0 "
        "convolutions with batch norms and 1 dense layers: build it with keras.applications.InceptionV3(weights=None, "
        "classes=...)")
    assert os.listdir(tmp_path) == ["slim.safetensors"]
