"""Sharded safetensors: a layout map's output split at tensor boundaries as transformers' save_pretrained
splits it, with model.safetensors.index.json; read back by the reverse maps, inspect and diff; replacing
an output of either layout leaves only the new one."""

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_layout_maps import gpt2_checkpoint

import subsetsaver as ss
from subsetsaver import catalog
from subsetsaver.formats import registry, safetensors
from subsetsaver.formats.safetensors.sharded import plan_shards
from subsetsaver.formats.tf import bundle
from subsetsaver.layouts.engine import ConversionPlan, Step
from subsetsaver.layouts.output import largest_first

SHARD = "model-{:05d}-of-{:05d}.safetensors"


def _index(directory):
    with open(os.path.join(directory, safetensors.INDEX_NAME)) as handle:
        return json.load(handle)


def test_shards_are_cut_at_tensor_boundaries_as_save_pretrained_cuts_them():
    specs = [("a", (100,), "float32"), ("b", (100,), "float32"), ("c", (300,), "float32"), ("d", (10,), "float32")]
    assert plan_shards(specs, 800) == [["a", "b"], ["c"], ["d"]]  # c (1,200 bytes) is alone, past the limit
    assert plan_shards(specs, 10**6) == [["a", "b", "c", "d"]]
    assert plan_shards(specs, 800, avoid_counts={3}) == [["a"], ["b"], ["c"], ["d"]]


def _step(targets, size):
    """A step writing ``targets``, each ``size`` float32 elements (several: a split)."""
    return Step(rule=None, sources=("s",), targets=tuple(targets), specs=(((size,), "float32"),) * len(targets))


def _plan(steps):
    return ConversionPlan(layout=None, steps=tuple(steps), dropped=(), unmapped=())


def _one_each(sizes):
    """A plan of one step per size, ``t0``, ``t1``, ... in that order."""
    return _plan(_step([f"t{i}"], size) for i, size in enumerate(sizes))


def _specs(plan):
    return [(name, shape, dtype) for name, (shape, dtype) in plan.specs.items()]


def test_a_file_is_written_largest_tensor_first_ties_in_the_maps_order():
    plan = _one_each([10, 300, 1, 300, 50])
    assert list(largest_first(plan).specs) == ["t1", "t3", "t4", "t0", "t2"]
    assert list(plan.specs) == ["t0", "t1", "t2", "t3", "t4"]  # the plan itself is left as it was


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 400), min_size=1, max_size=12), st.integers(1, 2000))
def test_writing_largest_first_keeps_the_shards_save_pretrained_cuts_from_the_maps_order(sizes, limit):
    plan = _one_each(sizes)
    ordered = largest_first(plan, limit)
    shards = plan_shards(_specs(plan), limit)
    assert plan_shards(_specs(ordered), limit) == [sorted(shard, key=list(ordered.specs).index) for shard in shards]
    for shard in plan_shards(_specs(ordered), limit):
        keys = [(-plan.specs[name][0][0], int(name[1:])) for name in shard]
        assert keys == sorted(keys)  # largest first, ties in the map's order


def test_a_step_whose_tensors_fall_in_two_shards_keeps_the_maps_order():
    plan = _plan([_step(["t0"], 50), _step(["a", "b"], 100), _step(["t2"], 300)])
    assert plan_shards(_specs(plan), 700) == [["t0", "a"], ["b"], ["t2"]]
    assert largest_first(plan, 700) is plan
    assert list(largest_first(plan, 10**6).specs) == ["t2", "a", "b", "t0"]


def test_a_converted_file_holds_its_largest_tensors_first(tmp_path):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    report = ss.convert(checkpoint, tmp_path / "hf", map="gpt2-to-hf")
    tensors, _, _ = safetensors.header(tmp_path / "hf" / "model.safetensors")
    sizes = [end - begin for _, _, begin, end in tensors.values()]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == len(report.rows) > 10


@pytest.mark.parametrize("text, size", [("1GB", 10**9), ("500MB", 5 * 10**8), ("2GiB", 2 << 30), ("20KB", 20_000),
                                        ("1.5GB", 1_500_000_000), (4096, 4096)])
