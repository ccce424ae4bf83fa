"""Roles and the audit on a corpus of third-party training code (``tests/graphs.py``, section 9).

Each case is code written the way its authors wrote it: google-research/bert's
AdamWeightDecayOptimizer and LAMB (moments in ``tf.get_variable(trainable=False)``, plain
assigns, the global step bumped by hand), tensor2tensor's Adafactor (row and column moments),
NVIDIA's gradient accumulation, layer and group norm (no statistics), mixed-precision loss
scaling, and every ``tf.compat.v1.train`` optimizer. Each states the exact ``slots()``,
``bn_stats()``, ``averages()`` and ``global_step()`` and the exact findings of the audit.
Then the training step as users run it, and remap suggestions on a BERT fine-tuning graph.
tf_keras models: test_roles_legacy_keras.py.
"""

import warnings

import graphs
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import catalog
from subsetsaver.audit import Finding, Severity, audit, audit_values
from subsetsaver.planning import plan

v1 = tf.compat.v1
ROLE_SELECTORS = {"slots": ss.slots, "bn_stats": ss.bn_stats, "averages": ss.averages, "global_step": ss.global_step}
UPDATE_FIX = (
    "Build the training op under "
    "tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS))."
)


def roles_of(graph):
    return {key: selector().names(graph, allow_empty=True) for key, selector in ROLE_SELECTORS.items()}


def expected_roles(built):
    return {key: built.expected[key] for key in ROLE_SELECTORS}


def bn_error(layer, variables):
    return Finding(
        "unsaved-state", Severity.ERROR, tuple(variables),
        f"{layer} keeps moving averages of the batch mean and variance that inference reads; they are "
        f"not saved and will be re-initialized on restore. Add bn_stats() or scope('{layer}').",
    )


def saved_info(graph, selector, names):
    size = ss.selectors.format_bytes(catalog.load(graph).nbytes(names))
    return Finding(
        "optimizer-state-saved", Severity.INFO, tuple(names),
        f"the selection saves {len(names)} optimizer variable{'s' if len(names) != 1 else ''} ({size}) that only "
        f"resuming training needs; for inference alone save {selector - ss.slots()!r}.",
    )


def step_missing(step):
    return Finding(
        "optimizer-state-partial", Severity.WARNING, (step,),
        f"the selection saves optimizer state but not the global step {step}: a resumed run would count steps "
        "(and decay learning rates) from 0 again. Add global_step().",
    )


def slot_of(graph):
    return {r.name: r.slot_of for r in catalog.load(graph).records if r.slot_of}


# ---------------------------------------------------------------------------------
# the issue's minimal shape
# ---------------------------------------------------------------------------------


def test_handwritten_adam_under_a_layer_norm():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        w = v1.get_variable("dense/w", [4, 4])
        h = tf.matmul(x, w)
        mean, var = tf.nn.moments(h, [-1], keepdims=True)
        y = (h - mean) * tf.math.rsqrt(var + 1e-6)
        (g,) = tf.gradients(tf.reduce_mean(y ** 2), [w])
        m = v1.get_variable("dense/w/adam_m", w.shape, trainable=False, initializer=v1.zeros_initializer())
        v = v1.get_variable("dense/w/adam_v", w.shape, trainable=False, initializer=v1.zeros_initializer())
        nm, nv = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * tf.square(g)
        tf.group(w.assign(w - 0.01 * nm / (tf.sqrt(nv) + 1e-6)), m.assign(nm), v.assign(nv), name="train")
    assert roles_of(graph) == {"slots": ["dense/w/adam_m", "dense/w/adam_v"], "bn_stats": [], "averages": [],
                               "global_step": []}
    assert slot_of(graph) == {"dense/w/adam_m": "dense/w", "dense/w/adam_v": "dense/w"}
    assert (ss.trainable() | ss.bn_stats()).names(graph) == ["dense/w"]
    assert (~ss.slots()).names(graph) == ["dense/w"]


# ---------------------------------------------------------------------------------
# hand-written optimizers: BERT's AdamW and LAMB, Adafactor
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[("adamw", True), ("adamw", False), ("lamb", True), ("lamb", False)],
                ids=["adamw-resource", "adamw-reference", "lamb-resource", "lamb-reference"])
def bert(request):
    optimizer, resource = request.param
    return graphs.bert_classifier(optimizer=optimizer, resource=resource)


