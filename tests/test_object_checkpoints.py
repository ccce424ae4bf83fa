"""TensorFlow 2 object-based checkpoints, read without TensorFlow and converted to name-based ones.

Every checkpoint here is written by TensorFlow in the test: a ``tf.train.Checkpoint`` of
``tf.Variable`` objects; a Keras 3 model and its Adam after training (``tf.train.Checkpoint``);
tf_keras models trained one step with Adam, the legacy optimizer (slot variables) and the
current one (slot lists), saved with ``model.save_weights`` (TF format). tf_keras needs
TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, so those are written in a child process.
The catalogs are compared whole; ``convert --to name`` output is restored into the matching TF1
graph (``tf.compat.v1`` variables, ``AdamOptimizer`` slots, ``Saver().restore``) and compared bit
for bit with what TensorFlow's own reader finds in the source.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from subsetsaver import catalog
from subsetsaver.errors import CorruptCheckpointError
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.formats.tf import object_graph as tf_object_graph
from subsetsaver.formats.wire import protobuf as proto
from subsetsaver.tools import convert, slim

v1 = tf.compat.v1
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
X = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)
Y = np.linspace(0.5, -0.5, 8, dtype=np.float32).reshape(4, 2)

LEGACY_KERAS = textwrap.dedent("""
    import os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np
    import tensorflow as tf

    x = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)
    y = np.linspace(0.5, -0.5, 8, dtype=np.float32).reshape(4, 2)
    for kind, make in (("legacy", tf.keras.optimizers.legacy.Adam), ("current", tf.keras.optimizers.Adam)):
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, name="dense"),
                                     tf.keras.layers.BatchNormalization(name="bn"),
                                     tf.keras.layers.Dense(2, name="head")])
        optimizer = make(learning_rate=0.01)
        model.compile(optimizer, "mse")
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
        model.save_weights(os.path.join(sys.argv[1], kind, "weights"))
        assert int(optimizer.iterations.numpy()) == 1