def test_sizes_read_as_transformers_reads_max_shard_size(text, size):
    assert safetensors.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GB", "-1GB", "1XB", "1e9", 0, True, "9" * 50])
def test_a_size_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError):
        safetensors.parse_size(text)


def test_a_gpt2_conversion_past_the_limit_is_sharded_and_reads_back(tmp_path):
    checkpoint, arrays = gpt2_checkpoint(tmp_path / "gpt2")
    report = ss.convert(checkpoint, tmp_path / "hf", map="gpt2-to-hf", max_shard_size="1KB")
    index = _index(tmp_path / "hf")
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [SHARD.format(number, len(shards)) for number in range(1, len(shards) + 1)] and len(shards) > 3
    assert sorted(os.listdir(tmp_path / "hf")) == sorted([*shards, safetensors.INDEX_NAME, "config.json"])
    assert report.files == (*(str(tmp_path / "hf" / shard) for shard in shards),
                            str(tmp_path / "hf" / safetensors.INDEX_NAME), str(tmp_path / "hf" / "config.json"))
    assert index["metadata"] == {"total_size": report.nbytes}
    for shard in shards:
        names = [name for name, where in index["weight_map"].items() if where == shard]
        sizes = [os.path.getsize(tmp_path / "hf" / shard)]
        assert len(names) == 1 or sizes[0] < 1000 + 1000  # a shard holds one tensor past the limit, or fits it
    found = registry.format_of(str(tmp_path / "hf"))
    assert found.name == "safetensors-sharded"
    values = dict(catalog.read_tensors(str(tmp_path / "hf" / safetensors.INDEX_NAME), ["h.1.attn.c_attn.weight"]))
    assert values["h.1.attn.c_attn.weight"].tobytes() == arrays["model/h1/attn/c_attn/w"][0].tobytes()
    ss.convert(tmp_path / "hf", tmp_path / "back", map="hf-to-gpt2")
    with bundle.BundleReader(str(tmp_path / "back" / "model.ckpt")) as reader:
        for name in reader.names:
            assert reader.read(name).tobytes() == arrays[name].tobytes(), name


def test_transformers_loads_the_sharded_directory(tmp_path):
    torch = pytest.importorskip("torch", reason="optional check: PyTorch is not installed")
    transformers = pytest.importorskip("transformers", reason="optional check: transformers is not installed")
    checkpoint, arrays = gpt2_checkpoint(tmp_path / "gpt2")
    ss.convert(checkpoint, tmp_path / "hf", map="gpt2-to-hf", max_shard_size="2KB")
    model, info = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    with torch.no_grad():
        assert model.transformer.h[1].mlp.c_fc.weight.numpy().tobytes() == arrays["model/h1/mlp/c_fc/w"][0].tobytes()


def test_replacing_an_output_of_either_layout_leaves_only_the_new_one(tmp_path):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    out = tmp_path / "hf"
    ss.convert(checkpoint, out, map="gpt2-to-hf", max_shard_size="1KB")
    first = sorted(set(_index(out)["weight_map"].values()))
    ss.convert(checkpoint, out, map="gpt2-to-hf", max_shard_size="1KB", overwrite=True)
    second = sorted(set(_index(out)["weight_map"].values()))
    assert not set(first) & set(second)  # the new shards never took the old ones' names
    assert sorted(os.listdir(out)) == sorted([*second, safetensors.INDEX_NAME, "config.json"])
    ss.convert(checkpoint, out, map="gpt2-to-hf", overwrite=True)
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    ss.convert(checkpoint, out, map="gpt2-to-hf", max_shard_size="1KB", overwrite=True)
    assert "model.safetensors" not in os.listdir(out) and safetensors.INDEX_NAME in os.listdir(out)
    with pytest.raises(ss.LayoutMapError, match="model.safetensors.index.json' exists; choose an empty OUT_DIR"):
        ss.convert(checkpoint, out, map="gpt2-to-hf")


