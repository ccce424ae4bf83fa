"""The layout engine on small checkpoints written without TensorFlow: refusals (an unknown map, a
checkpoint of another family, a shape a transform cannot produce, unmapped tensors) name the first
failing rule and write nothing; split, concatenate and cast are exact; the shipped maps are whole."""

import json
import os

import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver import layouts
from subsetsaver.errors import CorruptCheckpointError
from subsetsaver.formats import safetensors as safetensors_file
from subsetsaver.formats.tf import bundle as tf_bundle

SHIPPED = ["albert-to-hf", "bert-to-hf", "electra-to-hf", "gpt2-to-hf", "hf-to-albert", "hf-to-bert", "hf-to-electra",
           "hf-to-gpt2", "hf-to-t5", "keras-efficientnet-to-timm", "keras-mobilenetv3-large-to-timm", "t5-to-hf"]


def gpt2_checkpoint(directory, extra=None, layers=2, width=8, seed=0):
    """openai/gpt-2's names and shapes (model/h0/attn/c_attn/w is [1, nx, 3 nx]), random values, hparams.json."""
    rng = np.random.default_rng(seed)
    shapes = {"model/wte": (11, width), "model/wpe": (6, width), "model/ln_f/g": (width,), "model/ln_f/b": (width,)}
    for layer in range(layers):
        h = f"model/h{layer}"
        shapes.update({f"{h}/ln_1/g": (width,), f"{h}/ln_1/b": (width,), f"{h}/ln_2/g": (width,),
                       f"{h}/ln_2/b": (width,), f"{h}/attn/c_attn/w": (1, width, 3 * width),
                       f"{h}/attn/c_attn/b": (3 * width,), f"{h}/attn/c_proj/w": (1, width, width),
                       f"{h}/attn/c_proj/b": (width,), f"{h}/mlp/c_fc/w": (1, width, 4 * width),
                       f"{h}/mlp/c_fc/b": (4 * width,), f"{h}/mlp/c_proj/w": (1, 4 * width, width),
                       f"{h}/mlp/c_proj/b": (width,)})
    arrays = {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()}
    arrays.update(extra or {})
    arrays["global_step"] = np.int64(7)
    arrays["model/wte/Adam"] = np.zeros((11, width), np.float32)
    os.makedirs(directory, exist_ok=True)
    tf_bundle.write(os.path.join(directory, "model.ckpt"), arrays)
    with open(os.path.join(directory, "hparams.json"), "w") as handle:
        json.dump({"n_vocab": 11, "n_ctx": 6, "n_embd": width, "n_head": 2, "n_layer": layers}, handle)
    return os.path.join(directory, "model.ckpt"), arrays


GPT2_MATH = {"activation": {"key": "activation_function", "value": "gelu_new"},
             "layer_norm_eps": {"key": "layer_norm_epsilon", "value": 1e-5},
             "position_embedding": {"key": None, "value": "absolute"},
             "tied_embeddings": {"key": "tie_word_embeddings", "value": True}}


def write_map(path, rules, **fields):
    layout = {"name": "custom", "family": "GPT-2 (openai/gpt-2)", "source": {"layout": "tf", "config": "hparams.json"},
              "target": {"layout": "safetensors", "config": "config.json"}, "drop": "slots() | global_step()",
              "rules": rules, "config": {"keys": {"n_embd": "n_embd", "n_vocab": "n_vocab"}}, "math": GPT2_MATH,
              "targets": {"dtypes": ["float32"], "groups": [{"tensors": {"wte": ["n_vocab", "n_embd"]}}]}, **fields}
    with open(path, "w") as handle:
        json.dump(layout, handle)
    return str(path)


def test_the_shipped_maps_are_listed_and_parse():
    assert list(layouts.shipped_maps()) == SHIPPED
    for name in SHIPPED:
        layout = layouts.load_map(name)
        assert layout.name == name and layout.rules