def test_bert_moments_are_optimizer_state_and_nothing_is_a_statistic(bert):
    suffix = "adam" if isinstance(bert.optimizer, graphs.AdamWeightDecayOptimizer) else "lamb"
    trainable = bert.expected["trainable"]
    assert len(trainable) == 25 and "output_weights" in trainable
    assert roles_of(bert.graph) == expected_roles(bert)
    assert bert.expected["slots"] == [f"{w}/{suffix}_{k}" for w in trainable for k in "mv"]
    assert bert.expected["global_step"] == ["global_step"] and bert.expected["bn_stats"] == []
    assert slot_of(bert.graph) == {f"{w}/{suffix}_{k}": w for w in trainable for k in "mv"}
    assert catalog.load(bert.graph).role("optimizer") == frozenset()


def test_bert_selections_keep_what_they_say(bert):
    graph, trainable = bert.graph, bert.expected["trainable"]
    assert (ss.trainable() | ss.bn_stats()).names(graph) == trainable  # no optimizer tensor sneaks in
    assert (~ss.slots()).names(graph) == trainable + ["global_step"]  # slim --keep '~slots()' drops the moments


def test_bert_audit_findings(bert):
    graph, slots = bert.graph, tuple(bert.expected["slots"])
    assert audit(ss.trainable(), graph) == []
    assert audit(ss.everything() - ss.slots(), graph) == []
    with_slots = ss.trainable() | ss.slots()
    assert audit(with_slots, graph) == [step_missing("global_step"), saved_info(graph, with_slots, slots)]
    resume = ss.trainable() | ss.slots() | ss.global_step()
    assert audit(resume, graph) == [saved_info(graph, resume, slots)]
    assert list(plan(ss.trainable(), graph, strict=True).saved_names) == bert.expected["trainable"]


@pytest.fixture(scope="module", params=[True, False], ids=["resource", "reference"])
def adafactor(request):
    return graphs.adafactor_transformer(resource=request.param)


def test_adafactor_factored_moments_have_their_own_shapes(adafactor):
    graph, opt = adafactor.graph, adafactor.optimizer
    assert roles_of(graph) == expected_roles(adafactor)
    cat = catalog.load(graph)
    kernel = "body/layer_0/ffn/dense_relu_dense/conv1/kernel"
    vr, vc = (opt.get_slot(graphs.variable_map(graph)[kernel], name).op.name for name in ("vr", "vc"))
    assert (cat.record(kernel).shape, cat.record(vr).shape, cat.record(vc).shape) == ((8, 16), (8,), (16,))
    expected_slots = {}
    for name in adafactor.expected["trainable"]:
        variable = graphs.variable_map(graph)[name]
        for slot_name in ("vr", "vc", "v"):
            slot = opt.get_slot(variable, slot_name)
            if slot is not None:
                expected_slots[slot.op.name] = name
    assert slot_of(graph) == expected_slots and len(expected_slots) == 11
    assert adafactor.expected["global_step"] == ["global_step"]


def test_adafactor_audit_findings(adafactor):
    graph, slots = adafactor.graph, tuple(adafactor.expected["slots"])
    assert audit(ss.trainable(), graph) == []
    selection = ss.trainable() | ss.slots()
    assert audit(selection, graph) == [step_missing("global_step"), saved_info(graph, selection, slots)]


# ---------------------------------------------------------------------------------
# layer norm and group norm keep no statistics
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["lamb", "adam"])
@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
def test_group_norm_has_no_statistics(optimizer, resource):
    built = graphs.group_norm_cnn(optimizer=optimizer, resource=resource)
    graph = built.graph
    assert roles_of(graph) == expected_roles(built)
    assert built.expected["bn_stats"] == [] and built.expected["global_step"] == ["global_step"]
    own = ["beta1_power", "beta2_power"] if optimizer == "adam" else []
    assert sorted(catalog.load(graph).role("optimizer")) == own
    assert len(built.expected["slots"]) == 2 * len(built.expected["trainable"]) + len(own)
    assert audit(ss.trainable(), graph) == []
    assert audit(ss.everything() - ss.slots(), graph) == []


# ---------------------------------------------------------------------------------
# gradient accumulation (NVIDIA's BERT)
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[True, False], ids=["resource", "reference"])
def accumulating(request):
    return graphs.accumulating_cnn(resource=request.param)


