"""The protocol-buffer wire format, by hand, for the few messages the checkpoint formats hold.

A message is a run of fields, each a varint tag (field number << 3 | wire type) and a
value: a varint, 8 or 4 little-endian bytes, or a varint length and that many bytes.
:func:`decode` reads one with a :class:`Message` schema the way protobuf's own parser
does (unknown fields skipped, the last of a repeated scalar wins, a sub-message that
appears twice merged, repeated numbers packed or not) and refuses what it cannot
parse with a ``ValueError``; :func:`encode` writes the canonical proto3 bytes
TensorFlow's C++ serializer writes (fields in number order, zero values left out).
The schemas themselves live with their formats (``tf.bundle.proto``, ``tf.object_graph``).

Example::

    >>> VERSION = Message("VersionDef", Field(1, "producer", "int32"))
    >>> decode(VERSION, bytes.fromhex('0801'))
    {'producer': 1}
    >>> encode(VERSION, {'producer': 1}).hex()
    '0801'
"""

from __future__ import annotations

import dataclasses
import struct

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
MAX_VARINT_BYTES = 10
_UINT64 = (1 << 64) - 1
_VARINT_KINDS = frozenset({"int32", "int64", "uint32", "enum", "bool"})
_WIRE_TYPE = {"fixed32": FIXED32, "bytes": LENGTH_DELIMITED, **{kind: VARINT for kind in _VARINT_KINDS}}


# ---------------------------------------------------------------------------------
# Varints
# ---------------------------------------------------------------------------------


def encode_varint(value) -> bytes:
    """The varint of ``value``; a negative number as its 64-bit two's complement (10 bytes), as protobuf does."""
    value &= _UINT64
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data, position, max_bytes=MAX_VARINT_BYTES):
    """``(value, next position)`` of the varint at ``position``; ValueError if it runs past the end or is too long."""
    result = shift = 0
    for index in range(position, min(position + max_bytes, len(data))):
        byte = data[index]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result > _UINT64:
                raise ValueError("a varint exceeds 64 bits")
            return result, index + 1
        shift += 7
    if position + max_bytes <= len(data):
        raise ValueError(f"a varint is longer than {max_bytes} bytes")
    raise ValueError("a varint runs past the end")


def fields(data):
    """``(field number, wire type, value)`` of each field of a message: an int, or bytes when length-delimited."""
    position, end = 0, len(data)
    while position < end:
        tag, position = decode_varint(data, position)
        number, wire_type = tag >> 3, tag & 7
        if number == 0 or number >= 1 << 29:
            raise ValueError(f"a field number of {number}")
        if wire_type == VARINT:
            value, position = decode_varint(data, position)
        elif wire_type in (FIXED64, FIXED32):
            width = 8 if wire_type == FIXED64 else 4
            if position + width > end:
                raise ValueError(f"field {number} runs past the end")
            value, position = int.from_bytes(data[position:position + width], "little"), position + width
        elif wire_type == LENGTH_DELIMITED:
            length, position = decode_varint(data, position)
            if position + length > end:
                raise ValueError(f"field {number} runs past the end")
            value, position = bytes(data[position:position + length]), position + length
        else:  # groups (3, 4) are not in any proto3 message; 6 and 7 are not wire types
            raise ValueError(f"field {number} has wire type {wire_type}")
        yield number, wire_type, value


# ---------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a :class:`Message`: ``kind`` is a scalar kind ('int32', 'int64', 'uint32',
    'enum', 'bool', 'fixed32', 'bytes') or a nested Message. ``tracked``: presence is kept
    (a ``oneof`` member), so a zero value is written and read back as present."""

    number: int
    name: str
    kind: object
    repeated: bool = False
    tracked: bool = False


class Message:
    """A message's schema: its name (for messages) and its fields."""

    def __init__(self, name, *message_fields):
        self.name = name
        self.fields = tuple(sorted(message_fields, key=lambda field: field.number))
        self.by_number = {field.number: field for field in self.fields}

    def __repr__(self):
        return f"Message({self.name!r})"


