"""Writing a map safely: globs stay in their segment, target names fit the target layout, the values that
change the math are stated in every map, crafted maps and configs are library errors, and every transform
moves values along the axes it names (on shapes where a wrong axis cannot hide)."""

import copy
import json
import os

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_layout_coverage import bert_shapes, write_bert

import subsetsaver as ss
from subsetsaver import layouts
from subsetsaver.formats import safetensors as safetensors_file
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.layouts.transforms import apply_all, output_spec, parse_transforms

BERT_MAP = layouts.load_map("bert-to-hf").path


def bert_map(change):
    """bert-to-hf's JSON, changed by ``change`` (a function of the dict)."""
    with open(BERT_MAP) as handle:
        data = json.load(handle)
    change(data)
    return data


def save(tmp_path, data, name="map.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def refused(checkpoint, out, **options) -> str:
    with pytest.raises(ss.LayoutMapError) as error:
        ss.convert(checkpoint, out, **options)
    assert not os.path.exists(out)
    assert len(str(error.value).encode()) < 2048
    return str(error.value)


def _one_rule_for_every_attention_kernel(data):
    """The trap: one rule meant for query/key/value, the attention output's own rule left out."""
    data["rules"] = [rule for rule in data["rules"] if "attention/output/dense/kernel" not in rule["from"]]
    for rule in data["rules"]:
        if rule["from"] == "bert/encoder/layer_*/attention/self/*/kernel":
            rule["from"] = "bert/encoder/layer_*/attention/*/kernel"
            rule["to"] = "bert.encoder.layer.{1}.attention.{2}.weight"


def test_a_star_stays_in_its_segment(tmp_path):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(layers=1), layers=1)
    message = refused(checkpoint, tmp_path / "out", map=save(tmp_path, bert_map(_one_rule_for_every_attention_kernel)))
    assert message.startswith("this BERT (google-research/bert) checkpoint lacks 4 tensors the config's 1 layer "
                              "needs: bert.encoder.layer.0.attention.self.query.weight, ")
    assert "holds 4 tensors the map and config do not describe: bert/encoder/layer_0/attention/output/dense/kernel, " \
           "bert/encoder/layer_0/attention/self/key/kernel" in message


def test_a_double_star_that_lands_a_slash_in_a_hugging_face_name_is_refused(tmp_path):
    def crossing(data):
        _one_rule_for_every_attention_kernel(data)
        for rule in data["rules"]:
            if rule["from"] == "bert/encoder/layer_*/attention/*/kernel":
                rule["from"] = "bert/encoder/layer_*/attention/**/kernel"
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(layers=1), layers=1)
    assert refused(checkpoint, tmp_path / "out", map=save(tmp_path, bert_map(crossing))) == (
        "rule 6 (bert/encoder/layer_*/attention/**/kernel -> bert.encoder.layer.{1}.attention.{2}.weight) writes "
        "'bert.encoder.layer.0.attention.output/dense/.weight', which is not a Hugging Face tensor name "
        "(dot-separated parts, no '/'); give the tensors it caught a rule of their own, or narrow its glob")


def test_a_glob_of_many_stars_answers(tmp_path):
    """Globs run on RE2: 24 '*' in one segment cannot backtrack (bench/bench_selectors.py times it)."""
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(layers=1), layers=1)
    data = bert_map(lambda data: data["rules"].insert(0, {"from": "bert/" + "*a" * 24 + "/x", "to": "never"}))
    report = ss.convert(checkpoint, tmp_path / "out", map=save(tmp_path, data), dry_run=True)
    assert report.expected == 23


@pytest.mark.parametrize("role", ["activation", "layer_norm_eps", "position_embedding", "tied_embeddings"])
def test_a_map_that_does_not_state_a_value_of_the_math_is_refused(tmp_path, role):
    path = save(tmp_path, bert_map(lambda data: data["math"].pop(role)))
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(path)
    assert str(error.value) == (
        f"layout map '{path}', \"math\" does not state {role}: every map says each value that changes the math, so "
        "none is inherited from the map it was copied from; see \"Writing a map\" in docs/leaving_tensorflow.md")


def test_a_value_of_the_math_copied_through_the_config_keys_is_refused(tmp_path):
    path = save(tmp_path, bert_map(lambda data: data["config"]["keys"].update(hidden_act="hidden_act")))
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(path)
    assert str(error.value) == (f"layout map '{path}', \"math\", \"activation\": \"config\" also sets \"hidden_act\"; "
                                "state it in \"math\" alone, so a copied map cannot carry it over unseen")


