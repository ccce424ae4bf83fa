"""Which requests the wanted byte ranges of an object in a bucket become; the streamed read of a long run.

Neighbouring ranges are merged into one ``Block`` when little lies between them, and a block is
fetched in parts of ``PART_BYTES``. A long run of blocks is instead asked for in one request and
read as its body arrives.

Reading a data file in parts costs a request per part: its latency, its bill, and on some servers
(moto's S3) a fresh read of the whole object for each one. A run of wanted bytes of at least
``STREAM_MIN_BYTES`` is therefore asked for once. Its body is handed from the client's event loop
to the reader through a queue of at most ``QUEUED_CHUNKS`` chunks of ``CHUNK_BYTES``, so memory stays
bounded whatever the run's length. The request is sent with the public calls of s3fs and gcsfs (fsspec
itself hands a range over only whole); ``body_reader`` says None for other stores, which read in parts.

Example (inside ``RemoteStorage``)::

    opener = body_reader(filesystem)
    for view in stream_run(filesystem, opener, "s3://bucket/model.data-00000-of-00001", blocks, on_short):
        ...
"""

from __future__ import annotations

import contextlib
import queue
import threading

import numpy as np

MERGE_GAP = 1 << 20
"""Most bytes between two ranges that one request may read through instead of making two requests."""
WASTE_ALLOWANCE = 64 << 10
"""Bytes a merged request may read that nobody asked for, plus 1/32 of the bytes asked for in it."""
PART_BYTES = 4 << 20
"""Size of one request: longer ranges are fetched in parts, shorter neighbours merged up to it."""

STREAM_MIN_BYTES = 32 << 20
"""Shortest run of wanted bytes read in one streamed request (shorter ones are read in parts)."""
CHUNK_BYTES = 1 << 20
"""Most bytes taken from a streamed body at once."""
QUEUED_CHUNKS = 8
"""Most chunks held between the network and the reader. Fewer kept a bucket's T5 conversion here faster: 0.075 s and
0.093 s less than 16 in two batches of 10 paired runs (9 of 10 faster in each); 4 was slower than 8 (3 of 12 faster)."""

_END = object()


def body_reader(filesystem):
    """``opener(filesystem, path, start, end)``: an async context giving ``read(n)`` over those bytes; None
    when the client has no streamed body."""
    client = type(filesystem).__module__.split(".")[0]
    return {"s3fs": _s3_body, "gcsfs": _gcs_body}.get(client) if getattr(filesystem, "loop", None) else None


def runs(blocks, max_gap) -> list:
    """``blocks`` cut into runs of consecutive, non-empty blocks at most ``max_gap`` apart, in order.

    >>> class B:
    ...     def __init__(self, start, end): self.start, self.end, self.length = start, end, end - start
    >>> [[(b.start, b.end) for b in run] for run in runs([B(0, 10), B(12, 20), B(99, 100), B(5, 5)], 8)]
    [[(0, 10), (12, 20)], [(99, 100)], [(5, 5)]]
    """
    found = []
    for block in blocks:
        last = found[-1][-1] if found else None
        if (last is not None and block.length and last.length
                and 0 <= block.start - last.end <= max_gap):
            found[-1].append(block)
        else:
            found.append([block])
    return found


def worth_streaming(run) -> bool:
    """True when a run is long enough that one request beats a request per part."""
    return bool(run[0].length) and run[-1].end - run[0].start >= STREAM_MIN_BYTES


def stream_run(filesystem, opener, path, blocks, on_short):
    """Yield the views of each of ``blocks`` (a run) as the one request's body fills them.
    ``on_short(path, position, end)`` raises when the body ends at ``position``, before the run's ``end``."""
    import asyncio  # loaded with the first remote read, not by every command

    start, end = blocks[0].start, blocks[-1].end
    chunks = queue.Queue(QUEUED_CHUNKS)
    stop = threading.Event()
    pump = asyncio.run_coroutine_threadsafe(_pump(opener, filesystem, path, start, end, chunks, stop),
                                            filesystem.loop)
    position, number = start, 0
    for block in blocks:
        block.missing = block.length
    try:
        while number < len(blocks):
            item = _next_chunk(chunks, pump)
            if item is _END:
                on_short(path, position, end)
            if isinstance(item, BaseException):
                raise item
            data = memoryview(item).cast("B")
            first, position = position, position + len(data)
            while number < len(blocks):
                block = blocks[number]
                low, high = max(first, block.start), min(position, block.end)
                if low < high:
                    block.fill(low, data[low - first:high - first])
                if block.end > position:
                    break
                yield from block.views()
                block.release()
                number += 1
    finally:
        stop.set()
        pump.cancel()


