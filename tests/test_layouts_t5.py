"""t5-to-hf and hf-to-t5 against the original code: T5 v1.0 (ReLU, tied embeddings) and v1.1/mT5 (gated GELU,
untied logits) built by Mesh TensorFlow 0.1.21's own transformer code (``tests/mesh_t5.py``, in a
subprocess: graph mode and a shim for TensorFlow 2.21), trained one Adafactor step, saved with a plain
Saver and the run's operative_config.gin; converted without TensorFlow; loaded by ``transformers`` and
compared on the same inputs and decoder input ids; and converted back, restored by the Mesh TensorFlow code.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver.formats import safetensors as safetensors_file
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.layouts.gin_config import read_gin_config

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mesh_t5 import DECODER_INPUTS, INPUTS  # noqa: E402

VARIANTS = ("v1.0", "v1.1")
CHECKPOINT = "model.ckpt-1"
EXPECTED_CONFIGS = {
    "v1.0": {"vocab_size": 128, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_heads": 4, "num_layers": 2,
             "num_decoder_layers": 3, "relative_attention_num_buckets": 16, "relative_attention_max_distance": 128,
             "dropout_rate": 0.0, "layer_norm_epsilon": 1e-06, "feed_forward_proj": "relu",
             "tie_word_embeddings": True, "model_type": "t5", "is_encoder_decoder": True,
             "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1,
             "architectures": ["T5ForConditionalGeneration"]},
    "v1.1": {"vocab_size": 128, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_heads": 4, "num_layers": 2,
             "num_decoder_layers": 3, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 128,
             "dropout_rate": 0.0, "layer_norm_epsilon": 1e-06, "feed_forward_proj": "gated-gelu",
             "tie_word_embeddings": False, "model_type": "t5", "is_encoder_decoder": True,
             "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1,
             "architectures": ["T5ForConditionalGeneration"]},
}


def _mesh(*arguments):
    """Run tests/mesh_t5.py in a subprocess (graph mode, the shim, no state left in this process)."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "mesh_t5.py"), *arguments], env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """variant -> directory with Mesh TensorFlow's checkpoint (Adafactor state, step), operative_config.gin
    and the model's outputs."""
    made = {}

    def get(variant):
        if importlib.util.find_spec("mesh_tensorflow") is None or importlib.util.find_spec("gin") is None:
            pytest.skip("Mesh TensorFlow is not installed: pip install -e '.[test]'")
        if variant not in made:
            directory = tmp_path_factory.mktemp(variant)
            _mesh("save", variant, str(directory))
            made[variant] = directory
        return made[variant]

    return get


def _max_difference(expected, actual):
    assert expected.shape == actual.shape
    return float(np.abs(expected.astype(np.float64) - np.asarray(actual, np.float64)).max())


@pytest.mark.parametrize("variant", VARIANTS)
def test_transformers_computes_what_mesh_tensorflow_computes(variant, saved, tmp_path):
    torch = pytest.importorskip("torch", reason="optional check: PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="optional check: transformers is not installed")
    source = saved(variant)
    report = ss.convert(source / CHECKPOINT, tmp_path / "hf", map="t5-to-hf")
    assert report.config == str(source / "operative_config.gin")
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
    with open(tmp_path / "hf" / "config.json") as handle:
        assert json.load(handle) == EXPECTED_CONFIGS[variant]
    expected = np.load(source / "outputs.npz")
    model_class = transformers.T5ForConditionalGeneration if variant == "v1.0" else \
        transformers.MT5ForConditionalGeneration
    model = model_class.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor(INPUTS.astype(np.int64)),
                    decoder_input_ids=torch.tensor(DECODER_INPUTS.astype(np.int64)))
        encoder = transformers.T5EncoderModel.from_pretrained(str(tmp_path / "hf")).eval()
        alone = encoder(input_ids=torch.tensor(INPUTS.astype(np.int64))).last_hidden_state
    assert _max_difference(expected["encoder_output"], out.encoder_last_hidden_state.numpy()) <= 1e-5
    assert _max_difference(expected["encoder_output"], alone.numpy()) <= 1e-5
    assert _max_difference(expected["logits"], out.logits.numpy()) <= 1e-5


