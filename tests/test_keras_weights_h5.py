"""``subsetsaver convert CKPT OUT.weights.h5 --to keras --model ...`` (``ss.keras.convert_weights``) against real graphs.

tf_keras applications (MobileNetV2 with alpha 0.35, EfficientNetB0 with ``weights=None``; small inputs) are
built in graph mode in a process of their own (``TF_USE_LEGACY_KERAS=1``), given one Adam step, and saved by
a plain ``tf.compat.v1.train.Saver`` with the logits of 8 inputs. The conversions run in a Keras 3 process on
the torch backend, where TensorFlow must never be imported; another such process, with neither TensorFlow
nor subsetsaver imported, reads each file with ``model.load_weights`` and must give the same logits (within
1e-4) and the same top-1. tf_keras names a depthwise kernel ``depthwise_kernel`` where Keras 3 names it
``kernel``, and counts EfficientNet's normalization samples in an int64 where Keras 3 uses an int32: no
remap is passed. Each side runs once for both models (a process start costs seconds here).
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (keyword arguments on both sides, --model); weights do not depend on the input size, so
# keras.applications.EfficientNetB0 (224 x 224) converts what a 32 x 32 one was trained as.
MODELS = {
    "MobileNetV2": ({"input_shape": [32, 32, 3], "alpha": 0.35, "classes": 10}, "builders.py:mobilenet_v2"),
    "EfficientNetB0": ({"input_shape": [32, 32, 3]}, "keras.applications.EfficientNetB0"),
}

TF1_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    # each new fetch or feed of a session re-optimizes the whole graph; the set-up loads variables one by one
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    import tf_keras

    for directory, name, kwargs in json.loads(sys.argv[1]):
        tf_keras.backend.clear_session()  # a new default graph and session for each model
        tf_keras.utils.set_random_seed(1)
        model = getattr(tf_keras.applications, name)(weights=None, classifier_activation=None, **kwargs)
        rng = np.random.default_rng(0)
        x = rng.random((8, *model.input_shape[1:]), dtype=np.float32) * 255
        y = rng.integers(0, model.output_shape[-1], 8)
        model.compile(tf_keras.optimizers.legacy.Adam(0.01),
                      tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.train_on_batch(x, y)
        sess = tf.compat.v1.keras.backend.get_session()
        tf.compat.v1.train.Saver().save(sess, os.path.join(directory, "model"), global_step=1)
        np.savez(os.path.join(directory, "expected.npz"), inputs=x, logits=model.predict(x, verbose=0))
    print("RESULT {}")
""")

BUILDERS = textwrap.dedent("""
    import keras


    def mobilenet_v2():
        return keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), alpha=0.35, classes=10,
                                              classifier_activation=None)
""")

CONVERT_SCRIPT = textwrap.dedent("""
    import contextlib, io, json, sys
    from subsetsaver.cli import main
    results = []
    for args in json.loads(sys.argv[1]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main(args)
            except SystemExit as stop:
                code = stop.code
        results.append({"code": code, "out": out.getvalue()})
    print("RESULT " + json.dumps({"results": results, "tensorflow": "tensorflow" in sys.modules}))
""")

# Reads each file as a Keras 3 user would: no subsetsaver, and no TensorFlow on the torch backend.
LOAD_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import keras

    for path, directory, name, kwargs in json.loads(sys.argv[1]):
        model = getattr(keras.applications, name)(weights=None, classifier_activation=None, **kwargs)
        model.load_weights(path)
        with np.load(directory + "/expected.npz") as expected:
            np.save(directory + "/got.npy", np.asarray(model.predict(expected["inputs"], verbose=0)))
    print("RESULT " + json.dumps({"modules": sorted(m for m in ("tensorflow", "subsetsaver") if m in sys.modules),
                                  "backend": keras.backend.backend()}))
""")


def run(script, argument, env, cwd):
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argument)], env=environment,
                          capture_output=True, text=True, timeout=900, cwd=cwd)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):]), done.stderr[-2000:]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """name -> (the TF1 graph's logits, Keras 3's from the converted file, what convert printed)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("Keras 3's torch backend reads the files here: PyTorch is not installed (CI installs it)")
    root = tmp_path_factory.mktemp("vision")
    (root / "builders.py").write_text(BUILDERS)
    for name in MODELS:
        (root / name).mkdir()
    run(TF1_SCRIPT, [[str(root / name), name, kwargs] for name, (kwargs, _) in MODELS.items()],
        {"TF_USE_LEGACY_KERAS": "1"}, root)
    commands = [["convert", f"{name}/model-1", f"{name}/out/net.weights.h5", "--to", "keras", "--model", model]
                for name, (_, model) in MODELS.items()]
    conversions, stderr = run(CONVERT_SCRIPT, commands, {"KERAS_BACKEND": "torch", "PYTHONPATH": PACKAGE_ROOT},
                              root)
    assert conversions["tensorflow"] is False
    assert [result["code"] for result in conversions["results"]] == [0] * len(MODELS), stderr
    loaded, _ = run(LOAD_SCRIPT, [[str(root / name / "out/net.weights.h5"), str(root / name), name, kwargs]
                                  for name, (kwargs, _) in MODELS.items()],
                    {"KERAS_BACKEND": "torch", "PYTHONPATH": ""}, "/")
    assert loaded == {"modules": [], "backend": "torch"}
    found = {}
    for name, result in zip(MODELS, conversions["results"]):
        with np.load(root / name / "expected.npz") as expected:
            found[name] = expected["logits"], np.load(root / name / "got.npy"), result["out"]
    return found


def test_a_tf_keras_mobilenet_v2_loads_in_keras_3_on_torch_with_no_remap(converted):
    expected, got, printed = converted["MobileNetV2"]
    assert printed.splitlines()[0] == ("wrote Keras weights file MobileNetV2/out/net.weights.h5: 262 tensors, "
                                       "1.6 MB (from MobileNetV2/model-1, through builders.py:mobilenet_v2); all 262 "
                                       "weights read back bit-exact")
    assert got.shape == expected.shape == (8, 10)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    assert list(got.argmax(axis=1)) == list(expected.argmax(axis=1))


def test_an_application_name_builds_the_model_efficientnet_b0(converted):
    expected, got, printed = converted["EfficientNetB0"]
    assert printed.splitlines()[0] == ("wrote Keras weights file EfficientNetB0/out/net.weights.h5: 314 tensors, "
                                       "20.3 MB (from EfficientNetB0/model-1, through "
                                       "keras.applications.EfficientNetB0); all 314 weights read back bit-exact")
    assert got.shape == expected.shape == (8, 1000)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    assert list(got.argmax(axis=1)) == list(expected.argmax(axis=1))