def test_accumulators_are_optimizer_state_beside_batch_norm(accumulating):
    graph, expected = accumulating.graph, accumulating.expected
    assert roles_of(graph) == expected_roles(accumulating)
    assert expected["bn_stats"] == ["block1/bn/moving_mean", "block1/bn/moving_variance"]
    trainable = expected["trainable"]
    assert expected["accumulators"] == [f"{w}/accum" for w in trainable]
    assert sorted(expected["slots"]) == sorted(expected["accumulators"] + expected["momentum"] + expected["non_slot"])
    assert catalog.load(graph).role("optimizer") == frozenset({"local_step", "batch_finite"})
    assert slot_of(graph) == {**{f"{w}/accum": w for w in trainable}, **{f"{w}/Momentum": w for w in trainable}}
    assert expected["global_step"] == ["global_step"]


def test_accumulation_audit_findings(accumulating):
    graph, expected = accumulating.graph, accumulating.expected
    assert audit(ss.trainable(), graph) == [bn_error("block1/bn", expected["bn_stats"])]
    assert audit(ss.trainable() | ss.bn_stats(), graph) == []  # the updates run with every micro-batch
    selection = (ss.trainable() | ss.bn_stats() | ss.slots() | ss.global_step()) - ss.name("**/accum")
    saved = tuple(n for n in expected["slots"] if not n.endswith("/accum"))
    assert audit(selection, graph) == [
        Finding(
            "optimizer-state-partial", Severity.WARNING, tuple(expected["accumulators"]),
            f"the selection saves optimizer slots, but not those of {', '.join(expected['trainable'])}: a resumed "
            "run would restart their optimizer state from zero. Add slots() to save all of it, or subtract "
            "slots() to save none.",
        ),
        saved_info(graph, selection, saved),
    ]


# ---------------------------------------------------------------------------------
# mixed-precision loss scaling
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[(True, True), (False, False)], ids=["resource-cond-v2", "reference-cond-v1"])
def loss_scaled(request):
    resource, cond_v2 = request.param
    built = graphs.loss_scaled_model(resource=resource, cond_v2=cond_v2)
    assert built.info["cond_v2"] == cond_v2
    return built


def test_loss_scale_state_is_optimizer_state(loss_scaled):
    graph, expected = loss_scaled.graph, loss_scaled.expected
    assert roles_of(graph) == expected_roles(loss_scaled)
    assert expected["loss_scale"] == ["current_loss_scale", "good_steps"]
    cat = catalog.load(graph)
    assert sorted(cat.role("loss_scale")) == expected["loss_scale"]
    assert sorted(cat.role("optimizer")) == sorted(expected["non_slot"]) and len(expected["non_slot"]) == 2
    assert expected["bn_stats"] == ["block1/bn/moving_mean", "block1/bn/moving_variance"]


def test_a_resume_without_the_loss_scale_restarts_loss_scaling(loss_scaled):
    graph, expected = loss_scaled.graph, loss_scaled.expected
    assert audit(ss.trainable() | ss.bn_stats(), graph) == []
    assert audit(ss.trainable(), graph) == [bn_error("block1/bn", expected["bn_stats"])]
    selection = ss.everything() - ss.variables(expected["loss_scale"])
    saved = tuple(n for n in expected["slots"] if n not in expected["loss_scale"])
    assert audit(selection, graph) == [
        Finding(
            "optimizer-state-partial", Severity.WARNING, ("current_loss_scale", "good_steps"),
            "the selection saves optimizer state but not the loss-scale state current_loss_scale, good_steps: a "
            "resumed run would restart loss scaling from its initial scale, and skip steps again while it shrinks. "
            "Add slots().",
        ),
        saved_info(graph, selection, saved),
    ]


def test_a_checkpoint_alone_names_the_loss_scale(loss_scaled, tmp_path):
    prefix = save_all(loss_scaled, tmp_path)
    from_names = catalog.load(prefix)
    assert sorted(from_names.role("loss_scale")) == ["current_loss_scale", "good_steps"]
    assert {"current_loss_scale", "good_steps"} <= set(ss.slots().names(prefix))


# ---------------------------------------------------------------------------------
# compositions: gradient accumulation in front of a loss-scale wrapper
# ---------------------------------------------------------------------------------


