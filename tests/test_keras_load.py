"""TF1 name-based checkpoints into Keras 3 models (``ss.keras.load_checkpoint``): a CNN trained in a
``tf.Graph`` with ``tf.compat.v1.train.AdamOptimizer`` predicts bit-exact in Keras 3 after a load by
name (remap rules) and by creation order, with Adam's moments and the step in the Keras optimizer;
TF1 Momentum, RMSProp and Adagrad slots; every mismatch listed at once before any variable changes;
``on_mismatch='initialize'``; selectors; plain ``tf.Module`` targets; damaged files; memory that
holds one tensor at a time.

The TF1 side is written with Keras 3's math (``tf.nn.batch_normalization`` with Keras's epsilon, a
bias added after the convolution), so the two predictions can be compared byte for byte.
"""

import os
import shutil
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
import subsetsaver.keras.checkpoint_side as checkpoint_side

v1 = tf.compat.v1
EPSILON = 1e-3
STEPS = 3
REMAP = {"conv_1/w": "conv/kernel", "conv_1/b": "conv/bias", "conv_1/bn/": "bn/", "dense/w": "dense/kernel",
         "dense/b": "dense/bias"}
WEIGHTS = {"conv/kernel": "conv_1/w", "conv/bias": "conv_1/b", "bn/gamma": "conv_1/bn/gamma",
           "bn/beta": "conv_1/bn/beta", "bn/moving_mean": "conv_1/bn/moving_mean",
           "bn/moving_variance": "conv_1/bn/moving_variance", "dense/kernel": "dense/w", "dense/bias": "dense/b"}
TRAINABLE = ["conv/kernel", "conv/bias", "bn/gamma", "bn/beta", "dense/kernel", "dense/bias"]


def batch(seed=0, channels=3):
    rng = np.random.default_rng(seed)
    return rng.random((16, 8, 8, channels), dtype=np.float32), rng.random((16, 2), dtype=np.float32)


def tf1_cnn(x, training):
    """conv_1 (w, b, hand-written batch norm with moving statistics), relu, dense: Keras 3's math."""
    from tensorflow.python.training import moving_averages  # no public v1 alias

    with v1.variable_scope("conv_1"):
        w = v1.get_variable("w", (3, 3, 3, 4), initializer=v1.glorot_uniform_initializer(seed=1))
        b = v1.get_variable("b", (4,), initializer=v1.random_normal_initializer(stddev=0.1, seed=2))
        h = tf.nn.convolution(x, w, padding="VALID") + tf.reshape(b, (1, 1, 1, 4))
        with v1.variable_scope("bn"):
            gamma = v1.get_variable("gamma", (4,), initializer=v1.ones_initializer())
            beta = v1.get_variable("beta", (4,), initializer=v1.zeros_initializer())
            moving_mean = v1.get_variable("moving_mean", (4,), initializer=v1.zeros_initializer(), trainable=False)
            moving_variance = v1.get_variable("moving_variance", (4,), initializer=v1.ones_initializer(),
                                              trainable=False)
            batch_mean, batch_variance = tf.nn.moments(h, [0, 1, 2])

            def with_updates():
                updates = [moving_averages.assign_moving_average(moving_mean, batch_mean, 0.9, zero_debias=False),
                           moving_averages.assign_moving_average(moving_variance, batch_variance, 0.9,
                                                                 zero_debias=False)]
                with tf.control_dependencies(updates):
                    return tf.identity(batch_mean), tf.identity(batch_variance)

            mean, variance = tf.cond(training, with_updates, lambda: (tf.identity(moving_mean),
                                                                      tf.identity(moving_variance)))
            h = tf.nn.relu(tf.nn.batch_normalization(h, mean, variance, beta, gamma, EPSILON))
    h = tf.reshape(h, (-1, 6 * 6 * 4))
    with v1.variable_scope("dense"):
        w = v1.get_variable("w", (144, 2), initializer=v1.glorot_uniform_initializer(seed=3))
        b = v1.get_variable("b", (2,), initializer=v1.zeros_initializer())
        return tf.matmul(h, w) + b