def _scalar(kind, raw):
    """A varint's or fixed field's value as protobuf's parser gives it for ``kind``."""
    if kind == "int64":
        return raw - (1 << 64) if raw >= 1 << 63 else raw
    if kind in ("int32", "enum"):  # the low 32 bits, as a signed number
        raw &= 0xFFFFFFFF
        return raw - (1 << 32) if raw >= 1 << 31 else raw
    if kind == "uint32":
        return raw & 0xFFFFFFFF
    if kind == "bool":
        return raw != 0
    return raw  # fixed32, bytes


def _packed(data):
    values, position = [], 0
    while position < len(data):
        value, position = decode_varint(data, position)
        values.append(value)
    return values


def decode(schema, data) -> dict:
    """The fields of message ``data`` present on the wire, by name (repeated ones as lists).

    ValueError if the bytes are not a message of this schema: a truncated field, a known
    field with the wrong wire type, a nested message that does not parse.
    """
    values, pieces = {}, {}  # pieces: nested message name -> its byte runs (protobuf merges them)
    for number, wire_type, raw in fields(data):
        field = schema.by_number.get(number)
        if field is None:
            continue
        if isinstance(field.kind, Message):
            if wire_type != LENGTH_DELIMITED:
                raise ValueError(f"{schema.name}.{field.name} has wire type {wire_type}")
            if field.repeated:
                values.setdefault(field.name, []).append(_nested(field, raw))
            else:
                pieces.setdefault(field.name, []).append(raw)
            continue
        expected = _WIRE_TYPE[field.kind]
        if field.repeated and expected == VARINT and wire_type == LENGTH_DELIMITED:
            values.setdefault(field.name, []).extend(_scalar(field.kind, value) for value in _packed(raw))
        elif wire_type != expected:
            raise ValueError(f"{schema.name}.{field.name} has wire type {wire_type}")
        elif field.repeated:
            values.setdefault(field.name, []).append(_scalar(field.kind, raw))
        else:
            values[field.name] = _scalar(field.kind, raw)
    for name, runs in pieces.items():
        values[name] = _nested(next(f for f in schema.fields if f.name == name), b"".join(runs))
    return values


def _nested(field, raw):
    try:
        return decode(field.kind, raw)
    except ValueError as error:
        raise ValueError(f"{field.kind.name} in {field.name}: {error}") from None


def encode(schema, values) -> bytes:
    """Canonical proto3 bytes of ``values`` (a dict as :func:`decode` returns): fields in number
    order, zero scalars left out unless tracked, repeated numbers packed, present messages kept."""
    out = bytearray()
    for field in schema.fields:
        value = values.get(field.name)
        if value is None:
            continue
        if isinstance(field.kind, Message):
            for item in (value if field.repeated else [value]):
                _length_delimited(out, field.number, encode(field.kind, item))
        elif field.repeated:
            if value and field.kind == "bytes":
                for item in value:
                    _length_delimited(out, field.number, item)
            elif value and field.kind == "fixed32":
                _length_delimited(out, field.number, struct.pack(f"<{len(value)}I", *value))
            elif value:
                _length_delimited(out, field.number, b"".join(encode_varint(int(item)) for item in value))
        elif value or field.tracked:
            wire_type = _WIRE_TYPE[field.kind]
            if wire_type == LENGTH_DELIMITED:
                _length_delimited(out, field.number, value)
                continue
            out += encode_varint(field.number << 3 | wire_type)
            out += struct.pack("<I", value) if wire_type == FIXED32 else encode_varint(int(value))
    return bytes(out)


def _length_delimited(out, number, payload):
    out += encode_varint(number << 3 | LENGTH_DELIMITED)
    out += encode_varint(len(payload))
    out += payload
