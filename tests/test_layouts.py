"""Layout maps (subsetsaver.layouts): BERT, ALBERT and GPT-2 built by their original TF1 code, converted
without TensorFlow, loaded by the libraries that read the target layout, and compared on one input.

The TF1 graphs run in a subprocess (``tests/tf1_families.py``: graph mode and ``tf.compat.v1.layers``
need ``TF_USE_LEGACY_KERAS=1``); KerasHub's Hugging Face loaders (Keras 3) run here. ``transformers``
with PyTorch is checked when installed.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver.formats import safetensors as safetensors_file
from subsetsaver.formats.tf import bundle as tf_bundle

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = ("bert", "albert", "gpt2")
CONFIG_FILES = {"bert": "bert_config.json", "albert": "albert_config.json", "gpt2": "hparams.json"}
RELEASE_PREFIXES = {"bert": "bert_model.ckpt", "albert": "model.ckpt-best", "gpt2": "model.ckpt"}  # as each family ships
TOKENS = np.array([[5, 17, 42, 8, 3, 77, 1, 64], [9, 2, 33, 50, 98, 12, 0, 7]], np.int32)
SEGMENTS = np.array([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]], np.int32)
ORIGINAL_CODE = {"bert": "bert", "albert": "albert", "gpt2": "gpt_2_simple", "bert_classifier": "bert"}


def _tf1(*arguments):
    """Run tests/tf1_families.py in a subprocess with TF_USE_LEGACY_KERAS=1."""
    environment = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "tf1_families.py"), *arguments], env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """family -> directory with the TF1 checkpoint (model.ckpt, Adam slots, step), its config and outputs."""
    made = {}

    def get(family):
        import importlib.util

        if importlib.util.find_spec(ORIGINAL_CODE[family]) is None:
            pytest.skip(f"the original {family} code is not installed: pip install -e '.[test]'")
        if family not in made:
            directory = tmp_path_factory.mktemp(family)
            _tf1("save", family, str(directory))
            made[family] = directory
        return made[family]

    return get


def _max_difference(expected, actual):
    assert expected.shape == actual.shape
    return float(np.abs(expected.astype(np.float64) - np.asarray(actual, np.float64)).max())


def _keras_hub_outputs(family, directory):
    import keras_hub

    backbone = keras_hub.models.Backbone.from_preset(str(directory))
    mask = np.ones_like(TOKENS)
    if family == "gpt2":
        hidden = np.asarray(backbone({"token_ids": TOKENS, "padding_mask": mask}))
        return {"logits": hidden @ np.asarray(backbone.token_embedding.embeddings).T}
    outputs = backbone({"token_ids": TOKENS, "segment_ids": SEGMENTS, "padding_mask": mask})
    return {"sequence": np.asarray(outputs["sequence_output"]), "pooled": np.asarray(outputs["pooled_output"])}


@pytest.mark.parametrize("family", FAMILIES)
def test_keras_hub_loads_the_converted_model_and_computes_what_tf1_computes(family, saved, tmp_path):
    pytest.importorskip("keras_hub", reason="KerasHub reads the Hugging Face layout: pip install keras-hub")
    source = saved(family)
    report = ss.convert(source / "model.ckpt", tmp_path / "hf", map=f"{family}-to-hf")
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
    assert report.files == (str(tmp_path / "hf" / "model.safetensors"), str(tmp_path / "hf" / "config.json"))
    expected = np.load(source / "outputs.npz")
    actual = _keras_hub_outputs(family, tmp_path / "hf")
    assert sorted(actual) == sorted(expected.files)
    for key in expected.files:
        assert _max_difference(expected[key], actual[key]) <= 1e-5, key


@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_loads_the_converted_model_and_computes_what_tf1_computes(family, saved, tmp_path):
    torch = pytest.importorskip("torch", reason="optional check: PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="optional check: transformers is not installed")
    source = saved(family)
    ss.convert(source / "model.ckpt", tmp_path / "hf", map=f"{family}-to-hf")
    model_class = {"bert": transformers.BertModel, "albert": transformers.AlbertModel,
                   "gpt2": transformers.GPT2Model}[family]
    model = model_class.from_pretrained(str(tmp_path / "hf")).eval()
    ids = torch.tensor(TOKENS.astype(np.int64))
    expected = np.load(source / "outputs.npz")
    with torch.no_grad():
        if family == "gpt2":
            hidden = model(input_ids=ids).last_hidden_state.numpy()
            actual = {"logits": hidden @ model.wte.weight.numpy().T}
        else:
            out = model(input_ids=ids, token_type_ids=torch.tensor(SEGMENTS.astype(np.int64)),
                        attention_mask=torch.ones_like(ids))
            actual = {"sequence": out.last_hidden_state.numpy(), "pooled": out.pooler_output.numpy()}
    for key in expected.files:
        assert _max_difference(expected[key], actual[key]) <= 1e-5, key


@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_back_to_tf1_restores_in_the_original_code_with_the_same_outputs(family, saved, tmp_path):
    source = saved(family)
    ss.convert(source / "model.ckpt", tmp_path / "hf", map=f"{family}-to-hf")
    report = ss.convert(tmp_path / "hf", tmp_path / "tf1", map=f"hf-to-{family}")
    prefix = RELEASE_PREFIXES[family]
    assert sorted(os.listdir(tmp_path / "tf1")) == sorted(
        ["checkpoint", CONFIG_FILES[family], f"{prefix}.data-00000-of-00001", f"{prefix}.index"])
    assert report.dropped == ()
    with open(source / CONFIG_FILES[family]) as original, open(tmp_path / "tf1" / CONFIG_FILES[family]) as back:
        original, back = json.load(original), json.load(back)
    assert {key: back[key] for key in original} == original  # ALBERT's adds the released files' fixed keys
    assert set(back) - set(original) <= {"net_structure_type", "gap_size", "num_memory_blocks", "layers_to_keep"}
    with tf_bundle.BundleReader(source / "model.ckpt") as before, tf_bundle.BundleReader(tmp_path / "tf1" / prefix) as after:
        weights = [name for name in before.names if not name.endswith(("/Adam", "/Adam_1", "_power", "global_step"))]
        assert sorted(after.names) == sorted(weights)
        for name in weights:
            assert before.read(name).tobytes() == after.read(name).tobytes(), name
    # the TF1 code restores the directory's latest checkpoint by name and computes the same outputs
    _tf1("run", family, str(tmp_path / "tf1" / prefix), str(tmp_path / "tf1" / CONFIG_FILES[family]),
         str(tmp_path / "outputs.npz"))
    expected, actual = np.load(source / "outputs.npz"), np.load(tmp_path / "outputs.npz")
    for key in expected.files:
        assert np.array_equal(expected[key], actual[key]), key


def test_a_three_label_classifier_loads_in_bert_for_sequence_classification(saved, tmp_path):
    """run_classifier.py's head: num_labels, the labels and the class reach config.json; the logits match TF1's."""
    torch = pytest.importorskip("torch", reason="optional check: PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="optional check: transformers is not installed")
    source = saved("bert_classifier")
    (tmp_path / "labels.txt").write_text("contradiction\nentailment\nneutral\n")
    report = ss.convert(source / "model.ckpt", tmp_path / "hf", map="bert-to-hf", labels=tmp_path / "labels.txt")
    assert (report.heads, report.architecture) == (("classifier",), "BertForSequenceClassification")
    model = transformers.BertForSequenceClassification.from_pretrained(str(tmp_path / "hf")).eval()
    assert model.config.id2label == {0: "contradiction", 1: "entailment", 2: "neutral"}
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(TOKENS.astype(np.int64)),
                       token_type_ids=torch.tensor(SEGMENTS.astype(np.int64)),
                       attention_mask=torch.ones(TOKENS.shape, dtype=torch.int64)).logits.numpy()
    assert _max_difference(np.load(source / "outputs.npz")["logits"], logits) <= 1e-5


def test_conversion_drops_optimizer_state_and_the_step_by_role(saved, tmp_path):
    source = saved("gpt2")
    report = ss.convert(source / "model.ckpt", tmp_path / "hf", map="gpt2-to-hf")
    with tf_bundle.BundleReader(source / "model.ckpt") as reader:
        slots = sorted(name for name in reader.names if name.endswith(("/Adam", "/Adam_1")))
    assert len(slots) == 2 * 28
    assert list(report.dropped) == sorted(["beta1_power", "beta2_power", "global_step", *slots])
    specs, metadata = safetensors_file.specs(tmp_path / "hf" / "model.safetensors")
    assert metadata == {"format": "pt"}
    assert len(specs) == 28 and specs["h.1.attn.c_attn.weight"] == ((32, 96), "float32")


def test_transformers_save_pretrained_directory_converts_back(saved, tmp_path):
    """A directory that transformers itself wrote (names without the base model's prefix) converts back."""
    torch = pytest.importorskip("torch", reason="optional check: PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="optional check: transformers is not installed")
    del torch
    source = saved("bert")
    ss.convert(source / "model.ckpt", tmp_path / "hf", map="bert-to-hf")
    transformers.BertModel.from_pretrained(str(tmp_path / "hf")).save_pretrained(str(tmp_path / "saved"))
    ss.convert(tmp_path / "saved", tmp_path / "tf1", map="hf-to-bert")
    with tf_bundle.BundleReader(source / "model.ckpt") as before, tf_bundle.BundleReader(tmp_path / "tf1" / "bert_model.ckpt") as after:
        for name in after.names:
            assert before.read(name).tobytes() == after.read(name).tobytes(), name
        assert len(after.names) == 39


def test_conversion_runs_without_tensorflow(saved, tmp_path):
    source = saved("bert")
    script = ("import sys; sys.modules['tensorflow'] = None\n"
              "import subsetsaver as ss\n"
              f"ss.convert({str(source / 'model.ckpt')!r}, {str(tmp_path / 'hf')!r}, map='bert-to-hf')\n"
              f"ss.convert({str(tmp_path / 'hf')!r}, {str(tmp_path / 'tf1')!r}, map='hf-to-bert')\n"
              "print(sys.modules.get('tensorflow'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(HERE)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "None"
    assert os.path.exists(tmp_path / "tf1" / "bert_model.ckpt.index")


def test_dry_run_prints_the_table_and_writes_nothing(saved, tmp_path, run_cli):
    source = saved("gpt2")
    result = run_cli("convert", source / "model.ckpt", tmp_path / "out", "--map", "gpt2-to-hf", "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == [
        "source                  target                  transform   shape",
        "model/wte               wte.weight              -           [99, 32]",
        "model/wpe               wpe.weight              -           [16, 32]",
        "model/h0/ln_1/g         h.0.ln_1.weight         -           [32]",
    ]
    assert "model/h1/attn/c_attn/w  h.1.attn.c_attn.weight  squeeze(0)  [32, 96]" in lines
    assert lines[-2:] == [
        "coverage: 28 tensors the config implies, 28 found, 0 missing, 0 extra; heads: none; loads as GPT2LMHeadModel",
        "28 tensors, 113.9 KB; dropped 59 by the map's \"drop\"; nothing written (--dry-run)"]
    assert not os.path.exists(tmp_path / "out")
