"""Complete or refused: a layout map checks the tensors a checkpoint gives against what its config implies
(every one there, nothing else, each of the config's shape and a float dtype) before a byte is written,
and says in one line which kind of problem it found. Heads carry what they imply into the config."""

import json
import os

import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver.formats import safetensors as safetensors_file
from subsetsaver.formats.tf import bundle as tf_bundle

FIX_WHOLE = "convert a whole checkpoint of the family, or give the config that describes it with --config"
LAYER = ["attention/self/query/kernel", "attention/self/query/bias", "attention/self/key/kernel",
         "attention/self/key/bias", "attention/self/value/kernel", "attention/self/value/bias",
         "attention/output/dense/kernel", "attention/output/dense/bias", "attention/output/LayerNorm/gamma",
         "attention/output/LayerNorm/beta", "intermediate/dense/kernel", "intermediate/dense/bias",
         "output/dense/kernel", "output/dense/bias", "output/LayerNorm/gamma", "output/LayerNorm/beta"]


def bert_shapes(layers=2, hidden=4, vocab=5, labels=None, pretraining=False):
    """google-research/bert's names and shapes: the base model, and a run_classifier.py or run_pretraining.py head."""
    shapes = {"bert/embeddings/word_embeddings": (vocab, hidden), "bert/embeddings/token_type_embeddings": (2, hidden),
              "bert/embeddings/position_embeddings": (6, hidden), "bert/embeddings/LayerNorm/gamma": (hidden,),
              "bert/embeddings/LayerNorm/beta": (hidden,), "bert/pooler/dense/kernel": (hidden, hidden),
              "bert/pooler/dense/bias": (hidden,)}
    for layer in range(layers):
        for part in LAYER:
            width = 2 * hidden if part.startswith("intermediate") else hidden
            if part.endswith("kernel"):
                shape = (hidden, 2 * hidden) if part.startswith("intermediate") else (
                    (2 * hidden, hidden) if part.startswith("output/dense") else (hidden, hidden))
            else:
                shape = (width,)
            shapes[f"bert/encoder/layer_{layer}/{part}"] = shape
    if labels:
        shapes.update({"output_weights": (labels, hidden), "output_bias": (labels,)})
    if pretraining:
        shapes.update({"cls/predictions/transform/dense/kernel": (hidden, hidden),
                       "cls/predictions/transform/dense/bias": (hidden,),
                       "cls/predictions/transform/LayerNorm/gamma": (hidden,),
                       "cls/predictions/transform/LayerNorm/beta": (hidden,), "cls/predictions/output_bias": (vocab,),
                       "cls/seq_relationship/output_weights": (2, hidden), "cls/seq_relationship/output_bias": (2,)})
    return shapes


def write_bert(directory, shapes, *, layers=2, hidden=4, change=None, **config):
    """A checkpoint of ``shapes`` (random float32, ``change`` applied), Adam slots and the step beside them, and
    bert_config.json saying ``layers`` layers of width ``hidden``."""
    rng = np.random.default_rng(2)
    arrays = {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()}
    (change or (lambda arrays: None))(arrays)
    arrays.update({"global_step": np.int64(3), "bert/pooler/dense/kernel/adam_m": np.zeros((hidden, hidden), np.float32)})
    os.makedirs(directory, exist_ok=True)
    tf_bundle.write(os.path.join(directory, "model.ckpt"), arrays)
    with open(os.path.join(directory, "bert_config.json"), "w") as handle:
        json.dump({"vocab_size": 5, "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": 2,
                   "intermediate_size": 2 * hidden, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                   "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 6, "type_vocab_size": 2,
                   "initializer_range": 0.02, **config}, handle)
    return os.path.join(directory, "model.ckpt"), arrays


def refusal(tmp_path, run_cli, checkpoint, *extra):
    """convert --map bert-to-hf's one-line refusal (exit 2), once nothing is found written."""
    result = run_cli("convert", checkpoint, tmp_path / "out", "--map", "bert-to-hf", *extra)
    assert result.returncode == 2 and result.stdout == ""
    assert not os.path.exists(tmp_path / "out")
    assert result.stderr.startswith("subsetsaver: error: ") and result.stderr.count("\n") == 1
    assert len(result.stderr.encode()) < 2048
    return result.stderr[len("subsetsaver: error: "):-1]


def without(*names):
    return lambda arrays: [arrays.pop(name) for name in names]


