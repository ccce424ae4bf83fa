"""Large local transfers past the page cache (``O_DIRECT``), where the page cache would cost more.

On a virtual machine that hands freed memory back to its host, a page of the page cache costs
a few microseconds the first time it is touched: writing 1 GB durably through the page cache
ran at 0.24-0.30 GB/s here (``dd ... conv=fdatasync`` too), while the disk took the same bytes
at 1.4 GB/s written with ``O_DIRECT`` and gave them back at 1.0-1.7 GB/s. So:

- :class:`StagedWrites` appends a file's bytes through aligned staging buffers written with
  ``O_DIRECT`` (one stage written by a background thread while the next is filled); the last
  partial block goes through the ordinary descriptor, and the caller's fsync makes it all durable.
  Inside :func:`reporting_landed`, each stage is read back from the disk as soon as it is written,
  on a thread of its own, and a listener hears of the bytes the disk gave back: a writer's check of
  what it wrote then goes on while later bytes still arrive, not after the last one.
- :class:`DirectReads` reads large ranges of a file that this process wrote so with ``O_DIRECT``
  through aligned buffers, while the writer reads it back (:func:`reading_back`): the page cache
  does not hold it, and the checkpoint is verified from the disk itself, not from memory. A range
  is read in spans of 2 MiB, up to four at once: the virtual disk here read a freshly written
  checkpoint back about 10% faster so (slim's read-back of 0.67 GB: 1.79 s against 1.65 s whole,
  alternating). Every other read goes through the page cache, which may well hold the file by then.

Where the system or the file system refuses ``O_DIRECT`` (some FUSE mounts, macOS), both step
aside and everything goes through the page cache as before.

Example::

    staged = StagedWrites.open(path, descriptor)      # None where O_DIRECT is refused
    staged.write(memoryview(array)); staged.finish()  # then fsync(descriptor)
    with reading_back():
        if read_past_the_cache(descriptor):
            done = DirectReads(path).read(view, offset)   # bytes filled; the caller reads the rest
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import contextvars
import errno
import os
import threading

from .. import workers

BLOCK = 4096  # offsets, lengths and memory of O_DIRECT transfers are multiples of this
STAGE_BYTES = 4 << 20  # bytes written past the page cache at a time (two stages a file being written)
SPAN_BYTES = 2 << 20  # bytes of a large read past the page cache that one request reads
BOUNCE_BYTES = SPAN_BYTES + BLOCK  # what one request reads into: a span at any offset
READS_IN_FLIGHT = 4  # requests past the page cache at once, shared by every reader
DIRECT_FROM = 1 << 20  # reads smaller than this always go through the page cache
_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP))
_IDLE_KEPT = {STAGE_BYTES: 4, BOUNCE_BYTES: READS_IN_FLIGHT}  # buffers let go of and kept, their pages already touched


def _open_direct(path, flags):
    """A descriptor of ``path`` opened with ``O_DIRECT``, or None where it is refused."""
    if not hasattr(os, "O_DIRECT"):
        return None
    try:
        return os.open(path, flags | os.O_DIRECT)
    except OSError as error:
        if error.errno in _REFUSED:
            return None
        raise


_idle = {size: [] for size in _IDLE_KEPT}
_lock = threading.Lock()  # guards the idle buffers, the files written and the read-backs under way


def _buffer(size):
    """A page-aligned uint8 buffer of ``size`` (a key of _IDLE_KEPT), an idle one if there is one."""
    import mmap

    import numpy as np

    with _lock:
        if _idle[size]:
            return _idle[size].pop()
    return np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8)


def _let_go(buffer):
    with _lock:
        idle = _idle[len(buffer)]
        if len(idle) < _IDLE_KEPT[len(buffer)]:
            idle.append(buffer)


def _writing_thread():
    """The one thread that writes full stages while the caller fills the next."""
    return workers.shared_pool("subsetsaver-direct", 1)


def _landing_thread():
    """The one thread that reads back written stages, in the order they were written."""
    return workers.shared_pool("subsetsaver-read-back", 1)


def _reading_threads():
    """The threads that read spans past the page cache while the caller waits for them."""
    return workers.shared_pool("subsetsaver-direct-read", READS_IN_FLIGHT)


def _write_all(direct, buffered, data, offset):
    """Write ``data`` at ``offset`` through ``direct``; through ``buffered`` if the file system turns
    the direct write down (it accepted the flag on opening but not the transfer)."""
    view, descriptor = memoryview(data).cast("B"), direct
    while len(view):
        try:
            written = os.pwrite(descriptor, view, offset)
        except OSError as error:
            if descriptor == buffered or error.errno not in _REFUSED:
                raise
            descriptor = buffered
            continue
        view, offset = view[written:], offset + written


class StagedWrites:
    """The bytes of a new file, appended in order, written with ``O_DIRECT`` in stages of
    :data:`STAGE_BYTES`; :meth:`finish` writes the rest (the tail through ``buffered``). The caller
    fsyncs ``buffered`` afterwards, which makes the file durable (data, size and the disk's cache).
    With a ``listener`` (see :func:`reporting_landed`), every stage is read back from the disk once
    written, past the page cache through ``reader``, and handed to it; ``name`` is what it is told."""

    def __init__(self, direct, buffered, name=None, listener=None, reader=None):
        self._direct, self._buffered = direct, buffered
        self._name, self._listener, self._reader = name, listener, reader
        self._landing = None  # the last read-back asked for; read-backs run one at a time, in order
        self._lost = False  # a read-back failed: the listener is told the file was not read back
        self._stages, self._pending = [_buffer(STAGE_BYTES), _buffer(STAGE_BYTES)], [None, None]
        self._current = self._filled = 0  # the stage being filled, and its bytes so far
        self.offset = 0  # where that stage's first byte goes in the file

    @classmethod
    def open(cls, path, buffered, name=None):
        """Staged writes to ``path`` (a new, empty file open for writing as ``buffered``), or None
        where ``O_DIRECT`` is refused. ``name``: the path the file will have (what a listener is told)."""
        direct = _open_direct(path, os.O_WRONLY)
        if direct is None:
            return None
        listener = _listener.get()
        reader = _open_direct(path, os.O_RDONLY) if listener is not None else None
        return cls(direct, buffered, name or path, listener if reader is not None else None, reader)

    def write(self, data):
        view = memoryview(data).cast("B")
        if self._listener is not None and len(view):
            self._listener.segment(self._name, self.offset + self._filled, len(view))
        while len(view):
            stage = self._stages[self._current]
            take = min(len(view), STAGE_BYTES - self._filled)
            stage[self._filled:self._filled + take] = view[:take]
            self._filled += take
            view = view[take:]
            if self._filled == STAGE_BYTES:
                self._send()

    def _send(self):
        number = self._current
        self._pending[number] = _writing_thread().submit(self._write_stage, self._stages[number], self.offset)
        self.offset += STAGE_BYTES
        self._current, self._filled = 1 - number, 0
        if self._pending[self._current] is not None:  # the other stage's write is done before it is refilled
            self._pending[self._current].result()
            self._pending[self._current] = None

    def _write_stage(self, stage, offset):
        _write_all(self._direct, self._buffered, stage, offset)
        if self._listener is not None:  # on the writing thread: read-backs are asked for in the file's order
            self._landing = _landing_thread().submit(self._read_back, offset, len(stage))

    def _read_back(self, offset, count):
        """Read ``count`` bytes from ``offset`` back from the disk and hand them to the listener."""
        if self._lost:
            return
        bounce = _buffer(STAGE_BYTES)
        try:
            got = os.preadv(self._reader, [bounce[:-(-count // BLOCK) * BLOCK]], offset)
            if got < count:
                raise OSError(errno.EIO, f"the disk gave back {got} of {count} bytes")
            self._listener.landed(self._name, offset, bounce[:count])
        except Exception:  # noqa: BLE001 - a failed read-back only means the file is read again to be checked
            self._lost = True
        finally:
            _let_go(bounce)

    def finish(self):
        """Write what is staged: whole blocks past the page cache, the tail through it; then let go."""
        try:
            for pending in self._pending:
                if pending is not None:
                    pending.result()
            stage, aligned = self._stages[self._current], self._filled - self._filled % BLOCK
            _write_all(self._direct, self._buffered, stage[:aligned], self.offset)
            _write_all(self._buffered, self._buffered, stage[aligned:self._filled], self.offset + aligned)
            if self._listener is not None:  # a read past the page cache writes the tail's pages out first
                self._landing = _landing_thread().submit(self._read_back, self.offset, self._filled)
                self._landing.result()
                if self._lost:
                    self._listener.abandoned(self._name)
                else:
                    self._listener.finished(self._name, _identity(self._buffered))
            with _lock:
                if self.offset or aligned:  # some of it went past the page cache
                    _written[_identity(self._buffered)] = True
                while len(_written) > _WRITTEN_KEPT:
                    _written.popitem(last=False)
        finally:
            self.abandon()

    def abandon(self):
        """Wait for any write and read-back in flight (their errors no longer matter) and close the descriptors."""
        for pending in self._pending:
            if pending is not None:
                pending.exception()
        self._pending = [None, None]
        self._lost = True  # read-backs still queued return at once
        if self._landing is not None:
            self._landing.exception()
            self._landing = None
        for stage in self._stages:
            _let_go(stage)
        self._stages = []
        for descriptor in ("_direct", "_reader"):
            if getattr(self, descriptor) is not None:
                os.close(getattr(self, descriptor))
                setattr(self, descriptor, None)


_written = collections.OrderedDict()  # identities of files written past the page cache here, newest last
_WRITTEN_KEPT = 64
_listener = contextvars.ContextVar("subsetsaver_landed_listener", default=None)


def _identity(descriptor):
    return _identity_of(os.fstat(descriptor))


def _identity_of(status):
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


def written_identity(path):
    """(device, inode, size, modification time) of the local file ``path``, as :func:`reporting_landed`'s
    ``finished`` gives it; None where there is no such file. Equal while the file is unchanged, renamed too."""
    try:
        return _identity_of(os.stat(path))
    except OSError:
        return None


@contextlib.contextmanager
def reporting_landed(listener):
    """While this is entered, the files this thread writes past the page cache are read back from the disk
    as they are written, and ``listener`` hears of it by the path each file will have:

    - ``segment(path, offset, length)``: a write of ``length`` bytes at ``offset`` (in the writer's thread);
    - ``landed(path, offset, view)``: bytes the disk gave back, in the file's order, on a thread of their
      own; ``view`` is valid only during the call;
    - then ``finished(path, identity)`` once the whole file was read back (``identity``: see
      :func:`written_identity`), or ``abandoned(path)`` where it could not be (the file must be read to be checked).

    Files that do not go past the page cache (where ``O_DIRECT`` is refused) are never reported, and a
    ``listener`` of None hears of nothing and has nothing read back.

    with reporting_landed(checksums): write_the_files()
    """
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


_reading_back = 0  # writers reading back what they wrote, now


@contextlib.contextmanager
def reading_back():
    """While this is entered, a file this process wrote with :class:`StagedWrites` is read past the page
    cache too: a writer's read-back then checks what the disk holds. Other reads go through the page
    cache, which may hold the file by then (another process read it).

    with reading_back(): verify(staged)
    """
    global _reading_back
    with _lock:
        _reading_back += 1
    try:
        yield
    finally:
        with _lock:
            _reading_back -= 1


def read_past_the_cache(descriptor) -> bool:
    """Whether the file open as ``descriptor`` is to be read with :class:`DirectReads`: a writer is
    reading back (:func:`reading_back`) and this process wrote it past the page cache, and it is as
    it was written (same size and time)."""
    with _lock:
        return _reading_back > 0 and _identity(descriptor) in _written


class DirectReads:
    """Large reads of the local file at ``path`` straight from the disk, through aligned buffers, several
    in flight: a virtual disk serves a queue of requests faster than one after another."""

    def __init__(self, path):
        self.path = path
        self._direct = None
        self._opening = threading.Lock()

    def read(self, view, offset) -> int:
        """Fill ``view`` (bytes from ``offset``) as far as the file goes; the bytes filled (0 where the
        file cannot be opened so). The caller reads what is missing through the page cache and finds
        out there whether the file ended."""
        with self._opening:
            if self._direct is None:
                self._direct = _open_direct(self.path, os.O_RDONLY)
                if self._direct is None:
                    return 0
        spans = [(start, min(SPAN_BYTES, len(view) - start)) for start in range(0, len(view), SPAN_BYTES)]
        if len(spans) == 1:
            return self._read_span(view, offset, *spans[0])
        futures = [_reading_threads().submit(self._read_span, view, offset, start, count) for start, count in spans]
        concurrent.futures.wait(futures)  # every span done before view is handed back, after an error too
        done = 0
        for (start, _count), future in zip(spans, futures):
            got = future.result()
            if done == start:
                done += got
        return done

    def _read_span(self, view, offset, start, count) -> int:
        """Fill ``view[start:start + count]`` from the file at ``offset + start`` through a bounce buffer;
        the bytes filled (fewer at the end of the file; 0 where the transfer is refused)."""
        at = offset + start
        skip = at % BLOCK
        length = -(-(skip + count) // BLOCK) * BLOCK
        bounce = _buffer(BOUNCE_BYTES)
        try:
            try:
                got = os.preadv(self._direct, [bounce[:length]], at - skip)
            except OSError as error:
                if error.errno not in _REFUSED:
                    raise
                return 0
            take = min(max(got - skip, 0), count)
            view[start:start + take] = bounce[skip:skip + take]
            return take
        finally:
            _let_go(bounce)

    def close(self):
        if self._direct is not None:
            os.close(self._direct)
            self._direct = None