""")

# name, object path, roles, slot_of -- of the tf_keras model (Dense 4, BatchNormalization, Dense 2)
MODEL = [
    ("bn/beta", "layer_with_weights-1/beta", [], None),
    ("bn/gamma", "layer_with_weights-1/gamma", [], None),
    ("bn/moving_mean", "layer_with_weights-1/moving_mean", ["bn_stat"], None),
    ("bn/moving_variance", "layer_with_weights-1/moving_variance", ["bn_stat"], None),
    ("dense/bias", "layer_with_weights-0/bias", [], None),
    ("dense/kernel", "layer_with_weights-0/kernel", [], None),
    ("head/bias", "layer_with_weights-2/bias", [], None),
    ("head/kernel", "layer_with_weights-2/kernel", [], None),
]
TRAINED = ["bn/beta", "bn/gamma", "dense/bias", "dense/kernel", "head/bias", "head/kernel"]
LEGACY_CATALOG = sorted(MODEL + [
    ("Adam/beta_1", "optimizer/beta_1", ["hyperparameter", "optimizer"], None),
    ("Adam/beta_2", "optimizer/beta_2", ["hyperparameter", "optimizer"], None),
    ("Adam/decay", "optimizer/decay", ["hyperparameter", "optimizer"], None),
    ("Adam/iter", "optimizer/iter", ["global_step"], None),
    ("Adam/learning_rate", "optimizer/learning_rate", ["hyperparameter", "optimizer"], None),
] + [(f"Adam/{name}/{slot}", f"{path}/.OPTIMIZER_SLOT/optimizer/{slot}", ["slot"], name)
     for name, path, _, _ in MODEL if name in TRAINED for slot in ("m", "v")])
CURRENT_SLOTS = {"dense/kernel": 1, "dense/bias": 3, "bn/gamma": 5, "bn/beta": 7, "head/kernel": 9, "head/bias": 11}
CURRENT_CATALOG = sorted(MODEL + [
    ("iteration", "optimizer/_iterations", ["global_step"], None),
    ("learning_rate", "optimizer/_learning_rate", ["hyperparameter", "optimizer"], None),
] + [(f"Adam/{slot}/{name}", f"optimizer/_variables/{CURRENT_SLOTS[name] + offset}", ["slot"], name)
     for name in TRAINED for offset, slot in enumerate("mv")])


@pytest.fixture(scope="module")
def tf_keras_checkpoints(tmp_path_factory):
    """{'legacy': prefix, 'current': prefix} of tf_keras models saved with save_weights, written by a child process."""
    directory = tmp_path_factory.mktemp("tf_keras")
    child = subprocess.run([sys.executable, "-c", LEGACY_KERAS, str(directory)], capture_output=True, text=True,
                           timeout=600, env={**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert child.returncode == 0, child.stderr[-3000:]
    return {kind: str(directory / kind / "weights") for kind in ("legacy", "current")}


@pytest.fixture(scope="module")
def keras3_checkpoint(tmp_path_factory):
    """A Keras 3 Sequential (Dense, BatchNormalization, Dense) and its Adam after one fit step."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="d1"),
                              keras.layers.BatchNormalization(name="bn"), keras.layers.Dense(2, name="d2")],
                             name="net")
    optimizer = keras.optimizers.Adam(0.01, name="adam")  # named: a process may have made an "adam" already
    model.compile(optimizer, "mse")
    model.fit(X, Y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    return tf.train.Checkpoint(model=model, optimizer=optimizer).write(
        str(tmp_path_factory.mktemp("keras3") / "ckpt"))


def rows(cat):
    return [(r.name, r.object_path, sorted(r.roles), r.slot_of) for r in cat.records]


def source_value(prefix, object_path):
    """What TensorFlow's own reader finds under the key of ``object_path``."""
    return tf.train.load_checkpoint(prefix).get_tensor(object_path + VALUE)


def tf1_restore(prefix, variables, trained, adam=True):
    """Build the TF1 graph of ``variables`` ({name: (shape, dtype)}), Adam over ``trained`` and a global
    step, restore ``prefix`` with ``Saver()``; every global variable's value by name."""
    graph = tf.Graph()
    with graph.as_default():
        made = {name: v1.get_variable(name, shape, dtype, trainable=name in trained)
                for name, (shape, dtype) in variables.items()}
        step = v1.train.get_or_create_global_step()
        if adam:
            loss = tf.add_n([tf.reduce_sum(made[name]) for name in trained])
            v1.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        saver = v1.train.Saver()
    with v1.Session(graph=graph) as sess:
        saver.restore(sess, prefix)
        return {variable.op.name: sess.run(variable) for variable in graph.get_collection("variables")}


def tf1_beta_powers(steps):
    """beta1_power and beta2_power of a TF1 AdamOptimizer (Keras's betas) after ``steps`` training steps."""
    graph = tf.Graph()
    with graph.as_default():
        weight = v1.get_variable("w", initializer=tf.ones([2]))
        optimizer = v1.train.AdamOptimizer(0.01, beta1=0.9, beta2=0.999)
        train = optimizer.minimize(tf.reduce_sum(weight * weight))
        powers = [variable_named(graph, "beta1_power"), variable_named(graph, "beta2_power")]
    with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(steps):
            sess.run(train)
        return [np.asarray(value) for value in sess.run(powers)]


def variable_named(graph, name):
    (variable,) = [v for v in graph.get_collection("variables") if v.op.name == name]
    return variable


def bits(value):
    value = np.asarray(value)
    return value.dtype, value.shape, value.tobytes()


# ---------------------------------------------------------------------------------
# Catalogs
# ---------------------------------------------------------------------------------


def test_a_checkpoint_of_variables_names_them_by_full_name_or_object_path(tmp_path, run_cli):
    """Two unnamed variables share TensorFlow's default full name 'Variable': both are named by object path."""
    checkpoint = tf.train.Checkpoint(
        weights=tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="dense/w"),
        nested=tf.train.Checkpoint(bias=tf.Variable([1.0, 2.0], name="dense/b")),
        first=tf.Variable(1.5), second=tf.Variable(np.int64(7)))
    prefix = checkpoint.write(str(tmp_path / "vars" / "ckpt"))
    cat = catalog.file_catalog(prefix)
    assert (cat.kind, cat.checkpoint_kind, catalog.file_format(prefix), catalog.checkpoint_kind(prefix)) == (
        "checkpoint", "object", "name", "object")
    assert rows(cat) == [("dense/b", "nested/bias", [], None), ("dense/w", "weights", [], None),
                         ("first", "first", [], None), ("second", "second", [], None)]
    assert [cat.checkpoint_key(name) for name in cat.ordered_names] == [
        "nested/bias" + VALUE, "weights" + VALUE, "first" + VALUE, "second" + VALUE]
    values = dict(catalog.read_tensors(prefix, ["dense/w", "second"]))
    assert bits(values["dense/w"]) == bits(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert bits(values["second"]) == bits(np.int64(7))
    with pytest.raises(KeyError, match="holds no tensor 'weights'"):
        dict(catalog.read_tensors(prefix, ["weights"]))

    code, out, err = run_cli("inspect", prefix, "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "checkpoint": prefix, "format": "object", "kind": "object",
        "tensors": [{"name": name, "shape": shape, "dtype": dtype, "bytes": nbytes, "trainable": True, "roles": [],
                     "collections": [], "slot_of": None, "object_path": path, "checkpoint_key": path + VALUE}
                    for name, shape, dtype, nbytes, path in [
                        ("dense/b", [2], "float32", 8, "nested/bias"), ("dense/w", [2, 3], "float32", 24, "weights"),
                        ("first", [], "float32", 4, "first"), ("second", [], "int64", 8, "second")]],
        "scopes": [{"scope": "dense", "tensors": 2, "bytes": 32}, {"scope": "(root)", "tensors": 2, "bytes": 12}],
        "optimizer_state": {"tensors": 0, "bytes": 0},
        "total": {"tensors": 4, "bytes": 44},
        "manifest": None,
    }


def test_names_fall_back_to_object_paths_then_keys_when_they_clash():
    """A full name that is another tensor's object path moves to its own object path; keys never clash."""
    graph = tf_object_graph.ObjectGraph("p", {
        "a" + VALUE: tf_object_graph.ObjectVariable("a" + VALUE, "a", "b", tf_object_graph.VARIABLE_VALUE, 1),
        "b" + VALUE: tf_object_graph.ObjectVariable("b" + VALUE, "b", "", tf_object_graph.VARIABLE_VALUE, 2),
        "c" + VALUE: tf_object_graph.ObjectVariable("c" + VALUE, "c", "x", tf_object_graph.VARIABLE_VALUE, 3),
    }, ())
    keys = ["a" + VALUE, "b" + VALUE, "c" + VALUE, "x", "unnamed"]
    assert catalog.object_checkpoint_names(graph, keys) == {
        "a" + VALUE: "a", "b" + VALUE: "b", "c" + VALUE: "c", "x": "x", "unnamed": "unnamed"}


def test_tf_keras_legacy_adam_catalog_comes_from_the_object_graph(tf_keras_checkpoints, run_cli):
    prefix = tf_keras_checkpoints["legacy"]
    cat = catalog.file_catalog(prefix)
    assert rows(cat) == LEGACY_CATALOG
    assert cat.roles.from_names is False and cat.role_note("slot") == "from the checkpoint's object graph"
    assert sorted(cat.collection("trainable_variables")) == TRAINED
    code, out, err = run_cli("inspect", prefix)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:3] == [
        f"checkpoint {prefix} (TensorFlow object-based checkpoint): 25 tensors, 464 B",
        "name                 shape   dtype    bytes  size  roles                     object path",
        "-------------------  ------  -------  -----  ----  ------------------------  "
        "-------------------------------------------------------",
    ]
    assert lines[3:8] == [
        "Adam/beta_1          []      float32      4   4 B  hyperparameter,optimizer  optimizer/beta_1",
        "Adam/beta_2          []      float32      4   4 B  hyperparameter,optimizer  optimizer/beta_2",
        "Adam/bn/beta/m       [4]     float32     16  16 B  slot                      "
        "layer_with_weights-1/beta/.OPTIMIZER_SLOT/optimizer/m",
        "Adam/bn/beta/v       [4]     float32     16  16 B  slot                      "
        "layer_with_weights-1/beta/.OPTIMIZER_SLOT/optimizer/v",
        "Adam/bn/gamma/m      [4]     float32     16  16 B  slot                      "
        "layer_with_weights-1/gamma/.OPTIMIZER_SLOT/optimizer/m",
    ]
    assert lines[18:22] == [
        "Adam/iter            []      int64        8   8 B  global_step               optimizer/iter",
        "Adam/learning_rate   []      float32      4   4 B  hyperparameter,optimizer  optimizer/learning_rate",
        "bn/beta              [4]     float32     16  16 B                            layer_with_weights-1/beta",
        "bn/gamma             [4]     float32     16  16 B                            layer_with_weights-1/gamma",
    ]
    assert [line.split()[0] for line in lines[3:28]] == [name for name, _, _, _ in LEGACY_CATALOG]
    assert lines[-1] == ("optimizer state (from the object graph): 16 tensors, 288 B (62% of the checkpoint); "
                         "`subsetsaver convert CKPT OUT --to name --keep \"~slots()\"` writes a name-based checkpoint "
                         "without it")
    code, out, _ = run_cli("inspect", prefix, "--json")
    report = json.loads(out)
    assert [(t["name"], t["object_path"], t["roles"], t["slot_of"]) for t in report["tensors"]] == LEGACY_CATALOG
    assert all(t["checkpoint_key"] == t["object_path"] + VALUE for t in report["tensors"])
    assert report["optimizer_state"] == {"tensors": 16, "bytes": 288}


