"""``ss.keras.convert_weights`` in this process, from a safetensors file named as tf_keras names weights:
the file Keras 3 loads, tf_keras's names read for Keras 3's renamed weights, and every refusal made before
anything is written (a mismatch, a wrong output name, a file that does not read back as loaded)."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from safetensors.numpy import save_file

import subsetsaver as ss
from subsetsaver.formats import keras_h5

SHAPES = {"hidden/kernel": (4, 3), "hidden/bias": (3,), "depthwise/depthwise_kernel": (1, 1, 1),
          "depthwise/bias": (1,)}


def build():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3, name="hidden")(inputs)
    outputs = keras.layers.DepthwiseConv1D(1, name="depthwise")(keras.layers.Reshape((3, 1))(hidden))
    return keras.Model(inputs, outputs, name="net")


@pytest.fixture
def source(tmp_path):
    rng = np.random.default_rng(3)
    values = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in SHAPES.items()}
    path = str(tmp_path / "tf_keras.safetensors")
    save_file(values, path)
    return path, values


def test_the_written_file_loads_in_keras_with_tf_keras_names_read_for_renamed_weights(source, tmp_path):
    path, values = source
    output = str(tmp_path / "out" / "net.weights.h5")
    report = ss.keras.convert_weights(path, output, build)
    assert report.load.restored == {"hidden/kernel": "hidden/kernel", "hidden/bias": "hidden/bias",
                                    "depthwise/kernel": "depthwise/depthwise_kernel", "depthwise/bias": "depthwise/bias"}
    assert (report.tensors, report.nbytes, report.verified) == (4, 68, tuple(report.load.restored))
    fresh = build()
    fresh.load_weights(output)
    for weight, key in report.load.restored.items():
        assert np.asarray(fresh.get_layer(weight.split("/")[0]).weights[0 if "kernel" in weight else 1].numpy()
                          ).tobytes() == values[key].tobytes(), weight
    assert sorted(os.listdir(tmp_path / "out")) == ["net.weights.h5"]


def test_a_missing_weight_is_refused_before_anything_is_written(tmp_path):
    path = str(tmp_path / "partial.safetensors")
    save_file({"hidden/kernel": np.zeros((4, 3), np.float32), "hidden/bias": np.zeros(3, np.float32)}, path)
    output = tmp_path / "out" / "net.weights.h5"
    with pytest.raises(ss.CheckpointMismatchError) as refused:
        ss.keras.convert_weights(path, output, build)
    assert str(refused.value) == (
        f"checkpoint '{path}' does not match the Keras model 'net' (match='name'): 2 missing\n"
        "  missing: depthwise/kernel, expected [1, 1, 1] float32\n"
        "  missing: depthwise/bias, expected [1] float32\n"
        "no variable was changed\n"
        "Pass remap={checkpoint name or scope: model name or scope} to pair the names.")
    assert not (tmp_path / "out").exists()


def test_an_output_keras_would_not_read_is_refused_by_its_name(source, tmp_path):
    with pytest.raises(ss.SubsetSaverError) as refused:
        ss.keras.convert_weights(source[0], tmp_path / "net.h5", build)
    assert str(refused.value) == (f"output '{tmp_path}/net.h5': Keras 3's load_weights reads only files named "
                                  f"*.weights.h5; name it '{tmp_path}/net.weights.h5'")


def test_a_file_that_does_not_read_back_as_loaded_is_not_put_in_place(source, tmp_path, monkeypatch):
    reading = keras_h5.read

    def damaged(path, names):
        for name, array in reading(path, names):
            yield name, array + 1 if name.endswith("dense/vars/1") else array

    monkeypatch.setattr(keras_h5, "read", damaged)
    with pytest.raises(ss.CorruptCheckpointError) as refused:
        ss.keras.convert_weights(source[0], tmp_path / "out.weights.h5", build)
    assert str(refused.value) == (f"Keras weights file '{tmp_path}/out.weights.h5' does not hold what was loaded "
                                  f"from '{source[0]}': 'layers/dense/vars/1' (weight 'hidden/bias') holds other bytes "
                                  "than 'hidden/bias'")
    assert os.listdir(tmp_path) == ["tf_keras.safetensors"]


def test_an_application_keras_does_not_have_is_a_model_builder_error(source, tmp_path, run_cli):
    with pytest.raises(ss.ModelBuilderError) as refused:
        ss.keras.convert_weights(source[0], tmp_path / "net.weights.h5", "keras.applications.EfficientNetB9")
    assert str(refused.value) == ("model builder 'keras.applications.EfficientNetB9': keras.applications has no "
                                  "'EfficientNetB9' (e.g. keras.applications.EfficientNetB0)")
    done = run_cli("convert", source[0], tmp_path / "net.weights.h5", "--to", "keras", "--model",
                   "keras.applications.EfficientNetB9")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"subsetsaver: error: {refused.value}\n")
    assert os.listdir(tmp_path) == ["tf_keras.safetensors"]


def test_flags_that_leave_weights_unfilled_do_not_go_with_to_keras(source, tmp_path, run_cli):
    done = run_cli("convert", source[0], tmp_path / "n.weights.h5", "--to", "keras", "--model", "m:b",
                   "--on-mismatch", "initialize")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == ("Error: --on-mismatch does not go with --to keras --model: every weight "
                                            "of the model is filled")


OTHER_BACKEND = textwrap.dedent("""
    import json, sys
    import keras
    import numpy as np
    import subsetsaver as ss
    from test_keras_convert_weights import build

    source, output = sys.argv[1:]
    report = ss.keras.convert_weights(source, output, build)
    fresh = build()
    fresh.load_weights(output)
    print("RESULT " + json.dumps({"backend": keras.backend.backend(), "tensors": report.tensors,
                                  "kernel": np.asarray(fresh.get_layer("depthwise").weights[0]).tolist(),
                                  "tensorflow": "tensorflow" in sys.modules}))
""")


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_it_runs_on_the_torch_and_jax_backends_without_tensorflow(source, tmp_path, backend):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed (the test extra installs it)")
    path, values = source
    tests = os.path.dirname(os.path.abspath(__file__))
    environment = {**os.environ, "KERAS_BACKEND": backend,
                   "PYTHONPATH": os.pathsep.join([os.path.dirname(tests), tests])}
    done = subprocess.run([sys.executable, "-c", OTHER_BACKEND, path, str(tmp_path / "net.weights.h5")],
                          env=environment, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    assert json.loads(lines[-1][len("RESULT "):]) == {
        "backend": backend, "tensors": 4, "kernel": values["depthwise/depthwise_kernel"].tolist(), "tensorflow": False}
