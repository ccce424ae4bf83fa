"""The format registry: formats found by path and by name, and a fifth format added in one module plus one line."""

import json

import numpy as np
import pytest
import toy_format

import subsetsaver as ss
from subsetsaver.formats import registry
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.formats.tf import checkpoint_state as tf_state


@pytest.fixture
def toy():
    registry.register(toy_format.TOY)  # the one line a new format needs
    yield toy_format.TOY
    registry.unregister("toy")


@pytest.fixture
def checkpoint(tmp_path):
    prefix = str(tmp_path / "model")
    values = {"dense/w": np.arange(6, dtype=np.float32).reshape(2, 3), "dense/b": np.array([0.5, -1], np.float32),
              "global_step": np.int64(7)}
    tf_bundle.write(prefix, values)
    tf_state.name_latest(prefix)
    return prefix, values


def test_formats_are_found_by_path_and_by_name(tmp_path, checkpoint):
    prefix, values = checkpoint
    ss.rewrite(prefix, str(tmp_path / "m.npz"))
    assert [registry.format_of(p).name for p in (prefix, str(tmp_path), str(tmp_path / "m.npz"))] == [
        "name", "name", "npz"]
    assert [registry.for_output(p).name for p in ("a/m.npz", "a/m.safetensors", "a/m.weights.h5", "a/m")] == [
        "npz", "safetensors", "keras", "name"]
    with pytest.raises(ss.UnknownFormatError) as error:
        registry.named("hdf5")
    assert str(error.value) == ("unknown format 'hdf5'; the formats are keras, name, npz, object, safetensors, "
                                "safetensors-sharded")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ss.UnknownFormatError) as error:
        registry.format_of(str(tmp_path / "notes.txt"))
    assert str(error.value) == (f"'{tmp_path}/notes.txt' is not a checkpoint subsetsaver reads (the formats: keras, "
                                "name, npz, object, safetensors, safetensors-sharded)")
    with pytest.raises(ss.CheckpointNotFoundError) as error:
        registry.format_of(str(tmp_path / "gone.npz"))
    assert str(error.value) == f"no portable .npz checkpoint at '{tmp_path}/gone.npz'"


def test_a_fifth_format_works_in_inspect_convert_and_diff(tmp_path, checkpoint, toy, run_cli):
    prefix, values = checkpoint
    toy_path = str(tmp_path / "model.toy.json")
    done = run_cli("convert", prefix, toy_path)  # chosen by its suffix
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"wrote toy file {toy_path}: 3 of 3 tensors")

    shown = run_cli("inspect", toy_path, "--json")
    assert shown.returncode == 0, shown.stderr
    assert {t["name"]: t["shape"] for t in json.loads(shown.stdout)["tensors"]} == {
        "dense/b": [2], "dense/w": [2, 3], "global_step": []}
    assert json.loads(shown.stdout)["format"] == "toy"

    back = str(tmp_path / "back")
    assert run_cli("convert", toy_path, back).returncode == 0  # and back into a TensorFlow checkpoint
    reread = dict(ss.catalog.read_tensors(back, list(values)))
    for name, value in values.items():
        assert reread[name].dtype == np.asarray(value).dtype and np.array_equal(reread[name], value), name

    same = run_cli("diff", toy_path, prefix)
    assert same.returncode == 0, same.stdout + same.stderr
    named = str(tmp_path / "named")
    assert run_cli("convert", toy_path, named + ".npz", "--to", "npz").returncode == 0
    assert run_cli("convert", prefix, str(tmp_path / "x"), "--to", "toy").returncode == 0  # named, not by suffix
    assert [t.name for t in toy.contents(str(tmp_path / "x")).tensors] == ["dense/b", "dense/w", "global_step"]


def test_an_unknown_format_name_on_the_command_line_lists_the_formats(tmp_path, checkpoint, run_cli):
    prefix, _ = checkpoint
    refused = run_cli("convert", prefix, str(tmp_path / "out"), "--to", "hdf5")
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == ("Error: Invalid value for '--to': 'hdf5' is not a format; the formats "
                                               "are keras, name, npz, object, safetensors, safetensors-sharded")


class DeclaringToy(toy_format.ToyFormat):
    """The toy format, declaring what it records of a conversion and what follows its publishing."""

    name = "declaring"
    suffixes = (".declaring.json",)

    def __init__(self):
        self.named_latest = []

    def recorded(self, provenance) -> dict:
        return {"selector": provenance.selector, "from": provenance.source_format, "roles": provenance.roles}

    def name_latest(self, path) -> None:
        self.named_latest.append(path)


def test_the_one_writer_and_convert_ask_the_format_what_to_record_and_how_to_finish(tmp_path, checkpoint, run_cli):
    prefix, _ = checkpoint
    declaring = DeclaringToy()
    registry.register(declaring)
    try:
        output = str(tmp_path / "model.declaring.json")
        done = run_cli("convert", prefix, output, "--keep", "name('dense/w') | global_step()")
    finally:
        registry.unregister("declaring")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads((tmp_path / "model.declaring.json").read_text())["metadata"] == {
        "selector": "name('dense/w') | global_step()", "from": "name", "roles": {"dense/w": [], "global_step": ["global_step"]}}
    assert declaring.named_latest == [output]
