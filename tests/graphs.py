"""Builders of real TensorFlow 1-style graphs (``tf.compat.v1``, graph mode) for tests.

Every builder:

* takes keyword-only options (all have defaults, every builder has ``seed``),
* creates a NEW ``tf.Graph()`` and builds inside ``with graph.as_default():``
  (the process-wide default graph is never touched and eager execution may stay
  enabled globally: ops built inside ``graph.as_default()`` are graph ops and
  ``tf.compat.v1.Session(graph=built.graph)`` runs them),
* returns a frozen :class:`BuiltGraph`.

``BuiltGraph.expected`` maps a category to variable op names (no ``:0``), ordered
by position in ``graph.get_collection('variables') +
graph.get_collection('local_variables')``. The names are read back from
TensorFlow objects (``opt.get_slot``, ``opt._non_slot_variables()``,
``ema.average``, layer attributes, ...), never hard-coded. Every builder fills
the same keys (possibly with empty lists):

``all``          every global + local variable
``trainable``    ``graph.get_collection('trainable_variables')``
``slots``        optimizer slots (``opt.get_slot(var, name)`` for every
                 trainable variable and ``get_slot_names()`` entry) plus the
                 optimizer's non-slot variables; like every list it is sorted
                 by collection position, so Adam's ``beta1_power`` /
                 ``beta2_power`` (created before the slots) come first
``non_slot``     only the optimizer's non-slot variables (e.g. Adam's
                 ``beta1_power``/``beta2_power``)
``bn_stats``     batch-norm moving mean / variance variables
``averages``     ``ExponentialMovingAverage`` shadows of *weights*
``averaged``     the primaries of ``averages``
``global_step``  the global step variable
``model``        ``all`` minus ``slots`` minus ``global_step`` (i.e. what an
                 inference-only restore needs)
``local``        ``graph.get_collection('local_variables')``

Some builders add extra keys (``wide_graph`` adds ``non_trainable`` and
``scope:<name>`` keys, ``tf_keras_bn_model`` adds ``keras_weights``, the loss-scaled
builders ``loss_scale``, ``accumulating_cnn`` ``accumulators`` and ``momentum``). The
third-party builders of section 9 fill ``slots`` with every variable their optimizer code
made (read back from the graph or ``opt.get_slot``), ``non_slot`` with its scalars.

Notes on global state: ``tf.compat.v1.cond`` has no per-call switch between
control flow v1 (Switch/Merge) and v2 (functional ``If``), so builders that need
v1 control flow (``resource=False``, see :func:`mnist_cnn`) flip the process
global ``tf.compat.v1.disable_control_flow_v2()`` for the duration of the build
and restore the previous state afterwards. That is not thread-safe: do not build
graphs concurrently from several threads. Resource vs. reference variables are
selected per graph by re-entering the root variable scope with
``use_resource=...`` (no global toggle).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from typing import Any, Iterable, Iterator, Mapping, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1

__all__ = [
    "BuiltGraph",
    "OPTIMIZERS",
    "STANDARD_KEYS",
    "all_optimizers",
    "mnist_cnn",
    "fused_bn_model",
    "ema_of_weights_model",
    "partitioned_model",
    "layers_bn_model",
    "tf_keras_bn_model",
    "wide_graph",
    "bert_classifier",
    "adafactor_transformer",
    "group_norm_cnn",
    "accumulating_cnn",
    "loss_scaled_model",
    "keras_application",
    "fused_bn_block",
    "group_norm",
    "bert_layer_norm",
    "AdamWeightDecayOptimizer",
    "LAMBOptimizer",
    "AdafactorOptimizer",
    "random_feed",
    "variable_map",
    "variable_op_types",
]

STANDARD_KEYS = (
    "all",
    "trainable",
    "slots",
    "non_slot",
    "bn_stats",
    "averages",
    "averaged",
    "global_step",
    "model",
    "local",
)


@dataclasses.dataclass(frozen=True)
class BuiltGraph:
    """A graph built by one of the builders below.

    graph:      the new ``tf.Graph``.
    tensors:    name -> ``tf.Tensor`` (``train_op``/``bn_update`` are
                ``tf.Operation``). Always ``x``; ``logits`` and/or ``output``;
                ``loss``; ``train_op`` when training; ``phase_train`` /
                ``labels`` / ``keep_prob`` where the graph has them.
    expected:   category -> variable op names, see the module docstring.
    optimizer:  the ``tf.compat.v1.train`` optimizer, or None.
    partitions: partitioned-variable full name -> part op names, in part order
                (e.g. ``{'embed/emb': ['embed/emb/part_0', ...]}``); slots of
                partitioned variables are partitioned too and are listed under
                their own full name.
    info:       plain facts a test may need to build feeds (``num_classes``,
                ``vocab_size``, ``batch_norm_updates``, ``cond_v2`` ...).
    """

    graph: tf.Graph
    tensors: Mapping[str, Any]
    expected: Mapping[str, list[str]]
    optimizer: Any = None
    partitions: Mapping[str, list[str]] = dataclasses.field(default_factory=dict)
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


# --------------------------------------------------------------------------
# helpers


@contextlib.contextmanager
def _control_flow(cond_v2: bool) -> Iterator[None]:
    """Temporarily select control flow v1/v2 for ``tf.compat.v1.cond``."""
    previous = v1.control_flow_v2_enabled()
    if previous == cond_v2:
        yield
        return
    (v1.enable_control_flow_v2 if cond_v2 else v1.disable_control_flow_v2)()
    try:
        yield
    finally:
        (v1.enable_control_flow_v2 if previous else v1.disable_control_flow_v2)()


@contextlib.contextmanager
def _new_graph(seed: int, resource: bool | None = True, cond_v2: bool | None = None):
    """Yield a fresh graph as default, with the random seed set and the root
    variable scope re-entered with ``use_resource=resource`` (None: TF default).
    """
    if cond_v2 is None:
        # Control flow v2 builds cond branches as functions; variables created in
        # a branch (ExponentialMovingAverage shadows) are then always resource
        # variables, so reference-variable graphs need control flow v1.
        cond_v2 = v1.control_flow_v2_enabled() if resource in (True, None) else False
    graph = tf.Graph()
    with _control_flow(cond_v2), graph.as_default():
        v1.set_random_seed(seed)
        with v1.variable_scope(v1.get_variable_scope(), use_resource=resource):
            yield graph


def _all_variables(graph: tf.Graph) -> list:
    out, seen = [], set()
    for v in graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES) + graph.get_collection(v1.GraphKeys.LOCAL_VARIABLES):
        name = v.op.name
        if name not in seen:
            seen.add(name)
            out.append(v)
    return out


def _ordered_names(graph: tf.Graph, variables: Iterable, position=None) -> list[str]:
    """Op names of ``variables`` (deduplicated), in collection order."""
    if position is None:
        position = _positions(graph)
    names = set()
    for v in variables:
        name = v.op.name
        if name not in position:
            raise AssertionError(f"variable {name!r} is not in the graph's variable collections")
        names.add(name)
    return sorted(names, key=position.__getitem__)


def _positions(graph: tf.Graph) -> dict[str, int]:
    return {v.op.name: i for i, v in enumerate(_all_variables(graph))}


def _slot_variables(opt, var_list) -> tuple[list, list]:
    """(slots followed by non-slot variables, non-slot variables) of ``opt``."""
    slots = []
    slot_names = opt.get_slot_names()
    for var in var_list:
        for slot_name in slot_names:
            slot = opt.get_slot(var, slot_name)
            if slot is not None:
                slots.append(slot)
    non_slot = list(opt._non_slot_variables())  # pylint: disable=protected-access
    return slots + non_slot, non_slot


def _expected(graph: tf.Graph, *, opt=None, var_list=None, global_step=None, **groups) -> dict:
    """Build the ``expected`` dict; every STANDARD_KEYS entry is present."""
    result: dict[str, list[str]] = {}
    position = _positions(graph)
    if opt is not None:
        if var_list is None:
            var_list = graph.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES)
        slots, non_slot = _slot_variables(opt, var_list)
        result["slots"] = _ordered_names(graph, slots, position)
        result["non_slot"] = _ordered_names(graph, non_slot, position)
    gs = [global_step] if global_step is not None else []
    result["global_step"] = _ordered_names(graph, gs, position)
    for key, variables in groups.items():
        result[key] = _ordered_names(graph, variables, position)
    result["all"] = _ordered_names(graph, _all_variables(graph), position)
    trainable = graph.get_collection(v1.GraphKeys.TRAINABLE_VARIABLES)
    result["trainable"] = _ordered_names(graph, trainable, position)
    local = graph.get_collection(v1.GraphKeys.LOCAL_VARIABLES)
    result["local"] = _ordered_names(graph, local, position)
    for key in STANDARD_KEYS:
        result.setdefault(key, [])
    excluded = set(result["slots"]) | set(result["global_step"])
    result["model"] = [n for n in result["all"] if n not in excluded]
    return result


def _partitions(graph: tf.Graph, *partitioned) -> dict[str, list[str]]:
    """Full name -> part names, from PartitionedVariable objects and from the
    save-slice info TF attaches to every part (this also catches the
    partitioned optimizer slots)."""
    out: dict[str, list[str]] = {}
    for pv in partitioned:
        out[pv.name] = [p.op.name for p in pv]
    grouped: dict[str, list[tuple[list[int], str]]] = {}
    for v in _all_variables(graph):
        info = getattr(v, "_save_slice_info", None)
        if info is not None:
            grouped.setdefault(info.full_name, []).append((list(info.var_offset), v.op.name))
    for full_name, parts in grouped.items():
        out.setdefault(full_name, [name for _, name in sorted(parts)])
    return out


OPTIMIZERS: tuple[str, ...] = (
    "adam",
    "momentum",
    "adagrad",
    "adagrad_da",
    "adadelta",
    "rmsprop",
    "rmsprop_centered",
    "ftrl",
    "proximal_adagrad",
    "sgd",
)


def all_optimizers() -> list[str]:
    """Optimizer keys accepted by :func:`mnist_cnn` that create slots (no 'sgd')."""
    return [name for name in OPTIMIZERS if name != "sgd"]


def _make_optimizer(name: str, global_step, learning_rate: float | None = None):
    train = v1.train

    def lr(default):
        return default if learning_rate is None else learning_rate

    factories = {
        "adam": lambda: train.AdamOptimizer(lr(1e-3)),
        "momentum": lambda: train.MomentumOptimizer(lr(0.01), momentum=0.9),
        "adagrad": lambda: train.AdagradOptimizer(lr(0.01)),
        "adagrad_da": lambda: train.AdagradDAOptimizer(lr(0.01), global_step=global_step),
        "adadelta": lambda: train.AdadeltaOptimizer(lr(1.0)),
        "rmsprop": lambda: train.RMSPropOptimizer(lr(1e-3)),
        "rmsprop_centered": lambda: train.RMSPropOptimizer(lr(1e-3), centered=True),
        "ftrl": lambda: train.FtrlOptimizer(lr(0.01)),
        "proximal_adagrad": lambda: train.ProximalAdagradOptimizer(lr(0.01)),
        "sgd": lambda: train.GradientDescentOptimizer(lr(0.01)),
    }
    if name not in factories:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {sorted(factories)}")
    return factories[name]()


def _sparse_xent(labels, logits):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss")


def _dense(inputs, units: int, scope: str, stddev: float = 0.1):
    with v1.variable_scope(scope):
        w = v1.get_variable(
            "w",
            [int(inputs.shape[-1]), units],
            initializer=v1.truncated_normal_initializer(stddev=stddev),
        )
        b = v1.get_variable("b", [units], initializer=v1.constant_initializer(0.1))
    return tf.matmul(inputs, w) + b, (w, b)


def _flatten(t):
    return tf.reshape(t, [-1, int(np.prod(t.shape[1:]))])


def variable_map(graph: tf.Graph) -> dict[str, Any]:
    """Variable op name -> Variable object (global + local collections);
    ``session.run(variable_map(g)[name])`` reads the value."""
    return {v.op.name: v for v in _all_variables(graph)}


def variable_op_types(graph: tf.Graph) -> dict[str, str]:
    """Variable op name -> op type, for every op that is a variable
    (``VariableV2``/``VarHandleOp``), including any not in a collection."""
    return {op.name: op.type for op in graph.get_operations() if op.type in ("VariableV2", "VarHandleOp", "Variable")}


# --------------------------------------------------------------------------
# 1. classic TF1 MNIST CNN with hand-written batch norm


def _handwritten_bn(x, n_out: int, phase_train, updates_in_cond: bool):
    """The classic TF1 batch norm (beta/gamma Variables + EMA of batch moments
    applied inside ``tf.compat.v1.cond``). Returns (normed, [mean_avg, var_avg],
    update_op_or_None)."""
    with v1.variable_scope("bn"):
        beta = v1.Variable(tf.constant(0.0, shape=[n_out]), name="beta", trainable=True)
        gamma = v1.Variable(tf.constant(1.0, shape=[n_out]), name="gamma", trainable=True)
        batch_mean, batch_var = tf.nn.moments(x, [0, 1, 2], name="moments")
        ema = v1.train.ExponentialMovingAverage(decay=0.5)
        update_op = None
        if updates_in_cond:

            def mean_var_with_update():
                ema_apply_op = ema.apply([batch_mean, batch_var])
                with tf.control_dependencies([ema_apply_op]):
                    return tf.identity(batch_mean), tf.identity(batch_var)

        else:
            # Same variables, but the update is a separate op in UPDATE_OPS that
            # the train op does NOT run.
            update_op = ema.apply([batch_mean, batch_var])
            v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, update_op)

            def mean_var_with_update():
                return tf.identity(batch_mean), tf.identity(batch_var)

        mean, var = v1.cond(
            phase_train,
            mean_var_with_update,
            lambda: (ema.average(batch_mean), ema.average(batch_var)),
        )
        normed = tf.nn.batch_normalization(x, mean, var, beta, gamma, 1e-3)
    return normed, [ema.average(batch_mean), ema.average(batch_var)], update_op


def mnist_cnn(
    *,
    optimizer: str = "adam",
    resource: bool = True,
    batch_norm_updates: bool = True,
    input_hw: int = 28,
    channels: Sequence[int] = (32, 64),
    fc_units: int = 1024,
    num_classes: int = 10,
    learning_rate: float | None = None,
    cond_v2: bool | None = None,
    seed: int = 0,
) -> BuiltGraph:
    """The classic TF1 MNIST CNN: conv_k (w, b, hand-written bn, relu, 2x2 max
    pool) for each entry of ``channels``, ``fc`` (relu + dropout), ``out``.

    ``resource=False`` builds reference variables only (``VariableV2``); this
    needs control flow v1, which is then used for the build (``cond_v2=None``).
    ``cond_v2`` forces control flow v2 (``If``) or v1 (``Switch``/``Merge``);
    ``resource=False, cond_v2=True`` yields resource EMA shadows in an otherwise
    reference-variable graph.
    ``batch_norm_updates=True``: EMA updates of the batch moments run inside the
    training branch of the cond (classic). False: the same EMA variables exist
    but their update op is only added to UPDATE_OPS and ``tensors['bn_update']``,
    not run by ``train_op``.

    TF facts this graph exhibits: the EMA shadows are named after the moment
    tensors inside the variable scope, so the scope appears twice
    (``conv_1/bn/conv_1/bn/moments/Squeeze/ExponentialMovingAverage`` = mean,
    ``.../Squeeze_1/...`` = variance). With control flow v2 they are created
    while the ``If`` branch is traced but lifted into the outer graph (and
    collections); their ``AssignSubVariableOp`` updates live only inside the
    branch function (``graph.as_graph_def().library``), not in
    ``graph.get_operations()``. With v1 they are ordinary ``AssignSub`` ops
    under ``conv_k/bn/cond/``.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {OPTIMIZERS}")
    with _new_graph(seed, resource, cond_v2) as graph:
        used_cond_v2 = v1.control_flow_v2_enabled()
        x = v1.placeholder(tf.float32, [None, input_hw * input_hw], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        phase_train = v1.placeholder(tf.bool, [], name="phase_train")
        keep_prob = v1.placeholder_with_default(1.0, [], name="keep_prob")
        h = tf.reshape(x, [-1, input_hw, input_hw, 1])
        bn_stats, bn_updates = [], []
        for i, out_ch in enumerate(channels, start=1):
            with v1.variable_scope(f"conv_{i}"):
                w = v1.get_variable(
                    "w",
                    [5, 5, int(h.shape[-1]), out_ch],
                    initializer=v1.truncated_normal_initializer(stddev=0.1),
                )
                b = v1.get_variable("b", [out_ch], initializer=v1.constant_initializer(0.1))
                conv = tf.nn.conv2d(h, w, strides=[1, 1, 1, 1], padding="SAME") + b
                normed, stats, update = _handwritten_bn(conv, out_ch, phase_train, batch_norm_updates)
                bn_stats.extend(stats)
                if update is not None:
                    bn_updates.append(update)
                h = tf.nn.max_pool2d(tf.nn.relu(normed), ksize=2, strides=2, padding="SAME")
        fc, _ = _dense(_flatten(h), fc_units, "fc")
        fc = tf.nn.dropout(tf.nn.relu(fc), rate=1.0 - keep_prob)
        logits, _ = _dense(fc, num_classes, "out")
        logits = tf.identity(logits, name="logits")
        loss = _sparse_xent(labels, logits)
        with v1.variable_scope("opt"):
            global_step = v1.train.get_or_create_global_step()
            opt = _make_optimizer(optimizer, global_step, learning_rate)
            train_op = opt.minimize(loss, global_step=global_step)
        tensors = {
            "x": x,
            "labels": labels,
            "phase_train": phase_train,
            "keep_prob": keep_prob,
            "logits": logits,
            "output": tf.nn.softmax(logits, name="output"),
            "loss": loss,
            "train_op": train_op,
            "global_step": global_step,
        }
        if bn_updates:
            tensors["bn_update"] = tf.group(*bn_updates, name="bn_update")
        expected = _expected(graph, opt=opt, global_step=global_step, bn_stats=bn_stats)
    return BuiltGraph(
        graph,
        tensors,
        expected,
        opt,
        info={
            "num_classes": num_classes,
            "resource": resource,
            "cond_v2": used_cond_v2,
            "batch_norm_updates": batch_norm_updates,
        },
    )


# --------------------------------------------------------------------------
# 2. conv + fused batch norm with hand-made moving statistics


def fused_bn_model(
    *,
    training: bool = True,
    resource: bool = True,
    wire_updates: bool = True,
    input_hw: int = 8,
    channels: int = 4,
    num_classes: int = 10,
    decay: float = 0.9,
    seed: int = 0,
) -> BuiltGraph:
    """conv (scope ``block``) -> ``tf.compat.v1.nn.fused_batch_norm`` with
    ``block/bn/{scale,offset,moving_mean,moving_variance}`` -> relu -> ``head``.

    ``tensors['output']`` always uses ``is_training=False`` (reads the moving
    statistics). With ``training=True`` ``tensors['logits']`` comes from the
    ``is_training=True`` path, whose moving-average updates go to UPDATE_OPS
    (and ``tensors['bn_update']``); ``train_op`` (Momentum under ``opt``)
    depends on them only if ``wire_updates``.
    """
    from tensorflow.python.training import moving_averages  # no public v1 alias

    with _new_graph(seed, resource) as graph:
        x = v1.placeholder(tf.float32, [None, input_hw, input_hw, 1], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        with v1.variable_scope("block"):
            w = v1.get_variable("w", [3, 3, 1, channels], initializer=v1.truncated_normal_initializer(stddev=0.1))
            conv = tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")
            with v1.variable_scope("bn") as bn_scope:
                scale = v1.get_variable("scale", [channels], initializer=v1.ones_initializer())
                offset = v1.get_variable("offset", [channels], initializer=v1.zeros_initializer())
                moving_mean = v1.get_variable(
                    "moving_mean", [channels], initializer=v1.zeros_initializer(), trainable=False
                )
                moving_variance = v1.get_variable(
                    "moving_variance", [channels], initializer=v1.ones_initializer(), trainable=False
                )

        def head(features):
            with v1.variable_scope("head", reuse=v1.AUTO_REUSE):
                out, _ = _dense(_flatten(tf.nn.relu(features)), num_classes, "dense")
            return out

        with v1.name_scope(bn_scope.original_name_scope):
            y_inf, _, _ = v1.nn.fused_batch_norm(
                conv,
                scale,
                offset,
                mean=moving_mean,
                variance=moving_variance,
                epsilon=1e-3,
                is_training=False,
                name="FusedBatchNormInference",
            )
        output = tf.identity(head(y_inf), name="output")
        tensors: dict[str, Any] = {"x": x, "labels": labels, "output": output}
        opt = global_step = None
        if training:
            with v1.name_scope(bn_scope.original_name_scope):
                y, batch_mean, batch_var = v1.nn.fused_batch_norm(
                    conv, scale, offset, epsilon=1e-3, is_training=True, name="FusedBatchNorm"
                )
                updates = [
                    moving_averages.assign_moving_average(moving_mean, batch_mean, decay, zero_debias=False),
                    moving_averages.assign_moving_average(moving_variance, batch_var, decay, zero_debias=False),
                ]
            for u in updates:
                v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, u)
            logits = tf.identity(head(y), name="logits")
            loss = _sparse_xent(labels, logits)
            with v1.variable_scope("opt"):
                global_step = v1.train.get_or_create_global_step()
                opt = v1.train.MomentumOptimizer(0.01, momentum=0.9)
                if wire_updates:
                    with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
                        train_op = opt.minimize(loss, global_step=global_step)
                else:
                    train_op = opt.minimize(loss, global_step=global_step)
            tensors.update(
                logits=logits,
                loss=loss,
                train_op=train_op,
                global_step=global_step,
                bn_update=tf.group(*updates, name="bn_update"),
            )
        else:
            tensors.update(logits=output, loss=_sparse_xent(labels, output))
        expected = _expected(graph, opt=opt, global_step=global_step, bn_stats=[moving_mean, moving_variance])
    return BuiltGraph(
        graph,
        tensors,
        expected,
        opt,
        info={
            "num_classes": num_classes,
            "resource": resource,
            "training": training,
            "wire_updates": wire_updates,
        },
    )


# --------------------------------------------------------------------------
# 3. EMA of (some) weights


def ema_of_weights_model(
    *,
    resource: bool = True,
    optimizer: str = "momentum",
    input_dim: int = 8,
    hidden: int = 16,
    num_classes: int = 3,
    decay: float = 0.99,
    seed: int = 0,
) -> BuiltGraph:
    """2-layer MLP (``layer1``, ``layer2``); an ExponentialMovingAverage(decay)
    of layer1/w, layer1/b and layer2/w (NOT layer2/b); ``train_op`` = the
    optimizer step followed by the EMA update (the documented
    ``with control_dependencies([opt_op]): ema.apply(...)``, grouped with the
    step).
    ``tensors['output_averaged']`` is the forward pass with the shadows.
    """
    with _new_graph(seed, resource) as graph:
        x = v1.placeholder(tf.float32, [None, input_dim], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        pre1, (w1, b1) = _dense(x, hidden, "layer1")
        logits, (w2, b2) = _dense(tf.nn.relu(pre1), num_classes, "layer2")
        logits = tf.identity(logits, name="logits")
        loss = _sparse_xent(labels, logits)
        with v1.variable_scope("opt"):
            global_step = v1.train.get_or_create_global_step()
            opt = _make_optimizer(optimizer, global_step)
            opt_op = opt.minimize(loss, global_step=global_step)
        ema = v1.train.ExponentialMovingAverage(decay)
        averaged = [w1, b1, w2]
        # ema.apply must be *built* under the control dependency: grouping an
        # ema op built outside it (tf.group(ema_op) under
        # control_dependencies([opt_op])) only orders the group's NoOp, so the
        # EMA may read the weights before the step (nondeterministic).
        with tf.control_dependencies([opt_op]):
            ema_op = ema.apply(averaged)
        train_op = tf.group(opt_op, ema_op, name="train_op")
        h_avg = tf.nn.relu(tf.matmul(x, ema.average(w1)) + ema.average(b1))
        output_averaged = tf.identity(tf.matmul(h_avg, ema.average(w2)) + b2, name="output_averaged")
        tensors = {
            "x": x,
            "labels": labels,
            "logits": logits,
            "output": tf.nn.softmax(logits, name="output"),
            "output_averaged": output_averaged,
            "loss": loss,
            "train_op": train_op,
            "global_step": global_step,
        }
        expected = _expected(
            graph,
            opt=opt,
            global_step=global_step,
            averages=[ema.average(v) for v in averaged],
            averaged=averaged,
        )
    return BuiltGraph(graph, tensors, expected, opt, info={"num_classes": num_classes, "resource": resource})


# --------------------------------------------------------------------------
# 4. partitioned embedding


def partitioned_model(
    *,
    num_shards: int = 3,
    resource: bool = True,
    vocab_size: int = 30,
    dim: int = 4,
    ids_per_example: int = 3,
    num_classes: int = 5,
    opt_scope: str | None = "opt",
    seed: int = 0,
) -> BuiltGraph:
    """``embed/emb`` [vocab_size, dim] split by
    ``fixed_size_partitioner(num_shards)``, mean-pooled lookup of
    ``x`` (int64 [None, ids_per_example]), ``dense`` layer, Adagrad under ``opt``
    (sparse updates on the embedding parts).

    ``opt_scope=None`` builds the optimizer at the top level instead of under
    ``variable_scope('opt')``. That matters for the slots' save-slice info:
    TF derives the slot's full name by cutting ``len(primary.op.name) + 1``
    characters off the slot name, so under a scope the slots of
    ``embed/emb/part_0`` get the mangled full name
    ``embed/emb/t_0/Adagrad`` (one per part) instead of
    ``embed/emb/Adagrad`` (shared by all parts). ``partitions`` reports what
    TF recorded.
    """
    with _new_graph(seed, resource) as graph:
        x = v1.placeholder(tf.int64, [None, ids_per_example], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        with v1.variable_scope("embed"):
            emb = v1.get_variable(
                "emb",
                [vocab_size, dim],
                initializer=v1.random_normal_initializer(stddev=0.1),
                partitioner=v1.fixed_size_partitioner(num_shards),
            )
        looked_up = v1.nn.embedding_lookup(emb, x, partition_strategy="div")
        pooled = tf.reduce_mean(looked_up, axis=1)
        logits, _ = _dense(pooled, num_classes, "dense")
        logits = tf.identity(logits, name="logits")
        loss = _sparse_xent(labels, logits)
        with v1.variable_scope(opt_scope) if opt_scope else contextlib.nullcontext():
            global_step = v1.train.get_or_create_global_step()
            opt = v1.train.AdagradOptimizer(0.1)
            train_op = opt.minimize(loss, global_step=global_step)
        tensors = {
            "x": x,
            "labels": labels,
            "logits": logits,
            "output": tf.nn.softmax(logits, name="output"),
            "loss": loss,
            "train_op": train_op,
            "global_step": global_step,
        }
        expected = _expected(graph, opt=opt, global_step=global_step)
        partitions = _partitions(graph, emb)
    return BuiltGraph(
        graph,
        tensors,
        expected,
        opt,
        partitions=partitions,
        info={
            "num_classes": num_classes,
            "vocab_size": vocab_size,
            "num_shards": num_shards,
            "resource": resource,
        },
    )


# --------------------------------------------------------------------------
# 5./6. legacy Keras (TF_USE_LEGACY_KERAS=1 before TensorFlow is imported)


def _require_legacy_keras(builder: str) -> None:
    if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise RuntimeError(
            f"{builder}() needs legacy Keras (tf_keras): set the environment variable "
            "TF_USE_LEGACY_KERAS=1 before TensorFlow is imported (e.g. run it in a "
            "subprocess with env={**os.environ, 'TF_USE_LEGACY_KERAS': '1'})."
        )


def layers_bn_model(
    *,
    fused: bool | None = None,
    input_hw: int = 8,
    filters: int = 4,
    num_classes: int = 10,
    seed: int = 0,
) -> BuiltGraph:
    """``tf.compat.v1.layers`` conv2d -> batch_normalization(training=phase_train)
    -> relu -> flatten -> dense; Adam under ``opt`` with UPDATE_OPS wired.
    Needs TF_USE_LEGACY_KERAS=1 (RuntimeError otherwise)."""
    _require_legacy_keras("layers_bn_model")
    with _new_graph(seed, None) as graph, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is deprecated", category=UserWarning)
        try:
            layers = v1.layers
            conv2d = layers.conv2d
        except AttributeError as err:  # TF imported before the variable was set
            raise RuntimeError(
                "tf.compat.v1.layers is unavailable: TF_USE_LEGACY_KERAS=1 must be set before TensorFlow is imported"
            ) from err
        x = v1.placeholder(tf.float32, [None, input_hw, input_hw, 1], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        phase_train = v1.placeholder(tf.bool, [], name="phase_train")
        conv = conv2d(x, filters, 3, padding="same", name="conv")
        global_before = {v.op.name for v in v1.global_variables()}
        bn = layers.batch_normalization(conv, training=phase_train, fused=fused, name="bn")
        # The functional API does not return the layer: the moving statistics are
        # the non-trainable global variables this call created.
        trainable_after = {v.op.name for v in v1.trainable_variables()}
        bn_stats = [
            v for v in v1.global_variables() if v.op.name not in global_before and v.op.name not in trainable_after
        ]
        logits = layers.dense(layers.flatten(tf.nn.relu(bn)), num_classes, name="out")
        logits = tf.identity(logits, name="logits")
        loss = _sparse_xent(labels, logits)
        with v1.variable_scope("opt"):
            global_step = v1.train.get_or_create_global_step()
            opt = v1.train.AdamOptimizer(1e-3)
            with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
                train_op = opt.minimize(loss, global_step=global_step)
        tensors = {
            "x": x,
            "labels": labels,
            "phase_train": phase_train,
            "logits": logits,
            "output": tf.nn.softmax(logits, name="output"),
            "loss": loss,
            "train_op": train_op,
            "global_step": global_step,
        }
        expected = _expected(graph, opt=opt, global_step=global_step, bn_stats=bn_stats)
    return BuiltGraph(graph, tensors, expected, opt, info={"num_classes": num_classes, "fused": fused})


def tf_keras_bn_model(
    *,
    input_hw: int = 8,
    filters: int = 4,
    num_classes: int = 10,
    seed: int = 0,
) -> BuiltGraph:
    """A ``tf_keras.Sequential`` (Conv2D, BatchNormalization, Flatten, Dense)
    called on a placeholder in graph mode with ``training=phase_train``;
    tf.compat.v1 Adam under ``opt`` with ``model.updates`` + UPDATE_OPS wired.
    Needs TF_USE_LEGACY_KERAS=1 (RuntimeError otherwise)."""
    _require_legacy_keras("tf_keras_bn_model")
    import tf_keras

    with _new_graph(seed, None) as graph, warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        x = v1.placeholder(tf.float32, [None, input_hw, input_hw, 1], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        phase_train = v1.placeholder(tf.bool, [], name="phase_train")
        bn_layer = tf_keras.layers.BatchNormalization(name="bn")
        model = tf_keras.Sequential(
            [
                tf_keras.layers.Conv2D(filters, 3, padding="same", name="conv"),
                bn_layer,
                tf_keras.layers.Flatten(name="flatten"),
                tf_keras.layers.Dense(num_classes, name="dense"),
            ],
            name="model",
        )
        logits = tf.identity(model(x, training=phase_train), name="logits")
        loss = _sparse_xent(labels, logits)
        updates = list(model.updates) + [
            u for u in v1.get_collection(v1.GraphKeys.UPDATE_OPS) if u not in model.updates
        ]
        with v1.variable_scope("opt"):
            global_step = v1.train.get_or_create_global_step()
            opt = v1.train.AdamOptimizer(1e-3)
            with tf.control_dependencies(updates):
                train_op = opt.minimize(loss, global_step=global_step, var_list=model.trainable_variables)
        tensors = {
            "x": x,
            "labels": labels,
            "phase_train": phase_train,
            "logits": logits,
            "output": tf.nn.softmax(logits, name="output"),
            "loss": loss,
            "train_op": train_op,
            "global_step": global_step,
        }
        expected = _expected(
            graph,
            opt=opt,
            var_list=model.trainable_variables,
            global_step=global_step,
            bn_stats=[bn_layer.moving_mean, bn_layer.moving_variance],
            keras_weights=model.weights,
        )
    return BuiltGraph(
        graph,
        tensors,
        expected,
        opt,
        info={"num_classes": num_classes, "num_updates": len(updates)},
    )


# --------------------------------------------------------------------------
# 8. many small variables


def _variable_template(name: str, init_name: str) -> list:
    """NodeDefs TensorFlow itself creates for ``tf.compat.v1.Variable(<init>,
    name=name)`` (resource variable, tensor initial value), built once in a
    scratch graph so the cloned nodes follow this TF version's layout."""
    scratch = tf.Graph()
    with scratch.as_default():
        init = tf.constant([0.0, 1.0], name=init_name)
        v1.Variable(init, name=name, use_resource=True)
    nodes = []
    for node in scratch.as_graph_def().node:
        if node.op == "VarIsInitializedOp" or not (node.name == name or node.name.startswith(name + "/")):
            # VarIsInitializedOp is optional: Variable.is_initialized() makes one.
            continue
        if "_class" not in node.attr:
            # Colocate with the handle (as TF does for reference variables).
            # Also makes import much faster: importing looks up '_class' on
            # every op, and a missing attr costs a raised-and-caught error.
            node.attr["_class"].list.s.append(b"loc:@" + name.encode())
        nodes.append(node)
    return nodes


def _clone_variable_nodes(template: list, tmpl: str, new: str) -> list:
    tmpl_b, new_b = tmpl.encode(), new.encode()

    def rename(s: str) -> str:
        ctrl = s.startswith("^")
        body = s[1:] if ctrl else s
        if body == tmpl or body.startswith(tmpl + "/") or body.startswith(tmpl + ":"):
            body = new + body[len(tmpl) :]
        return ("^" if ctrl else "") + body

    def rename_b(s: bytes) -> bytes:
        if s == tmpl_b or s.startswith(tmpl_b + b"/"):
            return new_b + s[len(tmpl_b) :]
        if s == b"loc:@" + tmpl_b:
            return b"loc:@" + new_b
        return s

    out = []
    for node in template:
        clone = v1.NodeDef()
        clone.CopyFrom(node)
        clone.name = rename(node.name)
        clone.input[:] = [rename(i) for i in node.input]
        for attr in clone.attr.values():
            if attr.s:
                attr.s = rename_b(attr.s)
            if attr.list.s:
                attr.list.s[:] = [rename_b(x) for x in attr.list.s]
        out.append(clone)
    return out


def wide_graph(
    *,
    num_variables: int = 20000,
    scopes: Sequence[str] = ("conv_1", "conv_10", "conv_2", "opt"),
    subscopes: Sequence[str] = ("", "bn", "bn/moments"),
    non_trainable_every: int = 4,
    seed: int = 0,
) -> BuiltGraph:
    """``num_variables`` resource variables of shape [2] (one shared constant
    initial value) spread evenly over ``scopes`` x ``subscopes``
    (``conv_1/v00000``, ``conv_1/bn/v00001``, ...); every
    ``non_trainable_every``-th variable is trainable=False.

    Built fast: creating 20,000 variables op by op through the Python API takes
    minutes on a slow machine (~3 ms per variable), so the nodes TF creates for
    one variable are cloned into a GraphDef, imported with
    ``tf.graph_util.import_graph_def`` and wrapped as Variable objects from
    ``VariableDef`` protos (what ``import_meta_graph`` does), then added to the
    GLOBAL_VARIABLES / TRAINABLE_VARIABLES collections. ``tensors['init']``
    is one NoOp depending on every initializer (cheaper to build than
    ``global_variables_initializer()``, which also works).

    Extra expected keys: ``non_trainable`` and ``scope:<scope>`` per scope
    (variables whose name starts with ``<scope>/``: ``conv_1`` excludes
    ``conv_10``).
    """
    from tensorflow.core.framework import variable_pb2  # VariableDef

    tmpl, init_name = "wide_template_var", "wide_init"
    template = _variable_template(tmpl, init_name)
    groups = [(s, sub) for s in scopes for sub in subscopes]
    per_group, extra = divmod(num_variables, len(groups))
    names, trainable_flags = [], []
    for g, (scope, sub) in enumerate(groups):
        prefix = f"{scope}/{sub}" if sub else scope
        for _ in range(per_group + (1 if g < extra else 0)):
            index = len(names)
            names.append(f"{prefix}/v{index:05d}")
            trainable_flags.append(not (non_trainable_every and index % non_trainable_every == 0))

    graph_def = v1.GraphDef()
    with tf.Graph().as_default() as scratch:
        tf.constant([0.0, 1.0], name=init_name)
    graph_def.node.extend(scratch.as_graph_def().node)
    by_suffix = {}
    for node in template:
        by_suffix[node.name[len(tmpl) :]] = node.op
    initializer_suffix = next(k for k, op in by_suffix.items() if op == "AssignVariableOp")
    snapshot_suffix = next(k for k, op in by_suffix.items() if op == "ReadVariableOp")
    for name in names:
        graph_def.node.extend(_clone_variable_nodes(template, tmpl, name))
    init_all = graph_def.node.add()
    init_all.name, init_all.op = "wide_init_all", "NoOp"
    init_all.input.extend("^" + name + initializer_suffix for name in names)

    with _new_graph(seed, True) as graph:
        tf.graph_util.import_graph_def(graph_def, name="")
        variables = []
        for name, trainable in zip(names, trainable_flags):
            vdef = variable_pb2.VariableDef(
                variable_name=name + ":0",
                initial_value_name=init_name + ":0",
                initializer_name=name + initializer_suffix,
                snapshot_name=name + snapshot_suffix + ":0",
                trainable=trainable,
                is_resource=True,
            )
            var = v1.Variable(variable_def=vdef)
            collections = [v1.GraphKeys.GLOBAL_VARIABLES]
            if trainable:
                collections.append(v1.GraphKeys.TRAINABLE_VARIABLES)
            graph.add_to_collections(collections, var)
            variables.append(var)
        x = v1.placeholder(tf.float32, [2], name="x")
        output = tf.identity(x * variables[0] + variables[-1], name="output")
        loss = tf.reduce_sum(output, name="loss")
        extra_groups = {f"scope:{s}": [v for v in variables if v.op.name.startswith(s + "/")] for s in scopes}
        expected = _expected(
            graph,
            non_trainable=[v for v, t in zip(variables, trainable_flags) if not t],
            **extra_groups,
        )
        init_op = graph.get_operation_by_name("wide_init_all")
    return BuiltGraph(
        graph,
        {"x": x, "output": output, "loss": loss, "init": init_op},
        expected,
        None,
        info={"num_variables": num_variables},
    )


# --------------------------------------------------------------------------
# 9. third-party training code, written the way its authors wrote it
#
# Hand-written optimizers that keep their state in tf.get_variable(trainable=False)
# and update it with plain assign ops (google-research/bert's AdamWeightDecayOptimizer,
# LAMB, tensor2tensor's Adafactor), NVIDIA-style gradient accumulation, layer and group
# norm (no statistics), mixed-precision loss scaling. The expected sets are read back
# from what the code created (the variables a step made, ``opt.get_slot``), not typed.


def _created_during(graph: tf.Graph, before: set) -> list:
    return [v for v in _all_variables(graph) if v.op.name not in before]


def _variable_names(graph: tf.Graph) -> set:
    return {v.op.name for v in _all_variables(graph)}


def _bert_dense(x, units, name, activation=None):
    with v1.variable_scope(name):
        kernel = v1.get_variable("kernel", [int(x.shape[-1]), units], initializer=v1.truncated_normal_initializer(0.02))
        bias = v1.get_variable("bias", [units], initializer=v1.zeros_initializer())
    out = tf.matmul(x, kernel) + bias
    return activation(out) if activation is not None else out


def bert_layer_norm(input_tensor, name=None):
    """``tf.contrib.layers.layer_norm(begin_norm_axis=-1, begin_params_axis=-1)``, as BERT calls it."""
    with v1.variable_scope(name, default_name="LayerNorm"):
        depth = int(input_tensor.shape[-1])
        beta = v1.get_variable("beta", [depth], initializer=v1.zeros_initializer())
        gamma = v1.get_variable("gamma", [depth], initializer=v1.ones_initializer())
        mean, variance = tf.nn.moments(input_tensor, [-1], keepdims=True)
        return tf.nn.batch_normalization(input_tensor, mean, variance, beta, gamma, variance_epsilon=1e-12)


def _gelu(x):
    return 0.5 * x * (1.0 + tf.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * tf.pow(x, 3))))


def _bert_model(input_ids, *, vocab_size, hidden, num_layers, heads, max_position):
    """BERT's modeling.py in small: embeddings, post-LN transformer layers, pooler."""
    seq_length = int(input_ids.shape[1])
    with v1.variable_scope("bert"):
        with v1.variable_scope("embeddings"):
            table = v1.get_variable("word_embeddings", [vocab_size, hidden], initializer=v1.truncated_normal_initializer(0.02))
            output = tf.gather(table, input_ids)
            token_type_table = v1.get_variable("token_type_embeddings", [2, hidden],
                                               initializer=v1.truncated_normal_initializer(0.02))
            output += tf.gather(token_type_table, tf.zeros_like(input_ids))
            full_position = v1.get_variable("position_embeddings", [max_position, hidden],
                                            initializer=v1.truncated_normal_initializer(0.02))
            output += tf.expand_dims(tf.slice(full_position, [0, 0], [seq_length, -1]), 0)
            output = bert_layer_norm(output, name="LayerNorm")
        with v1.variable_scope("encoder"):
            prev = tf.reshape(output, [-1, hidden])
            size = hidden // heads
            for index in range(num_layers):
                with v1.variable_scope(f"layer_{index}"):
                    with v1.variable_scope("attention"):
                        with v1.variable_scope("self"):
                            def split(t):
                                return tf.transpose(tf.reshape(t, [-1, seq_length, heads, size]), [0, 2, 1, 3])

                            query = split(_bert_dense(prev, hidden, "query"))
                            key = split(_bert_dense(prev, hidden, "key"))
                            value = split(_bert_dense(prev, hidden, "value"))
                            scores = tf.matmul(query, key, transpose_b=True) * (1.0 / np.sqrt(size))
                            context = tf.matmul(tf.nn.softmax(scores), value)
                            context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, hidden])
                        with v1.variable_scope("output"):
                            attention = bert_layer_norm(_bert_dense(context, hidden, "dense") + prev)
                    with v1.variable_scope("intermediate"):
                        intermediate = _bert_dense(attention, 2 * hidden, "dense", activation=_gelu)
                    with v1.variable_scope("output"):
                        prev = bert_layer_norm(_bert_dense(intermediate, hidden, "dense") + attention)
            sequence_output = tf.reshape(prev, [-1, seq_length, hidden])
        with v1.variable_scope("pooler"):
            first_token = tf.squeeze(sequence_output[:, 0:1, :], axis=1)
            pooled = _bert_dense(first_token, hidden, "dense", activation=tf.tanh)
    return sequence_output, pooled, table


class AdamWeightDecayOptimizer(v1.train.Optimizer):
    """google-research/bert optimization.py: Adam with decoupled weight decay, its moments in
    tf.get_variable(trainable=False), updated with plain assigns."""

    def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 exclude_from_weight_decay=None, name="AdamWeightDecayOptimizer"):
        super().__init__(False, name)
        self.learning_rate = learning_rate
        self.weight_decay_rate = weight_decay_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        assignments = []
        for grad, param in grads_and_vars:
            if grad is None or param is None:
                continue
            param_name = param.op.name
            m = v1.get_variable(name=param_name + "/adam_m", shape=param.shape.as_list(), dtype=tf.float32,
                                trainable=False, initializer=v1.zeros_initializer())
            v = v1.get_variable(name=param_name + "/adam_v", shape=param.shape.as_list(), dtype=tf.float32,
                                trainable=False, initializer=v1.zeros_initializer())
            next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
            next_v = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
            update = next_m / (tf.sqrt(next_v) + self.epsilon)
            if self._do_use_weight_decay(param_name):
                update += self.weight_decay_rate * param
            next_param = param - self.learning_rate * update
            assignments.extend([param.assign(next_param), m.assign(next_m), v.assign(next_v)])
        return tf.group(*assignments, name=name)

    def _do_use_weight_decay(self, param_name):
        if not self.weight_decay_rate:
            return False
        return not any(r in param_name for r in self.exclude_from_weight_decay or ())


