"""Vision maps into timm (``keras-efficientnet-to-timm``, ``keras-mobilenetv3-large-to-timm``) against the original code.

tf_keras applications (EfficientNetB0 with 10 classes, EfficientNetB2 with its 1,000, MobileNetV3Large with 10;
64 x 64 inputs) are built in graph mode in a process of their own (``TF_USE_LEGACY_KERAS=1``) and given one Adam
step. Then, layer by layer, each convolution before a batch norm has its output channels scaled by random
factors from 0.1 to 1, and the batch norm's moving statistics are set near what reaches it on the test inputs
(mean shifted by a tenth of a deviation, variance scaled by 0.8 to 1.25), so that the moving variances are
small enough for the epsilon to matter and the activations stay in range; biases and batch-norm scales and
offsets are random, and the classifier's kernel is divided by 4 (logits of order 1). EfficientNetB0 keeps
ImageNet's input normalization; B2's is another. A plain ``tf.compat.v1.train.Saver``
writes each with the logits of 32 inputs (pixel values in [0, 255]). The conversions run through the command
line in a process with no TensorFlow; timm, in a process with neither TensorFlow nor subsetsaver, loads each
directory with ``timm.create_model("local-dir:OUT", pretrained=True)`` and feeds it the same images scaled to
[0, 1] and normalized by the data config the directory holds: logits within 1e-4 on the first 8, the same top-1
on all 32. Each trap (batch-norm epsilon, "SAME" padding, the activation, the input normalization) is shown
to break that when handled the wrong way. Each side runs once for all models (a process start costs seconds).
"""

import importlib.util
import json
import os
import textwrap

import numpy as np
import pytest
from cli_children import CHILD_PATH, run_script

import subsetsaver as ss
from subsetsaver.errors import LayoutMapError
from subsetsaver.formats.tf import bundle
from subsetsaver.layouts import load_map, parse_map, plan_conversion
from subsetsaver.layouts.coverage import check_coverage
from subsetsaver.layouts.members import pick_member
from subsetsaver.layouts.readings import IMAGENET_STDDEV_RGB, read_value

EFFICIENTNET = "keras-efficientnet-to-timm"
MOBILENET = "keras-mobilenetv3-large-to-timm"

# directory -> (tf_keras application, keyword arguments, input normalization's mean and variance or None, map)
MODELS = {
    "b0": ("EfficientNetB0", {"input_shape": [64, 64, 3], "classes": 10, "drop_connect_rate": 0},
           [[0.485, 0.456, 0.406], [0.229 ** 2, 0.224 ** 2, 0.225 ** 2]], EFFICIENTNET),
    "b2": ("EfficientNetB2", {"input_shape": [64, 64, 3], "drop_connect_rate": 0}, [[0.3, 0.5, 0.7], [0.04, 0.09, 0.01]], EFFICIENTNET),
    "mnv3": ("MobileNetV3Large", {"input_shape": [64, 64, 3], "classes": 10}, None, MOBILENET),
}