def test_an_unknown_rule_key_is_refused_rather_than_ignored(tmp_path):
    path = save(tmp_path, bert_map(lambda data: data["rules"][0].update(optional=True)))
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(path)
    assert str(error.value) == (f"layout map '{path}', rule 1 has an unknown key \"optional\" (known: concat, fallback, from, "
                                "split, to, transform); see \"Writing a map\" in docs/leaving_tensorflow.md")


@pytest.mark.parametrize("key", ["from", "to"])
@pytest.mark.parametrize("value", [None, 7, {"bert/embeddings/word_embeddings": 1}, [], [""], ["a", None]])
def test_a_rule_naming_its_tensors_with_anything_but_names_is_refused(tmp_path, key, value):
    """null, a number, an object (whose keys would pass for names) or a list with a non-name."""
    path = save(tmp_path, bert_map(lambda data: data["rules"][0].update({key: value})))
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(path)
    assert str(error.value) == f"layout map '{path}', rule 1: \"from\" and \"to\" are names or lists of names"


def test_deep_json_maps_and_configs_are_library_errors(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.json").write_text(deep)
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(str(tmp_path / "deep.json"))
    assert str(error.value) == (f"layout map '{tmp_path / 'deep.json'}' is not JSON a map can be: it is nested 100,000 "
                                "deep; at most 64 levels are read")
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes())
    (tmp_path / "bert" / "bert_config.json").write_text('{"a": ' + deep + "}")
    message = refused(checkpoint, tmp_path / "out", map="bert-to-hf")
    assert message == (f"config '{tmp_path / 'bert' / 'bert_config.json'}' is not a JSON config: it is nested 100,001 "
                       "deep; at most 64 levels are read")


def test_a_config_implying_a_billion_layers_is_refused_before_expanding(tmp_path):
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(), layers=10**9)
    assert refused(checkpoint, tmp_path / "out", map="bert-to-hf") == (
        "targets group 2: the config's 1,000,000,000 layers imply 16,000,000,000 tensors; at most 1,000,000 are "
        "converted; check the config file")


def _mutations():
    json_values = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=False)
                               | st.text(max_size=12), lambda inner: st.lists(inner, max_size=3)
                               | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
    paths = st.lists(st.sampled_from(["rules", "math", "targets", "config", "source", "target", 0, 1, 5, "groups",
                                      "tensors", "repeat", "heads", "activation", "values", "from", "to", "transform",
                                      "keys", "dtypes", "classifier", "infer", "config"]), min_size=1, max_size=5)
    return st.lists(st.tuples(paths, json_values), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=_mutations())
def test_crafted_maps_are_library_errors_or_convert(tmp_path, mutations):
    """A map with random parts replaced: a refusal is one library error under 2 KB, never another exception."""
    if not (tmp_path / "bert").exists():
        write_bert(tmp_path / "bert", bert_shapes(layers=1), layers=1)
    with open(BERT_MAP) as handle:
        data = json.load(handle)
    for path, value in mutations:
        node = data
        for key in path[:-1]:
            step = key if isinstance(node, dict) else (key if isinstance(key, int) else 0)
            if isinstance(node, (dict, list)) and (step in node if isinstance(node, dict) else step < len(node)):
                node = node[step]
        last = path[-1]
        if isinstance(node, dict):
            node[str(last)] = copy.deepcopy(value)
        elif isinstance(node, list) and isinstance(last, int) and last < len(node):
            node[last] = copy.deepcopy(value)
    map_path = save(tmp_path, data)
    try:
        ss.convert(tmp_path / "bert" / "model.ckpt", tmp_path / "out", map=map_path, dry_run=True)
    except ss.SubsetSaverError as error:  # a LayoutMapError, or the selector language's own for a crafted "drop"
        assert len(str(error).encode()) < 2048


CUBE = np.arange(27, dtype=np.float32).reshape(3, 3, 3)


