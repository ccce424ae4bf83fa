"""Which values a conversion reads (moving averages or raw) and a classifier's background class, on small
files in this process: ``ss.keras.convert_weights`` (``convert --to keras --model``), ``ss.convert``
(``convert --map``) and ``ss.keras.load_checkpoint``. Each trap gives a file that loads and is wrong, so
every test checks the values written, not only that something was."""

import json
import os

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import subsetsaver as ss
from subsetsaver.catalog import choose_weights, file_catalog

EMA = "ExponentialMovingAverage"
SHAPES = {"hidden/kernel": (4, 3), "hidden/bias": (3,), "logits/kernel": (3, 6), "logits/bias": (6,)}


def build(classes=5):
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(classes, name="logits")(hidden), name="net")


def build_six():
    return build(6)


def write(path, shadows=tuple(SHAPES), extra=None):
    """A file of the four weights (six classes: a background class 0 and five) and the shadows of ``shadows``,
    each shadow the weight plus 100 so that the values say which was read."""
    rng = np.random.default_rng(7)
    values = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in SHAPES.items()}
    values.update({f"{name}/{EMA}": values[name] + 100 for name in shadows})
    values.update(extra or {})
    save_file(values, str(path))
    return str(path), values


def weights_of(path):
    model = build()
    model.load_weights(path)
    return {weight.path: np.asarray(weight.numpy()) for weight in model.weights}


def test_every_weight_averaged_converts_the_averages_and_says_so(tmp_path):
    source, values = write(tmp_path / "ema.safetensors")
    output = str(tmp_path / "net.weights.h5")
    report = ss.keras.convert_weights(source, output, build, drop_background_class=True)
    got = weights_of(output)
    assert got["hidden/kernel"].tobytes() == values[f"hidden/kernel/{EMA}"].tobytes()
    assert got["logits/kernel"].tobytes() == values[f"logits/kernel/{EMA}"][:, 1:].tobytes()
    assert got["logits/bias"].tobytes() == values[f"logits/bias/{EMA}"][1:].tobytes()
    assert report.load.weights == "ema"
    assert report.load.read_from == {name: f"{name}/{EMA}" for name in SHAPES}
    assert report.notes == ("weights: moving averages (ExponentialMovingAverage) of 4 of 4",
                            "classes: 5 of the checkpoint's 6 (class 0, the background, dropped)")
    assert (report.load.classes, report.load.background_class) == ((6, 5), "dropped")


def test_weights_raw_converts_the_raw_values(tmp_path):
    source, values = write(tmp_path / "ema.safetensors")
    output = str(tmp_path / "net.weights.h5")
    report = ss.keras.convert_weights(source, output, build_six, weights="raw")
    got = {weight.path: np.asarray(weight.numpy()) for weight in _loaded(build_six(), output).weights}
    assert all(got[name].tobytes() == values[name].tobytes() for name in SHAPES)
    assert report.notes == ("weights: raw values; their 4 moving averages left out",)
    assert (report.load.weights, report.load.read_from, report.load.background_class) == ("raw", {}, "kept")


def _loaded(model, path):
    model.load_weights(path)
    return model


def test_averages_of_some_weights_only_are_refused_with_the_fix(tmp_path):
    source, _ = write(tmp_path / "partial.safetensors", shadows=("hidden/kernel", "logits/kernel"))
    output = tmp_path / "net.weights.h5"
    with pytest.raises(ss.WeightsChoiceError) as refused:
        ss.keras.convert_weights(source, output, build_six)
    assert str(refused.value) == (
        f"checkpoint '{source}' holds moving averages (ExponentialMovingAverage) of 2 of its 4 weights, not of "
        "hidden/bias, logits/bias: averages of some weights and raw values of others would mix two models; pass "
        "weights='raw' to convert the raw values")
    with pytest.raises(ss.WeightsChoiceError) as refused:
        ss.keras.convert_weights(source, output, build_six, weights="ema")
    assert str(refused.value) == (
        f"checkpoint '{source}' holds moving averages (ExponentialMovingAverage) of 2 of its 4 weights, not of "
        "hidden/bias, logits/bias: --weights ema needs one of each; pass weights='raw' to convert the raw values")
    assert not output.exists() and os.listdir(tmp_path) == ["partial.safetensors"]
    ss.keras.convert_weights(source, output, build_six, weights="raw")
    assert output.exists()


def test_weights_ema_without_averages_is_refused(tmp_path):
    source, _ = write(tmp_path / "plain.safetensors", shadows=())
    with pytest.raises(ss.WeightsChoiceError) as refused:
        ss.keras.convert_weights(source, tmp_path / "net.weights.h5", build_six, weights="ema")
    assert str(refused.value) == (f"checkpoint '{source}' holds no moving averages (ExponentialMovingAverage) of its "
                                  "4 weights; pass weights='raw' to convert the raw values")
    report = ss.keras.convert_weights(source, tmp_path / "net.weights.h5", build_six)
    assert (report.load.weights, report.notes) == ("raw", ())


