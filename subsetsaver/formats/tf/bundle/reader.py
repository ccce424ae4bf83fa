"""Reading a TensorFlow checkpoint (a tensor bundle) without TensorFlow: everything checked first.

Opening a :class:`BundleReader` reads the ``.index`` whole, checks its table (checksums,
key order), header and every entry (see :mod:`.index`), and each tensor's bytes against
the size of its data file, before any value is read. :meth:`BundleReader.read` then
reads one tensor's bytes and nothing else (``os.preadv`` into the array it returns, in
pieces each checksummed on a background thread while the next is read; a large array's
memory is reused for a later tensor once every view of it is dropped), checks them
against their checksum, and returns them as TensorFlow's
``tf.train.load_checkpoint(prefix).get_tensor(name)`` does: numpy arrays of the true
dtype (ml_dtypes' bfloat16, float8 and int4 types), strings as an object array of
``bytes``, a partitioned variable assembled from its parts.

String tensors are stored as the varint64 length of every element, the masked CRC32C
of those lengths (each as a little-endian uint32, a uint64 above 4 GiB), then the
bytes; the entry's checksum covers the lengths as hashed, the length checksum and the
bytes. Variant tensors (serialized C++ objects) are listed but cannot be read here.

Example::

    with BundleReader('/ckpt/model-9000') as reader:
        reader.names, reader.spec('conv_1/w').shape, reader.read('conv_1/w').dtype
    # (('conv_1/b', 'conv_1/w'), (5, 5, 1, 32), dtype('float32'))
"""

from __future__ import annotations

import collections
import functools
import math
import os
import threading

import numpy as np

from .... import storage, workers
from ....errors import CheckpointMismatchError, CheckpointNotFoundError, UnsupportedDtypeError, clipped
from ...memory import reused_bytes
from ...wire.crc32c import RunningCrc, crc32c, unmasked
from . import dtypes as dtype_table
from .index import BundleIndex, check_data_files, data_path, index_path, parse_index
from .problems import TAMPERED, corrupt
from .table import read_table

_LARGEST_UINT32 = 0xFFFFFFFF
_NUMPY_MAX_DIMENSIONS = 64  # TensorFlow allows 254
PIECE_BYTES = 4 << 20  # a local tensor is read and checksummed this many bytes at a time


@functools.lru_cache(maxsize=4)
def _parsed_index(prefix, data) -> BundleIndex:
    """The checked index of ``prefix`` whose ``.index`` holds ``data``. One command opens a checkpoint
    several times (its format told, its contents listed, its tensors read): the same bytes are parsed once."""
    def fail(problem, cause=TAMPERED):
        return corrupt(prefix, f"'{index_path(prefix)}'", problem, cause=cause)

    return parse_index(prefix, read_table(data, fail))


_reading_ahead = threading.BoundedSemaphore(1)  # one reader reads ahead at a time: readers side by side share it
READ_AHEAD_BYTES = 8 << 20
"""The most bytes a bucket's reader reads ahead of the caller's tensor (fewer where the largest tensor of the read
holds fewer), past one tensor: while a large tensor is transformed and written, the ones after it keep arriving.
More costs more than it saves: every tensor held ahead is memory the system clears first. A bucket's T5 conversion
here took 80,000 page faults reading 64 MiB ahead, 59,000 and 0.09 s less CPU time at 16 MiB (10 runs each), and
0.05 s less again at 8 MiB (56,000; 12 runs, 10 of them faster); 4 MiB was slower than 8 (2 of 12 faster). A
local file is read one tensor ahead: it comes at the disk's pace, and a conversion then peaks within its largest
tensor and about 120 MB (``bench/bench_layouts.py``)."""

_END = object()


class _Failed:
    """An error the read-ahead met, raised when its turn comes."""

    def __init__(self, error):
        self.error = error


