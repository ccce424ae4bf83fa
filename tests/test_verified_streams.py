"""Reads at memory speed, every byte still verified: checksums off the reading thread, tensors read in
pieces into reused memory, ``diff`` comparing the pieces where they were read.

Each test here fails if a checksum were skipped: a byte damaged in a large tensor (one whose
checksum runs on the background thread) is caught by ``read``, by streamed ``pieces``, by ``diff``
(even where both sides hold the same damaged bytes, so comparing alone would call them equal),
by ``convert``, ``slim`` and ``average``, which then write nothing. ``diff`` gives the same answers
streamed as read whole, and the answers a plain numpy comparison gives; ``average`` gives the same
bits streamed as read whole, and those of its rule computed by plain numpy.
"""

import itertools
import math
import os
import shutil
import threading
import time

import google_crc32c
import ml_dtypes
import numpy as np
import pytest

from subsetsaver.errors import CorruptCheckpointError
from subsetsaver.formats.tf import bundle as tf_bundle
from subsetsaver.formats.tf import name_format
from subsetsaver.formats.tf.bundle.reader import PIECE_BYTES
from subsetsaver.formats.wire import crc32c as checksums
from subsetsaver.tools import average as average_module
from subsetsaver.tools import diff as diff_module
from subsetsaver.tools.average import average
from subsetsaver.tools.convert import convert
from subsetsaver.tools.diff import diff
from subsetsaver.tools.slim import slim

BIG = 3 * PIECE_BYTES // 4 + 5  # float32 elements: three pieces and a bit, checksummed in the background


def big_values(seed=0):
    rng = np.random.default_rng(seed)
    return {"big/w": rng.standard_normal(BIG).astype(np.float32),
            "small/b": np.arange(10, dtype=np.float32),
            "step": np.array(7, dtype=np.int64)}


def damage(prefix, name, at):
    """Flip one bit of byte ``at`` of tensor ``name``'s stored bytes in the data file."""
    with tf_bundle.BundleReader(prefix) as reader:
        stored = reader._index.tensors[name].stored
    path = tf_bundle.data_path(prefix, 0, 1)
    data = bytearray(open(path, "rb").read())
    data[stored.offset + at] ^= 0x10
    open(path, "wb").write(bytes(data))


def copy_checkpoint(prefix, other):
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copyfile(str(prefix) + suffix, str(other) + suffix)
    return str(other)


