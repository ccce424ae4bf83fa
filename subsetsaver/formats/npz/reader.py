"""Reading a portable checkpoint: everything validated before anything is allocated or returned.

Opening an :class:`Archive` checks the zip directory, member names (no paths, no '..',
no duplicates, no member the manifest does not list), compression (none), the
manifest's schema, every declared shape and size against the member sizes and the
file size, every ``.npy`` header byte for byte; loading then checks the checksums. Any
problem raises :class:`~subsetsaver.errors.CorruptCheckpointError` naming the member;
nothing is ever unpickled. Reading the same local file again (same inode, size and
times, and the same directory and manifest bytes) skips re-parsing its structure; the
array data are read and checksummed every time.

Example::

    manifest, arrays = read('/ckpt/model.npz')
    manifest.entry('conv_1/w').shape, arrays['conv_1/w'].dtype
    # ((5, 5, 1, 32), dtype('float32'))
"""

from __future__ import annotations

import io
import os
import struct
import zlib

from ... import bounded_json
from ...errors import SubsetSaverError, clipped
from ..memory import evict_oldest, recycled_bytes
from .format import (
    HASH_IN_THREADS,
    MANIFEST_MEMBER,
    MAX_MANIFEST_BYTES,
    Manifest,
    corruption_error,
    header_crc,
    manifest_from_json,
    member_problem,
    npy_header,
    typed_view,
)
from .parallel_read import ParallelReads, sha256_hex
from .rows import RowPlan
from .sources import open_source


def read_manifest(path) -> Manifest:
    """Validate everything but the data (directory, names, manifest, sizes, headers); the manifest.

    Cheap: reads the zip directory, the manifest and each member's headers, never the arrays.
    """
    with Archive(path) as archive:
        return archive.manifest


def read(path, names=None) -> tuple:
    """``(manifest, {name: array})`` for ``names`` (None: every array), fully validated.

    Nothing is returned unless every requested array passed every check, its checksum
    included. Arrays come back with their true dtype (bfloat16 as ``ml_dtypes.bfloat16``);
    local files are read into 64-byte aligned memory.
    """
    with Archive(path) as archive:
        return archive.manifest, archive.load(names)


def verify(path) -> Manifest:
    """Read and check every array of ``path`` (sizes, headers, checksums); the manifest."""
    with Archive(path) as archive:
        archive.load(None)
        return archive.manifest


# (path, file identity) -> (manifest, data offsets, directory start, manifest span, fingerprint) of
# local files whose structure passed validation. A later open of the same file (same inode, size,
# times) whose zip directory and manifest bytes are unchanged skips re-parsing them; anything else is
# validated again. Array data is read and checksummed on every load regardless.
_validated = {}
_locations_tables = {}  # id(manifest) -> (manifest, {name: (entry, data offset)})


