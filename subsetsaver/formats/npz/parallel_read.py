"""Reading large arrays with several reads in flight, each chunk checksummed where it lands.

One ``pread`` after another keeps a single request in flight, and a virtual disk serves
a cold file several times faster with a queue of them: reading 1 GiB cold took 1.6-3.9 s
in one stream and 0.5-0.7 s with four readers on the machine the benchmarks were taken
on. So each large array is cut into chunks of 8 MiB, read by READERS threads (started once and
shared by every read) into its final buffer, and each chunk's
CRC-32 is taken by the thread that read it; :func:`crc32_combine` joins them into the
member's CRC-32 without touching the data again. SHA-256 cannot be joined, so with
``checksum='sha256'`` each array is hashed whole once its chunks are in.

Example::

    with ParallelReads(source.read_into, 'crc32') as reads:
        reads.add(entry, offset, aligned_bytes(entry.nbytes), header_crc(entry))
        for entry, buffer, digest in reads.finished():
            assert digest == entry.checksum
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import zlib

from ... import workers

CHUNK_BYTES = 8 << 20  # what one reader reads (and checksums) at a time
READERS = 8  # reads in flight: I/O, not CPU, so more than the cores

_POLYNOMIAL = 0xEDB88320  # CRC-32 (zip, zlib), bits reflected


def _multiply(a, b) -> int:
    """``a * b`` modulo the CRC-32 polynomial (reflected bit order, as zlib computes it)."""
    product, bit = 0, 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _POLYNOMIAL if b & 1 else b >> 1
    return product


def _powers_of_x():
    """``x**(2**k)`` modulo the polynomial, k = 0..31."""
    table, power = [], 1 << 30  # x**1
    for _ in range(32):
        table.append(power)
        power = _multiply(power, power)
    return table


_X_POWERS = _powers_of_x()


def crc32_combine(first, second, second_length) -> int:
    """The CRC-32 of ``A + B`` from ``zlib.crc32(A)``, ``zlib.crc32(B)`` and ``len(B)``.

    ``crc32_combine(zlib.crc32(b'ab'), zlib.crc32(b'cd'), 2) == zlib.crc32(b'abcd')``.
    """
    shift, bits, index = 1 << 31, second_length * 8, 0  # x**0, then times x**(8 * len(B))
    while bits:
        if bits & 1:
            shift = _multiply(_X_POWERS[index % 32], shift)
        bits >>= 1
        index += 1
    return _multiply(shift, first) ^ second


class ParallelReads:
    """Arrays being read and checksummed by :data:`READERS` threads, :data:`CHUNK_BYTES` at a time.

    ``read_into(offset, buffer)`` fills a uint8 buffer from the file (``None``: the data is
    already in the buffers, only checksum it); ``checksum`` is the manifest's algorithm.
    :meth:`add` starts an array; :meth:`finished` waits and gives each one's digest, in the
    order added. Use it in a ``with`` block: leaving it, early or by an error, cancels the
    reads not yet started and waits for the rest, so no thread writes into a buffer after.
    """

    def __init__(self, read_into, checksum):
        self._read_into = read_into
        self._crc = checksum == "crc32"
        self._pending = []  # (entry, buffer, start CRC, [(future of the chunk's CRC, its length)])
        self._submitted = []  # every chunk's future, until this is left

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._pending = []
        submitted, self._submitted = self._submitted, []
        for future in submitted:
            future.cancel()
        concurrent.futures.wait(submitted)  # no thread writes into a buffer once this is left
        return False

    def add(self, entry, offset, buffer, start_crc=0):
        """Read ``entry.nbytes`` bytes at ``offset`` into ``buffer``; ``start_crc`` is the CRC-32
        the member's data continues (that of its ``.npy`` header)."""
        chunks = []
        for begin in range(0, buffer.nbytes, CHUNK_BYTES):
            piece = buffer[begin:begin + CHUNK_BYTES]
            chunks.append((_readers().submit(self._chunk, offset + begin, piece), piece.nbytes))
        self._submitted.extend(future for future, _ in chunks)
        self._pending.append((entry, buffer, start_crc, chunks))

    def _chunk(self, offset, piece):
        if self._read_into is not None:
            self._read_into(offset, piece)
        return zlib.crc32(piece) if self._crc else None

    def finished(self):
        """``(entry, buffer, digest)`` of every array added, in order, once its reads are done;
        a failed read raises its error here."""
        pending, self._pending = self._pending, []
        if self._crc:
            for entry, buffer, crc, chunks in pending:
                for future, length in chunks:
                    crc = crc32_combine(crc, future.result(), length)
                yield entry, buffer, f"{crc:08x}"
        else:  # SHA-256 cannot be joined from chunks: hash each array whole, in the pool
            hashes = []
            for entry, buffer, _, chunks in pending:
                for future, _ in chunks:
                    future.result()
                hashes.append((entry, buffer, _readers().submit(sha256_hex, buffer)))
            for entry, buffer, future in hashes:
                yield entry, buffer, future.result()


def _readers():
    """The READERS threads every :class:`ParallelReads` shares: started once, not for every array."""
    return workers.shared_pool("subsetsaver-reads", READERS)


def sha256_hex(buffer) -> str:
    """The SHA-256 of a uint8 array's bytes, as 64 hex digits."""
    return hashlib.sha256(buffer.data if buffer.size else b"").hexdigest()