def test_batch_norm_statistics_without_averages_are_read_raw(tmp_path):
    """``ema.apply(tf.trainable_variables())`` leaves the moving statistics without shadows, and TensorFlow's
    ``variables_to_restore()`` restores them raw: so does the default."""
    path = str(tmp_path / "bn.safetensors")
    values = {"bn/gamma": np.full(3, 2, np.float32), "bn/beta": np.ones(3, np.float32),
              "bn/moving_mean": np.full(3, 0.5, np.float32), "bn/moving_variance": np.full(3, 4, np.float32)}
    values.update({f"bn/gamma/{EMA}": np.full(3, 3, np.float32), f"bn/beta/{EMA}": np.zeros(3, np.float32)})
    save_file(values, path)
    choice = choose_weights(file_catalog(path), ["bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance"],
                            None, path)
    assert (choice.used, choice.read_from, choice.raw_statistics) == (
        "ema", {"bn/gamma": f"bn/gamma/{EMA}", "bn/beta": f"bn/beta/{EMA}"}, ("bn/moving_mean", "bn/moving_variance"))
    assert choice.describe(4) == ("weights: moving averages (ExponentialMovingAverage) of 2 of 4; 2 batch-norm "
                                  "statistics without one read raw")


def test_a_background_class_is_refused_without_the_flag_and_the_flag_without_one(tmp_path):
    source, _ = write(tmp_path / "ema.safetensors")
    output = tmp_path / "net.weights.h5"
    with pytest.raises(ss.WeightsChoiceError) as refused:
        ss.keras.convert_weights(source, output, build)
    assert str(refused.value) == (
        f"checkpoint '{source}' classifies into 6 classes ('logits/bias'), the Keras model 'net' into 5 "
        "('logits/bias'): tf-slim's class 0 is the background; pass drop_background_class=True to drop class 0 and "
        "keep the other 5")
    with pytest.raises(ss.WeightsChoiceError) as refused:
        ss.keras.convert_weights(source, output, build_six, drop_background_class=True)
    assert str(refused.value) == (
        f"drop_background_class: checkpoint '{source}' classifies into 6 classes ('logits/bias'), as the Keras "
        "model 'net' does ('logits/bias'): there is no background class to drop; pass drop_background_class=False "
        "to keep every class")
    assert not output.exists()


def test_the_command_line_names_its_flags(tmp_path, run_cli, monkeypatch):
    source, _ = write(tmp_path / "partial.safetensors", shadows=("hidden/kernel",))
    (tmp_path / "builders.py").write_text("from test_moving_averages_and_classes import build\n")
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("convert", "partial.safetensors", "net.weights.h5", "--to", "keras", "--model",
                             "builders.py:build")
    assert (code, out) == (2, "")
    assert err == (
        "subsetsaver: error: checkpoint 'partial.safetensors' holds moving averages (ExponentialMovingAverage) of 1 "
        "of its 4 weights, not of hidden/bias, logits/kernel, logits/bias: averages of some weights and raw values "
        "of others would mix two models; pass --weights raw to convert the raw values\n")
    code, out, err = run_cli("convert", "partial.safetensors", "net.weights.h5", "--to", "keras", "--model",
                             "builders.py:build", "--weights", "raw")
    assert (code, out) == (2, "")
    assert err == (
        "subsetsaver: error: checkpoint 'partial.safetensors' classifies into 6 classes ('logits/bias'), the Keras "
        "model 'net' into 5 ('logits/bias'): tf-slim's class 0 is the background; pass --drop-background-class to "
        "drop class 0 and keep the other 5\n")
    code, out, err = run_cli("convert", "partial.safetensors", "net.weights.h5", "--to", "keras", "--model",
                             "builders.py:build", "--weights", "raw", "--drop-background-class", "--json")
    assert code == 0, err
    found = json.loads(out)
    assert (found["weights"], found["read_from"], found["classes"], found["background_class"]) == (
        "raw", {}, [6, 5], "dropped")
    assert found["notes"] == ["weights: raw values; their 1 moving averages left out",
                              "classes: 5 of the checkpoint's 6 (class 0, the background, dropped)"]
    code, out, err = run_cli("convert", "partial.safetensors", "out.npz", "--weights", "raw")
    assert (code, out, err) == (
        2, "", "Usage: subsetsaver convert [OPTIONS] SOURCE OUTPUT\nTry 'subsetsaver convert --help' for help.\n\n"
           "Error: --weights is for --to keras --model, --to object --model or --map (conversions that map a model's "
           "weights)\n")


def test_load_checkpoint_reads_raw_values_unless_asked(tmp_path):
    """Resuming training needs the raw values: load_checkpoint's default is 'raw'; weights=None chooses as a
    conversion does."""
    source, values = write(tmp_path / "ema.safetensors")
    model = build_six()
    report = ss.keras.load_checkpoint(model, source)
    assert report.weights == "raw" and model.get_layer("hidden").kernel.numpy().tobytes() == \
        values["hidden/kernel"].tobytes()
    report = ss.keras.load_checkpoint(model, source, weights=None)
    assert report.weights == "ema" and model.get_layer("hidden").kernel.numpy().tobytes() == \
        values[f"hidden/kernel/{EMA}"].tobytes()


