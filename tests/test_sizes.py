"""Checkpoint sizes computed before writing equal the files TensorFlow writes."""

import os

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver.planning import plan, sizes

v1 = tf.compat.v1

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64", "complex128"]


def file_sizes(prefix):
    directory, base = os.path.split(prefix)
    data = {f: os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
            if f.startswith(base + ".data-")}
    return data, os.path.getsize(prefix + ".index")


def dtype_graph(resource=True):
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope("", use_resource=resource):
        for position, dtype in enumerate(DTYPES):
            shape = [position + 1, 3] if position % 2 else [7 + position]
            v1.get_variable(f"kinds/{dtype}", shape, dtype=tf.as_dtype(dtype), initializer=v1.zeros_initializer())
        v1.get_variable("kinds/scalar", [], dtype=tf.float32, initializer=v1.zeros_initializer())
        v1.get_variable("kinds/empty", [0, 4], dtype=tf.float32, initializer=v1.zeros_initializer())
    return graph


def test_data_bytes_equal_the_data_file_for_every_dtype(tmp_path):
    graph = dtype_graph()
    the_plan = plan(ss.everything(), graph)
    with v1.Session(graph=graph) as sess:
        the_plan.restore_or_initialize(sess, None)
        prefix = the_plan.save(sess, str(tmp_path / "model"), write_meta_graph=False)
    data, index = file_sizes(prefix)
    assert data == {"model.data-00000-of-00001": the_plan.sizes.data_bytes}
    expected = sum(int(np.prod(v.shape.as_list())) * tf.as_dtype(v.dtype.base_dtype).size for v in the_plan.saved)
    assert the_plan.sizes.data_bytes == expected == 1210
    assert the_plan.sizes.exact
    assert abs(the_plan.sizes.index_bytes - index) <= 0.1 * index
    assert the_plan.sizes.index_bytes == index  # the layout model is exact for TF's tensor bundle


def test_reference_variables_and_one_dtype_subsets(tmp_path):
    graph = dtype_graph(resource=False)
    with graph.as_default():
        variables = {v.op.name: v for v in v1.global_variables()}
    for dtype in ("float16", "int32", "int64", "bool", "float64"):
        the_plan = plan(ss.name(f"kinds/{dtype}"), graph)
        with v1.Session(graph=graph) as sess:
            the_plan.restore_or_initialize(sess, None)
            prefix = the_plan.save(sess, str(tmp_path / dtype), write_meta_graph=False)
        data, index = file_sizes(prefix)
        variable = variables[f"kinds/{dtype}"]
        assert sum(data.values()) == the_plan.sizes.data_bytes == (
            int(np.prod(variable.shape.as_list())) * variable.dtype.base_dtype.size)
        assert the_plan.sizes.index_bytes == index


def test_partitioned_and_sharded_over_two_devices(tmp_path):
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope("", use_resource=True):
        with tf.device("/device:CPU:0"):
            v1.get_variable("embed/emb", [1000, 6], partitioner=v1.fixed_size_partitioner(3))
            v1.get_variable("dense/w", [6, 5])
        with tf.device("/device:CPU:1"):
            v1.get_variable("dense/b", [5], dtype=tf.float64)
            v1.get_variable("steps", [], dtype=tf.int64, initializer=v1.zeros_initializer())
    the_plan = plan(ss.everything(), graph, sharded=True)
    with v1.Session(graph=graph, config=v1.ConfigProto(device_count={"CPU": 2})) as sess:
        the_plan.restore_or_initialize(sess, None)
        prefix = the_plan.save(sess, str(tmp_path / "model"), write_meta_graph=False)
    data, index = file_sizes(prefix)
    assert data == {"model.data-00000-of-00002": 1000 * 6 * 4 + 6 * 5 * 4, "model.data-00001-of-00002": 5 * 8 + 8}
    assert the_plan.sizes.data_bytes == sum(data.values())
    assert the_plan.sizes.data_files == 2
    assert the_plan.sizes.index_bytes == index