def _next_chunk(chunks, pump):
    """The next item the pump queued; ConnectionError if it ended without queuing one (never a wait forever)."""
    while True:
        try:
            return chunks.get(timeout=0.5)
        except queue.Empty:
            if pump.done() and chunks.empty():
                raise ConnectionError("the streamed read stopped before its end") from None


def part_fetcher(filesystem):
    """``fetch(path, start, end)``, a coroutine giving those bytes of an object in one request (``0, None``: all
    of it), as the list of chunks they arrived in, which :meth:`Block.fill` takes without joining them first;
    for a client whose own ranged read costs more than its request. None for the others (fsspec's
    ``_cat_file`` serves). Small whole reads (an index, a config) go the same way.

    gcsfs's ``cat_file`` asks for the bucket's type before each read, anew each time when it cannot learn
    it (anonymous reads of public buckets, emulators): a blocking probe for credentials on the client's event
    loop, per part. The request goes as :func:`stream_run`'s does, retried by gcsfs's own ``retry_request``."""
    if body_reader(filesystem) is not _gcs_body:
        return None
    from gcsfs.retry import retry_request

    @retry_request
    async def fetch(path, start, end):
        async with _gcs_body(filesystem, path, start, end) as read:
            chunks = []
            while data := await read(CHUNK_BYTES):
                chunks.append(data)
        return chunks

    return fetch


async def _pump(opener, filesystem, path, start, end, chunks, stop):
    try:
        async with opener(filesystem, path, start, end) as read:
            while not stop.is_set():
                data = await read(CHUNK_BYTES)
                if not data:
                    break
                await _put(chunks, data, stop)
        await _put(chunks, _END, stop)
    except Exception as error:  # handed to the reader, which raises it; a cancelled pump just ends
        await _put(chunks, error, stop)


async def _put(chunks, item, stop):
    import asyncio

    while not stop.is_set():
        try:
            chunks.put_nowait(item)
            return
        except queue.Full:
            await asyncio.sleep(0.002)


@contextlib.asynccontextmanager
async def _s3_body(filesystem, path, start, end):
    """S3's GetObject of the range, sent by s3fs's own client (``set_session`` and ``get_s3``, which s3fs documents
    for async use, give the aiobotocore client it configured: endpoint, credentials, time-outs, region)."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    bucket, key, version = filesystem.split_path(path)
    await filesystem.set_session()
    client = await filesystem.get_s3(bucket)
    accepted = client.meta.service_model.operation_model("GetObject").input_shape.members
    options = {name: value for name, value in {**filesystem.s3_additional_kwargs, **filesystem.req_kw}.items()
               if name in accepted and value is not None}  # e.g. RequestPayer, SSECustomerKey
    if version:
        options["VersionId"] = version
    try:
        response = await client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **options)
    except ClientError as error:  # as the OSError s3fs raises for it (an absent object: FileNotFoundError)
        raise translate_boto_error(error) from error
    body = response["Body"]
    try:
        yield body.read
    finally:
        body.close()


@contextlib.asynccontextmanager
async def _gcs_body(filesystem, path, start, end):
    """Cloud Storage's media download of the range, sent with gcsfs's public pieces: its URL of the object, its
    credentials' headers, and its connections (``session``, made by its first request, such as the object's
    size when the reader opened it; else a session of its own with gcsfs's ``session_kwargs``)."""
    import aiohttp
    from gcsfs.retry import validate_response

    headers = {} if start == 0 and end is None else {"Range": f"bytes={start}-{end - 1}"}  # None: to its end
    filesystem.credentials.apply(headers)
    params = {}
    if filesystem.requester_pays:  # the project billed for a requester-pays bucket, as gcsfs names it
        params["userProject"] = (filesystem.requester_pays if isinstance(filesystem.requester_pays, str)
                                 else filesystem.project)
    async with contextlib.AsyncExitStack() as closing:
        session = filesystem.session
        if session is None or session.closed:
            session = await closing.enter_async_context(aiohttp.ClientSession(**filesystem.session_kwargs))
        response = await closing.enter_async_context(
            session.get(filesystem.url(path), params=params, headers=headers, timeout=filesystem.requests_timeout))
        if response.status >= 400:
            validate_response(response.status, await response.read(), path)
        yield response.content.read