class LAMBOptimizer(v1.train.Optimizer):
    """LAMB (You et al.) as the TF1 BERT forks wrote it: Adam moments with bias correction
    from the global step, then a layer-wise trust ratio ||w|| / ||update||."""

    def __init__(self, learning_rate, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 exclude_from_weight_decay=("LayerNorm", "layer_norm", "bias"), name="LAMBOptimizer"):
        super().__init__(False, name)
        self.learning_rate, self.weight_decay_rate = learning_rate, weight_decay_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        steps = tf.cast(v1.train.get_or_create_global_step(), tf.float32) + 1.0
        assignments = []
        for grad, param in grads_and_vars:
            param_name = param.op.name
            m = v1.get_variable(name=param_name + "/lamb_m", shape=param.shape.as_list(), dtype=tf.float32,
                                trainable=False, initializer=v1.zeros_initializer())
            v = v1.get_variable(name=param_name + "/lamb_v", shape=param.shape.as_list(), dtype=tf.float32,
                                trainable=False, initializer=v1.zeros_initializer())
            next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
            next_v = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
            m_hat = next_m / (1.0 - tf.pow(self.beta_1, steps))
            v_hat = next_v / (1.0 - tf.pow(self.beta_2, steps))
            update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
            if not any(r in param_name for r in self.exclude_from_weight_decay):
                update += self.weight_decay_rate * param
            w_norm = tf.norm(param, ord=2)
            g_norm = tf.norm(update, ord=2)
            ratio = tf.where(w_norm > 0, tf.where(g_norm > 0, w_norm / g_norm, 1.0), 1.0)
            next_param = param - ratio * self.learning_rate * update
            assignments.extend([param.assign(next_param), m.assign(next_m), v.assign(next_v)])
        return tf.group(*assignments, name=name)


