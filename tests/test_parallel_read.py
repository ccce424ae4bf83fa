"""Large arrays read by several threads in chunks: CRC-32s joined exactly, every chunk's damage caught
and named, reads really in flight side by side, and nothing written into a buffer once a load has
given up. TensorFlow only for the ram:// files."""

import os
import threading
import time
import zlib

import numpy as np
import pytest

from subsetsaver import CorruptCheckpointError
from subsetsaver.formats import npz as npzfile
from subsetsaver.formats.npz import parallel_read, reader, sources
from subsetsaver.formats.npz.parallel_read import ParallelReads, crc32_combine

CHUNK = 4096  # small chunks, so arrays of a few KiB span many of them


@pytest.fixture
def small_chunks(monkeypatch):
    """Arrays of 1 KiB and more go to the readers, in chunks of 4 KiB."""
    monkeypatch.setattr(parallel_read, "CHUNK_BYTES", CHUNK)
    monkeypatch.setattr(reader, "HASH_IN_THREADS", 1024)


def test_crc32_combine_is_the_crc_of_the_joined_bytes():
    rng = np.random.default_rng(3)
    for _ in range(200):
        first = rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()
        second = rng.integers(0, 256, int(rng.choice([0, 1, 7, 4096, rng.integers(0, 9000)])),
                              dtype=np.uint8).tobytes()
        assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(first + second)
    assert crc32_combine(zlib.crc32(b"ab"), zlib.crc32(b"cd"), 2) == zlib.crc32(b"abcd")


def arrays_spanning_chunks():
    rng = np.random.default_rng(11)
    return {
        "big/exact": rng.standard_normal(CHUNK * 3 // 4).astype(np.float32),  # exactly 3 chunks
        "big/ragged": rng.standard_normal((37, 101)).astype(np.float64),  # 7 chunks, the last one short
        "big/flags": rng.integers(0, 2, 5000).astype(bool),
        "small/b": np.arange(5, dtype=np.int64),  # read inline, between the large ones
        "big/bf16": rng.standard_normal(3000).astype(npzfile.numpy_dtype("bfloat16")),
    }


@pytest.mark.parametrize("checksum", ["crc32", "sha256"])
@pytest.mark.parametrize("where", ["local", "ram"])
def test_arrays_of_many_chunks_round_trip_bit_exact(tmp_path, small_chunks, checksum, where):
    arrays = arrays_spanning_chunks()
    path = str(tmp_path / "m.npz") if where == "local" else f"ram://parallel/{checksum}.npz"
    npzfile.write(path, arrays, checksum=checksum)
    _, loaded = npzfile.read(path)
    assert list(loaded) == list(arrays)
    for name, value in arrays.items():
        assert loaded[name].dtype == value.dtype and loaded[name].tobytes() == value.tobytes(), name
    with zipfile_of(path) as archive:  # the CRC-32 joined from chunks is the one zip recorded
        assert archive.testzip() is None


def zipfile_of(path):
    import io
    import zipfile

    if not path.startswith("ram://"):
        return zipfile.ZipFile(path)
    import tensorflow as tf  # ram:// files live in TensorFlow's memory filesystem

    with tf.io.gfile.GFile(path, "rb") as handle:
        return zipfile.ZipFile(io.BytesIO(handle.read()))


@pytest.mark.parametrize("checksum", ["crc32", "sha256"])
@pytest.mark.parametrize("chunk", [0, 3, 6])
def test_a_flipped_byte_in_any_chunk_is_named(tmp_path, small_chunks, checksum, chunk):
    arrays = arrays_spanning_chunks()
    path = str(tmp_path / "m.npz")
    npzfile.write(path, arrays, checksum=checksum)
    entry = npzfile.read_manifest(path).entry("big/ragged")
    with npzfile.Archive(path) as archive:
        offset = archive.locations()["big/ragged"][1] + chunk * CHUNK + 17
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(CorruptCheckpointError) as error:
        npzfile.read(path)
    expected = entry.checksum if checksum == "crc32" else entry.checksum[:16] + "..."
    message = str(error.value)
    assert message.startswith(f"'{path}', member 'big.ragged.npy': checksum mismatch for array 'big/ragged' "
                              f"({checksum} ")
    assert message.endswith(f", manifest says {expected}): its data was altered or damaged; use another checkpoint")


def test_a_file_cut_short_after_it_was_opened_is_an_error_from_the_readers(tmp_path, small_chunks, monkeypatch):
    monkeypatch.setattr(sources, "_READ_WHOLE", 0)  # read from the file, not from a copy made at open
    path = str(tmp_path / "m.npz")
    npzfile.write(path, arrays_spanning_chunks())
    with npzfile.Archive(path) as archive:
        start = archive.locations()["big/exact"][1]
        os.truncate(path, start + CHUNK + 10)  # the second chunk of the first large array is cut
        with pytest.raises(CorruptCheckpointError) as error:
            archive.load(None)
    assert str(error.value) == (f"'{path}' ended while reading it: it changed or was truncated since the checkpoint "
                                "was opened; restore from an intact copy of the checkpoint")


def test_reads_are_in_flight_side_by_side(small_chunks):
    """Every reader must be inside a read at once to pass the barrier; one read at a time times out."""
    barrier = threading.Barrier(parallel_read.READERS, timeout=10)

    def read_into(offset, piece):
        barrier.wait()
        piece[...] = offset // CHUNK

    buffer = np.zeros(parallel_read.READERS * CHUNK, np.uint8)
    entry = type("Entry", (), {"nbytes": buffer.nbytes})()
    with ParallelReads(read_into, "crc32") as reads:
        reads.add(entry, 0, buffer)
        (_, filled, digest), = reads.finished()
    assert filled is buffer
    assert np.array_equal(buffer, np.repeat(np.arange(parallel_read.READERS, dtype=np.uint8), CHUNK))
    assert digest == f"{zlib.crc32(buffer):08x}"


def test_leaving_early_cancels_the_reads_not_started_and_waits_for_the_rest(small_chunks):
    started = []

    def read_into(offset, piece):
        started.append(offset)
        time.sleep(0.01)
        piece[...] = 1

    buffer = np.zeros(200 * CHUNK, np.uint8)
    entry = type("Entry", (), {"nbytes": buffer.nbytes})()
    with pytest.raises(RuntimeError, match="a check failed"):
        with ParallelReads(read_into, "crc32") as reads:
            reads.add(entry, 0, buffer)
            raise RuntimeError("a check failed")
    count, written = len(started), int(buffer.sum())
    time.sleep(0.1)
    assert len(started) == count < 200  # nothing started after the block was left
    assert int(buffer.sum()) == written == count * CHUNK  # and every started read had finished
