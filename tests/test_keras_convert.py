"""``subsetsaver convert CKPT OUT --to object --model MODULE:FUNCTION`` (``ss.keras.convert_checkpoint``):
a TF1 graph checkpoint (convolution, hand-written batch norm, dense; Adam; a few steps; a ``Saver``)
written as a TF2 object-based checkpoint of the Keras 3 model a user's function builds, read back
by ``tf.train.Checkpoint(...).read`` into a fresh model that predicts bit-exact what the TF1 graph
predicted, with Adam's moments and step; every refusal one line, exit 2, and nothing written.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from test_keras_load import REMAP, STEPS, WEIGHTS, Trained, batch

import subsetsaver as ss
import subsetsaver.keras.convert as convert_module
from subsetsaver import catalog
from subsetsaver.selectors import format_bytes

BUILDERS = '''
import keras


def build():
    inputs = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(4, 3, name="conv")(inputs)
    h = keras.layers.BatchNormalization(name="bn", epsilon=1e-3, momentum=0.9)(h)
    h = keras.layers.ReLU(name="relu")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(h), name="net")
    return model, keras.optimizers.Adam(0.01, name="adam")


def model_only():
    return build()[0]


def raises():
    raise RuntimeError("no GPU here")


def not_a_model():
    return {"model": 1}


def unbuilt():
    return keras.Sequential([keras.layers.Dense(2)], name="lazy")


not_a_function = 3
'''
REMAP_FLAGS = [word for old, new in REMAP.items() for word in ("--remap", f"{old}={new}")]
SLOTS = {f"adam/{weight.replace('/', '_')}_{kind}": f"{key}/{suffix}"
         for weight, key in WEIGHTS.items() if "moving" not in weight
         for kind, suffix in (("momentum", "Adam"), ("velocity", "Adam_1"))}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return Trained(str(tmp_path_factory.mktemp("tf1")))


@pytest.fixture
def builders(tmp_path, monkeypatch):
    """A directory holding ``tests_module.py``, the current one (``--model tests_module:build``)."""
    directory = tmp_path / "code"
    directory.mkdir()
    (directory / "tests_module.py").write_text(BUILDERS)
    monkeypatch.chdir(directory)
    monkeypatch.delitem(sys.modules, "tests_module", raising=False)
    yield directory
    sys.modules.pop("tests_module", None)


def fresh(builders):
    """A new model and optimizer from the same file, as a Keras 3 user builds them to read OUT."""
    namespace = {}
    exec(compile((builders / "tests_module.py").read_text(), "tests_module.py", "exec"), namespace)  # noqa: S102
    return namespace["build"]()


def out_bytes(prefix):
    reader = tf.train.load_checkpoint(prefix)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    names = [name for name in shapes if name != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    return len(names), sum(int(np.prod(shapes[n], dtype=np.int64)) * dtypes[n].size for n in names)


def test_a_tf1_checkpoint_becomes_an_object_based_one_that_keras_3_reads_back(trained, builders, tmp_path, run_cli):
    out = tmp_path / "tf2" / "ckpt"
    result = run_cli("convert", trained.prefix, out, "--to", "object", "--model", "tests_module:build", *REMAP_FLAGS)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    tensors, nbytes = out_bytes(str(out))
    assert tensors == 22
    assert result.stdout.splitlines() == [
        f"wrote object-based checkpoint {out}: 22 tensors, {format_bytes(nbytes)} (from {trained.prefix}, "
        "through tests_module:build)",
        "loaded 8 of 8 weights and 13 of 14 optimizer variables (iterations 3); all 21 read back bit-exact",
        "left as built: adam/learning_rate",
        "not read: beta1_power, beta2_power",
    ]
    assert tf.train.latest_checkpoint(str(out.parent)) == str(out)
    assert sorted(os.listdir(out.parent)) == ["checkpoint", "ckpt.data-00000-of-00001", "ckpt.index"]

    model, optimizer = fresh(builders)  # unbuilt: Keras builds it after the read, and the read waits for it
    status = tf.train.Checkpoint(model=model, optimizer=optimizer).read(str(out))
    optimizer.build(model.trainable_variables)
    status.assert_consumed()
    prediction = np.asarray(model(batch(seed=5)[0], training=False))
    assert prediction.dtype == trained.prediction.dtype and prediction.tobytes() == trained.prediction.tobytes()
    held = {v.path: np.asarray(v.numpy()) for v in optimizer.variables}
    for path, key in SLOTS.items():
        assert held[path].tobytes() == trained.values[key].tobytes(), path
    assert int(optimizer.iterations.numpy()) == STEPS
    assert held["adam/learning_rate"] == np.float32(0.01)

    inspected = run_cli("inspect", out)
    assert inspected.returncode == 0, inspected.stderr
    lines = inspected.stdout.splitlines()
    assert lines[0] == f"checkpoint {out} (TensorFlow object-based checkpoint): 22 tensors, {format_bytes(nbytes)}"
    assert lines[1].split() == ["name", "shape", "dtype", "bytes", "size", "roles", "object", "path"]
    listed = {line.split()[0] for line in lines[3:25]}
    assert listed == {*WEIGHTS, *SLOTS, "adam/iteration", "adam/learning_rate"}
    assert catalog.checkpoint_kind(str(out)) == "object"


def test_json_by_order_from_a_file_path_and_a_model_alone(trained, builders, tmp_path, run_cli):
    out = tmp_path / "tf2" / "ckpt"
    result = run_cli("convert", os.path.dirname(trained.prefix), out, "--to", "object", "--model",
                     builders / "tests_module.py:model_only", "--match", "order", "--json")
    assert result.returncode == 0, result.stderr
    tensors, nbytes = out_bytes(str(out))
    names = list(WEIGHTS)
    assert json.loads(result.stdout) == {
        "source": trained.prefix, "output": str(out), "kind": "object-based checkpoint", "format": "object",
        "source_format": "name", "source_kind": "name", "model": f"{builders / 'tests_module.py'}:model_only",
        "tensors": tensors, "bytes": nbytes, "match": "order", "restored": WEIGHTS, "optimizer_restored": {},
        "iterations": None, "initialized": [], "optimizer_initialized": [],
        "unused": sorted(["beta1_power", "beta2_power", "global_step", *SLOTS.values()]), "verified": names,
        "weights": "raw", "read_from": {}, "classes": [2, 2], "background_class": "kept", "notes": [],
    }
    assert tensors == 8
    model, _ = fresh(builders)
    tf.train.Checkpoint(model=model).read(str(out)).assert_consumed()
    assert np.asarray(model(batch(seed=5)[0], training=False)).tobytes() == trained.prediction.tobytes()


def test_keep_loads_the_chosen_weights_and_their_slots(trained, builders, tmp_path):
    report = ss.keras.convert_checkpoint(trained.prefix, tmp_path / "ckpt", "tests_module:build", keep="scope('dense')",
                                         remap=REMAP)
    assert report.load.restored == {"dense/kernel": "dense/w", "dense/bias": "dense/b"}
    assert report.verified == ("dense/kernel", "dense/bias", "adam/dense_kernel_momentum",
                               "adam/dense_kernel_velocity", "adam/dense_bias_momentum", "adam/dense_bias_velocity",
                               "adam/iteration")
    assert report.tensors == 22 and report.builder == "tests_module:build"


@pytest.mark.parametrize("model, message", [
    ("build", "model builder 'build' is not MODULE:FUNCTION: name a module (my_models, pkg.models) or a file "
              "(path/to/models.py), a colon and a function of no arguments, e.g. my_models:build"),
    ("tests module:build", "model builder 'tests module:build' is not MODULE:FUNCTION: name a module (my_models, "
                           "pkg.models) or a file (path/to/models.py), a colon and a function of no arguments, "
                           "e.g. my_models:build"),
    ("tests_module:", "model builder 'tests_module:' is not MODULE:FUNCTION: name a module (my_models, pkg.models) "
                      "or a file (path/to/models.py), a colon and a function of no arguments, e.g. my_models:build"),
    ("no_such_module:build", "model builder 'no_such_module:build': cannot import module 'no_such_module' "
                             "(ModuleNotFoundError: No module named 'no_such_module')"),
    ("missing.py:build", "model builder 'missing.py:build': no file 'missing.py'"),
    ("tests_module:nope", "model builder 'tests_module:nope': module 'tests_module' has no function 'nope'"),
    ("tests_module:not_a_function", "model builder 'tests_module:not_a_function': 'not_a_function' of module "
                                    "'tests_module' is not a function (it is int)"),
    ("tests_module:raises", "model builder 'tests_module:raises' raised RuntimeError: no GPU here"),
    ("tests_module:not_a_model", "model builder 'tests_module:not_a_model' returned a dict, not a Keras 3 model or "
                                 "tf.Module, or a (model, optimizer) tuple with a Keras 3 optimizer"),
    ("tests_module:unbuilt", "model 'lazy' has no variables yet; build it first (model.build(input_shape), or call "
                             "it once on a batch)"),
])
def test_a_bad_model_builder_is_one_line_and_nothing_is_written(trained, builders, tmp_path, run_cli, model, message):
    out = tmp_path / "tf2" / "ckpt"
    result = run_cli("convert", trained.prefix, out, "--to", "object", "--model", model, *REMAP_FLAGS)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"subsetsaver: error: {message}\n")
    assert not out.parent.exists()


def test_refusals_before_anything_is_written(trained, builders, tmp_path, run_cli):
    out = tmp_path / "tf2" / "ckpt"
    cases = [
        (["--to", "object"], "Error: --to object needs --model MODULE:FUNCTION: a function that returns the Keras 3 "
                             "model (or tf.Module, or (model, optimizer)) to write"),
        (["--model", "tests_module:build"], "Error: --model is for --to object or --to keras (a Keras 3 model's "
                                            "checkpoint or .weights.h5)"),
        (["--match", "order"], "Error: --match is for --to object or --to keras (a Keras 3 model's checkpoint or "
                               ".weights.h5)"),
        (["--on-mismatch", "initialize"],
         "Error: --on-mismatch is for --to object or --to keras (a Keras 3 model's checkpoint or .weights.h5)"),
    ]
    for flags, last in cases:
        result = run_cli("convert", trained.prefix, out, *flags)
        assert (result.returncode, result.stdout, result.stderr.splitlines()[-1]) == (2, "", last)
    mismatch = run_cli("convert", trained.prefix, out, "--to", "object", "--model", "tests_module:build")
    assert mismatch.returncode == 2 and mismatch.stdout == ""
    assert mismatch.stderr.splitlines()[0] == (
        f"subsetsaver: error: checkpoint '{trained.prefix}' does not match the Keras model 'net' and optimizer "
        "'adam' (match='name'): 8 missing, 8 unexpected")
    assert mismatch.stderr.splitlines()[-3:] == [  # advice in flags, not in Python arguments
        "no variable was changed",
        "Pass --remap conv_1/bn/=bn/ to read each variable bn/NAME from the checkpoint's conv_1/bn/NAME "
        "(the checkpoint holds 4 of the 8 missing variables that way).",
        "Pass --on-mismatch initialize to leave the unmatched variables as they are."]
    assert not out.parent.exists()
    kept = run_cli("convert", trained.prefix, out, "--to", "object", "--model", "tests_module:build",
                   "--on-mismatch", "initialize", "--json")
    assert kept.returncode == 0, kept.stderr
    report = json.loads(kept.stdout)
    assert report["restored"] == {} and len(report["initialized"]) == 8
    assert report["optimizer_restored"] == {"adam/iteration": "global_step"}
    shutil.rmtree(out.parent)

    assert run_cli("convert", trained.prefix, out, "--to", "object", "--model", "tests_module:build",
                   *REMAP_FLAGS).returncode == 0
    before = {name: (out.parent / name).read_bytes() for name in os.listdir(out.parent)}
    again = run_cli("convert", trained.prefix, out, "--to", "object", "--model", "tests_module:build", *REMAP_FLAGS)
    assert (again.returncode, again.stdout, again.stderr) == (
        2, "", f"subsetsaver: error: checkpoint '{out}' already exists ({out}.data-00000-of-00001); pass --force "
               "to replace it\n")
    assert {name: (out.parent / name).read_bytes() for name in os.listdir(out.parent)} == before
    forced = run_cli("convert", trained.prefix, out, "--to", "object", "--model", "tests_module:build",
                     *REMAP_FLAGS, "--force")
    assert forced.returncode == 0, forced.stderr
    # the replacement takes data file names the old checkpoint did not use, so the old one stayed whole until
    # the new .index replaced its own
    assert sorted(os.listdir(out.parent)) == ["checkpoint", "ckpt.data-00000-of-00002", "ckpt.data-00001-of-00002",
                                              "ckpt.index"]


def test_an_output_that_does_not_read_back_bit_exact_is_refused_and_removed(trained, builders, tmp_path, monkeypatch):
    real = convert_module.load_checkpoint

    def load_then_spoil(model, *args, **kwargs):
        report = real(model, *args, **kwargs)
        kernel = {w.path: w for w in model.weights}["dense/kernel"]
        kernel.assign(np.nextafter(kernel.numpy(), np.float32(np.inf)))  # one ulp off, every element
        return report

    monkeypatch.setattr(convert_module, "load_checkpoint", load_then_spoil)
    out = tmp_path / "tf2" / "ckpt"
    with pytest.raises(ss.CorruptCheckpointError) as error:
        ss.keras.convert_checkpoint(trained.prefix, out, "tests_module:build", remap=REMAP)
    assert str(error.value) == (f"checkpoint '{out}' does not hold what was loaded from '{trained.prefix}': "
                                "'dense/kernel' holds other bytes than 'dense/w'")
    assert not out.parent.exists()  # the temporary checkpoint is gone, and so is the directory the write made


def test_the_command_line_stays_fast_without_tensorflow():
    code = textwrap.dedent("""
        import sys
        import subsetsaver.cli
        import subsetsaver.keras
        print('tensorflow' in sys.modules, 'keras' in sys.modules)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert (result.returncode, result.stdout, result.stderr) == (0, "False False\n", "")