def test_tf_keras_current_adam_catalog_comes_from_the_slot_lists(tf_keras_checkpoints):
    cat = catalog.file_catalog(tf_keras_checkpoints["current"])
    assert rows(cat) == CURRENT_CATALOG
    graph = cat.object_graph
    (optimizer,) = graph.optimizers
    assert (optimizer.layout, optimizer.iterations, optimizer.hyperparameters) == (
        "lists", "optimizer/_iterations" + VALUE, {"learning_rate": "optimizer/_learning_rate" + VALUE})
    assert {graph.tensors[key].slot_name for key in optimizer.slots} == {"momentums", "velocities"}


def test_keras3_model_and_optimizer_catalog(keras3_checkpoint):
    cat = catalog.file_catalog(keras3_checkpoint)
    trained = {"net/d1/kernel": 0, "net/d1/bias": 1, "net/bn/gamma": 2, "net/bn/beta": 3, "net/d2/kernel": 4,
               "net/d2/bias": 5}
    expected = [("adam/iteration", "optimizer/_iterations", ["global_step"], None),
                ("adam/learning_rate", "optimizer/_learning_rate", ["hyperparameter", "optimizer"], None),
                ("net/bn/moving_mean", "model/_functional/_operations/2/moving_mean", ["bn_stat"], None),
                ("net/bn/moving_variance", "model/_functional/_operations/2/moving_variance", ["bn_stat"], None)]
    for name, index in trained.items():
        expected.append((name, f"optimizer/_trainable_variables/{index}", [], None))
        flat = name.replace("/", "_")
        expected.append((f"adam/{flat}_momentum", f"optimizer/_variables/{2 + 2 * index}", ["slot"], name))
        expected.append((f"adam/{flat}_velocity", f"optimizer/_variables/{3 + 2 * index}", ["slot"], name))
    assert rows(cat) == sorted(expected)
    values = dict(catalog.read_tensors(keras3_checkpoint, ["adam/iteration", "net/d1/kernel"]))
    assert bits(values["adam/iteration"]) == bits(np.int64(1))
    assert bits(values["net/d1/kernel"]) == bits(source_value(keras3_checkpoint, "optimizer/_trainable_variables/0"))


