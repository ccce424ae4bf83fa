"""JSON from files the library does not control, with limits on size and nesting.

Python's ``json`` recurses once per level of nesting, so a file of 100,000 ``[`` raises
``RecursionError``, an exception no caller expects from a parser. :func:`loads` measures the
nesting first, in one linear pass that ignores brackets inside strings, and refuses what is too
deep or too large with a ``ValueError`` that says which limit; a malformed document is
``json.JSONDecodeError``, also a ``ValueError``. Callers word either as their own error.

Example::

    >>> loads('{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> loads("[" * 100 + "]" * 100)
    Traceback (most recent call last):
    ...
    ValueError: it is nested 100 deep; at most 64 levels are read
"""

from __future__ import annotations

import json
import re

import numpy as np

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects read: real configs, maps and headers use fewer than 10."""
MAX_BYTES = 64 * 1024 * 1024
"""Largest document read: a safetensors header of 100,000 tensors is about 15 MB."""

# A string, or an unclosed one up to the end: every quote starts a match, so the scan stays linear.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\)?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def loads(text, *, max_depth=MAX_DEPTH, max_bytes=MAX_BYTES):
    """``text`` (str or bytes, UTF-8) parsed as JSON, if it is at most ``max_bytes`` long and
    ``max_depth`` deep; otherwise ``ValueError`` naming the limit."""
    if len(text) > max_bytes:
        raise ValueError(f"it is {len(text):,} bytes; at most {max_bytes:,} are read")
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"it is not UTF-8 (byte {error.start})") from None
    depth = nesting_depth(text)
    if depth > max_depth:
        raise ValueError(f"it is nested {depth:,} deep; at most {max_depth} levels are read")
    return json.loads(text)


def nesting_depth(text) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``text``, brackets inside strings not counted."""
    brackets = np.frombuffer(_NOT_BRACKET.sub("", _STRING.sub("", text)).encode("ascii"), np.uint8)
    if not brackets.size:
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())