TF1_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    # each new fetch or feed of a session re-optimizes the whole graph; the set-up loads variables one by one
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    import tf_keras

    jobs, shapes_wanted, slim_directory = json.loads(sys.argv[1])
    for directory, name, kwargs, normalization in jobs:
        tf_keras.backend.clear_session()  # a new default graph and session for each model
        tf_keras.utils.set_random_seed(1)
        model = getattr(tf_keras.applications, name)(weights=None, classifier_activation=None, **kwargs)
        sess = tf.compat.v1.keras.backend.get_session()
        rng = np.random.default_rng(0)
        x = rng.random((32, *model.input_shape[1:]), dtype=np.float32) * 255
        y = rng.integers(0, model.output_shape[-1], 32)
        model.compile(tf_keras.optimizers.legacy.Adam(1e-3),
                      tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.train_on_batch(x[:8], y[:8])
        # the weights are set in numpy and written back all at once before each batch norm's input is computed:
        # two callables, each built once (a session builds an executor for every new set of fetches and feeds)
        weights = model.weights
        values = dict(zip([w.ref() for w in weights], sess.run(weights)))
        fed = [tf.compat.v1.placeholder(w.dtype.base_dtype, w.shape) for w in weights]
        assign_all = sess.make_callable(tf.group(*[w.assign(p) for w, p in zip(weights, fed)]), feed_list=fed)
        norms = [layer for layer in model.layers if isinstance(layer, tf_keras.layers.BatchNormalization)]
        inputs_of_norms = sess.make_callable([layer.input for layer in norms], feed_list=[model.input])
        for layer in model.layers:
            for variable in layer.weights:
                base, key = variable.name.split(":")[0], variable.ref()
                if base == "normalization/mean":
                    values[key] = np.float32(normalization[0]).reshape(values[key].shape)
                elif base == "normalization/variance":
                    values[key] = np.float32(normalization[1]).reshape(values[key].shape)
                elif base.endswith("/bias"):
                    values[key] = rng.normal(0, 0.2, variable.shape.as_list()).astype(np.float32)
                elif base in ("predictions/kernel", "Logits/kernel"):  # logits of order 1, not 10
                    values[key] = values[key] / 4
            if isinstance(layer, tf_keras.layers.BatchNormalization):
                conv = layer._inbound_nodes[0].inbound_layers
                kernel = conv.weights[0].ref()
                axis = 2 if isinstance(conv, tf_keras.layers.DepthwiseConv2D) else 3
                scale = np.exp(rng.uniform(np.log(0.1), 0, values[kernel].shape[axis]))
                values[kernel] = (values[kernel] * scale.reshape([-1 if a == axis else 1 for a in range(4)])
                                  ).astype(np.float32)
                # moving statistics near what reaches the batch norm (its input as the model computes it so
                # far), so the activations stay in range; variances as small as the scaled kernels make them
                assign_all(*[values[w.ref()] for w in weights])
                seen = inputs_of_norms(x)[norms.index(layer)]
                mean, var = seen.mean(axis=(0, 1, 2)), seen.var(axis=(0, 1, 2))
                n = mean.shape[0]
                values[layer.moving_mean.ref()] = (mean + rng.normal(0, 0.1, n) * np.sqrt(var)).astype(np.float32)
                values[layer.moving_variance.ref()] = (var * rng.uniform(0.8, 1.25, n)).astype(np.float32)
                values[layer.gamma.ref()] = rng.uniform(0.5, 1.5, n).astype(np.float32)
                values[layer.beta.ref()] = rng.normal(0, 0.2, n).astype(np.float32)
        assign_all(*[values[w.ref()] for w in weights])
        os.makedirs(directory, exist_ok=True)
        tf.compat.v1.train.Saver().save(sess, os.path.join(directory, "model"), global_step=1)
        np.savez(os.path.join(directory, "expected.npz"), inputs=x, logits=model.predict(x, verbose=0))
    shapes = {}
    for key, name, kwargs in shapes_wanted:  # names and shapes only: every member of the families
        tf_keras.backend.clear_session()
        tf_keras.backend.set_learning_phase(0)  # no training branch: each batch norm builds in half the time
        model = getattr(tf_keras.applications, name)(weights=None, **kwargs)
        shapes[key] = {w.name.split(":")[0]: w.shape.as_list() for w in model.weights}
    import tf_slim
    from tf_slim.nets import resnet_v1
    with tf.Graph().as_default():
        # tf-slim 1.1.0's batch norm does not run on this TensorFlow (tf.layers, ops.Tensor): the network is
        # built without it, its names are resnet_v1's all the same
        with tf_slim.arg_scope([tf_slim.conv2d], activation_fn=tf.nn.relu, normalizer_fn=None), \
                tf_slim.arg_scope([tf_slim.max_pool2d], padding="SAME"):
            resnet_v1.resnet_v1_50(tf.compat.v1.placeholder(tf.float32, [1, 64, 64, 3]), num_classes=10,
                                   is_training=False)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(sess, os.path.join(slim_directory, "model.ckpt"))
    print("RESULT " + json.dumps(shapes))
""")

# Reads each directory as a timm user would: no subsetsaver, no TensorFlow. A job: (directory, expected.npz,
# how to build the model, how to normalize the input: "config" for the directory's data config).
TIMM_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import timm, torch
    from timm.data import resolve_data_config

    jobs, wanted_shapes = json.loads(sys.argv[1])
    results = []
    for source, expected_path, build, normalize in jobs:
        if "file" in build:  # the class count in the overlay too, or timm drops the classifier it reads
            model = timm.create_model(build["name"], pretrained=True, **build["kwargs"],
                                      pretrained_cfg_overlay=dict(file=build["file"],
                                                                  num_classes=build["kwargs"]["num_classes"]))
        else:
            model = timm.create_model("local-dir:" + source, pretrained=True, **build["kwargs"])
        model.eval()
        config = resolve_data_config(model=model)
        if normalize == "written":  # a model built by name: the mean and std of the directory's config.json
            with open(source + "/config.json") as handle:
                written = json.load(handle)["pretrained_cfg"]
            mean, std = written["mean"], written["std"]
        else:
            mean, std = (config["mean"], config["std"]) if normalize == "config" else normalize
        with np.load(expected_path) as expected:
            images, logits = expected["inputs"], expected["logits"]
        scaled = torch.from_numpy(images).permute(0, 3, 1, 2) / 255.0
        with torch.no_grad():
            got = model((scaled - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)).numpy()
        results.append({"max_difference": float(np.abs(got[:8] - logits[:8]).max()),
                        "top1": int((got.argmax(1) == logits.argmax(1)).sum()), "config": {
                            key: list(value) if isinstance(value, tuple) else value for key, value in config.items()},
                        "eps": model.bn1.eps, "stem": type(model.conv_stem).__name__,
                        "num_classes": model.num_classes,
                        "label_names": model.pretrained_cfg.get("label_names")})
    shapes = {}
    for name in wanted_shapes:
        shapes[name] = {key: list(value.shape) for key, value in timm.create_model(name).state_dict().items()
                        if not key.endswith("num_batches_tracked")}
    print("RESULT " + json.dumps({"results": results, "shapes": shapes,
                                  "modules": sorted(m for m in ("tensorflow", "subsetsaver") if m in sys.modules)}))
""")