# ---------------------------------------------------------------------------------
# convert --to name, restored by a TF1 graph
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["legacy", "current"])
def test_tf_keras_adam_converts_to_what_a_tf1_graph_restores(tf_keras_checkpoints, kind, tmp_path, run_cli):
    source = tf_keras_checkpoints[kind]
    output = str(tmp_path / "tf1" / "model")
    code, out, err = run_cli("convert", source, output, "--to", "name")
    assert (code, err) == (0, ""), err
    total = len(LEGACY_CATALOG if kind == "legacy" else CURRENT_CATALOG)
    assert out.splitlines()[0].startswith(f"wrote checkpoint {output}: {total} of {total} tensors")
    assert out.splitlines()[-1] == "computed: beta1_power, beta2_power"
    assert tf.train.latest_checkpoint(str(tmp_path / "tf1")) == output
    reader = tf.train.load_checkpoint(source)
    variables = {name: (reader.get_variable_to_shape_map()[path + VALUE], tf.float32) for name, path, _, _ in MODEL}
    restored = tf1_restore(output, variables, TRAINED)
    slots = {name: path for name, path, _, _ in (LEGACY_CATALOG if kind == "legacy" else CURRENT_CATALOG)}
    expected = {name: source_value(source, path) for name, path, _, _ in MODEL}
    for name in TRAINED:
        m, v = (f"Adam/{name}/m", f"Adam/{name}/v") if kind == "legacy" else (f"Adam/m/{name}", f"Adam/v/{name}")
        expected[f"{name}/Adam"] = source_value(source, slots[m])
        expected[f"{name}/Adam_1"] = source_value(source, slots[v])
    expected["global_step"] = np.int64(1)
    expected["beta1_power"], expected["beta2_power"] = tf1_beta_powers(1)
    assert sorted(restored) == sorted(expected)
    for name, value in expected.items():
        assert bits(restored[name]) == bits(value), name
    written = sorted(tf.train.load_checkpoint(output).get_variable_to_shape_map())
    extra = ["Adam/beta_1", "Adam/beta_2", "Adam/decay", "Adam/learning_rate"] if kind == "legacy" else [
        "learning_rate"]
    assert written == sorted(list(expected) + extra)