def _read_ahead_of(items, sizes, most=READ_AHEAD_BYTES):
    """Yield what the iterator ``items`` yields (each item's bytes in ``sizes``, in order), read on the
    read-ahead thread while the caller has earlier ones: one item whatever its size, and more while the items
    ahead hold no more bytes than the largest item, nor than ``most``. With the caller's own, two of the
    largest at most. While another reader in the process reads ahead, this one reads on the
    caller's thread. An error comes in its turn; leaving early stops the thread and gives the slot back.
    The thread is a daemon: a read its caller never closed does not keep the process from exiting.

    >>> list(_read_ahead_of(iter('abc'), [1, 1, 1]))
    ['a', 'b', 'c']
    """
    iterator, sizes = iter(items), list(sizes)
    if not _reading_ahead.acquire(blocking=False):
        yield from iterator
        return
    budget = min(max(sizes, default=0), most)
    taken = threading.Condition()
    read, held, stopped = collections.deque(), [0], [False]

    def read_ahead():  # on the read-ahead thread, until the iterator ends or fails
        remaining = iter(sizes)
        while True:
            size = next(remaining, 0)
            with taken:
                taken.wait_for(lambda size=size: stopped[0] or not held[0] or held[0] + size <= budget)
                if stopped[0]:
                    return
            try:
                item = next(iterator, _END)
            except BaseException as error:  # noqa: BLE001 - handed to the caller, in its turn
                item = _Failed(error)
            with taken:
                read.append((item, size))
                held[0] += size
                taken.notify_all()
            if item is _END or isinstance(item, _Failed):
                return

    reading = None
    try:
        reading = workers.detached(read_ahead, "subsetsaver-read")  # a daemon: an unclosed read never blocks exit
        while True:
            with taken:
                taken.wait_for(lambda: read)
                item, size = read.popleft()
                held[0] -= size  # the caller's now
                taken.notify_all()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
            del item  # the caller's alone
    finally:
        with taken:
            stopped[0] = True
            taken.notify_all()
        if reading is not None:
            reading.join()  # the file stays open until the read ahead is done with it
        _reading_ahead.release()
        if hasattr(iterator, "close"):
            iterator.close()  # its requests still in flight are cancelled now, not when it is collected


def _plain(tensor):
    """The one stored run of ``tensor`` (an index entry) where it holds fixed-width elements, else None (a
    partitioned or string tensor)."""
    stored = tensor.stored
    if stored is None or not stored.data_type.fixed_width or stored.data_type is dtype_table.STRING:
        return None
    return stored