def refused(checkpoint, out, **options):
    """The LayoutMapError that converting ``checkpoint`` to ``out`` raises, once nothing is found written there."""
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(checkpoint, out, **options)
    assert not os.path.exists(out)
    return error.value


def test_an_unknown_map_is_one_error_naming_the_shipped_ones(tmp_path):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    error = refused(checkpoint, tmp_path / "out", map="gpt3-to-hf")
    assert str(error) == ("unknown layout map 'gpt3-to-hf'; use one of albert-to-hf, bert-to-hf, electra-to-hf, "
                          "gpt2-to-hf, hf-to-albert, hf-to-bert, hf-to-electra, hf-to-gpt2, hf-to-t5, "
                          "keras-efficientnet-to-timm, keras-mobilenetv3-large-to-timm, t5-to-hf, or the path of a "
                          ".json map file")


def test_a_checkpoint_of_another_family_is_named_so_before_its_config_is_read(tmp_path):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    error = refused(checkpoint, tmp_path / "out", map="bert-to-hf", config=tmp_path / "gpt2" / "hparams.json")
    assert str(error) == (
        "this is not a BERT (google-research/bert) checkpoint: it holds model/h0/attn/c_attn/b, model/h0/attn/c_attn/w, "
        "model/h0/attn/c_proj/b and 25 more, where the map reads bert/embeddings/word_embeddings, "
        "bert/embeddings/token_type_embeddings, bert/embeddings/position_embeddings and 25 more; use the map for this "
        "checkpoint's family; 'bert-to-hf' reads BERT (google-research/bert)")


def test_a_shape_a_transform_cannot_produce_names_its_rule_and_writes_nothing(tmp_path):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    layout = write_map(tmp_path / "bad.json", [
        {"from": "model/wte", "to": "wte", "transform": [{"reshape": [5, -1]}]},
        {"from": "model/**", "to": "rest.{1}"}])
    error = refused(checkpoint, tmp_path / "out", map=layout)
    assert str(error) == ("rule 1 (model/wte -> wte) cannot convert 'model/wte' [11, 8]: cannot reshape shape "
                          "[11, 8] (88 values) to [5, -1]; the checkpoint is not of the shapes this map expects")


def test_every_unmapped_tensor_is_reported_at_once_before_a_byte_is_written(tmp_path):
    extra = {"model/extra_a": np.ones(3, np.float32), "model/h0/attn/extra_b": np.ones(2, np.float32)}
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2", extra)
    error = refused(checkpoint, tmp_path / "out", map="gpt2-to-hf")
    assert str(error) == ("this GPT-2 (openai/gpt-2) checkpoint holds 2 tensors the map and config do not describe: "
                          "model/extra_a, model/h0/attn/extra_b; drop the extra tensors in a copy of the map (its "
                          "\"drop\"), or give them rules")


def test_a_missing_config_names_the_flag(tmp_path):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    os.remove(tmp_path / "gpt2" / "hparams.json")
    error = refused(checkpoint, tmp_path / "out", map="gpt2-to-hf")
    assert str(error) == (f"no hparams.json beside '{checkpoint}'; give the GPT-2 (openai/gpt-2) config file "
                          "with --config FILE (config= in Python)")


def test_a_map_placeholder_without_its_wildcard_is_refused(tmp_path):
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(write_map(tmp_path / "m.json", [{"from": "model/h*/x", "to": "h.{2}.x"}]))
    assert str(error.value) == f"layout map '{tmp_path / 'm.json'}', rule 1: 'h.{{2}}.x' uses {{2}}, but 'model/h*/x' has 1 wildcard(s)"


