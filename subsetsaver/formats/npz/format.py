"""What a portable ``.npz`` checkpoint is: constants, dtypes, manifest entries, member names,
``.npy`` headers and the schema of the JSON manifest. No file is opened here.

A file is a zip archive of uncompressed members: one ``.npy`` member per array, named
after the variable (``conv_1/w`` -> ``conv_1.w.npy``), data aligned to 64 bytes in the
file, and ``__subsetsaver__.json``, the manifest, written last. Dtypes numpy's ``.npy``
format cannot describe (bfloat16, float8, int4) are stored as raw unsigned bytes of the
same width (:data:`STORED_AS`), the true dtype in the manifest.

Example::

    >>> entry = ArrayEntry('conv_1/w', 'conv_1.w.npy', (5, 5, 1, 32), 'float32', '<f4', 3200, '1a2b3c4d')
    >>> entry_spec(entry), npy_header('<f4', (5, 5, 1, 32))[:6]
    (((5, 5, 1, 32), 'float32', None), b'\\x93NUMPY')
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
import reprlib
import zlib

from ...errors import CorruptCheckpointError, clipped

FORMAT = "subsetsaver.npz"
FORMAT_VERSION = 1
MANIFEST_MEMBER = "__subsetsaver__.json"
CHECKSUMS = {"crc32": 8, "sha256": 64}  # algorithm -> hex digits
DEFAULT_CHECKSUM = "crc32"
MAX_MANIFEST_BYTES = 64 << 20
HASH_IN_THREADS = 1 << 20  # arrays at least this big are hashed in worker threads (writing and reading)

# True dtype name -> the little-endian ``.npy`` descr it is stored as.
STORED_AS = {
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "bfloat16": "<u2",
    "float8_e4m3fn": "|u1",
    "float8_e5m2": "|u1",
    "int4": "|u1",
    "uint4": "|u1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "bool": "|b1",
    "complex64": "<c8",
    "complex128": "<c16",
}
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4")
_INT64_MAX = (1 << 63) - 1
_MAX_DIMENSIONS = 64  # numpy's
_QUOTE = reprlib.Repr()
_QUOTE.maxlist = _QUOTE.maxdict = 8
_QUOTE.maxstring = _QUOTE.maxother = 80
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,250}")


# ---------------------------------------------------------------------------------
# The manifest
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArrayEntry:
    """One array of a portable checkpoint, as its manifest declares it.

    ``shape``/``dtype``: the array :func:`read` returns; ``stored_dtype``: the ``.npy``
    descr of the member; ``nbytes``: bytes of the values; ``info``: free-form JSON the
    writer attached (e.g. a partitioned variable's full shape).
    """

    name: str
    member: str
    shape: tuple
    dtype: str
    stored_dtype: str
    nbytes: int
    checksum: str  # hex digest: CRC-32 of the whole member, or SHA-256 of the data (see Manifest.checksum)
    info: dict = dataclasses.field(default_factory=dict)


def entries_with_checksums(entries, checksums) -> list:
    """Copies of ``entries`` carrying ``checksums``, each with its own empty ``info``.

    Made without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field):
    a save writes a block of thousands of small arrays each time, and this halves what their
    entries cost. ``entries_with_checksums([e], ['0badf00d'])[0] == dataclasses.replace(e,
    checksum='0badf00d', info={})``.
    """
    copies, new = [], object.__new__
    for entry, checksum in zip(entries, checksums):
        copy = new(ArrayEntry)
        copy.__dict__.update(entry.__dict__, checksum=checksum, info={})
        copies.append(copy)
    return copies


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a portable checkpoint holds: its arrays in file order, the selector and versions."""

    path: str
    arrays: tuple
    selector: str | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    versions: dict = dataclasses.field(default_factory=dict)
    written: str | None = None
    checksum: str = DEFAULT_CHECKSUM

    @property
    def names(self) -> tuple:
        return tuple(a.name for a in self.arrays)

    def entry(self, name) -> ArrayEntry:
        for array in self.arrays:
            if array.name == name:
                return array
        raise KeyError(name)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)


def entry_spec(entry) -> tuple:
    """``(logical shape, dtype name, region)`` of a manifest entry.

    ``region``: ``(offset, stored shape)`` of a part of a partitioned variable (its
    ``info`` has ``full_shape``: the logical shape), else None.

    entry_spec(manifest.entry('emb/part_1'))
    # ((100, 8), 'float32', ((50, 0), (50, 8)))
    """
    info = entry.info or {}
    if "full_shape" in info:
        return tuple(info["full_shape"]), entry.dtype, (tuple(info.get("offset", ())), entry.shape)
    return entry.shape, entry.dtype, None