def test_the_shards_a_killed_write_left_are_not_counted_so_the_count_alternates_and_they_go(tmp_path):
    checkpoint, arrays = gpt2_checkpoint(tmp_path / "gpt2")
    out = tmp_path / "hf"
    ss.convert(checkpoint, out, map="gpt2-to-hf", max_shard_size="1KB")
    old = sorted(set(_index(out)["weight_map"].values()))
    count = len(old)
    orphans = [SHARD.format(number, count + 1) for number in range(1, count + 2)]  # a killed write's, under final names
    for orphan in orphans:
        (out / orphan).write_bytes(b"left by a write killed before its index")
    ss.convert(checkpoint, out, map="gpt2-to-hf", max_shard_size="1KB", overwrite=True)
    shards = sorted(set(_index(out)["weight_map"].values()))
    assert shards == orphans  # only the old index's count avoided: the new shards took the orphans' names
    assert sorted(os.listdir(out)) == sorted([*shards, safetensors.INDEX_NAME, "config.json"])
    values = dict(catalog.read_tensors(str(out / safetensors.INDEX_NAME), ["h.1.mlp.c_fc.weight"]))
    assert values["h.1.mlp.c_fc.weight"].tobytes() == arrays["model/h1/mlp/c_fc/w"][0].tobytes()
    ss.convert(checkpoint, out, map="gpt2-to-hf", max_shard_size="1KB", overwrite=True)
    assert sorted(set(_index(out)["weight_map"].values())) == old  # and back


@pytest.mark.parametrize("index, problem", [
    ("[" * 1000 + "]" * 1000, "it is nested 1,000 deep; at most 64 levels are read"),
    ('{"weight_map": {"w": "../outside.safetensors"}}',
     "its \"weight_map\" must name a .safetensors file beside it for each tensor"),
    ('{"weight_map": {"w": "model-00001-of-00001.safetensors"}}', None),
    ('{"weight_map": []}', "its \"weight_map\" must name a .safetensors file beside it for each tensor"),
])
def test_a_crafted_index_is_a_library_error(tmp_path, index, problem):
    (tmp_path / safetensors.INDEX_NAME).write_text(index)
    with pytest.raises(ss.CorruptCheckpointError) as error:
        catalog.file_catalog(str(tmp_path / safetensors.INDEX_NAME))
    if problem:
        assert str(error.value) == (f"'{tmp_path / safetensors.INDEX_NAME}' is not a safetensors index: {problem}")


def test_the_cli_shards_and_refuses_a_size_it_cannot_read(tmp_path, run_cli):
    checkpoint, _ = gpt2_checkpoint(tmp_path / "gpt2")
    result = run_cli("convert", checkpoint, tmp_path / "hf", "--map", "gpt2-to-hf", "--max-shard-size", "lots")
    assert result.returncode == 2 and result.stderr == (
        "subsetsaver: error: --max-shard-size: 'lots' is not a size such as 1GB, 500MB or 2GiB\n")
    result = run_cli("convert", checkpoint, tmp_path / "hf", "--map", "gpt2-to-hf", "--max-shard-size", "3KB")
    assert result.returncode == 0, result.stderr
    assert safetensors.INDEX_NAME in os.listdir(tmp_path / "hf")
    result = run_cli("inspect", str(tmp_path / "hf"))
    assert result.returncode == 0 and "h.1.mlp.c_fc.weight" in result.stdout


def test_a_stream_that_fails_midway_publishes_no_shard_and_no_index(tmp_path):
    specs = {f"w{index}": ((100,), "float32") for index in range(6)}

    def failing():
        for index in range(4):
            yield f"w{index}", np.zeros(100, np.float32)
        raise OSError(5, "Input/output error")

    stream = ss.layouts.TensorStream(specs, failing())
    with pytest.raises(ss.CheckpointWriteError):
        ss.layouts.write_huggingface_weights(str(tmp_path / "hf"), stream, max_shard_bytes=800)
    assert not os.path.exists(tmp_path / "hf")
