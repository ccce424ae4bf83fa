"""electra-to-hf and hf-to-electra against the original code: ELECTRA pre-training runs (discriminator and
generator) built by google-research/electra's own TF1 code (``tests/electra_original.py``, in a subprocess:
graph mode and a shim for TensorFlow 2.21), one step of its AdamWeightDecayOptimizer, saved with a plain
Saver; converted without TensorFlow; loaded by ``transformers`` (ElectraForPreTraining, ElectraForMaskedLM)
and compared on the same input ids; converted back and restored by ELECTRA's code; an Electric run's
discriminator the same way. Then the variants, the config's three sources, the coverage and the refused runs
(Electric's generator, fine-tuned checkpoints) on small checkpoints written without TensorFlow.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver import catalog, layouts
from subsetsaver.formats import safetensors as safetensors_file
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.layouts.electra_config import DERIVED
from subsetsaver.selectors import parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from electra_original import INPUT_IDS, INPUT_MASK, SEGMENT_IDS  # noqa: E402

CHECKPOINT = "model.ckpt-1"
COMMON = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "initializer_range": 0.02, "layer_norm_eps": 1e-12, "model_type": "electra", "pad_token_id": 0,
          "position_embedding_type": "absolute", "tie_word_embeddings": True}
EXPECTED_CONFIGS = {
    ("small", "discriminator"): {**COMMON, "architectures": ["ElectraForPreTraining"], "vocab_size": 101,
                                 "embedding_size": 32, "hidden_size": 128, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "intermediate_size": 512, "max_position_embeddings": 24,
                                 "type_vocab_size": 2},
    ("small", "generator"): {**COMMON, "architectures": ["ElectraForMaskedLM"], "vocab_size": 101, "embedding_size": 32,
                             "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 1,
                             "intermediate_size": 256, "max_position_embeddings": 24, "type_vocab_size": 2},
    ("base", "discriminator"): {**COMMON, "architectures": ["ElectraForPreTraining"], "vocab_size": 99,
                                "embedding_size": 64, "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 256, "max_position_embeddings": 16,
                                "type_vocab_size": 3},
    ("base", "generator"): {**COMMON, "architectures": ["ElectraForMaskedLM"], "vocab_size": 99, "embedding_size": 32,
                            "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 1,
                            "intermediate_size": 128, "max_position_embeddings": 16, "type_vocab_size": 3},
}
BAR = 1e-5
"""The comparison's bar (float32), as for the other families."""
OUTPUTS = {"discriminator": "discriminator_logits", "generator": "generator_logits"}
CASES = [(case, variant) for case in ("small", "base") for variant in ("discriminator", "generator")]


def _electra(*arguments):
    """Run tests/electra_original.py in a subprocess (graph mode, the shim, oneDNN's kernels off)."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "electra_original.py"), *arguments], env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """case -> directory with ELECTRA's checkpoint (adam_m, adam_v, the step), hparams.json and the outputs."""
    made = {}

    def get(case):
        for package in ("arabert", "tf_slim", "tensorflow"):
            if importlib.util.find_spec(package) is None:
                pytest.skip(f"ELECTRA's original code needs {package}: pip install -e '.[test]'")
        if case not in made:
            directory = tmp_path_factory.mktemp(case)
            _electra("save", case, str(directory))
            made[case] = directory
        return made[case]

    return get


def _config_of(case, source):
    """The small run's config is read off its shapes (its head counts follow ELECTRA's rule); the base run
    overrides num_attention_heads, which only its hparams say."""
    return None if case == "small" else source / "hparams.json"


