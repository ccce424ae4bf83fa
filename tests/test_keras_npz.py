"""Keras 3 (eager) portable checkpoints: exact resumption in a fresh process, selectors on Keras
variable paths, optimizer slots built before assignment, tf.distribute scopes, refusals."""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import subsetsaver as ss
from subsetsaver import keras as ss_keras
from subsetsaver.catalog import keras_source as keras_catalog
from subsetsaver.formats import npz as npzfile

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 3


def make_model():
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(5, name="dense")(inputs)
    hidden = keras.layers.BatchNormalization(name="bn")(hidden)
    outputs = keras.layers.Dense(2, name="out")(keras.layers.ReLU(name="relu")(hidden))
    return keras.Model(inputs, outputs, name="net")


def batches():
    rng = np.random.default_rng(11)
    return [(rng.random((8, 6), dtype=np.float32), rng.random((8, 2), dtype=np.float32)) for _ in range(STEPS + 1)]


def compiled(model, optimizer):
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    return model


def state(model, optimizer):
    """Every model and optimizer variable by path without the optimizer's own name."""
    found = keras_catalog.read(model, optimizer)
    return {(found.owner[n], found.local[n]): np.array(v.numpy()) for n, v in found.variables.items()}


def assert_same_state(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), key


def trained(steps=STEPS):
    keras.utils.set_random_seed(0)
    model, optimizer = make_model(), keras.optimizers.Adam(0.01)
    compiled(model, optimizer)
    for x, y in batches()[:steps]:
        model.train_on_batch(x, y)
    return model, optimizer