def test_plan_sizes_on_the_seed_model(tmp_path):
    built = graphs.mnist_cnn(channels=(4, 8), fc_units=32)
    seed = ss.trainable() | ss.scope("conv_1/bn") | ss.scope("conv_2/bn")
    with v1.Session(graph=built.graph) as sess:
        for label, selector in (("seed", seed), ("all", ss.everything())):
            the_plan = plan(selector, built.graph)
            the_plan.restore_or_initialize(sess, None)
            prefix = the_plan.save(sess, str(tmp_path / label), write_meta_graph=False)
            data, index = file_sizes(prefix)
            assert sum(data.values()) == the_plan.sizes.data_bytes == the_plan.catalog.nbytes(the_plan.saved_names)
            assert the_plan.sizes.index_bytes == index
            if label == "all":
                assert the_plan.sizes.full_checkpoint_bytes == sum(data.values()) + index
    assert abs(the_plan.sizes.checkpoint_bytes / plan(seed, built.graph).sizes.checkpoint_bytes - 3) < 0.05


def save_raw(prefix, tensors, slices=None):
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[t.key for t in tensors],
                      shape_and_slices=slices or [""] * len(tensors),
                      tensors=[tf.zeros(t.shape, dtype=t.dtype) for t in tensors])
    data, index = file_sizes(prefix)
    return sum(data.values()), index


@pytest.mark.parametrize("count", [1, 40, 900, 5000])
def test_index_estimate_small_to_multi_block(tmp_path, count):
    # 5000 entries of ~70 bytes need two 256 KB table blocks.
    tensors = [sizes.SavedTensor(f"tower_{i % 7}/layer_{i}/kernel/ExponentialMovingAverage", "float32", (i % 4 + 1, 2))
               for i in range(count)]
    data, index = save_raw(str(tmp_path / "bundle"), tensors)
    assert data == sizes.data_bytes(tensors)
    estimate = sizes.index_bytes(tensors)
    assert abs(estimate - index) <= 0.1 * index
    assert estimate == index
    if count == 5000:
        assert index > 256 * 1024


@pytest.mark.parametrize("full, rows", [((30, 4), (10, 10, 10)), ((200000, 2), (70000, 70000, 60000))])
def test_index_estimate_for_slices(tmp_path, full, rows):
    tensors, slices, start = [], [], 0
    for count in rows:
        tensor = sizes.SavedTensor("embed/emb", "float32", (count,) + full[1:], full, (start,) + (0,) * (len(full) - 1))
        tensors.append(tensor)
        slices.append(" ".join(map(str, full)) + " " + ":".join(f"{o},{s}" for o, s in zip(tensor.offset, tensor.shape)))
        start += count
    tensors.append(sizes.SavedTensor("dense/w", "float32", (4, 5)))
    slices.append("")
    data, index = save_raw(str(tmp_path / "bundle"), tensors, slices)
    assert data == sizes.data_bytes(tensors) == full[0] * full[1] * 4 + 80
    assert sizes.index_bytes(tensors) == index


def test_strings_and_unknown_shapes_are_not_exact():
    assert not sizes.SavedTensor("s", "string", (3,)).exact
    assert sizes.SavedTensor("s", "string", (3,)).nbytes == 0
    assert not sizes.SavedTensor("u", "float32", (None, 3)).exact
    assert sizes.SavedTensor("c", "complex128", (2, 3)).nbytes == 96


def test_per_scope_breakdown_and_full_saver_comparison():
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope("", use_resource=True):
        v1.get_variable("a/w", [10, 10])
        v1.get_variable("a/b", [10])
        v1.get_variable("b/w", [10, 30])
        v1.get_variable("c", [5], collections=[v1.GraphKeys.LOCAL_VARIABLES])
    the_plan = plan(ss.scope("a"), graph)
    got = the_plan.sizes
    assert (got.saved_bytes, got.rest_bytes, got.total_bytes) == (440, 1220, 1660)
    assert got.per_scope == (
        sizes.ScopeSize("(root)", 0, 0, 1, 20),
        sizes.ScopeSize("a", 2, 440, 0, 0),
        sizes.ScopeSize("b", 0, 0, 1, 1200),
    )
    # A default Saver writes the global variables only: a/w, a/b, b/w.
    assert got.full_data_bytes == 1640
    assert got.data_bytes == 440
    assert got.ratio == (1640 + got.full_index_bytes) / (440 + got.index_bytes)
