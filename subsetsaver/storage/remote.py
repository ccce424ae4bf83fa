"""Checkpoint files in object stores (Cloud Storage, S3, ``memory://``, ...) through fsspec, without TensorFlow.

One ``RemoteStorage`` per protocol answers the file layer's questions for full URLs such as
``gs://bucket/run/model.ckpt-5.index``. fsspec and the store's client library (gcsfs, s3fs) are
imported when the first URL of that protocol is used, and find their credentials as they always do.

- Reads fetch only the byte ranges asked for: neighbouring ranges are merged when little lies between
  them; a long run is one streamed request (``remote_ranges``), other ranges go in parts, several in
  flight. Memory holds the range being handed out plus at most ``IN_FLIGHT_BYTES`` requested ahead.
- An object written through ``replacing`` appears whole when the block ends cleanly and never
  appears if it raises: the upload is finalized on close and cancelled on error. Object stores have
  no rename (``can_rename`` is False): writers upload data first and the commit object last.
- ``hold_directory`` creates a lock object naming its holder, only if none exists (a conditional
  create where the store has one), and removes it when the process exits.
- An answer about an object (is it there, its size, is it a "directory", a whole small object) is
  reused for ``METADATA_FRESH_SECONDS``: opening one checkpoint asks the same few questions many times,
  and each is a round trip. This process's own writes forget every answer at once. The sizes of many
  objects (a checkpoint's data files) are asked together (``sizes``).

Example::

    RemoteStorage("gs").size("gs://bucket/run/model.ckpt-5.index")  # 4117
    [bytes(part) for part in RemoteStorage("gs").read_ranges("gs://bucket/run/notes.txt", [(0, 5), (9, 3)])]
    # [b'hello', b'abc']
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import functools
import io
import json
import os
import shutil
import socket
import tempfile
import threading
import time

from .. import bounded_json, workers
from ..errors import (
    CheckpointNotFoundError,
    CheckpointWriteError,
    CorruptCheckpointError,
    RemoteStorageError,
    StoreUnreachableError,
    SubsetSaverError,
    clipped,
)
from . import limits, remote_errors, remote_ranges
from .contract import RangeReader, StorageBackend, size_or_none
from .remote_ranges import MERGE_GAP, Block, merge_ranges

IN_FLIGHT_BYTES = 16 << 20
"""Most bytes requested ahead of the range being handed out."""
MAX_REQUESTS = 16
"""Most requests in flight at once."""
UPLOAD_BLOCK = 16 << 20
"""Bytes buffered before an upload sends a part (S3 needs 5 MiB or more, Cloud Storage a multiple of 256 KiB)."""
METADATA_FRESH_SECONDS = 2.0
"""How long an answer about an object is reused; another process's change is seen at most this late."""
MEMO_OBJECT_BYTES = 4 << 20
"""Largest whole object whose bytes are reused like an answer (an index, a state file, a manifest)."""
LOCK_NAME = ".subsetsaver-writer.lock"
"""The lock object a writer creates in a checkpoint directory of an object store."""

_backends = {}
_backends_lock = threading.Lock()


def serves(protocol) -> bool:
    """Whether URLs of ``protocol`` go through fsspec: Cloud Storage and S3 always (a missing client library
    is then a clear error), any other protocol fsspec knows when fsspec is installed."""
    if protocol in remote_errors.EXTRAS:
        return True
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return False
    return protocol in known_implementations or protocol in registry


def backend_for(protocol) -> RemoteStorage:
    """The one ``RemoteStorage`` of ``protocol`` in this process."""
    with _backends_lock:
        if protocol not in _backends:
            _backends[protocol] = RemoteStorage(protocol)
        return _backends[protocol]


