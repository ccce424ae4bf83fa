"""safetensors both ways: a TF1 checkpoint to a file PyTorch users load, and back to one a Saver restores."""

import json
import os
import struct

import graphs
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

import subsetsaver as ss
from subsetsaver import catalog
from subsetsaver.tools import convert

v1 = tf.compat.v1


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small MNIST CNN with hand-written batch norm and Adam, one step trained, saved by a Saver."""
    directory = tmp_path_factory.mktemp("train")
    built = graphs.mnist_cnn(channels=(4, 8), fc_units=16)
    with built.graph.as_default():
        saver = v1.train.Saver()
        with v1.Session(graph=built.graph) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(built.tensors["train_op"], graphs.random_feed(built))
            prefix = saver.save(sess, str(directory / "model"), global_step=1)
    return built, prefix


def test_a_checkpoint_becomes_a_safetensors_file_with_names_values_and_roles(trained, tmp_path):
    built, prefix = trained
    output = str(tmp_path / "model.safetensors")
    report = convert.convert(prefix, output, keep="trainable() | bn_stats()")
    reader = tf.train.load_checkpoint(prefix)
    expected = sorted(set(built.expected["trainable"]) | set(built.expected["bn_stats"]))
    assert sorted(report.kept) == expected
    loaded = load_file(output)
    assert sorted(loaded) == expected
    for name in expected:
        original = reader.get_tensor(name)
        assert loaded[name].dtype == original.dtype and loaded[name].tobytes() == original.tobytes(), name
    found = catalog.file_catalog(output)
    assert sorted(ss.bn_stats().names(found)) == sorted(built.expected["bn_stats"])
    assert ss.slots().names(found, allow_empty=True) == []


def test_a_safetensors_file_converts_back_to_a_checkpoint_a_saver_restores_bit_exact(trained, tmp_path):
    built, prefix = trained
    middle, back = str(tmp_path / "all.safetensors"), str(tmp_path / "back" / "model")
    os.makedirs(os.path.dirname(back))
    convert.convert(prefix, middle)
    report = convert.convert(middle, back, to="name")
    assert report.output_format == "name" and report.dropped == ()
    reader = tf.train.load_checkpoint(prefix)
    fresh = graphs.mnist_cnn(channels=(4, 8), fc_units=16, seed=7)
    with fresh.graph.as_default():
        saver = v1.train.Saver()
        with v1.Session(graph=fresh.graph) as sess:
            saver.restore(sess, back)
            for variable in v1.global_variables():
                name = variable.op.name
                assert sess.run(variable).tobytes() == reader.get_tensor(name).tobytes(), name
    assert tf.train.latest_checkpoint(os.path.dirname(back)) == back


def test_bfloat16_and_every_safetensors_dtype_round_trip(tmp_path):
    arrays = {f"t/{name}": np.arange(6).reshape(2, 3).astype(dtype) for name, dtype in [
        ("float32", np.float32), ("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16), ("float64", np.float64),
        ("int8", np.int8), ("int64", np.int64), ("uint8", np.uint8), ("bool", bool)]}
    prefix = str(tmp_path / "ckpt")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=list(arrays), shape_and_slices=[""] * len(arrays),
                      tensors=list(arrays.values()))
    convert.convert(prefix, str(tmp_path / "m.safetensors"))
    loaded = load_file(str(tmp_path / "m.safetensors"))
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype and loaded[name].tobytes() == array.tobytes(), name


def test_strings_are_refused_and_a_damaged_header_is_the_librarys_error(tmp_path):
    prefix = str(tmp_path / "ckpt")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=["vocab", "w"], shape_and_slices=["", ""],
                      tensors=[tf.constant([b"a", b"b"]), tf.ones([2])])
    with pytest.raises(ss.UnsupportedDtypeError) as error:
        convert.convert(prefix, str(tmp_path / "m.safetensors"))
    assert str(error.value) == (f"safetensors files hold numeric tensors only; '{prefix}' has vocab (string): leave "
                                "them out, e.g. --keep \"everything() - name('vocab')\"")
    assert not os.path.exists(tmp_path / "m.safetensors")
    good = str(tmp_path / "w.safetensors")
    convert.convert(prefix, good, keep="name('w')")
    data = open(good, "rb").read()
    header_length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_length])
    header["w"]["data_offsets"] = [0, 10**9]
    text = json.dumps(header).encode()
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + header_length:])
    with pytest.raises(ss.CorruptCheckpointError) as error:
        catalog.file_catalog(str(damaged))
    assert str(error.value).startswith(f"'{damaged}' is not a readable safetensors file: ")
