"""Gathering many small arrays of one size from a validated file into the rows of one buffer.

A restore of 3,000 small variables would otherwise read, allocate and checksum 3,000
arrays one by one. A :class:`RowPlan`, made once per file structure, knows where each
array sits; :meth:`RowPlan.gather` reads the file a span at a time and copies every
array of the span into its row with one vectorized numpy indexing;
:meth:`RowPlan.first_mismatch` then checks every row's checksum. The reader's
:meth:`~subsetsaver.formats.npz.Archive.plan_rows` and ``load_rows`` use it.

Example::

    plan = archive.plan_rows(['a/b', 'c/d'], rows=[1, 0], nbytes=8)
    out = np.empty((2, 8), np.uint8); archive.load_rows(plan, out)   # out[1] holds 'a/b'
"""

from __future__ import annotations

import hashlib
import math
import zlib

from .format import header_crc

_GATHER_SPAN = 8 << 20  # a gather reads at most this much of a file at a time


class RowPlan:
    """Equally sized arrays of one validated file and the rows of one buffer they go to.

    ``locations``: name -> (entry, file offset of its data), the file's ``Archive.locations()``;
    ``checksum``: the manifest's algorithm. Members are visited in file order, in spans of
    at most ``_GATHER_SPAN`` bytes; the copy works in units of up to 8 bytes (the largest
    that divides the size and every offset), so gathering 3,000 arrays of 8 bytes is one
    numpy indexing of 3,000 items.
    """

    def __init__(self, locations, path, checksum, names, rows, nbytes):
        import numpy as np

        missing = [n for n in names if n not in locations]
        if missing:
            raise KeyError(f"'{path}' holds no array {', '.join(missing)}")
        self.entries = [locations[n][0] for n in names]
        wrong = [e.name for e in self.entries if e.nbytes != nbytes]
        if wrong:
            raise ValueError(f"arrays {', '.join(wrong)} do not have {nbytes} bytes")
        self.nbytes = nbytes
        self.checksum = checksum
        offsets = np.array([locations[n][1] for n in names], dtype=np.int64)
        rows = np.asarray(rows, dtype=np.intp)
        self.unit = math.gcd(nbytes, 8, int(np.gcd.reduce(offsets)) if offsets.size else 0)
        self.unit_dtype = np.dtype(f"<u{self.unit}")
        order = np.argsort(offsets, kind="stable")
        self.chunks, first = [], 0
        for last in range(1, len(order) + 1):
            if last == len(order) or offsets[order[last]] + nbytes - offsets[order[first]] > _GATHER_SPAN:
                chosen = order[first:last]
                start, end = int(offsets[chosen[0]]), int(offsets[chosen[-1]]) + nbytes
                self.chunks.append((start, end, rows[chosen], (offsets[chosen] - start) // self.unit))
                first = last
        self.crc_inputs = [(slice(int(row) * nbytes, (int(row) + 1) * nbytes), header_crc(entry))
                           for row, entry in zip(rows, self.entries)]
        crc32 = checksum == "crc32"
        self.expected = [int(entry.checksum, 16) for entry in self.entries] if crc32 else None
        self.bools = [(int(row), entry) for row, entry in zip(rows, self.entries) if entry.dtype == "bool"]

    def gather(self, source, out) -> None:
        """Copy every array from ``source`` (its ``span(start, end)``: uint8 bytes of the file)
        into its row of ``out`` (uint8 ``[rows, nbytes]``). Nothing is checked yet."""
        import numpy as np

        count = self.nbytes // self.unit
        if not count:
            return
        units = out.reshape(-1).view(self.unit_dtype).reshape(out.shape[0], count)
        width = np.arange(count)
        for start, end, rows, relative in self.chunks:
            span = source.span(start, end).view(self.unit_dtype)
            units[rows] = span[relative[:, None] + width]

    def first_mismatch(self, out):
        """``(entry, hex digest found)`` of the first gathered row whose checksum is wrong, or None."""
        view = memoryview(out.reshape(-1))
        if self.checksum == "crc32":
            found = [zlib.crc32(view[where], start) for where, start in self.crc_inputs]
            if found != self.expected:
                index = next(i for i, (a, b) in enumerate(zip(found, self.expected)) if a != b)
                return self.entries[index], f"{found[index]:08x}"
            return None
        for (where, _), entry in zip(self.crc_inputs, self.entries):
            found = hashlib.sha256(view[where]).hexdigest()
            if found != entry.checksum:
                return entry, found
        return None