# ---------------------------------------------------------------------------------
# Dtypes
# ---------------------------------------------------------------------------------


def numpy_dtype(name):
    """The numpy dtype for a true dtype name: ``numpy_dtype('bfloat16')`` is ml_dtypes' bfloat16."""
    import numpy as np

    if name in _ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


_stored_dtypes = {}


def typed_view(raw, entry):
    """View the raw bytes (uint8) of ``entry`` as its array: stored dtype, shape, then the true dtype."""
    import numpy as np

    stored = _stored_dtypes.get(entry.stored_dtype)
    if stored is None:
        stored = _stored_dtypes[entry.stored_dtype] = np.dtype(entry.stored_dtype)
    array = raw.view(stored).reshape(entry.shape)
    return array.view(numpy_dtype(entry.dtype)) if entry.dtype in _ML_DTYPES else array


# ---------------------------------------------------------------------------------
# Member names and .npy headers
# ---------------------------------------------------------------------------------


def member_name(name, index, used) -> str:
    """The zip member for array ``name`` (the ``index``-th), unique among ``used`` (which it joins)."""
    base = name.replace("/", ".")
    if not _MEMBER_NAME.fullmatch(base) or ".." in base or base.lower() == MANIFEST_MEMBER[:-5]:
        base = f"_{index}"
    member, counter = base + ".npy", 0
    while member in used:
        counter += 1
        member = f"{base}.{counter}.npy"
    used.add(member)
    return member


def member_problem(name) -> str | None:
    """Why a zip member name is refused, or None."""
    if _MEMBER_NAME.fullmatch(name) and ".." not in name and (name.endswith(".npy") or name == MANIFEST_MEMBER):
        return None
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if ".." in name:
        return "'..' in the name"
    if "/" in name or "\\" in name:
        return "a path separator in the name"
    if not _MEMBER_NAME.fullmatch(name):
        return "characters outside A-Z a-z 0-9 _ . - (or longer than 251)"
    if name != MANIFEST_MEMBER and not name.endswith(".npy"):
        return "not a '.npy' member"
    return None


_header_cache = {}


def npy_header(stored_descr, shape) -> bytes:
    """The exact ``.npy`` header numpy writes for a C-ordered array (cached)."""
    import numpy as np

    key = (stored_descr, tuple(int(d) for d in shape))
    header = _header_cache.get(key)
    if header is None:
        buffer = io.BytesIO()
        description = {"descr": stored_descr, "fortran_order": False, "shape": key[1]}
        try:
            np.lib.format.write_array_header_1_0(buffer, description)
        except ValueError:  # a header over 64 KiB (absurdly many dimensions) needs format 2.0
            buffer = io.BytesIO()
            np.lib.format.write_array_header_2_0(buffer, description)
        header = buffer.getvalue()
        if len(_header_cache) < 4096:
            _header_cache[key] = header
    return header


_header_crcs = {}


def header_crc(entry) -> int:
    """CRC-32 of the member's exact .npy header: where the member's CRC-32 over its data starts."""
    key = (entry.stored_dtype, entry.shape)
    start = _header_crcs.get(key)
    if start is None:
        start = _header_crcs[key] = zlib.crc32(npy_header(entry.stored_dtype, entry.shape))
    return start


# ---------------------------------------------------------------------------------
# The manifest's JSON
# ---------------------------------------------------------------------------------


def corruption_error(path, message, member=None) -> CorruptCheckpointError:
    """The error for a damaged file: ``'PATH', member 'NAME': MESSAGE`` (raise it)."""
    where = f"'{path}'" + (f", member '{member}'" if member else "")
    return CorruptCheckpointError(f"{where}: {message}")