def accumulated_and_loss_scaled(*, resource, cond_v2, clip_in_cond, accumulation_steps=2):
    """NVIDIA's BERT shape with ``use_fp16`` and ``num_accumulation_steps``: the loss-scale wrapper's
    ``apply_gradients`` gets the accumulators' assign outputs, not the raw gradients, so its
    finiteness check (which decides the loss scale's updates) reads accumulators. ``clip_in_cond``:
    the global norm is itself chosen by a cond on the raw gradients' finiteness."""
    with graphs._new_graph(0, resource, cond_v2) as graph:
        x = v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        h, h_inf, bn_stats = graphs.fused_bn_block(x, 4, "block1")
        with v1.variable_scope("head", reuse=v1.AUTO_REUSE):
            logits = tf.identity(graphs._dense(tf.reduce_mean(h, [1, 2]), 5, "dense")[0], name="logits")
            tf.nn.softmax(graphs._dense(tf.reduce_mean(h_inf, [1, 2]), 5, "dense")[0], name="output")
        loss = graphs._sparse_xent(labels, logits)
        global_step = v1.train.get_or_create_global_step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inner = v1.train.AdamOptimizer(1e-3)
            optimizer = v1.mixed_precision.MixedPrecisionLossScaleOptimizer(inner, loss_scale="dynamic")
        tvars = v1.trainable_variables()
        grads = [g for g, _ in optimizer.compute_gradients(loss / accumulation_steps, tvars)]
        local_step = v1.get_variable("local_step", [], tf.int32, trainable=False, initializer=v1.zeros_initializer)
        batch_finite = v1.get_variable("batch_finite", [], tf.bool, trainable=False, initializer=v1.ones_initializer)
        accum = [v1.get_variable(t.op.name + "/accum", t.shape, tf.float32, trainable=False,
                                 initializer=v1.zeros_initializer()) for t in tvars]
        with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
            reset = tf.cast(tf.equal(local_step % accumulation_steps, 0), tf.bool)
        local_step_t = tf.cond(reset, lambda: local_step.assign(tf.ones_like(local_step)),
                               lambda: local_step.assign_add(1))
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        batch_finite_t = tf.cond(reset, lambda: batch_finite.assign(tf.logical_and(True, finite)),
                                 lambda: batch_finite.assign(tf.logical_and(batch_finite, finite)))
        norm = tf.cond(finite, lambda: tf.linalg.global_norm(grads), lambda: tf.constant(1.0)) if clip_in_cond else None
        clipped, _ = tf.clip_by_global_norm(grads, 1.0, use_norm=norm)
        accum_t = tf.cond(reset, lambda: [a.assign(g) for a, g in zip(accum, clipped)],
                          lambda: [a.assign_add(g) for a, g in zip(accum, clipped)])
        update_step = tf.identity(tf.cast(tf.equal(local_step_t % accumulation_steps, 0), tf.bool), name="update_step")
        update = tf.cond(update_step, lambda: optimizer.apply_gradients(list(zip(accum_t, tvars))), tf.no_op)
        new_step = tf.cond(tf.logical_and(update_step, batch_finite_t), lambda: global_step + 1, lambda: global_step)
        tf.group(update, global_step.assign(new_step), name="train")
        scale = optimizer._loss_scale  # pylint: disable=protected-access
        scale_state = [scale._current_loss_scale, scale._num_good_steps]  # pylint: disable=protected-access
        slots, non_slot = graphs._slot_variables(inner, tvars)
        expected = graphs._expected(
            graph, global_step=global_step, bn_stats=bn_stats, loss_scale=scale_state, accumulators=accum,
            slots=slots + accum + [local_step, batch_finite] + scale_state, non_slot=non_slot,
        )
    return graphs.BuiltGraph(graph, {"loss": loss}, expected, optimizer)


@pytest.fixture(scope="module", params=[(True, True, True), (False, False, True), (True, True, False)],
                ids=["resource-cond-v2", "reference-cond-v1", "resource-plain-clip"])
def accumulated_scaled(request):
    resource, cond_v2, clip_in_cond = request.param
    return accumulated_and_loss_scaled(resource=resource, cond_v2=cond_v2, clip_in_cond=clip_in_cond)


def test_the_loss_scale_behind_an_accumulator_is_optimizer_state(accumulated_scaled):
    graph, expected = accumulated_scaled.graph, accumulated_scaled.expected
    assert roles_of(graph) == expected_roles(accumulated_scaled)
    assert len(expected["slots"]) == 2 * 5 + 2 + 5 + 2 + 2  # m and v, beta powers, accumulators, counters, scale
    cat = catalog.load(graph)
    assert sorted(cat.role("loss_scale")) == ["current_loss_scale", "good_steps"]
    assert sorted(cat.role("optimizer")) == sorted(expected["non_slot"] + ["batch_finite", "local_step"])
    trainable = expected["trainable"]
    assert slot_of(graph) == {f"{w}/{slot}": w for w in trainable for slot in ("Adam", "Adam_1", "accum")}


