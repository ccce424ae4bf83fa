"""The classic TensorFlow 1 MNIST CNN with hand-written batch norm, in ``tf.compat.v1`` only.

conv_1 and conv_2 (5x5, 32 and 64 channels) each followed by a batch norm in a ``bn``
scope that keeps an exponential moving average of the batch mean and variance for
inference, ReLU and 2x2 max-pool; a 1024-unit layer with dropout; 10-way logits;
Adam under an ``opt`` variable scope.

Example::

    >>> net = build()                      # a new tf.Graph
    >>> sorted(net.tensors)
    ['accuracy', 'keep_prob', 'labels', 'logits', 'loss', 'phase_train', 'train_op', 'x']
"""

import dataclasses

import tensorflow as tf

v1 = tf.compat.v1


@dataclasses.dataclass(frozen=True)
class Network:
    graph: tf.Graph
    tensors: dict


def batch_norm(x, channels, phase_train):
    """Normalize with the batch's moments in training and their moving averages at test time."""
    with v1.variable_scope("bn"):
        beta = v1.Variable(tf.zeros([channels]), name="beta")
        gamma = v1.Variable(tf.ones([channels]), name="gamma")
        batch_mean, batch_var = tf.nn.moments(x, [0, 1, 2], name="moments")
        ema = v1.train.ExponentialMovingAverage(decay=0.9)

        def mean_var_with_update():
            update = ema.apply([batch_mean, batch_var])
            with tf.control_dependencies([update]):
                return tf.identity(batch_mean), tf.identity(batch_var)

        mean, var = v1.cond(phase_train, mean_var_with_update, lambda: (ema.average(batch_mean), ema.average(batch_var)))
        return tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3)


def conv_block(x, in_channels, out_channels, phase_train):
    w = v1.get_variable("w", [5, 5, in_channels, out_channels], initializer=v1.truncated_normal_initializer(stddev=0.1))
    b = v1.get_variable("b", [out_channels], initializer=v1.constant_initializer(0.1))
    conv = tf.nn.conv2d(x, w, strides=1, padding="SAME") + b
    normed = batch_norm(conv, out_channels, phase_train)
    return tf.nn.max_pool2d(tf.nn.relu(normed), ksize=2, strides=2, padding="SAME")


def build(seed=0, channels=(32, 64), fc_units=1024, learning_rate=1e-3) -> Network:
    """The whole training and inference graph, in a new ``tf.Graph``."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(seed)
        x = v1.placeholder(tf.float32, [None, 784], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        phase_train = v1.placeholder_with_default(False, [], name="phase_train")
        keep_prob = v1.placeholder_with_default(1.0, [], name="keep_prob")
        image = tf.reshape(x, [-1, 28, 28, 1])
        with v1.variable_scope("conv_1"):
            pooled = conv_block(image, 1, channels[0], phase_train)
        with v1.variable_scope("conv_2"):
            pooled = conv_block(pooled, channels[0], channels[1], phase_train)
        flat = tf.reshape(pooled, [-1, 7 * 7 * channels[1]])
        with v1.variable_scope("fc"):
            w = v1.get_variable("w", [7 * 7 * channels[1], fc_units], initializer=v1.truncated_normal_initializer(stddev=0.05))
            b = v1.get_variable("b", [fc_units], initializer=v1.zeros_initializer())
            hidden = tf.nn.dropout(tf.nn.relu(tf.matmul(flat, w) + b), rate=1.0 - keep_prob, seed=seed)
        with v1.variable_scope("out"):
            w = v1.get_variable("w", [fc_units, 10], initializer=v1.truncated_normal_initializer(stddev=0.05))
            b = v1.get_variable("b", [10], initializer=v1.zeros_initializer())
            logits = tf.matmul(hidden, w) + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
        with v1.variable_scope("opt"):
            step = v1.train.get_or_create_global_step()
            train_op = v1.train.AdamOptimizer(learning_rate).minimize(loss, global_step=step)
    tensors = dict(x=x, labels=labels, phase_train=phase_train, keep_prob=keep_prob, logits=logits, loss=loss,
                   accuracy=accuracy, train_op=train_op)
    return Network(graph, tensors)