class Archive:
    """An open portable checkpoint whose structure is validated: ``manifest``, then ``load(names)``.

    Opening checks everything but the data (directory, names, manifest, sizes,
    headers); :meth:`load` reads and checksums the arrays. Use it to decide what to
    load from the manifest without opening the file twice::

        with Archive(path) as archive:
            arrays = archive.load([n for n in archive.manifest.names if n in wanted])
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._source = open_source(self.path)
        try:
            identity = getattr(self._source, "identity", None)
            known = _validated.get((self.path, identity)) if identity else None
            if known is not None and self._fingerprint(known[2], known[3]) == known[4]:
                self.manifest, self._data_offsets = known[0], known[1]
            else:
                self._validate()
                if identity:
                    start, manifest = self._directory_start, (self._data_offsets[MANIFEST_MEMBER],
                                                              self._members[MANIFEST_MEMBER].file_size)
                    _validated[(self.path, identity)] = (self.manifest, self._data_offsets, start, manifest,
                                                         self._fingerprint(start, manifest))
                    evict_oldest(_validated)
        except BaseException:
            self._source.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._source.close()
        return False

    def _fingerprint(self, directory_start, manifest_span) -> bytes:
        """The zip directory and manifest bytes: a cached validation holds only while they are unchanged."""
        offset, size = manifest_span
        return self._source.read(directory_start, self._source.size - directory_start) + \
            self._source.read(offset, size)

    def _fail(self, message, member=None):
        return corruption_error(self.path, message, member)

    # -- the zip directory -----------------------------------------------------------
    def _validate(self):
        import zipfile

        try:
            with self._source.directory_stream() as stream, zipfile.ZipFile(stream) as archive:
                infos = archive.infolist()
                directory_start = archive.start_dir
        except SubsetSaverError:
            raise
        except NotImplementedError as error:  # zipfile's word for a "version needed to extract" past its own
            raise self._fail(
                f"its zip directory asks for a reader of {error}, which no portable checkpoint needs (they are "
                "zip 2.0, or 4.5 with zip64); the file was not written by subsetsaver or was tampered with; "
                "use another checkpoint"
            ) from error
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, struct.error, OSError) as error:
            raise self._fail(
                f"not a complete npz archive: its zip directory is missing or damaged ({error}); "
                "the file is truncated or was not written by subsetsaver; use another checkpoint"
            ) from error
        members = {}
        for info in infos:
            name = info.filename
            problem = member_problem(name)
            if problem:
                raise self._fail(f"refused member name: {problem}; a portable checkpoint holds only flat member "
                                 "names like 'conv_1.w.npy'", name)
            if name in members:
                raise self._fail("the zip directory lists this member twice", name)
            if info.compress_type != 0:
                raise self._fail(f"compressed (zip method {info.compress_type}); portable checkpoints store members "
                                 "uncompressed", name)
            if info.flag_bits & 0x1:
                raise self._fail("encrypted; portable checkpoints are not encrypted", name)
            if info.compress_size != info.file_size:
                raise self._fail(f"stored size {info.compress_size} differs from its size {info.file_size}", name)
            members[name] = info
        if MANIFEST_MEMBER not in members:
            raise self._fail(f"no '{MANIFEST_MEMBER}' manifest: not a subsetsaver portable checkpoint "
                             "(plain numpy .npz files lack dtypes and checksums)")
        self._directory_start = directory_start
        self._data_offsets = {}
        spans = []
        for name, info in members.items():
            offset = self._data_offset(info, directory_start)
            self._data_offsets[name] = offset
            spans.append((info.header_offset, offset + info.file_size, name))
        spans.sort()
        for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
            if start < end:
                raise self._fail(f"overlaps member '{first}' in the file", second)
        self._members = members
        self.manifest = self._read_manifest_member(members[MANIFEST_MEMBER])
        listed = {entry.member for entry in self.manifest.arrays}
        for name in members:
            if name != MANIFEST_MEMBER and name not in listed:
                raise self._fail("unexpected member: the manifest does not list it", name)
        for entry in self.manifest.arrays:
            self._check_entry(entry)

    def _data_offset(self, info, directory_start):
        """Where a member's data starts, after checking its local header against the directory."""
        name = info.filename
        fixed = self._source.read(info.header_offset, 30)
        if len(fixed) < 30:
            raise self._fail("its local header lies past the end of the file (truncated?)", name)
        signature, _, _, method, _, _, _, _, _, name_length, extra_length = struct.unpack("<IHHHHHIIIHH", fixed)
        if signature != 0x04034B50:
            raise self._fail("no local file header where the zip directory points", name)
        local_name = self._source.read(info.header_offset + 30, name_length)
        if local_name != name.encode("ascii") or method != 0:
            raise self._fail("its local header disagrees with the zip directory (name or compression)", name)
        start = info.header_offset + 30 + name_length + extra_length
        if start + info.file_size > directory_start:
            raise self._fail(f"declares {info.file_size} bytes at offset {start}, past the data area that ends "
                             f"at {directory_start} (truncated or tampered)", name)
        return start

    # -- the manifest ----------------------------------------------------------------
    def _read_manifest_member(self, info) -> Manifest:
        name = info.filename
        if info.file_size > MAX_MANIFEST_BYTES:
            raise self._fail(f"manifest of {info.file_size} bytes exceeds the {MAX_MANIFEST_BYTES} byte limit", name)
        text = self._source.read(self._data_offsets[name], info.file_size)
        if zlib.crc32(text) != info.CRC:
            raise self._fail("manifest fails its CRC-32 check: it was edited or damaged", name)
        try:
            content = bounded_json.loads(text)
        except ValueError as error:
            raise self._fail(f"manifest is not valid JSON ({error})", name) from error
        return manifest_from_json(content, self.path, {member: info.CRC for member, info in self._members.items()})

    def _check_entry(self, entry):
        """Sizes and the ``.npy`` header of one member against its manifest entry, before any allocation."""
        info = self._members[entry.member]
        header = npy_header(entry.stored_dtype, entry.shape)
        if info.file_size != len(header) + entry.nbytes:
            raise self._fail(
                f"holds {info.file_size} bytes but the manifest declares array '{clipped(entry.name)}' {list(entry.shape)} "
                f"{entry.dtype} ({entry.nbytes} data bytes + {len(header)} header bytes): truncated or tampered",
                entry.member,
            )
        found = self._source.read(self._data_offsets[entry.member], len(header))
        if found != header:
            raise self._fail(_header_problem(found, entry), entry.member)

    # -- the data --------------------------------------------------------------------
    def load(self, names, into=None):
        """Validated arrays for ``names`` (None: all), read and checksummed; all or nothing.

        ``into``: name -> a writable, C-contiguous uint8 array of exactly the entry's
        ``nbytes`` to read that array's data into, e.g. regions of one buffer that is fed
        to TensorFlow whole; those names are checked but not in the result (the caller
        has their bytes).
        """

        by_name = self.locations()
        if names is None:
            names = self.manifest.names
        else:
            missing = [n for n in names if n not in by_name]
            if missing:
                raise KeyError(f"'{self.path}' holds no array {', '.join(missing)}")
            names = dict.fromkeys(names)
        into = into or {}
        digest = _crc32_of_member if self.manifest.checksum == "crc32" else _sha256
        results = {}
        with ParallelReads(self._source.read_into, self.manifest.checksum) as large:
            for name in names:
                entry, start = by_name[name]
                target = into.get(name)
                if target is not None and target.nbytes != entry.nbytes:
                    raise ValueError(f"buffer for '{clipped(name)}' has {target.nbytes} bytes, the array {entry.nbytes}")
                raw = target if target is not None else recycled_bytes(entry.nbytes)
                if entry.nbytes < HASH_IN_THREADS:
                    self._source.read_into(start, raw)
                if entry.nbytes >= HASH_IN_THREADS:  # read (local files) and checksummed by several threads
                    large.add(entry, start, raw, header_crc(entry))
                    continue
                self._checked(entry, raw, digest(raw, entry))
                if target is None:
                    results[name] = typed_view(raw, entry)
            for entry, raw, found in large.finished():
                self._checked(entry, raw, found)
                if entry.name not in into:
                    results[entry.name] = typed_view(raw, entry)
        return {name: results[name] for name in names if name in results}  # in the order asked for

    def _checked(self, entry, raw, found):
        """Raise unless ``found`` is the entry's checksum (and a bool array holds only 0 and 1)."""
        if found != entry.checksum:
            self._mismatch(entry, found)
        if entry.dtype == "bool":
            self._check_bools(entry, raw)

    def plan_rows(self, names, rows, nbytes) -> RowPlan:
        """Where the arrays ``names`` (``nbytes`` bytes each) sit in this file, for :meth:`load_rows`
        to read them into rows ``rows`` of one buffer. Valid for as long as ``manifest`` is this one."""
        return RowPlan(self.locations(), self.path, self.manifest.checksum, names, rows, nbytes)

    def load_rows(self, plan, out) -> None:
        """Read the arrays of ``plan`` into their rows of ``out`` (uint8 ``[count, nbytes]``) and check them.

        Many small arrays in one pass: the file is read a span of members at a time,
        each span gathered into the rows with one vectorized copy, then every row is
        checksummed (and bool rows checked) before this returns; on any problem it
        raises CorruptCheckpointError and the caller must drop ``out``.
        """
        plan.gather(self._source, out)
        mismatch = plan.first_mismatch(out)
        if mismatch is not None:
            self._mismatch(*mismatch)
        for row, entry in plan.bools:
            self._check_bools(entry, out[row])

    def locations(self) -> dict:
        """name -> (entry, file offset of its data), computed once per validated file."""
        table = _locations_tables.get(id(self.manifest))
        if table is None or table[0] is not self.manifest:
            mapping = {
                entry.name: (entry, self._data_offsets[entry.member] + len(npy_header(entry.stored_dtype, entry.shape)))
                for entry in self.manifest.arrays
            }
            table = _locations_tables[id(self.manifest)] = (self.manifest, mapping)
            evict_oldest(_locations_tables)
        return table[1]

    def _mismatch(self, entry, found):
        raise self._fail(
            f"checksum mismatch for array '{clipped(entry.name)}' ({self.manifest.checksum} {_short(found)}, manifest says "
            f"{_short(entry.checksum)}): its data was altered or damaged; use another checkpoint",
            entry.member,
        )

    def _check_bools(self, entry, raw):
        if raw.size and raw.max() > 1:
            raise self._fail(f"array '{clipped(entry.name)}' holds bool bytes other than 0 and 1", entry.member)


def _header_problem(found, entry) -> str:
    """Describe a ``.npy`` header that differs from the one the manifest implies; never unpickles."""
    import numpy as np

    expected = f"{entry.stored_dtype} {list(entry.shape)}"
    try:
        stream = io.BytesIO(found)
        version = np.lib.format.read_magic(stream)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(stream)  # literal_eval of a dict: cannot run code
    except Exception:
        return f"its .npy header is damaged or not the one the manifest implies ({expected}); data altered"
    if dtype.hasobject:
        return ("holds a Python object array (dtype object), which only pickle can load; subsetsaver never "
                "unpickles: refused")
    return (f"its .npy header says {dtype.str} {clipped(list(shape))}{' fortran order' if fortran else ''}, "
            f"but the manifest declares array '{clipped(entry.name)}' as {expected}: tampered or damaged")


def _sha256(array, entry) -> str:
    return sha256_hex(array)


def _crc32_of_member(array, entry) -> str:
    """CRC-32 of the member (its exact .npy header, then the data), as 8 hex digits."""
    start = header_crc(entry)
    return f"{zlib.crc32(array.data, start) if array.size else start:08x}"


def _short(digest) -> str:
    return digest if len(digest) <= 16 else digest[:16] + "..."