def test_the_loss_scale_behind_an_accumulator_is_no_forgotten_state(accumulated_scaled):
    graph, expected = accumulated_scaled.graph, accumulated_scaled.expected
    assert audit(ss.trainable(), graph) == [bn_error("block1/bn", expected["bn_stats"])]
    assert audit(ss.trainable() | ss.bn_stats(), graph) == []
    assert (~ss.slots()).names(graph) == [n for n in expected["all"] if n not in expected["slots"]]


# ---------------------------------------------------------------------------------
# roles that a Saver built later does not change
# ---------------------------------------------------------------------------------


def handwritten_optimizer_with_a_decay_that_is_off():
    """A hand-written momentum optimizer keeping its hyperparameters in variables under its scope;
    ``decay`` is read only when it is not 0 (legacy Keras's optimizers build it the same way), so
    nothing reads it, and a Saver built later reads it to write it."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 3], name="x")
        w = v1.get_variable("dense/w", [3, 2])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        tf.identity(tf.matmul(x, w), name="output")
        with v1.variable_scope("opt"):
            learning_rate = v1.get_variable("learning_rate", [], initializer=v1.constant_initializer(0.1),
                                            trainable=False)
            v1.get_variable("decay", [], initializer=v1.zeros_initializer(), trainable=False)
            momentum = v1.get_variable("dense/w/momentum", w.shape, initializer=v1.zeros_initializer(),
                                       trainable=False)
        (g,) = tf.gradients(loss, [w])
        new_momentum = momentum.assign(0.9 * momentum + g)
        tf.group(w.assign_sub(learning_rate * new_momentum), name="train")
    return graph


def role_table(graph):
    cat = catalog.load(graph)
    return {role: sorted(cat.role(role)) for role in catalog.ROLES} | {"slot_of": slot_of(graph)}


BUILDERS = {
    "decay-off": handwritten_optimizer_with_a_decay_that_is_off,
    "bert-adamw": lambda: graphs.bert_classifier(optimizer="adamw").graph,
    "adafactor": lambda: graphs.adafactor_transformer().graph,
    "accumulating": lambda: graphs.accumulating_cnn(resource=False).graph,
    "loss-scaled": lambda: graphs.loss_scaled_model().graph,
    "accumulated-scaled": lambda: accumulated_and_loss_scaled(resource=True, cond_v2=True, clip_in_cond=True).graph,
    "adam-ema": lambda: graphs.mnist_cnn(optimizer="adam", channels=(4, 8), fc_units=16, input_hw=8).graph,
}


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("sharded", [False, True], ids=["saver", "sharded-saver"])
def test_a_saver_built_later_changes_no_role(builder, sharded):
    graph = BUILDERS[builder]()
    before = role_table(graph)
    with graph.as_default():
        v1.train.Saver(sharded=sharded)
    assert role_table(graph) == before
    if builder == "decay-off":
        assert before["optimizer"] == ["opt/decay", "opt/learning_rate"]
        assert before["slot"] == ["opt/decay", "opt/dense/w/momentum", "opt/learning_rate"]


# ---------------------------------------------------------------------------------
# a checkpoint alone: the names optimizers give their state
# ---------------------------------------------------------------------------------


def saved_names_checkpoint(directory, build):
    """A name-based checkpoint of the variables ``build()`` makes in a fresh graph."""
    graph = tf.Graph()
    with graph.as_default():
        build()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            return v1.train.Saver().save(sess, str(directory / "model"), write_meta_graph=False)


def factored_slots(weights):
    """Slots named as tensor2tensor's Adafactor makes them through TensorFlow's slot creator: m, then the
    factored row and column moments vr and vc of a matrix, or v of a vector, all under the name 'Adafactor'."""
    optimizer = v1.train.Optimizer(False, "Adafactor")
    for weight in weights:
        shape = weight.shape.as_list()
        optimizer._zeros_slot(weight, "m", optimizer._name)  # pylint: disable=protected-access
        if len(shape) >= 2:
            for slot, moment_shape in (("vr", shape[:-1]), ("vc", shape[:-2] + shape[-1:])):
                optimizer._get_or_make_slot(weight, tf.zeros(moment_shape), slot, optimizer._name)  # pylint: disable=protected-access
        else:
            optimizer._get_or_make_slot(weight, tf.zeros(shape), "v", optimizer._name)  # pylint: disable=protected-access


def adafactor_names():
    weights = [v1.get_variable("body/attention/q", [4, 4]), v1.get_variable("body/attention/q_bias", [4])]
    factored_slots(weights)
    v1.train.get_or_create_global_step()


def nvidia_lamb_accumulation_names():
    """NVIDIA's BERT optimization.py: LAMB moments (VAR/adam_m, VAR/adam_v), gradient accumulators (VAR/accum, and
    VAR/accum/VAR/accum where made under a scope of their own name), local_step, batch_finite, and the loss scale of
    tf.contrib.mixed_precision's ExponentialUpdateLossScaleManager (loss_scale, good_steps, bad_steps)."""
    weights = [v1.get_variable("bert/dense/kernel", [3, 3]), v1.get_variable("bert/dense/bias", [3])]
    for weight in weights:
        for suffix in ("adam_m", "adam_v"):
            v1.get_variable(f"{weight.op.name}/{suffix}", weight.shape, trainable=False)
    v1.get_variable("bert/dense/kernel/accum", [3, 3], trainable=False)
    with v1.variable_scope("bert/dense/bias/accum"):
        v1.get_variable("bert/dense/bias/accum", [3], trainable=False)
    v1.get_variable("local_step", [], tf.int32, trainable=False, initializer=v1.zeros_initializer())
    v1.get_variable("batch_finite", [], tf.bool, trainable=False, initializer=v1.ones_initializer())
    for name, dtype in (("loss_scale", tf.float32), ("good_steps", tf.int32), ("bad_steps", tf.int32)):
        v1.get_variable(name, [], dtype, trainable=False, initializer=v1.zeros_initializer())
    v1.train.get_or_create_global_step()


