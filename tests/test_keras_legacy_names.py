"""The weights tf_keras names (or types) otherwise than Keras 3, read without a remap (``keras/legacy_names.py``)."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from safetensors.numpy import save_file

import subsetsaver as ss
from subsetsaver.keras.legacy_names import legacy_dtypes, legacy_names


def test_depthwise_kernels_and_layer_scales_have_their_tf_keras_names():
    inputs = keras.Input((8, 8, 3))
    h = keras.layers.DepthwiseConv2D(3, name="dw")(inputs)
    h = keras.layers.Conv2D(4, 1, name="pw")(h)
    model = keras.Model(inputs, h)
    assert legacy_names(model) == {"dw/kernel": "depthwise_kernel"}
    convnext = keras.applications.ConvNeXtTiny(weights=None, include_top=False, input_shape=(32, 32, 3))
    scales = {path: leaf for path, leaf in legacy_names(convnext).items() if "layer_scale" in path}
    assert len(scales) == 18 and set(scales.values()) == {"gamma"}
    assert sorted(scales)[0].startswith("convnext_tiny_stage_0_block_0_layer_scale/")


class Normalization(keras.layers.Layer):
    """Keras 3's Normalization as the torch and jax backends build it: its sample count an int32 (the
    TensorFlow backend keeps an int64, as tf_keras does)."""

    def build(self, input_shape):
        self.mean = self.add_weight(name="mean", shape=(2,), trainable=False)
        self.variance = self.add_weight(name="variance", shape=(2,), trainable=False)
        self.count = self.add_weight(name="count", shape=(), dtype="int32", initializer="zeros", trainable=False)

    def call(self, inputs):
        return (inputs - self.mean) / keras.ops.sqrt(self.variance)


@pytest.fixture
def normalization_model():
    inputs = keras.Input((2,))
    return keras.Model(inputs, Normalization(name="norm")(inputs), name="norm_net")


def test_a_tf_keras_int64_count_is_read_by_value_and_one_too_large_is_refused(normalization_model, tmp_path):
    assert legacy_dtypes(normalization_model) == {"norm/count": "int64"}
    values = {"norm/mean": np.array([5.0, 6.0], np.float32), "norm/variance": np.array([1.0, 4.0], np.float32)}
    path = str(tmp_path / "norm.safetensors")
    save_file({**values, "norm/count": np.array(7, np.int64)}, path)
    report = ss.keras.load_checkpoint(normalization_model, path)
    assert report.restored == {"norm/mean": "norm/mean", "norm/variance": "norm/variance", "norm/count": "norm/count"}
    count = normalization_model.get_layer("norm").weights[2]
    assert (str(count.dtype), int(count.numpy())) == ("int32", 7)
    save_file({**values, "norm/count": np.array(1 << 40, np.int64)}, path)
    with pytest.raises(ss.CheckpointMismatchError) as refused:
        ss.keras.load_checkpoint(normalization_model, path)
    assert str(refused.value) == (f"checkpoint '{path}': 'norm/count' holds int64 values that the model's int32 "
                                  "cannot hold; no variable was changed")
    assert int(count.numpy()) == 7


OBJECT_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tf_keras

    directory = sys.argv[1]
    tf_keras.utils.set_random_seed(1)
    model = tf_keras.Sequential([tf_keras.layers.DepthwiseConv2D(3, name="old_dw", input_shape=(5, 5, 2)),
                                 tf_keras.layers.Flatten(name="old_flat"), tf_keras.layers.Dense(2, name="old_dense")])
    prefix = os.path.join(directory, "weights")
    model.save_weights(prefix)  # TensorFlow's object-based format
    probe = np.random.default_rng(5).random((4, 5, 5, 2), dtype=np.float32)
    np.save(os.path.join(directory, "prediction.npy"), np.asarray(model(probe)))
    print("RESULT " + json.dumps({"prefix": prefix}))
""")


def test_an_object_based_tf_keras_depthwise_kernel_is_found_by_its_object_path(tmp_path):
    """The Keras 3 layers have other names, so only the object graph's path pairs them:
    ``layer_with_weights-0/depthwise_kernel`` in the file, ``layer_with_weights-0/kernel`` in Keras 3."""
    environment = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", OBJECT_SCRIPT, str(tmp_path)], env=environment,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    prefix = json.loads(lines[-1][len("RESULT "):])["prefix"]
    model = keras.Sequential([keras.Input((5, 5, 2)), keras.layers.DepthwiseConv2D(3, name="dw"),
                              keras.layers.Flatten(name="flat"), keras.layers.Dense(2, name="dense")], name="net")
    report = ss.keras.load_checkpoint(model, prefix)
    assert report.match == "auto"
    assert report.restored == {"net/dw/kernel": "old_dw/depthwise_kernel", "net/dw/bias": "old_dw/bias",
                               "net/dense/kernel": "old_dense/kernel", "net/dense/bias": "old_dense/bias"}
    probe = np.random.default_rng(5).random((4, 5, 5, 2), dtype=np.float32)
    np.testing.assert_allclose(np.asarray(model(probe)), np.load(tmp_path / "prediction.npy"), atol=1e-6, rtol=0)