@pytest.mark.parametrize("transforms, expected", [
    ([{"transpose": [0, 2, 1]}], np.transpose(CUBE, (0, 2, 1))),
    ([{"transpose": [2, 0, 1]}], np.transpose(CUBE, (2, 0, 1))),
    (["transpose"], np.transpose(CUBE)),
    ([{"reshape": [9, -1]}, "transpose"], CUBE.reshape(9, 3).T),
    ([{"expand_dims": 1}, {"transpose": [1, 0, 2, 3]}, {"squeeze": 0}], CUBE),
    ([{"expand_dims": -1}], CUBE[..., None]),
    ([{"cast": "float16"}, {"transpose": [1, 2, 0]}], np.transpose(CUBE, (1, 2, 0)).astype(np.float16)),
])
def test_every_transform_moves_values_along_the_axes_it_names(transforms, expected):
    steps = parse_transforms(transforms)
    result = apply_all(steps, CUBE)
    assert result.dtype == expected.dtype and result.shape == expected.shape
    assert result.tobytes() == np.ascontiguousarray(expected).tobytes()
    assert output_spec(steps, CUBE.shape, "float32") == (expected.shape, expected.dtype.name)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (16, 1024), (17, 1025), (40, 4096), (7, 4097), (0, 9), (9, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "bool", "complex128"])
def test_a_matrix_transposed_in_bands_is_numpys_transpose(shape, dtype):
    """Matrices up to 4,096 columns are copied band by band: rows that do not fill a band, empty matrices and
    every element width come out as numpy's own transpose, C-ordered; so does a matrix in Fortran order."""
    import ml_dtypes

    matrix = (np.arange(np.prod(shape)).reshape(shape) % 251).astype(getattr(ml_dtypes, dtype, dtype))
    result = apply_all(parse_transforms(["transpose"]), matrix[::1])
    assert result.flags.c_contiguous and result.dtype == matrix.dtype and result.shape == shape[::-1]
    assert result.tobytes() == np.ascontiguousarray(matrix.T).tobytes()
    strided = apply_all(parse_transforms([{"transpose": [1, 0]}]), np.asfortranarray(matrix))
    assert strided.tobytes() == np.ascontiguousarray(matrix.T).tobytes()


def test_a_transpose_moves_every_bit_nan_payloads_too():
    """The bands move as unsigned integers: a signalling NaN with a payload comes out as it went in."""
    bits = np.full((48, 40), 0x7FA00001, dtype=np.uint32)
    bits[5, 7] = 0xFFC00002  # a quiet NaN with its sign and another payload
    result = apply_all(parse_transforms(["transpose"]), bits.view(np.float32))
    assert result.view(np.uint32).tobytes() == np.ascontiguousarray(bits.T).tobytes()


def test_a_transpose_of_strings_is_numpys_transpose():
    """An array of objects (a string tensor) cannot move as integers: numpy copies it."""
    words = np.array([[b"a", b"bb", b"ccc"], [b"d", b"", b"f"]], dtype=object)
    result = apply_all(parse_transforms(["transpose"]), words)
    assert result.dtype == object and result.tolist() == [[b"a", b"d"], [b"bb", b""], [b"ccc", b"f"]]


