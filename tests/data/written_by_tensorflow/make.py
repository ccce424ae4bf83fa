"""Write the files tests/test_without_tensorflow.py reads where TensorFlow is not installed.

``mnist/``: the classic TF1 MNIST CNN of ``tests/graphs.py`` (hand-written batch norm, Adam, the global
step), made small, after one training step: ``model-1.meta`` (its MetaGraph) and the checkpoint
``model-1`` that ``tf.compat.v1.train.Saver`` wrote with it. ``object/``: a Keras 3 model and its Adam
after one step, written by ``tf.train.Checkpoint`` (``ckpt-1``). Run from the repository's root with
TensorFlow installed; the files are small and kept in the repository.

    python tests/data/written_by_tensorflow/make.py
"""

import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # tests/, for graphs.py
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from graphs import mnist_cnn  # noqa: E402

v1 = tf.compat.v1


def mnist(directory):
    built = mnist_cnn(channels=(2, 4), fc_units=8, input_hw=8, seed=3)
    rng = np.random.default_rng(3)
    feed = {built.tensors["x"]: rng.normal(size=(4, 64)).astype(np.float32),
            built.tensors["labels"]: rng.integers(0, 10, size=4), built.tensors["phase_train"]: True,
            built.tensors["keep_prob"]: 1.0}
    with built.graph.as_default(), v1.Session(graph=built.graph) as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(built.tensors["train_op"], feed)
        v1.train.Saver().save(sess, os.path.join(directory, "model"), global_step=1)
    os.remove(os.path.join(directory, "checkpoint"))  # it names the writing machine's absolute paths


def keras_object(directory):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="dense")], name="net")
    optimizer = keras.optimizers.Adam(0.1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(tf.ones((2, 4))))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    tf.train.Checkpoint(model=model, optimizer=optimizer).write(os.path.join(directory, "ckpt-1"))


if __name__ == "__main__":
    for name, make in (("mnist", mnist), ("object", keras_object)):
        directory = os.path.join(HERE, name)
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        make(directory)