def test_keep_leaves_out_slots_and_their_beta_powers(tf_keras_checkpoints, tmp_path, run_cli):
    source, output = tf_keras_checkpoints["legacy"], str(tmp_path / "serve" / "model")
    code, out, err = run_cli("convert", source, output, "--to", "name", "--keep", "~slots()", "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert (report["kind"], report["format"], report["source_format"], report["source_kind"]) == (
        "checkpoint", "name", "object", "object")
    assert report["renamed"] == {"Adam/iter": "global_step"} and report["derived"] == []
    assert sorted(tf.train.load_checkpoint(output).get_variable_to_shape_map()) == sorted(
        [name for name, _, _, _ in MODEL] + ["global_step"])
    reader = tf.train.load_checkpoint(source)
    variables = {name: (reader.get_variable_to_shape_map()[path + VALUE], tf.float32) for name, path, _, _ in MODEL}
    restored = tf1_restore(output, variables, TRAINED, adam=False)
    for name, path, _, _ in MODEL:
        assert bits(restored[name]) == bits(source_value(source, path)), name
    assert bits(restored["global_step"]) == bits(np.int64(1))
    with pytest.raises(ValueError, match=f"^output '{source}' is the source checkpoint '{source}'; write to a new path$"):
        convert.convert(source, source, to="name")


def test_remap_renames_variables_and_their_slots(tf_keras_checkpoints, tmp_path, run_cli):
    source, output = tf_keras_checkpoints["legacy"], str(tmp_path / "remapped" / "model")
    code, _, err = run_cli("convert", source, output, "--to", "name", "--remap", "bn/=net/bn/",
                           "--remap", "head/kernel=net/logits/w")
    assert (code, err) == (0, "")
    names = set(tf.train.load_checkpoint(output).get_variable_to_shape_map())
    assert {"net/bn/gamma", "net/bn/gamma/Adam", "net/bn/gamma/Adam_1", "net/bn/moving_mean", "net/logits/w",
            "net/logits/w/Adam_1", "head/bias/Adam", "global_step"} <= names
    assert not {"bn/gamma", "head/kernel", "head/kernel/Adam"} & names
    code, _, err = run_cli("convert", source, str(tmp_path / "x" / "model"), "--to", "name", "--remap", "nowhere/=a/")
    assert code == 2 and err == ("subsetsaver: error: --remap nowhere/=a/ matches no name; the left-hand side names "
                                 "tensors (or scopes ending in '/') of the checkpoint\n")


