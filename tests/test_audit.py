"""The auditor on real graphs: hand-written and fused batch norm, EMA of weights, loops,
tf.function, optimizer state, the runtime check and the command line.

Legacy Keras layers run in their own process: see test_audit_legacy_keras.py.
"""

import contextlib
import gc
import importlib.util
import json
import pathlib
import types
import warnings

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import catalog
from subsetsaver.audit import Finding, Severity, audit, audit_values, warn_for
from subsetsaver.errors import SubsetSaverError, SubsetSaverWarning

v1 = tf.compat.v1
SMALL_CNN = dict(channels=(4, 8), fc_units=16, input_hw=8)
UPDATE_FIX = (
    "Build the training op under "
    "tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))."
)


def bn_message(layer):
    return (
        f"{layer} keeps moving averages of the batch mean and variance that inference reads; they are "
        f"not saved and will be re-initialized on restore. Add bn_stats() or scope('{layer}')."
    )


def unsaved(variables, message):
    return Finding("unsaved-state", Severity.ERROR, tuple(variables), message)


def under(names, scope):
    return tuple(n for n in names if n.startswith(scope + "/"))


@pytest.fixture(scope="module", params=[True, False], ids=["resource", "reference"])
def cnn(request):
    return graphs.mnist_cnn(resource=request.param, **SMALL_CNN)


@pytest.fixture(scope="module")
def cnn_unwired():
    return graphs.mnist_cnn(resource=True, batch_norm_updates=False, **SMALL_CNN)


@pytest.fixture(scope="module", params=[True, False], ids=["resource", "reference"])
def fused(request):
    return graphs.fused_bn_model(resource=request.param)


@pytest.fixture(scope="module")
def fused_unwired():
    return graphs.fused_bn_model(wire_updates=False)


@pytest.fixture(scope="module")
def ema():
    return graphs.ema_of_weights_model()


# ---------------------------------------------------------------------------------
# unsaved-state
# ---------------------------------------------------------------------------------


def test_trainable_alone_gives_one_error_per_handwritten_bn_layer(cnn):
    stats = cnn.expected["bn_stats"]
    assert audit(ss.trainable(), cnn.graph) == [
        unsaved(under(stats, "conv_1"), bn_message("conv_1/bn")),
        unsaved(under(stats, "conv_2"), bn_message("conv_2/bn")),
    ]
    assert len(under(stats, "conv_1")) == 2  # exactly the two EMA shadows of the batch moments


def test_trainable_and_bn_stats_forget_nothing(cnn):
    assert audit(ss.trainable() | ss.bn_stats(), cnn.graph) == []
    assert gc.isenabled()  # the audit pauses the garbage collector, and only while it runs


def test_the_first_finding_reads_as_documented(cnn):
    finding = audit(ss.trainable(), cnn.graph)[0]
    assert finding.severity == "error"
    assert str(finding) == (
        "error: unsaved-state: conv_1/bn keeps moving averages of the batch mean and variance that "
        "inference reads; they are not saved and will be re-initialized on restore. "
        "Add bn_stats() or scope('conv_1/bn')."
    )
    assert finding.to_json()["severity"] == "error"


def test_fused_batch_norm_statistics_are_flagged(fused):
    assert audit(ss.trainable(), fused.graph) == [
        unsaved(("block/bn/moving_mean", "block/bn/moving_variance"), bn_message("block/bn"))
    ]
    assert audit(ss.trainable() | ss.bn_stats(), fused.graph) == []


def test_fetches_narrow_what_inference_reads(fused):
    flagged = [unsaved(("block/bn/moving_mean", "block/bn/moving_variance"), bn_message("block/bn"))]
    assert audit(ss.trainable(), fused.graph, fetches=["output"]) == flagged
    assert audit(ss.trainable(), fused.graph, fetches=fused.tensors["output"]) == flagged
    # The training path normalizes with batch moments; its own moving-average update reads the
    # statistics (through the same 'read' snapshot, for reference variables) but is no use.
    assert audit(ss.trainable(), fused.graph, fetches=[fused.tensors["logits"]]) == []
    assert audit(ss.trainable(), fused.graph, fetches=[fused.tensors["train_op"]]) == []


def test_unknown_fetch_is_named_with_the_closest_ops(fused):
    with pytest.raises(ValueError) as caught:
        audit(ss.trainable(), fused.graph, fetches=["outptu"])
    assert str(caught.value) == "fetch 'outptu' is not an op of the graph; closest op names: output"