CONVERT_SCRIPT = textwrap.dedent("""
    import json, sys
    from cli_children import run_commands
    results = run_commands(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps({"results": results, "tensorflow": "tensorflow" in sys.modules}))
""")

MEMBERS = {f"b{number}": f"EfficientNetB{number}" for number in range(8)}
TIMM_MEMBERS = [f"tf_efficientnet_b{number}" for number in range(8)] + ["tf_mobilenetv3_large_100",
                                                                         "tf_mobilenetv3_large_075"]
# (job name, how timm builds it, normalization): the right way, then each trap handled the wrong way
B0_FILE = "b0/out/model.safetensors"
JOBS = {
    "b0": ("b0", {"kwargs": {}}, "config"),
    "b2": ("b2", {"kwargs": {}}, "config"),
    "mnv3": ("mnv3", {"kwargs": {}}, "config"),
    "b0 by its name and file": ("b0", {"name": "tf_efficientnet_b0", "file": B0_FILE,
                                       "kwargs": {"num_classes": 10}}, "written"),
    "b0 with PyTorch's epsilon": ("b0", {"kwargs": {"bn_eps": 1e-5}}, "config"),
    "b0 with symmetric padding": ("b0", {"name": "efficientnet_b0", "file": B0_FILE,
                                         "kwargs": {"num_classes": 10, "bn_eps": 1e-3}}, "written"),
    "b0 with hard-swish": ("b0", {"kwargs": {"act_layer": "hard_swish"}}, "config"),
    "b2 with ImageNet's mean and std": ("b2", {"kwargs": {}}, [[0.485, 0.456, 0.406], [0.229, 0.224, 0.225]]),
    "b2 with the variance as std": ("b2", {"kwargs": {}}, [[0.3, 0.5, 0.7], [0.04, 0.09, 0.01]]),
    "mnv3 with PyTorch's epsilon": ("mnv3", {"kwargs": {"bn_eps": 1e-5}}, "config"),
    "mnv3 with symmetric padding": ("mnv3", {"name": "mobilenetv3_large_100", "file": "mnv3/out/model.safetensors",
                                             "kwargs": {"num_classes": 10, "bn_eps": 1e-3}}, "written"),
}


