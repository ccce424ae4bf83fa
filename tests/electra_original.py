"""ELECTRA built by google-research/electra's own TF1 code, for the electra-to-hf and hf-to-electra tests.

google-research/electra is not on PyPI; ``arabert==1.0.1`` ships its pre-training code under
``arabert/araelectra/`` (``model/modeling.py``, ``model/optimization.py``, ``run_pretraining.py``,
``pretrain/``, ``util/``, ``configure_pretraining.py``), identical to google-research/electra's but for
``import tensorflow as tf`` where the original says ``import tensorflow.compat.v1 as tf``, and some
defaults of ``configure_pretraining.py`` (every one this file relies on is passed explicitly). It is used
unchanged, loaded from its files (arabert's own ``__init__`` needs packages the model does not). On
TensorFlow 2.21 it needs these patches, all in :func:`install_shim`:

- ``tensorflow`` is ``tf.compat.v1`` while ELECTRA's modules are imported, which is what the original's
  ``import tensorflow.compat.v1 as tf`` gives;
- ``tensorflow.contrib.layers`` is tf-slim's ``layers`` (tf.contrib's code, moved there; ELECTRA's
  ``layer_norm`` is its ``layer_norm``, variance epsilon 1e-12);
- a stand-in ``tf.compat.v1.estimator`` with ``SessionRunHook`` (``util/training_utils.py`` subclasses it
  when imported; no estimator runs here);
- the directory on ``sys.path``, since the modules import each other as ``model``, ``pretrain``, ``util``
  and ``configure_pretraining``;
- ``TF_USE_LEGACY_KERAS=1`` (``tf.compat.v1.layers.dense``) and eager execution off.

``save`` builds ``run_pretraining.PretrainingModel`` (generator and discriminator, masking and sampling as in
pre-training), takes one step of ``optimization.create_optimizer`` (ELECTRA's AdamWeightDecayOptimizer, with
its ``adam_m``/``adam_v`` and the step), gives every weight a random value, and saves with a plain Saver.
``run`` builds the two models for inference from the same hparams with ELECTRA's own functions
(``build_transformer``, ``get_generator_config``, ``PretrainingModel._get_masked_lm_output`` and
``_get_discriminator_output``, on every position), restores, and saves the discriminator's logits and the
generator's masked-LM logits (for Electric: its discriminator head's own output, and Electric's score of each
token, which adds the cloze model's log-likelihood):

    python tests/electra_original.py save CASE OUT_DIR   # OUT_DIR/model.ckpt-1, hparams.json, outputs.npz
    python tests/electra_original.py run CASE OUT.npz CKPT [CKPT ...]   # each variable from the first CKPT that has it
"""

import importlib.util
import json
import os
import sys
import types

import numpy as np