NAME_FAMILIES = {
    "adafactor": (adafactor_names, {
        "slot_of": {"body/attention/q/Adafactor": "body/attention/q", "body/attention/q/Adafactor_1": "body/attention/q",
                    "body/attention/q/Adafactor_2": "body/attention/q",
                    "body/attention/q_bias/Adafactor": "body/attention/q_bias",
                    "body/attention/q_bias/Adafactor_1": "body/attention/q_bias"},
        "optimizer": [], "loss_scale": [], "global_step": ["global_step"],
        "kept": ["body/attention/q", "body/attention/q_bias", "global_step"],
    }),
    "nvidia-lamb-accumulation": (nvidia_lamb_accumulation_names, {
        "slot_of": {"bert/dense/bias/accum/bert/dense/bias/accum": "bert/dense/bias",
                    "bert/dense/bias/adam_m": "bert/dense/bias", "bert/dense/bias/adam_v": "bert/dense/bias",
                    "bert/dense/kernel/accum": "bert/dense/kernel", "bert/dense/kernel/adam_m": "bert/dense/kernel",
                    "bert/dense/kernel/adam_v": "bert/dense/kernel"},
        "optimizer": ["batch_finite", "local_step"], "loss_scale": ["bad_steps", "good_steps", "loss_scale"],
        "global_step": ["global_step"], "kept": ["bert/dense/bias", "bert/dense/kernel", "global_step"],
    }),
}


@pytest.mark.parametrize("family", list(NAME_FAMILIES))
def test_a_checkpoint_alone_knows_the_family_by_its_names(family, tmp_path):
    build, expected = NAME_FAMILIES[family]
    prefix = saved_names_checkpoint(tmp_path, build)
    cat = catalog.load(prefix)
    assert cat.roles.from_names
    assert cat.roles.slot_of == expected["slot_of"]
    assert sorted(cat.role("optimizer")) == expected["optimizer"]
    assert sorted(cat.role("loss_scale")) == expected["loss_scale"]
    assert sorted(cat.role("global_step")) == expected["global_step"]
    assert sorted(cat.role("slot")) == sorted([*expected["slot_of"], *expected["optimizer"], *expected["loss_scale"]])
    assert sorted((~ss.slots()).names(prefix)) == expected["kept"]
    assert catalog.warn_missed_optimizer_state(cat, ~ss.slots(), expected["kept"], prefix) == ()


def test_optimizer_state_no_family_knows_is_named_in_a_warning(tmp_path):
    def build():
        weight = v1.get_variable("dense/w", [2, 2])
        for suffix in ("Yogi", "Yogi_1"):  # a tf.compat.v1-style optimizer no name family knows
            v1.get_variable(f"dense/w/{suffix}", weight.shape, trainable=False)
        v1.get_variable("dense/w/Adafactor", weight.shape, trainable=False)

    prefix = saved_names_checkpoint(tmp_path, build)
    cat, keep = catalog.load(prefix), ~ss.slots()
    kept = keep.names(prefix)
    assert kept == ["dense/w", "dense/w/Yogi", "dense/w/Yogi_1"]
    with pytest.warns(ss.SubsetSaverWarning) as caught:
        assert catalog.warn_missed_optimizer_state(cat, keep, kept, prefix) == ("dense/w/Yogi", "dense/w/Yogi_1")
    assert [str(w.message) for w in caught] == [
        f"~slots() keeps 2 tensors of '{prefix}' that look like optimizer state (dense/w/Yogi, dense/w/Yogi_1): "
        "without a graph, slots() knows only well-known names. Pass the training graph (--graph model.meta), or drop "
        "them by name: \"~slots() - name('**/Yogi*')\"."
    ]
    assert catalog.warn_missed_optimizer_state(cat, ss.trainable(), kept, prefix) == ()  # no slots() in it
    assert catalog.warn_missed_optimizer_state(cat, keep - ss.name("**/Yogi*"), ["dense/w"], prefix) == ()


