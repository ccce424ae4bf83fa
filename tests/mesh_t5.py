"""T5 built by Mesh TensorFlow 0.1.21's own transformer code, for the t5-to-hf and hf-to-t5 tests.

The code comes from PyPI (``mesh-tensorflow==0.1.21``, the library T5's released checkpoints were trained
with), used unchanged. On TensorFlow 2.21 it needs four patches, all here (:func:`install_shim`):

- a stand-in ``tf.compat.v1.estimator`` (``ModeKeys``, ``SessionRunHook``, ``CheckpointSaverListener``:
  the names Mesh TensorFlow's modules touch when they are imported or when a model is called);
- ``ops.register_tensor_conversion_function``, which moved to ``tensor_conversion_registry``;
- ``mesh_tensorflow.transformer`` as a bare package: its ``__init__`` imports ``tensorflow_datasets`` and
  the removed TPU estimator, neither of which building a model needs;
- eager execution off.

With a mesh of shape ``[]`` on one CPU the model trains, saves and restores unmodified. The model is
configured through gin as a Mesh TensorFlow run is, and ``gin.operative_config_str()`` is written as
the run's ``operative_config.gin``:

    python tests/mesh_t5.py save v1.0 OUT_DIR   # random weights, one Adafactor step -> OUT_DIR/model.ckpt-1,
                                                #   operative_config.gin, outputs.npz
    python tests/mesh_t5.py run v1.0 CKPT OUT.npz [GIN]   # restore CKPT by name into the model (GIN's
                                                          #   bindings over the variant's), its outputs
"""

import importlib.util
import os
import sys
import types

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1
# Inputs with no 0: Mesh TensorFlow reads id 0 as padding (sequence_id = min(ids, 1)).
INPUTS = np.array([[5, 17, 42, 8, 3, 77, 1, 64, 9], [9, 2, 33, 50, 98, 12, 4, 7, 1]], np.int32)
TARGETS = np.array([[7, 11, 2, 1, 30, 6], [3, 99, 14, 1, 8, 21]], np.int32)
# decoder input ids as Hugging Face's T5 feeds them: the targets shifted right after decoder_start_token_id 0
DECODER_INPUTS = np.concatenate([np.zeros((2, 1), np.int32), TARGETS[:, :-1]], axis=1)