def test_keras3_next_adam_step_in_tf1_matches_keras(tmp_path):
    """The strongest check of slots, global_step and beta powers: TF1's next Adam step from the converted
    checkpoint is Keras's next step."""
    import keras

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc")], name="lin")
    optimizer = keras.optimizers.Adam(learning_rate=0.05)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(X) - Y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    step()
    step()
    prefix = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "k3" / "ckpt"))
    step()
    after = {variable.path: variable.numpy() for variable in model.trainable_variables}
    report = convert.convert(prefix, str(tmp_path / "tf1" / "model"), to="name")
    assert sorted(report.derived) == ["beta1_power", "beta2_power"]
    graph = tf.Graph()
    with graph.as_default():
        kernel = v1.get_variable("lin/fc/kernel", [3, 2])
        bias = v1.get_variable("lin/fc/bias", [2])
        loss = tf.reduce_mean(tf.square(tf.matmul(X, kernel) + bias - Y))
        train = v1.train.AdamOptimizer(0.05, epsilon=1e-7).minimize(loss, global_step=v1.train.get_or_create_global_step())
        saver = v1.train.Saver()
    with v1.Session(graph=graph) as sess:
        saver.restore(sess, report.output)
        assert sess.run(variable_named(graph, "global_step")) == 2
        assert bits(sess.run(variable_named(graph, "beta1_power"))) == bits(tf1_beta_powers(2)[0])
        sess.run(train)
        np.testing.assert_allclose(sess.run(kernel), after["lin/fc/kernel"], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(sess.run(bias), after["lin/fc/bias"], rtol=1e-5, atol=1e-7)


def test_keras3_converts_to_a_tf1_graph_and_to_npz(keras3_checkpoint, tmp_path):
    report = convert.convert(keras3_checkpoint, str(tmp_path / "tf1" / "model"), to="name")
    names = ["net/d1/kernel", "net/d1/bias", "net/bn/gamma", "net/bn/beta", "net/d2/kernel", "net/d2/bias"]
    source = catalog.file_catalog(keras3_checkpoint)
    variables = {name: (source.record(name).shape, tf.float32) for name in
                 names + ["net/bn/moving_mean", "net/bn/moving_variance"]}
    restored = tf1_restore(report.output, variables, names)
    for name in variables:
        assert bits(restored[name]) == bits(source_value(keras3_checkpoint, source.record(name).object_path)), name
    for name in names:
        for slot, suffix in (("momentum", "Adam"), ("velocity", "Adam_1")):
            path = source.record(f"adam/{name.replace('/', '_')}_{slot}").object_path
            assert bits(restored[f"{name}/{suffix}"]) == bits(source_value(keras3_checkpoint, path))
    assert bits(restored["global_step"]) == bits(np.int64(1))
    assert [bits(restored["beta1_power"]), bits(restored["beta2_power"])] == [bits(p) for p in tf1_beta_powers(1)]

    npz_report = convert.convert(keras3_checkpoint, str(tmp_path / "k3.npz"), keep="trainable() | bn_stats()")
    assert sorted(npz_report.kept) == sorted(variables) and npz_report.renamed == ()
    ((_, kernel),) = catalog.read_tensors(str(tmp_path / "k3.npz"), ["net/d1/kernel"])
    assert bits(kernel) == bits(source_value(keras3_checkpoint, "optimizer/_trainable_variables/0"))


NO_TENSORFLOW = textwrap.dedent("""
    import contextlib, io, json, sys
    sys.modules["tensorflow"] = None
    from subsetsaver.cli import main
    codes = []
    for args in json.loads(sys.argv[1]):
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(args)
            except SystemExit as stop:
                codes.append(stop.code)
    print(json.dumps({"codes": codes, "tensorflow_loaded": sys.modules.get("tensorflow") is not None}))
""")


def test_inspect_and_convert_run_without_tensorflow(tf_keras_checkpoints, tmp_path):
    source, output = tf_keras_checkpoints["legacy"], str(tmp_path / "tf1" / "model")
    commands = [["inspect", source, "--json"], ["select", "--checkpoint", source, "slots()"],
                ["convert", source, output, "--to", "name"], ["convert", source, str(tmp_path / "w.npz")]]
    child = subprocess.run([sys.executable, "-c", NO_TENSORFLOW, json.dumps(commands)], capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {"codes": [0, 0, 0, 0], "tensorflow_loaded": False}
    reader = tf.train.load_checkpoint(output)
    assert reader.get_tensor("global_step") == 1
    assert bits(reader.get_tensor("dense/kernel/Adam_1")) == bits(
        source_value(source, "layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/v"))


# ---------------------------------------------------------------------------------
# Refusals and hostile input
# ---------------------------------------------------------------------------------


def test_slim_refuses_an_object_based_checkpoint_and_names_convert(tf_keras_checkpoints, tmp_path, run_cli):
    source = tf_keras_checkpoints["legacy"]
    message = (f"'{source}' is a TensorFlow object-based checkpoint (tf.train.Checkpoint or Keras save_weights), and "
               "a subset of it would no longer match its object graph; write the kept tensors as a name-based "
               f"checkpoint instead: subsetsaver convert {source} OUT --to name --keep \"~slots()\"")
    with pytest.raises(ValueError) as error:
        slim.slim(source, "~slots()", str(tmp_path / "slim" / "model"))
    assert str(error.value) == message
    code, out, err = run_cli("slim", source, "--keep", "~slots()", "-o", str(tmp_path / "slim2" / "model"))
    assert (code, out, err) == (2, "", f"subsetsaver: error: {message}\n")


def test_convert_of_a_name_based_checkpoint_to_name_is_still_refused(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        v1.Variable(1.0, name="w")
        saver, init = v1.train.Saver(), v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        prefix = saver.save(sess, str(tmp_path / "s"), write_meta_graph=False)
    with pytest.raises(ValueError, match=r"would be a checkpoint like its source; .* \(to keep part of a checkpoint, use "
                                         r"`subsetsaver slim`\); pass to='npz' to write another format"):
        convert.convert(prefix, str(tmp_path / "t"), to="name")


def rewritten(source, prefix, graph_bytes=None, graph_value=None):
    """A copy of checkpoint ``source`` at ``prefix`` with another object graph tensor."""
    with tf_bundle.BundleReader(source) as reader:
        arrays = {name: reader.read(name) for name in reader.names}
    arrays[tf_object_graph.OBJECT_GRAPH_KEY] = (np.array(graph_bytes, dtype=object) if graph_value is None
                                                else graph_value)
    return tf_bundle.write(prefix, arrays)


def graph_bytes(nodes):
    return proto.encode(tf_object_graph.TRACKABLE_OBJECT_GRAPH, {"nodes": nodes})


def hostile_cases(original):
    key = "layer_with_weights-0/kernel" + VALUE
    tensor = {"name": b"VARIABLE_VALUE", "full_name": b"dense/kernel", "checkpoint_key": key.encode()}
    bad = "(truncated or tampered); restore from an intact copy of the checkpoint"
    subject = "its object graph (tensor '_CHECKPOINTABLE_OBJECT_GRAPH')"
    return [
        ("garbage", b"\xff\xff\xff", None,
         f"{subject} does not parse as a TrackableObjectGraph (a varint runs past the end) {bad}"),
        ("truncated", original[:-1], None,
         f"{subject} does not parse as a TrackableObjectGraph (field 1 runs past the end) {bad}"),
        ("half", original[:len(original) // 2], None, f"{subject} does not parse as a TrackableObjectGraph ("),
        ("out of range", graph_bytes([{"children": [{"node_id": 7, "local_name": b"x"}]}]), None,
         f"{subject} refers from node 0 to node 7, but has 1 nodes {bad}"),
        ("negative slot", graph_bytes([{"attributes": [tensor], "slot_variables": [
            {"original_variable_node_id": 0, "slot_name": b"m", "slot_variable_node_id": -3}]}]), None,
         f"{subject} refers from node 0 to node -3, but has 1 nodes {bad}"),
        ("one key twice", graph_bytes([{"attributes": [tensor]}, {"attributes": [tensor]}]), None,
         f"{subject} gives tensor '{key}' to nodes 0 and 1 {bad}"),
        ("not utf-8", graph_bytes([{"attributes": [dict(tensor, full_name=b"\xc3(")]}]), None,
         f"{subject} has the full name of tensor '{key}' that is not UTF-8 text {bad}"),
        ("a float", None, np.float32(1.0), f"{subject} is a float32 tensor of shape [], not one string {bad}"),
        ("strings", None, np.array([b"a", b"b"], dtype=object),
         f"{subject} is a string tensor of shape [2], not one string {bad}"),
    ]


READERS = (lambda prefix, _: catalog.file_catalog(prefix),
           lambda prefix, _: dict(catalog.read_tensors(prefix, ["dense/kernel"])),
           lambda prefix, output: convert.convert(prefix, output, to="name"))


def test_a_hostile_object_graph_is_one_clear_error(tf_keras_checkpoints, tmp_path, run_cli):
    source = tf_keras_checkpoints["legacy"]
    original = tf.train.load_checkpoint(source).get_tensor(tf_object_graph.OBJECT_GRAPH_KEY)
    for number, (label, data, value, problem) in enumerate(hostile_cases(original)):
        prefix = rewritten(source, str(tmp_path / f"hostile{number}"), data, value)
        start = f"cannot read checkpoint '{prefix}': {problem}"
        output = str(tmp_path / f"out{number}" / "model")
        for read in READERS:
            with pytest.raises(CorruptCheckpointError) as error:
                read(prefix, output)
            assert str(error.value).startswith(start), (label, str(error.value))
        assert not os.path.exists(tmp_path / f"out{number}")
        for command in (["inspect", prefix], ["convert", prefix, str(tmp_path / f"cli{number}.npz")],
                        ["select", "--checkpoint", prefix, "slots()"]):
            code, out, err = run_cli(*command)
            assert (code, out) == (2, ""), (label, command)
            assert err.startswith(f"subsetsaver: error: {start}") and err.count("\n") == 1, (label, err)
            assert "Traceback" not in err


def test_fuzzed_object_graphs_never_crash_the_reader(tf_keras_checkpoints, tmp_path):
    """Byte flips and cuts of a real graph: a catalog or a CorruptCheckpointError, nothing else."""
    source = tf_keras_checkpoints["legacy"]
    original = tf.train.load_checkpoint(source).get_tensor(tf_object_graph.OBJECT_GRAPH_KEY)
    with tf_bundle.BundleReader(source) as reader:
        specs = {name: reader.specs[name] for name in reader.names if name != tf_object_graph.OBJECT_GRAPH_KEY}
    generator = np.random.default_rng(0)
    outcomes = set()
    for attempt in range(400):
        data = bytearray(original)
        for position in generator.integers(0, len(data), size=generator.integers(1, 4)):
            data[position] = int(generator.integers(0, 256))
        data = bytes(data[:generator.integers(1, len(data) + 1)] if attempt % 2 else data)
        try:
            graph = tf_object_graph.parse_object_graph(data, "fuzzed", specs)
            catalog.object_checkpoint_names(graph, specs)
            outcomes.add("parsed")
        except CorruptCheckpointError as error:
            assert str(error).startswith("cannot read checkpoint 'fuzzed': its object graph"), str(error)
            outcomes.add("refused")
    assert outcomes == {"parsed", "refused"}