def test_gpt2_to_hf_and_back_is_bit_exact(tmp_path):
    checkpoint, arrays = gpt2_checkpoint(tmp_path / "gpt2")
    report = ss.convert(checkpoint, tmp_path / "hf", map="gpt2-to-hf")
    assert report.dropped == ("global_step", "model/wte/Adam")
    _, metadata = safetensors_file.specs(tmp_path / "hf" / "model.safetensors")
    assert metadata == {"format": "pt"}
    (_, fused), = safetensors_file.read(tmp_path / "hf" / "model.safetensors", ["h.1.attn.c_attn.weight"])
    assert fused.tobytes() == arrays["model/h1/attn/c_attn/w"][0].tobytes()
    with open(tmp_path / "hf" / "config.json") as handle:
        config = json.load(handle)
    assert (config["n_embd"], config["n_positions"], config["vocab_size"], config["activation_function"]) == (
        8, 6, 11, "gelu_new")
    ss.convert(tmp_path / "hf", tmp_path / "back", map="hf-to-gpt2")
    with tf_bundle.BundleReader(tmp_path / "back" / "model.ckpt") as reader:
        weights = sorted(name for name in arrays if name.startswith("model/") and not name.endswith("/Adam"))
        assert sorted(reader.names) == weights
        for name in weights:
            assert reader.read(name).tobytes() == arrays[name].tobytes()
    with open(tmp_path / "back" / "hparams.json") as handle:
        assert json.load(handle) == {"n_vocab": 11, "n_ctx": 6, "n_embd": 8, "n_head": 2, "n_layer": 2}


