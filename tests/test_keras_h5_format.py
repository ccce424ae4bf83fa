"""Keras 3's ``.weights.h5`` in the format registry: read as Keras writes it, written so Keras reads it,
crafted files refused with the library's own error (never an h5py one, never a hang); ``inspect`` and
``diff`` read it; ``ss.keras.convert_weights`` refuses what it cannot fill before anything is written.
"""

import h5py
import keras
import ml_dtypes
import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver.formats import keras_h5, registry
from subsetsaver.formats.keras_h5 import KERAS_H5


def small_model(name="net", units=3):
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(units, name="hidden")(inputs)
    outputs = keras.layers.DepthwiseConv1D(1, name="depthwise")(keras.layers.Reshape((units, 1))(hidden))
    return keras.Model(inputs, outputs, name=name)


@pytest.fixture
def saved(tmp_path):
    model = small_model()
    path = tmp_path / "net.weights.h5"
    model.save_weights(path)
    return model, str(path)


def names_of(path):
    return [info.name for info in KERAS_H5.contents(path).tensors]


def test_a_keras_file_is_recognised_and_read_at_its_dataset_paths(saved):
    model, path = saved
    assert registry.format_of(path) is KERAS_H5
    assert names_of(path) == ["layers/dense/vars/0", "layers/dense/vars/1", "layers/depthwise_conv1d/vars/0",
                              "layers/depthwise_conv1d/vars/1"]
    values = dict(KERAS_H5.read(path, names_of(path)))
    for name, weight in zip(names_of(path), model.weights):
        assert values[name].tobytes() == np.asarray(weight.numpy()).tobytes(), name
    assert keras_h5.layer_names(path) == {"layers/dense": "hidden", "layers/depthwise_conv1d": "depthwise"}


def test_what_the_format_writes_keras_loads_bfloat16_included(tmp_path, saved):
    model, path = saved
    values = dict(KERAS_H5.read(path, names_of(path)))
    values["layers/dense/vars/1"] = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    written = tmp_path / "copy.weights.h5"
    keras_h5.write(str(written), values.items())
    assert KERAS_H5.read(str(written), ["layers/dense/vars/1"]).__next__()[1].dtype == ml_dtypes.bfloat16
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, name="hidden", dtype="bfloat16")(inputs)
    outputs = keras.layers.DepthwiseConv1D(1, name="depthwise")(keras.layers.Reshape((3, 1))(hidden))
    fresh = keras.Model(inputs, outputs)
    fresh.load_weights(written)
    assert np.asarray(fresh.weights[1].numpy()).astype(np.float32).tolist() == [1.5, -2.0, 3.25]
    assert np.asarray(fresh.weights[2].numpy()).tobytes() == np.asarray(model.weights[2].numpy()).tobytes()


def test_a_name_keras_cannot_read_is_refused_before_writing(tmp_path):
    with pytest.raises(ss.SubsetSaverError) as refused:
        keras_h5.write(str(tmp_path / "x.weights.h5"), [("conv_1/w", np.zeros(2, np.float32))])
    assert str(refused.value) == ("cannot write tensor 'conv_1/w' to a Keras weights file: Keras reads tensors at "
                                  "PATH/vars/INDEX only; write a checkpoint of another format into one with --to "
                                  "keras --model MODULE:FUNCTION")


def test_inspect_and_diff_read_a_keras_file(saved, tmp_path, run_cli):
    model, path = saved
    other = tmp_path / "other.weights.h5"
    model.weights[1].assign(np.ones(3, np.float32))
    model.save_weights(other)
    listed = run_cli("inspect", path)
    assert listed.returncode == 0, listed.stderr
    assert "layers/dense/vars/0" in listed.stdout and "layers/depthwise_conv1d/vars/1" in listed.stdout
    compared = run_cli("diff", path, other, "--json")
    assert compared.returncode == 1
    assert '"layers/dense/vars/1"' in compared.stdout


def crafted(tmp_path, build):
    path = tmp_path / "crafted.weights.h5"
    with h5py.File(path, "w") as h5:
        build(h5)
    return str(path)


def not_readable(path, problem):
    return f"'{path}' is not a readable Keras weights file: {problem}; write it again from its source"


CRAFTED = {
    "external link": (lambda h5: h5.__setitem__("layers", h5py.ExternalLink("/etc/other.h5", "/")),
                      "'layers' is a ExternalLink, which Keras never writes"),
    "soft link": (lambda h5: (h5.create_dataset("vars/0", data=np.zeros(2)), h5.__setitem__("v", h5py.SoftLink("/vars"))),
                  "'v' is a SoftLink, which Keras never writes"),
    "strings": (lambda h5: h5.create_dataset("vars/0", data=np.array([b"a", b"b"])),
                "tensor 'vars/0' holds |S1, not numbers Keras writes"),
    "no data stored": (lambda h5: h5.create_dataset("vars/0", shape=(1000,), dtype="float32"),
                       "tensor 'vars/0' float32 [1000] needs 4,000 bytes but the file stores 0 for it"),
    "a group inside itself": (lambda h5: h5.create_group("a").__setitem__("loop", h5["a"]),
                              "its groups nest more than 64 deep"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_file_is_refused_with_the_library_error(tmp_path, run_cli, case):
    build, problem = CRAFTED[case]
    path = crafted(tmp_path, build)
    with pytest.raises(ss.CorruptCheckpointError) as refused:
        KERAS_H5.contents(path)
    assert str(refused.value) == not_readable(path, problem)
    done = run_cli("inspect", path)
    assert (done.returncode, done.stderr) == (2, f"subsetsaver: error: {not_readable(path, problem)}\n")


def test_a_file_that_is_no_hdf5_file_is_refused(tmp_path):
    path = tmp_path / "fake.weights.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(200))
    with pytest.raises(ss.CorruptCheckpointError) as refused:
        KERAS_H5.contents(str(path))
    assert str(refused.value).startswith(f"'{path}' is not a readable Keras weights file: it is not an HDF5 file (")
    assert len(str(refused.value)) < 2048


def test_a_keras_file_in_a_bucket_is_read_through_the_file_layer(saved):
    fsspec = pytest.importorskip("fsspec", reason="memory:// needs fsspec (the remote extra)")
    model, path = saved
    url = "memory://weights-test/net.weights.h5"
    with open(path, "rb") as local:
        fsspec.filesystem("memory").pipe(url, local.read())
    try:
        assert registry.format_of(url) is KERAS_H5
        assert names_of(url) == names_of(path)
        remote, local_values = dict(KERAS_H5.read(url, names_of(url))), dict(KERAS_H5.read(path, names_of(path)))
        assert all(remote[name].tobytes() == local_values[name].tobytes() for name in names_of(path))
    finally:
        fsspec.filesystem("memory").rm(url)