class AdafactorOptimizer(v1.train.Optimizer):
    """tensor2tensor's Adafactor (Shazeer & Stern 2018) in small: no first moment; a matrix
    keeps a row accumulator ``vr`` [rows] and a column accumulator ``vc`` [columns] instead of
    its second moment, a vector keeps ``v``; relative step size, update clipping."""

    def __init__(self, decay_rate=0.8, epsilon1=1e-30, epsilon2=1e-3, clipping_threshold=1.0, name="Adafactor"):
        super().__init__(False, name)
        self._decay_exponent, self._epsilon1, self._epsilon2 = decay_rate, epsilon1, epsilon2
        self._clipping_threshold = clipping_threshold

    def _factored(self, shape):
        return len(shape) >= 2

    def _create_slots(self, var_list):
        for var in var_list:
            shape = var.get_shape().as_list()
            if self._factored(shape):
                self._get_or_make_slot(var, tf.zeros(shape[:-1]), "vr", self._name)
                self._get_or_make_slot(var, tf.zeros(shape[:-2] + shape[-1:]), "vc", self._name)
            else:
                self._get_or_make_slot(var, tf.zeros(shape), "v", self._name)

    def _apply_dense(self, grad, var):
        step = tf.cast(v1.train.get_or_create_global_step(), tf.float32) + 1.0
        decay_rate = 1.0 - tf.pow(step, -self._decay_exponent)
        learning_rate = tf.minimum(0.01, tf.math.rsqrt(step))
        update_scale = learning_rate * tf.maximum(tf.sqrt(tf.reduce_mean(tf.square(var))), self._epsilon2)
        grad_squared = tf.square(grad) + self._epsilon1
        updates = []
        if self._factored(var.get_shape().as_list()):
            vr, vc = self.get_slot(var, "vr"), self.get_slot(var, "vc")
            new_vr = decay_rate * vr + (1.0 - decay_rate) * tf.reduce_mean(grad_squared, -1)
            new_vc = decay_rate * vc + (1.0 - decay_rate) * tf.reduce_mean(grad_squared, -2)
            updates += [v1.assign(vr, new_vr), v1.assign(vc, new_vc)]
            long_term_mean = tf.reduce_mean(new_vr, -1, keepdims=True)
            r_factor = tf.math.rsqrt(new_vr / long_term_mean)
            c_factor = tf.math.rsqrt(new_vc)
            x = grad * tf.expand_dims(r_factor, -1) * tf.expand_dims(c_factor, -2)
        else:
            v = self.get_slot(var, "v")
            new_v = decay_rate * v + (1.0 - decay_rate) * grad_squared
            updates.append(v1.assign(v, new_v))
            x = grad * tf.math.rsqrt(new_v)
        clipping_denom = tf.maximum(1.0, tf.sqrt(tf.reduce_mean(tf.square(x))) / self._clipping_threshold)
        new_var = var - update_scale * (x / clipping_denom)
        updates.append(v1.assign(var, new_var))
        return tf.group(*updates)

    def _resource_apply_dense(self, grad, handle):
        return self._apply_dense(grad, handle)