def test_averages_of_weights_that_inference_reads(ema):
    assert audit(ss.trainable(), ema.graph) == [
        unsaved(
            ("layer1/w/ExponentialMovingAverage", "layer1/b/ExponentialMovingAverage"),
            "layer1 keeps exponential moving averages of layer1/w, layer1/b that inference reads; they are "
            "not saved and will be re-initialized on restore. Add averages() or scope('layer1').",
        ),
        unsaved(
            ("layer2/w/ExponentialMovingAverage",),
            "layer2 keeps an exponential moving average of layer2/w that inference reads; it is not saved "
            "and will be re-initialized on restore. Add averages() or scope('layer2').",
        ),
    ]
    assert audit(ss.trainable() | ss.averages(), ema.graph) == []
    assert audit(ss.trainable(), ema.graph, fetches=["output"]) == []  # the raw weights' forward pass


@contextlib.contextmanager
def control_flow_v2(enabled):
    previous = v1.control_flow_v2_enabled()
    (v1.enable_control_flow_v2 if enabled else v1.disable_control_flow_v2)()
    try:
        yield
    finally:
        (v1.enable_control_flow_v2 if previous else v1.disable_control_flow_v2)()


def loop_graph(resource, v2):
    """A statistic read inside a tf.while_loop body (v1 Enter/Merge/Switch or a v2 While)."""
    graph = tf.Graph()
    with control_flow_v2(v2), graph.as_default(), v1.variable_scope("loop", use_resource=resource):
        x = v1.placeholder(tf.float32, [3], name="x")
        scale = v1.get_variable("scale", [3], initializer=v1.ones_initializer())
        shift = v1.get_variable("shift", [3], initializer=v1.zeros_initializer(), trainable=False)
        _, out = v1.while_loop(lambda i, acc: i < 3, lambda i, acc: (i + 1, acc * scale - shift), [0, x])
        tf.identity(out, name="output")
    return graph


LOOP_MESSAGE = (
    "loop keeps non-trainable state (loop/shift) that inference reads; it is not saved and will be "
    "re-initialized on restore. Add scope('loop') or variables('loop/shift')."
)


@pytest.mark.parametrize(
    "resource, v2", [(True, True), (True, False), (False, False)], ids=["while-v2", "while-v1", "while-v1-ref"]
)
def test_state_read_inside_a_while_loop(resource, v2):
    graph = loop_graph(resource, v2)
    ops = {op.type for op in graph.get_operations()}
    assert ("While" in ops) == v2 and ("Enter" in ops) == (not v2)
    assert audit(ss.trainable(), graph) == [unsaved(("loop/shift",), LOOP_MESSAGE)]
    assert audit(ss.trainable(), graph, fetches=["loop/output"]) == [unsaved(("loop/shift",), LOOP_MESSAGE)]
    assert audit(ss.everything(), graph) == []


def test_state_read_inside_a_tf_function():
    graph = tf.Graph()
    with graph.as_default(), v1.variable_scope("norm", use_resource=True):
        x = v1.placeholder(tf.float32, [3], name="x")
        mean = v1.get_variable("mean", [3], initializer=v1.zeros_initializer(), trainable=False)

        @tf.function
        def centred(value):
            return value - mean

        tf.identity(centred(x), name="output")
    assert "StatefulPartitionedCall" in {op.type for op in graph.get_operations()}
    assert audit(ss.nothing(), graph) == [
        unsaved(
            ("norm/mean",),
            "norm keeps non-trainable state (norm/mean) that inference reads; it is not saved and will be "
            "re-initialized on restore. Add scope('norm') or variables('norm/mean').",
        )
    ]


def test_local_variables_and_unread_state_are_not_flagged():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None], name="x")
        w = v1.get_variable("w", [], initializer=v1.ones_initializer())
        v1.get_variable("unused", [2], trainable=False)
        v1.metrics.mean(x * w, name="metric")
    assert [r.name for r in catalog.load(graph).records if "local_variables" in r.collections] == [
        "metric/total", "metric/count"
    ]
    assert audit(ss.trainable(), graph) == []


def test_meta_file_gives_the_same_findings(cnn, tmp_path):
    path = str(tmp_path / "model.meta")
    with cnn.graph.as_default():
        v1.train.export_meta_graph(path)
    assert audit(ss.trainable(), path) == audit(ss.trainable(), cnn.graph)


