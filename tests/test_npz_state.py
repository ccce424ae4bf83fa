"""The state file of a directory of portable checkpoints: exact text, round trips, and every
content that reads as no state (or drops a name) instead of pointing outside the directory."""

import json
import os

import pytest

from subsetsaver.formats import npz as npz_state
from subsetsaver.formats.npz.state import STATE_FILENAME, STATE_FORMAT, NpzState, read_state, write_state


def test_names():
    assert (STATE_FILENAME, STATE_FORMAT) == ("checkpoint_npz.json", "subsetsaver.npz-state")


def test_round_trip_and_exact_text(tmp_path):
    path = str(tmp_path / STATE_FILENAME)
    write_state(path, "model-200.npz", ["model-100.npz", "model-200.npz"])
    assert read_state(path) == NpzState(latest="model-200.npz", kept=("model-100.npz", "model-200.npz"))
    with open(path, "rb") as handle:
        assert handle.read() == (b'{\n "format": "subsetsaver.npz-state",\n "latest": "model-200.npz",\n'
                                 b' "kept": [\n  "model-100.npz",\n  "model-200.npz"\n ]\n}\n')
    assert os.listdir(tmp_path) == [STATE_FILENAME]  # no temporary left


def test_a_write_replaces_the_state(tmp_path):
    path = str(tmp_path / STATE_FILENAME)
    write_state(path, "model-1.npz", ("model-1.npz",))
    write_state(path, "model-2.npz", iter(["model-1.npz", "model-2.npz"]))
    assert read_state(path) == NpzState("model-2.npz", ("model-1.npz", "model-2.npz"))
    assert os.listdir(tmp_path) == [STATE_FILENAME]


def test_the_state_is_a_frozen_value():
    state = NpzState("a.npz", ("a.npz",))
    with pytest.raises(AttributeError):
        state.latest = "b.npz"
    assert state == NpzState("a.npz", ("a.npz",)) and hash(state) == hash(NpzState("a.npz", ("a.npz",)))


def test_file_url_paths_are_local(tmp_path):
    write_state(f"file://{tmp_path}/{STATE_FILENAME}", "m.npz", ["m.npz"])
    assert read_state(str(tmp_path / STATE_FILENAME)) == NpzState("m.npz", ("m.npz",))
    assert read_state(f"file://{tmp_path}/{STATE_FILENAME}") == NpzState("m.npz", ("m.npz",))


def test_ram_filesystem_round_trip():
    import tensorflow as tf

    path = "ram://npz_state_test/" + STATE_FILENAME
    write_state(path, "model-3.npz", ["model-3.npz"])
    assert read_state(path) == NpzState("model-3.npz", ("model-3.npz",))
    assert tf.io.gfile.listdir("ram://npz_state_test/") == [STATE_FILENAME]
    assert read_state("ram://npz_state_test/none.json") is None


STATE = {"format": STATE_FORMAT, "latest": "m.npz", "kept": ["m.npz"]}


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"not json",
        b"\xff\xfe{}",  # not UTF-8
        b"[]",
        b'"subsetsaver.npz-state"',
        b"null",
        json.dumps({"latest": "m.npz", "kept": ["m.npz"]}).encode(),  # no format
        json.dumps({**STATE, "format": "subsetsaver.npz"}).encode(),
        json.dumps({**STATE, "format": None}).encode(),
        json.dumps({**STATE, "pad": " " * (1 << 20)}).encode(),  # over 1 MiB: only the first MiB is read
    ],
)
def test_content_that_is_no_state(tmp_path, content):
    path = tmp_path / STATE_FILENAME
    path.write_bytes(content)
    assert read_state(str(path)) is None


def test_a_state_of_exactly_one_mebibyte_is_read(tmp_path):
    text = json.dumps(STATE)
    text = text[:-1] + ', "pad": "' + " " * ((1 << 20) - len(text) - 11) + '"}'
    assert len(text) == 1 << 20
    path = tmp_path / STATE_FILENAME
    path.write_text(text)
    assert read_state(str(path)) == NpzState("m.npz", ("m.npz",))


def test_missing_and_unreadable_files_are_no_state(tmp_path):
    assert read_state(str(tmp_path / STATE_FILENAME)) is None
    assert read_state(str(tmp_path)) is None  # a directory
    assert read_state(str(tmp_path / "nope" / STATE_FILENAME)) is None


@pytest.mark.parametrize("latest", ["a/m.npz", "/m.npz", "../m.npz", "a\\m.npz", "..", ".", "...", "", 5, None,
                                    ["m.npz"], {"m.npz": 1}])
def test_a_latest_that_is_not_a_bare_name_reads_as_none(tmp_path, latest):
    path = tmp_path / STATE_FILENAME
    path.write_text(json.dumps({**STATE, "latest": latest}))
    assert read_state(str(path)) == NpzState(None, ("m.npz",))


def test_a_state_without_latest_or_kept(tmp_path):
    path = tmp_path / STATE_FILENAME
    path.write_text(json.dumps({"format": STATE_FORMAT}))
    assert read_state(str(path)) == NpzState(None, ())


def test_kept_names_that_are_not_bare_names_are_dropped(tmp_path):
    path = tmp_path / STATE_FILENAME
    kept = ["m-1.npz", "../m.npz", "a/m.npz", "/m.npz", "a\\m.npz", "..", ".", "", 7, None, ["x"], {"y": 1},
            ".hidden.npz", "m-2.npz", "m-1.npz"]
    path.write_text(json.dumps({**STATE, "kept": kept}))
    assert read_state(str(path)) == NpzState("m.npz", ("m-1.npz", ".hidden.npz", "m-2.npz", "m-1.npz"))


@pytest.mark.parametrize("kept", ["m.npz", {"m.npz": 1}, 3, None, True])
def test_a_kept_that_is_not_a_list_keeps_nothing(tmp_path, kept):
    path = tmp_path / STATE_FILENAME
    path.write_text(json.dumps({**STATE, "kept": kept}))
    assert read_state(str(path)) == NpzState("m.npz", ())


@pytest.mark.parametrize("name, bare", [("m.npz", True), (".m", True), ("m..npz", True), ("..", False),
                                        (".", False), ("", False), ("a/b", False), ("a\\b", False), (1, False),
                                        (None, False)])
def test_is_bare_name(name, bare):
    assert npz_state.is_bare_name(name) is bare