def _bert_create_optimizer(loss, *, optimizer, init_lr=1e-4, num_train_steps=100, num_warmup_steps=10):
    """BERT's optimization.create_optimizer: polynomial decay, linear warmup, global-norm clipping,
    and the global step incremented by hand."""
    global_step = v1.train.get_or_create_global_step()
    learning_rate = tf.constant(value=init_lr, shape=[], dtype=tf.float32)
    learning_rate = v1.train.polynomial_decay(learning_rate, global_step, num_train_steps, end_learning_rate=0.0,
                                              power=1.0, cycle=False)
    global_steps_int = tf.cast(global_step, tf.int32)
    warmup_percent_done = tf.cast(global_steps_int, tf.float32) / float(num_warmup_steps)
    warmup_learning_rate = init_lr * warmup_percent_done
    is_warmup = tf.cast(global_steps_int < num_warmup_steps, tf.float32)
    learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_learning_rate
    if optimizer == "adamw":
        opt = AdamWeightDecayOptimizer(learning_rate=learning_rate, weight_decay_rate=0.01,
                                       exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    else:
        opt = LAMBOptimizer(learning_rate=learning_rate)
    tvars = v1.trainable_variables()
    grads = tf.gradients(loss, tvars)
    grads, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
    train_op = opt.apply_gradients(zip(grads, tvars), global_step=global_step)
    new_global_step = global_step + 1
    train_op = tf.group(train_op, [global_step.assign(new_global_step)])
    return train_op, global_step, opt


def bert_classifier(
    *,
    optimizer: str = "adamw",
    resource: bool = True,
    pretraining: bool = False,
    vocab_size: int = 40,
    hidden: int = 16,
    num_layers: int = 1,
    heads: int = 2,
    seq_length: int = 6,
    num_labels: int = 3,
    seed: int = 0,
) -> BuiltGraph:
    """google-research/bert fine-tuning (run_classifier.create_model: ``output_weights`` and
    ``output_bias`` at the root) or, with ``pretraining=True``, its pretraining heads
    (``cls/predictions/...``, ``cls/seq_relationship/...``), trained by
    ``create_optimizer`` with ``optimizer`` 'adamw' (AdamWeightDecayOptimizer) or 'lamb'.
    Layer norm everywhere, so ``tf.nn.moments`` lies upstream of every gradient."""
    if optimizer not in ("adamw", "lamb"):
        raise ValueError(f"unknown optimizer {optimizer!r}")
    with _new_graph(seed, resource) as graph:
        input_ids = v1.placeholder(tf.int32, [None, seq_length], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        sequence_output, pooled, table = _bert_model(
            input_ids, vocab_size=vocab_size, hidden=hidden, num_layers=num_layers, heads=heads, max_position=16
        )
        if pretraining:
            with v1.variable_scope("cls/predictions"):
                with v1.variable_scope("transform"):
                    transformed = bert_layer_norm(_bert_dense(sequence_output[:, 1, :], hidden, "dense",
                                                              activation=_gelu))
                output_bias = v1.get_variable("output_bias", [vocab_size], initializer=v1.zeros_initializer())
                lm_logits = tf.matmul(transformed, table, transpose_b=True) + output_bias
                lm_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=tf.cast(input_ids[:, 1], tf.int64), logits=lm_logits))
            with v1.variable_scope("cls/seq_relationship"):
                output_weights = v1.get_variable("output_weights", [2, hidden],
                                                 initializer=v1.truncated_normal_initializer(0.02))
                output_bias = v1.get_variable("output_bias", [2], initializer=v1.zeros_initializer())
            num_classes = 2
        else:
            output_weights = v1.get_variable("output_weights", [num_labels, hidden],
                                             initializer=v1.truncated_normal_initializer(stddev=0.02))
            output_bias = v1.get_variable("output_bias", [num_labels], initializer=v1.zeros_initializer())
            num_classes = num_labels
        with v1.variable_scope("loss"):
            logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True), output_bias)
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            one_hot_labels = tf.one_hot(labels, depth=num_classes, dtype=tf.float32)
            loss = tf.reduce_mean(-tf.reduce_sum(one_hot_labels * log_probs, axis=-1))
            if pretraining:
                loss += lm_loss
        logits = tf.identity(logits, name="logits")
        before = _variable_names(graph)
        train_op, global_step, opt = _bert_create_optimizer(loss, optimizer=optimizer)
        slots = [v for v in _created_during(graph, before) if v is not global_step]
        tensors = {"x": input_ids, "labels": labels, "logits": logits, "output": tf.nn.softmax(logits, name="output"),
                   "loss": loss, "train_op": train_op, "global_step": global_step}
        expected = _expected(graph, global_step=global_step, slots=slots)
    return BuiltGraph(graph, tensors, expected, opt,
                      info={"num_classes": num_classes, "vocab_size": vocab_size, "resource": resource})