@pytest.mark.parametrize("size", [0, 1, 7, 4096, (1 << 20) + 3])
def test_crc32c_of_any_buffer_is_google_crc32c_s(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    expected = google_crc32c.value(data.tobytes())
    readonly = np.frombuffer(data.tobytes(), dtype=np.uint8)
    assert {checksums.crc32c(buffer) for buffer in (data, readonly, memoryview(data), bytearray(data),
                                                   data.tobytes())} == {expected}
    if size % 4 == 0:
        assert checksums.crc32c(data.view(np.float32)) == expected
    running = checksums.RunningCrc()
    for start in range(0, size, 1000):
        running.feed(data[start:start + 1000])
    assert running.value() == expected


def test_a_big_tensor_reads_bit_exact_from_reused_memory(tmp_path):
    values = big_values()
    prefix = tf_bundle.write(tmp_path / "model", values)
    with tf_bundle.BundleReader(prefix) as reader:
        for _ in range(3):  # the second and third reads reuse the first's memory
            read = dict(reader.read_many(reader.names))
            assert {name: value.tobytes() for name, value in read.items()} == \
                   {name: value.tobytes() for name, value in values.items()}
            assert type(read["big/w"]) is np.ndarray and read["big/w"].shape == (BIG,)
            del read


@pytest.mark.parametrize("at", [0, PIECE_BYTES + 11, 4 * BIG - 1])
def test_a_damaged_byte_of_a_big_tensor_is_caught_by_read_and_by_pieces(tmp_path, at):
    prefix = tf_bundle.write(tmp_path / "model", big_values())
    damage(prefix, "big/w", at)
    with tf_bundle.BundleReader(prefix) as reader:
        with pytest.raises(CorruptCheckpointError, match="tensor 'big/w' .*fails its checksum"):
            reader.read("big/w")
        assert reader.read("small/b").tolist() == list(range(10))
        buffers = [np.empty(1 << 20, dtype=np.uint8) for _ in range(3)]
        taken = []
        with pytest.raises(CorruptCheckpointError, match="fails its checksum"):
            for piece in reader.pieces("big/w", buffers):
                taken.append(piece.size)
        assert sum(taken) == BIG  # every piece handed over, then the refusal
        assert sum(piece.size for piece in reader.pieces("small/b", buffers)) == 10


@pytest.mark.parametrize("at", [3, 2 * PIECE_BYTES + 1])
def test_diff_refuses_damaged_bytes_even_when_both_sides_hold_them(tmp_path, at):
    prefix = tf_bundle.write(tmp_path / "a", big_values())
    damage(prefix, "big/w", at)
    same = copy_checkpoint(prefix, tmp_path / "b")  # byte for byte equal: comparing alone says 'equal'
    with pytest.raises(CorruptCheckpointError, match="big/w"):
        diff(prefix, same, progress=False)
    healthy = tf_bundle.write(tmp_path / "c", big_values())
    for a, b in ((healthy, prefix), (prefix, healthy)):  # one side damaged: refused, never 'changed'
        with pytest.raises(CorruptCheckpointError, match="big/w"):
            diff(a, b, progress=False)


@pytest.mark.parametrize("command", ["convert", "slim", "average"])
def test_convert_slim_and_average_refuse_a_damaged_big_tensor_and_write_nothing(tmp_path, command):
    prefix = tf_bundle.write(tmp_path / "model", big_values())
    damage(prefix, "big/w", PIECE_BYTES + 1)
    output = tmp_path / "out" / ("model.npz" if command == "convert" else "slim")
    with pytest.raises(CorruptCheckpointError, match="big/w"):
        if command == "convert":
            convert(prefix, output)
        elif command == "slim":
            slim(prefix, "everything()", output)
        else:  # the healthy input first: the damaged one is read in pieces beside it
            average([tf_bundle.write(tmp_path / "healthy", big_values(seed=1)), prefix], output)
    assert not (tmp_path / "out").exists() or sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_convert_of_a_big_tensor_is_bit_exact(tmp_path):
    values = big_values()
    prefix = tf_bundle.write(tmp_path / "model", values)
    report = slim(prefix, "everything()", tmp_path / "out" / "slim")
    assert report.verified
    with tf_bundle.BundleReader(tmp_path / "out" / "slim") as reader:
        assert {name: reader.read(name).tobytes() for name in reader.names} == \
               {name: value.tobytes() for name, value in values.items()}


def plain_average(values, weights):
    """The rule average documents, ``m += (x - m) * w / W`` in float64 where x differs from m, rounded
    once: over whole arrays, by plain numpy."""
    mean, seen = None, 0.0
    for value, weight in zip(values, weights):
        x = value.astype(np.float64)
        if weight == 0:
            continue
        if mean is None:
            mean, seen = x, weight
            continue
        seen += weight
        moves = ~((x == mean) | (np.isnan(x) & np.isnan(mean)))
        with np.errstate(invalid="ignore", over="ignore"):
            mean = np.where(moves, mean + (x - mean) * (weight / seen), mean)
    return mean.astype(values[0].dtype)


def test_average_gives_the_same_bits_streamed_whole_and_by_plain_numpy(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e38, -1e38], np.float32)
    inputs = []
    for index in range(3):  # pieces and chunks of several sizes; the special values meet each other
        w = rng.standard_normal(BIG).astype(np.float32)
        w[rng.integers(0, BIG, 5000)] = rng.choice(special, 5000)
        w[:49] = np.repeat(special, 7) if index == 0 else np.tile(special, 7)  # every pair of them meets
        inputs.append({"big/w": w,
                       "half": rng.standard_normal(PIECE_BYTES // 2 + 9).astype(np.float16),
                       "bf16": rng.standard_normal((300, 7)).astype(ml_dtypes.bfloat16),
                       "empty": np.zeros((0, 4), np.float32), "step": np.array(index, np.int64)})
    paths = [tf_bundle.write(tmp_path / f"in{index}", values) for index, values in enumerate(inputs)]
    weights = [1, 0, 3]
    streamed = average(paths, tmp_path / "streamed" / "m", keep="everything()", weights=weights)
    monkeypatch.setattr(average_module, "_streamed_mean", lambda *args: pytest.fail("a streamed mean"))
    monkeypatch.setattr(name_format.NameBasedFormat, "streams", lambda self, path: None)
    whole = average(paths, tmp_path / "whole" / "m", keep="everything()", weights=weights)
    assert streamed.averaged == whole.averaged == ("bf16", "big/w", "empty", "half")
    with tf_bundle.BundleReader(streamed.output) as s, tf_bundle.BundleReader(whole.output) as w:
        for name in inputs[0]:
            expected = (plain_average([values[name] for values in inputs], [0.25, 0.0, 0.75])
                        if name != "step" else inputs[-1][name])
            for reader in (s, w):
                value = reader.read(name)
                assert (value.dtype, value.shape, value.tobytes()) == \
                       (expected.dtype, expected.shape, expected.tobytes()), name


def test_a_streamed_average_holds_the_output_and_small_buffers_only(tmp_path, monkeypatch):
    paths = [tf_bundle.write(tmp_path / f"in{seed}", big_values(seed)) for seed in range(2)]
    real_read, real_read_many = tf_bundle.BundleReader.read, tf_bundle.BundleReader.read_many

    def read(self, name):  # an input's big tensor read whole would put it in memory beside the output
        assert not (self.prefix in paths and name == "big/w"), f"{self.prefix}: {name} read whole"
        return real_read(self, name)

    def read_many(self, names):
        assert self.prefix not in paths, f"{self.prefix}: {names} read whole"
        return real_read_many(self, names)

    monkeypatch.setattr(tf_bundle.BundleReader, "read", read)
    monkeypatch.setattr(tf_bundle.BundleReader, "read_many", read_many)
    report = average(paths, tmp_path / "out" / "m", keep="everything()")
    assert report.averaged == ("big/w", "small/b")
    inputs = [big_values(seed) for seed in range(2)]
    with tf_bundle.BundleReader(report.output) as written:
        for name in report.averaged:
            expected = plain_average([values[name] for values in inputs], [0.5, 0.5])
            assert written.read(name).tobytes() == expected.tobytes(), name


def plain_diff(a, b, atol, rtol):
    """(status, max_abs, rel_l2, changed_fraction) by the documented rule, over whole float64 copies."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if a.dtype.kind == "b":
        beyond = int(np.count_nonzero(a != b))
        return ("changed" if beyond else "equal"), None, None, beyond / max(a.size, 1)
    as_type = np.complex128 if a.dtype.kind == "c" else np.float64
    x, y = a.astype(as_type), b.astype(as_type)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == b) if a.dtype.kind in "iu" else (x == y) | (np.isnan(x) & np.isnan(y))
        if same.all():
            return "equal", 0.0, 0.0, 0.0
        if a.dtype.kind in "iu":
            gap = np.array([abs(int(p) - int(q)) for p, q in zip(a.tolist(), b.tolist())], dtype=np.float64)
        else:
            gap = np.abs(x - y)
        gap = np.where(same, 0.0, gap)
        gap[np.isnan(gap)] = np.inf
        beyond = int(np.count_nonzero(~same & ~(gap <= atol + rtol * np.abs(y))))
        reference = float(np.sum(np.abs(np.where(np.isnan(x), 0, x)) ** 2))
        rel_l2 = math.sqrt(float(np.sum(gap ** 2))) / math.sqrt(reference) if reference > 0 else None
    return ("changed" if beyond else "close"), float(gap.max()), rel_l2, beyond / a.size


def pairs():
    """Pairs of arrays (A, B) that exercise every rule: NaN, infinities, -0.0, integers past 2**53,
    bools, narrow and complex floats, and large tensors equal for their first pieces."""
    rng = np.random.default_rng(3)
    big = rng.standard_normal(BIG).astype(np.float32)
    late = big.copy()
    late[-5:] += 1  # equal bytes for three pieces, then a difference: A's norm is owed and read again
    early = big.copy()
    early[:3] = 0
    special = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, np.nan, 2.0, -0.0], dtype=np.float32)
    return {
        "big/same": (big, big.copy()),
        "big/late": (big, late),
        "big/early": (big, early),
        "big/close": (big, big + np.float32(1e-3)),
        "special/same": (special, np.array([np.nan, np.inf, -np.inf, -0.0, 1.0, np.nan, 2.0, 0.0], np.float32)),
        "special/diff": (special, np.array([1.0, np.inf, np.inf, 0.0, np.nan, np.nan, 2.5, 0.0], np.float32)),
        "ints/wide": (np.array([2**53, -2**63, 2**63 - 1, 5], np.int64), np.array([2**53 + 1, 2**63 - 1, -2**63, 5],
                                                                                  np.int64)),
        "ints/u8": (np.arange(200, dtype=np.uint8), np.arange(200, dtype=np.uint8)[::-1].copy()),
        "flags": (np.array([True, False, True]), np.array([True, True, True])),
        "half": (np.linspace(0, 1, 1001).astype(np.float16), np.linspace(0, 1.01, 1001).astype(np.float16)),
        "bf16": (np.linspace(-2, 2, 300).astype(ml_dtypes.bfloat16), np.linspace(-2, 2.1, 300).astype(ml_dtypes.bfloat16)),
        "complex": (np.array([1 + 2j, 3 - 1j, np.nan], np.complex64), np.array([1 + 2j, 3 + 1j, np.nan], np.complex64)),
        "empty": (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)),
    }


@pytest.mark.parametrize("chunk", [diff_module._CHUNK, 4099], ids=["chunk-default", "chunk-4099"])
@pytest.mark.parametrize("atol,rtol", [(0.0, 0.0), (1e-2, 0.0), (0.0, 0.5), (np.inf, 0.0)])
def test_diff_gives_the_same_answers_streamed_whole_and_by_plain_numpy(tmp_path, monkeypatch, atol, rtol, chunk):
    monkeypatch.setattr(diff_module, "_CHUNK", chunk)  # 4099: many chunks a piece, their edges anywhere
    cases = pairs()
    a = tf_bundle.write(tmp_path / "a", {name: x for name, (x, _) in cases.items()})
    b = tf_bundle.write(tmp_path / "b", {name: y for name, (_, y) in cases.items()})
    streamed = diff(a, b, atol=atol, rtol=rtol, progress=False)
    monkeypatch.setattr(name_format.NameBasedFormat, "streams", lambda self, path: None)
    whole = diff(a, b, atol=atol, rtol=rtol, progress=False)
    assert repr(streamed.tensors) == repr(whole.tensors)  # repr: NaN equals NaN
    for tensor in streamed.tensors:
        status, max_abs, rel_l2, fraction = plain_diff(*cases[tensor.name], atol, rtol)
        assert (tensor.status, tensor.max_abs, tensor.changed_fraction) == (status, max_abs, fraction), tensor.name
        assert tensor.rel_l2 == (None if rel_l2 is None else pytest.approx(rel_l2, rel=1e-12, nan_ok=True)), tensor.name
        assert tensor.nbytes == cases[tensor.name][1].nbytes


def test_a_streamed_diff_holds_small_buffers_only(tmp_path, monkeypatch):
    prefix = tf_bundle.write(tmp_path / "a", big_values())
    other = tf_bundle.write(tmp_path / "b", big_values(seed=1))
    sizes = []
    real_pieces = tf_bundle.BundleReader.pieces

    def pieces(self, name, buffers):
        sizes.extend(len(buffer) for buffer in buffers)
        return real_pieces(self, name, buffers)

    monkeypatch.setattr(tf_bundle.BundleReader, "pieces", pieces)
    monkeypatch.setattr(tf_bundle.BundleReader, "read", lambda *args: pytest.fail("read whole"))
    report = diff(prefix, other, progress=False)
    assert report.counts() == {"equal": 2, "changed": 1}
    assert set(sizes) == {diff_module._PIECE_BYTES} and len(sizes) == 2 * 3 * diff_module._BUFFERS


def test_read_many_reads_one_tensor_ahead_in_the_process_and_gives_it_back(tmp_path):
    from subsetsaver.formats.tf.bundle import reader as reader_module

    values = {f"t{index}": np.full(1000, index, np.float32) for index in range(5)}
    first = tf_bundle.write(tmp_path / "a", values)
    second = tf_bundle.write(tmp_path / "b", values)
    with tf_bundle.BundleReader(first) as a, tf_bundle.BundleReader(second) as b:
        pairs = zip(a.read_many(sorted(values)), b.read_many(sorted(values)))  # side by side, as average reads
        assert [(x[0], y[0], x[1][0], y[1][0]) for x, y in pairs] == \
               [(name, name, index, index) for index, name in enumerate(sorted(values))]
        stopped = a.read_many(sorted(values))
        next(stopped)
        stopped.close()  # left early: what it read ahead is given back
    assert reader_module._reading_ahead.acquire(blocking=False)
    reader_module._reading_ahead.release()
    damaged = tf_bundle.write(tmp_path / "c", big_values())
    damage(damaged, "big/w", 5)
    with tf_bundle.BundleReader(damaged) as reader:
        read = reader.read_many(["small/b", "big/w", "step"])
        assert next(read)[0] == "small/b"
        with pytest.raises(CorruptCheckpointError, match="big/w"):  # the read ahead's error, in its turn
            next(read)
    assert reader_module._reading_ahead.acquire(blocking=False)
    reader_module._reading_ahead.release()


class _WatchedReadAhead:
    """``_read_ahead_of`` over items ``0, 1, ...`` of ``sizes``: which the read-ahead has pulled so far, and the
    caller's takes, each on a thread of its own, so a read-ahead that waits for ever fails a test, not hangs it."""

    def __init__(self, sizes, **caps):
        from subsetsaver.formats.tf.bundle import reader as reader_module

        self.pulled = []
        self.read = reader_module._read_ahead_of(self._items(len(sizes)), sizes, **caps)

    def _items(self, count):
        for number in range(count):
            self.pulled.append(number)
            yield number

    def settled(self, count):
        """What was pulled once ``count`` items are, and a moment more to pull further, were it allowed to."""
        deadline = time.monotonic() + 10
        while len(self.pulled) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        return list(self.pulled)

    def take(self, count):
        got = []
        taker = threading.Thread(target=lambda: got.extend(itertools.islice(self.read, count)), daemon=True)
        taker.start()
        taker.join(10)
        return got


def test_read_many_reads_ahead_as_many_tensors_as_the_largest_holds_and_no_more():
    from subsetsaver.formats.tf.bundle import reader as reader_module

    watched = _WatchedReadAhead([4, 1, 1, 1, 1, 4, 1])  # the largest holds 4: the four small ones fit beside the first
    assert watched.take(1) == [0]
    assert watched.settled(5) == [0, 1, 2, 3, 4]  # 1 + 1 + 1 + 1 ahead; the next 4 waits
    assert watched.take(3) == [1, 2, 3]
    assert watched.settled(5) == [0, 1, 2, 3, 4]  # one of 1 still ahead: 1 + 4 is over 4
    assert watched.take(1) == [4]
    assert watched.settled(6) == [0, 1, 2, 3, 4, 5]  # nothing ahead: the 4 is read
    assert watched.take(3) == [5, 6]
    assert reader_module._reading_ahead.acquire(blocking=False)
    reader_module._reading_ahead.release()


def test_a_local_file_is_read_one_tensor_ahead_and_a_bucket_as_far_as_its_cap(tmp_path, monkeypatch):
    import fsspec

    from subsetsaver.formats.tf.bundle import reader as reader_module

    values = {name: np.full(1000, index, np.float32) for index, name in enumerate("abc")}
    prefix = tf_bundle.write(tmp_path / "model", values)
    bucket = fsspec.filesystem("memory")
    for name in os.listdir(tmp_path):
        bucket.put_file(str(tmp_path / name), f"memory://ahead/{name}")
    real, asked = reader_module._read_ahead_of, []

    def read_ahead_of(items, sizes, most):
        asked.append(most)
        return real(items, sizes, most)

    monkeypatch.setattr(reader_module, "_read_ahead_of", read_ahead_of)
    for where in (prefix, "memory://ahead/model"):
        with tf_bundle.BundleReader(where) as reader:
            assert [value[0] for _, value in reader.read_many("abc")] == [0, 1, 2]
    assert asked == [0, reader_module.READ_AHEAD_BYTES]


def test_a_bucket_read_of_many_mid_size_tensors_makes_their_memory_once(tmp_path, monkeypatch):
    """Tensors of a few MiB, read from a bucket after a large one and let go one after another, are read into
    the memory of those let go before them: new memory only for as many as the read-ahead holds (its cap, not
    the large tensor's size), not a mapping per tensor."""
    import fsspec

    from subsetsaver.formats import memory
    from subsetsaver.formats.tf.bundle import reader as reader_module

    values = {"a_large": np.zeros(10 << 20, np.float32)}  # 40 MiB: the read-ahead may hold that much, up to its cap
    values.update({f"t{index:02d}": np.full(1 << 18, index, np.float32) for index in range(48)})  # 1 MiB each
    tf_bundle.write(tmp_path / "model", values)
    bucket = fsspec.filesystem("memory")
    for name in os.listdir(tmp_path):
        bucket.put_file(str(tmp_path / name), f"memory://mid/{name}")
    memory.free_idle_buffers()
    made = []
    monkeypatch.setattr(memory, "_mapping", lambda count, original=memory._mapping: made.append(count)
                        or original(count))
    with tf_bundle.BundleReader("memory://mid/model") as reader:
        for name, value in reader.read_many(list(values)):
            assert value.tobytes() == values[name].tobytes(), name
            del value
            time.sleep(0.01)  # a slow caller: the read-ahead fills what it may hold
    small = [count for count in made if count == 1 << 20]
    assert reader_module.READ_AHEAD_BYTES < values["a_large"].nbytes  # the cap, not the large tensor, bounds it
    assert 0 < len(small) <= reader_module.READ_AHEAD_BYTES // (1 << 20) + 2, len(small)
    memory.free_idle_buffers()


def test_read_ahead_stops_at_its_byte_cap_and_still_reads_one_larger_tensor():
    watched = _WatchedReadAhead([4, 1, 1, 1, 4, 1], most=2)  # ahead: two of 1, not three; a 4 once nothing is ahead
    assert watched.take(1) == [0]  # the 4, over the cap, read with nothing ahead
    assert watched.settled(3) == [0, 1, 2]  # 1 + 1 ahead: the cap
    assert watched.take(2) == [1, 2]
    assert watched.settled(4) == [0, 1, 2, 3]  # the last 1: the 4 after it is over the cap beside it
    assert watched.take(1) == [3]
    assert watched.settled(5) == [0, 1, 2, 3, 4]  # nothing ahead: the 4 is read although it is over the cap
    assert watched.take(3) == [4, 5]


def test_a_read_ahead_its_caller_never_closed_does_not_keep_the_process_from_exiting():
    """The read-ahead thread has the next tensor and waits for the caller, who keeps the stream and exits."""
    import subprocess
    import sys

    code = ("import itertools\nfrom subsetsaver.formats.tf.bundle import reader\n"
            "kept = reader._read_ahead_of(itertools.count(), [1] * 10)\nprint(next(kept))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "0\n", "")


def test_equal_bytes_in_another_byte_order_are_measured_as_values():
    little = np.array([1.0, 2.0, 3.0], dtype="<f4")
    same_bytes_other_order = np.frombuffer(little.tobytes(), dtype=">f4")
    assert diff_module._measure(little, same_bytes_other_order, 0, 0)[0] == "changed"
    assert diff_module._measure(little, little.astype(">f4"), 0, 0) == ("equal", 0.0, 0.0, 0.0)


def test_crc32c_reads_a_buffer_in_place_a_piece_at_a_time_through_the_public_extend(monkeypatch):
    data = np.random.default_rng(1).integers(0, 256, (5 << 20) + 1, dtype=np.uint8)
    expected = google_crc32c.value(data.tobytes())
    real, given = google_crc32c.extend, []

    def extend(crc, chunk):
        given.append((type(chunk).__name__, len(chunk), isinstance(chunk, np.ndarray) and np.shares_memory(chunk, data)))
        return real(crc, chunk)

    monkeypatch.setattr(google_crc32c, "extend", extend)
    assert checksums.crc32c(data) == expected
    # The C build takes numpy's buffer as it is: a release that stops would show here as each piece copied too.
    assert given == [("ndarray", checksums.PIECE_BYTES, True)] * 5 + [("ndarray", 1, True)]
    assert checksums.crc32c(data[:0]) == 0 and checksums.crc32c(b"") == 0


def test_crc32c_gives_a_build_that_takes_only_bytes_the_bytes(monkeypatch):
    data = np.random.default_rng(2).integers(0, 256, (2 << 20) + 3, dtype=np.uint8)
    real = google_crc32c.extend

    def bytes_only(crc, chunk):
        if not isinstance(chunk, bytes):
            raise TypeError(f"argument 2 must be read-only bytes-like object, not {type(chunk).__name__}")
        return real(crc, chunk)

    monkeypatch.setattr(google_crc32c, "extend", bytes_only)
    expected = google_crc32c.value(data.tobytes())
    assert checksums.crc32c(data) == expected and checksums.crc32c(bytearray(data.tobytes())) == expected


PIECE_STEP = 1 << 16  # bytes a buffer holds in the tests below: the BIG float32 elements are 192 pieces and a bit


def _watched_reads(monkeypatch, reader, on_read):
    """Make every ``read_into`` of ``reader``'s data file call ``on_read(piece number, where)`` (``where``:
    'start' or 'end', on the thread that reads) around the real read."""
    data_file = reader._data_file(reader._index.tensors["big/w"].stored)
    real = data_file.read_into
    offset = reader._index.tensors["big/w"].stored.offset

    def read_into(at, buffer):
        number = (at - offset) // PIECE_STEP
        on_read(number, "start")
        real(at, buffer)
        on_read(number, "end")

    monkeypatch.setattr(data_file, "read_into", read_into)


def test_pieces_are_read_one_ahead_on_the_checksum_thread_and_each_stays_until_the_second_after_it(
        tmp_path, monkeypatch):
    values = big_values()
    prefix = tf_bundle.write(tmp_path / "model", values)
    read, threads = {}, set()

    def on_read(number, where):
        threads.add(threading.current_thread().name)
        if where == "end":
            read.setdefault(number, threading.Event()).set()

    with tf_bundle.BundleReader(prefix) as reader:
        _watched_reads(monkeypatch, reader, on_read)
        buffers = [np.empty(PIECE_STEP, dtype=np.uint8) for _ in range(3)]
        taken, before = [], None
        for number, piece in enumerate(reader.pieces("big/w", buffers)):
            if before is not None:  # the piece before this one is as it was read
                assert np.array_equal(before[0], before[1]), number - 1
            if (number + 1) * PIECE_STEP < BIG * 4:  # the next piece is read while the caller holds this one
                assert read.setdefault(number + 1, threading.Event()).wait(10), f"piece {number + 1} not read ahead"
            before = (piece, piece.copy())
            taken.append(piece.copy())
    assert np.array_equal(np.concatenate(taken), values["big/w"])
    assert threads == {"subsetsaver-crc32c_0"}


def test_pieces_need_three_buffers(tmp_path):
    prefix = tf_bundle.write(tmp_path / "model", big_values())
    with tf_bundle.BundleReader(prefix) as reader:
        with pytest.raises(ValueError) as error:
            next(reader.pieces("big/w", [np.empty(PIECE_STEP, dtype=np.uint8) for _ in range(2)]))
    assert str(error.value) == "pieces needs three buffers or more (one taken, one checksummed, one read), not 2"


def test_pieces_left_early_leave_no_read_still_filling_a_buffer(tmp_path, monkeypatch):
    prefix = tf_bundle.write(tmp_path / "model", big_values())
    with tf_bundle.BundleReader(prefix) as reader:
        _watched_reads(monkeypatch, reader, lambda number, where: time.sleep(0.3) if where == "start" and number else None)
        buffers = [np.zeros(PIECE_STEP, dtype=np.uint8) for _ in range(3)]
        stream = reader.pieces("big/w", buffers)
        next(stream)  # piece 1 is being read, slowly
        stream.close()
        left = [buffer.copy() for buffer in buffers]
        time.sleep(0.6)
        assert all(np.array_equal(buffer, copy) for buffer, copy in zip(buffers, left))


def test_a_data_file_cut_short_while_pieces_are_read_ahead_is_refused(tmp_path):
    prefix = tf_bundle.write(tmp_path / "model", big_values())
    with tf_bundle.BundleReader(prefix) as reader:
        stored = reader._index.tensors["big/w"].stored
        os.truncate(tf_bundle.data_path(prefix, 0, 1), stored.offset + 5 * PIECE_STEP + 3)
        taken = []
        with pytest.raises(CorruptCheckpointError) as error:
            for piece in reader.pieces("big/w", [np.empty(PIECE_STEP, dtype=np.uint8) for _ in range(3)]):
                taken.append(piece.nbytes)
    assert taken == [PIECE_STEP] * 5
    assert str(error.value) == (
        f"'{tf_bundle.data_path(prefix, 0, 1)}' ended while reading it: it changed or was truncated since the "
        "checkpoint was opened; restore from an intact copy of the checkpoint")
