"""The catalog and the structural roles, on real graphs, .meta files and checkpoints."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import catalog

SMALL = dict(channels=(4, 8), fc_units=16)


def _names(variables):
    return [ss.selectors.variable_name(v) for v in variables]


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
@pytest.mark.parametrize("optimizer", graphs.all_optimizers())
def test_slots_equal_what_the_optimizer_reports(optimizer, resource):
    built = graphs.mnist_cnn(optimizer=optimizer, resource=resource, **SMALL)
    assert built.expected["slots"], "the optimizer must keep state for this test to mean anything"
    assert ss.slots().names(built.graph) == built.expected["slots"]
    cat = catalog.load(built.graph)
    for name in built.expected["slots"]:
        if name not in built.expected["non_slot"]:
            assert cat.record(name).slot_of in built.expected["trainable"]
    assert sorted(cat.role("optimizer")) == sorted(built.expected["non_slot"])


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
def test_handwritten_batch_norm_statistics(resource):
    built = graphs.mnist_cnn(resource=resource, **SMALL)
    assert len(built.expected["bn_stats"]) == 4
    assert ss.bn_stats().names(built.graph) == built.expected["bn_stats"]
    # The shadows are ExponentialMovingAverage shadows too; nothing else is.
    assert ss.averages().names(built.graph) == built.expected["bn_stats"]
    assert ss.global_step().names(built.graph) == built.expected["global_step"]
    assert ss.trainable().names(built.graph) == built.expected["trainable"]


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
def test_fused_batch_norm_statistics(training, resource):
    built = graphs.fused_bn_model(training=training, resource=resource)
    assert len(built.expected["bn_stats"]) == 2
    assert ss.bn_stats().names(built.graph) == built.expected["bn_stats"]
    assert not set(ss.bn_stats().names(built.graph)) & set(built.expected["slots"])


def test_averages_of_weights_are_not_statistics():
    built = graphs.ema_of_weights_model()
    cat = catalog.load(built.graph)
    assert ss.averages().names(built.graph) == built.expected["averages"]
    assert ss.bn_stats().names(built.graph, allow_empty=True) == []
    shadows = {name: cat.record(name).average_of for name in built.expected["averages"]}
    assert sorted(shadows.values()) == sorted(built.expected["averaged"])


def test_partitioned_variable_is_one_unit():
    built = graphs.partitioned_model(num_shards=3)
    full_name = "embed/emb"
    part_names = built.partitions[full_name]
    cat = catalog.load(built.graph)
    record = cat.record(full_name)
    assert record.parts == tuple(part_names) and len(part_names) == 3
    assert record.shape == (30, 4) and record.nbytes == 30 * 4 * 4
    assert "partitioned" in record.roles
    assert not any(name.startswith(full_name + "/part_") for name in cat.ordered_names)
    # TensorFlow saves the slots of a partitioned variable under the variable's full name
    # too ('embed/emb/t_0/Adagrad'), so they sit in its scope; they are still slots.
    chosen = (ss.scope("embed") - ss.slots()).resolve(built.graph)
    assert [v.op.name for v in chosen] == part_names
    assert ss.name("*/emb").names(built.graph) == [full_name]


def test_scope_matches_at_slash_boundaries_and_keeps_creation_order():
    graph = tf.Graph()
    with graph.as_default():
        created = [
            tf.compat.v1.Variable(1.0, name=n)
            for n in ["conv_10/w", "conv_1/w", "conv_1/bn/beta", "conv_1x", "other/conv_1/w"]
        ]
    assert ss.scope("conv_1").names(graph) == ["conv_1/w", "conv_1/bn/beta"]
    selected = (ss.scope("conv_10") | ss.scope("conv_1")).resolve(graph)
    assert selected == [created[0], created[1], created[2]]


def test_op_names_read_off_tensor_names_equal_the_ops_names():
    from subsetsaver import tf_internals

    graphs_built = [graphs.mnist_cnn(resource=resource, **SMALL).graph for resource in (True, False)]
    graphs_built += [graphs.partitioned_model(num_shards=3).graph, graphs.ema_of_weights_model().graph]
    uniquified = tf.Graph()
    with uniquified.as_default():  # a second 'v' in a reused scope name: TensorFlow renames the op to 'v_1'
        for resource in (True, False, True):
            tf.compat.v1.Variable(1.0, name="s/v", use_resource=resource)
        tf.compat.v1.Variable(2.0, name="exact/", use_resource=True)  # a name ending in '/' is taken as given
    graphs_built.append(uniquified)
    for graph in graphs_built:
        every = graph.get_collection("variables") + graph.get_collection("local_variables")
        assert tf_internals.op_names(every) == [variable.op.name for variable in every]
        assert len(every) > 2

    class NotOutputZero:  # a variable whose tensor is another output of its op: the op is asked
        name = "op:1"
        op = type("Op", (), {"name": "op"})()

    assert tf_internals.op_names([NotOutputZero()]) == ["op"]


def test_catalog_is_reread_when_the_graph_changes():
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.Variable(1.0, name="a")
        assert ss.everything().names(graph) == ["a"]
        tf.compat.v1.Variable(2.0, name="b")
        assert ss.everything().names(graph) == ["a", "b"]
        assert catalog.load(graph) is catalog.load(graph)


def test_meta_file_gives_the_same_catalog(tmp_path):
    built = graphs.mnist_cnn(**SMALL)
    meta = str(tmp_path / "model.meta")
    with built.graph.as_default():
        tf.compat.v1.train.export_meta_graph(meta)
    live, imported = catalog.load(built.graph), catalog.load(meta)
    assert imported.kind == "meta" and imported.graph is not built.graph
    # import_meta_graph does not bring the 'global_step' collection back; the role stays.
    def comparable(records):
        return [dataclasses.replace(r, collections=r.collections - {"global_step"}) for r in records]

    assert comparable(imported.records) == comparable(live.records)
    assert tf.compat.v1.get_default_graph() is not imported.graph


def _save_checkpoint(built, directory):
    with built.graph.as_default():
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=built.graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return saver.save(session, str(directory / "model"), global_step=7)


def test_checkpoint_catalog_reads_names_shapes_dtypes_and_guesses_roles(tmp_path):
    built = graphs.mnist_cnn(**SMALL)
    prefix = _save_checkpoint(built, tmp_path)
    live = catalog.load(built.graph)
    from_file = catalog.load(prefix)
    assert from_file.kind == "checkpoint"
    assert sorted(from_file.ordered_names) == sorted(live.ordered_names)
    for name in live.ordered_names:
        assert from_file.record(name).shape == live.record(name).shape
        assert from_file.record(name).dtype == live.record(name).dtype
        assert from_file.record(name).nbytes == live.record(name).nbytes
    assert sorted(ss.slots().names(prefix)) == sorted(built.expected["slots"])
    assert sorted(ss.bn_stats().names(prefix)) == sorted(built.expected["bn_stats"])
    assert catalog.load(str(tmp_path)).ordered_names == from_file.ordered_names
    explained = ss.slots().explain(prefix)
    assert explained.endswith("(from names: no graph)")


def test_missing_and_corrupt_sources_raise_clear_errors(tmp_path):
    with pytest.raises(ss.CheckpointNotFoundError) as missing:
        catalog.load(str(tmp_path / "nope"))
    assert str(missing.value) == f"no checkpoint at '{tmp_path}/nope' (expected '{tmp_path}/nope.index')"
    with pytest.raises(FileNotFoundError):
        catalog.load(str(tmp_path))
    built = graphs.mnist_cnn(**SMALL)
    prefix = _save_checkpoint(built, tmp_path)
    with open(prefix + ".index", "r+b") as handle:
        handle.truncate(40)
    with pytest.raises(ss.CorruptCheckpointError) as corrupt:
        catalog.load(prefix)
    assert str(corrupt.value).startswith(f"cannot read checkpoint '{prefix}': ")
    bad_meta = tmp_path / "bad.meta"
    bad_meta.write_bytes(b"\x08\x96\x01 this is not a MetaGraphDef")
    with pytest.raises(ss.CorruptCheckpointError) as meta_error:
        catalog.load(str(bad_meta))
    assert str(meta_error.value).startswith(f"'{bad_meta}' is not a readable MetaGraph file (")


def test_empty_selection_names_the_term_and_the_closest_scope():
    built = graphs.mnist_cnn(**SMALL)
    with pytest.raises(ss.EmptySelectionError) as error:
        ss.scope("conv1/bn").resolve(built.graph)
    assert str(error.value) == (
        "selector scope('conv1/bn') matches no variable.\n"
        "  scope('conv1/bn') matches nothing; closest names: conv_1/bn, conv_1/b, conv_2/bn\n"
        "Pass allow_empty=True (or use nothing()) if an empty selection is intended."
    )
    assert ss.nothing().resolve(built.graph) == []


def test_explain_counts_and_bytes_on_a_real_graph():
    built = graphs.mnist_cnn(**SMALL)
    cat = catalog.load(built.graph)
    selector = ss.trainable() | ss.scope("conv_1/bn") - ss.scope("opt")
    lines = selector.explain(built.graph).splitlines()
    chosen = selector.names(built.graph)
    assert len(lines) == 5
    size = ss.selectors.format_bytes(cat.nbytes(chosen))
    assert lines[0].split()[-4:] == [str(len(chosen)), "variables", *size.split()]
    assert lines[1].startswith("├── trainable()") and lines[4].startswith("    └── scope('opt')")


def test_values_of_resolved_variables_round_trip_by_name():
    """resolve() hands back the graph's own variables: the values read are the values set."""
    built = graphs.ema_of_weights_model()
    chosen = ss.trainable().resolve(built.graph)
    with tf.compat.v1.Session(graph=built.graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        values = session.run(chosen)
    assert [v.shape for v in values] == [tuple(v.shape.as_list()) for v in chosen]
    assert all(isinstance(v, np.ndarray) for v in values)


LEGACY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests!r})
    import graphs
    import subsetsaver as ss
    out = {{}}
    for builder in ("layers_bn_model", "tf_keras_bn_model"):
        built = getattr(graphs, builder)()
        out[builder] = {{
            "expected": built.expected["bn_stats"],
            "found": ss.bn_stats().names(built.graph),
            "slots_expected": built.expected["slots"],
            "slots_found": ss.slots().names(built.graph),
        }}
    print(json.dumps(out))
    """
)


def test_legacy_keras_batch_norm_statistics_in_their_own_process():
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    script = LEGACY_SCRIPT.format(tests=os.path.dirname(__file__))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for builder, sets in found.items():
        assert len(sets["expected"]) == 2, builder
        assert sets["found"] == sets["expected"], builder
        assert sets["slots_found"] == sets["slots_expected"], builder


def test_import_is_cheap():
    code = "import sys, subsetsaver; print(sorted(m for m in ('matplotlib', 'graphviz', 'tensorflow') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr


def test_checkpoint_roles_from_the_names_hand_written_and_keras_optimizers_give(tmp_path):
    """Without a graph, the names BERT-style optimizers (VAR/adam_m) and legacy Keras optimizers in graph
    mode ([training/]Adam/VAR/m, Adam/iter, Adam/beta_1) give their state are optimizer state."""
    names = ["bert/layer_0/kernel", "bert/layer_0/kernel/adam_m", "bert/layer_0/kernel/adam_v", "global_step",
             "cls/bias", "cls/bias/lamb_m", "cls/bias/lamb_v", "dense/kernel", "training/Adam/dense/kernel/m",
             "training/Adam/dense/kernel/v", "Adam/iter", "Adam/beta_1", "Adam/learning_rate", "bn/moving_mean"]
    prefix = str(tmp_path / "model")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[np.zeros([2], np.float32) for _ in names])
    cat = catalog.checkpoint_catalog(prefix)
    assert ss.slots().names(cat) == sorted([
        "bert/layer_0/kernel/adam_m", "bert/layer_0/kernel/adam_v", "cls/bias/lamb_m", "cls/bias/lamb_v",
        "training/Adam/dense/kernel/m", "training/Adam/dense/kernel/v", "Adam/beta_1", "Adam/learning_rate"])
    assert ss.global_step().names(cat) == ["Adam/iter", "global_step"]
    assert sorted(cat.role("hyperparameter")) == ["Adam/beta_1", "Adam/learning_rate"]  # the optimizer's, no slot
    assert "slot" not in cat.record("Adam/learning_rate").roles
    assert cat.record("training/Adam/dense/kernel/m").slot_of == "dense/kernel"
    assert cat.record("bert/layer_0/kernel/adam_v").slot_of == "bert/layer_0/kernel"
    assert (~ss.slots()).names(cat) == sorted(["Adam/iter", "bert/layer_0/kernel", "bn/moving_mean", "cls/bias",
                                                 "dense/kernel", "global_step"])