class RemoteStorage(StorageBackend):
    """The file layer's backend for one fsspec protocol; paths are full URLs (``s3://bucket/dir/name``)."""

    can_rename = False

    def __init__(self, protocol: str):
        self.protocol = protocol
        self._filesystem = None
        self._limits = None  # those the file system was made with
        self._buckets = set()  # buckets seen to exist
        self._versions = {}  # URL -> its version when a reader opened it
        self._lock = threading.Lock()
        self._held = {}  # directory URL -> URL of the lock object this process created there
        self._memo = {}  # (question, URL) -> (monotonic time asked, answer); see METADATA_FRESH_SECONDS

    @property
    def filesystem(self):
        """The fsspec file system with the time-outs of :mod:`~subsetsaver.storage.limits`."""
        return self._connect(f"{self.protocol}://")

    def _connect(self, url):
        """The file system, made on first use (its failure named by ``url``, the object asked for) and again
        when the limits change (listings are never cached: other processes write too)."""
        chosen = limits.current()
        if self._filesystem is None or self._limits != chosen:
            with remote_errors.translated(self.protocol, url, "connect to the store for"):
                import fsspec

                limits.quiet_clients()
                self._filesystem = limits.within_budget(  # gcsfs may look for credentials on the network
                    fsspec.filesystem, self.protocol, use_listings_cache=False, budget=chosen.budget,
                    **chosen.client_options(self.protocol))
                self._limits = chosen
        return self._filesystem

    def _call(self, url, action, method, *args, absent_is_error=False, **kwargs):
        """``filesystem.method(*args, **kwargs)`` within the retry budget, its errors as the library's."""
        with remote_errors.translated(self.protocol, url, action, absent_is_error):
            return limits.within_budget(getattr(self._connect(url), method), *args, budget=limits.current().budget,
                                        **kwargs)

    def exists(self, path) -> bool:
        return self._info(path) is not None

    def is_directory(self, path) -> bool:
        return self._remembered("is_directory", path, lambda: bool(self._call(path, "look for", "isdir", path)))

    def list_directory(self, directory) -> list:
        """The base names in ``directory``, sorted; FileNotFoundError when nothing is there."""
        entries = self._call(directory, "list", "ls", directory, detail=False)
        return sorted({entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries})

    def size(self, path) -> int:
        """The object's length in bytes; FileNotFoundError when there is none."""
        info = self._info(path)
        if info is None:
            raise CheckpointNotFoundError(f"no object '{path}'", path=path)
        if info.get("type") == "directory":
            raise CheckpointNotFoundError(f"'{path}' is a directory, not an object", path=path)
        return int(info["size"])

    def sizes(self, paths) -> dict:
        """The length of each object of ``paths`` (None where there is none), up to ``MAX_REQUESTS`` asked at once:
        a checkpoint's sixteen data files cost about one round trip, not sixteen."""
        paths = list(dict.fromkeys(paths))
        if len(paths) < 2:
            return super().sizes(paths)
        with workers.scoped_pool(min(len(paths), MAX_REQUESTS), "subsetsaver-sizes") as asking:
            answers = list(asking.map(functools.partial(size_or_none, self), paths))
        return dict(zip(paths, answers))

    def read_bytes(self, path, limit=None) -> bytes:
        """The object (its first ``limit`` bytes if given) in one request; FileNotFoundError when there is none."""
        if limit is None:
            def ask():
                data = self._first_bytes(path, None)
                return data if len(data) <= MEMO_OBJECT_BYTES else _Unremembered(data)
            data = self._remembered("read_bytes", path, ask)
            return data.value if isinstance(data, _Unremembered) else data
        if limit <= 0:
            return b""
        try:
            return self._first_bytes(path, int(limit))
        except StoreUnreachableError:
            raise
        except RemoteStorageError:
            if self.size(path) == 0:  # both stores answer a range of an empty object with an error
                return b""
            raise

    def _first_bytes(self, path, limit):
        """The object's first ``limit`` bytes (None: all of it) in one request: a part fetcher's, where the
        client has one (see :func:`~.remote_ranges.part_fetcher`), else ``cat_file``'s."""
        filesystem = self.filesystem
        fetch = remote_ranges.part_fetcher(filesystem)
        if fetch is None:
            return self._call(path, "read", "cat_file", path, **({} if limit is None else {"start": 0, "end": limit}))
        import asyncio  # loaded with the first remote read, not by every command

        with remote_errors.translated(self.protocol, path, "read"):
            return b"".join(asyncio.run_coroutine_threadsafe(
                asyncio.wait_for(fetch(path, 0, limit), limits.current().budget), filesystem.loop).result())

    def read_ranges(self, path, ranges, into=None):
        """Yield the bytes of each ``(offset, length)`` of ``path``, in the order given, as they arrive.

        Ranges that follow each other closely are fetched in one request, long ones in parts, with
        several requests in flight. Each item is a read-only memoryview, valid as long as it is held;
        with ``into`` (one writable buffer of each range's length, or a function making one, called
        when that range's bytes start to arrive), the buffer, filled: a long range then lands there
        directly, with no copy held beside it. CorruptCheckpointError when the object ends before a
        range does.
        """
        ranges = [(int(offset), int(length)) for offset, length in ranges]
        for offset, length in ranges:
            if offset < 0 or length < 0:
                raise ValueError(f"a byte range of '{path}' has a negative offset or length: {(offset, length)}")
        if into is not None:
            into = [buffer if callable(buffer) else memoryview(buffer).cast("B") for buffer in into]
            if len(into) != len(ranges) or any(not callable(buffer) and len(buffer) != length
                                               for buffer, (_, length) in zip(into, ranges)):
                raise ValueError(f"read_ranges of '{path}' needs one buffer of each range's length in into=")
        return self._stream(path, merge_ranges(ranges, into))

    @contextlib.contextmanager
    def replacing(self, path):
        """A sink with ``.write(buffer)``: the object appears whole when the block ends, never if it raises.

        with RemoteStorage("s3").replacing("s3://bucket/run/model.ckpt-5.index") as sink:
            sink.write(index_bytes)
        """
        sink = _UploadSink(self, path)
        try:
            yield sink
            sink.finish()
        except BaseException:
            sink.discard()
            raise
        finally:
            self._forget()

    def open_reader(self, path):
        """A reader of ``path`` for ranged reads (``.size``, ``.read``, ``.read_into``, ``.read_ranges``);
        FileNotFoundError when there is no such object."""
        return RemoteReader(self, path)

    def rename(self, source, target) -> None:
        raise OSError(f"object stores cannot rename '{source}' to '{target}': write '{target}' itself, the "
                      "commit object last")

    def make_directories(self, directory) -> list:
        return []  # object stores have no directories: a name with slashes is enough

    def remove_directory(self, directory) -> None:
        pass

    def remove_tree(self, directory) -> None:
        """Delete every object under ``directory``; nothing to do when there is none."""
        try:
            self._call(directory, "remove", "rm", directory.rstrip("/"), recursive=True)
        except FileNotFoundError:
            pass
        finally:
            self._forget()

    def sync_directory(self, directory) -> None:
        pass  # an object is durable once its upload is finalized

    def remove_abandoned(self, directory) -> list:
        return []  # an upload that never finished never became an object

    def identity(self, path):
        return None

    def modified(self, path) -> int:
        """When the object was last written, in nanoseconds since the epoch; FileNotFoundError when absent."""
        when = self._call(path, "look for", "modified", path)
        return int(when.timestamp() * 1e9) if hasattr(when, "timestamp") else int(when)

    def remove(self, path) -> None:
        """Delete the object; nothing to do when it is absent."""
        try:
            self._call(path, "remove", "rm_file", path)
        except FileNotFoundError:
            pass
        finally:
            self._forget()

    def hold_directory(self, directory) -> None:
        """Take (or keep) this process's writer lock on ``directory``; CheckpointWriteError if another holds it.

        The lock is an object ``LOCK_NAME`` in the directory, created only if absent, naming its holder;
        it is removed when the process exits. A holder on this host whose process is gone is replaced.
        """
        directory = directory.rstrip("/")
        lock_url = f"{directory}/{LOCK_NAME}"
        with self._lock:
            if directory in self._held:
                return
            holder = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                 "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
            for attempt in range(2):
                try:
                    self._create_exclusively(lock_url, holder.encode())
                    break
                except FileExistsError:
                    other = self._holder(lock_url)
                    if attempt == 0 and _is_gone(other):
                        self.remove(lock_url)
                        continue
                    raise CheckpointWriteError(
                        f"another process ({_describe(other)}) is saving checkpoints in '{directory}'; two "
                        "writers in one directory replace each other's files: give each run its own directory, "
                        f"or stop the other process first (if it was killed, remove '{lock_url}')") from None
            if not self._held:
                atexit.register(self.release_all)
            self._held[directory] = lock_url

    def release_all(self) -> None:
        """Remove the lock objects this process created (run at exit)."""
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for lock_url in held:
            with contextlib.suppress(Exception):
                self.remove(lock_url)

    def _info(self, path):
        """fsspec's ``info`` of ``path``, or None when nothing is there; remembered (see METADATA_FRESH_SECONDS)."""
        def ask():
            try:
                return self._call(path, "look for", "info", path)
            except FileNotFoundError:
                self._check_bucket(path)
                return None
        return self._remembered("info", path, ask)

    def _check_bucket(self, path):
        """RemoteStorageError when the bucket of ``path`` (gs://, s3://) does not exist: a missing object is then
        named as a missing bucket. Asked when an object is absent, once per bucket that exists."""
        bucket = path.partition("://")[2].split("/", 1)[0]
        if self.protocol not in remote_errors.EXTRAS or bucket in self._buckets:
            return
        root = f"{self.protocol}://{bucket}"
        if not self._call(path, "look for", "exists", root):
            raise RemoteStorageError(f"cannot look for '{path}': the bucket '{bucket}' does not exist", path,
                                     remote_errors.MISSING_BUCKET)
        self._buckets.add(bucket)

    def _remembered(self, question, path, ask):
        """The answer to ``question`` about ``path``: a fresh one remembered, else ``ask()`` (and remember it).
        The writer lock's object is always asked anew."""
        if path.rstrip("/").endswith("/" + LOCK_NAME):
            return ask()
        key = (question, path)
        now = time.monotonic()
        remembered = self._memo.get(key)
        if remembered is not None and now - remembered[0] < METADATA_FRESH_SECONDS:
            return remembered[1]
        answer = ask()
        if not isinstance(answer, _Unremembered):
            self._memo[key] = (now, answer)
        return answer

    def _forget(self):
        """Drop every remembered answer: this process has just changed the store."""
        self._memo.clear()

    def _create_exclusively(self, path, data):
        budget = limits.current().budget
        filesystem = self._connect(path)
        with remote_errors.translated(self.protocol, path, "create the writer lock", absent_is_error=True):
            try:
                limits.within_budget(filesystem.pipe_file, path, data, mode="create", budget=budget)
            except TypeError:  # a file system without conditional writes: a check, then a write
                if limits.within_budget(filesystem.exists, path, budget=budget):
                    raise FileExistsError(path) from None
                limits.within_budget(filesystem.pipe_file, path, data, budget=budget)

    def _holder(self, lock_url):
        try:
            return bounded_json.loads(self.read_bytes(lock_url, 4096))
        except (FileNotFoundError, ValueError, SubsetSaverError):
            return {}

    def fill(self, path, offset, buffer):
        """Fill ``buffer`` (contiguous, writable) with the bytes of ``path`` from ``offset``, in parallel parts."""
        block = Block(offset, memoryview(buffer).nbytes, into=buffer, target=memoryview(buffer).cast("B"))
        for _ in self._stream(path, [block]):
            pass
        return buffer

    def _stream(self, path, blocks):
        """The views of ``blocks`` in order: a long run in one streamed request, the rest in parts."""
        opener, batch = remote_ranges.body_reader(self.filesystem), []
        for run in remote_ranges.runs(blocks, MERGE_GAP) if opener else [blocks]:
            if opener and remote_ranges.worth_streaming(run):
                yield from self._in_parts(path, batch)
                batch = []
                try:
                    with remote_errors.translated(self.protocol, path, "read"):
                        yield from remote_ranges.stream_run(self.filesystem, opener, path, run, self._ended_early)
                except RemoteStorageError as error:  # a range past the end is refused, not cut short; else the
                    if remote_errors.timed_out(error.__cause__):  # a store that stopped sending had its time: no second wait
                        raise
                    self._check_replaced(path)
                    self._check_reaches(path, run[-1].end)  # stream broke: parts (with retries) read the rest
                    yield from self._in_parts(path, [block for block in run if not block.handed_out])
            else:
                batch.extend(run)
        yield from self._in_parts(path, batch)

    def _in_parts(self, path, blocks):
        filesystem = self.filesystem
        fetch = self._fetcher(filesystem)
        parts = collections.deque((block, start, end) for block in blocks for start, end in block.parts())
        pending = collections.deque()  # (block, start, end, future), in the order of `parts`
        in_flight = 0
        try:
            for block in blocks:
                if block.length == 0:
                    yield from block.views()
                    continue
                while block.missing:
                    while parts and len(pending) < MAX_REQUESTS and (not pending or in_flight < IN_FLIGHT_BYTES):
                        part_block, start, end = parts.popleft()
                        pending.append((part_block, start, end, fetch(path, start, end)))
                        in_flight += end - start
                    part_block, start, end, future = pending.popleft()
                    in_flight -= end - start
                    data = self._result(path, future, start, end)
                    part_block.fill(start, data)
                yield from block.views()
                block.release()
        finally:
            for *_, future in pending:
                future.cancel()

    @staticmethod
    def _fetcher(filesystem):
        """``fetch(path, start, end)``: a future of those bytes (or of :func:`~.remote_ranges.part_fetcher`'s
        chunks), sent on the client's event loop within the retry budget, or on a thread of ours."""
        if getattr(filesystem, "async_impl", False) and getattr(filesystem, "loop", None) is not None:
            import asyncio  # loaded with the first remote read, not by every command

            budget = limits.current().budget
            fetched = remote_ranges.part_fetcher(filesystem) or filesystem._cat_file
            return lambda path, start, end: asyncio.run_coroutine_threadsafe(
                asyncio.wait_for(fetched(path, start=start, end=end), budget), filesystem.loop)
        requests = workers.shared_pool("subsetsaver-requests", MAX_REQUESTS)  # file systems without an event loop
        return lambda path, start, end: requests.submit(filesystem.cat_file, path, start=start, end=end)

    def _result(self, path, future, start, end):
        try:
            with remote_errors.translated(self.protocol, path, "read"):
                data = future.result()
        except StoreUnreachableError:
            raise
        except SubsetSaverError:
            self._check_replaced(path)
            self._check_reaches(path, end)
            raise
        size = sum(map(len, data)) if isinstance(data, list) else len(data)  # a part fetcher's chunks, or bytes
        if size != end - start:
            self._ended_early(path, start + size, end)
        return data

    def _ended_early(self, path, position, end):
        self._check_replaced(path)
        self._check_reaches(path, end)
        raise CorruptCheckpointError(f"'{path}' ended at byte {position} while bytes up to {end} were read; the "
                                     "object changed while it was read: read it again")

    def opened(self, path) -> int:
        """The size of ``path``, its version (generation, ETag) noted: a read that fails later names the
        object as replaced when the version has changed since."""
        size = self.size(path)
        self._versions[path] = _version(self._info(path))
        return size

    def _check_replaced(self, path):
        """Raise, naming ``path``, when it is gone or is no longer the version :meth:`opened` noted (asked anew)."""
        self._memo.pop(("info", path), None)
        info = self._info(path)
        if info is None:
            raise CheckpointNotFoundError(f"'{path}' was deleted while it was read; its checkpoint was removed or "
                                          "replaced: read it again", path=path)
        before, now = self._versions.get(path), _version(info)
        if before is not None and now is not None and before != now:
            raise CorruptCheckpointError(f"'{path}' was replaced while it was read (version {clipped(before, 40)} when "
                                         f"opened, {clipped(now, 40)} now): read the checkpoint again", path=path)

    def _check_reaches(self, path, end):
        size = self.size(path)
        if size < end:
            raise CorruptCheckpointError(
                f"'{path}' is {size} bytes long but its index says bytes up to {end} are in it: the object is "
                "short (an upload that did not finish, or a data file of another checkpoint); write the "
                "checkpoint again")