# --- convert --map: a map that declares its classifier ---------------------------------------------------------

MAP = {
    "name": "toy-to-hf", "family": "toy classifier",
    "source": {"layout": "tf", "config": "toy_config.json"},
    "target": {"layout": "safetensors", "config": "config.json"},
    "drop": "slots() | global_step()",
    "rules": [{"from": "hidden/*", "to": "hidden.{1}"}, {"from": "logits/kernel", "to": "classifier.weight",
                                                        "transform": ["transpose"]},
              {"from": "logits/bias", "to": "classifier.bias"}],
    "classifier": {"classifier.weight": 0, "classifier.bias": 0},
    "config": {"keys": {"hidden": "hidden"}},
    "math": {"activation": {"key": None, "value": "linear"}, "layer_norm_eps": {"key": None, "value": None},
             "position_embedding": {"key": None, "value": None}, "tied_embeddings": {"key": None, "value": False}},
    "targets": {"dtypes": ["float32"], "groups": [{"tensors": {"hidden.kernel": [4, "hidden"], "hidden.bias": ["hidden"]}}],
                "heads": {"classifier": {"architecture": "Toy", "tensors": {"classifier.weight": ["num_labels", "hidden"],
                                                                            "classifier.bias": ["num_labels"]},
                                         "config": {"num_labels": ["classifier.bias", 0]}}}},
}


@pytest.fixture
def toy_checkpoint(tmp_path):
    source, values = write(tmp_path / "ema.safetensors")
    ss.rewrite(source, str(tmp_path / "ckpt" / "model.ckpt"))
    (tmp_path / "ckpt" / "toy_config.json").write_text(json.dumps({"hidden": 3}))
    (tmp_path / "toy-to-hf.json").write_text(json.dumps(MAP))
    return str(tmp_path / "ckpt" / "model.ckpt"), str(tmp_path / "toy-to-hf.json"), values


def test_a_map_converts_the_averages_and_drops_class_0_of_its_classifier(toy_checkpoint, tmp_path):
    checkpoint, layout, values = toy_checkpoint
    report = ss.convert(checkpoint, tmp_path / "hf", map=layout, drop_background_class=True)
    got = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert got["hidden.kernel"].tobytes() == values[f"hidden/kernel/{EMA}"].tobytes()
    assert got["classifier.weight"].tobytes() == np.ascontiguousarray(values[f"logits/kernel/{EMA}"].T[1:]).tobytes()
    assert got["classifier.bias"].tobytes() == values[f"logits/bias/{EMA}"][1:].tobytes()
    assert (report.weights, report.classes, report.background_class) == ("ema", (6, 5), "dropped")
    assert report.notes == ("weights: moving averages (ExponentialMovingAverage) of 4 of 4",
                            "classes: 5 of the checkpoint's 6 (class 0, the background, dropped)")
    assert [row[2] for row in report.rows if row[1].startswith("classifier")] == ["transpose, drop_first(0)", "drop_first(0)"]
    raw = ss.convert(checkpoint, tmp_path / "raw", map=layout, weights="raw")
    got = load_file(str(tmp_path / "raw" / "model.safetensors"))
    assert got["classifier.bias"].tobytes() == values["logits/bias"].tobytes()
    assert (raw.weights, raw.classes, raw.background_class) == ("raw", (6, 6), "kept")


def test_a_map_without_a_classifier_refuses_the_flag(toy_checkpoint, tmp_path):
    checkpoint, layout, _ = toy_checkpoint
    plain = {key: value for key, value in MAP.items() if key != "classifier"}
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    with pytest.raises(ss.WeightsChoiceError) as refused:
        ss.convert(checkpoint, tmp_path / "hf", map=str(tmp_path / "plain.json"), drop_background_class=True)
    assert str(refused.value) == (
        f"drop_background_class: map 'toy-to-hf' declares no classifier that checkpoint '{checkpoint}' has "
        "(\"classifier\": target names and class axes); pass drop_background_class=False to convert without it")
    assert not (tmp_path / "hf").exists()


def test_the_map_command_says_which_values_and_classes_it_wrote(toy_checkpoint, tmp_path, run_cli):
    checkpoint, layout, _ = toy_checkpoint
    code, out, err = run_cli("convert", checkpoint, tmp_path / "hf", "--map", layout, "--drop-background-class",
                             "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[-3:] == ["weights: moving averages (ExponentialMovingAverage) of 4 of 4",
                          "classes: 5 of the checkpoint's 6 (class 0, the background, dropped)",
                          "4 tensors, 140 B; dropped 0 by the map's \"drop\"; nothing written (--dry-run)"]
    assert "logits/bias    classifier.bias    drop_first(0)             [5]" in lines
    code, out, err = run_cli("convert", checkpoint, tmp_path / "hf", "--map", layout, "--weights", "ema", "--json")
    assert code == 0, err
    found = json.loads(out)
    assert (found["weights"], found["classes"], found["background_class"]) == ("ema", [6, 6], "kept")
    assert found["read_from"]["logits/bias"] == f"logits/bias/{EMA}"
