"""BERT, ALBERT and GPT-2 built by their original repositories' own TF1 code, for the layout-map tests
(and BERT with run_classifier.py's three-label head, ``bert_classifier``).

The code comes from PyPI (``bert-tensorflow``: google-research/bert's modeling.py;
``albert-tensorflow``: google-research/albert's; ``gpt-2-simple``: openai/gpt-2's model.py), used
unchanged. Under TensorFlow 2 it needs two compatibility shims, both here: ``tensorflow.contrib.layers``
(its ``layer_norm``, the variables and arithmetic of tf.contrib's), and, for ALBERT's ``import
tensorflow as tf``, ``tf.compat.v1`` in its place while its module is imported. Graph-mode code and
``tf.compat.v1.layers`` need ``TF_USE_LEGACY_KERAS=1``, so the tests run this file in a subprocess:

    python tests/tf1_families.py save bert OUT_DIR      # random weights -> OUT_DIR/model.ckpt, config, outputs.npz
    python tests/tf1_families.py run bert CKPT CONFIG OUT.npz   # restore CKPT by name, outputs for the same input
"""

import importlib.util
import json
import os
import sys
import types

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
CONFIGS = {
    "bert": ("bert_config.json", {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2,
                                  "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
                                  "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                                  "max_position_embeddings": 16, "type_vocab_size": 2, "initializer_range": 0.02}),
    "albert": ("albert_config.json", {"vocab_size": 99, "embedding_size": 16, "hidden_size": 32,
                                      "num_hidden_layers": 2, "num_hidden_groups": 1, "num_attention_heads": 4,
                                      "intermediate_size": 64, "inner_group_num": 1, "down_scale_factor": 1,
                                      "hidden_act": "gelu", "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0,
                                      "max_position_embeddings": 16, "type_vocab_size": 2, "initializer_range": 0.02}),
    "gpt2": ("hparams.json", {"n_vocab": 99, "n_ctx": 16, "n_embd": 32, "n_head": 4, "n_layer": 2}),
}
CONFIGS["bert_classifier"] = CONFIGS["bert"]
CLASSIFIER_LABELS = 3
TOKENS = np.array([[5, 17, 42, 8, 3, 77, 1, 64], [9, 2, 33, 50, 98, 12, 0, 7]], np.int32)
SEGMENTS = np.array([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]], np.int32)


def _layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None, **_):
    """tf.contrib.layers.layer_norm on the last axis: its variables (beta, gamma) and its arithmetic."""
    with v1.variable_scope(scope, default_name="LayerNorm"):
        shape = inputs.shape[-1:]
        beta = v1.get_variable("beta", shape, initializer=v1.zeros_initializer())
        gamma = v1.get_variable("gamma", shape, initializer=v1.ones_initializer())
        mean, variance = tf.nn.moments(inputs, [inputs.shape.ndims - 1], keepdims=True)
        return tf.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma, variance_epsilon=1e-12)


def _install_contrib():
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = types.ModuleType("tensorflow.contrib.layers")
    contrib.layers.layer_norm = _layer_norm
    sys.modules["tensorflow.contrib"] = contrib
    sys.modules["tensorflow.contrib.layers"] = contrib.layers


def _module(package, relative, tensorflow=None):
    """A module of an installed package, loaded from its file (so the package's __init__ does not run)."""
    spec = importlib.util.find_spec(package)
    path = os.path.join(os.path.dirname(spec.origin), relative)
    module_spec = importlib.util.spec_from_file_location(f"_original_{package}", path)
    module = importlib.util.module_from_spec(module_spec)
    saved = sys.modules["tensorflow"]
    if tensorflow is not None:
        sys.modules["tensorflow"] = tensorflow
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.modules["tensorflow"] = saved
    return module


def build(family, config):
    """The family's graph in the default graph; returns {output name: tensor}."""
    _install_contrib()
    ids = v1.constant(TOKENS)
    mask = v1.ones_like(ids)
    segments = v1.constant(SEGMENTS)
    if family in ("bert", "bert_classifier"):
        modeling = _module("bert", "modeling.py")
        model = modeling.BertModel(modeling.BertConfig.from_dict(config), is_training=False, input_ids=ids,
                                   input_mask=mask, token_type_ids=segments, use_one_hot_embeddings=False)
        if family == "bert_classifier":
            return {"logits": _classifier_logits(model.get_pooled_output(), config["hidden_size"])}
        return {"sequence": model.get_sequence_output(), "pooled": model.get_pooled_output()}
    if family == "albert":
        modeling = _module("albert", "modeling.py", tensorflow=v1)
        model = modeling.AlbertModel(modeling.AlbertConfig.from_dict(config), is_training=False, input_ids=ids,
                                     input_mask=mask, token_type_ids=segments, use_one_hot_embeddings=False)
        return {"sequence": model.get_sequence_output(), "pooled": model.get_pooled_output()}
    model = _module("gpt_2_simple", os.path.join("src", "model.py"))
    hparams = model.default_hparams()
    hparams.override_from_dict(config)
    return {"logits": model.model(hparams=hparams, X=ids)["logits"]}


def _classifier_logits(pooled, hidden_size):
    """run_classifier.py's create_model head, as written there (the module itself needs TF1's tf.flags)."""
    output_weights = v1.get_variable("output_weights", [CLASSIFIER_LABELS, hidden_size],
                                     initializer=v1.truncated_normal_initializer(stddev=0.02))
    output_bias = v1.get_variable("output_bias", [CLASSIFIER_LABELS], initializer=v1.zeros_initializer())
    return tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True), output_bias)


def save(family, out_dir):
    """Random weights (every variable, so no value is its initializer's), a Saver checkpoint with Adam's
    slots and the step, the family config, and the graph's outputs."""
    filename, config = CONFIGS[family]
    rng = np.random.default_rng({"bert": 1, "albert": 2, "gpt2": 3, "bert_classifier": 4}[family])
    with tf.Graph().as_default():
        outputs = build(family, config)
        weights = v1.trainable_variables()
        step = v1.train.get_or_create_global_step()
        loss = sum(tf.reduce_sum(tensor) for tensor in outputs.values())
        train = v1.train.AdamOptimizer(1e-3).minimize(loss, global_step=step, var_list=weights)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train)  # the slots hold values, as a real training checkpoint's do
            for variable in weights:
                value = sess.run(variable)
                variable.load(value + rng.normal(0, 0.05, value.shape).astype(value.dtype), sess)
            v1.train.Saver().save(sess, os.path.join(out_dir, "model.ckpt"))
            values = sess.run(outputs)
    with open(os.path.join(out_dir, filename), "w") as handle:
        json.dump(config, handle)
    np.savez(os.path.join(out_dir, "outputs.npz"), **values)


def run(family, checkpoint, config_path, out):
    """Restore ``checkpoint`` into the family's graph by name (every variable) and save its outputs."""
    with open(config_path) as handle:
        config = json.load(handle)
    with tf.Graph().as_default():
        outputs = build(family, config)
        with v1.Session() as sess:
            v1.train.Saver().restore(sess, checkpoint)
            np.savez(out, **sess.run(outputs))


if __name__ == "__main__":
    command, family, *arguments = sys.argv[1:]
    {"save": save, "run": run}[command](family, *arguments)