def test_one_missing_tensor_is_named_with_the_layers_that_need_it(tmp_path, run_cli):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(),
                               change=without("bert/encoder/layer_1/attention/self/key/kernel"))
    assert refusal(tmp_path, run_cli, checkpoint) == (
        "this BERT (google-research/bert) checkpoint lacks 1 tensor the config's 2 layers need: "
        f"bert/encoder/layer_1/attention/self/key/kernel; {FIX_WHOLE}")


def test_a_whole_missing_layer_is_counted_and_the_first_few_named(tmp_path, run_cli):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(),
                               change=without(*[f"bert/encoder/layer_1/{part}" for part in LAYER]))
    assert refusal(tmp_path, run_cli, checkpoint) == (
        "this BERT (google-research/bert) checkpoint lacks 16 tensors the config's 2 layers need: "
        "bert/encoder/layer_1/attention/self/query/kernel, bert/encoder/layer_1/attention/self/query/bias, "
        f"bert/encoder/layer_1/attention/self/key/kernel and 13 more; {FIX_WHOLE}")


def test_a_config_with_more_layers_than_the_checkpoint_is_refused(tmp_path, run_cli):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(layers=2), layers=3)
    assert refusal(tmp_path, run_cli, checkpoint) == (
        "this BERT (google-research/bert) checkpoint lacks 16 tensors the config's 3 layers need: "
        "bert/encoder/layer_2/attention/self/query/kernel, bert/encoder/layer_2/attention/self/query/bias, "
        f"bert/encoder/layer_2/attention/self/key/kernel and 13 more; {FIX_WHOLE}")


def test_a_config_with_fewer_layers_than_the_checkpoint_is_refused(tmp_path, run_cli):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(layers=2), layers=1)
    assert refusal(tmp_path, run_cli, checkpoint) == (
        "this BERT (google-research/bert) checkpoint holds 16 tensors the map and config do not describe: "
        "bert/encoder/layer_1/attention/self/key/kernel, bert/encoder/layer_1/attention/self/query/kernel, "
        "bert/encoder/layer_1/attention/self/value/kernel and 13 more; drop the extra tensors in a copy of the map "
        "(its \"drop\"), or give them rules")


def test_a_missing_fixed_tensor_is_a_damaged_bert_not_another_family(tmp_path, run_cli):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(),
                               change=without("bert/embeddings/token_type_embeddings"))
    assert refusal(tmp_path, run_cli, checkpoint) == (
        "this BERT (google-research/bert) checkpoint lacks 1 tensor the config needs: "
        f"bert/embeddings/token_type_embeddings; {FIX_WHOLE}")


def _retype(name, dtype):
    def change(arrays):
        arrays[name] = arrays[name].astype(dtype)
    return change


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_an_integer_weight_is_refused_by_dtype(tmp_path, run_cli, dtype):
    name = "bert/encoder/layer_0/output/dense/kernel"
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(), change=_retype(name, dtype))
    assert refusal(tmp_path, run_cli, checkpoint) == (
        f"this BERT (google-research/bert) checkpoint has 1 tensor of a dtype the target does not take (float32, "
        f"float16, bfloat16 only): {name} is {dtype}; cast them to a float type first (subsetsaver rewrite --cast)")


def test_a_kernel_of_another_rank_is_refused_by_shape(tmp_path, run_cli):
    name = "bert/encoder/layer_1/attention/self/value/kernel"

    def change(arrays):
        arrays[name] = arrays[name][:, :, None]
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(), change=change)
    assert refusal(tmp_path, run_cli, checkpoint) == (
        f"this BERT (google-research/bert) checkpoint has 1 tensor of the wrong shape: {name} gives "
        f"bert.encoder.layer.1.attention.self.value.weight [1, 4, 4] where the config implies [4, 4]; {FIX_WHOLE}")


def test_shapes_that_disagree_with_the_config_width_are_all_counted(tmp_path, run_cli):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(hidden=4), hidden=8)
    message = refusal(tmp_path, run_cli, checkpoint)
    assert message.startswith(
        "this BERT (google-research/bert) checkpoint has 39 tensors of the wrong shape: bert/embeddings/word_embeddings "
        "gives bert.embeddings.word_embeddings.weight [5, 4] where the config implies [5, 8], ")
    assert message.endswith(f" and 36 more; {FIX_WHOLE}")