SIZES = """
d_model = {d_model}
d_ff = {d_ff}
d_kv = {d_kv}
num_heads = {num_heads}
num_layers = {num_layers}
dropout_rate = 0.0
"""
# defaults.gin's model bindings, T5's bi_v1.gin (relative attention bias shared across layers), and for
# v1.1 and mT5 t5.1.1.base.gin's (gated GELU, no tied classifier)
MODEL = """
encoder/make_layer_stack.layers = [
    @mesh_tensorflow.transformer.transformer_layers.SelfAttention,
    @mesh_tensorflow.transformer.transformer_layers.DenseReluDense,
]
decoder/make_layer_stack.layers = [
    @mesh_tensorflow.transformer.transformer_layers.SelfAttention,
    @mesh_tensorflow.transformer.transformer_layers.EncDecAttention,
    @mesh_tensorflow.transformer.transformer_layers.DenseReluDense,
]
transformer.LayerStack.sublayers_initial = [@transformer.sublayer_dropout]
transformer.LayerStack.sublayers_per_layer = [
    @transformer.sublayer_rms_norm,
    @transformer.sublayer_call_layer,
    @transformer.sublayer_dropout,
    @transformer.sublayer_residual,
]
transformer.LayerStack.sublayers_final = [@transformer.sublayer_rms_norm, @transformer.sublayer_dropout]
LayerStack.dropout_rate = None
LayerStack.norm_epsilon = None
make_layer_stack.num_layers = %num_layers
decoder/make_layer_stack.num_layers = {decoder_layers}
Unitransformer.d_model = %d_model
Unitransformer.shared_embedding_and_softmax_weights = True
Unitransformer.positional_embedding = False
Unitransformer.max_length = 512
DenseReluDense.hidden_size = %d_ff
DenseReluDense.dropout_rate = %dropout_rate
SelfAttention.num_heads = %num_heads
SelfAttention.key_value_size = %d_kv
SelfAttention.dropout_rate = %dropout_rate
SelfAttention.relative_attention_type = "bias_shared"
SelfAttention.relative_attention_num_buckets = {buckets}
transformer.sublayer_dropout.dropout_rate = %dropout_rate
AdafactorOptimizer.min_dim_size_to_factor = 16
"""
V1_1 = """
DenseReluDense.activation = ["gelu", "linear"]
Unitransformer.shared_embedding_and_softmax_weights = False
"""
UNFACTORED = """
AdafactorOptimizer.factored = False
"""
# Sizes small enough to build in seconds; the decoder has another layer count than the encoder, the
# vocabulary (100) is padded to Mesh TensorFlow's multiple of 128, and Adafactor factors every weight
# with two dimensions of 16 or more. "v1.1-unfactored" is wider (most weights over 64 KB) and keeps
# Adafactor's state unfactored: a ``_slot_v`` as large as each weight, half of the checkpoint's bytes.
# "v1.1-bench", the same at about T5-small's widths (some 700 MB), is bench/bench_remote_layouts.py's.
VARIANTS = {
    "v1.0": dict(d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2, decoder_layers=3, buckets=16, vocab=100,
                 gin=""),
    "v1.1": dict(d_model=32, d_ff=48, d_kv=8, num_heads=4, num_layers=2, decoder_layers=3, buckets=8, vocab=100,
                 gin=V1_1),
    "v1.1-unfactored": dict(d_model=256, d_ff=512, d_kv=64, num_heads=4, num_layers=2, decoder_layers=2, buckets=8,
                            vocab=100, gin=V1_1 + UNFACTORED),
    "v1.1-bench": dict(d_model=512, d_ff=2048, d_kv=64, num_heads=8, num_layers=6, decoder_layers=6, buckets=32,
                       vocab=32000, gin=V1_1 + UNFACTORED),
}


def install_shim():
    """The four patches that let Mesh TensorFlow 0.1.21 run on TensorFlow 2.21 (see the module's docstring)."""
    from tensorflow.python.framework import ops, tensor_conversion_registry

    estimator = types.ModuleType("tensorflow.compat.v1.estimator")
    estimator.ModeKeys = types.SimpleNamespace(TRAIN="train", EVAL="eval", PREDICT="infer")
    estimator.SessionRunHook = type("SessionRunHook", (), {})
    estimator.CheckpointSaverListener = type("CheckpointSaverListener", (), {})
    v1.estimator = estimator
    sys.modules["tensorflow.compat.v1.estimator"] = estimator
    ops.register_tensor_conversion_function = tensor_conversion_registry.register_tensor_conversion_function
    spec = importlib.util.find_spec("mesh_tensorflow")
    package = types.ModuleType("mesh_tensorflow.transformer")
    package.__path__ = [os.path.join(os.path.dirname(spec.origin), "transformer")]
    sys.modules["mesh_tensorflow.transformer"] = package
    v1.disable_eager_execution()


def _configure(variant, gin_file=None):
    import gin

    sizes = VARIANTS[variant]
    gin.clear_config()
    gin.parse_config(SIZES.format(**sizes) + MODEL.format(**sizes) + sizes["gin"])
    if gin_file is not None:
        gin.parse_config_file(gin_file)