def _logits(model_class, directory):
    import torch

    model, info = model_class.from_pretrained(str(directory), output_loading_info=True)
    assert {key: sorted(value) for key, value in info.items()} == {
        "missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []}
    with torch.no_grad():
        return model.eval()(input_ids=torch.tensor(INPUT_IDS.astype(np.int64)),
                            attention_mask=torch.tensor(INPUT_MASK.astype(np.int64)),
                            token_type_ids=torch.tensor(SEGMENT_IDS.astype(np.int64))).logits.numpy()


def _max_difference(expected, actual):
    assert expected.shape == actual.shape
    return float(np.abs(expected.astype(np.float64) - actual.astype(np.float64)).max())


def _transformers():
    pytest.importorskip("torch", reason="optional check: PyTorch is not installed")
    return pytest.importorskip("transformers", reason="optional check: transformers is not installed")


@pytest.mark.parametrize("case, variant", CASES, ids=[f"{case}-{variant}" for case, variant in CASES])
def test_transformers_computes_what_electras_code_computes(case, variant, saved, tmp_path):
    transformers = _transformers()
    source = saved(case)
    config = _config_of(case, source)
    report = ss.convert(source / CHECKPOINT, tmp_path / "hf", map="electra-to-hf", variant=variant, config=config)
    assert (report.variant, report.config) == (variant, DERIVED if config is None else str(config))
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
    with open(tmp_path / "hf" / "config.json") as handle:
        assert json.load(handle) == EXPECTED_CONFIGS[case, variant]
    model_class = transformers.ElectraForPreTraining if variant == "discriminator" else transformers.ElectraForMaskedLM
    expected = np.load(source / "outputs.npz")[OUTPUTS[variant]]
    assert _max_difference(expected, _logits(model_class, tmp_path / "hf")) <= BAR


def test_a_copied_map_with_berts_tanh_gelu_fails_the_comparison(saved, tmp_path):
    """The trap of copying bert-to-hf: "gelu" -> "gelu_new" loads, and the comparison refuses it."""
    transformers = _transformers()
    source = saved("small")
    with open(layouts.load_map("electra-to-hf").path) as handle:
        data = json.load(handle)
    for variant in data["variants"].values():
        variant["math"]["activation"]["values"]["gelu"] = "gelu_new"
    with open(tmp_path / "copied.json", "w") as handle:
        json.dump(data, handle)
    expected = np.load(source / "outputs.npz")
    for variant, model_class in (("discriminator", transformers.ElectraForPreTraining),
                                 ("generator", transformers.ElectraForMaskedLM)):
        ss.convert(source / CHECKPOINT, tmp_path / variant, map=tmp_path / "copied.json", variant=variant)
        assert _max_difference(expected[OUTPUTS[variant]], _logits(model_class, tmp_path / variant)) > BAR


def test_round_trip_restores_in_electras_code_with_the_same_outputs(saved, tmp_path):
    """Each model back to ELECTRA's names; the two checkpoints together restore the whole inference graph."""
    source = saved("small")
    written = []
    for variant in ("discriminator", "generator"):
        ss.convert(source / CHECKPOINT, tmp_path / f"hf-{variant}", map="electra-to-hf", variant=variant)
        report = ss.convert(tmp_path / f"hf-{variant}", tmp_path / variant, map="hf-to-electra", variant=variant)
        assert (report.variant, report.dropped) == (variant, ())
        assert sorted(os.listdir(tmp_path / variant)) == [
            "checkpoint", "electra_config.json", "model.ckpt.data-00000-of-00001", "model.ckpt.index"]
        with open(tmp_path / variant / "electra_config.json") as handle:
            expected = {key: value for key, value in EXPECTED_CONFIGS["small", variant].items()
                        if key not in COMMON or key in ("hidden_act", "hidden_dropout_prob",
                                                        "attention_probs_dropout_prob", "initializer_range")}
            assert json.load(handle) == {key: value for key, value in expected.items() if key != "architectures"}
        written.append(str(tmp_path / variant / "model.ckpt"))
    with tf_bundle.BundleReader(source / CHECKPOINT) as before:
        weights = [name for name in before.names if not name.endswith(("/adam_m", "/adam_v")) and name != "global_step"]
        held = {}
        for path in written:
            with tf_bundle.BundleReader(path) as after:
                for name in after.names:
                    assert before.read(name).tobytes() == after.read(name).tobytes(), name
                    held.setdefault(name, path)
        assert sorted(held) == sorted(weights)
    _electra("run", "small", str(tmp_path / "outputs.npz"), *written)
    expected, actual = np.load(source / "outputs.npz"), np.load(tmp_path / "outputs.npz")
    for key in expected.files:
        assert np.array_equal(expected[key], actual[key]), key


def test_the_config_from_hparams_a_model_config_or_the_shapes_is_the_same(saved, tmp_path):
    source = saved("small")
    for variant in ("discriminator", "generator"):
        made = {}
        for how, config in (("shapes", None), ("hparams", source / "hparams.json")):
            report = ss.convert(source / CHECKPOINT, tmp_path / how / variant, map="electra-to-hf", variant=variant,
                                config=config)
            assert report.config == (DERIVED if config is None else str(config))
            with open(tmp_path / how / variant / "config.json") as handle:
                made[how] = json.load(handle)
        hf_config = tmp_path / "hparams" / variant / "config.json"  # Hugging Face's config.json of the same model
        ss.convert(source / CHECKPOINT, tmp_path / "hf" / variant, map="electra-to-hf", variant=variant, config=hf_config)
        with open(tmp_path / "hf" / variant / "config.json") as handle:
            made["hf"] = json.load(handle)
        assert made["shapes"] == made["hparams"] == made["hf"] == EXPECTED_CONFIGS["small", variant]


def test_the_shapes_do_not_say_an_overridden_head_count_and_the_report_says_so(saved, tmp_path):
    source = saved("base")
    report = ss.convert(source / CHECKPOINT, tmp_path / "hf", map="electra-to-hf", dry_run=True)
    assert report.config == ("the checkpoint's shapes (num_attention_heads = max(1, hidden_size // 64), "
                             "ELECTRA's default)")
    ss.convert(source / CHECKPOINT, tmp_path / "hf", map="electra-to-hf")
    with open(tmp_path / "hf" / "config.json") as handle:
        assert json.load(handle) == {**EXPECTED_CONFIGS["base", "discriminator"], "num_attention_heads": 1}


def test_optimizer_slots_and_the_step_are_dropped_by_role(saved, tmp_path):
    source = saved("small")
    checkpoint = catalog.file_catalog(str(source / CHECKPOINT))
    names = list(checkpoint.ordered_names)
    slots = sorted(name for name in names if name.endswith(("/adam_m", "/adam_v")))
    assert sorted(parse("slots()").names(checkpoint)) == slots and len(slots) == 2 * 82
    assert parse("global_step()").names(checkpoint) == ["global_step"]
    report = ss.convert(source / CHECKPOINT, tmp_path / "disc", map="electra-to-hf")
    generator = [name for name in names if name.startswith(("generator/", "generator_predictions/"))
                 and name not in slots]
    assert list(report.dropped) == sorted(slots + generator + ["global_step"]) and len(generator) == 39
    assert len(report.rows) == 82 - 39 == 43
    report = ss.convert(source / CHECKPOINT, tmp_path / "gen", map="electra-to-hf", variant="generator")
    discriminator = [name for name in names if name.startswith(("electra/encoder/", "electra/embeddings_project/",
                                                                "discriminator_predictions/")) and name not in slots]
    assert list(report.dropped) == sorted(slots + discriminator + ["global_step"]) and len(report.rows) == 44
    specs, metadata = safetensors_file.specs(tmp_path / "gen" / "model.safetensors")
    assert metadata == {"format": "pt"}
    assert specs["electra.embeddings_project.weight"] == ((64, 32), "float32")
    assert specs["generator_predictions.dense.weight"] == ((32, 64), "float32")
    assert specs["generator_lm_head.bias"] == ((101,), "float32")


def test_untied_generator_embeddings_are_the_generators_and_the_shared_ones_are_dropped(saved, tmp_path):
    source = saved("base")
    report = ss.convert(source / CHECKPOINT, tmp_path / "gen", map="electra-to-hf", variant="generator",
                        config=source / "hparams.json", dry_run=True)
    rows = {target: (source_name, shape) for source_name, target, _, shape in report.rows}
    assert rows["electra.embeddings.word_embeddings.weight"] == ("generator/embeddings/word_embeddings", (99, 32))
    assert "electra.embeddings_project.weight" not in rows
    shared = ["electra/embeddings/LayerNorm/beta", "electra/embeddings/LayerNorm/gamma",
              "electra/embeddings/position_embeddings", "electra/embeddings/token_type_embeddings",
              "electra/embeddings/word_embeddings"]
    assert set(shared) <= set(report.dropped)


def test_untied_generator_embeddings_go_back_under_the_generators_scope(saved, tmp_path):
    """The "base" run's generator has its own embeddings (untied_generator_embeddings): --variant
    generator-untied-embeddings writes them under generator/embeddings, where ELECTRA's code reads them, and
    both models restore with the same outputs; the default generator variant writes the shared
    electra/embeddings, as the discriminator's, which that run's generator never reads."""
    source = saved("base")
    hparams = source / "hparams.json"
    ss.convert(source / CHECKPOINT, tmp_path / "hf-discriminator", map="electra-to-hf", config=hparams)
    ss.convert(source / CHECKPOINT, tmp_path / "hf-generator", map="electra-to-hf", variant="generator",
               config=hparams)
    report = ss.convert(tmp_path / "hf-generator", tmp_path / "generator", map="hf-to-electra",
                        variant="generator-untied-embeddings")
    assert (report.variant, report.expected, report.dropped) == ("generator-untied-embeddings", 26, ())
    ss.convert(tmp_path / "hf-discriminator", tmp_path / "discriminator", map="hf-to-electra")
    with open(tmp_path / "generator" / "electra_config.json") as handle:
        assert json.load(handle) == {"vocab_size": 99, "embedding_size": 32, "hidden_size": 32, "num_hidden_layers": 1,
                                     "num_attention_heads": 1, "intermediate_size": 128, "hidden_act": "gelu",
                                     "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                                     "max_position_embeddings": 16, "type_vocab_size": 3, "initializer_range": 0.02}
    generator = str(tmp_path / "generator" / "model.ckpt")
    with tf_bundle.BundleReader(source / CHECKPOINT) as before, tf_bundle.BundleReader(generator) as after:
        assert sorted(after.names) == sorted(
            name for name in before.names if name.startswith(("generator/", "generator_predictions/"))
            and not name.endswith(("/adam_m", "/adam_v")))
        for name in after.names:
            assert before.read(name).tobytes() == after.read(name).tobytes(), name
    _electra("run", "base", str(tmp_path / "outputs.npz"), generator, str(tmp_path / "discriminator" / "model.ckpt"))
    expected, actual = np.load(source / "outputs.npz"), np.load(tmp_path / "outputs.npz")
    for key in expected.files:
        assert _max_difference(expected[key], actual[key]) <= BAR, key


# Small checkpoints with ELECTRA's names, written without TensorFlow: variants, configs, coverage.

def electra_checkpoint(directory, hidden=8, embedding=4, generator_hidden=4, layers=1, vocab=11, project=None,
                       generator=True):
    """A pre-training checkpoint's names and shapes (a generator sharing the embeddings), random values."""
    rng = np.random.default_rng(5)
    shapes = {f"electra/embeddings/{name}": shape for name, shape in (
        ("word_embeddings", (vocab, embedding)), ("position_embeddings", (6, embedding)),
        ("token_type_embeddings", (2, embedding)), ("LayerNorm/gamma", (embedding,)), ("LayerNorm/beta", (embedding,)))}
    shapes.update({"discriminator_predictions/dense/kernel": (hidden, hidden), "discriminator_predictions/dense/bias":
                   (hidden,), "discriminator_predictions/dense_1/kernel": (hidden, 1),
                   "discriminator_predictions/dense_1/bias": (1,), "global_step": ()})
    models = [("electra", hidden)] + ([("generator", generator_hidden)] if generator else [])
    for scope, width in models:
        if (embedding != width) if project is None else project:
            shapes.update({f"{scope}/embeddings_project/kernel": (embedding, width),
                           f"{scope}/embeddings_project/bias": (width,)})
        for layer in range(layers):
            prefix = f"{scope}/encoder/layer_{layer}"
            for part, shape in (("attention/self/query", (width, width)), ("attention/self/key", (width, width)),
                                ("attention/self/value", (width, width)), ("attention/output/dense", (width, width)),
                                ("intermediate/dense", (width, 4 * width)), ("output/dense", (4 * width, width))):
                shapes.update({f"{prefix}/{part}/kernel": shape, f"{prefix}/{part}/bias": shape[1:]})
            for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
                shapes.update({f"{prefix}/{norm}/gamma": (width,), f"{prefix}/{norm}/beta": (width,)})
    if generator:
        shapes.update({"generator_predictions/dense/kernel": (generator_hidden, embedding),
                       "generator_predictions/dense/bias": (embedding,), "generator_predictions/LayerNorm/gamma":
                       (embedding,), "generator_predictions/LayerNorm/beta": (embedding,),
                       "generator_predictions/output_bias": (vocab,)})
    arrays = {name: (np.int64(1) if name == "global_step" else rng.normal(size=shape).astype(np.float32))
              for name, shape in shapes.items()}
    os.makedirs(directory, exist_ok=True)
    tf_bundle.write(os.path.join(directory, "model.ckpt"), arrays)
    return os.path.join(directory, "model.ckpt")


def refused(checkpoint, out, **options):
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(checkpoint, out, **options)
    assert not os.path.exists(out)
    return str(error.value)


def test_an_unknown_variant_and_a_variant_of_a_map_without_variants_are_refused(tmp_path):
    checkpoint = electra_checkpoint(tmp_path / "electra")
    assert refused(checkpoint, tmp_path / "out", map="electra-to-hf", variant="discriminatr") == (
        "map 'electra-to-hf' has no variant 'discriminatr'; use --variant discriminator or generator "
        "(default: discriminator)")
    assert refused(checkpoint, tmp_path / "out", map="bert-to-hf", variant="generator") == (
        "map 'bert-to-hf' has no variants, so --variant generator does not apply; leave out --variant "
        "(variant= in Python)")


def test_cli_variant_refusals_are_one_line_and_the_dry_run_names_the_variant(tmp_path, run_cli):
    checkpoint = electra_checkpoint(tmp_path / "electra")
    result = run_cli("convert", checkpoint, tmp_path / "out", "--map", "electra-to-hf", "--variant", "gen")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("subsetsaver: error: map 'electra-to-hf' has no variant 'gen'; use --variant "
                             "discriminator or generator (default: discriminator)\n")
    result = run_cli("convert", checkpoint, tmp_path / "out", "--variant", "generator")
    assert result.returncode == 2 and result.stderr.endswith("Error: --variant is for --map NAME (a layout map)\n")
    result = run_cli("convert", checkpoint, tmp_path / "out", "--map", "electra-to-hf", "--variant", "generator",
                     "--dry-run")
    assert result.returncode == 0 and result.stdout.splitlines()[-3:] == [
        "variant generator of map electra-to-hf; config the checkpoint's shapes (num_attention_heads = max(1, "
        "hidden_size // 64), ELECTRA's default)",
        "coverage: 26 tensors the config implies, 26 found, 0 missing, 0 extra; heads: none; loads as ElectraForMaskedLM",
        "26 tensors, 1.4 KB; dropped 23 by the map's \"drop\"; nothing written (--dry-run)"]
    result = run_cli("convert", checkpoint, tmp_path / "out", "--map", "electra-to-hf", "--json")
    report = json.loads(result.stdout)
    assert (report["variant"], report["architecture"], report["config"]) == (
        "discriminator", "ElectraForPreTraining", DERIVED)
    assert not os.path.exists(tmp_path / "out" / "model.safetensors.tmp")


def test_the_projection_is_expected_exactly_when_the_embeddings_are_narrower(tmp_path):
    wide = electra_checkpoint(tmp_path / "wide", hidden=8, embedding=8, generator_hidden=8, project=True)
    assert refused(wide, tmp_path / "out", map="electra-to-hf") == (
        "this ELECTRA (google-research/electra) checkpoint, read as the discriminator, holds 2 tensors the map and "
        "config do not describe: electra/embeddings_project/kernel, electra/embeddings_project/bias; drop the extra "
        "tensors in a copy of the map (its \"drop\"), or give them rules; or convert it as the generator "
        "(--variant generator)")
    narrow = electra_checkpoint(tmp_path / "narrow", hidden=8, embedding=4, generator_hidden=6, project=False)
    assert refused(narrow, tmp_path / "out", map="electra-to-hf", variant="generator") == (
        "this ELECTRA (google-research/electra) checkpoint, read as the generator, lacks 2 tensors the config needs: "
        "generator/embeddings_project/kernel, generator/embeddings_project/bias; convert a whole checkpoint of the "
        "family, or give the config that describes it with --config; or convert it as the discriminator "
        "(--variant discriminator)")


def test_a_generator_of_another_size_than_the_hparams_imply_is_refused_by_shape(tmp_path):
    checkpoint = electra_checkpoint(tmp_path / "electra", hidden=8, embedding=4, generator_hidden=4)
    hparams = {"model_size": "small", "vocab_size": 11, "embedding_size": 4, "generator_hidden_size": 0.25,
               "model_hparam_overrides": {"hidden_size": 8, "num_hidden_layers": 1, "max_position_embeddings": 6}}
    with open(tmp_path / "hparams.json", "w") as handle:
        json.dump(hparams, handle)
    message = refused(checkpoint, tmp_path / "out", map="electra-to-hf", variant="generator",
                      config=tmp_path / "hparams.json")
    assert message == (
        "this ELECTRA (google-research/electra) checkpoint, read as the generator, lacks 2 tensors the config needs: "
        "generator/embeddings_project/kernel, generator/embeddings_project/bias; has 17 tensors of the wrong shape: "
        "generator/encoder/layer_0/attention/self/query/kernel gives electra.encoder.layer.0.attention.self.query.weight "
        "[4, 4] where the config implies [2, 2], generator/encoder/layer_0/attention/self/query/bias gives "
        "electra.encoder.layer.0.attention.self.query.bias [4] where the config implies [2], "
        "generator/encoder/layer_0/attention/self/key/kernel gives electra.encoder.layer.0.attention.self.key.weight "
        "[4, 4] where the config implies [2, 2] and 14 more; convert a whole checkpoint of the family, or give the "
        "config that describes it with --config; or convert it as the discriminator (--variant discriminator)")


def test_a_run_without_a_separate_generator_is_refused_by_its_hparams(tmp_path):
    checkpoint = electra_checkpoint(tmp_path / "electra")
    with open(tmp_path / "hparams.json", "w") as handle:
        json.dump({"model_size": "small", "untied_generator": False}, handle)
    assert refused(checkpoint, tmp_path / "out", map="electra-to-hf", variant="generator",
                   config=tmp_path / "hparams.json") == (
        "the ELECTRA hparams say \"untied_generator\": false: this run has no separate discriminator and generator "
        "transformers; convert a run trained with ELECTRA's default objective and generator")


def test_a_discriminator_alone_has_no_generator_to_convert(tmp_path):
    checkpoint = electra_checkpoint(tmp_path / "electra", generator=False)
    assert refused(checkpoint, tmp_path / "out", map="electra-to-hf", variant="generator") == (
        "this ELECTRA checkpoint has no 'generator/encoder/layer_0/attention/self/query/kernel', which its config is "
        "read off; convert a whole ELECTRA pre-training checkpoint, or give the run's --hparams JSON or the model's "
        "config.json with --config")
    report = ss.convert(checkpoint, tmp_path / "out", map="electra-to-hf")
    assert (report.variant, report.architecture, report.expected) == ("discriminator", "ElectraForPreTraining", 27)


def test_without_the_fallback_the_untied_generator_embeddings_collide(tmp_path):
    """The generator's own embeddings (untied_generator_embeddings) win over the shared ones only by the
    "fallback" rule; without it, two rules write one name and the map is refused."""
    checkpoint = electra_checkpoint(tmp_path / "electra", hidden=8, embedding=8, generator_hidden=4)
    arrays = {name: tf_bundle.BundleReader(checkpoint).read(name) for name in tf_bundle.BundleReader(checkpoint).names}
    rng = np.random.default_rng(6)
    for name, shape in (("word_embeddings", (11, 4)), ("position_embeddings", (6, 4)),
                        ("token_type_embeddings", (2, 4)), ("LayerNorm/gamma", (4,)), ("LayerNorm/beta", (4,))):
        arrays[f"generator/embeddings/{name}"] = rng.normal(size=shape).astype(np.float32)
    for name in ("generator/embeddings_project/kernel", "generator/embeddings_project/bias"):
        arrays.pop(name, None)
    arrays["generator_predictions/dense/kernel"] = rng.normal(size=(4, 4)).astype(np.float32)
    arrays["generator_predictions/dense/bias"] = np.zeros(4, np.float32)
    arrays["generator_predictions/LayerNorm/gamma"] = np.ones(4, np.float32)
    arrays["generator_predictions/LayerNorm/beta"] = np.zeros(4, np.float32)
    os.makedirs(tmp_path / "untied")
    tf_bundle.write(str(tmp_path / "untied" / "model.ckpt"), arrays)
    report = ss.convert(tmp_path / "untied" / "model.ckpt", tmp_path / "out", map="electra-to-hf", variant="generator")
    assert report.expected == 26 and "electra/embeddings/word_embeddings" in report.dropped
    with open(layouts.load_map("electra-to-hf").path) as handle:
        data = json.load(handle)
    for rule in data["variants"]["generator"]["rules"]:
        rule.pop("fallback", None)
    with open(tmp_path / "copied.json", "w") as handle:
        json.dump(data, handle)
    assert refused(tmp_path / "untied" / "model.ckpt", tmp_path / "again", map=tmp_path / "copied.json",
                   variant="generator") == (
        "rule 6 (electra/embeddings/word_embeddings -> electra.embeddings.word_embeddings.weight) writes "
        "'electra.embeddings.word_embeddings.weight', which rule 1 (generator/embeddings/word_embeddings -> "
        "electra.embeddings.word_embeddings.weight) writes too; make the target names of the map unique")


def test_a_generator_directory_converted_back_as_the_discriminator_names_the_other_variant(tmp_path, run_cli):
    checkpoint = electra_checkpoint(tmp_path / "electra", hidden=8, embedding=4, generator_hidden=6)
    ss.convert(checkpoint, tmp_path / "gen-hf", map="electra-to-hf", variant="generator")
    result = run_cli("convert", tmp_path / "gen-hf", tmp_path / "out", "--map", "hf-to-electra")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "subsetsaver: error: this Hugging Face ELECTRA checkpoint, read as the discriminator, lacks 4 tensors the "
        "config needs: discriminator_predictions.dense.weight, discriminator_predictions.dense.bias, "
        "discriminator_predictions.dense_prediction.weight and 1 more; holds 5 tensors the map and config do not "
        "describe: "
        "generator_predictions.dense.weight, generator_lm_head.bias, generator_predictions.dense.bias "
        "and 2 more; convert a whole checkpoint of the family, or give the config that describes it with --config; "
        "drop the extra tensors in a copy of the map (its \"drop\"), or give them rules; or convert it as the "
        "generator or generator-untied-embeddings (--variant generator or --variant generator-untied-embeddings)\n")
    assert not os.path.exists(tmp_path / "out")
    report = ss.convert(tmp_path / "gen-hf", tmp_path / "out", map="hf-to-electra", variant="generator")
    with tf_bundle.BundleReader(checkpoint) as before, tf_bundle.BundleReader(tmp_path / "out" / "model.ckpt") as after:
        assert sorted(after.names) == sorted(name for name in before.names if name.startswith(
            ("electra/embeddings/", "generator/", "generator_predictions/")))
        for name in after.names:
            assert before.read(name).tobytes() == after.read(name).tobytes(), name
    assert (report.variant, report.expected) == ("generator", 28)


def test_a_generator_with_shared_embeddings_is_refused_as_one_with_its_own(tmp_path):
    """Untied generator embeddings are as wide as the generator (ELECTRA builds them with its hidden_size), so a
    generator with a projection has the shared ones: the untied variant refuses it and names the others."""
    checkpoint = electra_checkpoint(tmp_path / "electra", hidden=8, embedding=4, generator_hidden=6)
    ss.convert(checkpoint, tmp_path / "gen-hf", map="electra-to-hf", variant="generator")
    assert refused(tmp_path / "gen-hf", tmp_path / "out", map="hf-to-electra",
                   variant="generator-untied-embeddings") == (
        "this Hugging Face ELECTRA checkpoint, read as the generator-untied-embeddings, holds 2 tensors the map and "
        "config do not describe: electra.embeddings_project.weight, electra.embeddings_project.bias; has 9 tensors of "
        "the wrong shape: electra.embeddings.word_embeddings.weight gives generator/embeddings/word_embeddings [11, 4] "
        "where the config implies [11, 6], electra.embeddings.position_embeddings.weight gives "
        "generator/embeddings/position_embeddings [6, 4] where the config implies [6, 6], "
        "electra.embeddings.token_type_embeddings.weight gives generator/embeddings/token_type_embeddings [2, 4] where "
        "the config implies [2, 6] and 6 more; convert a whole checkpoint of the family, or give the config that "
        "describes it with --config; drop the extra tensors in a copy of the map (its \"drop\"), or give them rules; "
        "or convert it as the discriminator or generator (--variant discriminator or --variant generator)")
    report = ss.convert(tmp_path / "gen-hf", tmp_path / "out", map="hf-to-electra", variant="generator")
    assert report.variant == "generator" and "electra/embeddings/word_embeddings" in {row[1] for row in report.rows}


def test_electrics_discriminator_converts_and_its_two_tower_generator_is_refused(saved, tmp_path, run_cli):
    """An Electric run ("electric_objective": true) built by ELECTRA's code: its discriminator has ELECTRA's names
    and shapes, and ElectraForPreTraining computes its head's own output (Electric adds the cloze model's log q
    and log(mask_prob / (1 - mask_prob)) to score a token, which no Hugging Face class does); its generator,
    two towers and a cloze head, is refused by its scopes before anything is written, from the shapes or hparams."""
    transformers = _transformers()
    source = saved("electric")
    message = ("this ELECTRA checkpoint is an Electric run: Electric's generator is a two-tower cloze model "
               "(generator_ltr, generator_rtl, cloze_predictions), which ElectraForMaskedLM does not compute; "
               "convert its discriminator (--variant discriminator), which has ELECTRA's layout")
    result = run_cli("convert", source / CHECKPOINT, tmp_path / "gen", "--map", "electra-to-hf", "--variant",
                     "generator")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"subsetsaver: error: {message}\n")
    expected = np.load(source / "outputs.npz")
    for config in (None, source / "hparams.json"):
        out = tmp_path / ("shapes" if config is None else "hparams")
        report = ss.convert(source / CHECKPOINT, out, map="electra-to-hf", config=config)
        assert (report.variant, report.expected) == ("discriminator", 43)
        assert {name.split("/")[0] for name in report.dropped if not name.endswith(("/adam_m", "/adam_v"))} == {
            "cloze_predictions", "generator_ltr", "generator_rtl", "global_step"}
        with open(out / "config.json") as handle:
            assert json.load(handle) == EXPECTED_CONFIGS["small", "discriminator"]
        logits = _logits(transformers.ElectraForPreTraining, out)
        assert _max_difference(expected["discriminator_logits"], logits) <= BAR
        assert _max_difference(expected["electric_logits"], logits) > 1
        assert refused(source / CHECKPOINT, tmp_path / "gen", map="electra-to-hf", variant="generator",
                       config=config) == message