class RemoteReader(RangeReader):
    """An object read in ranges; ``size`` is asked once, when it is opened.

    with RemoteStorage("s3").open_reader("s3://bucket/run/model.data-00000-of-00001") as data:
        data.size, data.read(0, 4)
    # (2097164, b'\\x00\\x00\\xc0?')
    """

    def __init__(self, storage, path):
        self.storage, self.path = storage, path
        self.size = storage.opened(path)

    def read_into(self, offset, buffer):
        """Fill ``buffer`` (a contiguous writable array) with the bytes from ``offset``; returns it."""
        return self.storage.fill(self.path, offset, buffer)

    def read_ranges(self, ranges, into=None):
        """The bytes of each ``(offset, length)``, in order, merged and in flight together (``RemoteStorage.read_ranges``)."""
        return self.storage.read_ranges(self.path, ranges, into)

    def close(self):
        pass


class _UploadSink:
    """Where ``replacing`` writes: the store's own buffered upload, or a spool sent whole at the end. Each
    request (a part sent, the upload finished) is bounded by the retry budget, its errors the library's."""

    def __init__(self, storage, path):
        self.storage, self.path = storage, path
        filesystem = self.filesystem = storage._connect(path)
        self.handle = None
        self.spool = None
        if getattr(filesystem, "async_impl", False):  # gcsfs, s3fs, adlfs: uploads in parts, published on close
            self.handle = self._bounded("start writing", filesystem.open, path, "wb", block_size=UPLOAD_BLOCK)
        elif filesystem.protocol in ("memory", ("memory",)):  # its open() would publish an empty object at once
            self.spool = io.BytesIO()
        else:
            self.spool = tempfile.TemporaryFile()

    def _bounded(self, action, function, *args, **kwargs):
        with remote_errors.translated(self.storage.protocol, self.path, action, absent_is_error=True):
            return limits.within_budget(function, *args, budget=limits.current().budget, **kwargs)

    def write(self, buffer) -> int:
        data = memoryview(buffer).cast("B") if not isinstance(buffer, bytes) else buffer
        if self.handle is None:
            return self.spool.write(data)
        return self._bounded("write", self.handle.write, data)

    def finish(self):
        if self.handle is not None:
            self._bounded("finish writing", self.handle.close)
        elif isinstance(self.spool, io.BytesIO):
            self._bounded("finish writing", self.filesystem.pipe_file, self.path, self.spool.getvalue())
        else:
            self.spool.flush()
            self.spool.seek(0)
            with tempfile.NamedTemporaryFile() as staged:
                shutil.copyfileobj(self.spool, staged)
                staged.flush()
                self._bounded("finish writing", self.filesystem.put_file, staged.name, self.path)

    def discard(self):
        """Cancel the upload so that nothing appears, and keep the handle from finalizing it when collected.
        The cancel is waited for at most the connect time-out: when the store is unreachable, it is left to
        its client (an upload never finished never appears)."""
        if self.handle is not None:
            with contextlib.suppress(Exception):
                limits.within_budget(self.handle.discard, budget=limits.current().connect)
            self.handle.closed = True
        if self.spool is not None:
            self.spool.close()


class _Unremembered:
    """An answer handed back but not remembered (an object too large to keep)."""

    def __init__(self, value):
        self.value = value


def _is_gone(holder):
    """True when the lock's holder ran on this host and its process no longer exists."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _describe(holder):
    if not holder:
        return "unknown holder"
    return f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')}"


def _version(info):
    """The store's version of an object (Cloud Storage's generation, S3's ETag), or None where it has none."""
    for field in ("generation", "ETag", "etag"):
        if info and info.get(field):
            return str(info[field])
    return None