RESUME_SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    sys.path.insert(0, sys.argv[1])
    import keras, numpy as np
    from subsetsaver import keras as ss_keras
    from test_keras_npz import STEPS, batches, compiled, make_model, state

    keras.utils.set_random_seed(123)  # other initial values: the restore must replace them all
    model, optimizer = make_model(), keras.optimizers.Adam(0.5)
    ss_keras.restore_npz(sys.argv[2], model, optimizer)
    assert optimizer.built and int(optimizer.iterations.numpy()) == STEPS
    compiled(model, optimizer)
    x, y = batches()[STEPS]
    loss = model.train_on_batch(x, y)
    final = state(model, optimizer)
    np.savez(sys.argv[3], loss=np.array(loss), **{f"{o}|{n}": v for (o, n), v in final.items()})
    """
)


def test_training_resumes_bit_exact_in_a_fresh_process(tmp_path):
    model, optimizer = trained()
    checkpoint = str(tmp_path / "keras.npz")
    ss_keras.save_npz(checkpoint, model, optimizer)
    x, y = batches()[STEPS]
    loss = model.train_on_batch(x, y)
    straight = state(model, optimizer)

    script = tmp_path / "resume.py"
    script.write_text(RESUME_SCRIPT)
    done = subprocess.run([sys.executable, str(script), HERE, checkpoint, str(tmp_path / "resumed.npz")],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(tmp_path / "resumed.npz") as resumed:
        assert resumed["loss"].tobytes() == np.array(loss).tobytes()
        assert sorted(resumed.files) == sorted(["loss"] + [f"{o}|{n}" for o, n in straight])
        for (owner, name), value in straight.items():
            assert resumed[f"{owner}|{name}"].tobytes() == value.tobytes(), name
    assert len(straight) == 8 + 14  # 8 model variables; iteration, learning_rate and 12 moments


def test_selectors_work_on_keras_variable_paths():
    model, optimizer = trained(steps=1)
    found = keras_catalog.read(model, optimizer)
    catalog = found.catalog
    prefix = optimizer.name + "/"
    assert ss.trainable().names(catalog) == ["dense/kernel", "dense/bias", "bn/gamma", "bn/beta", "out/kernel",
                                             "out/bias"]
    assert ss.bn_stats().names(catalog) == ["bn/moving_mean", "bn/moving_variance"]
    assert ss.global_step().names(catalog) == [prefix + "iteration"]
    assert ss.slots().names(catalog)[:3] == [prefix + "learning_rate", prefix + "dense_kernel_momentum",
                                             prefix + "dense_kernel_velocity"]
    assert len(ss.slots().names(catalog)) == 13
    assert catalog.record(prefix + "dense_kernel_velocity").slot_of == "dense/kernel"
    assert catalog.record(prefix + "learning_rate").roles == frozenset({"optimizer", "hyperparameter"})
    assert ss.parse("everything() - collection('optimizer')").names(catalog) == \
        ss.parse("trainable() | bn_stats()").names(catalog)


def test_a_subset_saved_by_selector_and_restored_without_the_optimizer(tmp_path):
    model, optimizer = trained(steps=2)
    path = ss_keras.save_npz(str(tmp_path / "w.npz"), model, optimizer, sel=ss.trainable() | ss.bn_stats())
    assert npzfile.read_manifest(path).names == ("dense/kernel", "dense/bias", "bn/gamma", "bn/beta",
                                                 "bn/moving_mean", "bn/moving_variance", "out/kernel", "out/bias")
    fresh = make_model()
    report = ss_keras.restore_npz(path, fresh)
    assert report.complete and len(report.restored) == 8
    for a, b in zip(model.variables, fresh.variables):
        assert np.array_equal(a.numpy(), b.numpy())

    other_optimizer = keras.optimizers.Adam(0.01)
    before = state(fresh, None)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss_keras.restore_npz(path, make_model(), other_optimizer)
    lines = str(error.value).splitlines()
    assert lines[0] == (f"portable checkpoint '{path}' does not match the Keras model and optimizer: 14 missing, "
                        "0 shape/dtype mismatches, 0 unexpected")
    assert lines[1] == f"  missing: {other_optimizer.name}/iteration, expected [] int64"
    assert lines[-1] == ("no variable was changed; fix: build the same architecture with the same layer names (and "
                         "pass the optimizer if the file holds its state), or pass strict=False to restore the 8 "
                         "variables both hold")
    assert_same_state(state(fresh, None), before)


def test_restore_builds_the_optimizer_before_assigning(tmp_path):
    model, optimizer = trained()
    path = ss_keras.save_npz(str(tmp_path / "k.npz"), model, optimizer)
    fresh_optimizer = keras.optimizers.Adam(0.01)
    assert not fresh_optimizer.built
    fresh = make_model()
    report = ss_keras.restore_npz(path, fresh, fresh_optimizer)
    assert fresh_optimizer.built and int(fresh_optimizer.iterations.numpy()) == STEPS
    assert report.complete and len(report.restored) == 22
    assert_same_state(state(fresh, fresh_optimizer), state(model, optimizer))


@pytest.mark.parametrize("make_strategy", [lambda: tf.distribute.OneDeviceStrategy("/cpu:0"),
                                           lambda: tf.distribute.MirroredStrategy(["/cpu:0"])],
                         ids=["one_device", "mirrored"])
def test_inside_a_distribution_strategy(tmp_path, make_strategy):
    model, optimizer = trained()
    path = ss_keras.save_npz(str(tmp_path / "k.npz"), model, optimizer)
    strategy = make_strategy()
    with strategy.scope():
        fresh, fresh_optimizer = make_model(), keras.optimizers.Adam(0.01)
        ss_keras.restore_npz(path, fresh, fresh_optimizer)
    assert_same_state(state(fresh, fresh_optimizer), state(model, optimizer))
    # Outside the scope too: the variables' strategy is entered for building and assigning.
    with strategy.scope():
        again, again_optimizer = make_model(), keras.optimizers.Adam(0.01)
    ss_keras.restore_npz(path, again, again_optimizer)
    assert_same_state(state(again, again_optimizer), state(model, optimizer))
    saved_again = ss_keras.save_npz(str(tmp_path / "again.npz"), again, again_optimizer)
    _, first = npzfile.read(path)
    _, second = npzfile.read(saved_again)
    assert [a.tobytes() for a in first.values()] == [b.tobytes() for b in second.values()]


def test_shape_mismatch_and_damage_change_no_variable(tmp_path):
    model, _ = trained(steps=1)
    path = ss_keras.save_npz(str(tmp_path / "k.npz"), model, sel=ss.collection("model"))
    inputs = keras.Input((6,))
    other = keras.Model(inputs, keras.layers.Dense(2, name="out")(keras.layers.BatchNormalization(name="bn")(
        keras.layers.Dense(7, name="dense")(inputs))), name="net")
    before = state(other, None)
    with pytest.raises(ss.CheckpointMismatchError) as error:
        ss_keras.restore_npz(path, other)
    assert str(error.value).splitlines()[1:5] == [
        "  shape mismatch: dense/kernel, expected [6, 7] float32, checkpoint has [6, 5] float32",
        "  shape mismatch: dense/bias, expected [7] float32, checkpoint has [5] float32",
        "  shape mismatch: bn/gamma, expected [7] float32, checkpoint has [5] float32",
        "  shape mismatch: bn/beta, expected [7] float32, checkpoint has [5] float32",
    ]
    assert_same_state(state(other, None), before)

    fresh = make_model()
    before = state(fresh, None)
    data = bytearray(open(path, "rb").read())
    data[data.index(model.get_layer("out").kernel.numpy().tobytes()) + 3] ^= 0x40
    open(path, "wb").write(bytes(data))
    with pytest.raises(ss.CorruptCheckpointError, match="checksum mismatch for array 'out/kernel'"):
        ss_keras.restore_npz(path, fresh)
    assert_same_state(state(fresh, None), before)


def test_an_unbuilt_model_is_a_clear_error(tmp_path):
    model = keras.Sequential([keras.layers.Dense(2)], name="lazy")
    with pytest.raises(ValueError) as error:
        ss_keras.save_npz(str(tmp_path / "x.npz"), model)
    assert str(error.value) == ("model 'lazy' has no variables yet; build it first (model.build(input_shape), "
                                "or call it once on a batch)")


def test_selectors_resolve_on_a_keras_model_through_the_catalog():
    model = make_model()
    assert ss.bn_stats().names(model) == ["bn/moving_mean", "bn/moving_variance"]
    assert ss.trainable().names(model) == ["dense/kernel", "dense/bias", "bn/gamma", "bn/beta", "out/kernel", "out/bias"]
