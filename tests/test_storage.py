"""Atomic, durable writes: a file is replaced whole or not at all, never leaves a temporary behind,
is fsynced (file and directory) on local disks, and needs TensorFlow only for other schemes."""

import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

from subsetsaver import storage
from subsetsaver.errors import CheckpointNotFoundError
from subsetsaver.storage import direct_io
from subsetsaver.storage import local as local_files


def open_descriptors():
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def test_write_bytes_creates_and_replaces(tmp_path):
    path = str(tmp_path / "state.json")
    storage.write_bytes(path, b"first\n")
    storage.write_bytes(path, bytearray(b"second\n"))
    with open(path, "rb") as handle:
        assert handle.read() == b"second\n"
    assert os.listdir(tmp_path) == ["state.json"]


def test_replacing_takes_bytes_and_array_views(tmp_path):
    path = tmp_path / "a.bin"
    values = np.arange(10, dtype=np.float32)
    with storage.replacing(str(path)) as sink:
        sink.write(b"head")
        sink.write(memoryview(values))
        sink.write(memoryview(values[:0]))
    assert path.read_bytes() == b"head" + values.tobytes()
    assert os.listdir(tmp_path) == ["a.bin"]


def test_an_error_while_writing_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = str(tmp_path / "m.npz")
    storage.write_bytes(path, b"old")
    before = open_descriptors()
    with pytest.raises(RuntimeError, match="midway"):
        with storage.replacing(path) as sink:
            sink.write(b"new, partly")
            assert [n for n in os.listdir(tmp_path) if local_files.TEMPORARY_MARK in n]  # the bytes go elsewhere
            raise RuntimeError("midway")
    assert open(path, "rb").read() == b"old"
    assert os.listdir(tmp_path) == ["m.npz"]
    assert open_descriptors() == before


def test_a_failed_rename_keeps_the_old_file_and_removes_the_temporary(tmp_path, monkeypatch):
    path = str(tmp_path / "m.npz")
    storage.write_bytes(path, b"old" * 10)
    monkeypatch.setattr(local_files, "_RELEASE_IN_BACKGROUND", 1)  # the old file is held open: it must be closed

    def failing_replace(source, target):
        raise OSError("read-only file system")

    monkeypatch.setattr(os, "replace", failing_replace)
    before = open_descriptors()
    with pytest.raises(OSError, match="read-only file system"):
        storage.write_bytes(path, b"new")
    assert open(path, "rb").read() == b"old" * 10
    assert os.listdir(tmp_path) == ["m.npz"]
    assert open_descriptors() == before


def test_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointNotFoundError) as error:
        storage.write_bytes(str(tmp_path / "nope" / "m.json"), b"{}")
    assert str(error.value) == (f"cannot write '{tmp_path}/nope/m.json': directory '{tmp_path}/nope' does not "
                                "exist; create it first")
    assert isinstance(error.value, FileNotFoundError)


@pytest.mark.parametrize("past_the_page_cache", [True, False])
def test_local_writes_are_synced_file_then_directory(tmp_path, monkeypatch, request, past_the_page_cache):
    calls = []
    if past_the_page_cache:
        request.getfixturevalue("direct_transfers")  # skipped where O_DIRECT is refused
    else:  # O_DIRECT refused: through the page cache, fdatasynced on the way
        monkeypatch.setattr(direct_io, "_open_direct", lambda path, flags: None)
    monkeypatch.setattr(local_files, "_WRITEBACK_EVERY", 8)
    monkeypatch.setattr(os, "fdatasync", lambda descriptor: calls.append("fdatasync"))
    monkeypatch.setattr(os, "fsync", lambda descriptor: calls.append("fsync"))
    monkeypatch.setattr(local_files, "fsync_directory", lambda directory: calls.append(("directory", directory)))
    path = str(tmp_path / "big.bin")
    with storage.replacing(path) as sink:
        for _ in range(4):
            sink.write(b"0123456789")
    storage.finish_background_work()
    assert ("fdatasync" in calls) is not past_the_page_cache  # in the background, while the rest was written
    assert calls[-2:] == ["fsync", ("directory", str(tmp_path))]
    assert open(path, "rb").read() == b"0123456789" * 4