class Trained:
    """A TF1 graph trained STEPS steps and saved, with its predictions and every variable's value."""

    def __init__(self, directory, optimizer=lambda: v1.train.AdamOptimizer(0.01), steps=STEPS):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.x = v1.placeholder(tf.float32, (None, 8, 8, 3), name="x")
            self.y = v1.placeholder(tf.float32, (None, 2), name="y")
            self.training = v1.placeholder_with_default(False, (), name="training")
            self.output = tf1_cnn(self.x, self.training)
            loss = tf.reduce_mean(tf.square(self.output - self.y))
            step = v1.train.get_or_create_global_step()
            self.train_op = optimizer().minimize(loss, global_step=step)
            with v1.Session(graph=self.graph) as sess:
                sess.run(v1.global_variables_initializer())
                x, y = batch()
                for _ in range(steps):
                    sess.run(self.train_op, {self.x: x, self.y: y, self.training: True})
                self.prediction = sess.run(self.output, {self.x: batch(seed=5)[0]})
                self.values = {v.op.name: sess.run(v) for v in v1.global_variables()}
                self.prefix = v1.train.Saver().save(sess, os.path.join(directory, "model"), global_step=steps)
                # one more step from the saved state, to compare with Keras's next step
                sess.run(self.train_op, {self.x: x, self.y: y, self.training: True})
                self.after_next_step = {v.op.name: sess.run(v) for v in v1.trainable_variables()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return Trained(str(tmp_path_factory.mktemp("tf1")))


def keras_cnn(name="net", channels=3, center=True, dtype=None):
    inputs = keras.Input((8, 8, channels))
    h = keras.layers.Conv2D(4, 3, name="conv", dtype=dtype)(inputs)
    h = keras.layers.BatchNormalization(name="bn", epsilon=EPSILON, momentum=0.9, center=center, dtype=dtype)(h)
    h = keras.layers.ReLU(name="relu")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    return keras.Model(inputs, keras.layers.Dense(2, name="dense", dtype=dtype)(h), name=name)


def values(variables):
    return {getattr(v, "path", None) or v.name: np.array(v.numpy()) for v in variables}


def assert_unchanged(before, variables):
    after = values(variables)
    assert sorted(after) == sorted(before)
    for name, value in before.items():
        assert after[name].tobytes() == value.tobytes(), name


def assert_same_bytes(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def moments(optimizer):
    return {v.path.split("/", 1)[1]: np.array(v.numpy()) for v in optimizer.variables}


class Module(tf.Module):
    def __init__(self, dtype=tf.float32, scope=""):
        super().__init__(name="tf1_like")
        self.w = tf.Variable(tf.zeros((144, 2), dtype), name=f"{scope}dense/w")
        self.b = tf.Variable(tf.zeros((2,), dtype), name=f"{scope}dense/b")


@pytest.mark.parametrize("how", ["remap", "order"])
def test_tf1_checkpoint_predicts_bit_exact_in_keras_3_with_adams_state(trained, how):
    model, optimizer = keras_cnn(), keras.optimizers.Adam(0.01)
    kwargs = {"remap": REMAP} if how == "remap" else {"match": "order"}
    report = ss.keras.load_checkpoint(model, os.path.dirname(trained.prefix), optimizer, **kwargs)

    prediction = np.asarray(model(batch(seed=5)[0], training=False))
    assert_same_bytes(prediction, trained.prediction)
    loaded = values(model.weights)
    for path, checkpoint_name in WEIGHTS.items():
        assert_same_bytes(loaded[path], trained.values[checkpoint_name])
    state = moments(optimizer)
    for path in TRAINABLE:
        flat, tf1 = path.replace("/", "_"), WEIGHTS[path]
        assert_same_bytes(state[f"{flat}_momentum"], trained.values[f"{tf1}/Adam"])
        assert_same_bytes(state[f"{flat}_velocity"], trained.values[f"{tf1}/Adam_1"])
        assert np.any(state[f"{flat}_velocity"] != 0)
    assert int(optimizer.iterations.numpy()) == STEPS == trained.values["global_step"]

    assert report.checkpoint == trained.prefix
    assert report.restored == WEIGHTS and list(report.restored) == [w.path for w in model.weights]
    assert report.initialized == () and report.mismatched == () and report.unexpected == ()
    name = optimizer.name
    assert report.optimizer_restored == {
        **{f"{name}/{p.replace('/', '_')}_{kind}": f"{WEIGHTS[p]}/{slot}" for p in TRAINABLE
           for kind, slot in (("momentum", "Adam"), ("velocity", "Adam_1"))},
        f"{name}/iteration": "global_step"}
    assert report.optimizer_initialized == (f"{name}/learning_rate",)
    assert report.iterations == STEPS
    assert report.unused == ("beta1_power", "beta2_power")
    assert report.match == ("name" if how == "remap" else "order")
    assert report.order_source == (None if how == "remap" else f"'{trained.prefix}.meta'")


def test_the_next_adam_step_continues_the_tf1_run(trained):
    """Keras 3 Adam takes its bias correction from ``iterations``: with the TF1 step and moments,
    its next update is TF1's (up to rounding); from fresh state it is not."""
    x, y = batch()

    def next_step(load_state):
        model, optimizer = keras_cnn(), keras.optimizers.Adam(0.01)
        ss.keras.load_checkpoint(model, trained.prefix, optimizer if load_state else None, remap=REMAP)
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(model(x, training=True) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return values(model.trainable_variables)

    resumed, fresh = next_step(True), next_step(False)
    # conv/bias is left out: the batch norm after it removes its gradient up to rounding, and Adam
    # divides that rounding noise by its own size
    for path in [p for p in TRAINABLE if p != "conv/bias"]:
        tf1 = trained.after_next_step[WEIGHTS[path]]
        np.testing.assert_allclose(resumed[path], tf1, rtol=0, atol=2e-6)  # gradients round differently
    assert max(np.abs(fresh[p] - trained.after_next_step[WEIGHTS[p]]).max() for p in TRAINABLE) > 1e-3


def test_order_comes_from_the_graph_or_the_names_given(trained, tmp_path):
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(trained.prefix + suffix, str(tmp_path / "model") + suffix)
    bare = str(tmp_path / "model")
    with pytest.raises(ValueError) as error:
        ss.keras.load_checkpoint(keras_cnn(), bare, match="order")
    assert str(error.value) == (
        f"match='order' needs the order in which the graph created the variables, which checkpoint '{bare}' does "
        f"not record (it stores names sorted) and no '{bare}.meta' is beside it; pass order= the graph's .meta file "
        "(tf.compat.v1.train.Saver.save writes PREFIX.meta unless write_meta_graph=False), a tf.Graph that builds "
        "the same variables, or the checkpoint names in creation order; or pair by name with remap=")

    for order, source in ((trained.prefix + ".meta", f"'{trained.prefix}.meta'"), (trained.graph, "the graph passed"),
                          (list(WEIGHTS.values()), "the order passed")):
        model = keras_cnn()
        report = ss.keras.load_checkpoint(model, bare, match="order", order=order)
        assert report.restored == WEIGHTS and report.order_source == source
        assert_same_bytes(np.asarray(model(batch(seed=5)[0], training=False)), trained.prediction)
    with pytest.raises(ValueError, match="is no .meta file; a checkpoint's own names are sorted"):
        ss.keras.load_checkpoint(keras_cnn(), bare, match="order", order=bare)
    # the sorted names are not the creation order: pairs go wrong, and where shapes agree nothing can tell
    model = keras_cnn()
    report = ss.keras.load_checkpoint(model, bare, match="order", order=sorted(WEIGHTS.values()),
                                      on_mismatch="initialize")
    assert report.restored["conv/bias"] == "conv_1/bn/beta"  # the same shape: no error could tell


def test_a_wrong_shape_a_missing_and_an_unexpected_variable_in_one_message(trained):
    # one input channel (conv/kernel is [3, 3, 1, 4]), no beta in the batch norm, no rule for dense/b
    model, optimizer = keras_cnn(channels=1, center=False), keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    before_model, before_optimizer = values(model.weights), values(optimizer.variables)
    remap = {key: value for key, value in REMAP.items() if key != "dense/b"}
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(model, trained.prefix, optimizer, remap=remap)
    assert str(error.value) == "\n".join([
        f"checkpoint '{trained.prefix}' does not match the Keras model 'net' and optimizer '{optimizer.name}' "
        "(match='name'): 1 missing, 1 shape mismatch, 2 unexpected",
        "  shape mismatch: conv/kernel (checkpoint name conv_1/w), expected [3, 3, 1, 4] float32, checkpoint has "
        "[3, 3, 3, 4] float32",
        "  missing: dense/bias, expected [2] float32",
        "  unexpected: conv_1/bn/beta [4] float32 (no model variable reads it)",
        "  unexpected: dense/b [2] float32 (no model variable reads it)",
        "no variable was changed",
        "Pass remap={checkpoint name or scope: model name or scope} to pair the names.",
        "Pass on_mismatch='initialize' to leave the unmatched variables as they are.",
    ])
    assert [str(fix) for fix in error.value.fixes] == [
        "pass remap={checkpoint name or scope: model name or scope} to pair the names",
        "pass on_mismatch='initialize' to leave the unmatched variables as they are"]
    assert [(p.kind, p.name, p.checkpoint_name) for p in error.value.problems] == [
        ("shape", "conv/kernel", "conv_1/w"), ("missing", "dense/bias", "dense/bias"),
        ("unexpected", None, "conv_1/bn/beta"), ("unexpected", None, "dense/b")]
    assert_unchanged(before_model, model.weights)
    assert_unchanged(before_optimizer, optimizer.variables)


def test_on_mismatch_initialize_leaves_the_unmatched_as_they_were(trained):
    model, optimizer = keras_cnn(channels=1, center=False), keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    before_model, before_optimizer = values(model.weights), values(optimizer.variables)
    remap = {key: value for key, value in REMAP.items() if key != "dense/b"}
    report = ss.keras.load_checkpoint(model, trained.prefix, optimizer, remap=remap, on_mismatch="initialize")
    loaded = {p: k for p, k in WEIGHTS.items() if p not in ("conv/kernel", "conv/bias", "dense/bias", "bn/beta")}
    loaded = {"conv/bias": "conv_1/b", **loaded}
    assert report.restored == loaded
    assert report.initialized == ("conv/kernel", "dense/bias")
    assert [(p.kind, p.name, p.checkpoint_name) for p in report.mismatched] == [
        ("shape", "conv/kernel", "conv_1/w"), ("missing", "dense/bias", "dense/bias")]
    assert report.unexpected == ("conv_1/bn/beta", "dense/b")
    name = optimizer.name
    assert report.optimizer_restored == {
        **{f"{name}/{p.replace('/', '_')}_{kind}": f"{WEIGHTS[p]}/{slot}" for p in ("conv/bias", "bn/gamma",
                                                                                     "dense/kernel")
           for kind, slot in (("momentum", "Adam"), ("velocity", "Adam_1"))},
        f"{name}/iteration": "global_step"}
    assert report.optimizer_initialized == (f"{name}/learning_rate", f"{name}/conv_kernel_momentum",
                                            f"{name}/conv_kernel_velocity", f"{name}/dense_bias_momentum",
                                            f"{name}/dense_bias_velocity")
    assert report.unused == ("beta1_power", "beta2_power", "conv_1/bn/beta", "conv_1/bn/beta/Adam",
                             "conv_1/bn/beta/Adam_1", "conv_1/w", "conv_1/w/Adam", "conv_1/w/Adam_1", "dense/b",
                             "dense/b/Adam", "dense/b/Adam_1")
    after = values(model.weights)
    for path in report.initialized:
        assert_same_bytes(after[path], before_model[path])
    for path, key in report.restored.items():
        assert_same_bytes(after[path], trained.values[key])
    after_optimizer = values(optimizer.variables)
    for path in report.optimizer_initialized:
        assert_same_bytes(after_optimizer[path], before_optimizer[path])


def test_a_remap_rule_that_matches_no_model_variable(trained):
    model = keras_cnn()
    before = values(model.weights)
    with pytest.raises(ValueError) as error:
        ss.keras.load_checkpoint(model, trained.prefix, remap={**REMAP, "head/": "classifier/"})
    assert str(error.value) == ("remap rule 'head/': 'classifier/' matches no variable of the Keras model 'net'; "
                                "the right-hand side names model variables (paths such as 'conv/kernel') or their "
                                "scopes ending in '/'")
    with pytest.raises(ValueError, match="conv/kernel"):  # two rules for one variable
        ss.keras.load_checkpoint(model, trained.prefix, remap={**REMAP, "conv_1/b": "conv/kernel"})
    assert_unchanged(before, model.weights)


def test_a_remap_is_suggested_when_the_names_sit_under_another_scope(trained):
    module = Module(scope="net/")
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(module, trained.prefix)
    lines = str(error.value).splitlines()
    assert lines[:3] == [
        f"checkpoint '{trained.prefix}' does not match the module 'tf1_like' (match='name'): 2 missing, 8 unexpected",
        "  missing: net/dense/b, expected [2] float32",
        "  missing: net/dense/w, expected [144, 2] float32",
    ]
    assert lines[-2] == ("Pass remap={'/': 'net/'} to read each variable net/NAME from the checkpoint's NAME "
                         "(the checkpoint holds 2 of the 2 missing variables that way).")
    assert error.value.fixes[0].value == {"/": "net/"}
    report = ss.keras.load_checkpoint(module, trained.prefix, remap={"/": "net/"})
    assert report.restored == {"net/dense/b": "dense/b", "net/dense/w": "dense/w"}
    assert report.unexpected == ("conv_1/b", "conv_1/bn/beta", "conv_1/bn/gamma", "conv_1/bn/moving_mean",
                                 "conv_1/bn/moving_variance", "conv_1/w")
    assert_same_bytes(module.w.numpy(), trained.values["dense/w"])


def test_a_rule_to_add_to_the_remap_is_suggested_and_works(trained):
    remap = {key: value for key, value in REMAP.items() if key != "conv_1/bn/"}
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(keras_cnn(), trained.prefix, remap=remap)
    assert str(error.value).splitlines()[-2] == (  # the whole remap, the missing rule added: ready to paste
        f"Pass remap={ {**remap, 'conv_1/': '/'}!r} to read each variable NAME from the checkpoint's conv_1/NAME "
        "(the checkpoint holds 4 of the 4 missing variables that way).")
    report = ss.keras.load_checkpoint(keras_cnn(), trained.prefix, remap={**remap, "conv_1/": "/"})
    assert report.restored == WEIGHTS


def test_order_mismatches_name_both_sides(trained):
    inputs = keras.Input((8, 8, 3))
    h = keras.layers.Flatten(name="flatten")(keras.layers.Conv2D(4, 3, name="conv")(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(h), name="no_bn")
    before = values(model.weights)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(model, trained.prefix, match="order")
    assert str(error.value) == "\n".join([
        f"checkpoint '{trained.prefix}' does not match the Keras model 'no_bn' (match='order', checkpoint order "
        f"from '{trained.prefix}.meta'): 2 shape mismatches, 4 unexpected",
        "  shape mismatch: dense/kernel (checkpoint name conv_1/bn/gamma), expected [144, 2] float32, checkpoint "
        "has [4] float32",
        "  shape mismatch: dense/bias (checkpoint name conv_1/bn/beta), expected [2] float32, checkpoint has [4] "
        "float32",
        "  unexpected: conv_1/bn/moving_mean [4] float32 (weight 5 of the checkpoint's 8; the model has 4)",
        "  unexpected: conv_1/bn/moving_variance [4] float32 (weight 6 of the checkpoint's 8; the model has 4)",
        "  unexpected: dense/w [144, 2] float32 (weight 7 of the checkpoint's 8; the model has 4)",
        "  unexpected: dense/b [2] float32 (weight 8 of the checkpoint's 8; the model has 4)",
        "no variable was changed; pairing by order takes model.weights and the checkpoint's weights in the order the "
        "graph created them: build the layers in that order",
        "Pass match='name' to pair by name instead.",
        "Pass on_mismatch='initialize' to leave the unmatched variables as they are.",
    ])
    assert_unchanged(before, model.weights)
    with pytest.raises(ValueError, match="remap renames checkpoint names for match='name'"):
        ss.keras.load_checkpoint(model, trained.prefix, match="order", remap=REMAP)


def test_a_selector_limits_what_loads_and_the_slots_follow(trained):
    model, optimizer = keras_cnn(), keras.optimizers.Adam(0.01)
    before = values(model.weights)
    report = ss.keras.load_checkpoint(model, trained.prefix, optimizer, remap=REMAP,
                                      sel=ss.scope("dense") | ss.bn_stats())
    assert report.restored == {p: WEIGHTS[p] for p in ("bn/moving_mean", "bn/moving_variance", "dense/kernel",
                                                        "dense/bias")}
    assert report.initialized == ("conv/kernel", "conv/bias", "bn/gamma", "bn/beta")
    assert sorted(report.optimizer_restored) == sorted(
        [f"{optimizer.name}/dense_{w}_{k}" for w in ("kernel", "bias") for k in ("momentum", "velocity")]
        + [f"{optimizer.name}/iteration"])
    after = values(model.weights)
    for path in report.initialized:
        assert_same_bytes(after[path], before[path])


def test_a_dtype_is_never_cast(trained):
    model = keras_cnn(dtype="float64")
    before = values(model.weights)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(model, trained.prefix, remap=REMAP)
    lines = str(error.value).splitlines()
    assert lines[0].endswith("(match='name'): 8 dtype mismatches")
    assert lines[1] == ("  dtype mismatch: conv/kernel (checkpoint name conv_1/w), expected [3, 3, 3, 4] float64, "
                        "checkpoint has [3, 3, 3, 4] float32")
    assert lines[-4:-2] == [
        "a dtype is never cast: build the model with the checkpoint's dtypes (dtype= on the layers), or write a cast "
        "copy first (`subsetsaver rewrite CKPT -o OUT --cast EXPR=DTYPE`, or ss.rewrite(checkpoint, out, "
        "cast={selector: dtype}))",
        "no variable was changed"]
    assert_unchanged(before, model.weights)


def test_an_optimizer_of_another_algorithm_is_refused(trained):
    model, optimizer = keras_cnn(), keras.optimizers.SGD(0.01, momentum=0.9)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(model, trained.prefix, optimizer, remap=REMAP)
    lines = str(error.value).splitlines()
    assert lines[0].endswith("(match='name'): 6 missing, 12 unexpected")
    assert lines[1] == (f"  missing: {optimizer.name}/conv_kernel_momentum, expected [3, 3, 3, 4] float32 (the "
                        "momentum of conv/kernel: the checkpoint holds no such slot of conv_1/w)")
    assert lines[7] == "  unexpected: conv_1/w/Adam [3, 3, 3, 4] float32 (a slot of conv_1/w made by TF1's Adam, not SGD)"
    assert lines[-5:-2] == [
        "the checkpoint's slots were made by TF1's Adam: pass the Keras optimizer of that algorithm",
        "no variable was changed",
        "Pass optimizer=None to load the weights alone."]
    assert int(optimizer.iterations.numpy()) == 0


SLOT_CASES = {
    "momentum": (lambda: v1.train.MomentumOptimizer(0.01, 0.9), lambda: keras.optimizers.SGD(0.01, momentum=0.9),
                 {"momentum": "Momentum"}),
    "rmsprop": (lambda: v1.train.RMSPropOptimizer(0.01, momentum=0.5),
                lambda: keras.optimizers.RMSprop(0.01, momentum=0.5), {"velocity": "RMSProp", "momentum": "RMSProp_1"}),
    "centered_rmsprop": (lambda: v1.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
                         lambda: keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
                         {"velocity": "RMSProp", "average_gradient": "RMSProp_1", "momentum": "RMSProp_2"}),
    "adagrad": (lambda: v1.train.AdagradOptimizer(0.01), lambda: keras.optimizers.Adagrad(0.01),
                {"accumulator": "Adagrad"}),
}


@pytest.mark.parametrize("case", list(SLOT_CASES))
def test_tf1_slots_of_each_optimizer_fill_the_keras_optimizer(case, tmp_path):
    make_tf1, make_keras, kinds = SLOT_CASES[case]
    trained = Trained(str(tmp_path), optimizer=make_tf1, steps=2)
    model, optimizer = keras_cnn(), make_keras()
    report = ss.keras.load_checkpoint(model, trained.prefix, optimizer, remap=REMAP)
    state = moments(optimizer)
    for path in TRAINABLE:
        for kind, slot in kinds.items():
            assert_same_bytes(state[f"{path.replace('/', '_')}_{kind}"], trained.values[f"{WEIGHTS[path]}/{slot}"])
    assert report.iterations == 2 and len(report.optimizer_restored) == len(TRAINABLE) * len(kinds) + 1


def test_a_checkpoint_without_slots_or_step_and_an_optimizer(trained, tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        tf1_cnn(v1.placeholder(tf.float32, (None, 8, 8, 3)), tf.constant(False))
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(sess, str(tmp_path / "inference"))
    model, optimizer = keras_cnn(), keras.optimizers.Adam()
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(model, prefix, optimizer, remap=REMAP)
    lines = str(error.value).splitlines()
    assert lines[0].endswith("(match='name'): 13 missing")
    assert lines[-6] == (f"  missing: {optimizer.name}/iteration, expected [] int64 (the iteration count, read from "
                         "the checkpoint's step: it holds no step (global_step))")
    assert lines[-5:-2] == ["the checkpoint holds no optimizer slots", "no variable was changed",
                            "Pass optimizer=None to load the weights alone."]
    report = ss.keras.load_checkpoint(model, prefix, remap=REMAP)
    assert len(report.restored) == 8 and report.iterations is None and report.optimizer_restored == {}




def test_a_tf_module_reads_its_variables_by_name(trained):
    module = Module()
    report = ss.keras.load_checkpoint(module, trained.prefix, sel=ss.scope("dense"))
    assert report.restored == {"dense/b": "dense/b", "dense/w": "dense/w"}  # module.variables: sorted by attribute
    assert report.unexpected == ("conv_1/b", "conv_1/bn/beta", "conv_1/bn/gamma", "conv_1/bn/moving_mean",
                                 "conv_1/bn/moving_variance", "conv_1/w")
    assert_same_bytes(module.w.numpy(), trained.values["dense/w"])
    assert_same_bytes(module.b.numpy(), trained.values["dense/b"])
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(Module(tf.float64), trained.prefix, on_mismatch="error")
    assert str(error.value).splitlines()[0] == (
        f"checkpoint '{trained.prefix}' does not match the module 'tf1_like' (match='name'): 2 dtype mismatches, "
        "6 unexpected")


def test_a_damaged_checkpoint_changes_no_variable(trained, tmp_path):
    for suffix in (".index", ".data-00000-of-00001", ".meta"):
        shutil.copy(trained.prefix + suffix, str(tmp_path / "model") + suffix)
    data = tmp_path / "model.data-00000-of-00001"
    content = bytearray(data.read_bytes())
    content[content.index(trained.values["dense/w"].tobytes()) + 5] ^= 0x10
    data.write_bytes(bytes(content))
    model, optimizer = keras_cnn(), keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    before_model, before_optimizer = values(model.weights), values(optimizer.variables)
    with pytest.raises(ss.CorruptCheckpointError):
        ss.keras.load_checkpoint(model, str(tmp_path / "model"), optimizer, match="order")
    assert_unchanged(before_model, model.weights)
    assert_unchanged(before_optimizer, optimizer.variables)


class ReadTracker:
    """Wraps the ``read_tensors`` a load reads through (its checkpoint view's): the names of each pass, and the most arrays alive at once
    (a weak reference to every array it hands out)."""

    def __init__(self, monkeypatch):
        self.passes, self.alive, self.most = [], [], 0
        real = checkpoint_side.read_tensors

        def read_tensors(path, names):
            names = list(names)
            self.passes.append(names)
            for name, array in real(path, names):
                self.alive = [ref for ref in self.alive if ref() is not None] + [weakref.ref(array)]
                self.most = max(self.most, len(self.alive))
                yield name, array
                del array

        monkeypatch.setattr(checkpoint_side, "read_tensors", read_tensors)


def test_values_are_checked_then_assigned_one_tensor_at_a_time(trained, monkeypatch):
    tracker = ReadTracker(monkeypatch)
    model, optimizer = keras_cnn(), keras.optimizers.Adam(0.01)
    report = ss.keras.load_checkpoint(model, trained.prefix, optimizer, remap=REMAP)
    read = [*WEIGHTS.values(), *report.optimizer_restored.values()]
    assert len(tracker.passes) == 2 and tracker.passes[0] == tracker.passes[1]
    assert sorted(tracker.passes[0]) == sorted(read) and len(read) == 21
    assert 1 <= tracker.most <= 2  # never the checkpoint's 21 tensors together
    assert np.asarray(model(batch(seed=5)[0], training=False)).tobytes() == trained.prediction.tobytes()
    assert report.iterations == STEPS


def test_a_tensor_damaged_late_in_the_file_changes_no_variable(trained, tmp_path, monkeypatch):
    tracker = ReadTracker(monkeypatch)
    ss.keras.load_checkpoint(keras_cnn(), trained.prefix, keras.optimizers.Adam(0.01), remap=REMAP)
    last = [name for name in tracker.passes[0] if name != "global_step"][-1]  # read last, but for the step
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(trained.prefix + suffix, str(tmp_path / "model") + suffix)
    data = tmp_path / "model.data-00000-of-00001"
    content = bytearray(data.read_bytes())
    stored = trained.values[last].tobytes()
    assert content.count(stored) == 1, last
    content[content.index(stored) + len(stored) - 1] ^= 0x01
    data.write_bytes(bytes(content))
    tracker.passes.clear()
    model, optimizer = keras_cnn(), keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    before_model, before_optimizer = values(model.weights), values(optimizer.variables)
    with pytest.raises(ss.CorruptCheckpointError, match=f"'{last}'"):
        ss.keras.load_checkpoint(model, str(tmp_path / "model"), optimizer, remap=REMAP)
    assert len(tracker.passes) == 1  # refused in the checking pass
    assert_unchanged(before_model, model.weights)
    assert_unchanged(before_optimizer, optimizer.variables)


def test_bad_arguments():
    model = keras_cnn()
    with pytest.raises(ValueError, match="match='names' is not one of 'auto', 'name', 'order'"):
        ss.keras.load_checkpoint(model, "x", match="names")
    with pytest.raises(ValueError, match="on_mismatch='skip' is not one of 'error', 'initialize'"):
        ss.keras.load_checkpoint(model, "x", on_mismatch="skip")
    with pytest.raises(TypeError, match="takes a Keras 3 model or a tf.Module, got dict"):
        ss.keras.load_checkpoint({}, "x")


def test_slots_of_another_shape_or_dtype_are_found_before_anything_changes(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("dense/w", (144, 2), initializer=v1.ones_initializer())
        v1.get_variable("dense/b", (2,), initializer=v1.ones_initializer())
        v1.get_variable("dense/w/Adam", (2, 144), initializer=v1.ones_initializer())
        v1.get_variable("dense/w/Adam_1", (144, 2), tf.float64, initializer=v1.ones_initializer())
        v1.get_variable("dense/b/Adam", (2,), initializer=v1.constant_initializer(0.5))
        v1.get_variable("dense/b/Adam_1", (2,), initializer=v1.constant_initializer(0.25))
        v1.train.get_or_create_global_step()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(sess, str(tmp_path / "odd"))
    module, optimizer = Module(), keras.optimizers.Adam()
    optimizer.build(module.trainable_variables)
    before_module, before_optimizer = values(module.variables), values(optimizer.variables)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss.keras.load_checkpoint(module, prefix, optimizer)
    name = optimizer.name
    assert str(error.value).splitlines()[:3] == [
        f"checkpoint '{prefix}' does not match the module 'tf1_like' and optimizer '{name}' (match='name'): "
        "1 shape mismatch, 1 dtype mismatch",
        f"  shape mismatch: {name}/dense_w_0_momentum (checkpoint name dense/w/Adam), expected [144, 2] float32, "
        "checkpoint has [2, 144] float32",
        f"  dtype mismatch: {name}/dense_w_0_velocity (checkpoint name dense/w/Adam_1), expected [144, 2] float32, "
        "checkpoint has [144, 2] float64",
    ]
    assert_unchanged(before_module, module.variables)
    assert_unchanged(before_optimizer, optimizer.variables)

    report = ss.keras.load_checkpoint(module, prefix, optimizer, on_mismatch="initialize")
    assert report.restored == {"dense/b": "dense/b", "dense/w": "dense/w"}
    assert report.optimizer_restored == {f"{name}/dense_b_0_momentum": "dense/b/Adam",
                                         f"{name}/dense_b_0_velocity": "dense/b/Adam_1",
                                         f"{name}/iteration": "global_step"}
    after = values(optimizer.variables)
    for path in (f"{name}/dense_w_0_momentum", f"{name}/dense_w_0_velocity"):
        assert path in report.optimizer_initialized
        assert_same_bytes(after[path], before_optimizer[path])
    assert after[f"{name}/dense_b_0_velocity"].tolist() == [0.25, 0.25] and report.iterations == 0