class BundleReader:
    """The tensors of the checkpoint at ``prefix`` (the path without ``.index``), validated on opening.

    Any problem of the files raises :class:`~subsetsaver.errors.CorruptCheckpointError` naming the
    file or tensor; a missing ``.index``, or data file holding a tensor, raises
    :class:`~subsetsaver.errors.CheckpointNotFoundError` (with ``require_data_files=False`` a missing
    data file is an error only when one of its tensors is read). Use it as a context manager,
    or call :meth:`close`.
    """

    def __init__(self, prefix, *, require_data_files=True):
        self.prefix = os.fspath(prefix)
        path = index_path(self.prefix)
        try:
            data = storage.read_bytes(path)
        except (FileNotFoundError, NotADirectoryError):
            raise CheckpointNotFoundError(f"no checkpoint at '{self.prefix}' (expected '{path}')") from None

        self._index = _parsed_index(self.prefix, data)
        self.num_shards = self._index.num_shards
        self.version = self._index.version
        paths = {shard: self._data_path(shard) for shard in sorted({stored.shard for stored in self._index.stored()})}
        found = storage.sizes(paths.values())  # in a bucket: asked together
        sizes = {shard: found[path] for shard, path in paths.items()}
        check_data_files(self._index, sizes, require_all=require_data_files)
        self.names = tuple(self._index.tensors)
        self.specs = {name: tensor.spec for name, tensor in self._index.tensors.items()}
        self._files = {}
        self._opening = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def __repr__(self):
        return f"BundleReader({self.prefix!r}: {len(self.names)} tensors)"

    def close(self) -> None:
        """Close the data files opened so far."""
        files, self._files = self._files, {}
        for handle in files.values():
            handle.close()

    def data_shards(self) -> list:
        """The shard numbers whose data files hold a tensor, sorted."""
        return sorted({stored.shard for stored in self._index.stored()})

    def spec(self, name):
        """The :class:`TensorSpec` of tensor ``name``; KeyError if the checkpoint has no such tensor."""
        return self.specs[self._known(name)]

    def read(self, name) -> np.ndarray:
        """The value of tensor ``name``, its checksum verified (a partitioned one assembled from its parts)."""
        tensor = self._index.tensors[self._known(name)]
        if len(tensor.spec.shape) > _NUMPY_MAX_DIMENSIONS:
            raise UnsupportedDtypeError(f"cannot read tensor '{clipped(name)}' of checkpoint '{self.prefix}': it has "
                                        f"{len(tensor.spec.shape)} dimensions, more than numpy's "
                                        f"{_NUMPY_MAX_DIMENSIONS}")
        if tensor.stored is not None:
            return self._read_stored(tensor.stored)
        held = sum(math.prod(stop - start for start, stop in region) for region, _ in tensor.parts)
        if held != math.prod(tensor.spec.shape):
            raise CheckpointMismatchError(
                f"tensor '{clipped(name)}' of checkpoint '{self.prefix}' is stored only in part ({held} of "
                f"{math.prod(tensor.spec.shape)} elements), as TensorFlow stores some optimizer slots of partitioned "
                "variables; it has no whole value: leave it out of the selection, or restore it into its graph")
        value = np.empty(tensor.spec.shape, dtype=dtype_table.numpy_dtype(tensor.data_type))
        covered = None if tensor.disjoint else np.zeros(tensor.spec.shape, dtype=bool)
        for region, stored in tensor.parts:  # together the regions hold as many elements as the tensor
            where = tuple(slice(start, stop) for start, stop in region)
            if covered is not None:  # not told on opening: are the parts disjoint, so covering it all?
                if covered[where].any():
                    raise corrupt(self.prefix, stored.subject, "overlaps another part of its tensor")
                covered[where] = True
            value[where] = self._read_stored(stored)
        return value

    def parts(self, name) -> tuple:
        """The regions (``((start, stop), ...)`` per dimension) of the parts tensor ``name`` is stored in,
        in key order; empty for a tensor stored whole, or whose parts were too many to be told apart
        on opening (read it whole: :meth:`read` checks them).

        reader.parts('body/emb')[:2]
        # (((0, 1920), (0, 64)), ((1920, 3840), (0, 64)))
        """
        tensor = self._index.tensors[self._known(name)]
        return tuple(region for region, _ in tensor.parts) if tensor.disjoint else ()

    def read_part(self, name, region) -> np.ndarray:
        """The value of the part of tensor ``name`` stored at ``region`` (one of :meth:`parts`), its
        checksum verified: what a partitioned tensor is read by without assembling it.

        reader.read_part('body/emb', reader.parts('body/emb')[0]).shape
        # (1920, 64)
        """
        tensor = self._index.tensors[self._known(name)]
        for stored_region, stored in tensor.parts:
            if stored_region == tuple(region):
                return self._read_stored(stored)
        raise KeyError(f"tensor '{clipped(name)}' of checkpoint '{self.prefix}' has no part at {region}")

    def stored_bytes(self) -> dict:
        """Name -> ``(data file, offset, size, CRC32C)`` of each tensor stored whole as fixed-width bytes (not a
        partitioned or string one), from the index alone.

        reader.stored_bytes()['dense/b']
        # ('/ckpt/model.data-00000-of-00001', 0, 40, 3563264011)
        """
        found = {}
        for name, tensor in self._index.tensors.items():
            stored = _plain(tensor)
            if stored is not None:
                found[name] = (self._data_path(stored.shard), stored.offset, stored.size, unmasked(stored.crc32c))
        return found

    def read_many(self, names):
        """Yield ``(name, value)`` for each of ``names``, in order, each verified as :meth:`read` verifies it.

        Where the data file is fetched in ranges (a bucket), the plain tensors that follow each other in
        ``names`` are requested together: neighbours in one request, several requests in flight. The next
        tensors are read (fetched, checksummed) on a background thread while the caller has this one: from a
        bucket, as many as the largest tensor's bytes hold, up to :data:`READ_AHEAD_BYTES`; from a local file,
        one. One reader in the process reads ahead, others read in turn.

        dict(reader.read_many(['dense/b', 'dense/w']))['dense/b'].shape
        # (10,)
        """
        names = list(names)
        sizes = [self.specs[name].nbytes if name in self.specs else 0 for name in names]  # unknown: fails in turn
        ahead = 0 if storage.is_local(self.prefix) else READ_AHEAD_BYTES
        return _read_ahead_of(self._read_in_order(names), sizes, ahead)

    def _read_in_order(self, names):
        at = 0
        while at < len(names):
            run = self._ranged_run(names, at)
            if run:
                yield from self._read_run(run)
                at += len(run)
            else:
                yield names[at], self.read(names[at])
                at += 1

    def _read_run(self, run):
        """Yield ``(name, value)`` of a run of :meth:`_ranged_run`, fetched with several requests in flight."""
        dtypes = [dtype_table.numpy_dtype(stored.data_type) for _, stored in run]
        ranges = [(stored.offset, stored.count * dtype.itemsize) for (_, stored), dtype in zip(run, dtypes)]
        into = [functools.partial(reused_bytes, length) for _, length in ranges]  # made as its bytes arrive
        fetched = self._data_file(run[0][1]).read_ranges(ranges, into=into)
        for (name, stored), dtype, filled in zip(run, dtypes, fetched):  # filled when its turn comes
            value = np.frombuffer(filled, dtype=dtype)
            del filled
            yield name, self._checked(stored, value)
            del value  # before the next tensor is waited for: only the caller may still hold this one

    def streamable(self, name) -> bool:
        """Whether :meth:`pieces` streams tensor ``name``: one stored run of fixed-width elements (not a
        partitioned or string tensor) in a data file read locally."""
        tensor = self._index.tensors[self._known(name)]
        stored = _plain(tensor)
        return (stored is not None and len(tensor.spec.shape) <= _NUMPY_MAX_DIMENSIONS
                and not hasattr(self._data_file(stored), "read_ranges"))

    def pieces(self, name, buffers):
        """Yield the elements of tensor ``name`` (see :meth:`streamable`) in order, flat, in pieces, each
        read into the next of ``buffers`` (at least three uint8 arrays of one size, a multiple of 16, used in
        turn) on a background thread, ``len(buffers) - 2`` pieces ahead of the caller, and checksummed there
        after it is read. A piece stays as read until the second piece after it is taken. Once the last
        piece is taken, CorruptCheckpointError unless the checksum is right: nothing learnt from the pieces
        may be used before then.

        total = sum(p.sum() for p in reader.pieces('dense/w', [np.empty(PIECE_BYTES, np.uint8) for _ in range(3)]))
        """
        if len(buffers) < 3:
            raise ValueError(f"pieces needs three buffers or more (one taken, one checksummed, one read), not {len(buffers)}")
        stored = self._index.tensors[self._known(name)].stored
        data_file, running = self._data_file(stored), RunningCrc()
        dtype = dtype_table.numpy_dtype(stored.data_type)
        step = len(buffers[0])
        count, ahead = -(-stored.size // step), len(buffers) - 2

        def ask(number):  # its buffer's last piece is checksummed first: the one thread keeps the order
            piece = buffers[number % len(buffers)][:min(step, stored.size - number * step)]
            return piece, running.read_and_feed(functools.partial(data_file.read_into, stored.offset + number * step, piece), piece)

        data_file.will_need(stored.offset, stored.size)
        asked = collections.deque(ask(number) for number in range(min(ahead, count)))
        try:
            for number in range(count):
                if number + ahead < count:  # into the buffer of the piece two before this one, let go by now
                    asked.append(ask(number + ahead))
                piece, reading = asked.popleft()
                reading.result()
                if stored.data_type.name == "bool" and piece.max() > 1:
                    raise self._corrupt(stored, "holds a bool byte other than 0 and 1")
                yield piece.view(dtype)
            self._check_sum(stored, running.value())
        finally:  # nothing still fills a buffer the caller gets back
            running.value()

    # -----------------------------------------------------------------------------

    def _ranged_run(self, names, at):
        """``(name, stored)`` of the plain fixed-width tensors from ``names[at]`` on that lie in one data
        file read in ranges; empty when ``names[at]`` is not one."""
        run = []
        for name in names[at:]:
            tensor = self._index.tensors[self._known(name)]
            stored = _plain(tensor)
            if (stored is None or len(tensor.spec.shape) > _NUMPY_MAX_DIMENSIONS or (run and stored.shard != run[0][1].shard)
                    or not hasattr(self._data_file(stored), "read_ranges")):
                break
            run.append((name, stored))
        return run

    def _known(self, name):
        if name not in self.specs:
            raise KeyError(f"checkpoint '{self.prefix}' holds no tensor '{clipped(name)}'")
        return name

    def _data_path(self, shard):
        return data_path(self.prefix, shard, self.num_shards)

    def _data_file(self, stored):
        with self._opening:  # the read-ahead thread opens files too
            return self._open_data_file(stored)

    def _open_data_file(self, stored):
        if stored.shard not in self._files:
            path = self._data_path(stored.shard)
            try:
                self._files[stored.shard] = storage.open_reader(path)
            except FileNotFoundError:
                raise CheckpointNotFoundError(
                    f"cannot read checkpoint '{self.prefix}': its data file '{path}' is missing ({stored.subject} "
                    "lies in it); copy every file of the checkpoint") from None
        return self._files[stored.shard]

    def _read_stored(self, stored):
        data_type = stored.data_type
        if data_type is dtype_table.STRING:
            return self._read_strings(stored)
        if not data_type.fixed_width:
            raise UnsupportedDtypeError(
                f"cannot read {stored.subject} of checkpoint '{self.prefix}': {data_type.name} tensors hold "
                "serialized C++ objects that only TensorFlow can read")
        raw = reused_bytes(stored.size)
        data_file = self._data_file(stored)
        if hasattr(data_file, "read_ranges") or stored.size < 2 * PIECE_BYTES:  # a bucket: one request
            data_file.read_into(stored.offset, raw)
            return self._checked(stored, raw.view(dtype_table.numpy_dtype(data_type)))
        running = RunningCrc()
        data_file.will_need(stored.offset, stored.size)
        for start in range(0, stored.size, PIECE_BYTES):  # each piece checksummed while the next is read
            piece = raw[start:start + PIECE_BYTES]
            data_file.read_into(stored.offset + start, piece)
            running.feed(piece)
        return self._checked(stored, raw.view(dtype_table.numpy_dtype(data_type)), running.value())

    def _checked(self, stored, value, checksum=None):
        """``value`` (the flat bytes of ``stored``, read) in its shape, once its checksum (``checksum``:
        already computed over those bytes) and bools are right."""
        raw = value.view(np.uint8)
        self._check_sum(stored, crc32c(raw) if checksum is None else checksum)
        if stored.data_type.name == "bool" and raw.size and raw.max() > 1:
            raise self._corrupt(stored, "holds a bool byte other than 0 and 1")
        return value.reshape(stored.shape)

    def _read_strings(self, stored):
        count = stored.count
        if stored.size == 0:  # TensorFlow reads nothing, and checks the checksum of nothing
            self._check_sum(stored, 0)
            return np.empty(stored.shape, dtype=object)
        raw = self._data_file(stored).read_into(stored.offset, np.empty(stored.size, dtype=np.uint8))
        lengths, end = self._string_lengths(stored, raw, count)
        if lengths.size and int(lengths.max()) > _LARGEST_UINT32:  # uint32 lengths hashed as such, for old files
            hashed = b"".join(n.to_bytes(4 if n <= _LARGEST_UINT32 else 8, "little") for n in lengths.tolist())
        else:
            hashed = lengths.astype("<u4").tobytes()
        checksum = crc32c(hashed)
        if end + 4 > stored.size or unmasked(int.from_bytes(raw[end:end + 4].tobytes(), "little")) != checksum:
            raise self._corrupt(stored, "fails the checksum of its string lengths", stored.offset + end)
        text_start, bounds = end + 4, [0]
        for length in lengths.tolist():  # Python integers: no sum of lengths can wrap around
            bounds.append(bounds[-1] + length)
        if text_start + bounds[-1] != stored.size:
            raise self._corrupt(stored, f"has string lengths adding up to {bounds[-1]} bytes, but the "
                                f"checkpoint stores {stored.size - text_start} bytes of strings for it")
        self._check_sum(stored, crc32c(raw[text_start:], crc32c(raw[end:text_start], checksum)))
        text = raw[text_start:].tobytes()
        value = np.empty(count, dtype=object)
        value[:] = [text[bounds[i]:bounds[i + 1]] for i in range(count)]
        return value.reshape(stored.shape)

    def _string_lengths(self, stored, raw, count):
        """The ``count`` varint64 lengths at the start of ``raw`` (uint64), and where they end."""
        if count == 0:
            return np.zeros(0, dtype=np.uint64), 0
        ends = np.flatnonzero(raw[:min(len(raw), 10 * count)] < 0x80)  # the last byte of each varint
        if len(ends) < count:
            raise self._corrupt(stored, f"holds fewer than its {count} string lengths")
        ends = ends[:count]
        starts = np.concatenate([[0], ends[:-1] + 1])
        if int((ends - starts).max()) >= 9:  # a 10-byte varint: 64 bits, more than any file holds
            raise self._corrupt(stored, "has a string length longer than its data file")
        groups = raw[:ends[-1] + 1]
        shifts = 7 * (np.arange(len(groups)) - np.repeat(starts, ends - starts + 1))
        lengths = np.add.reduceat((groups & 0x7F).astype(np.uint64) << shifts.astype(np.uint64), starts)
        return lengths, int(ends[-1]) + 1

    def _check_sum(self, stored, actual):
        if unmasked(stored.crc32c) != actual:
            raise self._corrupt(stored, "fails its checksum")

    def _corrupt(self, stored, problem, at=None):
        path = self._data_path(stored.shard)
        start = stored.offset if at is None else at
        return corrupt(self.prefix, stored.subject, f"{problem} (bytes {start} to {stored.offset + stored.size} "
                       f"of '{path}')")