# ---------------------------------------------------------------------------------
# step counters, whatever their name
# ---------------------------------------------------------------------------------


def test_a_step_counter_is_found_by_what_its_updates_do():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 3], name="x")
        w = v1.get_variable("w", [3, 1])
        loss = tf.reduce_mean(tf.matmul(x, w))
        steps_done = v1.get_variable("train/steps_done", [], tf.int64, trainable=False,
                                     initializer=v1.zeros_initializer())
        epoch = v1.get_variable("train/epoch", [], tf.int64, trainable=False, initializer=v1.zeros_initializer())
        since_eval = v1.get_variable("train/since_eval", [], tf.int64, trainable=False,
                                     initializer=v1.zeros_initializer())
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=steps_done)
        v1.assign(epoch, epoch + 1, name="next_epoch")  # run once an epoch: a counter too
        tf.group(since_eval.assign_add(1), name="count")
        since_eval.assign(0, name="reset")  # reset when an evaluation runs: no step counter
    assert graph.get_collection(v1.GraphKeys.GLOBAL_STEP) == []
    assert train.name == "GradientDescent"
    assert ss.global_step().names(graph) == ["train/steps_done", "train/epoch"]
    assert ss.slots().names(graph, allow_empty=True) == []


# ---------------------------------------------------------------------------------
# every tf.compat.v1.train optimizer
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "reference"])
@pytest.mark.parametrize("optimizer", graphs.all_optimizers())
def test_every_v1_optimizer(optimizer, resource):
    built = graphs.mnist_cnn(optimizer=optimizer, resource=resource, channels=(4, 8), fc_units=16, input_hw=8)
    graph, expected = built.graph, built.expected
    assert roles_of(graph) == {**expected_roles(built), "averages": expected["bn_stats"]}  # EMA shadows of moments
    assert sorted(catalog.load(graph).role("optimizer")) == sorted(expected["non_slot"])
    assert audit(ss.trainable() | ss.bn_stats(), graph) == []
    stats = expected["bn_stats"]
    assert audit(ss.trainable(), graph) == [bn_error("conv_1/bn", stats[:2]), bn_error("conv_2/bn", stats[2:])]


# ---------------------------------------------------------------------------------
# the training step, found the way users run it
# ---------------------------------------------------------------------------------


