"""Smoke tests for the TF1-style graph builders in tests/graphs.py.

Each builder is built with small sizes, initialized, trained for one step and
run for inference in a ``tf.compat.v1.Session``; its ``expected`` lists are
checked against the graph. Eager execution stays enabled globally (the
builders only use ``with graph.as_default()``); the legacy-Keras builders run
in a subprocess with TF_USE_LEGACY_KERAS=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import graphs  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1

SMALL_CNN = dict(channels=(4,), fc_units=8)  # one conv block: fast
TWO_BLOCKS = dict(channels=(4, 8), fc_units=16)
BATCH = 4


# --------------------------------------------------------------------------
# helpers


@pytest.fixture(autouse=True)
def _global_state_untouched():
    """Builders must not touch the default graph or leave toggles flipped."""
    default_graph = v1.get_default_graph()
    ops_before = len(default_graph.get_operations())
    state = (
        tf.executing_eagerly(),
        v1.control_flow_v2_enabled(),
        v1.resource_variables_enabled(),
    )
    yield
    assert v1.get_default_graph() is default_graph
    assert len(default_graph.get_operations()) == ops_before
    assert (
        tf.executing_eagerly(),
        v1.control_flow_v2_enabled(),
        v1.resource_variables_enabled(),
    ) == state


def check_expected(built: graphs.BuiltGraph) -> None:
    """Structural consistency of ``built.expected`` with the graph."""
    graph, expected = built.graph, built.expected
    assert isinstance(graph, tf.Graph)
    for key in graphs.STANDARD_KEYS:
        assert key in expected, key
    variables = graphs.variable_map(graph)
    order = {name: i for i, name in enumerate(expected["all"])}
    assert list(variables) == expected["all"]
    for key, names in expected.items():
        assert len(names) == len(set(names)), f"duplicates in {key}"
        for name in names:
            assert not name.endswith(":0") and name in variables, (key, name)
        assert names == sorted(names, key=order.__getitem__), f"{key} not in collection order"
    assert expected["trainable"] == [v.op.name for v in graph.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES)]
    assert set(expected["non_slot"]) <= set(expected["slots"])
    assert not set(expected["slots"]) & set(expected["trainable"])
    assert not set(expected["bn_stats"]) & set(expected["trainable"])
    excluded = set(expected["slots"]) | set(expected["global_step"])
    assert expected["model"] == [n for n in expected["all"] if n not in excluded]
    for name in expected["bn_stats"] + expected["averages"] + expected["slots"]:
        assert not variables[name].trainable, name
    for key in ("x", "loss"):
        assert key in built.tensors, key
    assert "logits" in built.tensors or "output" in built.tensors
    for tensor in built.tensors.values():
        assert tensor.graph is graph
    if built.optimizer is not None:
        assert "train_op" in built.tensors
        assert isinstance(built.optimizer, v1.train.Optimizer)
    for full_name, parts in built.partitions.items():
        assert parts and all(p in variables for p in parts), full_name


def run_session(built: graphs.BuiltGraph, watch: list[str]):
    """Init, one training step (if any) and one inference; returns the values
    of ``watch`` at init / after the train step / after inference, and the
    inference output."""
    variables = graphs.variable_map(built.graph)
    fetch = [variables[name] for name in watch]
    with v1.Session(graph=built.graph) as sess:
        sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
        initial = sess.run(fetch)
        if "train_op" in built.tensors:
            feed = graphs.random_feed(built, batch_size=BATCH, training=True, seed=1)
            _, loss = sess.run([built.tensors["train_op"], built.tensors["loss"]], feed)
            assert np.isfinite(loss)
        trained = sess.run(fetch)
        feed = graphs.random_feed(built, batch_size=BATCH, training=False, seed=2)
        output = sess.run(built.tensors.get("output", built.tensors.get("logits")), feed)
        inferred = sess.run(fetch)
    assert np.all(np.isfinite(output))
    return initial, trained, inferred, output


def changed(a, b) -> list[bool]:
    return [not np.array_equal(x, y) for x, y in zip(a, b)]


def op_types(graph: tf.Graph) -> set[str]:
    return {op.type for op in graph.get_operations()}


def apply_op_types(graph: tf.Graph) -> set[str]:
    return {t for t in op_types(graph) if "Apply" in t}


# --------------------------------------------------------------------------
# mnist_cnn


def test_all_optimizers():
    names = graphs.all_optimizers()
    assert "sgd" not in names
    assert names == [n for n in graphs.OPTIMIZERS if n != "sgd"]
    assert len(names) == 9
    with pytest.raises(ValueError):
        graphs.mnist_cnn(optimizer="nope")


@pytest.mark.parametrize("optimizer", graphs.OPTIMIZERS)
def test_mnist_cnn_resource(optimizer):
    built = graphs.mnist_cnn(optimizer=optimizer, **SMALL_CNN)
    check_expected(built)
    exp = built.expected
    assert built.info["cond_v2"] is True
    assert set(graphs.variable_op_types(built.graph).values()) == {"VarHandleOp"}
    assert "If" in op_types(built.graph) and "Switch" not in op_types(built.graph)
    assert exp["global_step"] == ["opt/global_step"]
    assert len(exp["bn_stats"]) == 2 * len(SMALL_CNN["channels"])
    assert exp["averages"] == []
    assert len(exp["trainable"]) == 4 * len(SMALL_CNN["channels"]) + 4
    if optimizer == "adagrad_da":
        assert built.optimizer.get_slot_names() == [
            "gradient_accumulator",
            "gradient_squared_accumulator",
        ]
    if optimizer == "rmsprop_centered":
        assert built.optimizer.get_slot_names() == ["mg", "momentum", "rms"]
    if optimizer == "sgd":
        assert exp["slots"] == []
    else:
        assert exp["slots"]
        # every trainable variable has at least one slot
        opt = built.optimizer
        for var in built.graph.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES):
            assert any(opt.get_slot(var, n) is not None for n in opt.get_slot_names())
    assert apply_op_types(built.graph)
    assert all(t.startswith("Resource") for t in apply_op_types(built.graph))

    watch = exp["bn_stats"] + exp["trainable"] + exp["global_step"]
    initial, trained, inferred, output = run_session(built, watch)
    assert output.shape == (BATCH, 10)
    np.testing.assert_allclose(output.sum(axis=1), 1.0, rtol=1e-5)
    n_bn = len(exp["bn_stats"])
    assert all(changed(initial[:n_bn], trained[:n_bn])), "EMA of batch moments not updated"
    assert any(changed(initial[n_bn:-1], trained[n_bn:-1])), "no trainable variable moved"
    assert trained[-1] == 1
    assert not any(changed(trained, inferred)), "inference changed a variable"


# Reference-variable mode for the optimizers whose variables differ most
# (non-slot vars, global-step reader, 3 slots, 2 slots, none); momentum and
# adagrad run in reference mode in the fused/ema/partitioned tests below.
REF_OPTIMIZERS = ("adam", "adagrad_da", "rmsprop_centered", "ftrl", "sgd")


@pytest.mark.parametrize("optimizer", REF_OPTIMIZERS)
def test_mnist_cnn_reference_variables(optimizer):
    built = graphs.mnist_cnn(optimizer=optimizer, resource=False, **SMALL_CNN)
    check_expected(built)
    assert built.info["cond_v2"] is False
    types = graphs.variable_op_types(built.graph)
    assert set(types.values()) == {"VariableV2"}, types
    assert {"Switch", "Merge"} <= op_types(built.graph)
    assert not {"If", "StatelessIf"} & op_types(built.graph)
    assert apply_op_types(built.graph)
    assert not any(t.startswith("Resource") for t in apply_op_types(built.graph))
    assert bool(built.expected["slots"]) == (optimizer != "sgd")
    bn = built.expected["bn_stats"]
    initial, trained, inferred, _ = run_session(built, bn + built.expected["global_step"])
    assert all(changed(initial[:-1], trained[:-1]))
    assert trained[-1] == 1
    assert not any(changed(trained, inferred))


def test_mnist_cnn_two_blocks_slot_names_from_optimizer():
    built = graphs.mnist_cnn(optimizer="adam", **TWO_BLOCKS)
    check_expected(built)
    exp = built.expected
    assert exp["non_slot"] == ["opt/beta1_power", "opt/beta2_power"]
    for scope in ("conv_1", "conv_2", "fc", "out"):
        assert f"opt/{scope}/w/Adam" in exp["slots"] and f"opt/{scope}/w/Adam_1" in exp["slots"]
    assert [n.split("/")[0] for n in exp["bn_stats"]] == ["conv_1", "conv_1", "conv_2", "conv_2"]
    # slots (incl. non-slot) + global step + model partition the variables
    assert sorted(exp["slots"] + exp["global_step"] + exp["model"]) == sorted(exp["all"])
    initial, trained, _, output = run_session(built, exp["bn_stats"])
    assert output.shape == (BATCH, 10)
    assert all(changed(initial, trained))


def test_mnist_cnn_bn_updates_not_wired():
    built = graphs.mnist_cnn(batch_norm_updates=False, **SMALL_CNN)
    check_expected(built)
    bn = built.expected["bn_stats"]
    assert len(bn) == 2 * len(SMALL_CNN["channels"])
    variables = graphs.variable_map(built.graph)
    with v1.Session(graph=built.graph) as sess:
        sess.run(v1.global_variables_initializer())
        initial = sess.run([variables[n] for n in bn])
        sess.run(built.tensors["train_op"], graphs.random_feed(built, training=True))
        assert not any(changed(initial, sess.run([variables[n] for n in bn])))
        sess.run(built.tensors["bn_update"], graphs.random_feed(built, training=True))
        assert all(changed(initial, sess.run([variables[n] for n in bn])))


def test_mnist_cnn_ref_variables_with_cond_v2_get_resource_ema():
    # Variables created inside a control-flow-v2 cond branch are lifted out of
    # the branch function but are always resource variables.
    built = graphs.mnist_cnn(resource=False, cond_v2=True, **SMALL_CNN)
    check_expected(built)
    types = graphs.variable_op_types(built.graph)
    assert {types[n] for n in built.expected["bn_stats"]} == {"VarHandleOp"}
    others = set(types) - set(built.expected["bn_stats"])
    assert {types[n] for n in others} == {"VariableV2"}


# --------------------------------------------------------------------------
# fused_bn_model


@pytest.mark.parametrize("resource", [True, False])
@pytest.mark.parametrize("wire_updates", [True, False])
def test_fused_bn_model(resource, wire_updates):
    built = graphs.fused_bn_model(resource=resource, wire_updates=wire_updates)
    check_expected(built)
    exp = built.expected
    assert exp["bn_stats"] == ["block/bn/moving_mean", "block/bn/moving_variance"]
    assert exp["slots"] and exp["global_step"] == ["opt/global_step"]
    kind = "VarHandleOp" if resource else "VariableV2"
    assert set(graphs.variable_op_types(built.graph).values()) == {kind}
    assert len(built.graph.get_collection(v1.GraphKeys.UPDATE_OPS)) == 2
    fused = [op for op in built.graph.get_operations() if op.type == "FusedBatchNormV3"]
    assert sorted(op.get_attr("is_training") for op in fused) == [False, True]
    initial, trained, inferred, output = run_session(built, exp["bn_stats"])
    assert output.shape == (BATCH, 10)
    assert all(changed(initial, trained)) == wire_updates
    assert not any(changed(initial, trained)) == (not wire_updates)
    assert not any(changed(trained, inferred))


def test_fused_bn_model_inference_only():
    built = graphs.fused_bn_model(training=False)
    check_expected(built)
    assert built.optimizer is None and "train_op" not in built.tensors
    assert built.expected["slots"] == [] and built.expected["global_step"] == []
    assert len(built.expected["bn_stats"]) == 2
    initial, trained, inferred, output = run_session(built, built.expected["bn_stats"])
    assert output.shape == (BATCH, 10)
    assert not any(changed(initial, inferred))


# --------------------------------------------------------------------------
# ema_of_weights_model


@pytest.mark.parametrize("resource", [True, False])
def test_ema_of_weights_model(resource):
    built = graphs.ema_of_weights_model(resource=resource)
    check_expected(built)
    exp = built.expected
    assert exp["averaged"] == ["layer1/w", "layer1/b", "layer2/w"]
    assert "layer2/b" in exp["trainable"] and "layer2/b" not in exp["averaged"]
    assert len(exp["averages"]) == 3 and exp["slots"]
    assert not set(exp["averages"]) & set(exp["slots"])
    kind = "VarHandleOp" if resource else "VariableV2"
    assert set(graphs.variable_op_types(built.graph).values()) == {kind}
    initial, trained, inferred, _ = run_session(built, exp["averages"] + exp["averaged"])
    assert all(changed(initial, trained))
    assert not any(changed(trained, inferred))
    # shadows start at the primaries' initial values
    for shadow, primary in zip(initial[:3], initial[3:]):
        np.testing.assert_array_equal(shadow, primary)


# --------------------------------------------------------------------------
# partitioned_model


@pytest.mark.parametrize("resource", [True, False])
@pytest.mark.parametrize("num_shards", [3, 4])
def test_partitioned_model(resource, num_shards):
    built = graphs.partitioned_model(num_shards=num_shards, resource=resource)
    check_expected(built)
    parts = built.partitions["embed/emb"]
    assert parts == [f"embed/emb/part_{i}" for i in range(num_shards)]
    variables = graphs.variable_map(built.graph)
    assert sum(variables[p].shape[0] for p in parts) == 30
    assert all(variables[p].shape[1] == 4 for p in parts)
    slots = built.expected["slots"]
    for p in parts:
        assert built.optimizer.get_slot(variables[p], "accumulator").op.name in slots
    kind = "VarHandleOp" if resource else "VariableV2"
    assert set(graphs.variable_op_types(built.graph).values()) == {kind}
    sparse = "ResourceSparseApplyAdagrad" if resource else "SparseApplyAdagrad"
    assert sparse in apply_op_types(built.graph)
    initial, trained, inferred, output = run_session(built, parts + slots)
    assert output.shape == (BATCH, 5)
    assert any(changed(initial[: len(parts)], trained[: len(parts)]))
    assert not any(changed(trained, inferred))


def test_partitioned_model_slot_partitions_without_opt_scope():
    built = graphs.partitioned_model(num_shards=3, opt_scope=None)
    check_expected(built)
    assert built.partitions["embed/emb/Adagrad"] == [f"embed/emb/part_{i}/Adagrad" for i in range(3)]
    assert built.expected["global_step"] == ["global_step"]
    run_session(built, built.expected["slots"])


# --------------------------------------------------------------------------
# wide_graph


def test_wide_graph():
    start = time.perf_counter()
    built = graphs.wide_graph(num_variables=403)
    elapsed = time.perf_counter() - start
    assert elapsed < 30, f"wide_graph(num_variables=403) took {elapsed:.1f}s"
    check_expected(built)
    exp = built.expected
    assert len(exp["all"]) == 403
    assert len(exp["non_trainable"]) == 101
    assert len(exp["trainable"]) == 302
    assert sum(len(exp[f"scope:{s}"]) for s in ("conv_1", "conv_10", "conv_2", "opt")) == 403
    assert not set(exp["scope:conv_1"]) & set(exp["scope:conv_10"])
    assert any(n.startswith("conv_1/bn/moments/") for n in exp["scope:conv_1"])
    assert set(graphs.variable_op_types(built.graph).values()) == {"VarHandleOp"}
    variables = graphs.variable_map(built.graph)
    with v1.Session(graph=built.graph) as sess:
        sess.run(built.tensors["init"])
        assert sess.run(v1.report_uninitialized_variables()).size == 0
        out = sess.run(built.tensors["output"], {built.tensors["x"]: [1.0, 2.0]})
        np.testing.assert_allclose(out, [0.0, 3.0])
        sess.run(variables[exp["all"][7]].assign([5.0, 6.0]))
        np.testing.assert_allclose(sess.run(variables[exp["all"][7]]), [5.0, 6.0])
        sess.run(v1.global_variables_initializer())
        np.testing.assert_allclose(sess.run(variables[exp["all"][7]]), [0.0, 1.0])


def test_selectors_on_a_20000_variable_graph():
    """Scope boundaries and collections hold at the size the selector benchmark uses."""
    import subsetsaver as ss

    built = graphs.wide_graph()
    assert len(built.graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES)) == 20000
    scopes = {key.split(":", 1)[1]: names for key, names in built.expected.items() if key.startswith("scope:")}
    assert scopes, "wide_graph lists the variables of each scope"
    for scope_name, names in scopes.items():
        assert ss.scope(scope_name).names(built.graph) == names, scope_name
    assert ss.trainable().names(built.graph) == built.expected["trainable"]
    assert ss.everything().names(built.graph) == built.expected["all"]


# --------------------------------------------------------------------------
# legacy Keras builders


@pytest.mark.skipif(os.environ.get("TF_USE_LEGACY_KERAS") == "1", reason="legacy Keras enabled in this process")
def test_legacy_builders_require_env():
    with pytest.raises(RuntimeError, match="TF_USE_LEGACY_KERAS=1"):
        graphs.layers_bn_model()
    with pytest.raises(RuntimeError, match="TF_USE_LEGACY_KERAS=1"):
        graphs.tf_keras_bn_model()


LEGACY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {tests_dir!r})
    import numpy as np
    import graphs
    import tensorflow as tf
    v1 = tf.compat.v1
    out = {{}}
    cases = {{
        "layers_bn_model": lambda: graphs.layers_bn_model(),
        "tf_keras_bn_model": lambda: graphs.tf_keras_bn_model(),
    }}
    for key, build in cases.items():
        built = build()
        variables = graphs.variable_map(built.graph)
        bn = [variables[n] for n in built.expected["bn_stats"]]
        with v1.Session(graph=built.graph) as sess:
            sess.run(v1.global_variables_initializer())
            before = sess.run(bn)
            _, loss = sess.run([built.tensors["train_op"], built.tensors["loss"]],
                               graphs.random_feed(built, training=True))
            after = sess.run(bn)
            sess.run(built.tensors["output"], graphs.random_feed(built, training=False))
            inferred = sess.run(bn)
        out[key] = {{
            "expected": built.expected,
            "loss": float(loss),
            "updated": [not np.array_equal(a, b) for a, b in zip(before, after)],
            "changed_by_inference": [not np.array_equal(a, b) for a, b in zip(after, inferred)],
            "variable_types": sorted(set(graphs.variable_op_types(built.graph).values())),
        }}
    print("RESULT " + json.dumps(out))
    """
)


def test_legacy_keras_builders_in_subprocess():
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run(
        [sys.executable, "-c", LEGACY_SCRIPT.format(tests_dir=tests_dir)],
        env={**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    results = json.loads(line[len("RESULT ") :])
    assert set(results) == {"layers_bn_model", "tf_keras_bn_model"}
    for key, res in results.items():
        exp = res["expected"]
        assert len(exp["bn_stats"]) == 2, key
        assert set(exp["bn_stats"]) <= set(exp["all"]), key
        assert not set(exp["bn_stats"]) & set(exp["trainable"]), key
        assert exp["slots"] and exp["global_step"] == ["opt/global_step"], key
        assert np.isfinite(res["loss"]), key
        assert res["updated"] == [True, True], key
        assert res["changed_by_inference"] == [False, False], key
        assert res["variable_types"] == ["VarHandleOp"], key
    assert results["layers_bn_model"]["expected"]["bn_stats"] == [
        "bn/moving_mean",
        "bn/moving_variance",
    ]
    keras = results["tf_keras_bn_model"]["expected"]
    assert set(keras["bn_stats"]) <= set(keras["keras_weights"])