class Block:
    """Consecutive ranges fetched together: ``[start, end)`` of the object, handed out as one view per range
    (or, for a range given a buffer, that buffer filled). ``into``: the buffer the whole block lands in, or a
    function that makes it, called when the block's first bytes arrive (not while earlier blocks still wait)."""

    def __init__(self, offset, length, into=None, target=None):
        self.start, self.end = offset, offset + length
        self.members = [(offset, length, target)]
        self.direct = into is not None
        self.into = into
        self.buffer = None
        self.missing = 0
        self.handed_out = False

    @property
    def length(self):
        return self.end - self.start

    def parts(self):
        self.missing = self.length
        return [(start, min(start + PART_BYTES, self.end)) for start in range(self.start, self.end, PART_BYTES)]

    def fill(self, start, data):
        """Copy ``data`` in from byte ``start`` of the object: bytes, or a list of chunks that follow each other."""
        buffer = self._landing_place()
        for chunk in data if isinstance(data, list) else (data,):
            at = start - self.start
            buffer[at:at + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
            start += len(chunk)
            self.missing -= len(chunk)

    def _landing_place(self):
        if self.buffer is None:
            if self.direct:
                into = made(self.into, self.length)
                self.members = [(self.start, self.length, into)]
                self.buffer = np.frombuffer(into, dtype=np.uint8)
            else:  # np.empty: pages become resident only as parts arrive
                self.buffer = np.empty(self.length, dtype=np.uint8)
        return self.buffer

    def views(self):
        landed = self._landing_place()  # made even for an empty block: its caller's buffer is handed out
        whole = memoryview(landed).cast("B").toreadonly() if self.length else memoryview(b"")
        handed = []
        for offset, length, target in self.members:
            piece = whole[offset - self.start:offset - self.start + length]
            if target is not None and not self.direct:
                target = made(target, length)
                target[:] = piece
            handed.append(piece if target is None else target)
        return handed

    def release(self):
        """Let go of the bytes and the callers' buffers, once handed out."""
        self.buffer = self.into = None
        self.members = [(offset, length, None) for offset, length, _ in self.members]
        self.handed_out = True


def made(buffer, length) -> memoryview:
    """``buffer`` (or what the function ``buffer`` makes) as a writable byte view of ``length`` bytes."""
    view = memoryview(buffer() if callable(buffer) else buffer).cast("B")
    if len(view) != length:
        raise ValueError(f"a buffer of {len(view)} bytes was given for a range of {length}")
    return view


def merge_ranges(ranges, into=None) -> list:
    """Blocks of the ``(offset, length)`` ranges, in order: a range joins the previous block when it
    starts at or after that block's end, little is skipped to reach it, and the block stays within a part.
    With ``into`` (a buffer per range), a range of ``MERGE_GAP`` or more is its own block, fetched into its buffer.

    >>> [(block.start, block.end) for block in merge_ranges([(0, 10), (12, 4), (5000000, 8)])]
    [(0, 16), (5000000, 5000008)]
    """
    blocks = []
    for number, (offset, length) in enumerate(ranges):
        target = None if into is None else into[number]
        if target is not None and length >= MERGE_GAP:
            blocks.append(Block(offset, length, into=target, target=target))
            continue
        block = blocks[-1] if blocks else None
        if block is not None and length and block.length and not block.direct:
            gap = offset - block.end
            asked = sum(member[1] for member in block.members) + length
            skipped = block.length - (asked - length) + gap
            if (0 <= gap <= MERGE_GAP and offset + length - block.start <= PART_BYTES
                    and skipped <= WASTE_ALLOWANCE + asked // 32):
                block.members.append((offset, length, target))
                block.end = offset + length
                continue
        blocks.append(Block(offset, length, target=target))
    return blocks
