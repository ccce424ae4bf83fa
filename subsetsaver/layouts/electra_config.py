"""The architecture of one model of a google-research/electra pre-training checkpoint, found without TensorFlow.

ELECTRA runs write no config file: ``run_pretraining.py`` builds the model from its hyperparameters
(``--hparams``: ``model_size``, ``vocab_size``, ``embedding_size``, ``generator_hidden_size``,
``generator_layers``, ``untied_generator_embeddings``, ``model_hparam_overrides``, ...) by the rules of
``configure_pretraining.py`` and ``training_utils.get_bert_config``, and the generator's by
``get_generator_config``. :func:`read_electra_config` gives the flat config of the discriminator or the
generator (``hidden_size``, ``embedding_size``, ``num_attention_heads``, ...) from one of:

- a model config, used as it is: Hugging Face's ``config.json`` of that model, or the
  ``electra_config.json`` that ``hf-to-electra`` writes (ELECTRA's ``BertConfig`` keys and ``embedding_size``);
- the run's hyperparameters (a JSON object with none of ``hidden_size``'s kind), computed as ELECTRA's code
  computes them;
- nothing: the sizes read off the checkpoint's tensors, and ``num_attention_heads`` by ELECTRA's rule
  (``max(1, hidden_size // 64)``), the one number the shapes do not determine.

:func:`check_electra_run` refuses two kinds of run of the same code first, by their scopes: a fine-tuned checkpoint
(``run_finetuning.py``: ``electra/...`` and its task heads under ``task_specific/``, no pre-training heads),
and the generator of an Electric run (``electric_objective``: a two-tower cloze model, ``generator_ltr/``,
``generator_rtl/`` and ``cloze_predictions/``, which no ``ElectraForMaskedLM`` computes). Electric's
discriminator has ELECTRA's names and shapes and converts.

Example::

    >>> read_electra_config(None, {"electra/embeddings/word_embeddings": ((100, 32), "float32"), ...},
    ...                     "discriminator")                                   # doctest: +SKIP
    ({'vocab_size': 100, 'embedding_size': 32, 'hidden_size': 128, ...}, "the checkpoint's shapes ...")
"""

from __future__ import annotations

import re

from ..errors import LayoutMapError

SIZES = {"small": (256, 12, 128), "base": (768, 12, 768), "large": (1024, 24, 1024)}
"""model_size -> (hidden_size, num_hidden_layers, embedding_size), as training_utils.get_bert_config and
configure_pretraining.py set them."""
BERT_DEFAULTS = {"hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                 "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}
"""modeling.BertConfig's defaults, which get_bert_config leaves as they are."""
DERIVED = "the checkpoint's shapes (num_attention_heads = max(1, hidden_size // 64), ELECTRA's default)"
_LAYER = re.compile(r"^(?:[^/]+)/encoder/layer_(\d+)/")
_FIX = "give the run's --hparams JSON or the model's config.json with --config"
ELECTRIC_SCOPES = ("generator_ltr", "generator_rtl", "cloze_predictions")
"""Electric's generator (run_pretraining.TwoTowerClozeTransformer and _get_cloze_outputs)."""
_ELECTRIC = ("Electric's generator is a two-tower cloze model (generator_ltr, generator_rtl, cloze_predictions), "
             "which ElectraForMaskedLM does not compute")
_ELECTRIC_FIX = "convert its discriminator (--variant discriminator), which has ELECTRA's layout"


def read_electra_config(data, specs, variant) -> tuple:
    """(flat config of the ``variant`` model, what it came from) for ``data`` (a config file's JSON object,
    or None) and ``specs`` (checkpoint name -> (shape, dtype))."""
    if data is None:
        return _from_shapes(specs, variant), DERIVED
    if "hidden_size" in data:
        return dict(data), "model config"
    return _from_hparams(data, variant), "hparams"