def manifest_to_json(manifest) -> dict:
    """The JSON value of the manifest member."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "checksum": manifest.checksum,
        "selector": manifest.selector,
        "written": manifest.written,
        "versions": manifest.versions,
        "metadata": manifest.metadata,
        "arrays": [
            {
                "name": a.name,
                "member": a.member,
                "shape": list(a.shape),
                "dtype": a.dtype,
                "stored_dtype": a.stored_dtype,
                "nbytes": a.nbytes,
                "checksum": a.checksum,
                **({"info": a.info} if a.info else {}),
            }
            for a in manifest.arrays
        ],
    }


def manifest_from_json(content, path, member_crcs) -> Manifest:
    """The Manifest of file ``path`` from its decoded JSON, every field checked.

    ``member_crcs``: member name -> CRC-32 of every member in the zip directory; each entry
    must name one of them (and, with 'crc32' checksums, carry its CRC). Anything wrong
    raises CorruptCheckpointError naming the manifest member.
    """
    check = _SchemaCheck(path)
    check.that(isinstance(content, dict), "manifest is not a JSON object")
    check.that(content.get("format") == FORMAT, f"manifest format is {shown(content.get('format'))}, not {FORMAT!r}")
    version = content.get("format_version")
    check.that(isinstance(version, int) and not isinstance(version, bool),
               f"manifest format_version {shown(version)} is not an integer")
    check.that(version <= FORMAT_VERSION, f"format version {shown(version)} is newer than this subsetsaver reads "
               f"({FORMAT_VERSION}); upgrade subsetsaver")
    algorithm = content.get("checksum")
    check.that(isinstance(algorithm, str) and algorithm in CHECKSUMS,
               f"checksum {shown(algorithm)} is not one of {', '.join(CHECKSUMS)}")
    arrays = content.get("arrays")
    check.that(isinstance(arrays, list), "manifest has no 'arrays' list")
    entries, names, members = [], set(), set()
    for position, raw in enumerate(arrays):
        entry = _entry_from_json(raw, position, check, CHECKSUMS[algorithm])
        problem = name_problem(entry.name)
        check.that(problem is None, f"manifest array #{position} has the name {shown(entry.name)}: {problem}")
        check.that(entry.name not in names, f"manifest lists array '{clipped(entry.name)}' twice")
        check.that(entry.member not in members, f"manifest gives two arrays member '{entry.member}'")
        check.that(entry.member in member_crcs, f"array '{clipped(entry.name)}': member '{entry.member}' is not in the archive")
        if algorithm == "crc32":
            check.that(int(entry.checksum, 16) == member_crcs[entry.member],
                       f"array '{clipped(entry.name)}': checksum {entry.checksum} is not the zip directory's CRC-32 "
                       f"{member_crcs[entry.member]:08x} of member '{entry.member}'")
        if "full_shape" in entry.info:
            _check_part(entry, f"manifest array #{position} ('{clipped(entry.name)}')", check)
        names.add(entry.name)
        members.add(entry.member)
        entries.append(entry)
    for key in ("metadata", "versions"):
        check.that(isinstance(content.get(key, {}), dict), f"manifest '{key}' is not an object")
    selector = content.get("selector")
    check.that(selector is None or isinstance(selector, str), "manifest 'selector' is not text")
    return Manifest(
        path=path,
        arrays=tuple(entries),
        selector=selector,
        metadata=content.get("metadata") or {},
        versions=content.get("versions") or {},
        written=content.get("written") if isinstance(content.get("written"), str) else None,
        checksum=algorithm,
    )


def shown(value) -> str:
    """A value read from a manifest, for a message: its repr, with long strings, lists and numbers cut short.

    >>> shown(['x'] * 1000), shown(10 ** 5000)
    ("['x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', ...]", 'an integer of 5000 digits or more')
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {int(value.bit_length() * 0.30103)} digits or more"  # printing it may raise
    try:
        return clipped(_QUOTE.repr(value))
    except ValueError:  # an integer too long to print, inside a list
        return "a value too long to print"


def _check_part(entry, label, check):
    """The ``info`` of one part of a partitioned variable: a full shape and an offset of its rank that
    hold the part, and a full shape numpy can allocate."""
    full, offset = entry.info["full_shape"], entry.info.get("offset")
    numbers = all(isinstance(n, list) and len(n) == len(entry.shape) and all(
        type(d) is int and 0 <= d <= _INT64_MAX for d in n) for n in (full, offset))
    check.that(numbers, f"{label}: its part of full_shape {shown(full)} at offset {shown(offset)} is not "
                        f"{len(entry.shape)} non-negative integers each")
    inside = all(start + size <= whole for start, size, whole in zip(offset, entry.shape, full))
    check.that(inside, f"{label}: its part {list(entry.shape)} at offset {offset} does not fit in the full shape "
                       f"{full}")
    check.that(_allocatable(full, STORED_AS[entry.dtype]), f"{label}: full shape {full} is more than an array can hold")


def _allocatable(shape, stored) -> bool:
    """Whether numpy can make an array of ``shape``: its non-zero dimensions and the item size come to no
    more bytes than an int64 counts (numpy checks them even when another dimension is 0)."""
    return math.prod(d for d in shape if d) * int(stored[2:]) <= _INT64_MAX


