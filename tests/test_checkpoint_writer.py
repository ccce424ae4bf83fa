"""The one writer: output checks, the directory lock, verification before publishing, permissions, leftovers."""

import fcntl
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import subsetsaver as ss
from subsetsaver import storage
from subsetsaver.formats import checkpoint_writer, progress, registry
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.storage import direct_io

VALUES = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], np.int64)}
SPECS = [(name, value.shape, value.dtype.name) for name, value in VALUES.items()]
FORMATS = [("name", "out/model"), ("npz", "out/model.npz"), ("safetensors", "out/model.safetensors")]


def _files(directory):
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


@pytest.mark.parametrize("format_name,relative", FORMATS)
def test_outputs_follow_the_umask_and_read_back(tmp_path, format_name, relative):
    output = str(tmp_path / relative)
    old = os.umask(0o002)  # group-writable: a writer that forces 0o644 or 0o600 is caught
    try:
        written = checkpoint_writer.write_checkpoint(output, iter(VALUES.items()), specs=SPECS,
                                                     checkpoint_format=registry.named(format_name))
    finally:
        os.umask(old)
    modes = {os.path.basename(path): stat.S_IMODE(os.stat(path).st_mode) for path in written.files}
    assert set(modes.values()) == {0o664}, modes
    got = dict(ss.catalog.read_tensors(output, list(VALUES)))
    for name, value in VALUES.items():
        assert got[name].dtype == value.dtype and np.array_equal(got[name], value)


@pytest.mark.parametrize("format_name,relative", FORMATS)
def test_a_failed_write_leaves_the_old_output_and_no_directory_it_made(tmp_path, format_name, relative):
    checkpoint_format = registry.named(format_name)

    def failing():
        yield "a", VALUES["a"]
        raise OSError(28, "No space left on device")

    fresh = str(tmp_path / "new" / "dir" / os.path.basename(relative))
    with pytest.raises(OSError, match="No space left"):
        checkpoint_writer.write_checkpoint(fresh, failing(), specs=SPECS, checkpoint_format=checkpoint_format)
    assert not (tmp_path / "new").exists()  # the directories it created are gone again

    output = str(tmp_path / relative)
    checkpoint_writer.write_checkpoint(output, iter(VALUES.items()), specs=SPECS, checkpoint_format=checkpoint_format)
    before = {name: (tmp_path / "out" / name).read_bytes() for name in _files(tmp_path / "out")}
    with pytest.raises(OSError, match="No space left"):
        checkpoint_writer.write_checkpoint(output, failing(), specs=SPECS, checkpoint_format=checkpoint_format,
                                           overwrite=True)
    assert {name: (tmp_path / "out" / name).read_bytes() for name in _files(tmp_path / "out")} == before


def test_bytes_that_read_back_wrong_are_never_published(tmp_path, monkeypatch):
    monkeypatch.setattr(direct_io, "_open_direct", lambda path, flags: None)  # no O_DIRECT: read through the format
    output = str(tmp_path / "model")
    checkpoint_writer.write_checkpoint(output, iter(VALUES.items()), specs=SPECS, checkpoint_format=registry.NAME)
    before = {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)}
    real = registry.NAME.read

    def flipped(path, names):
        for name, value in real(path, names):
            yield name, value + 1 if name == "a" else value

    monkeypatch.setattr(registry.NAME, "read", flipped)
    with pytest.raises(ss.CorruptCheckpointError) as error:
        checkpoint_writer.write_checkpoint(output, iter(VALUES.items()), specs=SPECS, checkpoint_format=registry.NAME,
                                           overwrite=True)
    assert "tensor 'a' reads back other than it was written" in str(error.value)
    assert {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)} == before


@pytest.mark.usefixtures("direct_transfers")  # elsewhere every tensor is read through its format (the test above)
@pytest.mark.parametrize("format_name,relative", [("name", "out/model"), ("safetensors", "out/model.safetensors"),
                                                 ("safetensors-sharded", "out/model.safetensors.index.json")])