def _from_hparams(hparams, variant) -> dict:
    """The model run_pretraining.py builds from ``hparams`` (configure_pretraining.PretrainingConfig's keys)."""
    size = hparams.get("model_size", "small")
    if size not in SIZES:
        raise LayoutMapError(f"the ELECTRA hparams say \"model_size\": {str(size)[:40]!r}, which ELECTRA's code "
                             "does not know", fix="use small, base or large, as run_pretraining.py does")
    if hparams.get("electric_objective", False):  # truthy, as run_pretraining.py tests it
        if variant == "generator":
            raise LayoutMapError(f"the ELECTRA hparams say \"electric_objective\": "
                                 f"{str(hparams['electric_objective']).lower()[:40]}: {_ELECTRIC}", fix=_ELECTRIC_FIX)
        required = (("uniform_generator", False), ("untied_generator", True))
    else:
        required = (("electra_objective", True), ("electric_objective", False), ("uniform_generator", False),
                    ("two_tower_generator", False), ("untied_generator", True))
    for key, expected in required:
        if hparams.get(key, expected) != expected:
            raise LayoutMapError(f"the ELECTRA hparams say \"{key}\": {str(hparams[key]).lower()}: this run has no "
                                 "separate discriminator and generator transformers",
                                 fix="convert a run trained with ELECTRA's default objective and generator")
    hidden, layers, embedding = SIZES[size]
    overrides = hparams.get("model_hparam_overrides", {})
    if not isinstance(overrides, dict):
        raise LayoutMapError("the ELECTRA hparams' \"model_hparam_overrides\" is not a JSON object", fix=_FIX)
    bert = {**BERT_DEFAULTS, "hidden_size": hidden, "num_hidden_layers": layers,
            "vocab_size": hparams.get("vocab_size", 30522), **overrides}
    bert.update(num_attention_heads=max(1, _integer(bert, "hidden_size") // 64),
                intermediate_size=4 * _integer(bert, "hidden_size"))
    bert.update(overrides)
    if hparams.get("debug", False):
        bert.update(num_hidden_layers=3, hidden_size=144, intermediate_size=144 * 4, num_attention_heads=4)
    embedding = hparams.get("embedding_size", embedding)
    bert["embedding_size"] = _integer(bert, "hidden_size") if embedding is None else embedding
    if variant != "generator":
        return bert
    fraction = _fraction(hparams, "generator_hidden_size", 0.33333 if size == "base" else 0.25)
    generator = dict(bert)
    generator["hidden_size"] = int(round(_integer(bert, "hidden_size") * fraction))
    generator["num_hidden_layers"] = int(round(_integer(bert, "num_hidden_layers")
                                               * _fraction(hparams, "generator_layers", 1.0)))
    generator["intermediate_size"] = 4 * generator["hidden_size"]
    generator["num_attention_heads"] = max(1, generator["hidden_size"] // 64)
    if hparams.get("untied_generator_embeddings", False):
        generator["embedding_size"] = generator["hidden_size"]
    return generator


def check_electra_run(specs, variant):
    """Refuse a fine-tuned checkpoint, and an Electric run's generator, by the scopes they hold (``specs``:
    checkpoint name -> (shape, dtype)), before the tensors are matched to the map's rules."""
    heads = sorted({"/".join(name.split("/")[:2]) for name in specs if name.startswith("task_specific/")})
    if heads:
        shown = ", ".join(heads[:3]) + (f" and {len(heads) - 3} more" if len(heads) > 3 else "")
        raise LayoutMapError(f"this ELECTRA checkpoint is fine-tuned: it holds run_finetuning.py's task heads "
                             f"({shown}), which this map does not convert (it reads pre-training "
                             "checkpoints)", fix="convert the pre-training checkpoint the fine-tuning started from "
                             "(run_finetuning.py's init_checkpoint)")
    if variant == "generator" and any(name.split("/")[0] in ELECTRIC_SCOPES for name in specs):
        raise LayoutMapError(f"this ELECTRA checkpoint is an Electric run: {_ELECTRIC}", fix=_ELECTRIC_FIX)


def _from_shapes(specs, variant) -> dict:
    scope = "generator" if variant == "generator" else "electra"
    embeddings = "generator/embeddings" if variant == "generator" and \
        "generator/embeddings/word_embeddings" in specs else "electra/embeddings"
    vocab_size, embedding_size = _shape(specs, f"{embeddings}/word_embeddings", 2)
    hidden_size = _shape(specs, f"{scope}/encoder/layer_0/attention/self/query/kernel", 2)[1]
    layers = [int(found.group(1)) for name in specs if name.startswith(f"{scope}/")
              and (found := _LAYER.match(name))]
    return {**BERT_DEFAULTS, "vocab_size": vocab_size, "embedding_size": embedding_size, "hidden_size": hidden_size,
            "num_hidden_layers": max(layers) + 1, "num_attention_heads": max(1, hidden_size // 64),
            "intermediate_size": _shape(specs, f"{scope}/encoder/layer_0/intermediate/dense/kernel", 2)[1],
            "max_position_embeddings": _shape(specs, f"{embeddings}/position_embeddings", 2)[0],
            "type_vocab_size": _shape(specs, f"{embeddings}/token_type_embeddings", 2)[0]}


def _shape(specs, name, rank):
    shape = tuple(specs[name][0]) if name in specs else None
    if shape is None or len(shape) != rank:
        found = "has no" if shape is None else f"has {list(shape)} for"
        raise LayoutMapError(f"this ELECTRA checkpoint {found} '{name}', which its config is read off",
                             fix=f"convert a whole ELECTRA pre-training checkpoint, or {_FIX}")
    return shape


def _integer(config, key):
    value = config.get(key)
    if type(value) is not int or value < 1:
        raise LayoutMapError(f"the ELECTRA hparams give \"{key}\": {str(value)[:40]}, not a positive integer",
                             fix=_FIX)
    return value


def _fraction(hparams, key, default):
    value = hparams.get(key, default)
    if type(value) not in (int, float) or not 0 < value <= 1:
        raise LayoutMapError(f"the ELECTRA hparams give \"{key}\": {str(value)[:40]}, not a fraction in (0, 1]",
                             fix=_FIX)
    return value
