"""The auditor on legacy Keras batch norm built in graph mode: tf.compat.v1.layers and
tf_keras. Legacy Keras needs TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, so
the graphs are built and audited in one fresh process; this test reads its report."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

UPDATE_FIX = (
    "Build the training op under "
    "tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))."
)

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, warnings
    sys.path.insert(0, os.getcwd())
    import graphs
    import tensorflow as tf
    import subsetsaver as ss
    from subsetsaver.audit import audit, audit_values

    v1 = tf.compat.v1
    warnings.simplefilter("ignore")


    def found(findings):
        return [f.to_json() for f in findings]


    def unwired_layers_model():
        # tf.compat.v1.layers.batch_normalization, the train op built WITHOUT the UPDATE_OPS dependency.
        graph = tf.Graph()
        with graph.as_default():
            x = v1.placeholder(tf.float32, [None, 8, 8, 1], name="x")
            labels = v1.placeholder(tf.int64, [None], name="labels")
            phase_train = v1.placeholder(tf.bool, [], name="phase_train")
            h = v1.layers.batch_normalization(v1.layers.conv2d(x, 4, 3, name="conv"), training=phase_train, name="bn")
            logits = v1.layers.dense(v1.layers.flatten(h), 10, name="out")
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            with v1.variable_scope("opt"):
                step = v1.train.get_or_create_global_step()
                train_op = v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=step)
        tensors = {"x": x, "labels": labels, "phase_train": phase_train, "train_op": train_op}
        return graphs.BuiltGraph(graph, tensors, {"bn_stats": ["bn/moving_mean", "bn/moving_variance"]},
                                 info={"num_classes": 10})


    def after_training(built, steps):
        with v1.Session(graph=built.graph) as sess:
            with built.graph.as_default():
                sess.run(v1.global_variables_initializer())
            for step in range(steps):
                sess.run(built.tensors["train_op"], graphs.random_feed(built, seed=step))
            return found(audit_values(sess, ss.trainable() | ss.bn_stats()))


    report = {}
    models = {
        "layers_fused": graphs.layers_bn_model(fused=None),
        "layers_unfused": graphs.layers_bn_model(fused=False),
        "tf_keras": graphs.tf_keras_bn_model(),
    }
    for key, built in models.items():
        graph = built.graph
        report[key] = {
            "bn_stats": built.expected["bn_stats"],
            "trainable": found(audit(ss.trainable(), graph)),
            "trainable_and_stats": found(audit(ss.trainable() | ss.bn_stats(), graph)),
            "model": found(audit(ss.variables(built.expected["model"]), graph)),
            "fetch_output": found(audit(ss.trainable(), graph, fetches=["output"])),
            "fetch_train_op": found(audit(ss.trainable(), graph, fetches=[built.tensors["train_op"]])),
        }
    report["layers_fused"]["values"] = after_training(models["layers_fused"], 2)
    unwired = unwired_layers_model()
    report["unwired"] = {
        "bn_stats": unwired.expected["bn_stats"],
        "trainable_and_stats": found(audit(ss.trainable() | ss.bn_stats(), unwired.graph)),
        "values": after_training(unwired, 2),
    }
    print("REPORT " + json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def report():
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tests, env=env, capture_output=True, text=True, timeout=600
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):])


def bn_error(layer, variables):
    return {
        "code": "unsaved-state",
        "severity": "error",
        "variables": variables,
        "message": (
            f"{layer} keeps moving averages of the batch mean and variance that inference reads; they are "
            f"not saved and will be re-initialized on restore. Add bn_stats() or scope('{layer}')."
        ),
    }


@pytest.mark.parametrize(
    "model, layer",
    [("layers_fused", "bn"), ("layers_unfused", "bn"), ("tf_keras", "model/bn")],
)
def test_every_moving_statistic_is_flagged_and_nothing_else(report, model, layer):
    facts = report[model]
    assert len(facts["bn_stats"]) == 2
    assert facts["trainable"] == [bn_error(layer, facts["bn_stats"])]
    assert facts["fetch_output"] == [bn_error(layer, facts["bn_stats"])]
    # training=phase_train is a cond whose other branch normalizes with the moving statistics,
    # so even the train op's graph reads them (when fed phase_train=False).
    assert facts["fetch_train_op"] == [bn_error(layer, facts["bn_stats"])]


@pytest.mark.parametrize("model", ["layers_fused", "layers_unfused", "tf_keras"])
def test_no_false_positives_on_a_correct_selection(report, model):
    facts = report[model]
    assert facts["trainable_and_stats"] == []
    assert facts["model"] == []  # everything but optimizer state and step


def test_wired_updates_move_the_statistics(report):
    assert report["layers_fused"]["values"] == []


def test_unwired_train_op_is_caught_statically_and_at_runtime(report):
    facts = report["unwired"]
    assert facts["trainable_and_stats"] == [
        {
            "code": "stats-not-updated",
            "severity": "warning",
            "variables": facts["bn_stats"],
            "message": (
                "bn: the training op opt/Adam does not run the updates of its statistics "
                f"(bn/moving_mean, bn/moving_variance), so they never move from their initial values. {UPDATE_FIX}"
            ),
        }
    ]
    assert facts["values"] == [
        {
            "code": "stale-stats",
            "severity": "warning",
            "variables": facts["bn_stats"],
            "message": (
                "bn: the batch-norm statistics bn/moving_mean, bn/moving_variance still hold their initial "
                "values at global step 2: training never updated them, so a checkpoint would carry statistics "
                f"that inference cannot use. {UPDATE_FIX}"
            ),
        }
    ]
