"""Large local transfers past the page cache: the bytes are exact whatever the pieces, sizes and
offsets; what was written past the page cache is not in it, and is read back from the disk; every
other file (written through the page cache, or changed since) is read through it; a file system
that refuses ``O_DIRECT``, on opening or on a transfer, gets the same bytes through the page cache;
a read past the end of a file is the usual error.

What the page cache holds of a file is asked with ``mincore`` (a read flagged ``RWF_NOWAIT``
starts reading what it asks for, and may find it there a moment later).
"""

import ctypes
import errno
import fcntl
import mmap
import os
import sys
import threading

import numpy as np
import pytest

from subsetsaver import storage
from subsetsaver.errors import CorruptCheckpointError
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.storage import direct_io
from subsetsaver.storage import local as local_files

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="O_DIRECT is Linux's; elsewhere every transfer goes through the page cache"),
              pytest.mark.usefixtures("direct_transfers")]  # skipped where the file system refuses O_DIRECT
LIBC = ctypes.CDLL(None, use_errno=True)
BLOCK, STAGE, BOUNCE = direct_io.BLOCK, direct_io.STAGE_BYTES, direct_io.BOUNCE_BYTES
SIZES = [0, 1, BLOCK - 1, BLOCK + 1, STAGE - 1, STAGE, STAGE + 1, 2 * STAGE + 3 * BLOCK + 5]