class _SchemaCheck:
    def __init__(self, path):
        self._path = path

    def that(self, condition, message):
        if not condition:
            raise corruption_error(self._path, f"{message}; the manifest was edited or damaged", MANIFEST_MEMBER)


MAX_NAME_LENGTH = 4096
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def name_problem(name) -> str | None:
    """Why ``name`` cannot be a variable's name in a checkpoint, or None: TensorFlow names are
    non-empty '/'-separated scopes without empty, '.' or '..' parts and without control characters.

    >>> name_problem('conv_1/w'), name_problem('../w')
    (None, "a '..' part")
    """
    if not name:
        return "an empty name"
    if len(name) > MAX_NAME_LENGTH:
        return f"longer than {MAX_NAME_LENGTH} characters"
    if _CONTROL_CHARACTER.search(name):
        return "a control character"
    parts = name.split("/")
    if "" in parts:
        return "an empty part (a leading, trailing or doubled '/')"
    if "." in parts or ".." in parts:
        return f"a '{'..' if '..' in parts else '.'}' part"
    return None


_ENTRY_TYPES = (("name", str), ("member", str), ("dtype", str), ("stored_dtype", str), ("checksum", str),
                ("shape", list), ("nbytes", int))
_HEX = frozenset("0123456789abcdef")


def _entry_from_json(raw, position, check, digits) -> ArrayEntry:
    """An ArrayEntry from its manifest JSON, every field checked (messages built only on failure)."""
    if not isinstance(raw, dict):
        check.that(False, f"manifest array #{position} is not an object")
    for key, kind in _ENTRY_TYPES:
        value = raw.get(key)
        if type(value) is not kind:
            check.that(False, f"manifest array #{position} ({shown(raw.get('name'))}) has no valid '{key}'")
    dtype, stored, shape, member, digest = raw["dtype"], raw["stored_dtype"], raw["shape"], raw["member"], raw["checksum"]
    expected_storage = STORED_AS.get(dtype)
    itemsize = int(stored[2:]) if expected_storage == stored else 0
    nbytes = itemsize
    for d in shape:
        if type(d) is not int or d < 0:
            nbytes = None  # no size: not even one a crafted 'nbytes' could equal
            break
        nbytes *= d
    if (expected_storage != stored or nbytes != raw["nbytes"] or len(shape) > _MAX_DIMENSIONS
            or (nbytes == 0 and not _allocatable(shape, stored)) or len(digest) != digits
            or not _HEX.issuperset(digest) or member_problem(member) is not None or not member.endswith(".npy")
            or not isinstance(raw.get("info", {}), dict)):
        _entry_problem(raw, position, check, digits)
    return ArrayEntry(raw["name"], member, tuple(shape), dtype, stored, nbytes, digest, raw.get("info") or {})


def _entry_problem(raw, position, check, digits):
    """Raise the message for the first thing wrong with a manifest entry."""
    label = f"manifest array #{position} ({shown(raw.get('name'))})"
    dtype, stored, shape = raw["dtype"], raw["stored_dtype"], raw["shape"]
    check.that(dtype in STORED_AS, f"{label}: dtype {shown(dtype)} is not allowed (allowed: {', '.join(STORED_AS)})")
    check.that(stored == STORED_AS[dtype], f"{label}: dtype {dtype} is stored as {STORED_AS[dtype]}, not "
                                           f"{shown(stored)}")
    check.that(all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape),
               f"{label}: shape {shown(shape)} is not a list of non-negative integers")
    check.that(len(shape) <= _MAX_DIMENSIONS, f"{label}: {len(shape)} dimensions, more than numpy's {_MAX_DIMENSIONS}")
    check.that(_allocatable(shape, stored), f"{label}: shape {shown(shape)} is more than an array can hold")
    nbytes = math.prod(shape) * int(stored[2:])
    check.that(raw["nbytes"] == nbytes, f"{label}: nbytes {shown(raw['nbytes'])} is not what shape {shown(shape)} "
                                        f"{dtype} takes ({shown(nbytes)})")
    check.that(re.fullmatch(f"[0-9a-f]{{{digits}}}", raw["checksum"]) is not None,
               f"{label}: checksum is not {digits} hex digits")
    check.that(member_problem(raw["member"]) is None and raw["member"].endswith(".npy"),
               f"{label}: member {shown(raw['member'])} is not a flat '.npy' name")
    check.that(isinstance(raw.get("info", {}), dict), f"{label}: 'info' is not an object")