@pytest.mark.parametrize("shape", [(64, 40960), (40960, 64), (16, 32, 8192)])
def test_a_large_transpose_is_made_in_the_memory_a_tensor_before_it_let_go(shape):
    """A conversion's tensors come one after another: the memory of the one just written holds the next
    one's transpose (banded, wide or of three axes), not memory the system must clear first."""
    from subsetsaver.formats import memory

    memory.free_idle_buffers()
    matrix = (np.arange(np.prod(shape), dtype=np.float32) % 251).reshape(shape)
    written = memory.reused_bytes(matrix.nbytes)
    address = written.ctypes.data
    del written  # let go: idle, its pages kept
    result = apply_all(parse_transforms(["transpose"]), matrix)
    assert result.ctypes.data == address
    assert result.tobytes() == np.ascontiguousarray(matrix.T).tobytes()
    memory.free_idle_buffers()


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_split_and_concat_take_the_axis_they_name(tmp_path, axis):
    """A (3, 3, 3) tensor split in three along ``axis`` and joined again: any other axis gives other values."""
    tf_bundle.write(str(tmp_path / "model.ckpt"), {"cube": CUBE})
    (tmp_path / "conf.json").write_text("{}")
    common = {"family": "cube", "math": {role: {"key": None, "value": 0} for role in
                                         ("activation", "layer_norm_eps", "position_embedding", "tied_embeddings")}}
    part = [3, 3, 3]
    part[axis] = 1
    split = {**common, "name": "split", "source": {"layout": "tf", "config": "conf.json"},
             "target": {"layout": "safetensors", "config": "config.json"},
             "rules": [{"from": "cube", "to": ["a", "b", "c"], "split": axis, "transform": [{"transpose": [0, 2, 1]}]}],
             "targets": {"dtypes": ["float32"], "groups": [{"tensors": {name: part for name in "abc"}}]}}
    ss.convert(tmp_path / "model.ckpt", tmp_path / "hf", map=save(tmp_path, split, "split.json"),
               config=tmp_path / "conf.json")
    pieces = dict(safetensors_file.read(tmp_path / "hf" / "model.safetensors", ["a", "b", "c"]))
    for index, name in enumerate("abc"):
        expected = np.split(np.transpose(CUBE, (0, 2, 1)), 3, axis=axis)[index]
        assert pieces[name].tobytes() == np.ascontiguousarray(expected).tobytes(), name
    joined = {**common, "name": "join", "source": {"layout": "safetensors", "config": "config.json"},
              "target": {"layout": "tf", "config": "conf.json"},
              "rules": [{"from": ["a", "b", "c"], "to": "cube", "concat": axis, "transform": [{"transpose": [0, 2, 1]}]}],
              "targets": {"dtypes": ["float32"], "groups": [{"tensors": {"cube": [3, 3, 3]}}]}}
    ss.convert(tmp_path / "hf", tmp_path / "back", map=save(tmp_path, joined, "join.json"))
    with tf_bundle.BundleReader(str(tmp_path / "back" / "model.ckpt")) as reader:
        assert reader.read("cube").tobytes() == CUBE.tobytes()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(["vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                                                "hidden_act", "max_position_embeddings", "type_vocab_size", "extra"]),
                               st.none() | st.booleans() | st.integers(-2, 10**15) | st.floats(allow_nan=True)
                               | st.text(max_size=6) | st.lists(st.integers(), max_size=2), min_size=1, max_size=4))
def test_crafted_configs_are_library_errors_or_convert(tmp_path, changes):
    """A bert_config.json with random values: converted (a dry run) or one library error under 2 KB."""
    checkpoint, _ = write_bert(tmp_path / "bert", bert_shapes(layers=1), layers=1)
    config_path = tmp_path / "bert" / "bert_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), **changes}))
    try:
        ss.convert(checkpoint, tmp_path / "out", map="bert-to-hf", dry_run=True)
    except ss.LayoutMapError as error:
        assert len(str(error).encode()) < 2048


ELECTRA_MAP = layouts.load_map("electra-to-hf").path


def electra_map(change):
    with open(ELECTRA_MAP) as handle:
        data = json.load(handle)
    change(data)
    return data


@pytest.mark.parametrize("change, message", [
    (lambda data: data.update(default_variant="judge"),
     "layout map '{path}': \"variants\" names each variant, and \"default_variant\" one of them; see \"Writing a "
     "map\" in docs/leaving_tensorflow.md"),
    (lambda data: data["variants"]["generator"].update(target={"layout": "tf"}),
     "layout map '{path}', variant 'generator' has an unknown key \"target\" (known: config, description, drop, math, "
     "rules, targets); see \"Writing a map\" in docs/leaving_tensorflow.md"),
    (lambda data: data["variants"]["generator"]["math"].pop("layer_norm_eps"),
     "layout map '{path}', variant 'generator', \"math\" does not state layer_norm_eps: every map says each value "
     "that changes the math, so none is inherited from the map it was copied from; see \"Writing a map\" in "
     "docs/leaving_tensorflow.md"),
    (lambda data: data["variants"]["generator"]["rules"][5].update(fallback="yes"),
     "layout map '{path}', variant 'generator', rule 6: \"fallback\" is true or false"),
    (lambda data: data["source"].update(config_reader="t5"),
     "layout map '{path}', variant 'discriminator': \"source\".\"config_reader\" is one of electra"),
])
def test_every_variant_of_a_map_is_checked_when_it_is_loaded(tmp_path, change, message):
    """A broken variant is refused even when the default one is asked for."""
    path = save(tmp_path, electra_map(change))
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(path)
    assert str(error.value) == message.format(path=path)


def test_a_default_variant_needs_variants(tmp_path):
    path = save(tmp_path, bert_map(lambda data: data.update(default_variant="discriminator")))
    with pytest.raises(ss.LayoutMapError) as error:
        layouts.load_map(path)
    assert str(error.value) == (f"layout map '{path}' has \"default_variant\" but no \"variants\"; see \"Writing a "
                                "map\" in docs/leaving_tensorflow.md")
