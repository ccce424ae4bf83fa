"""Parts of partitioned tensors: their index keys (TensorFlow's ordered code) and their geometry.

A partitioned variable is stored as one entry per part, keyed by
``checkpoint::EncodeTensorNameSlice``: the number 0, the full name, the rank, then each
dimension's start and length, in TensorFlow's ``OrderedCode`` (a byte string sorting as
its values do). An *extent* is ``(start, length)``, length -1 meaning the whole
dimension; an extent's text is ``start,length`` or ``-``, joined by ``:``, as
``TensorSlice::DebugString`` prints it.

Example::

    >>> slice_key(b'emb', [(0, 4), (0, -1)]).hex()
    '00656d62000101028084807f'
    >>> read_slice_key(bytes.fromhex('00656d62000101028084807f'))
    (b'emb', [(0, 4), (0, -1)])
    >>> extent_text([(0, 4), (0, -1)])
    '0,4:-'
"""

from __future__ import annotations

import re

WHOLE_DIMENSION = -1  # an extent's length meaning "the whole dimension" (TensorSlice::kFullExtent)
_SPECIAL_BYTE = re.compile(rb"[\x00\xff]")
_ESCAPED = {b"\x00": b"\x00\xff", b"\xff": b"\xff\x00"}


# ---------------------------------------------------------------------------------
# OrderedCode (tensorflow/core/lib/strings/ordered_code.cc)
# ---------------------------------------------------------------------------------


def ordered_unsigned(value) -> bytes:
    """``WriteNumIncreasing``: a length byte, then the number big-endian without leading zero bytes."""
    payload = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes([len(payload)]) + payload


def ordered_string(text) -> bytes:
    """``WriteString``: 0x00 as 00 ff, 0xff as ff 00, then the separator 00 01."""
    return _SPECIAL_BYTE.sub(lambda match: _ESCAPED[match.group()], text) + b"\x00\x01"


def ordered_signed(value) -> bytes:
    """``WriteSignedNumIncreasing``: n bytes of two's complement whose top n bits (all equal to the
    sign) are inverted, so that the leading run of sign-opposite bits tells the length."""
    magnitude = ~value if value < 0 else value
    length = max(1, -(-(magnitude.bit_length() + 1) // 7))  # n bytes hold numbers of up to 7n - 1 bits
    bits = 8 * length
    header = ((1 << length) - 1) << (bits - length)
    return ((value & ((1 << bits) - 1)) ^ header).to_bytes(length, "big")


def _read_unsigned(data, position):
    length = data[position]
    end = position + 1 + length
    if length > 8 or end > len(data):
        raise ValueError("a number runs past the end")
    return int.from_bytes(data[position + 1:end], "big"), end


def _read_string(data, position):
    out = bytearray()
    while position + 1 < len(data):
        byte, following = data[position], data[position + 1]
        if byte == 0x00 and following == 0x01:
            return bytes(out), position + 2
        if byte in (0x00, 0xFF):
            if (byte, following) not in ((0x00, 0xFF), (0xFF, 0x00)):
                raise ValueError("a string has an invalid escape")
            out.append(byte)
            position += 2
        else:
            out.append(byte)
            position += 1
    raise ValueError("a string runs past the end")


def _read_signed(data, position):
    if position >= len(data):
        raise ValueError("a number runs past the end")
    negative = not data[position] & 0x80
    length = 0
    for byte in data[position:position + 2]:  # the length is the run of sign-opposite leading bits
        byte = byte ^ 0xFF if negative else byte
        ones = 8 - (0xFF ^ byte).bit_length()
        length += ones
        if ones < 8:
            break
    if not 1 <= length <= 10 or position + length > len(data):
        raise ValueError("a number runs past the end")
    bits = 8 * length
    raw = int.from_bytes(data[position:position + length], "big") ^ (((1 << length) - 1) << (bits - length))
    value = raw - (1 << bits) if raw >> (bits - 1) else raw
    return value, position + length


# ---------------------------------------------------------------------------------
# Keys of parts
# ---------------------------------------------------------------------------------


def slice_key(name, extents) -> bytes:
    """The index key of the part ``extents`` ([(start, length)], -1 for a whole dimension) of tensor ``name`` (bytes)."""
    pieces = [ordered_unsigned(0), ordered_string(name), ordered_unsigned(len(extents))]
    for start, length in extents:
        pieces += [ordered_signed(start), ordered_signed(length)]
    return b"".join(pieces)


def read_slice_key(key):
    """``(name, extents)`` of a part's index key; None unless ``key`` is exactly one :func:`slice_key` writes."""
    try:
        zero, position = _read_unsigned(key, 0)
        name, position = _read_string(key, position)
        rank, position = _read_unsigned(key, position)
        numbers = []
        for _ in range(min(2 * rank, len(key))):
            number, position = _read_signed(key, position)
            numbers.append(number)
    except (ValueError, IndexError):
        return None
    extents = list(zip(numbers[::2], numbers[1::2]))
    if zero != 0 or len(extents) != rank or slice_key(name, extents) != key:
        return None
    return name, extents


def extent_text(extents) -> str:
    """``0,4:-``: each dimension's ``start,length``, or ``-`` for the whole dimension."""
    return ":".join("-" if length == WHOLE_DIMENSION else f"{start},{length}" for start, length in extents)


# ---------------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------------


def region_of(extents, shape) -> tuple:
    """``((start, stop), ...)`` per dimension of ``shape`` that ``extents`` cover."""
    return tuple((0, size) if length == WHOLE_DIMENSION else (start, start + length)
                 for (start, length), size in zip(extents, shape))


def volume(region) -> int:
    """The number of elements in ``region``."""
    count = 1
    for start, stop in region:
        count *= stop - start
    return count


def overlaps(region, other) -> bool:
    """Whether two regions of the same rank share an element."""
    return all(a < d and c < b for (a, b), (c, d) in zip(region, other)) and bool(volume(region) and volume(other))


UNDECIDED = "undecided"
OVERLAP_BUDGET = 1 << 20  # comparisons first_overlap may make (about a second)


def first_overlap(regions, budget=None):
    """``(i, j)`` of two regions sharing an element, None if none do, or :data:`UNDECIDED` once
    ``budget`` (default :data:`OVERLAP_BUDGET`) comparisons did not settle it: a crafted file of
    many parts must not make this take hours.

    Sweeps along the dimension where the regions start at the most places, so that the parts
    of a variable partitioned along one axis take a comparison or two each.
    """
    if any(not region for region in regions):  # rank 0: a single element, which any two parts share
        return (0, 1) if len(regions) > 1 else None
    axis = max(range(len(regions[0])), key=lambda d: len({region[d][0] for region in regions})) if regions else 0
    filled = sorted((region[axis][0], index) for index, region in enumerate(regions) if volume(region))
    active, budget = [], OVERLAP_BUDGET if budget is None else budget
    for start, index in filled:
        budget -= len(active)
        if budget < 0:
            return UNDECIDED
        active = [other for other in active if regions[other][axis][1] > start]
        for other in active:
            if overlaps(regions[index], regions[other]):
                return tuple(sorted((other, index)))
        active.append(index)
    return None
