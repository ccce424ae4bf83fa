"""Large local transfers past the page cache: the bytes are exact whatever the pieces, sizes and
offsets; what was written past the page cache is not in it, and is read back from the disk; every
other file (written through the page cache, or changed since) is read through it; a file system
that refuses ``O_DIRECT``, on opening or on a transfer, gets the same bytes through the page cache;
a read past the end of a file is the usual error.

Whether the page cache holds a file's first bytes is asked with a read flagged ``RWF_NOWAIT``,
which fails with ``EAGAIN`` where it does not (and starts reading them in: each file is asked once).
"""

import errno
import fcntl
import os

import numpy as np
import pytest

from subsetsaver.errors import CorruptCheckpointError
from subsetsaver.formats import direct_io, local_files, storage

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT") or not hasattr(os, "RWF_NOWAIT"),
                                reason="O_DIRECT and RWF_NOWAIT are Linux's; elsewhere every transfer is buffered")

BLOCK, STAGE, BOUNCE = direct_io.BLOCK, direct_io.STAGE_BYTES, direct_io.BOUNCE_BYTES
SIZES = [0, 1, BLOCK - 1, BLOCK + 1, STAGE - 1, STAGE, STAGE + 1, 2 * STAGE + 3 * BLOCK + 5]


def random_bytes(size, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def cached_at_start(path) -> bool:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.preadv(descriptor, [bytearray(BLOCK)], 0, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)


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
    assert not cached_at_start(tmp_path / "direct.bin")
    assert (tmp_path / "direct.bin").read_bytes() == data
    monkeypatch.setattr(direct_io, "_open_direct", lambda path, flags: None)  # refused on opening
    write(tmp_path / "buffered.bin", data, [1 << 20])
    assert cached_at_start(tmp_path / "buffered.bin")
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


@pytest.mark.parametrize("offset,count", [(0, BOUNCE), (13, BOUNCE + 7), (BLOCK - 1, 3 * BOUNCE + 1),
                                          (STAGE - 5, STAGE + 10), (1, 2 * STAGE + 3 * BLOCK + 4)])
def test_reads_of_a_file_written_past_the_page_cache_are_exact_and_leave_it_out(tmp_path, offset, count):
    data = random_bytes(2 * STAGE + 3 * BLOCK + 5)
    path = tmp_path / "file.bin"
    write(path, data, [len(data)])
    with local_files.LocalReader(path) as reader:
        read = reader.read_into(offset, np.zeros(count, dtype=np.uint8))
    assert read.tobytes() == data[offset:offset + count]
    assert not cached_at_start(path)  # read from the disk, not into the page cache


def test_files_written_through_the_page_cache_or_changed_since_are_read_through_it(tmp_path, monkeypatch):
    data = random_bytes(2 * STAGE + 5)
    write(tmp_path / "direct.bin", data, [len(data)])
    with local_files.LocalReader(tmp_path / "direct.bin") as reader:
        assert reader._direct is not None
    with open(tmp_path / "direct.bin", "ab") as handle:  # another writer appends to it
        handle.write(b"more")
    monkeypatch.setattr(direct_io, "_open_direct", lambda path, flags: None)
    write(tmp_path / "buffered.bin", data, [len(data)])
    for name, expected in (("direct.bin", data + b"more"), ("buffered.bin", data)):
        with local_files.LocalReader(tmp_path / name) as reader:
            assert reader._direct is None, name
            assert reader.read_into(3, np.zeros(len(expected) - 3, dtype=np.uint8)).tobytes() == expected[3:]


def test_a_read_past_the_end_is_the_ended_early_error(tmp_path):
    path = tmp_path / "file.bin"
    write(path, random_bytes(STAGE + 5), [STAGE + 5])
    with local_files.LocalReader(path) as reader:
        with pytest.raises(CorruptCheckpointError, match="ended while reading it"):
            reader.read_into(10, np.zeros(STAGE, dtype=np.uint8))


def test_buffers_let_go_of_are_kept_within_bounds(tmp_path):
    data = random_bytes(STAGE + 5)
    for index in range(6):
        write(tmp_path / f"file{index}.bin", data, [len(data)])
        with local_files.LocalReader(tmp_path / f"file{index}.bin") as reader:
            reader.read_into(1, np.zeros(STAGE, dtype=np.uint8))
    assert {size: len(idle) for size, idle in direct_io._idle.items()} == {STAGE: 2, BOUNCE: 1}