def run(script, argument, env, cwd):
    return run_script(script, [json.dumps(argument)], env, cwd)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The TF1 side: checkpoints of MODELS, tf-slim's resnet_v1_50 and every member's tensor shapes."""
    for module, why in (("tensorflow", "TensorFlow builds the original models"),
                        ("tf_keras", "tf_keras builds the original models"),
                        ("tf_slim", "tf-slim builds the ResNet v1 that is refused"),
                        ("timm", "timm loads the converted directories"), ("torch", "timm runs on PyTorch")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{why}: {module} is not installed (CI installs it)")
    root = tmp_path_factory.mktemp("timm")
    shapes = run(TF1_SCRIPT, [[[str(root / name), application, kwargs, normalization]
                               for name, (application, kwargs, normalization, _) in MODELS.items()],
                              [[member, application, {"input_shape": [32, 32, 3]}]
                               for member, application in MEMBERS.items()]
                              + [["large_075", "MobileNetV3Large", {"input_shape": [32, 32, 3], "alpha": 0.75}]],
                              str(root / "resnet_v1_50")],
                 {"TF_USE_LEGACY_KERAS": "1"}, root)
    return root, shapes


@pytest.fixture(scope="module")
def converted(built):
    """The conversions (command line, no TensorFlow) and what timm computes on them."""
    root, _ = built
    (root / "labels.txt").write_text("".join(f"class {number}\n" for number in range(10)))
    commands = [["convert", f"{name}/model-1", f"{name}/out", "--map", layout] + (
        ["--labels", "labels.txt"] if name == "b0" else []) for name, (_, _, _, layout) in MODELS.items()]
    conversions = run(CONVERT_SCRIPT, commands, {"PYTHONPATH": CHILD_PATH}, root)
    assert conversions["tensorflow"] is False
    assert [result["code"] for result in conversions["results"]] == [0] * len(MODELS), conversions
    jobs = [[str(root / name / "out"), str(root / name / "expected.npz"),
             {**build, **({"file": str(root / build["file"])} if "file" in build else {})}, normalize]
            for name, build, normalize in JOBS.values()]
    timm_side = run(TIMM_SCRIPT, [jobs, TIMM_MEMBERS], {"PYTHONPATH": ""}, "/")
    assert timm_side["modules"] == []
    results = dict(zip(JOBS, timm_side["results"]))
    printed = {name: result["out"] for name, result in zip(MODELS, conversions["results"])}
    return root, printed, results, timm_side["shapes"]


def test_efficientnet_b0_and_b2_give_tf_keras_logits_in_timm(converted):
    root, printed, results, _ = converted
    assert printed["b0"].splitlines()[1] == ("coverage: 311 tensors the config implies, 311 found, 0 missing, "
                                             "0 extra; heads: classifier; member b0")
    assert printed["b2"].splitlines()[1] == ("coverage: 439 tensors the config implies, 439 found, 0 missing, "
                                             "0 extra; heads: classifier; member b2")
    for name in ("b0", "b2", "b0 by its name and file"):
        assert results[name]["max_difference"] <= 1e-4, (name, results[name])
        assert results[name]["top1"] == 32, (name, results[name])
    with open(root / "b2" / "out" / "config.json") as handle:
        config = json.load(handle)
    assert config == {"architecture": "tf_efficientnet_b2", "num_classes": 1000, "num_features": 1408,
                      "pretrained_cfg": {"classifier": "classifier", "crop_mode": "center", "crop_pct": 1.0,
                                         "first_conv": "conv_stem", "input_size": [3, 260, 260],
                                         "interpolation": "bilinear", "mean": [0.3, 0.5, 0.7],
                                         "std": [0.2, 0.3, 0.1]}}
    assert results["b0"]["config"]["mean"] == [0.485, 0.456, 0.406]
    # the square roots of float32(0.224 ** 2) and the others, as tf_keras divides by them
    assert results["b0"]["config"]["std"] == [0.229, 0.22399999, 0.225]
    assert (results["b0"]["num_classes"], results["b2"]["num_classes"]) == (10, 1000)
    assert results["b0"]["label_names"] == [f"class {number}" for number in range(10)]


def test_mobilenet_v3_large_gives_tf_keras_logits_in_timm(converted):
    _, printed, results, _ = converted
    assert printed["mnv3"].splitlines()[1] == ("coverage: 266 tensors the config implies, 266 found, 0 missing, "
                                               "0 extra; heads: none; member 100")
    assert results["mnv3"]["max_difference"] <= 1e-4, results["mnv3"]
    assert results["mnv3"]["top1"] == 32
    assert (results["mnv3"]["config"]["mean"], results["mnv3"]["config"]["std"]) == ([0.5] * 3, [0.5] * 3)


def test_the_maps_state_the_epsilon_and_padding_of_the_architecture_they_name(converted):
    _, _, results, _ = converted
    for name, layout in (("b0", EFFICIENTNET), ("mnv3", MOBILENET)):
        math = load_map(layout).math
        assert (results[name]["eps"], math["batch_norm_eps"]["value"]) == (1e-3, 1e-3)
        assert (results[name]["stem"], math["padding"]["value"]) == ("Conv2dSame", "same")


@pytest.mark.parametrize("trap", ["b0 with PyTorch's epsilon", "b0 with symmetric padding", "b0 with hard-swish",
                                  "b2 with ImageNet's mean and std", "b2 with the variance as std",
                                  "mnv3 with PyTorch's epsilon", "mnv3 with symmetric padding"])
def test_each_trap_handled_the_wrong_way_gives_other_logits(converted, trap):
    _, _, results, _ = converted
    assert results[trap]["max_difference"] > 1e-2, results[trap]


def test_every_member_is_read_off_tf_keras_tensors_with_timm_shapes(built, converted):
    _, shapes = built
    _, _, _, timm_shapes = converted
    for member, layout_name, architecture in [
            *((f"b{n}", EFFICIENTNET, f"tf_efficientnet_b{n}") for n in range(8)),
            ("large_075", MOBILENET, "tf_mobilenetv3_large_075")]:
        layout = load_map(layout_name)
        specs = {name: (tuple(shape), "float32") for name, shape in shapes[member].items()
                 if name not in ("normalization/count", "normalization/mean", "normalization/variance")}
        plan = plan_conversion(layout, specs)
        found, config, sizes = pick_member(layout, plan, {})
        assert config["architecture"] == architecture
        coverage = check_coverage(layout, plan.specs, {**config, **sizes}, plan.source_name, plan.unmapped)
        expected = {name: list(shape) for name, shape in coverage.expected.items()}
        wanted = {name: shape for name, shape in timm_shapes[architecture].items()
                  if not name.startswith("classifier.")}
        assert {name: shape for name, shape in expected.items() if not name.startswith("classifier.")} == wanted


def test_a_tf_slim_resnet_v1_is_refused_with_the_reason(built, run_cli):
    root, _ = built
    result = run_cli("convert", root / "resnet_v1_50" / "model.ckpt", root / "resnet-out", "--map", EFFICIENTNET)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "subsetsaver: error: this is a tf-slim ResNet v1 (tf_slim.nets.resnet_v1) checkpoint, which timm has no "
        "exact twin of: the nearest, timm resnet50 (torchvision ResNet-50), strides in the first unit of each block "
        "where tf-slim's resnet_v1 strides in the last (block1/unit_3, ...), so every feature map after block1 is "
        "computed at other positions; no map converts it, since a near twin loads and computes something else; a "
        "map of your own (--map FILE) is checked the same way\n")
    assert not os.path.exists(root / "resnet-out")
    result = run_cli("convert", root / "resnet_v1_50" / "model.ckpt", root / "resnet-out", "--map",
                     "resnet-v1-to-timm")
    assert result.returncode == 2
    assert result.stderr.startswith("subsetsaver: error: no map 'resnet-v1-to-timm': timm has no exact twin of the "
                                    "tf-slim ResNet v1 (tf_slim.nets.resnet_v1): the nearest, timm resnet50 ")
    assert not os.path.exists(root / "resnet-out")


def test_a_checkpoint_of_the_other_family_is_refused_before_anything_is_written(built, run_cli):
    root, _ = built
    result = run_cli("convert", root / "mnv3" / "model-1", root / "wrong-out", "--map", EFFICIENTNET)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "subsetsaver: error: this is not a tf_keras EfficientNet (tf_keras.applications.EfficientNetB0-B7) "
        "checkpoint: it holds Conv/BatchNorm/beta, Conv/BatchNorm/gamma, Conv/BatchNorm/moving_mean and 263 more, "
        "where the map reads stem_conv/kernel, stem_bn/gamma, stem_bn/beta and 42 more; use the map for this "
        "checkpoint's family; 'keras-efficientnet-to-timm' reads tf_keras EfficientNet "
        "(tf_keras.applications.EfficientNetB0-B7)\n")
    assert not os.path.exists(root / "wrong-out")


# Without TensorFlow: the schema's parts, on small checkpoints written by the project's own writer.

def test_the_imagenet_variance_quirk_gives_the_deviations_tf_keras_divides_by():
    variance = np.float32(IMAGENET_STDDEV_RGB)
    mean = np.float32([0.485, 0.456, 0.406])
    std, note = read_value("keras_normalization_std", variance)
    assert std == [0.229, 0.224, 0.225]
    assert note.startswith("the input normalization's variance is tf_keras' IMAGENET_STDDEV_RGB")
    pixels = np.random.default_rng(0).random((4, 3), dtype=np.float32)
    # tf_keras, built with weights="imagenet": (x - mean) / sqrt(variance), times 1 / sqrt(IMAGENET_STDDEV_RGB)
    keras = (pixels - mean) / np.sqrt(variance) * np.float32([1 / np.sqrt(s) for s in IMAGENET_STDDEV_RGB])
    np.testing.assert_allclose((pixels - mean) / np.float32(std), keras, rtol=1e-6)
    assert read_value("keras_normalization_std", np.float32([0.04, 0.09, 0.0])) == ([0.2, 0.3, 1e-7], None)


def small_map(**change):
    """A map of the blocks tf_keras names ``block2a_w``, ``block2b_w``, ... into ``blocks.1.0.w``, with members."""
    layout = {
        "name": "small", "family": "Small", "source": {"layout": "tf"},
        "target": {"layout": "safetensors", "config": "config.json"},
        "rules": [{"from": "block??_w", "to": "blocks.{1:d-1}.{2:letter}.w"}],
        "math": {"activation": {"key": None, "value": "relu"}, "layer_norm_eps": {"key": None, "value": None},
                 "position_embedding": {"key": None, "value": "none"},
                 "tied_embeddings": {"key": None, "value": False}},
        "members": {"one": {"config": {"architecture": "one"}, "sizes": {"n": 1, "w": 2}},
                    "three": {"config": {"architecture": "three"}, "sizes": {"n": 3, "w": 2}},
                    "wide": {"config": {"architecture": "wide"}, "sizes": {"n": 3, "w": 4}}},
        "targets": {"dtypes": ["float32"], "groups": [
            {"tensors": {"blocks.1.0.w": ["w"]}},
            {"repeat": {"block": [1, "n"]}, "tensors": {"blocks.1.{block}.w": ["w"]}}]}}
    layout.update(change)
    return layout


def write_small(tmp_path, layout, shapes):
    with open(tmp_path / "small.json", "w") as handle:
        json.dump(layout, handle)
    (tmp_path / "ckpt").mkdir()
    bundle.write(str(tmp_path / "ckpt" / "model.ckpt"), {name: np.ones(shape, np.float32) for name, shape in shapes})
    return str(tmp_path / "ckpt" / "model.ckpt"), str(tmp_path / "small.json")


def test_letters_and_offsets_in_names_and_the_member_found_by_counts_and_widths(tmp_path):
    checkpoint, path = write_small(tmp_path, small_map(), [("block2a_w", (2,)), ("block2b_w", (2,)),
                                                          ("block2c_w", (2,))])
    report = ss.convert(checkpoint, tmp_path / "out", map=path)
    assert [row[:2] for row in report.rows] == [("block2a_w", "blocks.1.0.w"), ("block2b_w", "blocks.1.1.w"),
                                                ("block2c_w", "blocks.1.2.w")]
    assert (report.member, report.config) == ("three", None)
    with open(tmp_path / "out" / "config.json") as handle:
        assert json.load(handle) == {"architecture": "three"}


def test_a_checkpoint_no_member_fits_is_refused_with_the_nearest_members_problems(tmp_path):
    checkpoint, path = write_small(tmp_path, small_map(), [("block2a_w", (2,)), ("block2b_w", (2,))])
    with pytest.raises(LayoutMapError) as error:
        ss.convert(checkpoint, tmp_path / "out", map=path)
    assert str(error.value) == (
        "no member of Small (one, three, wide) fits exactly; as the nearest, one, this Small checkpoint "
        "holds 1 tensor the map and config do not describe: block2b_w; drop the extra tensors in a copy "
        "of the map (its \"drop\"), or give them rules")
    assert not os.path.exists(tmp_path / "out")


def test_a_checkpoint_two_members_fit_is_refused_as_ambiguous(tmp_path):
    members = {"one": {"config": {"architecture": "one"}, "sizes": {"n": 1, "w": 2}},
               "uno": {"config": {"architecture": "uno"}, "sizes": {"n": 1, "w": 2}}}
    checkpoint, path = write_small(tmp_path, small_map(members=members), [("block2a_w", (2,))])
    with pytest.raises(LayoutMapError) as error:
        ss.convert(checkpoint, tmp_path / "out", map=path)
    assert str(error.value) == ("this Small checkpoint fits the members one, uno alike; convert with a "
                                "copy of the map that keeps one of them (its \"members\")")


def test_a_missing_block_is_named_as_tf_keras_names_it(tmp_path):
    members = {"three": {"config": {"architecture": "three"}, "sizes": {"n": 3, "w": 2}}}
    checkpoint, path = write_small(tmp_path, small_map(members=members), [("block2a_w", (2,)), ("block2c_w", (2,))])
    with pytest.raises(LayoutMapError) as error:
        ss.convert(checkpoint, tmp_path / "out", map=path)
    assert str(error.value) == (
        "no member of Small (three) fits exactly; as the nearest, three, this Small checkpoint "
        "lacks 1 tensor the config's 2 blocks need: block2b_w; convert a whole checkpoint of the family, or give "
        "the config that describes it with --config")


@pytest.mark.parametrize("change, message", [
    ({"members": {"b0": {"sizes": {"n": "3"}}}}, "layout map '<map>', \"members\".\"b0\".\"sizes\" are integers"),
    ({"members": {"b0": {"config": {}, "depth": 1}}},
     "layout map '<map>', \"members\".\"b0\" has an unknown key \"depth\" (known: config, sizes); see \"Writing a "
     "map\" in docs/leaving_tensorflow.md"),
    ({"config_from_tensors": {"mean": {"tensor": "normalization/mean", "reading": "sqrt"}}},
     "layout map '<map>', \"config_from_tensors\".\"mean\" is {\"tensor\": NAME, \"reading\": one of values, "
     "keras_normalization_std}"),
    ({"target": {"layout": "safetensors", "config": "config.json", "library": "timm"}},
     "layout map '<map>', \"math\" does not state batch_norm_eps, padding: every map says each value that changes "
     "the math, so none is inherited from the map it was copied from; see \"Writing a map\" in "
     "docs/leaving_tensorflow.md"),
])
def test_the_schemas_new_parts_refuse_what_they_do_not_know(change, message):
    with pytest.raises(LayoutMapError) as error:
        parse_map(small_map(**change))
    assert str(error.value) == message


def test_a_letter_where_a_number_is_written_names_the_rule(tmp_path):
    layout = small_map(rules=[{"from": "block??_w", "to": "blocks.{1:letter}.{2:d-1}.w"}])
    checkpoint, path = write_small(tmp_path, layout, [("block2a_w", (2,))])
    with pytest.raises(LayoutMapError) as error:
        ss.convert(checkpoint, tmp_path / "out", map=path)
    assert str(error.value) == ("rule 1 (block??_w -> blocks.{1:letter}.{2:d-1}.w) writes '2' as a letter's place; "
                                "match one lowercase letter where a target name writes {1:letter}")


def test_the_vision_maps_ship_and_parse():
    assert {EFFICIENTNET, MOBILENET} <= set(ss.layouts.shipped_maps())
    efficientnet = load_map(EFFICIENTNET)
    assert list(efficientnet.members) == [f"b{number}" for number in range(8)]
    assert efficientnet.members["b7"]["sizes"]["s6_blocks"] == 13
    assert list(load_map(MOBILENET).members) == ["100", "075"]


def test_a_family_timm_has_no_twin_of_is_named_by_its_tensors_without_tensorflow(tmp_path):
    names = ["InceptionV3/Conv2d_1a_3x3/weights", "InceptionV3/Conv2d_1a_3x3/BatchNorm/beta",
             "InceptionV3/Mixed_5b/Branch_3/Conv2d_0b_1x1/weights", "global_step"]
    (tmp_path / "ckpt").mkdir()
    bundle.write(str(tmp_path / "ckpt" / "model.ckpt"), {name: np.ones((2,), np.float32) for name in names})
    with pytest.raises(LayoutMapError) as error:
        ss.convert(str(tmp_path / "ckpt" / "model.ckpt"), tmp_path / "out", map=MOBILENET)
    assert str(error.value) == (
        "this is a tf-slim Inception v3 (tf_slim.nets.inception_v3) checkpoint, which timm has no exact twin of: the "
        "nearest, timm inception_v3, counts the zero padding in the 3x3 average pools of its Mixed blocks "
        "(F.avg_pool2d's count_include_pad) where TensorFlow's \"SAME\" pools average over the window inside the "
        "image only, so every border value of every Mixed block differs (measured on tf-slim's own network: 5.1 "
        "apart after Mixed_5b, logits 3.2 apart); keras.applications.InceptionV3 is an exact twin: convert --to "
        "keras --model keras.applications.InceptionV3; no map converts it, since a near twin "
        "loads and computes something else; a map of your own (--map FILE) is checked the same way")
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(LayoutMapError) as error:
        load_map("inception-v3-to-timm")
    assert str(error.value).startswith("no map 'inception-v3-to-timm': timm has no exact twin of the tf-slim "
                                       "Inception v3 (tf_slim.nets.inception_v3): the nearest, timm inception_v3, "
                                       "counts the zero padding")
