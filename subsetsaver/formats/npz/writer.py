"""Writing a portable checkpoint: arrays streamed through a minimal zip writer into an atomic file.

Arrays are written as they are (no second copy in memory), hashed in worker threads
while earlier ones are written, or as they come from a stream; the manifest goes last.
The zip layer is :mod:`.zip_writer`. The file appears whole under
its name or not at all (:func:`subsetsaver.storage.replacing`). String and object
arrays are refused (:class:`~subsetsaver.errors.UnsupportedDtypeError`): a portable file
holds numbers only, so nothing in it can ask for pickle.

Example::

    write('/ckpt/model.npz', {'conv_1/w': w, 'opt/beta1_power': b1}, selector='everything()').names
    # ('conv_1/w', 'opt/beta1_power')
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import hashlib
import json
import os
import zlib

from ... import storage, workers
from ...errors import UnsupportedDtypeError
from ...version import versions
from ..memory import evict_oldest
from .format import (
    CHECKSUMS,
    DEFAULT_CHECKSUM,
    HASH_IN_THREADS,
    MANIFEST_MEMBER,
    STORED_AS,
    ArrayEntry,
    Manifest,
    entries_with_checksums,
    manifest_to_json,
    member_name,
    name_problem,
    npy_header,
    numpy_dtype,
)
from .zip_writer import ZipWriter, bytes_of, rows_layout


@dataclasses.dataclass(frozen=True)
class PreparedArray:
    """One array ready to be written: its bytes as stored, true dtype, ``.npy`` header and checksums.
    Made by :func:`prepare` in any thread (hashing releases the GIL), so a producer can hash while
    the writer writes."""

    name: str
    data: object        # C-contiguous, little-endian, viewed as its stored dtype
    true_dtype: str
    header: bytes
    crc: int | None     # CRC-32 of the member: header and data (None: taken while it is written)
    checksum: str | None  # the manifest's hex checksum (the CRC, or the data's SHA-256; None with crc None)


@dataclasses.dataclass(frozen=True)
class PreparedRows:
    """Equal-shaped arrays given as the rows of one array (a save's stack of small variables):
    array ``names[i]`` is ``rows[i]``. :func:`write` writes them as one block (see
    :meth:`~subsetsaver.formats.npz.zip_writer.ZipWriter.add_rows`)."""

    names: tuple
    rows: object        # [count, *shape]: C-contiguous, little-endian, viewed as its stored dtype
    true_dtype: str


def prepare_rows(names, rows) -> PreparedRows:
    """Check ``names`` (once per tuple of names) and ``rows``: the :class:`PreparedRows` :func:`write` takes.

    prepare_rows(('a/b', 'a/c'), np.zeros((2, 3), np.float32)).true_dtype
    # 'float32'
    """
    names = tuple(names)
    if names not in _checked_names:
        for name in names:
            _check_name(name)
        if len(set(names)) != len(names):
            twice = next(name for name in names if names.count(name) > 1)
            raise ValueError(f"array {twice!r} is written twice; names must be unique")
        _checked_names[names] = True
        evict_oldest(_checked_names, keep=16)
    data, true_dtype = _storable(names[0] if names else "rows", rows)
    if data.ndim == 0 or len(data) != len(names):
        raise ValueError(f"{len(names)} names for rows of shape {list(data.shape)}; give one name per row")
    return PreparedRows(names, data, true_dtype)


_checked_names = {}  # tuples of names prepare_rows has checked


def prepare(name, value, checksum=DEFAULT_CHECKSUM, *, hashed=True) -> PreparedArray:
    """Check ``name`` and ``value`` and hash it: the :class:`PreparedArray` :func:`write` takes.
    ``hashed=False`` leaves the CRC-32 to be taken while it is written (``checksum='crc32'`` only).

    prepare('dense/w', np.ones(3, np.float32)).checksum
    # '4a3f9a8e'
    """
    _check_name(name)
    data, true_dtype = _storable(name, value)
    header = npy_header(STORED_AS[true_dtype], data.shape)
    crc, digest = _digest(header, data, checksum) if hashed or checksum != "crc32" else (None, None)
    return PreparedArray(name, data, true_dtype, header, crc, digest)


def write(path, arrays, *, selector=None, metadata=None, array_info=None, checksum=DEFAULT_CHECKSUM,
          describe=True, _force_zip64=False) -> Manifest | None:
    """Write ``arrays`` to ``path`` atomically: a mapping (name -> numpy array, order kept), or an
    iterable of ``(name, array)`` pairs or :class:`PreparedArray` values, written as they come (one
    in memory at a time: nothing is gathered).

    ``checksum``: 'crc32' (default: the CRC-32 of each member, the one the zip format
    and ``np.load`` check too, so it costs nothing extra) or 'sha256' (also a SHA-256 of
    each array's data: stronger against random damage, about twice the CPU time).
    Neither is a signature: whoever can rewrite the file can rewrite its checksums.

    :class:`PreparedRows` (equal-shaped small arrays as the rows of one) are written as one block.

    ``selector``: the selector text to record; ``metadata``: JSON for the whole file;
    ``array_info``: name -> JSON dict kept in that array's manifest entry. A mapping's arrays
    are hashed in worker threads while earlier ones are written. Returns the file's
    :class:`Manifest`; ``describe=False`` returns None and skips making an entry object per
    array of a block (a save of thousands of small variables that never looks at it).

    write('model.npz', {'dense/w': np.ones((2, 3), np.float32)}).names
    # ('dense/w',)
    """
    path = os.fspath(path)
    if checksum not in CHECKSUMS:
        raise ValueError(f"checksum={checksum!r} is not one of {', '.join(repr(c) for c in CHECKSUMS)}")
    array_info = dict(array_info or {})
    for info in array_info.values():
        json.dumps(info)  # fail early on what JSON cannot hold
    if isinstance(arrays, collections.abc.Mapping):
        arrays = list(arrays.items())  # every array is in memory already: checked now, hashed ahead in threads
        for name, value in arrays:
            _check_name(name)
            _true_dtype(name, value)
        _check_info(array_info, {name for name, _ in arrays})
    entries, fragments, used, names = [], [], set(), set()
    with storage.replacing(path) as sink, workers.scoped_pool(2, "subsetsaver-hash") as pool:
        zip_writer = ZipWriter(sink, force_zip64=_force_zip64)
        items, index = _prepared(arrays, checksum, pool, array_info), 0
        while (item := next(items, None)) is not None:  # not enumerate(): its tuple would keep the last array
            if isinstance(item, PreparedRows):
                index = _add_rows(zip_writer, item, index, used, names, entries if describe else None, fragments)
            else:
                if item.name in names:
                    raise ValueError(f"array {item.name!r} is written twice; names must be unique")
                names.add(item.name)
                member = member_name(item.name, index, used)
                crc = zip_writer.add(member, (item.header, item.data), len(item.header) + item.data.nbytes, item.crc)
                entry = ArrayEntry(item.name, member, tuple(int(d) for d in item.data.shape), item.true_dtype,
                                   STORED_AS[item.true_dtype], int(item.data.nbytes),
                                   item.checksum if checksum == "sha256" else f"{crc:08x}",
                                   array_info.get(item.name) or {})
                entries.append(entry)
                fragments.append(_entry_json(entry))
                index += 1
            del item  # a streamed array is let go once written
        _check_info(array_info, names)
        head = Manifest(
            path=path,
            arrays=(),
            selector=selector,
            metadata=dict(metadata or {}),
            versions=versions(),
            written=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            checksum=checksum,
        )
        text = _manifest_text(head, fragments)
        zip_writer.add(MANIFEST_MEMBER, (text,), len(text), zlib.crc32(text))
        zip_writer.finish()
    return dataclasses.replace(head, arrays=tuple(entries)) if describe else None


def _add_rows(zip_writer, item, index, used, names, entries, fragments) -> int:
    """Write a block of rows, their manifest text to ``fragments`` (one piece) and, unless
    ``entries`` is None, their entries to it; returns the index of the next array."""
    import numpy as np

    if not item.names:
        return index
    if not names.isdisjoint(item.names):
        raise ValueError(f"array {min(names.intersection(item.names))!r} is written twice; names must be unique")
    names.update(item.names)
    stored = STORED_AS[item.true_dtype]
    shape = tuple(int(d) for d in item.rows.shape[1:])
    header = npy_header(stored, shape)
    row_nbytes = item.rows.nbytes // len(item.names)
    layout = _rows_layout(item.names, index, used, header, row_nbytes, zip_writer)
    crcs = zip_writer.add_rows(layout, item.rows)
    block = _row_templates(layout, item.names, shape, item.true_dtype, stored, row_nbytes)
    digits = _hex_digits(crcs)
    text = np.frombuffer(bytearray(block.text), dtype=np.uint8)
    text[block.checksum_bytes] = digits.reshape(-1)
    fragments.append(text.tobytes().decode("ascii"))
    if entries is not None:
        hexes = digits.tobytes().decode("ascii")
        entries.extend(entries_with_checksums(block.entries, [hexes[i:i + 8] for i in range(0, len(hexes), 8)]))
    return index + len(item.names)


def _rows_layout(names, index, used, header, row_nbytes, zip_writer):
    members = _row_members.get((names, index))
    if members is None or not used.isdisjoint(members):
        trial = set(used)
        members = tuple(member_name(name, index + position, trial) for position, name in enumerate(names))
        _row_members[(names, index)] = members
        evict_oldest(_row_members, keep=16)
    used.update(members)
    return rows_layout(members, header, row_nbytes, zip_writer.offset, zip_writer.force_zip64)


_row_members = {}  # (names, index of the first) -> their member names


@dataclasses.dataclass(frozen=True)
class _RowTemplates:
    """A block's manifest entries with no checksum, and its manifest text (ASCII) with the
    checksums as zeros at the ``checksum_bytes`` indices (8 per row, in order)."""

    entries: list
    text: bytes
    checksum_bytes: object  # numpy index array


def _row_templates(layout, names, shape, true_dtype, stored, row_nbytes) -> _RowTemplates:
    """The templates of a block of rows, cached per layout."""
    import numpy as np

    key = (names, layout.members, shape, true_dtype)
    found = _templates.get(key)
    if found is None:
        entries = [ArrayEntry(name, member, shape, true_dtype, stored, row_nbytes, _MARK, {})
                   for name, member in zip(names, layout.members)]
        pieces = ",".join(_entry_json(entry) for entry in entries).split(json.dumps(_MARK)[1:-1])
        starts = np.cumsum([len(piece) for piece in pieces[:-1]]) + 8 * np.arange(len(entries))
        found = _templates[key] = _RowTemplates(
            entries, "00000000".join(pieces).encode("ascii"),  # json.dumps escapes all but ASCII
            (starts[:, None] + np.arange(8)).reshape(-1))
        evict_oldest(_templates, keep=8)
    return found


_templates = {}  # (names, members, shape, dtype) -> _RowTemplates


def _hex_digits(crcs):
    """``[count, 8]`` uint8: the ASCII of ``f"{crc:08x}"`` for each of ``crcs`` (uint32)."""
    import numpy as np

    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    return np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[(crcs[:, None] >> shifts) & 0xF]


_MARK = "\u0000checksum\u0000"  # never in a name (names have no control characters), escaped in JSON


def _entry_json(entry) -> str:
    return json.dumps(manifest_to_json(Manifest(path="", arrays=(entry,)))["arrays"][0], separators=(",", ":"))


def _manifest_text(manifest, fragments) -> bytes:
    """The manifest's JSON, its entries given as text (what ``json.dumps(manifest_to_json(m))`` gives)."""
    head = json.dumps(manifest_to_json(dataclasses.replace(manifest, arrays=())), separators=(",", ":"))
    if not head.endswith('"arrays":[]}'):
        raise AssertionError("the manifest's arrays must be its last field")
    return (head[:-2] + ",".join(fragments) + "]}").encode("utf-8")


def _prepared(arrays, checksum, pool, array_info):
    """:class:`PreparedArray` (and :class:`PreparedRows`) values of ``arrays``; a list's large arrays
    hashed ahead in ``pool``. Rows are split into arrays where their block cannot carry what the
    manifest needs (a SHA-256 per array, or ``array_info``)."""
    if isinstance(arrays, list):
        futures = [pool.submit(prepare, name, value, checksum) if getattr(value, "nbytes", 0) >= HASH_IN_THREADS
                   else _FinishedFuture(prepare(name, value, checksum)) for name, value in arrays]
        for future in futures:
            yield future.result()
        return
    for item in arrays:
        if isinstance(item, PreparedRows):
            if checksum == "sha256" or not array_info.keys().isdisjoint(item.names):
                rows = item.rows.view(numpy_dtype(item.true_dtype))  # the true dtype again (bfloat16, ...)
                yield from (prepare(name, row, checksum) for name, row in zip(item.names, rows))
            else:
                yield item
        elif isinstance(item, PreparedArray):
            if checksum == "sha256" and len(item.checksum or "") != 64:
                raise ValueError(f"array {item.name!r} was prepared with crc32; prepare it with checksum='sha256'")
            yield item
        else:  # a large streamed array is checksummed while it is written (zip_writer's data descriptor)
            yield prepare(*item, checksum, hashed=getattr(item[1], "nbytes", 0) < HASH_IN_THREADS)
        del item  # before the next is fetched


def _check_info(array_info, names):
    unknown = set(array_info) - set(names)
    if unknown:
        raise ValueError(f"array_info names arrays that are not written: {', '.join(sorted(unknown))}")


def _check_name(name):
    if not isinstance(name, str):
        raise ValueError(f"array names are strings, got {name!r}")
    problem = name_problem(name)
    if problem is not None:
        raise ValueError(f"cannot write an array named {name[:80]!r}: {problem}; name it as a TensorFlow variable "
                         "('scope/name')")


def _storable(name, value):
    """(a C-contiguous little-endian array to write, its true dtype name) or a clear error."""
    import numpy as np

    array = np.asarray(value)
    true_dtype = _true_dtype(name, array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = array.copy(order="C")  # np.ascontiguousarray would turn a scalar into shape (1,)
    return _raw_view(array, true_dtype), true_dtype


def _true_dtype(name, value):
    """The true dtype name of a numeric array, or UnsupportedDtypeError naming ``name``."""
    import numpy as np

    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    true_dtype = _dtype_names.get(array.dtype)
    if true_dtype is None:
        true_dtype = _dtype_names[array.dtype] = array.dtype.name
    if true_dtype not in STORED_AS:
        kind = {"O": "Python objects", "S": "byte strings", "U": "unicode strings", "V": "raw records"}.get(
            array.dtype.kind, f"dtype {array.dtype}"
        )
        raise UnsupportedDtypeError(
            f"cannot write '{name}' to a portable checkpoint: it holds {kind}; portable checkpoints hold numeric "
            f"arrays only ({', '.join(STORED_AS)}): leave it out of the selection, or use the 'tf' backend"
        )
    return true_dtype


_dtype_names = {}  # numpy's dtype.name is slow; thousands of small arrays ask it


def _raw_view(array, true_dtype):
    """The array's bytes reinterpreted as its stored dtype, shape kept, no copy."""
    import numpy as np

    stored = np.dtype(STORED_AS[true_dtype])
    return array.view(stored) if array.dtype != stored else array


def _digest(header, raw, checksum):
    """(CRC-32 of the member: header + data, the manifest's hex checksum); both release the GIL."""
    data = bytes_of(raw)
    crc = zlib.crc32(data, zlib.crc32(header))
    return crc, (f"{crc:08x}" if checksum == "crc32" else hashlib.sha256(data).hexdigest())


class _FinishedFuture:
    """A finished future: what small arrays, hashed in this thread, give instead of ``pool.submit``."""

    def __init__(self, value):
        self._value = value

    def result(self):
        return self._value