def adafactor_transformer(*, resource: bool = True, hidden: int = 8, seq_length: int = 4, num_classes: int = 3,
                          seed: int = 0) -> BuiltGraph:
    """A pre-LN transformer feed-forward block (tensor2tensor style: ``layer_prepostprocess``
    layer norm, ``dense_relu_dense``) trained by :class:`AdafactorOptimizer` with
    ``minimize(loss, global_step)``."""
    with _new_graph(seed, resource) as graph:
        x = v1.placeholder(tf.float32, [None, seq_length, hidden], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        with v1.variable_scope("body/layer_0/ffn"):
            normed = bert_layer_norm(x, name="layer_norm")
            with v1.variable_scope("dense_relu_dense"):
                inner = tf.nn.relu(tf.tensordot(normed, v1.get_variable("conv1/kernel", [hidden, 2 * hidden]), 1))
                y = x + tf.tensordot(inner, v1.get_variable("conv2/kernel", [2 * hidden, hidden]), 1)
        with v1.variable_scope("body/decoder"):
            y = bert_layer_norm(y, name="layer_norm")
        logits, _ = _dense(tf.reduce_mean(y, axis=1), num_classes, "head")
        logits = tf.identity(logits, name="logits")
        loss = _sparse_xent(labels, logits)
        global_step = v1.train.get_or_create_global_step()
        opt = AdafactorOptimizer()
        train_op = opt.minimize(loss, global_step=global_step)
        tensors = {"x": x, "labels": labels, "logits": logits, "output": tf.nn.softmax(logits, name="output"),
                   "loss": loss, "train_op": train_op, "global_step": global_step}
        expected = _expected(graph, opt=opt, global_step=global_step)
    return BuiltGraph(graph, tensors, expected, opt, info={"num_classes": num_classes, "resource": resource})


def group_norm(x, groups=2, eps=1e-5, scope="GroupNorm"):
    """Group normalization as in Wu & He (2018), Figure 3 (NHWC)."""
    with v1.variable_scope(scope):
        _, height, width, channels = x.shape.as_list()
        grouped = tf.reshape(x, [-1, height, width, groups, channels // groups])
        mean, var = tf.nn.moments(grouped, [1, 2, 4], keepdims=True)
        grouped = (grouped - mean) / tf.sqrt(var + eps)
        gamma = v1.get_variable("gamma", [1, 1, 1, channels], initializer=v1.ones_initializer())
        beta = v1.get_variable("beta", [1, 1, 1, channels], initializer=v1.zeros_initializer())
        return tf.reshape(grouped, [-1, height, width, channels]) * gamma + beta


def group_norm_cnn(*, optimizer: str = "lamb", resource: bool = True, input_hw: int = 8, channels=(4, 8),
                   num_classes: int = 5, seed: int = 0) -> BuiltGraph:
    """conv -> group norm -> relu blocks and a dense head; ``optimizer`` 'lamb' (hand-written,
    :class:`LAMBOptimizer` with the global step incremented by hand) or 'adam'
    (``tf.compat.v1.train.AdamOptimizer``)."""
    with _new_graph(seed, resource) as graph:
        x = v1.placeholder(tf.float32, [None, input_hw, input_hw, 3], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        h = x
        for index, out in enumerate(channels, start=1):
            with v1.variable_scope(f"conv{index}"):
                w = v1.get_variable("weights", [3, 3, int(h.shape[-1]), out])
                h = tf.nn.relu(group_norm(tf.nn.conv2d(h, w, 1, "SAME")))
        logits, _ = _dense(tf.reduce_mean(h, [1, 2]), num_classes, "logits_layer")
        logits = tf.identity(logits, name="logits")
        loss = _sparse_xent(labels, logits)
        global_step = v1.train.get_or_create_global_step()
        before = _variable_names(graph)
        if optimizer == "lamb":
            opt = LAMBOptimizer(learning_rate=1e-3)
            step = opt.apply_gradients(zip(tf.gradients(loss, v1.trainable_variables()), v1.trainable_variables()))
            train_op = tf.group(step, global_step.assign_add(1))
            expected = _expected(graph, global_step=global_step, slots=_created_during(graph, before))
        else:
            opt = v1.train.AdamOptimizer(1e-3)
            train_op = opt.minimize(loss, global_step=global_step)
            expected = _expected(graph, opt=opt, global_step=global_step)
        tensors = {"x": x, "labels": labels, "logits": logits, "output": tf.nn.softmax(logits, name="output"),
                   "loss": loss, "train_op": train_op, "global_step": global_step}
    return BuiltGraph(graph, tensors, expected, opt, info={"num_classes": num_classes, "resource": resource})


def fused_bn_block(x, channels, scope, *, decay=0.9):
    """conv -> fused batch norm with moving statistics updated through UPDATE_OPS; returns
    (training output, inference output, [moving_mean, moving_variance])."""
    from tensorflow.python.training import moving_averages  # no public v1 alias

    with v1.variable_scope(scope):
        w = v1.get_variable("w", [3, 3, int(x.shape[-1]), channels])
        conv = tf.nn.conv2d(x, w, 1, "SAME")
        with v1.variable_scope("bn"):
            scale = v1.get_variable("gamma", [channels], initializer=v1.ones_initializer())
            offset = v1.get_variable("beta", [channels], initializer=v1.zeros_initializer())
            mean = v1.get_variable("moving_mean", [channels], initializer=v1.zeros_initializer(), trainable=False)
            variance = v1.get_variable("moving_variance", [channels], initializer=v1.ones_initializer(),
                                       trainable=False)
            y, batch_mean, batch_var = v1.nn.fused_batch_norm(conv, scale, offset, epsilon=1e-3, is_training=True)
            for stat, value in ((mean, batch_mean), (variance, batch_var)):
                v1.add_to_collection(v1.GraphKeys.UPDATE_OPS,
                                     moving_averages.assign_moving_average(stat, value, decay, zero_debias=False))
            y_inf, _, _ = v1.nn.fused_batch_norm(conv, scale, offset, mean=mean, variance=variance, epsilon=1e-3,
                                                 is_training=False, name="inference")
    return tf.nn.relu(y), tf.nn.relu(y_inf), [mean, variance]


def accumulating_cnn(*, accumulation_steps: int = 4, resource: bool = True, input_hw: int = 8, channels: int = 4,
                     num_classes: int = 5, seed: int = 0) -> BuiltGraph:
    """Gradient accumulation as NVIDIA's BERT (DeepLearningExamples optimization.py) does it:
    per-variable ``/accum`` variables that sum gradients across micro-batches, a ``local_step``
    that counts them, a ``batch_finite`` flag, and every ``accumulation_steps`` steps a
    ``tf.cond`` that applies the accumulated gradients with Momentum and bumps the global
    step. The model is a conv + fused batch norm block whose statistics' updates are wired."""
    with _new_graph(seed, resource) as graph:
        x = v1.placeholder(tf.float32, [None, input_hw, input_hw, 3], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        h, h_inf, bn_stats = fused_bn_block(x, channels, "block1")

        def head(features):
            with v1.variable_scope("head", reuse=v1.AUTO_REUSE):
                return _dense(tf.reduce_mean(features, [1, 2]), num_classes, "dense")[0]

        logits = tf.identity(head(h), name="logits")
        output = tf.nn.softmax(head(h_inf), name="output")
        loss = _sparse_xent(labels, logits)
        global_step = v1.train.get_or_create_global_step()
        before = _variable_names(graph)
        optimizer = v1.train.MomentumOptimizer(0.01, momentum=0.9)
        tvars = v1.trainable_variables()
        grads_and_vars = optimizer.compute_gradients(loss, tvars)
        local_step = v1.get_variable(name="local_step", shape=[], dtype=tf.int32, trainable=False,
                                     initializer=v1.zeros_initializer)
        batch_finite = v1.get_variable(name="batch_finite", shape=[], dtype=tf.bool, trainable=False,
                                       initializer=v1.ones_initializer)
        accum_vars = [v1.get_variable(name=tvar.name.split(":")[0] + "/accum", shape=tvar.shape.as_list(),
                                      dtype=tf.float32, trainable=False, initializer=v1.zeros_initializer())
                      for tvar in tvars]
        with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
            reset_step = tf.cast(tf.math.equal(local_step % accumulation_steps, 0), dtype=tf.bool)
        local_step = tf.cond(reset_step, lambda: local_step.assign(tf.ones_like(local_step)),
                             lambda: local_step.assign_add(1))
        grads = [g for g, _ in grads_and_vars]
        all_are_finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        batch_finite = tf.cond(reset_step,
                               lambda: batch_finite.assign(tf.math.logical_and(tf.constant(True), all_are_finite)),
                               lambda: batch_finite.assign(tf.math.logical_and(batch_finite, all_are_finite)))
        clipped_grads, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
        accum_vars_t = tf.cond(reset_step,
                               lambda: [accum_vars[i].assign(grad) for i, grad in enumerate(clipped_grads)],
                               lambda: [accum_vars[i].assign_add(grad) for i, grad in enumerate(clipped_grads)])

        def update(accumulated):
            return optimizer.apply_gradients(list(zip(accumulated, tvars)))

        update_step = tf.identity(tf.cast(tf.math.equal(local_step % accumulation_steps, 0), dtype=tf.bool),
                                  name="update_step")
        update_op = tf.cond(update_step, lambda: update(accum_vars_t), lambda: tf.no_op())
        new_global_step = tf.cond(tf.math.logical_and(update_step, batch_finite), lambda: global_step + 1,
                                  lambda: global_step)
        new_global_step = tf.identity(new_global_step, name="step_update")
        train_op = tf.group(update_op, [global_step.assign(new_global_step)])
        created = _created_during(graph, before)
        tensors = {"x": x, "labels": labels, "logits": logits, "output": output, "loss": loss, "train_op": train_op,
                   "global_step": global_step}
        momentum = [optimizer.get_slot(v, "momentum") for v in tvars]
        non_slot = [v for v in created if v.op.name in ("local_step", "batch_finite")]
        expected = _expected(graph, global_step=global_step, bn_stats=bn_stats, slots=created, non_slot=non_slot,
                             accumulators=accum_vars, momentum=momentum)
    return BuiltGraph(graph, tensors, expected, optimizer,
                      info={"num_classes": num_classes, "resource": resource, "accumulation_steps": accumulation_steps})


def loss_scaled_model(*, resource: bool = True, cond_v2: bool | None = None, input_hw: int = 8, channels: int = 4,
                      num_classes: int = 5, seed: int = 0) -> BuiltGraph:
    """A conv + fused batch norm block trained with ``tf.compat.v1.mixed_precision``'s
    ``MixedPrecisionLossScaleOptimizer(AdamOptimizer, 'dynamic')``: the loss scale and its
    good-step counter are updated in a ``tf.cond`` on ``all(is_finite(grads))``."""
    with _new_graph(seed, resource, cond_v2) as graph:
        x = v1.placeholder(tf.float32, [None, input_hw, input_hw, 3], name="x")
        labels = v1.placeholder(tf.int64, [None], name="labels")
        h, h_inf, bn_stats = fused_bn_block(x, channels, "block1")
        with v1.variable_scope("head", reuse=v1.AUTO_REUSE):
            logits = tf.identity(_dense(tf.reduce_mean(h, [1, 2]), num_classes, "dense")[0], name="logits")
        with v1.variable_scope("head", reuse=True):
            output = tf.nn.softmax(_dense(tf.reduce_mean(h_inf, [1, 2]), num_classes, "dense")[0], name="output")
        loss = _sparse_xent(labels, logits)
        global_step = v1.train.get_or_create_global_step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inner = v1.train.AdamOptimizer(1e-3)
            opt = v1.mixed_precision.MixedPrecisionLossScaleOptimizer(inner, loss_scale="dynamic")
        with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
            train_op = opt.minimize(loss, global_step=global_step)
        loss_scale = opt._loss_scale  # pylint: disable=protected-access
        scale_state = [loss_scale._current_loss_scale, loss_scale._num_good_steps]  # pylint: disable=protected-access
        slots, non_slot = _slot_variables(inner, v1.trainable_variables())
        tensors = {"x": x, "labels": labels, "logits": logits, "output": output, "loss": loss, "train_op": train_op,
                   "global_step": global_step}
        expected = _expected(graph, global_step=global_step, bn_stats=bn_stats, loss_scale=scale_state,
                             slots=slots + scale_state, non_slot=non_slot)
        used_cond_v2 = v1.control_flow_v2_enabled()
    return BuiltGraph(graph, tensors, expected, opt,
                      info={"num_classes": num_classes, "resource": resource, "cond_v2": used_cond_v2})


def keras_application(
    *,
    optimizer: str = "adam",
    application: str = "mobilenet_v2",
    loss_scale: bool = False,
    input_hw: int = 32,
    num_classes: int = 10,
    seed: int = 0,
) -> BuiltGraph:
    """A tf_keras model in graph mode, compiled, with the training function ``fit`` runs built:
    ``application`` 'mobilenet_v2' (``tf_keras.applications.MobileNetV2(weights=None,
    alpha=0.35)``) or 'small' (conv, batch norm, dense); ``optimizer`` 'adam' / 'sgd'
    (``tf_keras.optimizers.legacy`` Adam, SGD with momentum) or 'v1_adam' / 'v1_momentum'
    (``tf.compat.v1.train``, which Keras wraps). ``loss_scale`` wraps the optimizer in
    ``tf_keras.mixed_precision.LossScaleOptimizer``. ``tensors['train_op']`` is the training
    function's grouped update op, which Keras runs in one ``session.run`` with the loss.
    Needs TF_USE_LEGACY_KERAS=1 and ``tf.compat.v1.disable_eager_execution()``."""
    _require_legacy_keras("keras_application")
    if tf.executing_eagerly():
        raise RuntimeError("keras_application() builds Keras's graph-mode training: call "
                           "tf.compat.v1.disable_eager_execution() first (in its own process)")
    import tf_keras

    with _new_graph(seed, None) as graph, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tf_keras.utils.set_random_seed(seed)
        if application == "mobilenet_v2":
            model = tf_keras.applications.MobileNetV2(weights=None, input_shape=(input_hw, input_hw, 3), alpha=0.35,
                                                      classes=num_classes)
        else:
            inputs = tf_keras.Input((input_hw, input_hw, 3))
            h = tf_keras.layers.Conv2D(4, 3, name="conv")(inputs)
            h = tf_keras.layers.ReLU()(tf_keras.layers.BatchNormalization(name="bn")(h))
            h = tf_keras.layers.GlobalAveragePooling2D()(h)
            model = tf_keras.Model(inputs, tf_keras.layers.Dense(num_classes, activation="softmax", name="dense")(h))
        opt = {
            "adam": lambda: tf_keras.optimizers.legacy.Adam(1e-3),
            "sgd": lambda: tf_keras.optimizers.legacy.SGD(0.01, momentum=0.9),
            "v1_adam": lambda: v1.train.AdamOptimizer(1e-3),
            "v1_momentum": lambda: v1.train.MomentumOptimizer(0.01, 0.9),
        }[optimizer]()
        if loss_scale:
            opt = tf_keras.mixed_precision.LossScaleOptimizer(opt)
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
        # What fit() and train_on_batch() build first in graph mode, without running a session.
        model._make_train_function()  # pylint: disable=protected-access
        train_function = model.train_function
        weights = model.trainable_weights
        keras_opt = model.optimizer
        if optimizer.startswith("v1_"):
            slots, non_slot = _slot_variables(keras_opt.optimizer, weights)
            steps = []
        else:
            inner = keras_opt.inner_optimizer if loss_scale else keras_opt
            slot_list = [inner.get_slot(w, n) for w in weights for n in inner.get_slot_names()]
            hyper = inner._hyper.values()  # pylint: disable=protected-access
            non_slot = [h for h in hyper if isinstance(h, tf.Variable)]  # learning_rate, beta_1, decay...
            slots, steps = slot_list + non_slot, [inner.iterations]
        scale_state = []
        if loss_scale:
            state = keras_opt._loss_scale  # pylint: disable=protected-access
            scale_state = [state._current_loss_scale, state._counter]  # pylint: disable=protected-access
        bn_layers = [layer for layer in model.layers if isinstance(layer, tf_keras.layers.BatchNormalization)]
        expected = _expected(
            graph,
            global_step=steps[0] if steps else None,
            slots=slots + scale_state,
            non_slot=non_slot,
            loss_scale=scale_state,
            bn_stats=[v for layer in bn_layers for v in (layer.moving_mean, layer.moving_variance)],
        )
        tensors = {
            "x": model.inputs[0],
            "output": model.outputs[0],
            "loss": train_function.outputs[0],
            "train_op": train_function.updates_op,
        }
    return BuiltGraph(graph, tensors, expected, opt,
                      info={"num_classes": num_classes, "bn_layers": [layer.name for layer in bn_layers]})


# --------------------------------------------------------------------------
# feeds


def random_feed(built: BuiltGraph, *, batch_size: int = 4, training: bool = True, seed: int = 0) -> dict:
    """A feed dict with random ``x`` (+ ``labels``, ``phase_train``) for
    ``built``."""
    rng = np.random.default_rng(seed)
    feed = {}
    x = built.tensors["x"]
    shape = [batch_size if d is None else d for d in x.shape.as_list()]
    if x.dtype.is_integer:
        high = built.info.get("vocab_size", 2)
        feed[x] = rng.integers(0, high, size=shape).astype(x.dtype.as_numpy_dtype)
    else:
        feed[x] = rng.random(shape, dtype=np.float32)
    if "labels" in built.tensors:
        feed[built.tensors["labels"]] = rng.integers(0, built.info.get("num_classes", 2), size=[batch_size]).astype(
            np.int64
        )
    if "phase_train" in built.tensors:
        feed[built.tensors["phase_train"]] = training
    return feed


def trained_checkpoint(built: BuiltGraph, prefix: str, steps: int) -> tuple[str, dict]:
    """Train ``built`` for ``steps`` steps on random feeds and save every variable with a
    ``tf.compat.v1.train.Saver`` at ``prefix-STEPS``: (the checkpoint's prefix, name -> value)."""
    with built.graph.as_default():
        saver = tf.compat.v1.train.Saver()
        init = tf.compat.v1.global_variables_initializer()
        variables = tf.compat.v1.global_variables()
    with tf.compat.v1.Session(graph=built.graph) as sess:
        sess.run(init)
        for step in range(steps):
            sess.run(built.tensors["train_op"], random_feed(built, seed=step))
        saved = saver.save(sess, prefix, global_step=steps)
        return saved, dict(zip([v.op.name for v in variables], sess.run(variables)))
