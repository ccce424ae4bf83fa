"""CRC32C as TensorFlow stores it: masked, and computed over buffers of any size.

TensorFlow never stores a raw CRC32C next to the bytes it covers (a CRC of data that
contains CRCs is weak); it stores the *masked* value, rotated right by 15 bits plus a
constant. Tables mask their block checksums, bundles the checksums of tensor bytes.

A buffer is checksummed where it lies, through google_crc32c's public ``extend``: it takes a
numpy array as it takes ``bytes``, without a copy, and holds the GIL while it runs on anything
but ``bytes``. So a large buffer goes in pieces of :data:`PIECE_BYTES` (a tenth of a millisecond
each), and the reading threads beside a checksum run between its pieces.
:class:`RunningCrc` checksums the pieces of one tensor on a background thread while the
next piece is read.

Example::

    >>> masked_crc32c(b'')          # what TensorFlow stores for an empty tensor
    2726488792
    >>> unmasked(masked_crc32c(b'abc')) == crc32c(b'abc')
    True
"""

import concurrent.futures

import google_crc32c

from ... import workers

MASK_DELTA = 0xA282EAD8
PIECE_BYTES = 1 << 20
"""Bytes checksummed with the GIL held at a time (about 0.1 ms at the C library's speed)."""


def crc32c(buffer, crc=0) -> int:
    """The CRC32C of ``buffer`` (bytes or anything with the buffer protocol), extending ``crc``."""
    if isinstance(buffer, bytes):
        return google_crc32c.extend(crc, buffer)
    import numpy as np

    data = np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8)  # a view: nothing is copied
    for start in range(0, len(data), PIECE_BYTES):
        crc = _extend(crc, data[start:start + PIECE_BYTES])
    return crc


def _extend(crc, piece) -> int:
    """``google_crc32c.extend`` of a numpy piece, which it reads in place; a build that takes only ``bytes``
    (the pure-Python one, or a future release) is given the piece's bytes."""
    if google_crc32c.implementation == "c":
        try:
            return google_crc32c.extend(crc, piece)
        except TypeError:
            pass
    return google_crc32c.extend(crc, piece.tobytes())


class RunningCrc:
    """The CRC32C of pieces fed in order, computed on a background thread: the caller reads the next
    piece meanwhile. A piece must stay unchanged until the future :meth:`feed` returns is done.

    running = RunningCrc()
    for piece in pieces: running.feed(piece)
    running.value() == crc32c(b''.join(pieces))
    # True
    """

    def __init__(self, crc=0):
        self._crc = crc
        self._last = None

    def feed(self, piece) -> concurrent.futures.Future:
        self._last = _background().submit(self._extend, piece)
        return self._last

    def read_and_feed(self, read, piece) -> concurrent.futures.Future:
        """Call ``read`` (which fills ``piece``) on the background thread, then feed ``piece``; the future is
        ``read``'s: the piece may be looked at once it is done."""
        reading = _background().submit(read)
        self.feed(piece)
        return reading

    def value(self) -> int:
        """The CRC32C of every piece fed, once they are all checksummed."""
        if self._last is not None:
            self._last.result()
        return self._crc

    def _extend(self, piece):
        self._crc = crc32c(piece, self._crc)


def _background():
    """The one background thread of every RunningCrc: the pieces of a stream are checksummed in order."""
    return workers.shared_pool("subsetsaver-crc32c", 1)


def mask(crc) -> int:
    """TensorFlow's stored form of a CRC32C: rotated right by 15 bits, plus a constant."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def unmasked(stored) -> int:
    """The CRC32C whose masked form is ``stored`` (the inverse of :func:`mask`)."""
    rotated = (stored - MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def masked_crc32c(buffer) -> int:
    """``mask(crc32c(buffer))``: the checksum as a table or bundle stores it."""
    return mask(crc32c(buffer))