def test_a_three_label_classifier_carries_num_labels_labels_and_its_class(tmp_path):
    checkpoint, arrays = write_bert(tmp_path / "bert", bert_shapes(labels=3))
    labels = tmp_path / "labels.txt"
    labels.write_bytes("\ufeffnegative\nneutral\npositive\n".encode("utf-8"))
    report = ss.convert(checkpoint, tmp_path / "hf", map="bert-to-hf", labels=labels)
    assert (report.expected, report.heads, report.architecture) == (41, ("classifier",),
                                                                   "BertForSequenceClassification")
    with open(tmp_path / "hf" / "config.json") as handle:
        config = json.load(handle)
    assert config["num_labels"] == 3 and config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
    assert config["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
    (_, weight), = safetensors_file.read(tmp_path / "hf" / "model.safetensors", ["classifier.weight"])
    assert weight.tobytes() == arrays["output_weights"].tobytes()


def test_labels_that_do_not_fit_the_classifier_are_refused(tmp_path):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(labels=3))
    labels = tmp_path / "labels.txt"
    labels.write_text("yes\nno\n")
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(checkpoint, tmp_path / "hf", map="bert-to-hf", labels=labels)
    assert str(error.value) == (f"labels '{labels}' hold 2 labels (2 different), where the classifier has 3; give "
                                "one distinct label a line, in the classifier's order")
    plain, _ = write_bert(tmp_path / "plain", bert_shapes())
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(plain, tmp_path / "hf", map="bert-to-hf", labels=labels)
    assert str(error.value) == (f"--labels '{labels}' names a classifier's labels, but this checkpoint has no "
                                "classifier head; leave out --labels")
    assert not os.path.exists(tmp_path / "hf")


def test_a_pretraining_head_is_all_or_nothing(tmp_path, run_cli):
    whole, _ = write_bert(tmp_path / "whole", bert_shapes(pretraining=True))
    report = ss.convert(whole, tmp_path / "hf", map="bert-to-hf")
    assert (report.heads, report.architecture) == (("pretraining",), "BertForPreTraining")
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(pretraining=True),
                               change=without("cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"))
    assert refusal(tmp_path, run_cli, checkpoint) == (
        "this BERT (google-research/bert) checkpoint lacks 2 tensors the pretraining head needs: "
        f"cls/seq_relationship/output_weights, cls/seq_relationship/output_bias; {FIX_WHOLE}")


def test_two_heads_no_class_holds_are_refused(tmp_path):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(labels=2, pretraining=True))
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(checkpoint, tmp_path / "hf", map="bert-to-hf")
    assert str(error.value) == ("this checkpoint holds the pretraining and classifier heads, and no one BERT "
                                "(google-research/bert) class holds them all; convert a copy without one of them")


def test_an_activation_without_an_exact_twin_is_refused(tmp_path):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes())
    ss.convert(checkpoint, tmp_path / "hf", map="bert-to-hf")
    config_path = tmp_path / "hf" / "config.json"
    config = json.loads(config_path.read_text())
    assert (config["hidden_act"], config["layer_norm_eps"], config["tie_word_embeddings"]) == ("gelu_new", 1e-12, True)
    config["hidden_act"] = "gelu"  # Hugging Face's exact erf GELU: google-research/bert has only the tanh one
    config_path.write_text(json.dumps(config))
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(tmp_path / "hf", tmp_path / "back", map="hf-to-bert")
    assert str(error.value) == (
        f"config '{config_path}' says \"hidden_act\": \"gelu\", which the map's activation does not convert (it knows "
        "gelu_new, gelu_pytorch_tanh, relu, tanh, linear); convert with a map that states this value's exact twin in "
        "the target library, or none: a near twin gives a model that loads and is wrong")
    assert not os.path.exists(tmp_path / "back")


def test_the_config_may_be_given_when_the_map_names_none(tmp_path):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes())
    layout = json.loads(open(ss.layouts.load_map("bert-to-hf").path).read())
    del layout["source"]["config"]
    (tmp_path / "map.json").write_text(json.dumps(layout))
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(checkpoint, tmp_path / "hf", map=str(tmp_path / "map.json"))
    assert str(error.value) == ("map 'bert-to-hf' names no config file to look for; give the BERT "
                                "(google-research/bert) config file with --config FILE (config= in Python)")
    report = ss.convert(checkpoint, tmp_path / "hf", map=str(tmp_path / "map.json"),
                        config=tmp_path / "bert" / "bert_config.json")
    assert report.expected == 39