def test_bytes_the_disk_gives_back_wrong_as_they_land_are_never_published(tmp_path, monkeypatch, format_name,
                                                                          relative):
    checkpoint_format, output = registry.named(format_name), str(tmp_path / relative)
    big = {"w": np.random.default_rng(3).standard_normal(3 * direct_io.STAGE_BYTES // 8).astype(np.float32),
           "b": np.arange(5, dtype=np.int64)}  # 1.5 stages, then a small one read back with the tail
    specs = [(name, value.shape, value.dtype.name) for name, value in big.items()]
    checkpoint_writer.write_checkpoint(output, iter(big.items()), specs=specs, checkpoint_format=checkpoint_format)
    monkeypatch.setattr(checkpoint_format, "read", lambda path, names: iter(()) if not names else pytest.fail(
        f"{names} were read again"))
    checkpoint_writer.write_checkpoint(output, iter(big.items()), specs=specs, checkpoint_format=checkpoint_format,
                                       overwrite=True)  # checked by what landed: nothing read once written
    before = {name: (tmp_path / "out" / name).read_bytes() for name in _files(tmp_path / "out")}
    real_preadv = os.preadv
    places = checkpoint_format.stored_bytes(output)
    assert sorted(places) == ["b", "w"] and places["w"].length == big["w"].nbytes
    for culprit in ("b", "w"):
        tail = big[culprit].tobytes()[-40:]

        def preadv(descriptor, buffers, offset, tail=tail):
            got = real_preadv(descriptor, buffers, offset)
            if fcntl.fcntl(descriptor, fcntl.F_GETFL) & os.O_DIRECT:
                at = bytes(buffers[0][:got]).find(tail)
                if at >= 0:
                    buffers[0][at + 20] ^= 1  # what a disk that lost a bit of the tensor's last bytes gives back
            return got

        monkeypatch.setattr(os, "preadv", preadv)
        with pytest.raises(ss.CorruptCheckpointError) as error:
            checkpoint_writer.write_checkpoint(output, iter(big.items()), specs=specs,
                                               checkpoint_format=checkpoint_format, overwrite=True)
        staged = str(error.value).split("'")[1]
        assert str(error.value) == (f"checkpoint '{staged}': tensor '{culprit}' reads back other than it was written; "
                                    "the disk or the file system lost bytes: write it again")
        assert {name: (tmp_path / "out" / name).read_bytes() for name in _files(tmp_path / "out")} == before


@pytest.mark.usefixtures("direct_transfers")
@pytest.mark.parametrize("format_name,relative", [("npz", "out/model.npz"), ("name", "out/model")])
def test_only_a_format_that_locates_its_bytes_has_them_read_back_as_they_land(tmp_path, monkeypatch, format_name,
                                                                            relative):
    """A ``.npz`` file is read back through its format once written: reading it as it lands too would read it
    twice."""
    landings = []
    real = direct_io.StagedWrites._read_back
    monkeypatch.setattr(direct_io.StagedWrites, "_read_back",
                        lambda self, offset, count: (landings.append(count), real(self, offset, count))[1])
    big = {"w": np.ones(3 * direct_io.STAGE_BYTES // 8, np.float32)}
    checkpoint_writer.write_checkpoint(str(tmp_path / relative), iter(big.items()),
                                       specs=[("w", big["w"].shape, "float32")],
                                       checkpoint_format=registry.named(format_name))
    assert (sum(landings) >= big["w"].nbytes) == (format_name == "name")


@pytest.mark.usefixtures("direct_transfers")
def test_landed_checksums_answer_only_for_one_whole_write_of_an_unchanged_file(tmp_path):
    from subsetsaver.formats.landed_checksums import LandedChecksums
    from subsetsaver.formats.wire.crc32c import crc32c

    path, other = str(tmp_path / "file.bin"), str(tmp_path / "other.bin")
    data = np.random.default_rng(0).integers(0, 256, 2 * direct_io.STAGE_BYTES + 11, dtype=np.uint8).tobytes()
    pieces = [(0, 9), (9, direct_io.STAGE_BYTES), (direct_io.STAGE_BYTES + 9, 0),
              (direct_io.STAGE_BYTES + 9, direct_io.STAGE_BYTES + 2)]
    checksums = LandedChecksums()
    with storage.reporting_landed(checksums):
        for target in (path, other):
            with storage.replacing(target) as sink:
                for offset, length in pieces:
                    sink.write(data[offset:offset + length])
    for offset, length in pieces:
        expected = crc32c(data[offset:offset + length]) if length else None  # nothing to give back: read it
        assert checksums.checksum(path, offset, length) == expected
    assert checksums.checksum(path, 0, 10) is None  # not one write
    assert checksums.checksum(path, 9, 9) is None
    assert checksums.checksum(str(tmp_path / "absent.bin"), 0, 9) is None
    with open(other, "ab") as handle:  # changed since it was written
        handle.write(b"!")
    assert checksums.checksum(other, 0, 9) is None
    os.utime(path, ns=(1, 1))  # touched since
    assert checksums.checksum(path, 0, 9) is None


def test_parts_are_read_back_one_by_one_and_a_wrong_one_is_never_published(tmp_path, monkeypatch):
    emb = np.arange(40, dtype=np.float32).reshape(10, 4)
    parts = [("emb", emb[:6], ((10, 4), (0, 0))), ("emb", emb[6:], ((10, 4), (6, 0))), ("b", VALUES["b"])]
    output = str(tmp_path / "model")
    checkpoint_writer.write_checkpoint(output, iter(parts), specs=[("emb", (10, 4), "float32"), SPECS[1]],
                                       checkpoint_format=registry.NAME)
    with tf_bundle.BundleReader(output) as reader:
        assert reader.parts("emb") == (((0, 6), (0, 4)), ((6, 10), (0, 4)))
    before = {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)}
    real = tf_bundle.BundleReader.read_part

    def flipped(self, name, region):
        value = real(self, name, region)
        return value + 1 if region[0][0] == 6 else value

    monkeypatch.setattr(tf_bundle.BundleReader, "read_part", flipped)
    with pytest.raises(ss.CorruptCheckpointError) as error:
        checkpoint_writer.write_checkpoint(output, iter(parts), specs=[("emb", (10, 4), "float32"), SPECS[1]],
                                           checkpoint_format=registry.NAME, overwrite=True)
    assert "tensor 'emb' reads back other than it was written" in str(error.value)
    assert {name: (tmp_path / name).read_bytes() for name in _files(tmp_path)} == before


def test_parts_given_to_a_format_that_cannot_read_them_back_are_never_published(tmp_path, monkeypatch):
    """Parts are verified through the format's part_reader; a format without one refuses them rather
    than publish bytes nobody read back."""
    emb = np.arange(40, dtype=np.float32).reshape(10, 4)
    parts = [("emb", emb[:6], ((10, 4), (0, 0))), ("emb", emb[6:], ((10, 4), (6, 0)))]
    monkeypatch.setattr(registry.NAME, "part_reader", lambda path: None)
    output = str(tmp_path / "model")

    with pytest.raises(TypeError) as error:
        checkpoint_writer.write_checkpoint(output, iter(parts), specs=[("emb", (10, 4), "float32")],
                                           checkpoint_format=registry.NAME)

    assert str(error.value) == "the name format was given parts it cannot read back to verify"
    assert _files(tmp_path) == []


def test_an_existing_output_is_refused_with_its_fix(tmp_path):
    output = str(tmp_path / "model")
    tf_bundle.write(output, VALUES)
    with pytest.raises(ss.OutputExistsError) as error:
        checkpoint_writer.write_checkpoint(output, iter(VALUES.items()), specs=SPECS, checkpoint_format=registry.NAME)
    assert str(error.value) == (f"checkpoint '{output}' already exists ({output}.data-00000-of-00001); pass "
                                "overwrite=True to replace it")
    assert (error.value.reason, error.value.fixes, error.value.path) == (
        f"checkpoint '{output}' already exists ({output}.data-00000-of-00001)",
        (ss.Fix("overwrite", True, "to replace it"),), output)
    with pytest.raises(ss.InvalidOutputError, match="is a directory; name a checkpoint in it such as"):
        checkpoint_writer.write_checkpoint(str(tmp_path), iter(()), specs=[], checkpoint_format=registry.NPZ)


def test_a_second_writing_process_is_refused_at_once_naming_the_first(tmp_path, run_cli):
    source = str(tmp_path / "source")
    tf_bundle.write(source, VALUES)
    (tmp_path / "out").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from subsetsaver import storage
            storage.hold_directory({str(tmp_path / 'out')!r})
            print('held', flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline() == "held\n"
        refused = run_cli("convert", source, str(tmp_path / "out" / "model.npz"))
        assert (refused.returncode, refused.stdout) == (2, "")
        assert refused.stderr == (
            f"subsetsaver: error: another process is writing checkpoints in '{tmp_path}/out' (process "
            f"{holder.pid}); two writers in one directory replace each other's files: give each its own directory, "
            "or stop the other process first\n")
        assert _files(tmp_path / "out") == []
    finally:
        holder.stdin.close()
        holder.wait(60)
    assert run_cli("convert", source, str(tmp_path / "out" / "model.npz")).returncode == 0


class _Terminal:
    """A stand-in for a terminal's stderr: says it is one and keeps what is written."""

    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_a_progress_bar_on_a_terminal_and_nothing_when_piped(tmp_path, monkeypatch, capsys):
    checkpoint_writer.write_checkpoint(str(tmp_path / "piped.npz"), iter(VALUES.items()), specs=SPECS,
                                       checkpoint_format=registry.NPZ)
    assert capsys.readouterr().err == ""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(progress, "SHOWN_AFTER_SECONDS", 0)  # a long write, as far as the bar knows
    checkpoint_writer.write_checkpoint(str(tmp_path / "shown.npz"), iter(VALUES.items()), specs=SPECS,
                                       checkpoint_format=registry.NPZ)
    assert "shown.npz:" in terminal.text and "/40.0 [" in terminal.text, terminal.text  # a bar over its 40 bytes
