"""Leaving TensorFlow: layout maps from one model family's checkpoint layout to another library's.

A map is a JSON data file (``layouts/maps/NAME.json``, shipped: ``bert-to-hf``, ``albert-to-hf``,
``gpt2-to-hf``, ``t5-to-hf``, ``electra-to-hf`` and their reverses ``hf-to-bert``, ``hf-to-albert``,
``hf-to-gpt2``, ``hf-to-t5``, ``hf-to-electra``; tf_keras vision models into timm:
``keras-efficientnet-to-timm``, ``keras-mobilenetv3-large-to-timm``) of renames, per-tensor transforms, what
to drop by role, and the config mapping, with variants for a checkpoint that holds several models (ELECTRA's
discriminator and generator). ``maps`` parses one, ``transforms`` knows the shapes, ``engine`` plans and
streams, ``configs`` maps config files (``gin_config`` reads a Mesh TensorFlow run's
``operative_config.gin``, ``electra_config`` an ELECTRA run's hparams or its shapes), ``members`` finds which
member of a family a checkpoint is, ``readings`` reads config values off small tensors, ``twins`` knows the
families a target library has no exact twin of, ``output`` writes, ``convert`` ties them together
(:func:`convert` is ``ss.convert``).

This room imports only ``errors``, ``formats``, ``catalog`` and ``selectors``: no TensorFlow.

Example::

    from subsetsaver import layouts
    layouts.convert("bert/bert_model.ckpt", "bert-hf", map="bert-to-hf").files
    # ('bert-hf/model.safetensors', 'bert-hf/config.json')
"""

from ..lazy_exports import exports, names

__getattr__, __dir__ = exports(__name__, {
    **names(".convert", "LayoutReport", "convert"),
    **names(".engine", "ConversionPlan", "plan_conversion"),
    **names(".maps", "LayoutMap", "load_map", "parse_map", "shipped_maps"),
    **names(".output", "TensorStream", "write_huggingface_weights", "write_safetensors", "write_tf_checkpoint"),
})

__all__ = ["ConversionPlan", "LayoutMap", "LayoutReport", "TensorStream", "convert", "load_map", "parse_map",
           "plan_conversion", "shipped_maps", "write_huggingface_weights", "write_safetensors", "write_tf_checkpoint"]
