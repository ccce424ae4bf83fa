"""The weights tf_keras names (or types) otherwise than Keras 3, read without a remap (``keras/legacy_names.py``)."""

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