def handwritten_sgd_with_batch_norm(wire_updates):
    """A fused batch norm block, a hand-written SGD step grouped with the global step's increment,
    no TRAIN_OP collection: the shape of a MonitoredTrainingSession loop."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        h, h_inf, stats = graphs.fused_bn_block(x, 4, "block1")
        tf.identity(tf.reduce_mean(h_inf), name="output")
        loss = tf.reduce_mean(tf.square(h))
        step = v1.train.get_or_create_global_step()
        weights = v1.trainable_variables()
        updates = v1.get_collection(v1.GraphKeys.UPDATE_OPS) if wire_updates else []
        with tf.control_dependencies(updates):
            steps = [w.assign_sub(0.01 * g) for w, g in zip(weights, tf.gradients(loss, weights))]
            train = tf.group(*steps, step.assign_add(1), name="train_step")
    return graph, train, x, [s.op.name for s in stats]


def test_the_step_a_monitored_session_runs():
    graph, train, x, stats = handwritten_sgd_with_batch_norm(wire_updates=False)
    assert graph.get_collection(v1.GraphKeys.TRAIN_OP) == []
    assert audit(ss.trainable() | ss.bn_stats(), graph) == [
        Finding(
            "stats-not-updated", Severity.WARNING, tuple(stats),
            f"block1/bn: the training op train_step does not run the updates of its statistics ({', '.join(stats)}), "
            f"so they never move from their initial values. {UPDATE_FIX}",
        )
    ]
    with graph.as_default(), v1.train.MonitoredTrainingSession() as sess:
        for _ in range(2):
            sess.run(train, {x: np.ones((2, 8, 8, 3), np.float32)})
        stale = audit_values(sess, ss.trainable() | ss.bn_stats(), graph)
    assert [(f.code, f.variables) for f in stale] == [("stale-stats", tuple(stats))]
    wired, _, _, _ = handwritten_sgd_with_batch_norm(wire_updates=True)
    assert audit(ss.trainable() | ss.bn_stats(), wired) == []


def test_the_callers_fetches_are_the_step():
    built = graphs.fused_bn_model(wire_updates=False)
    graph, train, bn_update = built.graph, built.tensors["train_op"], built.tensors["bn_update"]
    stats = ("block/bn/moving_mean", "block/bn/moving_variance")
    not_updated = Finding(
        "stats-not-updated", Severity.WARNING, stats,
        f"block/bn: the training op opt/Momentum does not run the updates of its statistics ({', '.join(stats)}), "
        f"so they never move from their initial values. {UPDATE_FIX}",
    )
    assert audit(ss.trainable() | ss.bn_stats(), graph) == [not_updated]
    assert audit(ss.trainable() | ss.bn_stats(), graph, fetches=[train]) == [not_updated]
    # Fetched in one session.run with the train op, the updates do run.
    assert audit(ss.trainable() | ss.bn_stats(), graph, fetches=[train, bn_update]) == []


# ---------------------------------------------------------------------------------
# remap suggestions: checked before they are given
# ---------------------------------------------------------------------------------


def save_all(built, directory):
    with built.graph.as_default(), v1.Session(graph=built.graph) as sess:
        sess.run(v1.global_variables_initializer())
        return v1.train.Saver().save(sess, str(directory / "model"), write_meta_graph=False)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return save_all(graphs.bert_classifier(pretraining=True), tmp_path_factory.mktemp("pretrained"))


def test_a_new_head_gets_no_remap_to_the_root(pretrained):
    graph = graphs.bert_classifier().graph
    report = plan(ss.trainable(), graph).check(pretrained)
    assert report.remap is None and report.remap_resolves == 0
    assert [(p.kind, p.name, p.nearest) for p in report.blocking] == [
        ("missing", "output_weights", "cls/seq_relationship/output_weights"),
        ("missing", "output_bias", "cls/predictions/output_bias"),  # the shortest name that ends like it
    ]
    # The rule the shapes contradict: it renames every variable and finds none of the two.
    followed = plan(ss.trainable(), graph, remap={"cls/seq_relationship/": "/"}).check(pretrained)
    assert len(followed.blocking) == 25 and len(followed.of_kind("shape")) == 2


def renamed_graph(prefix, names, shapes):
    graph = tf.Graph()
    with graph.as_default():
        for name, shape in zip(names, shapes):
            v1.get_variable(prefix + name, shape)
    return graph


SCENARIOS = {
    # checkpoint names -> graph names
    "renamed scope": (["model/a/w", "model/a/b", "model/head/w"], ["net/a/w", "net/a/b", "net/head/w"], None),
    "into the root": (["tower/a/w", "tower/b/w"], ["a/w", "b/w"], None),
    "out of the root": (["a/w", "b/w"], ["net/a/w", "net/b/w"], None),
    "renamed backbone, new head": (["model/a/w", "model/b/w", "model/head/w"], ["net/a/w", "net/b/w", "head/w"],
                                   {"head/w": [3, 3]}),
    "one name under another scope": (["a/w", "b/w", "c/w", "x/head/w"], ["a/w", "b/w", "c/w", "head/w"], None),
    "new head, wrong shape": (["a/w", "b/w", "x/head/w"], ["a/w", "b/w", "head/w"], {"head/w": [5, 5]}),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_following_a_suggestion_lowers_the_problem_count(scenario, tmp_path):
    saved, wanted, reshaped = SCENARIOS[scenario]
    source = tf.Graph()
    with source.as_default():
        for name in saved:
            v1.get_variable(name, [2, 2])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(sess, str(tmp_path / "ckpt"), write_meta_graph=False)
    graph = tf.Graph()
    with graph.as_default():
        for name in wanted:
            v1.get_variable(name, (reshaped or {}).get(name, [2, 2]))
    report = plan(ss.everything(), graph).check(prefix)
    assert report.blocking
    if report.remap is None:
        assert scenario == "new head, wrong shape"
        return
    followed = plan(ss.everything(), graph, remap=report.remap).check(prefix)
    assert len(followed.blocking) < len(report.blocking)
    assert len(report.blocking) - len(followed.blocking) == report.remap_resolves
