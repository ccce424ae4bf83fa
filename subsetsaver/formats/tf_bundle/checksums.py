"""CRC32C as TensorFlow stores it: masked, and computed over buffers of any size.

TensorFlow never stores a raw CRC32C next to the bytes it covers (a CRC of data that
contains CRCs is weak); it stores the *masked* value, rotated right by 15 bits plus a
constant. Tables mask their block checksums, bundles the checksums of tensor bytes.
``google_crc32c`` takes only ``bytes``, so large buffers are checksummed in bounded
pieces rather than copied whole.

Example::

    >>> masked_crc32c(b'')          # what TensorFlow stores for an empty tensor
    2726488792
    >>> unmasked(masked_crc32c(b'abc')) == crc32c(b'abc')
    True
"""

import google_crc32c

MASK_DELTA = 0xA282EAD8
_PIECE_BYTES = 4 << 20  # a buffer is checksummed this many bytes (one copy) at a time


def crc32c(buffer, crc=0) -> int:
    """The CRC32C of ``buffer`` (bytes or anything with the buffer protocol), extending ``crc``."""
    if isinstance(buffer, bytes):
        return google_crc32c.extend(crc, buffer)
    view = memoryview(buffer).cast("B")
    for start in range(0, len(view), _PIECE_BYTES):
        crc = google_crc32c.extend(crc, bytes(view[start:start + _PIECE_BYTES]))
    return crc


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