if __name__ == "__main__":  # as the tests' subprocess; a test importing the inputs leaves its process's Keras alone
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
INPUT_IDS = np.array([[2, 17, 42, 8, 5, 77, 1, 64, 3, 9], [2, 9, 33, 50, 98, 12, 4, 7, 3, 0]], np.int32)
INPUT_MASK = np.array([[1] * 10, [1] * 9 + [0]], np.int32)
SEGMENT_IDS = np.array([[0] * 5 + [1] * 5, [0] * 6 + [1] * 4], np.int32)
# Two runs of other shapes: "small" as ELECTRA-Small is laid out (embeddings narrower than the hidden layers,
# so both models have embeddings_project; the generator shares the discriminator's embeddings), "base" as
# ELECTRA-Base (embedding_size = hidden_size, no projection) with untied generator embeddings and half the
# layers. The head counts follow ELECTRA's rule (hidden_size // 64) but in "base", which overrides it.
# "electric" is "small" trained with Electric's objective, as google-research/electra's README says to ask
# for it: a two-tower cloze generator (generator_ltr, generator_rtl, cloze_predictions) beside the discriminator.
CASES = {
    "small": {"model_size": "small", "vocab_size": 101, "embedding_size": 32, "generator_hidden_size": 0.5,
              "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 2, "max_position_embeddings": 24}},
    "base": {"model_size": "base", "vocab_size": 99, "embedding_size": None, "generator_hidden_size": 0.5,
             "generator_layers": 0.5, "untied_generator_embeddings": True,
             "model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                        "max_position_embeddings": 16, "type_vocab_size": 3}},
    "electric": {"model_size": "small", "vocab_size": 101, "embedding_size": 32, "generator_hidden_size": 0.5,
                 "electra_objective": False, "electric_objective": True,
                 "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 2, "max_position_embeddings": 24}},
}
RUN = {"use_tpu": False, "max_seq_length": INPUT_IDS.shape[1], "train_batch_size": 2, "num_train_steps": 10,
       "num_warmup_steps": 1, "learning_rate": 1e-3}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def install_shim():
    """The patches that let google-research/electra's code run on TensorFlow 2.21 (see the module's docstring)."""
    import tf_slim

    directory = os.path.join(os.path.dirname(importlib.util.find_spec("arabert").origin), "araelectra")
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = tf_slim.layers
    sys.modules["tensorflow.contrib"] = contrib
    sys.modules["tensorflow.contrib.layers"] = tf_slim.layers
    estimator = types.ModuleType("tensorflow.compat.v1.estimator")
    estimator.SessionRunHook = type("SessionRunHook", (), {})
    v1.estimator = estimator
    if directory not in sys.path:
        sys.path.insert(0, directory)
    v1.disable_eager_execution()
    saved = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = v1
    try:
        import configure_pretraining
        import run_pretraining
        from model import modeling, optimization
        from pretrain import pretrain_data
        from util import training_utils
    finally:
        sys.modules["tensorflow"] = saved
    return types.SimpleNamespace(configure_pretraining=configure_pretraining, run_pretraining=run_pretraining,
                                 modeling=modeling, optimization=optimization, pretrain_data=pretrain_data,
                                 training_utils=training_utils)


def _config(electra, case, directory):
    vocab_file = os.path.join(directory, "vocab.txt")
    if not os.path.exists(vocab_file):
        with open(vocab_file, "w") as handle:
            handle.write("\n".join(VOCAB + [f"token{index}" for index in range(CASES[case]["vocab_size"] - 5)]))
    return electra.configure_pretraining.PretrainingConfig("test", directory, vocab_file=vocab_file,
                                                           **RUN, **CASES[case])


def _features():
    return {"input_ids": tf.constant(INPUT_IDS), "input_mask": tf.constant(INPUT_MASK),
            "segment_ids": tf.constant(SEGMENT_IDS)}


def save(case, out_dir):
    """One step of ELECTRA's pre-training, then random weights (no value is its initializer's); a plain
    Saver's model.ckpt-1 with adam_m, adam_v and the step; the run's hparams.json; the outputs."""
    electra = install_shim()
    rng = np.random.default_rng({"small": 21, "base": 22, "electric": 23}[case])
    with tf.Graph().as_default():
        v1.set_random_seed(0)
        config = _config(electra, case, out_dir)
        model = electra.run_pretraining.PretrainingModel(config, _features(), True)
        train_op = electra.optimization.create_optimizer(
            model.total_loss, config.learning_rate, config.num_train_steps, weight_decay_rate=config.weight_decay_rate,
            use_tpu=False, warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power)
        step = v1.train.get_global_step()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            step.load(1, sess)  # past the warm-up's zero learning rate, so the step moves the weights
            sess.run(train_op)
            for variable in v1.trainable_variables():
                value = sess.run(variable)
                variable.load(value + rng.normal(0, 0.05, value.shape).astype(value.dtype), sess)
            v1.train.Saver().save(sess, os.path.join(out_dir, "model.ckpt"), global_step=1)
    with open(os.path.join(out_dir, "hparams.json"), "w") as handle:
        json.dump(CASES[case], handle)
    run(case, os.path.join(out_dir, "outputs.npz"), os.path.join(out_dir, "model.ckpt-1"))


def build(electra, config):
    """The generator and the discriminator for inference, named as PretrainingModel names them, on every
    position of INPUT_IDS; returns {"discriminator_logits", "generator_logits"}."""
    bert_config = electra.training_utils.get_bert_config(config)
    generator_config = electra.run_pretraining.get_generator_config(config, bert_config)
    embedding_size = bert_config.hidden_size if config.embedding_size is None else config.embedding_size
    features = _features()
    features["masked_lm_positions"] = tf.constant(np.tile(np.arange(INPUT_IDS.shape[1], dtype=np.int32), (2, 1)))
    features["masked_lm_ids"] = features["input_ids"]
    features["masked_lm_weights"] = tf.ones(INPUT_IDS.shape, tf.float32)
    inputs = electra.pretrain_data.features_to_inputs(features)
    if config.electric_objective:
        return _build_electric(electra, config, bert_config, generator_config, embedding_size, inputs)
    generator = electra.run_pretraining.build_transformer(
        config, inputs, False, generator_config,
        embedding_size=None if config.untied_generator_embeddings else embedding_size,
        untied_embeddings=config.untied_generator_embeddings, scope="generator")
    model = object.__new__(electra.run_pretraining.PretrainingModel)  # its heads, without its sampling
    model._config, model._bert_config = config, bert_config
    masked_lm = model._get_masked_lm_output(inputs, generator)
    discriminator = electra.run_pretraining.build_transformer(config, inputs, False, bert_config,
                                                              embedding_size=embedding_size)
    probs = model._get_discriminator_output(inputs, discriminator, tf.zeros(INPUT_IDS.shape, tf.int32)).probs
    return {"discriminator_logits": probs.op.inputs[0], "generator_logits": masked_lm.logits}


def _build_electric(electra, config, bert_config, generator_config, embedding_size, inputs):
    """Electric's two-tower cloze generator and its discriminator, as PretrainingModel builds them; returns
    {"discriminator_logits": the discriminator head's own output (dense_1, squeezed), "electric_logits": that
    plus the cloze model's log q and log(mask_prob / (1 - mask_prob)), as Electric scores a token}."""
    generator = electra.run_pretraining.TwoTowerClozeTransformer(config, generator_config, inputs, False,
                                                                 embedding_size)
    model = object.__new__(electra.run_pretraining.PretrainingModel)
    model._config, model._bert_config = config, bert_config
    cloze = model._get_cloze_outputs(inputs, generator)
    discriminator = electra.run_pretraining.build_transformer(config, inputs, False, bert_config,
                                                              embedding_size=embedding_size)
    probs = model._get_discriminator_output(inputs, discriminator, tf.zeros(INPUT_IDS.shape, tf.int32), cloze).probs
    head = tf.compat.v1.get_default_graph().get_tensor_by_name("discriminator_predictions/Squeeze:0")
    return {"discriminator_logits": head, "electric_logits": probs.op.inputs[0]}


def run(case, out, *checkpoints):
    """Restore every variable of the inference graph from the first of ``checkpoints`` that holds it;
    save the outputs to ``out``."""
    electra = install_shim()
    with tf.Graph().as_default():
        outputs = build(electra, _config(electra, case, os.path.dirname(os.path.abspath(checkpoints[0]))))
        remaining = {variable.op.name: variable for variable in v1.global_variables()}
        with v1.Session() as sess:
            for checkpoint in checkpoints:
                held = {name for name, _ in tf.train.list_variables(checkpoint)}
                found = {name: remaining.pop(name) for name in list(remaining) if name in held}
                if found:
                    v1.train.Saver(found).restore(sess, checkpoint)
            if remaining:
                raise SystemExit(f"no checkpoint holds {sorted(remaining)}")
            np.savez(out, **sess.run(outputs))


if __name__ == "__main__":
    command, case, *arguments = sys.argv[1:]
    {"save": save, "run": run}[command](case, *arguments)