@pytest.mark.parametrize("variant", VARIANTS)
def test_round_trip_restores_in_mesh_tensorflow_with_the_same_outputs(variant, saved, tmp_path):
    source = saved(variant)
    ss.convert(source / CHECKPOINT, tmp_path / "hf", map="t5-to-hf")
    report = ss.convert(tmp_path / "hf", tmp_path / "t5", map="hf-to-t5")
    assert report.dropped == ()
    assert sorted(os.listdir(tmp_path / "t5")) == [
        "checkpoint", "model.ckpt.data-00000-of-00001", "model.ckpt.index", "operative_config.gin"]
    assert read_gin_config(tmp_path / "t5" / "operative_config.gin") == read_gin_config(source / "operative_config.gin")
    with tf_bundle.BundleReader(source / CHECKPOINT) as before, tf_bundle.BundleReader(tmp_path / "t5/model.ckpt") as after:
        weights = [name for name in before.names if "_slot_" not in name and name != "global_step"]
        assert sorted(after.names) == sorted(weights)
        for name in weights:
            assert before.read(name).tobytes() == after.read(name).tobytes(), name
    # Mesh TensorFlow parses the written bindings and builds the model from them, then restores by name
    _mesh("run", variant, str(tmp_path / "t5" / "model.ckpt"), str(tmp_path / "outputs.npz"),
          str(tmp_path / "t5" / "operative_config.gin"))
    expected, actual = np.load(source / "outputs.npz"), np.load(tmp_path / "outputs.npz")
    for key in expected.files:
        assert np.array_equal(expected[key], actual[key]), key


def test_a_hugging_face_config_given_with_config_converts_the_same(saved, tmp_path):
    """A Hugging Face config.json (without the keys T5Config defaults) stands for operative_config.gin."""
    source = saved("v1.0")
    ss.convert(source / CHECKPOINT, tmp_path / "hf", map="t5-to-hf")
    with open(tmp_path / "hf" / "config.json") as handle:
        hf_config = {key: value for key, value in json.load(handle).items()
                     if key not in ("tie_word_embeddings", "feed_forward_proj")}  # T5Config's defaults say these
    with open(tmp_path / "config.json", "w") as handle:
        json.dump(hf_config, handle)
    report = ss.convert(source / CHECKPOINT, tmp_path / "again", map="t5-to-hf", config=tmp_path / "config.json")
    assert report.config == str(tmp_path / "config.json")
    with open(tmp_path / "again" / "config.json") as handle:
        assert json.load(handle) == EXPECTED_CONFIGS["v1.0"]


def test_adafactor_state_and_the_step_are_dropped_by_role(saved, tmp_path):
    source = saved("v1.1")
    report = ss.convert(source / CHECKPOINT, tmp_path / "hf", map="t5-to-hf")
    with tf_bundle.BundleReader(source / CHECKPOINT) as reader:
        state = sorted(name for name in reader.names if name.endswith(("_slot_vc", "_slot_vr", "_slot_v")))
        weights = len(reader.names) - len(state) - 1
    assert len([name for name in state if name.endswith("_slot_vc")]) == 49  # every matrix but the [4, 8] biases, factored
    assert list(report.dropped) == sorted(["global_step", *state])
    specs, metadata = safetensors_file.specs(tmp_path / "hf" / "model.safetensors")
    assert metadata == {"format": "pt"} and len(specs) == weights == 66
    assert specs["encoder.block.1.layer.1.DenseReluDense.wi_0.weight"] == ((48, 32), "float32")
    assert specs["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] == ((8, 4), "float32")
    assert specs["lm_head.weight"] == ((128, 32), "float32")



def test_a_t5_checkpoint_in_a_bucket_converts_without_fetching_adafactor_state(saved, server_store, tmp_path):
    """Straight from gs:// or s3://: the weights' bytes cross the socket, Adafactor's state does not. The state
    is unfactored (Adafactor's ``factored = False``: a ``_slot_v`` as large as each weight), so fetching it
    would double the bytes."""
    import fsspec

    source = saved("v1.1-unfactored")
    with tf_bundle.BundleReader(source / CHECKPOINT) as reader:
        slots = [name for name in reader.names if "_slot_" in name]
        state = sum(reader.read(name).nbytes for name in slots)
        kept = sum(reader.read(name).nbytes for name in reader.names if name not in slots and name != "global_step")
    filesystem = fsspec.filesystem(server_store.protocol)
    for name in ("model.ckpt-1.index", "model.ckpt-1.data-00000-of-00001", "operative_config.gin"):
        filesystem.put_file(str(source / name), server_store.url(name))
    server_store.relay.reset()

    report = ss.convert(server_store.url(CHECKPOINT), tmp_path / "hf", map="t5-to-hf")

    fetched = server_store.relay.received
    assert report.config == server_store.url("operative_config.gin")
    assert list(report.dropped) == sorted([*slots, "global_step"]) and len(slots) == 52
    assert all(name.endswith("_slot_v") for name in slots)
    assert state == kept == report.nbytes == 12_857_600  # fetching the state would double the bytes
    assert fetched <= 1.05 * kept + 64 * 1024, (fetched, kept)  # the index, the gin file and the headers
    ss.convert(source / CHECKPOINT, tmp_path / "from-disk", map="t5-to-hf")
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "hf" / name).read_bytes() == (tmp_path / "from-disk" / name).read_bytes(), name