def test_electric_hparams_refuse_the_generator_and_read_the_discriminator(tmp_path):
    checkpoint = electra_checkpoint(tmp_path / "electra")
    hparams = {"model_size": "small", "vocab_size": 11, "embedding_size": 4, "electra_objective": False,
               "electric_objective": True,
               "model_hparam_overrides": {"hidden_size": 8, "num_hidden_layers": 1, "max_position_embeddings": 6}}
    with open(tmp_path / "hparams.json", "w") as handle:
        json.dump(hparams, handle)
    assert refused(checkpoint, tmp_path / "out", map="electra-to-hf", variant="generator",
                   config=tmp_path / "hparams.json") == (
        "the ELECTRA hparams say \"electric_objective\": true: Electric's generator is a two-tower cloze model "
        "(generator_ltr, generator_rtl, cloze_predictions), which ElectraForMaskedLM does not compute; convert its "
        "discriminator (--variant discriminator), which has ELECTRA's layout")
    report = ss.convert(checkpoint, tmp_path / "out", map="electra-to-hf", config=tmp_path / "hparams.json")
    assert (report.variant, report.config, report.expected) == ("discriminator", str(tmp_path / "hparams.json"), 27)


def test_a_fine_tuned_checkpoint_is_refused_as_one_with_its_task_heads_named(tmp_path, run_cli):
    """run_finetuning.py's checkpoint: the discriminator's transformer under electra/, a head per task under
    task_specific/ (a classifier's dense, SQuAD's start and end logits), their adam_m/adam_v, no pre-training heads."""
    pretrained = electra_checkpoint(tmp_path / "electra", generator=False)
    with tf_bundle.BundleReader(pretrained) as reader:
        arrays = {name: reader.read(name) for name in reader.names if name.startswith(("electra/", "global_step"))}
    heads = {"task_specific/mnli/dense/kernel": (8, 3), "task_specific/mnli/dense/bias": (3,),
             "task_specific/squad/start_logits/dense/kernel": (8, 1), "task_specific/squad/start_logits/dense/bias": (1,),
             "task_specific/squad/end_logits/dense/kernel": (8, 1), "task_specific/squad/end_logits/dense/bias": (1,)}
    for name, shape in heads.items():
        for suffix in ("", "/adam_m", "/adam_v"):
            arrays[name + suffix] = np.zeros(shape, np.float32)
    os.makedirs(tmp_path / "finetuned")
    checkpoint = str(tmp_path / "finetuned" / "model.ckpt")
    tf_bundle.write(checkpoint, arrays)
    message = ("this ELECTRA checkpoint is fine-tuned: it holds run_finetuning.py's task heads (task_specific/mnli, "
               "task_specific/squad), which this map does not convert (it reads pre-training checkpoints); convert the "
               "pre-training checkpoint the fine-tuning started from (run_finetuning.py's init_checkpoint)")
    for variant in ("discriminator", "generator"):
        assert refused(checkpoint, tmp_path / "out", map="electra-to-hf", variant=variant) == message
    result = run_cli("convert", checkpoint, tmp_path / "out", "--map", "electra-to-hf", "--dry-run")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"subsetsaver: error: {message}\n")
    assert not os.path.exists(tmp_path / "out")