def build(variant, train=False, gin_file=None):
    """The gin-configured bitransformer in the default graph, lowered on a mesh of shape [] on one CPU;
    ``gin_file``'s bindings, if given, over the variant's.

    Returns ({"logits", "encoder_output"}: tf.Tensor, train op or None)."""
    install_shim()
    import mesh_tensorflow as mtf
    from mesh_tensorflow.transformer import transformer, transformer_layers  # noqa: F401 (registers with gin)

    _configure(variant, gin_file)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    batch = mtf.Dimension("batch", INPUTS.shape[0])
    inputs = mtf.import_tf_tensor(mesh, tf.constant(INPUTS), [batch, mtf.Dimension("length", INPUTS.shape[1])])
    targets = mtf.import_tf_tensor(mesh, tf.constant(TARGETS), [batch, mtf.Dimension("length", TARGETS.shape[1])])
    vocab = VARIANTS[variant]["vocab"]  # in code, not gin, as T5's runs pass it
    model = transformer.make_bitransformer(input_vocab_size=vocab, output_vocab_size=vocab)
    mode = "train" if train else "infer"
    logits, loss = model.call_simple(inputs=inputs, targets=targets, compute_loss=True, mode=mode)
    # the encoder again, alone: its variables (and the shared embedding) are found by name, not made anew
    with v1.variable_scope("shared"):
        embedding = transformer.get_vocab_embedding_cls()(mesh, model.encoder.input_vocab_dim, model.encoder.model_dim,
                                                          mtf.VariableDType(tf.float32), name="embedding",
                                                          ensemble_dim=None)
    encoder_output, _ = model.encoder.call_simple(inputs, None, False, mode=mode, sequence_id=mtf.minimum(inputs, 1),
                                                  shared_params={"embedding": embedding})
    update_ops = []
    if train:
        gradients = mtf.gradients([loss], [variable.outputs[0] for variable in graph.trainable_variables])
        update_ops = mtf.optimize.AdafactorOptimizer().apply_grads(gradients, graph.trainable_variables)
    lowering = mtf.Lowering(graph, {mesh: mtf.placement_mesh_impl.PlacementMeshImpl([], {}, [""])}, autostack=False)
    outputs = {"logits": lowering.export_to_tf_tensor(logits),
               "encoder_output": lowering.export_to_tf_tensor(encoder_output)}
    train_op = tf.group([lowering.lowered_operation(op) for op in update_ops]) if train else None
    return outputs, train_op


def save(variant, out_dir):
    """One Adafactor step, then random weights (so no value is its initializer's); a plain Saver's
    checkpoint model.ckpt-1 with Adafactor's state and the step, operative_config.gin, and the outputs."""
    import gin

    rng = np.random.default_rng(sorted(VARIANTS).index(variant) + 10)
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        _, train_op = build(variant, train=True)
        with tf.control_dependencies([train_op]):
            train_op = v1.assign_add(step, 1)
        weights = [variable for variable in v1.global_variables() if "_slot_" not in variable.name
                   and variable is not step]
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train_op)
            for variable in weights:
                value = sess.run(variable)
                variable.load(value + rng.normal(0, 0.05, value.shape).astype(value.dtype), sess)
            v1.train.Saver().save(sess, os.path.join(out_dir, "model.ckpt"), global_step=step)
        with open(os.path.join(out_dir, "operative_config.gin"), "w") as handle:
            handle.write(gin.operative_config_str())
    # the outputs of the inference graph, restored from the checkpoint
    run_graph(variant, os.path.join(out_dir, "model.ckpt-1"), os.path.join(out_dir, "outputs.npz"))


def run_graph(variant, checkpoint, out, gin_file=None):
    """Restore ``checkpoint`` by name into the inference graph (configured by ``gin_file`` too, if given)
    and save its outputs."""
    with tf.Graph().as_default():
        outputs, _ = build(variant, gin_file=gin_file)
        with v1.Session() as sess:
            v1.train.Saver().restore(sess, checkpoint)
            np.savez(out, **sess.run(outputs))


if __name__ == "__main__":
    command, variant, *arguments = sys.argv[1:]
    {"save": save, "run": run_graph}[command](variant, *arguments)