def test_a_large_replaced_file_is_freed_in_the_background(tmp_path, monkeypatch):
    monkeypatch.setattr(local_files, "_RELEASE_IN_BACKGROUND", 1)
    path = str(tmp_path / "m.npz")
    storage.write_bytes(path, b"a" * 100)
    storage.finish_background_work()
    before = open_descriptors()
    storage.write_bytes(path, b"b" * 50)
    storage.finish_background_work()
    assert open(path, "rb").read() == b"b" * 50
    assert open_descriptors() == before  # the old file's descriptor was closed


def test_file_urls_are_local_paths(tmp_path):
    assert storage.is_local("/a/b") and storage.is_local("rel/b") and storage.is_local(f"file://{tmp_path}/x")
    assert not storage.is_local("ram://x/y") and not storage.is_local("gs://bucket/y")
    assert storage.local_path("file:///a/b") == "/a/b" and storage.local_path("/a/b") == "/a/b"
    storage.write_bytes(f"file://{tmp_path}/x", b"via url")
    assert (tmp_path / "x").read_bytes() == b"via url"


def test_ram_filesystem_writes_leave_no_temporary():
    import tensorflow as tf

    directory = "ram://atomic_test/"
    storage.write_bytes(directory + "a.json", b"one")
    storage.write_bytes(directory + "a.json", memoryview(np.arange(3, dtype=np.int64)))
    with pytest.raises(RuntimeError, match="midway"):
        with storage.replacing(directory + "b.json") as sink:
            sink.write(b"partly")
            raise RuntimeError("midway")
    assert tf.io.gfile.listdir(directory) == ["a.json"]
    with tf.io.gfile.GFile(directory + "a.json", "rb") as handle:
        assert handle.read() == np.arange(3, dtype=np.int64).tobytes()


def test_temporary_names_name_their_writer(tmp_path):
    name = storage.temporary_name(str(tmp_path / "m.npz"))
    pattern = re.escape(f"{tmp_path}/m.npz.tmp-{socket.gethostname()}-{os.getpid()}-") + "[0-9a-f]{8}"
    assert re.fullmatch(pattern, name)
    assert storage.temporary_name("m") != storage.temporary_name("m")


def test_local_files_never_import_tensorflow(tmp_path):
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from subsetsaver import storage\nfrom subsetsaver.formats import npz, npz as npz_state, subset_manifest\nfrom subsetsaver.formats.tf import declared_sizes\n"
        f"directory = {str(tmp_path)!r}\n"
        "npz.write(directory + '/m.npz', {'w': np.ones(3, np.float32)})\n"
        "assert npz.read(directory + '/m.npz')[1]['w'].sum() == 3\n"
        "npz_state.write_state(directory + '/checkpoint_npz.json', 'm.npz', ['m.npz'])\n"
        "assert npz_state.read_state(directory + '/checkpoint_npz.json').latest == 'm.npz'\n"
        "subset_manifest.write_manifest(directory + '/m', {'selector': 'everything()'})\n"
        "print(sorted(m for m in sys.modules if m == 'tensorflow' or m.startswith('tensorflow.')))\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


UNSERVED_SCHEME = """
import sys
sys.modules["fsspec"] = None  # fsspec is not installed
import numpy as np
from subsetsaver.cli import main
from subsetsaver.errors import RemoteStorageError
from subsetsaver.formats import npz
try:
    npz.write("memory://bucket/run/model-1.npz", {"w": np.zeros(2, np.float32)})
except RemoteStorageError as error:
    print(error, flush=True)
main(["inspect", "memory://bucket/run/model-1.npz"])
"""


@pytest.mark.parametrize("tensorflow_installed", [True, False], ids=["with-tensorflow", "without-tensorflow"])
def test_a_scheme_no_installed_file_system_serves_says_to_install_fsspec(tensorflow_installed):
    """memory:// without fsspec: one message naming the URL and the install, from the Python API and the command
    line alike (not "the directory does not exist", nor TensorFlow's "File system scheme not implemented")."""
    code = UNSERVED_SCHEME if tensorflow_installed else 'import sys\nsys.modules["tensorflow"] = None' + UNSERVED_SCHEME
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    message = ("no file system serves 'memory://bucket/run/model-1.npz': install fsspec (pip install fsspec), which "
               "serves 'memory://' itself or through the package its documentation names (adlfs for az://, ...)")
    assert (child.returncode, child.stdout) == (2, message + "\n")
    assert child.stderr.splitlines()[-1] == f"subsetsaver: error: {message}"
    assert "Traceback" not in child.stderr