def test_a_plan_is_audited_by_its_saved_names(fused):
    plan = types.SimpleNamespace(
        saved_names=["block/w", "block/bn/scale", "block/bn/offset", "head/dense/w", "head/dense/b"],
        catalog=catalog.load(fused.graph),
    )
    assert audit(plan) == audit(ss.trainable(), fused.graph)


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
def test_a_real_plan_and_its_saver_ops_change_nothing(resource):
    from subsetsaver.planning import plan

    built = graphs.fused_bn_model(resource=resource, wire_updates=False)
    before = audit(ss.trainable(), built.graph)
    assert [f.code for f in before] == ["unsaved-state", "stats-not-updated"]
    with pytest.warns(SubsetSaverWarning) as caught:  # the plan warns of the error it was built with
        trainable_plan = plan(ss.trainable(), built.graph)
    assert [str(w.message) for w in caught] == [f"unsaved-state: {before[0].message}"]
    full_plan = plan(ss.trainable() | ss.bn_stats(), built.graph)
    assert {"SaveV2", "RestoreV2"} <= {op.type for op in built.graph.get_operations()}
    assert audit(trainable_plan) == before  # restores, saves and initializers read nothing
    assert audit(full_plan) == before[1:]
    with trained(built, 2) as sess:
        assert [(f.code, f.variables) for f in audit_values(sess, full_plan)] == [
            ("stale-stats", ("block/bn/moving_mean", "block/bn/moving_variance"))
        ]
        assert audit_values(sess, trainable_plan) == []  # it saves no statistic


def test_a_checkpoint_cannot_be_audited(fused, tmp_path):
    with fused.graph.as_default(), v1.Session(graph=fused.graph) as sess:
        sess.run(v1.global_variables_initializer())
        prefix = v1.train.Saver().save(sess, str(tmp_path / "ckpt"), write_meta_graph=False)
    with pytest.raises(TypeError) as caught:
        audit(ss.trainable(), prefix)
    assert str(caught.value) == "a checkpoint catalog has no graph to trace; pass a tf.Graph or a .meta file"


