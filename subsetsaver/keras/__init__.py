"""The Keras room: TF2 / Keras 3 models and optimizers in eager mode.

``save_npz`` / ``restore_npz`` (:mod:`.npz`) write and read portable ``.npz`` files of a
model's and optimizer's variables; ``load_checkpoint`` (:mod:`.load`) puts a TensorFlow
checkpoint (TF1 name-based, or tf.keras object-based) into a Keras 3 model and its
optimizer, paired by name (:mod:`.matching`, with remap rules) or by creation order;
``convert_checkpoint`` (:mod:`.convert`) writes such a checkpoint as a TF2 object-based one
through the Keras 3 model a function of the user's builds; ``convert_weights`` (:mod:`.weights_h5`) writes
it as Keras 3's own ``.weights.h5``, which ``model.load_weights`` reads on any backend. ``legacy_names``: the
weights tf_keras names otherwise than Keras 3 (``depthwise_kernel``), read under either name.
``variables`` names the model's weights and the optimizer's slots; ``checkpoint_side``
says what each checkpoint tensor is (weight, slot of which kind, step).

This room imports ``errors``, ``tf_internals``, ``formats``, ``catalog``, ``selectors``,
``planning`` and ``portable``. Other rooms use the names in ``__all__``.

Example::

    import subsetsaver as ss
    ss.keras.load_checkpoint(model, 'train/', optimizer, remap={'conv_1/w': 'conv/kernel'}).iterations
    # 3000
"""

from ..lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".convert", "ModelConvertReport", "convert_checkpoint", "import_builder"),
    **names(".load", "MATCHES", "CheckpointLoadReport", "load_checkpoint"),
    **names(".npz", "restore_npz", "save_npz"),
    **names(".weights_h5", "convert_weights"),
})

__all__ = [
    "MATCHES",
    "CheckpointLoadReport",
    "ModelConvertReport",
    "convert_checkpoint",
    "convert_weights",
    "import_builder",
    "load_checkpoint",
    "restore_npz",
    "save_npz",
]
