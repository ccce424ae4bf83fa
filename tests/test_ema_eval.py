"""Moving-average weights for evaluation: an evaluation graph without EMA ops restores each
variable from its shadow when the checkpoint has one, and from itself otherwise."""

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import planning as planner
from subsetsaver import training
from subsetsaver.errors import CheckpointMismatchError

v1 = tf.compat.v1
AVERAGED = ("layer1/w", "layer1/b", "layer2/w")  # what ema_of_weights_model averages; layer2/b has no average
SHADOW = "ExponentialMovingAverage"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint prefix, x, logits of the training graph's averaged forward pass, its raw logits)."""
    built = graphs.ema_of_weights_model()
    plan = ss.plan(ss.everything(), built.graph)
    x = np.random.default_rng(5).random((6, 8), dtype=np.float32)
    with v1.Session(graph=built.graph) as sess:
        plan.restore_or_initialize(sess, None)
        for step in range(5):
            sess.run(built.tensors["train_op"], graphs.random_feed(built, batch_size=8, seed=step))
        prefix = plan.save(sess, str(tmp_path_factory.mktemp("train") / "model"), global_step=5)
        averaged, raw = sess.run([built.tensors["output_averaged"], built.tensors["logits"]], {built.tensors["x"]: x})
    assert not np.array_equal(averaged, raw)
    return prefix, x, averaged, raw


def evaluation_graph(scope="", hidden=16, use_resource=True):
    """The same MLP (layer1, layer2) for inference only: no optimizer, no global step, no EMA."""
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope("", use_resource=use_resource):
        x = v1.placeholder(tf.float32, [None, 8], name="x")
        with v1.variable_scope(scope or v1.get_variable_scope()):
            with v1.variable_scope("layer1"):
                w1 = v1.get_variable("w", [8, hidden])
                b1 = v1.get_variable("b", [hidden])
            with v1.variable_scope("layer2"):
                w2 = v1.get_variable("w", [hidden, 3])
                b2 = v1.get_variable("b", [3])
        logits = tf.identity(tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2, name="logits")
    return graph, x, logits


def test_logits_with_averages_equal_the_training_graphs_averaged_forward_pass(trained):
    prefix, x_value, averaged, _ = trained
    graph, x, logits = evaluation_graph()
    plan = ss.plan(ss.trainable(), graph)
    restorer = training.AverageRestorer(plan)
    graph.finalize()
    with v1.Session(graph=graph) as sess:
        report = restorer.restore_or_initialize(sess, prefix)
        got = sess.run(logits, {x: x_value})
    assert np.array_equal(got, averaged)
    assert report.checkpoint == prefix
    assert report.restored == ("layer1/w", "layer1/b", "layer2/w", "layer2/b")
    assert report.from_averages == AVERAGED
    assert report.initialized == ()
    assert isinstance(report, planner.RestoreReport)


def test_the_map_comes_from_the_checkpoint(trained):
    prefix, _, _, _ = trained
    graph, _, _ = evaluation_graph()
    expected = {name: f"{name}/{SHADOW}" for name in AVERAGED} | {"layer2/b": "layer2/b"}
    assert training.average_restore_map(ss.plan(ss.trainable(), graph), prefix) == expected
    assert training.average_restore_map(ss.trainable(), prefix, graph=graph) == expected
    assert training.average_restore_map("trainable() - name('layer1/b')", prefix, graph=graph) == {
        name: target for name, target in expected.items() if name != "layer1/b"}
    ema = v1.train.ExponentialMovingAverage(0.99)
    assert training.average_restore_map(ss.trainable(), prefix, ema=ema, graph=graph) == expected
    assert training.average_restore_map(ss.trainable(), prefix, ema="Other", graph=graph) == {
        name: name for name in expected}


def test_an_ema_whose_shadows_the_checkpoint_lacks_restores_the_raw_weights(trained):
    prefix, x_value, _, raw = trained
    graph, x, logits = evaluation_graph()
    restorer = training.AverageRestorer(ss.plan(ss.trainable(), graph), ema="Other")
    with v1.Session(graph=graph) as sess:
        report = restorer.restore_or_initialize(sess, prefix)
        got = sess.run(logits, {x: x_value})
    assert report.from_averages == ()
    assert np.array_equal(got, raw)