def test_resnet_like_graph_flags_every_block():
    spec = importlib.util.spec_from_file_location(
        "bench_audit", pathlib.Path(__file__).parents[1] / "bench" / "bench_audit.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    blocks = 8
    graph = bench.resnet_like(blocks)
    findings = audit(ss.trainable(), graph)
    assert findings == [
        unsaved(
            (f"block_{i}/bn/moving_mean", f"block_{i}/bn/moving_variance"), bn_message(f"block_{i}/bn")
        )
        for i in range(blocks)
    ]
    assert audit(ss.trainable() | ss.bn_stats(), graph) == []


def test_the_dataflow_as_networkx_graphs(fused):
    import networkx as nx

    from subsetsaver.catalog.dataflow import USE, dataflow

    flow = dataflow(catalog.load(fused.graph))
    deps, values = flow.to_networkx("deps"), flow.to_networkx("values")
    assert deps.nodes["block/bn/moving_mean"] == {"type": fused.graph.get_operation_by_name(
        "block/bn/moving_mean").type, "variable": "block/bn/moving_mean"}
    assert nx.has_path(deps, "block/bn/moving_mean", "output")
    assert not nx.has_path(deps, "block/bn/moving_mean", "logits")
    assert nx.has_path(deps, "block/bn/moving_mean", fused.tensors["train_op"].name)  # through UPDATE_OPS
    assert nx.has_path(values, "block/bn/moving_mean", "output")
    assert not nx.has_path(values, "block/bn/moving_mean", fused.tensors["train_op"].name)
    assert nx.has_path(values, "block/w", USE)  # into the gradients


# ---------------------------------------------------------------------------------
# stats-not-updated
# ---------------------------------------------------------------------------------


def test_stats_not_updated_when_the_train_op_ignores_update_ops(fused_unwired):
    assert audit(ss.trainable() | ss.bn_stats(), fused_unwired.graph) == [
        Finding(
            "stats-not-updated",
            Severity.WARNING,
            ("block/bn/moving_mean", "block/bn/moving_variance"),
            "block/bn: the training op opt/Momentum does not run the updates of its statistics "
            f"(block/bn/moving_mean, block/bn/moving_variance), so they never move from their initial values. "
            f"{UPDATE_FIX}",
        )
    ]


def test_no_stats_warning_when_fused_updates_are_wired(fused):
    assert audit(ss.trainable() | ss.bn_stats(), fused.graph) == []


def test_no_stats_warning_when_updates_run_in_the_cond_branch(cnn):
    assert audit(ss.trainable() | ss.bn_stats(), cnn.graph) == []


def test_stats_not_updated_for_handwritten_bn(cnn_unwired):
    stats = cnn_unwired.expected["bn_stats"]
    findings = audit(ss.trainable() | ss.bn_stats(), cnn_unwired.graph)
    assert [(f.code, f.variables) for f in findings] == [
        ("stats-not-updated", under(stats, "conv_1")),
        ("stats-not-updated", under(stats, "conv_2")),
    ]
    assert findings[1].message == (
        f"conv_2/bn: the training op opt/Adam does not run the updates of its statistics ({', '.join(stats[2:])}), "
        f"so they never move from their initial values. {UPDATE_FIX}"
    )


# ---------------------------------------------------------------------------------
# optimizer state, empty terms
# ---------------------------------------------------------------------------------


def test_optimizer_state_saved_reports_its_size(fused):
    slots = tuple(fused.expected["slots"])
    assert audit(ss.everything(), fused.graph) == [
        Finding(
            "optimizer-state-saved",
            Severity.INFO,
            slots,
            # 144 + 16 + 16 + 10240 + 40 bytes of Momentum accumulators
            "the selection saves 5 optimizer variables (10.2 KB) that only resuming training needs; "
            "for inference alone save everything() - slots().",
        )
    ]


def test_slots_of_some_saved_variables_missing(fused):
    findings = audit(ss.everything() - ss.scope("opt/head"), fused.graph)
    assert findings[0] == Finding(
        "optimizer-state-partial",
        Severity.WARNING,
        ("opt/head/dense/w/Momentum", "opt/head/dense/b/Momentum"),
        "the selection saves optimizer slots, but not those of head/dense/w, head/dense/b: a resumed run "
        "would restart their optimizer state from zero. Add slots() to save all of it, or subtract slots() "
        "to save none.",
    )
    assert [f.code for f in findings] == ["optimizer-state-partial", "optimizer-state-saved"]


def test_slots_without_the_optimizers_own_variables_or_step(cnn):
    selection = ss.trainable() | ss.bn_stats() | (ss.slots() - ss.name("**/*_power"))
    findings = audit(selection, cnn.graph)
    assert [(f.code, f.variables) for f in findings] == [
        ("optimizer-state-partial", ("opt/global_step",)),
        ("optimizer-state-partial", ("opt/beta1_power", "opt/beta2_power")),
        ("optimizer-state-saved", tuple(n for n in cnn.expected["slots"] if not n.endswith("_power"))),
    ]
    assert findings[0].message == (
        "the selection saves optimizer state but not the global step opt/global_step: a resumed run would "
        "count steps (and decay learning rates) from 0 again. Add global_step()."
    )
    assert findings[1].message == (
        "the selection saves optimizer slots but not the optimizer's own variables opt/beta1_power, "
        "opt/beta2_power: a resumed run would restart them from the initial value. Add slots()."
    )
    assert audit(ss.trainable() | ss.bn_stats() | ss.slots() | ss.global_step(), cnn.graph)[0].code == (
        "optimizer-state-saved"
    )


def test_empty_term(cnn):
    assert audit(ss.trainable() | ss.bn_stats() | ss.scope("conv_3") | ss.nothing(), cnn.graph) == [
        Finding(
            "empty-term",
            Severity.WARNING,
            (),
            "scope('conv_3') matches no variable (closest names: conv_2, conv_1, conv_2/w); "
            "fix the term or remove it.",
        )
    ]


def test_findings_come_errors_first(cnn):
    findings = audit(ss.trainable() | ss.slots() | ss.scope("conv_3"), cnn.graph)
    assert [f.severity for f in findings] == ["error", "error", "warning", "warning", "info"]
    assert [f.code for f in findings][2:] == ["optimizer-state-partial", "empty-term", "optimizer-state-saved"]


# ---------------------------------------------------------------------------------
# audit_values
# ---------------------------------------------------------------------------------


class CountingSession:
    """A session that counts its runs."""

    def __init__(self, session):
        self.session, self.graph, self.runs = session, session.graph, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self.session.run(*args, **kwargs)


def trained(built, steps):
    sess = v1.Session(graph=built.graph)
    with built.graph.as_default():
        sess.run(v1.global_variables_initializer())
    for step in range(steps):
        sess.run(built.tensors["train_op"], graphs.random_feed(built, seed=step))
    return sess


def test_stale_stats_after_training_without_updates(fused_unwired):
    sess = trained(fused_unwired, 3)
    with sess:
        counting = CountingSession(sess)
        version = fused_unwired.graph.version
        findings = audit_values(counting, ss.trainable() | ss.bn_stats())
        assert counting.runs == 1 and fused_unwired.graph.version == version
    assert findings == [
        Finding(
            "stale-stats",
            Severity.WARNING,
            ("block/bn/moving_mean", "block/bn/moving_variance"),
            "block/bn: the batch-norm statistics block/bn/moving_mean, block/bn/moving_variance still hold "
            "their initial values at global step 3: training never updated them, so a checkpoint would carry "
            f"statistics that inference cannot use. {UPDATE_FIX}",
        )
    ]


def test_no_stale_stats_when_updates_are_wired(fused):
    with trained(fused, 3) as sess:
        assert audit_values(sess, ss.trainable() | ss.bn_stats()) == []
        values = sess.run(fused.graph.get_tensor_by_name("block/bn/moving_variance:0"))
        assert not np.array_equal(values, np.ones(4, np.float32))


def test_stale_handwritten_shadows_and_step_zero(cnn_unwired):
    with trained(cnn_unwired, 0) as sess:
        assert audit_values(sess, ss.trainable() | ss.bn_stats()) == []  # step 0: nothing to say yet
        sess.run(cnn_unwired.tensors["train_op"], graphs.random_feed(cnn_unwired))
        findings = audit_values(sess, ss.trainable() | ss.bn_stats())
    stats = cnn_unwired.expected["bn_stats"]
    assert [(f.code, f.variables) for f in findings] == [
        ("stale-stats", under(stats, "conv_1")),
        ("stale-stats", under(stats, "conv_2")),
    ]


# ---------------------------------------------------------------------------------
# warn_for
# ---------------------------------------------------------------------------------


def test_warn_for_warns_once_per_error(cnn):
    findings = audit(ss.trainable() | ss.scope("conv_3"), cnn.graph)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        errors = warn_for(findings)
    assert errors == findings[:2]
    assert [w.category for w in caught] == [SubsetSaverWarning, SubsetSaverWarning]
    assert str(caught[0].message) == "unsaved-state: " + bn_message("conv_1/bn")
    assert caught[0].filename == __file__


def test_warn_for_strict_raises_with_every_error(cnn):
    findings = audit(ss.trainable(), cnn.graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict never warns
        with pytest.raises(SubsetSaverError) as caught:
            warn_for(findings, strict=True)
    assert str(caught.value) == "\n".join(
        [
            "the selection forgets state inference needs (2 errors):",
            "  unsaved-state: " + bn_message("conv_1/bn"),
            "  unsaved-state: " + bn_message("conv_2/bn"),
            "Fix the selection, or pass strict=False to get warnings instead.",
        ]
    )
    assert warn_for(audit(ss.trainable() | ss.bn_stats(), cnn.graph), strict=True) == []


# ---------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------


@pytest.fixture()
def cli_main():
    from subsetsaver.cli import main

    return main


@pytest.fixture(scope="module")
def fused_meta(tmp_path_factory):
    built = graphs.fused_bn_model(wire_updates=False)
    path = str(tmp_path_factory.mktemp("meta") / "fused.meta")
    with built.graph.as_default():
        v1.train.export_meta_graph(path)
    return path


def run_cli(main, capsys, *args):
    with pytest.raises(SystemExit) as caught:
        main(["audit", *args])
    out, err = capsys.readouterr()
    return caught.value.code, out, err


def test_cli_exits_1_on_errors(cli_main, capsys, fused_meta):
    code, out, err = run_cli(cli_main, capsys, "--graph", fused_meta, "--save", "trainable()")
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[0] == "error    unsaved-state      " + bn_message("block/bn")
    indent = " " * len("warning  stats-not-updated  ")  # the widest severity and code set the column
    assert lines[1:3] == [indent + "block/bn/moving_mean", indent + "block/bn/moving_variance"]
    assert lines[3].startswith("warning  stats-not-updated  block/bn: the training op opt/Momentum")
    assert lines[-1] == "1 error, 1 warning, 0 info"


def test_cli_json_and_fetches(cli_main, capsys, fused_meta):
    code, out, _ = run_cli(
        cli_main, capsys, "--graph", fused_meta, "--save", "trainable() | bn_stats()", "--fetch", "output", "--json"
    )
    assert code == 0
    report = json.loads(out)
    assert report["selector"] == "trainable() | bn_stats()" and report["fetches"] == ["output"]
    assert [f["code"] for f in report["findings"]] == ["stats-not-updated"]
    assert report["counts"] == {"error": 0, "warning": 1, "info": 0}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--save", "trainable()", "--fetch", "outptu"],
         "subsetsaver: error: fetch 'outptu' is not an op of the graph; closest op names: output\n"),
        (["--save", "trainabel()"], None),
        (["--fetch", "output"], None),
    ],
    ids=["unknown-fetch", "bad-expression", "no-save"],
)
def test_cli_exits_2_on_bad_input(cli_main, capsys, fused_meta, args, message):
    code, out, err = run_cli(cli_main, capsys, "--graph", fused_meta, *args)
    assert code == 2 and out == ""
    if message is not None:
        assert err == message
    assert "Traceback" not in err and err.count("\n") >= 1