def random_bytes(size, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def resident_pages(path) -> int:
    """How many pages of the file at ``path`` the page cache holds (``mincore`` of a mapping of it that
    is never touched: asking reads nothing in)."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        pages = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
        start = ctypes.c_char.from_buffer(mapping)
        if LIBC.mincore(ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), pages) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        del start
        return sum(page & 1 for page in pages)
    finally:
        mapping.close()


def write(path, data, pieces):
    """Write ``data`` to ``path`` through the local sink, cut at ``pieces`` (sizes, repeated)."""
    view, at, turn = memoryview(data), 0, 0
    with storage.replacing(str(path)) as sink:
        while at < len(data):
            size = pieces[turn % len(pieces)]
            sink.write(view[at:at + size])
            at, turn = at + size, turn + 1


def written(path, data, pieces):
    """What :func:`write` leaves in the file, read back (into the page cache)."""
    write(path, data, pieces)
    return path.read_bytes()


@pytest.mark.parametrize("size", SIZES)
def test_staged_writes_give_the_exact_bytes_in_any_pieces(tmp_path, size):
    data = random_bytes(size, size)
    for pieces in ([max(size, 1)], [7, BLOCK, (1 << 20) + 3], [STAGE + 11]):
        assert written(tmp_path / "file.bin", data, pieces) == data, pieces
    assert os.listdir(tmp_path) == ["file.bin"]


def test_a_large_write_goes_past_the_page_cache(tmp_path, monkeypatch):
    data = random_bytes(2 * STAGE + 100)
    write(tmp_path / "direct.bin", data, [1 << 20])
    assert resident_pages(tmp_path / "direct.bin") == 1  # the tail's page, written through the page cache
    assert (tmp_path / "direct.bin").read_bytes() == data
    monkeypatch.setattr(direct_io, "_open_direct", lambda path, flags: None)  # refused on opening
    write(tmp_path / "buffered.bin", data, [1 << 20])
    assert resident_pages(tmp_path / "buffered.bin") == -(-len(data) // mmap.PAGESIZE)
    assert (tmp_path / "buffered.bin").read_bytes() == data


def test_a_direct_transfer_turned_down_goes_through_the_page_cache(tmp_path, monkeypatch):
    real_pwrite, refused = os.pwrite, []

    def pwrite(descriptor, data, offset):  # the file system took the flag but refuses the transfer
        if fcntl.fcntl(descriptor, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    data = random_bytes(3 * STAGE + 5)
    assert written(tmp_path / "file.bin", data, [1 << 20]) == data
    assert refused == [0, STAGE, 2 * STAGE]


FILE = 2 * STAGE + 3 * BLOCK + 5


@pytest.mark.parametrize("offset,count", [(0, BOUNCE), (13, BOUNCE + 7), (BLOCK - 1, FILE - BLOCK + 1),
                                          (STAGE - 5, STAGE + 10), (1, FILE - 1)])
def test_reads_of_a_file_written_past_the_page_cache_are_exact_and_leave_it_out(tmp_path, offset, count):
    data = random_bytes(FILE)
    path = tmp_path / "file.bin"
    write(path, data, [len(data)])
    with direct_io.reading_back(), local_files.LocalReader(path) as reader:
        read = reader.read_into(offset, np.zeros(count, dtype=np.uint8))
    assert read.tobytes() == data[offset:offset + count]
    assert resident_pages(path) == 1  # read from the disk, not into the page cache (the tail's page was)


def test_only_a_writers_read_back_of_what_it_wrote_past_the_page_cache_goes_past_it(tmp_path, monkeypatch):
    data = random_bytes(2 * STAGE + 5)
    write(tmp_path / "direct.bin", data, [len(data)])
    with local_files.LocalReader(tmp_path / "direct.bin") as reader:
        assert reader._direct is None  # a later read: the page cache may hold the file by then
    with direct_io.reading_back(), local_files.LocalReader(tmp_path / "direct.bin") as reader:
        assert reader._direct is not None
    with open(tmp_path / "direct.bin", "ab") as handle:  # another writer appends to it
        handle.write(b"more")
    monkeypatch.setattr(direct_io, "_open_direct", lambda path, flags: None)
    write(tmp_path / "buffered.bin", data, [len(data)])
    for name, expected in (("direct.bin", data + b"more"), ("buffered.bin", data)):
        with direct_io.reading_back(), local_files.LocalReader(tmp_path / name) as reader:
            assert reader._direct is None, name
            assert reader.read_into(3, np.zeros(len(expected) - 3, dtype=np.uint8)).tobytes() == expected[3:]


def test_a_checkpoints_read_back_comes_from_the_disk_as_it_lands(tmp_path, monkeypatch):
    from subsetsaver.tools.slim import slim

    values = {"w": np.random.default_rng(1).standard_normal(5 * STAGE // 8).astype(np.float32)}  # 2.5 stages
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    source = tf_bundle.write(tmp_path / "in" / "model", values)  # written past the page cache too
    readers, read_back, reread = {}, [], []
    real_open, real_preadv, real_init = direct_io._open_direct, os.preadv, direct_io.DirectReads.__init__

    def open_direct(path, flags):
        descriptor = real_open(path, flags)
        if descriptor is not None and flags == os.O_RDONLY:
            readers[descriptor] = path
        return descriptor

    def preadv(descriptor, buffers, offset):
        got = real_preadv(descriptor, buffers, offset)
        if descriptor in readers and fcntl.fcntl(descriptor, fcntl.F_GETFL) & os.O_DIRECT:
            read_back.append((readers[descriptor], offset, got))
        return got

    monkeypatch.setattr(direct_io, "_open_direct", open_direct)
    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(direct_io.DirectReads, "__init__", lambda self, path: (reread.append(path),
                                                                                real_init(self, path))[1])
    slim(source, "everything()", tmp_path / "out" / "model")  # the source is read through the page cache
    data = [(path, offset, got) for path, offset, got in read_back if ".data-" in path]
    assert {os.path.dirname(path) for path, _, _ in data} == {str(tmp_path / "out")}
    assert [offset for _, offset, _ in data] == [0, STAGE, 2 * STAGE]  # each stage as it was written, in order
    assert sum(got for _, _, got in data) == os.path.getsize(tmp_path / "out" / "model.data-00000-of-00001")
    assert reread == []  # nothing is read a second time once the file is complete


class RecordingListener:
    """What :func:`~subsetsaver.storage.direct_io.reporting_landed` tells a listener, kept; ``first_back`` is set
    once bytes have come back."""

    def __init__(self):
        self.segments, self.landed_bytes, self.ends = [], [], []
        self.first_back = threading.Event()

    def segment(self, path, offset, length):
        self.segments.append((path, offset, length))

    def landed(self, path, offset, view):
        assert offset == sum(len(piece) for piece in self.landed_bytes)
        self.landed_bytes.append(bytes(view))
        self.first_back.set()

    def finished(self, path, identity):
        self.ends.append(("finished", path, identity))

    def abandoned(self, path):
        self.ends.append(("abandoned", path))


def test_a_stage_comes_back_from_the_disk_before_the_file_is_finished(tmp_path):
    data = random_bytes(2 * STAGE + 5)
    listener, path = RecordingListener(), str(tmp_path / "file.bin")
    with direct_io.reporting_landed(listener), storage.replacing(path) as sink:
        sink.write(data[:STAGE - 7])
        sink.write(data[STAGE - 7:])  # the second stage is sent with this write, the 5 bytes left at commit
        assert listener.first_back.wait(30)  # read back while the file is still being written
    assert listener.segments == [(path, 0, STAGE - 7), (path, STAGE - 7, STAGE + 12)]
    assert b"".join(listener.landed_bytes) == data and len(listener.landed_bytes) == 3
    assert listener.ends == [("finished", path, direct_io.written_identity(path))]  # renamed since: the same
    assert listener.ends[0][2][2] == len(data) and open(path, "rb").read() == data


def test_a_read_back_the_disk_refuses_tells_the_listener_the_file_was_not_read_back(tmp_path, monkeypatch):
    real_preadv = os.preadv

    def preadv(descriptor, buffers, offset):
        if fcntl.fcntl(descriptor, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EIO, "Input/output error")
        return real_preadv(descriptor, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    listener, path = RecordingListener(), str(tmp_path / "file.bin")
    with direct_io.reporting_landed(listener):
        write(path, random_bytes(STAGE + 5), [STAGE + 5])
    assert listener.landed_bytes == [] and listener.ends == [("abandoned", path)]


def test_the_spans_of_a_large_read_back_are_read_at_once(tmp_path, monkeypatch):
    spans = direct_io.READS_IN_FLIGHT
    data = random_bytes(spans * direct_io.SPAN_BYTES)
    write(tmp_path / "file.bin", data, [len(data)])
    together = threading.Barrier(spans, timeout=20)  # broken unless every span is asked at once
    real_preadv = os.preadv

    def preadv(descriptor, buffers, offset):
        if fcntl.fcntl(descriptor, fcntl.F_GETFL) & os.O_DIRECT:
            together.wait()
        return real_preadv(descriptor, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    with direct_io.reading_back(), local_files.LocalReader(tmp_path / "file.bin") as reader:
        read = reader.read_into(0, np.zeros(len(data), dtype=np.uint8))
    assert read.tobytes() == data
    assert not together.broken


def test_a_read_past_the_end_is_the_ended_early_error(tmp_path):
    path = tmp_path / "file.bin"
    write(path, random_bytes(STAGE + 5), [STAGE + 5])
    with direct_io.reading_back(), local_files.LocalReader(path) as reader:
        with pytest.raises(CorruptCheckpointError, match="ended while reading it"):
            reader.read_into(10, np.zeros(STAGE, dtype=np.uint8))


def test_buffers_are_reused_and_those_kept_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(direct_io, "_idle", {size: [] for size in direct_io._IDLE_KEPT})  # none kept yet
    data = random_bytes(STAGE + 5)
    for index in range(6):
        write(tmp_path / f"file{index}.bin", data, [len(data)])
        with direct_io.reading_back(), local_files.LocalReader(tmp_path / f"file{index}.bin") as reader:
            reader.read_into(1, np.zeros(STAGE, dtype=np.uint8))
    assert len(direct_io._idle[STAGE]) == 2  # reused: the two stages of each write
    assert 1 <= len(direct_io._idle[BOUNCE]) <= 2  # a read of two spans holds one or two at once, reused
    held = [direct_io._buffer(STAGE) for _ in range(6)]
    for buffer in held:
        direct_io._let_go(buffer)
    assert len(direct_io._idle[STAGE]) == direct_io._IDLE_KEPT[STAGE] == 4
