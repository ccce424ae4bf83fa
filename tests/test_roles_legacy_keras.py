"""Roles and the audit on tf_keras models in graph mode (``graphs.keras_application``).

tf_keras needs TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, and Keras's graph-mode
training needs eager execution off, so the models are built and audited in one fresh process;
this file reads its report. MobileNetV2 with each kind of optimizer: legacy Keras Adam and SGD
with momentum (their ``iter``, ``learning_rate``, ``beta_1``... are the optimizer's), and
``tf.compat.v1.train`` Adam and Momentum, which Keras runs in the same ``session.run`` as the
batch-norm updates (its training function's grouped update op); a small model under
``LossScaleOptimizer``.
"""

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
OPTIMIZERS = ["adam", "sgd", "v1_adam", "v1_momentum"]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, warnings
    sys.path.insert(0, os.getcwd())
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    import graphs
    import subsetsaver as ss
    from subsetsaver import catalog
    from subsetsaver.audit import audit
    from subsetsaver.errors import SubsetSaverError
    from subsetsaver.planning import plan

    warnings.simplefilter("ignore")
    ROLES = {"slots": ss.slots, "bn_stats": ss.bn_stats, "averages": ss.averages, "global_step": ss.global_step}


    def found(findings):
        return [f.to_json() for f in findings]


    def strict_plan(selector, graph):
        try:
            plan(selector, graph, strict=True)
        except SubsetSaverError as error:
            return str(error)
        return "ok"


    def facts(built):
        graph, cat = built.graph, catalog.load(built.graph)
        names = {key: selector().names(graph, allow_empty=True) for key, selector in ROLES.items()}
        train_ops = [op.name for op in graph.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP)]
        step = [built.tensors["loss"], built.tensors["train_op"]]
        return {
            "roles": names,
            "expected": {key: built.expected[key] for key in ROLES},
            "optimizer": sorted(cat.role("optimizer")),
            "loss_scale": sorted(cat.role("loss_scale")),
            "expected_non_slot": sorted(built.expected["non_slot"]),
            "expected_loss_scale": built.expected["loss_scale"],
            "bn_layers": built.info["bn_layers"],
            "train_ops": train_ops,
            "slots_size": ss.selectors.format_bytes(cat.nbytes(built.expected["slots"])),
            "trainable": found(audit(ss.trainable(), graph)),
            "trainable_and_stats": found(audit(ss.trainable() | ss.bn_stats(), graph)),
            "strict_plan": strict_plan(ss.trainable() | ss.bn_stats(), graph),
            "with_slots": found(audit(ss.trainable() | ss.bn_stats() | ss.slots(), graph)),
            "fetch_step": found(audit(ss.trainable() | ss.bn_stats(), graph, fetches=step)),
            "fetch_train_op": found(audit(ss.trainable() | ss.bn_stats(), graph, fetches=train_ops))
            if train_ops else None,
        }


    report = {}
    for optimizer in %(optimizers)r:
        report[optimizer] = facts(graphs.keras_application(optimizer=optimizer))
    scaled = graphs.keras_application(optimizer="adam", application="small", loss_scale=True)
    report["loss_scale"] = facts(scaled)
    without = ss.everything() - ss.variables(scaled.expected["loss_scale"])
    report["loss_scale"]["without_loss_scale"] = found(audit(without, scaled.graph))
    report["loss_scale"]["without_size"] = ss.selectors.format_bytes(catalog.load(scaled.graph).nbytes(
        [n for n in scaled.expected["slots"] if n not in scaled.expected["loss_scale"]]))
    print("REPORT " + json.dumps(report))
    """
) % {"optimizers": OPTIMIZERS}


@pytest.fixture(scope="module")
def report():
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tests, env=env, capture_output=True, text=True, timeout=900
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):])


def finding(code, severity, variables, message):
    return {"code": code, "severity": severity, "variables": list(variables), "message": message}


def bn_error(layer):
    return finding(
        "unsaved-state", "error", [f"{layer}/moving_mean", f"{layer}/moving_variance"],
        f"{layer} keeps moving averages of the batch mean and variance that inference reads; they are not saved "
        f"and will be re-initialized on restore. Add bn_stats() or scope('{layer}').",
    )


def saved_info(variables, size, selector):
    return finding(
        "optimizer-state-saved", "info", variables,
        f"the selection saves {len(variables)} optimizer variables ({size}) that only resuming training needs; "
        f"for inference alone save {selector} - slots().",
    )


@pytest.mark.parametrize("optimizer", OPTIMIZERS + ["loss_scale"])
def test_roles_are_exactly_what_the_optimizer_and_the_layers_made(report, optimizer):
    facts = report[optimizer]
    assert facts["roles"] == facts["expected"]
    assert facts["optimizer"] == facts["expected_non_slot"]
    assert facts["loss_scale"] == facts["expected_loss_scale"]
    assert len(facts["roles"]["bn_stats"]) == 2 * len(facts["bn_layers"])
    assert facts["roles"]["averages"] == []


def test_the_legacy_optimizers_own_variables_and_step(report):
    assert report["adam"]["optimizer"] == [
        "training/Adam/beta_1", "training/Adam/beta_2", "training/Adam/decay", "training/Adam/learning_rate"
    ]
    assert report["adam"]["roles"]["global_step"] == ["training/Adam/iter"]
    assert report["sgd"]["optimizer"] == ["training/SGD/decay", "training/SGD/learning_rate", "training/SGD/momentum"]
    assert report["sgd"]["roles"]["global_step"] == ["training/SGD/iter"]
    assert report["v1_adam"]["optimizer"] == ["training/beta1_power", "training/beta2_power"]
    assert report["v1_momentum"]["optimizer"] == [] and report["v1_momentum"]["roles"]["global_step"] == []
    assert len(report["adam"]["bn_layers"]) == 52


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_no_false_positives_on_trainable_and_statistics(report, optimizer):
    facts = report[optimizer]
    assert facts["trainable_and_stats"] == []
    assert facts["strict_plan"] == "ok"
    assert facts["fetch_step"] == []  # the loss and the grouped update op, fetched together


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_trainable_alone_forgets_every_batch_norm_layer(report, optimizer):
    facts = report[optimizer]
    assert facts["trainable"] == [bn_error(layer) for layer in facts["bn_layers"]]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_slots_without_the_step(report, optimizer):
    facts = report[optimizer]
    info = saved_info(facts["expected"]["slots"], facts["slots_size"], "(trainable() | bn_stats() | slots())")
    steps = facts["expected"]["global_step"]
    partial = [
        finding(
            "optimizer-state-partial", "warning", steps,
            f"the selection saves optimizer state but not the global step {steps[0]}: a resumed run would count "
            "steps (and decay learning rates) from 0 again. Add global_step().",
        )
    ] if steps else []
    assert facts["with_slots"] == partial + [info]


@pytest.mark.parametrize("optimizer", ["v1_adam", "v1_momentum"])
def test_the_v1_train_op_alone_does_not_run_the_updates(report, optimizer):
    facts = report[optimizer]
    op = {"v1_adam": "training/Adam", "v1_momentum": "training/Momentum"}[optimizer]
    assert facts["train_ops"] == [op]  # Keras runs it inside its grouped update op, with the statistics' updates
    assert facts["fetch_train_op"] == [
        finding(
            "stats-not-updated", "warning", [f"{layer}/moving_mean", f"{layer}/moving_variance"],
            f"{layer}: the training op {op} does not run the updates of its statistics ({layer}/moving_mean, "
            f"{layer}/moving_variance), so they never move from their initial values. {UPDATE_FIX}",
        )
        for layer in facts["bn_layers"]
    ]


def test_loss_scale_optimizer_state(report):
    facts = report["loss_scale"]
    assert facts["loss_scale"] == ["current_loss_scale", "good_steps"]
    assert facts["trainable_and_stats"] == [] and facts["strict_plan"] == "ok"
    kept = [name for name in facts["expected"]["slots"] if name not in facts["loss_scale"]]
    assert facts["without_loss_scale"] == [
        finding(
            "optimizer-state-partial", "warning", ["current_loss_scale", "good_steps"],
            "the selection saves optimizer state but not the loss-scale state current_loss_scale, good_steps: a "
            "resumed run would restart loss scaling from its initial scale, and skip steps again while it shrinks. "
            "Add slots().",
        ),
        saved_info(kept, facts["without_size"], "everything() - variables('current_loss_scale', 'good_steps')"),
    ]
