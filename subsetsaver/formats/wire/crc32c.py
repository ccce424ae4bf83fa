"""CRC32C as TensorFlow stores it: masked, and computed over buffers of any size.

TensorFlow never stores a raw CRC32C next to the bytes it covers (a CRC of data that
contains CRCs is weak); it stores the *masked* value, rotated right by 15 bits plus a
constant. Tables mask their block checksums, bundles the checksums of tensor bytes.

A buffer is checksummed where it lies, without the GIL: ``google_crc32c`` releases it
only for ``bytes``, so other buffers go straight to the C library it wraps (found through
its extension module); without that library they are checksummed in copied pieces.
:class:`RunningCrc` checksums the pieces of one tensor on a background thread while the
next piece is read.

Example::

    >>> masked_crc32c(b'')          # what TensorFlow stores for an empty tensor
    2726488792
    >>> unmasked(masked_crc32c(b'abc')) == crc32c(b'abc')
    True
"""

import concurrent.futures
import ctypes
import functools

import google_crc32c

from ... import workers

MASK_DELTA = 0xA282EAD8
_PIECE_BYTES = 4 << 20  # without the C library, a buffer is checksummed this many bytes (one copy) at a time


# The one private API of another library the package calls, fenced here. The public ones cost more:
# google_crc32c.extend takes only read-only bytes (a copy of every tensor, and the GIL held for it), and
# the crc32c package, GIL-free on any buffer, imports importlib.metadata and with it the e-mail package
# on every command (tests/test_imports.py keeps file commands free of it). A google_crc32c release without
# this symbol falls back to the copied pieces below, and tests/test_verified_streams.py fails naming it.
@functools.cache
def _c_extend():
    """``crc32c_extend(crc, address, count)`` of the C library google_crc32c wraps (called without the
    GIL), or None where it is not there (the pure-Python build)."""
    try:
        from google_crc32c import _crc32c

        extend = ctypes.CDLL(_crc32c.__file__).crc32c_extend
    except (ImportError, OSError, AttributeError):
        return None
    extend.restype, extend.argtypes = ctypes.c_uint32, [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
    return extend


def crc32c(buffer, crc=0) -> int:
    """The CRC32C of ``buffer`` (bytes or anything with the buffer protocol), extending ``crc``."""
    if isinstance(buffer, bytes):
        return google_crc32c.extend(crc, buffer)
    view = memoryview(buffer).cast("B")
    extend = _c_extend()
    if extend is not None and len(view):
        import numpy as np

        return extend(crc, np.frombuffer(view, dtype=np.uint8).ctypes.data, len(view))  # view keeps it alive
    for start in range(0, len(view), _PIECE_BYTES):
        crc = google_crc32c.extend(crc, bytes(view[start:start + _PIECE_BYTES]))
    return crc


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