def test_split_concatenate_and_cast_are_exact(tmp_path):
    """GPT-2's fused c_attn kernel split into query, key and value, then joined again."""
    checkpoint, arrays = gpt2_checkpoint(tmp_path / "gpt2", layers=1)
    kept = "name('model/h*/attn/c_attn/w') | name('model/wte')"
    qkv = {f"h0.{part}": ["n_embd", "n_embd"] for part in "qkv"}
    split = write_map(tmp_path / "split.json", [
        {"from": "model/h*/attn/c_attn/w", "to": ["h{1}.q", "h{1}.k", "h{1}.v"], "transform": [{"squeeze": 0}],
         "split": -1},
        {"from": "model/wte", "to": "wte", "transform": [{"cast": "float16"}]}], drop=f"~({kept})",
        targets={"dtypes": ["float32", "float16"], "groups": [{"tensors": {**qkv, "wte": ["n_vocab", "n_embd"]}}]})
    report = ss.convert(checkpoint, tmp_path / "split", map=split)
    assert report.rows[:3] == (("model/h0/attn/c_attn/w", "h0.q", "squeeze(0), split(-1)", (8, 8)),
                               ("model/h0/attn/c_attn/w", "h0.k", "squeeze(0), split(-1)", (8, 8)),
                               ("model/h0/attn/c_attn/w", "h0.v", "squeeze(0), split(-1)", (8, 8)))
    fused = arrays["model/h0/attn/c_attn/w"][0]
    values = dict(safetensors_file.read(tmp_path / "split" / "model.safetensors", ["h0.q", "h0.k", "h0.v", "wte"]))
    for index, part in enumerate(("h0.q", "h0.k", "h0.v")):
        assert values[part].tobytes() == np.ascontiguousarray(fused[:, 8 * index:8 * (index + 1)]).tobytes()
    assert values["wte"].dtype == np.float16 and values["wte"].tobytes() == arrays["model/wte"].astype(np.float16).tobytes()
    joined = write_map(tmp_path / "join.json", [
        {"from": ["h*.q", "h*.k", "h*.v"], "to": "model/h{1}/attn/c_attn/w", "concat": -1,
         "transform": [{"expand_dims": 0}]},
        {"from": "wte", "to": "model/wte", "transform": [{"cast": "float32"}]}],
        source={"layout": "safetensors", "config": "config.json"}, target={"layout": "tf", "config": "hparams.json"},
        drop=None, config={"keys": {"n_embd": "n_embd", "n_vocab": "vocab_size"}},
        math={**GPT2_MATH, "activation": {"key": None, "value": "gelu_new"},
              "layer_norm_eps": {"key": None, "value": 1e-5}, "tied_embeddings": {"key": None, "value": True}},
        targets={"dtypes": ["float32"], "groups": [{"tensors": {"model/h0/attn/c_attn/w": [1, "n_embd", "3 * n_embd"],
                                                                 "model/wte": ["n_vocab", "n_embd"]}}]})
    with open(tmp_path / "split" / "config.json") as handle:
        assert json.load(handle) == {"n_embd": 8, "n_vocab": 11, "activation_function": "gelu_new",
                                     "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    with open(tmp_path / "split" / "config.json", "w") as handle:
        json.dump({"n_embd": 8, "vocab_size": 11}, handle)
    ss.convert(tmp_path / "split", tmp_path / "join", map=joined)
    with tf_bundle.BundleReader(tmp_path / "join" / "model.ckpt") as reader:
        assert sorted(reader.names) == ["model/h0/attn/c_attn/w", "model/wte"]
        assert reader.read("model/h0/attn/c_attn/w").tobytes() == arrays["model/h0/attn/c_attn/w"].tobytes()
        assert reader.read("model/wte").tobytes() == arrays["model/wte"].astype(np.float16).astype(np.float32).tobytes()


def test_a_stream_that_breaks_its_plan_leaves_no_file(tmp_path):
    specs = {"a": ((2,), "float32"), "b": ((3,), "float32")}
    stream = layouts.TensorStream(specs, iter([("a", np.zeros(2, np.float32)), ("b", np.zeros(4, np.float32))]))
    with pytest.raises(CorruptCheckpointError, match=r"the stream gave 'b' \[4\] float32 where 'b' \[3\] float32"):
        layouts.write_safetensors(tmp_path / "out" / "model.safetensors", stream)
    assert os.listdir(tmp_path) == []  # nothing staged is left, and the directory the write made is gone


@pytest.mark.parametrize("write", [layouts.write_safetensors, layouts.write_tf_checkpoint,
                                   lambda path, stream: layouts.write_huggingface_weights(path.parent, stream)])
def test_each_tensor_written_is_let_go_before_the_next_is_made(tmp_path, write):
    """The writer holds one tensor at a time: when the stream makes the next one (reads it, transposes it), the
    one before is gone once its checksum is taken (on the checksum thread, while it is written), so its memory
    can hold the new one."""
    import weakref

    from subsetsaver import workers

    alive_when_next_made = []

    def tensors():
        previous = None
        for name in ("a", "b", "c"):
            if previous is not None:
                workers.shared_pool("subsetsaver-crc32c", 1).submit(int).result()  # the checksums taken so far
                alive_when_next_made.append(previous() is not None)
            array = np.full(4, ord(name), np.float32)
            previous = weakref.ref(array)
            yield name, array
            del array

    specs = {name: ((4,), "float32") for name in "abc"}
    write(tmp_path / "out" / "model.safetensors", layouts.TensorStream(specs, tensors()))
    assert alive_when_next_made == [False, False]


def test_an_existing_output_is_kept_unless_overwrite(tmp_path):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    ss.convert(checkpoint, tmp_path / "hf", map="gpt2-to-hf")
    with pytest.raises(ss.LayoutMapError, match="exists; choose an empty OUT_DIR, or pass --force"):
        ss.convert(checkpoint, tmp_path / "hf", map="gpt2-to-hf")
    ss.convert(checkpoint, tmp_path / "hf", map="gpt2-to-hf", overwrite=True)


def test_cli_refusals_are_one_line(tmp_path, run_cli):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    result = run_cli("convert", checkpoint, tmp_path / "out", "--map", "nope")
    assert result.returncode == 2
    assert result.stderr == ("subsetsaver: error: unknown layout map 'nope'; use one of albert-to-hf, bert-to-hf, "
                             "electra-to-hf, gpt2-to-hf, hf-to-albert, hf-to-bert, hf-to-electra, hf-to-gpt2, hf-to-t5, "
                             "keras-efficientnet-to-timm, keras-mobilenetv3-large-to-timm, t5-to-hf, or the path of a "
                             ".json map file\n")
    result = run_cli("convert", checkpoint, tmp_path / "out", "--map", "gpt2-to-hf", "--keep", "trainable()")
    assert result.returncode == 2 and "--keep does not go with --map" in result.stderr
    assert not os.path.exists(tmp_path / "out")


def bert_checkpoint(directory, hidden=4):
    """google-research/bert's names and shapes for one layer, random values, and bert_config.json."""
    rng = np.random.default_rng(1)
    layer = "bert/encoder/layer_0"
    shapes = {"bert/embeddings/word_embeddings": (5, hidden), "bert/embeddings/token_type_embeddings": (2, hidden),
              "bert/embeddings/position_embeddings": (6, hidden), "bert/pooler/dense/kernel": (hidden, hidden),
              "bert/pooler/dense/bias": (hidden,), f"{layer}/intermediate/dense/kernel": (hidden, 2 * hidden),
              f"{layer}/intermediate/dense/bias": (2 * hidden,), f"{layer}/output/dense/kernel": (2 * hidden, hidden),
              f"{layer}/output/dense/bias": (hidden,), f"{layer}/attention/output/dense/kernel": (hidden, hidden),
              f"{layer}/attention/output/dense/bias": (hidden,)}
    for part in ("query", "key", "value"):
        shapes.update({f"{layer}/attention/self/{part}/kernel": (hidden, hidden),
                       f"{layer}/attention/self/{part}/bias": (hidden,)})
    for norm in ("bert/embeddings/LayerNorm", f"{layer}/attention/output/LayerNorm", f"{layer}/output/LayerNorm"):
        shapes.update({f"{norm}/gamma": (hidden,), f"{norm}/beta": (hidden,)})
    arrays = {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()}
    arrays["bert/pooler/dense/kernel/adam_m"] = np.zeros((hidden, hidden), np.float32)  # AdamWeightDecay's slots
    arrays["bert/pooler/dense/kernel/adam_v"] = np.zeros((hidden, hidden), np.float32)
    os.makedirs(directory, exist_ok=True)
    tf_bundle.write(os.path.join(directory, "bert_model.ckpt"), arrays)
    with open(os.path.join(directory, "bert_config.json"), "w") as handle:
        json.dump({"vocab_size": 5, "hidden_size": hidden, "num_hidden_layers": 1, "num_attention_heads": 2,
                   "intermediate_size": 2 * hidden, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                   "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 6, "type_vocab_size": 2,
                   "initializer_range": 0.02}, handle)
    return os.path.join(directory, "bert_model.ckpt"), arrays


def test_bert_kernels_are_transposed_and_older_gamma_beta_names_convert_back(tmp_path):
    checkpoint, arrays = bert_checkpoint(tmp_path / "bert")
    report = ss.convert(checkpoint, tmp_path / "hf", map="bert-to-hf")
    assert report.dropped == ("bert/pooler/dense/kernel/adam_m", "bert/pooler/dense/kernel/adam_v")
    hf = dict(safetensors_file.read(tmp_path / "hf" / "model.safetensors", [target for _, target, _, _ in report.rows]))
    kernel = arrays["bert/encoder/layer_0/attention/self/key/kernel"]
    assert hf["bert.encoder.layer.0.attention.self.key.weight"].tobytes() == np.ascontiguousarray(kernel.T).tobytes()
    with open(tmp_path / "hf" / "config.json") as handle:
        assert json.load(handle)["hidden_act"] == "gelu_new"
    # an older Hugging Face file: LayerNorm.gamma and LayerNorm.beta, and no 'bert.' prefix
    older = {name.replace("bert.", "", 1).replace("LayerNorm.weight", "LayerNorm.gamma")
             .replace("LayerNorm.bias", "LayerNorm.beta"): value for name, value in hf.items()}
    os.makedirs(tmp_path / "older")
    safetensors_file.write(tmp_path / "older" / "model.safetensors", older.items(),
                           specs=[(name, value.shape, value.dtype.name) for name, value in older.items()])
    os.replace(tmp_path / "hf" / "config.json", tmp_path / "older" / "config.json")
    ss.convert(tmp_path / "older", tmp_path / "back", map="hf-to-bert")
    with tf_bundle.BundleReader(tmp_path / "back" / "bert_model.ckpt") as reader:
        assert sorted(reader.names) == sorted(name for name in arrays if "/adam_" not in name)
        for name in reader.names:
            assert reader.read(name).tobytes() == arrays[name].tobytes(), name



def numbered(directory, names, n_layer):
    """A checkpoint of ``names`` (each tensor [2] holding its index) and hparams.json saying ``n_layer``."""
    os.makedirs(directory, exist_ok=True)
    tf_bundle.write(os.path.join(directory, "model.ckpt"),
                    {name: np.full(2, index, np.float32) for index, name in enumerate(names)})
    with open(os.path.join(directory, "hparams.json"), "w") as handle:
        json.dump({"n_layer": n_layer, "n_embd": 2}, handle)
    return os.path.join(directory, "model.ckpt")


def numbers_map(path, glob, template, layout, **fields):
    return write_map(path, [{"from": glob, "to": template}], config={"keys": {"n_layer": "n_layer", "n_embd": "n_embd"}},
                     targets={"dtypes": ["float32"], "groups": [{"repeat": {"block": "n_layer"},
                                                                 "tensors": {layout: ["n_embd"]}}]}, **fields)


def test_a_capture_is_written_as_a_number_plain_or_zero_padded(tmp_path):
    """Mesh TensorFlow's block_000 is Hugging Face's block.0, and back: {1:d} and {1:03d} in a rule's
    target, {block:03d} in a declared tensor's name."""
    blocks = [f"stack/block_{block:03d}/w" for block in range(12)]
    checkpoint = numbered(tmp_path / "mtf", blocks, 12)
    forward = numbers_map(tmp_path / "forward.json", "stack/block_*/w", "block.{1:d}.w", "block.{block}.w")
    report = ss.convert(checkpoint, tmp_path / "hf", map=forward)
    assert report.rows[-1] == ("stack/block_011/w", "block.11.w", "", (2,))
    specs, _ = safetensors_file.specs(tmp_path / "hf" / "model.safetensors")
    assert sorted(specs) == sorted(f"block.{block}.w" for block in range(12))
    back = numbers_map(tmp_path / "back.json", "block.*.w", "stack/block_{1:03d}/w", "stack/block_{block:03d}/w",
                       source={"layout": "safetensors", "config": "config.json"},
                       target={"layout": "tf", "config": "hparams.json"})
    ss.convert(tmp_path / "hf", tmp_path / "tf", map=back)
    with tf_bundle.BundleReader(tmp_path / "tf" / "model.ckpt") as reader:
        assert sorted(reader.names) == blocks
        assert [reader.read(name)[0] for name in blocks] == list(range(12))


def test_a_missing_numbered_tensor_is_named_as_its_source_writes_it(tmp_path):
    numbered(tmp_path / "mtf", ["stack/block_000/w", "stack/block_001/w"], 2)
    ss.convert(tmp_path / "mtf" / "model.ckpt", tmp_path / "hf", map=numbers_map(
        tmp_path / "forward.json", "stack/block_*/w", "block.{1:d}.w", "block.{block}.w"))
    back = numbers_map(tmp_path / "back.json", "block.*.w", "stack/block_{1:03d}/w", "stack/block_{block:03d}/w",
                       source={"layout": "safetensors", "config": "config.json"},
                       target={"layout": "tf", "config": "hparams.json"})
    with open(tmp_path / "hf" / "config.json", "w") as handle:
        json.dump({"n_layer": 3, "n_embd": 2}, handle)
    error = refused(tmp_path / "hf", tmp_path / "tf", map=back)
    assert str(error) == ("this GPT-2 (openai/gpt-2) checkpoint lacks 1 tensor the config's 3 blocks need: block.2.w; "
                          "convert a whole checkpoint of the family, or give the config that describes it with --config")


def test_a_missing_tensor_is_named_with_its_number_zero_padded_as_the_source_pads_it(tmp_path):
    checkpoint = numbered(tmp_path / "mtf", ["stack/block_000/w", "stack/block_002/w"], 3)
    error = refused(checkpoint, tmp_path / "hf", map=numbers_map(
        tmp_path / "forward.json", "stack/block_*/w", "block.{1:d}.w", "block.{block}.w"))
    assert str(error) == ("this GPT-2 (openai/gpt-2) checkpoint lacks 1 tensor the config's 3 blocks need: "
                          "stack/block_001/w; convert a whole checkpoint of the family, or give the config that "
                          "describes it with --config")


def test_a_capture_that_is_not_a_number_is_not_written_as_one(tmp_path):
    checkpoint = numbered(tmp_path / "mtf", ["stack/block_000/w", "stack/block_x/w"], 2)
    error = refused(checkpoint, tmp_path / "hf", map=numbers_map(
        tmp_path / "forward.json", "stack/block_*/w", "block.{1:d}.w", "block.{block}.w"))
    assert str(error) == ("rule 1 (stack/block_*/w -> block.{1:d}.w) writes 'x' as a number; match numbers only where "
                          "a target name writes one ({1:d}, {1:03d})")


def read_off_map(path):
    """A group that reads its vocabulary size off the embedding's rows (the config does not say it)."""
    return write_map(path, [{"from": "emb", "to": "wte.weight"}, {"from": "head", "to": "lm_head.weight"}],
                     config={"keys": {"n_embd": "n_embd"}},
                     targets={"dtypes": ["float32"], "groups": [{"config": {"vocab": ["wte.weight", 0]}, "tensors": {
                         "wte.weight": ["vocab", "n_embd"], "lm_head.weight": ["vocab", "n_embd"]}}]})


@pytest.mark.parametrize("head_rows, emb, message", [
    (7, True, None),
    (6, True, "this GPT-2 (openai/gpt-2) checkpoint has 1 tensor of the wrong shape: head gives lm_head.weight [6, 2] "
              "where the config implies [7, 2]; convert a whole checkpoint of the family, or give the config that "
              "describes it with --config"),
    (7, False, "this GPT-2 (openai/gpt-2) checkpoint lacks 1 tensor the config needs: emb; convert a whole "
               "checkpoint of the family, or give the config that describes it with --config"),
])
def test_a_group_reads_a_size_off_its_tensor_into_the_config(tmp_path, head_rows, emb, message):
    arrays = {"head": np.ones((head_rows, 2), np.float32), **({"emb": np.ones((7, 2), np.float32)} if emb else {})}
    os.makedirs(tmp_path / "ckpt")
    tf_bundle.write(str(tmp_path / "ckpt" / "model.ckpt"), arrays)
    with open(tmp_path / "ckpt" / "hparams.json", "w") as handle:
        json.dump({"n_embd": 2}, handle)
    layout = read_off_map(tmp_path / "map.json")
    if message is not None:
        assert str(refused(tmp_path / "ckpt" / "model.ckpt", tmp_path / "out", map=layout)) == message
        return
    ss.convert(tmp_path / "ckpt" / "model.ckpt", tmp_path / "out", map=layout)
    with open(tmp_path / "out" / "config.json") as handle:
        assert json.load(handle) == {"n_embd": 2, "vocab": 7, "activation_function": "gelu_new",
                                     "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