def test_remapped_names_find_their_shadows_and_reference_variables_work(trained):
    prefix, x_value, averaged, _ = trained
    graph, x, logits = evaluation_graph(scope="eval", use_resource=False)
    restorer = training.AverageRestorer(ss.plan(ss.trainable(), graph, remap={"/": "eval/"}))
    with v1.Session(graph=graph) as sess:
        report = restorer.restore_or_initialize(sess, prefix)
        got = sess.run(logits, {x: x_value})
    assert report.from_averages == tuple(f"eval/{name}" for name in AVERAGED)
    assert np.array_equal(got, averaged)


def test_a_shadow_of_another_shape_is_reported_before_any_variable_changes(trained):
    prefix, _, _, _ = trained
    graph, _, _ = evaluation_graph(hidden=5)
    plan = ss.plan(ss.trainable(), graph)
    restorer = training.AverageRestorer(plan)
    with graph.as_default():
        uninitialized = v1.report_uninitialized_variables()
    with v1.Session(graph=graph) as sess:
        with pytest.raises(CheckpointMismatchError) as error:
            restorer.restore_or_initialize(sess, prefix)
        assert len(sess.run(uninitialized)) == 4
    assert str(error.value) == (
        f"checkpoint '{prefix}' does not match the plan trainable(): 3 shape mismatches\n"
        "  shape mismatch: layer1/w (checkpoint name layer1/w/ExponentialMovingAverage), expected [8, 5] float32, "
        "checkpoint has [8, 16] float32\n"
        "  shape mismatch: layer1/b (checkpoint name layer1/b/ExponentialMovingAverage), expected [5] float32, "
        "checkpoint has [16] float32\n"
        "  shape mismatch: layer2/w (checkpoint name layer2/w/ExponentialMovingAverage), expected [5, 3] float32, "
        "checkpoint has [16, 3] float32\n"
        "Pass on_mismatch='initialize' to initialize these variables instead of restoring them."
    )


def test_on_mismatch_initialize_restores_the_rest_from_shadows(trained):
    prefix, _, _, _ = trained
    graph, _, _ = evaluation_graph(hidden=5)
    with graph.as_default(), v1.variable_scope("extra"):
        v1.get_variable("w", [8, 3])  # no such tensor in the checkpoint
    plan = ss.plan(ss.name("layer2/b") | ss.scope("extra") | ss.name("layer1/w"), graph, on_mismatch="initialize")
    restorer = training.AverageRestorer(plan)
    reader = tf.train.load_checkpoint(prefix)
    with v1.Session(graph=graph) as sess:
        report = restorer.restore_or_initialize(sess, prefix)
        layer2_b = sess.run(plan.saved[1])
    assert report.restored == ("layer2/b",)
    assert [(p.kind, p.name) for p in report.mismatched] == [("shape", "layer1/w"), ("missing", "extra/w")]
    assert report.from_averages == ()
    assert report.initialized == ("layer1/w", "layer1/b", "layer2/w", "extra/w")
    assert layer2_b.tobytes() == reader.get_tensor("layer2/b").tobytes()


def test_without_a_checkpoint_everything_is_initialized(tmp_path):
    graph, _, _ = evaluation_graph()
    restorer = training.AverageRestorer(ss.plan(ss.trainable(), graph))
    with v1.Session(graph=graph) as sess:
        report = restorer.restore_or_initialize(sess, str(tmp_path))
    assert report.checkpoint is None
    assert report.from_averages == () and report.restored == ()
    assert report.initialized == ("layer1/w", "layer1/b", "layer2/w", "layer2/b")


def test_portable_plans_are_refused():
    graph, _, _ = evaluation_graph()
    with pytest.raises(ValueError) as error:
        training.AverageRestorer(ss.plan(ss.trainable(), graph, backend="npz"))
    assert str(error.value) == (
        "moving averages are restored from TensorFlow checkpoints, but the plan uses backend 'npz'; build the "
        "evaluation plan with backend='tf' (a portable file converts with `subsetsaver convert`)"
    )


def test_plan_use_averages(trained):
    prefix, x_value, averaged, _ = trained
    graph, x, logits = evaluation_graph()
    plan = ss.plan(ss.trainable(), graph, use_averages=True)
    graph.finalize()
    with v1.Session(graph=graph) as sess:
        report = plan.restore_or_initialize(sess, prefix)
        got = sess.run(logits, {x: x_value})
    assert np.array_equal(got, averaged)
    assert report.from_averages == AVERAGED
