"""The one writer: every command that writes a checkpoint file goes through :func:`write_checkpoint`.

It checks the output once (not a source, not a directory, not an existing checkpoint
unless ``overwrite``), creates the missing directories (and removes them again if the
write fails), takes the directory's writer lock (a second writer is refused at once,
naming the first), removes what killed writers left, streams the tensors into the
format's writer under a staging name holding about one at a time, reads every tensor back
against the CRC32C of the bytes it was given (a tensor stored as its plain bytes is read back
from the disk while later ones are still written: :mod:`~subsetsaver.formats.landed_checksums`),
publishes the files atomically
(:mod:`~subsetsaver.formats.publish`: the previous checkpoint or the new one, whole, at
every instant), writes the subset manifest, and names the result the latest of its
directory. A progress bar shows on a terminal when a write takes more than two seconds.

Example::

    written = write_checkpoint('serve/model', [('w', w)], checkpoint_format=registry.NAME,
                               specs=[('w', w.shape, 'float32')], sources=['train/model-9000'])
    written.files
    # ('serve/model.data-00000-of-00001', 'serve/model.index')
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

from .. import storage
from ..errors import (
    CheckpointWriteError,
    CorruptCheckpointError,
    Fix,
    InvalidOutputError,
    OutputExistsError,
    SubsetSaverError,
)
from . import publish, subset_manifest
from .landed_checksums import LandedChecksums
from .memory import free_idle_buffers
from .progress import progress_bar
from .wire.crc32c import RunningCrc, crc32c


@dataclasses.dataclass(frozen=True)
class Written:
    """What :func:`write_checkpoint` wrote: the ``output``, its format's name, the tensor ``names`` in
    order, the bytes of their values, and the files that now make the checkpoint."""

    output: str
    format: str
    names: tuple
    nbytes: int
    files: tuple


def check_output(output, checkpoint_format, *, sources=(), overwrite=False) -> None:
    """Refuse ``output`` when it is one of ``sources``, a directory, or an existing checkpoint (without
    ``overwrite``): before anything is read or written."""
    output = os.fspath(output)
    for source in sources:
        if _same_path(output, source):
            raise InvalidOutputError(f"output '{output}' is the source checkpoint '{source}'; write to a new "
                                     "path", path=output)
    if storage.is_directory(output):
        example = storage.join(output, "model" + (checkpoint_format.suffixes[:1] or ("",))[0])
        raise InvalidOutputError(f"output '{output}' is a directory; name a checkpoint in it such as "
                                 f"'{example}'", path=output)
    existing = checkpoint_format.files(output)
    if existing and not overwrite:
        raise OutputExistsError(f"checkpoint '{output}' already exists ({existing[0]})", path=output,
                                fixes=[Fix("overwrite", True, "to replace it")])


@contextlib.contextmanager
def writing(output, checkpoint_format, *, sources=(), overwrite=False):
    """``with writing(output, fmt) as staged:`` write the checkpoint at ``staged``, then publish it.

    Checks the output, creates its missing directories, takes the directory's writer lock and
    removes what killed writers left; yields the staging path (``output`` itself where the file
    system cannot rename). On an error the staged files and the directories it created go.
    """
    output = os.fspath(output)
    check_output(output, checkpoint_format, sources=sources, overwrite=overwrite)
    directory = storage.parent(output)
    created = storage.make_directories(directory)
    staged = output
    try:
        storage.hold_directory(directory)
        storage.remove_abandoned(directory)
        if storage.can_rename(output):
            staged = publish.staging_name(output)
        yield staged
    except BaseException as error:
        if staged != output:
            publish.discard(checkpoint_format.files(staged))
        for made in reversed(created):
            storage.remove_directory(made)
        if isinstance(error, OSError) and not isinstance(error, SubsetSaverError):  # a full disk, no permission
            failure = CheckpointWriteError(f"cannot write '{output}': {error.strerror or error}; nothing was "
                                           "written under that name", path=output)
            failure.errno = error.errno
            raise failure from error
        raise


def write_checkpoint(output, tensors, *, checkpoint_format, specs, sources=(), overwrite=False, metadata=None,
                     manifest=None, progress=True) -> Written:
    """Write ``tensors`` (``(name, array)``, or ``(name, array, (full shape, offset))`` for a part of a
    partitioned variable where the format holds parts) as the checkpoint ``output``; see the module.

    ``specs``: ``(name, shape, dtype name)`` of each tensor in the order they come (known before the
    values, so formats whose header comes first can stream); ``metadata``: strings the format records;
    ``manifest``: the subset manifest's content, written beside a TensorFlow checkpoint.
    """
    output = os.fspath(output)
    expected, parts, nbytes = {}, {}, 0
    landed = LandedChecksums() if checkpoint_format.locates_stored_bytes else None  # else read once written
    with writing(output, checkpoint_format, sources=sources, overwrite=overwrite) as staged:
        with progress_bar(sum(_nbytes(shape, dtype) for _, shape, dtype in specs),
                          os.path.basename(output) or output, progress) as bar, storage.reporting_landed(landed):
            def counted():
                nonlocal nbytes
                for item in tensors:
                    name, array = item[0], item[1]
                    if len(item) == 3:
                        parts.setdefault(name, {})[tuple(int(n) for n in item[2][1])] = _expected(array)
                    else:
                        expected[name] = _expected(array)
                    nbytes += array.nbytes
                    bar.update(array.nbytes)
                    yield item
                    del item, array

            staged_files = checkpoint_format.write(staged, counted(), final=output, specs=list(specs),
                                                   metadata=dict(metadata or {}))
        free_idle_buffers()  # what the reads left idle (resident until the kernel wants it) goes before verifying
        if staged != output:
            verify(checkpoint_format, staged, expected, parts, landed)
        if checkpoint_format.keeps_state_file:
            subset_manifest.remove_manifest(output)
        publish.publish(staged_files, commit=checkpoint_format.commit_file(output),
                        replaced=checkpoint_format.files(output))
    if staged == output:  # object stores: verified where it now is
        verify(checkpoint_format, output, expected, parts)
    if manifest is not None:
        subset_manifest.write_manifest(output, manifest)
    checkpoint_format.name_latest(output)
    return Written(output, checkpoint_format.name, tuple(name for name, _, _ in specs), nbytes,
                   tuple(checkpoint_format.files(output)))


def verify(checkpoint_format, path, expected, parts=None, landed=None) -> None:
    """Read back every tensor ``expected`` (name -> (shape, dtype, CRC32C of the bytes given)) from the
    checkpoint at ``path``, one at a time, and every part of ``parts`` (name -> {offset: the same}); its
    names must be those. CorruptCheckpointError otherwise. With ``landed`` (the :class:`LandedChecksums`
    of the write), a tensor stored as its plain bytes by one write is checked by the checksum of those
    bytes as the disk gave them back while they were written, its shape and dtype by the header or index."""
    with storage.reading_back():  # what was written past the page cache is read from the disk
        _verify(checkpoint_format, path, expected, dict(parts or {}), landed)


def _verify(checkpoint_format, path, expected, parts, landed):
    tensors = {info.name: info for info in checkpoint_format.contents(path).tensors}
    wanted = set(expected) | set(parts)
    if set(tensors) != wanted:
        unexpected = sorted(set(tensors) ^ wanted)
        raise CorruptCheckpointError(f"checkpoint '{path}' holds {unexpected[:5]} unexpectedly; it was not completed",
                                     path=path)
    unread = list(expected)
    if landed is not None:
        places, unread = checkpoint_format.stored_bytes(path), []
        for name in expected:
            place = places.get(name)
            checksum = None if place is None else landed.checksum(place.file, place.offset, place.length)
            if checksum is None:
                unread.append(name)
            else:
                _compare_landed(path, name, tensors[name], place, checksum, expected[name])
    for name, value in checkpoint_format.read(path, unread):
        _compare(path, name, value, expected[name])
        del value
    if parts:
        reader = checkpoint_format.part_reader(path)
        if reader is None:
            raise TypeError(f"the {checkpoint_format.name} format was given parts it cannot read back to verify")
        with reader:
            for name, written in parts.items():
                regions = {tuple(start for start, _stop in region): region for region in reader.parts(name)}
                if not regions and len(written) == 1:  # one part covering it all is stored whole
                    _compare(path, name, reader.read(name), next(iter(written.values())))
                    continue
                if set(regions) != set(written):
                    raise CorruptCheckpointError(f"checkpoint '{path}': tensor '{name}' holds other parts than "
                                                 "were written; write it again", path=path)
                for offset, region in regions.items():
                    _compare(path, name, reader.read_part(name, region), written[offset])


def _expected(array) -> tuple:
    """(shape, dtype, checksum) of a tensor given to the writer: its checksum taken in the background
    while the format writes it."""
    return tuple(array.shape), array.dtype, _checksum_of(array)


def _compare(path, name, value, expected):
    shape, dtype, checksum = expected
    if value.shape != shape or value.dtype != dtype or _crc_of(value) != _value(checksum):
        raise _read_back_wrong(path, name)


def _compare_landed(path, name, info, place, landed_checksum, expected):
    """Check tensor ``name`` by its :class:`~.format_protocol.TensorInfo`, its stored bytes' place and the
    checksum of those bytes as they landed, against what it was given."""
    import numpy as np

    shape, dtype, checksum = expected
    checksum = _value(checksum)
    if (tuple(info.shape) != tuple(shape) or info.dtype != np.dtype(dtype).name or landed_checksum != checksum
            or place.crc32c not in (None, checksum)):
        raise _read_back_wrong(path, name)


def _value(checksum) -> int:
    return checksum.value() if isinstance(checksum, RunningCrc) else checksum


def _read_back_wrong(path, name) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"checkpoint '{path}': tensor '{name}' reads back other than it was written; "
                                  "the disk or the file system lost bytes: write it again", path=path)


def _checksum_of(array):
    """:func:`_crc_of` ``array``: a RunningCrc for one of fixed-width elements, taken on the checksum thread."""
    import numpy as np

    array = np.asarray(array)
    if array.dtype.kind in "OSU":
        return _crc_of(array)
    running = RunningCrc()
    running.feed(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    return running


def _crc_of(array) -> int:
    import numpy as np

    array = np.asarray(array)
    if array.dtype.kind in "OSU":  # strings: their elements' bytes
        return crc32c(b"\0".join(e if isinstance(e, bytes) else str(e).encode("utf-8") for e in array.reshape(-1)))
    return crc32c(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


def _nbytes(shape, dtype) -> int:
    import numpy as np

    try:
        size = int(np.dtype(dtype).itemsize)
    except TypeError:
        size = 2  # bfloat16 and the other ml_dtypes names numpy does not know by name
    count = 1
    for dimension in shape:
        count *= int(dimension)
    return count * size


def _same_path(a, b) -> bool:
    a, b = os.fspath(a), os.fspath(b)
    if storage.is_local(a) and storage.is_local(b):
        return os.path.abspath(storage.local_path(a)) == os.path.abspath(storage.local_path(b))
    return a.rstrip("/") == b.rstrip("/")
