"""The storage contract, asked of every backend: local paths, fsspec (``memory://``), TensorFlow's gfile
(``ram://``) and a backend added with one line in ``storage.SCHEMES`` (``tests/toy_storage.py``)."""

import uuid

import numpy as np
import pytest
import toy_storage

import subsetsaver as ss
from subsetsaver import storage


@pytest.fixture(params=["local", "memory", "ram", "toy"])
def directory(request, tmp_path, monkeypatch):
    """A fresh, empty directory URL on the backend named by the parameter."""
    if request.param == "local":
        return str(tmp_path)
    if request.param == "ram":
        pytest.importorskip("tensorflow", reason="ram:// is served by TensorFlow's gfile")
    if request.param == "toy":
        monkeypatch.setitem(storage.SCHEMES, "toy", ("toy_storage", "TOY"))  # the one line a new scheme needs
    return f"{request.param}://contract-{uuid.uuid4().hex}"


def test_every_backend_implements_the_contract(directory):
    assert isinstance(storage.backend(directory), storage.StorageBackend)


def test_a_file_is_written_whole_and_read_back_by_ranges(directory):
    path = storage.join(directory, "model.bin")
    storage.make_directories(directory)
    with storage.replacing(path) as sink:
        sink.write(b"abc")
        sink.write(np.arange(3, dtype=np.uint8))  # anything with the buffer protocol
    assert (storage.exists(path), storage.is_directory(path), storage.size(path)) == (True, False, 6)
    assert storage.read_bytes(path) == b"abc\x00\x01\x02" and storage.read_bytes(path, 2) == b"ab"
    assert storage.list_directory(directory) == ["model.bin"] and storage.is_directory(directory)
    assert isinstance(storage.modified(path), int)  # ram://: TensorFlow keeps no times (0)
    with storage.open_reader(path) as reader:
        buffer = np.zeros(3, np.uint8)
        assert (reader.size, reader.read(1, 3)) == (6, b"bc\x00")
        assert reader.read_into(3, buffer) is buffer and buffer.tolist() == [0, 1, 2]
        with pytest.raises(ss.CorruptCheckpointError):
            reader.read(4, 3)  # past the end


def test_a_failed_write_leaves_the_file_as_it_was(directory):
    path = storage.join(directory, "state.json")
    storage.make_directories(directory)
    storage.write_bytes(path, b"old")
    with pytest.raises(RuntimeError, match="^killed$"), storage.replacing(path) as sink:
        sink.write(b"half of the new")
        raise RuntimeError("killed")
    assert storage.read_bytes(path) == b"old"


def test_absent_files_are_file_not_found_and_removing_them_is_nothing(directory):
    gone = storage.join(directory, "gone")
    assert not storage.exists(gone)
    for question in (storage.size, storage.read_bytes, storage.open_reader, storage.modified):
        with pytest.raises(FileNotFoundError):
            question(gone)
    storage.remove(gone)
    storage.remove_tree(gone)


def test_sizes_are_answered_for_many_files_at_once(directory):
    storage.make_directories(directory)
    paths = [storage.join(directory, name) for name in ("a", "b", "gone")]
    storage.write_bytes(paths[0], b"")  # an empty file is a file (ram://: GFile makes its file on a first write)
    storage.write_bytes(paths[1], b"xyz")
    assert storage.sizes(paths) == {paths[0]: 0, paths[1]: 3, paths[2]: None}
    assert storage.sizes([]) == {}


def test_rename_remove_and_remove_tree(directory):
    inner = storage.join(directory, "run")
    storage.make_directories(inner)
    first, second = storage.join(inner, "a"), storage.join(inner, "b")
    storage.write_bytes(first, b"1")
    if storage.can_rename(first):
        storage.rename(first, second)
        assert (storage.exists(first), storage.read_bytes(second)) == (False, b"1")
    else:
        storage.write_bytes(second, b"1")
    storage.remove(second)
    assert not storage.exists(second)
    storage.write_bytes(storage.join(inner, "c"), b"2")
    storage.hold_directory(inner)
    assert storage.remove_abandoned(inner) == []
    storage.remove_tree(inner)
    assert not storage.exists(storage.join(inner, "c"))


def test_a_backend_missing_a_question_cannot_be_made():
    class Partial(storage.StorageBackend):
        can_rename = True

        def exists(self, path) -> bool:
            return False

    with pytest.raises(TypeError, match="^Can't instantiate abstract class Partial"):
        Partial()


def test_the_toy_backend_serves_a_whole_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setitem(storage.SCHEMES, "toy", ("toy_storage", "TOY"))
    run = f"toy://run-{uuid.uuid4().hex}"
    ss.rewrite(_checkpoint(tmp_path), run + "/model.npz")
    manifest, arrays = ss.formats.npz.read(run + "/model.npz")
    assert manifest.names == ("dense/w",) and arrays["dense/w"].tolist() == [1.0, 2.0]
    assert sorted(name for name in toy_storage.TOY.files if name.startswith(run)) == [run + "/model.npz"]


def _checkpoint(tmp_path):
    from subsetsaver.formats.tf import bundle

    return bundle.write(str(tmp_path / "model"), {"dense/w": np.array([1, 2], np.float32)})
