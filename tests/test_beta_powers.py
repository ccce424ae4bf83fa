"""``convert --to name`` of a Keras 3 Adam checkpoint computes TF1's ``beta1_power`` and ``beta2_power``:
bit for bit what a real ``tf.compat.v1.train.AdamOptimizer`` holds after the same number of steps."""

import numpy as np
import pytest
import tensorflow as tf

from subsetsaver.tools import convert

v1 = tf.compat.v1
STEPS = 20


def tf1_powers(steps, beta1=0.9, beta2=0.999):
    """[(beta1_power, beta2_power)] of a TF1 AdamOptimizer after 1..steps training steps."""
    graph = tf.Graph()
    with graph.as_default():
        weight = v1.get_variable("w", initializer=tf.ones([2]))
        optimizer = v1.train.AdamOptimizer(0.01, beta1=beta1, beta2=beta2)
        train = optimizer.minimize(tf.reduce_sum(weight * weight))
        powers = [v for v in graph.get_collection("variables") if v.op.name in ("beta1_power", "beta2_power")]
        assert [p.op.name for p in powers] == ["beta1_power", "beta2_power"]
    found = []
    with v1.Session(graph=graph) as sess:
        sess.run(v1.global_variables_initializer())
        for _ in range(steps):
            sess.run(train)
            found.append(tuple(np.asarray(value) for value in sess.run(powers)))
    return found


@pytest.fixture(scope="module")
def keras3_checkpoints(tmp_path_factory):
    """A Keras 3 model and Adam checkpointed (tf.train.Checkpoint) after each of 1..STEPS steps."""
    import keras

    keras.utils.set_random_seed(3)
    x = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)
    y = np.linspace(0.5, -0.5, 8, dtype=np.float32).reshape(4, 2)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="fc")], name="lin")
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    checkpoint, root, prefixes = tf.train.Checkpoint(model=model, optimizer=optimizer), tmp_path_factory.mktemp("k3"), []
    for step in range(1, STEPS + 1):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        assert int(optimizer.iterations.numpy()) == step
        prefixes.append(checkpoint.write(str(root / f"step{step}" / "ckpt")))
    return prefixes


def test_beta_powers_after_each_of_20_steps_are_tf1s(keras3_checkpoints, tmp_path):
    expected = tf1_powers(STEPS)
    written = []
    for step, prefix in enumerate(keras3_checkpoints, start=1):
        report = convert.convert(prefix, str(tmp_path / f"tf1_{step}" / "model"), to="name")
        assert sorted(report.derived) == ["beta1_power", "beta2_power"]
        reader = tf.train.load_checkpoint(report.output)
        written.append(tuple(reader.get_tensor(name) for name in ("beta1_power", "beta2_power")))
    as_bits = [[(p.dtype, p.tobytes()) for p in pair] for pair in written]
    assert as_bits == [[(p.dtype, p.tobytes()) for p in pair] for pair in expected]
    assert written[1][1] == np.float32(0.9970031)  # beta_2 ** 3 in double precision rounds to 0.997003


def test_a_power_past_float32s_smallest_normal_is_zero_as_in_tf1():
    expected = tf1_powers(130, beta1=0.5)
    computed = [(convert.accumulated_power(0.5, step), convert.accumulated_power(0.999, step))
                for step in range(1, 131)]
    assert [[p.tobytes() for p in pair] for pair in computed] == [[p.tobytes() for p in pair] for pair in expected]
    assert expected[124][0] == np.finfo(np.float32).tiny and expected[125][0] == 0.0
