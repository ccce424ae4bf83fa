"""What every checkpoint format answers: the protocol behind the format registry.

A format is one module with one object of a :class:`CheckpointFormat` subclass, listed in
:mod:`~subsetsaver.formats.registry`. It recognises a path, lists the checkpoint's tensors
(:class:`Contents`: names, shapes, dtypes in file order, read without the data), streams
tensors out by name, writes a stream of tensors under a staging name, and names the files
a checkpoint is made of; and it declares how it is published: the file whose rename
publishes it (:meth:`CheckpointFormat.commit_file`, renamed last) and what follows once it is
in place (:meth:`CheckpointFormat.name_latest`). Checking the output, verifying, publishing
and locking are the one writer's (:mod:`~subsetsaver.formats.checkpoint_writer`), not the format's.

Example::

    fmt = registry.format_of('train/model-9000')
    fmt.name, [t.name for t in fmt.contents('train/model-9000').tensors][:2]
    # ('name', ['conv_1/b', 'conv_1/w'])
"""

from __future__ import annotations

import dataclasses

from ..errors import UnknownFormatError


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint: its name (what it is read by), shape, dtype name; for a TensorFlow
    object-based checkpoint also its ``key`` in the file and its ``object_path``."""

    name: str
    shape: tuple
    dtype: str
    key: str | None = None
    object_path: str | None = None


@dataclasses.dataclass(frozen=True)
class Contents:
    """A checkpoint's tensors in file order and what the file says of them: ``path`` (resolved: the
    latest prefix of a directory), ``format`` (its name), ``object_graph`` (object-based checkpoints),
    ``metadata`` (strings the file carries), ``recorded_roles`` (role -> names, where the file records them)."""

    path: str
    format: str
    tensors: tuple
    object_graph: object = None
    metadata: dict = dataclasses.field(default_factory=dict)
    recorded_roles: dict | None = None


@dataclasses.dataclass(frozen=True)
class StoredBytes:
    """Where a tensor's value lies as its plain bytes (little-endian, C order): ``length`` bytes at ``offset`` of
    the local or remote ``file``; ``crc32c``: the checksum the format stores of them, None where it stores none."""

    file: str
    offset: int
    length: int
    crc32c: int | None = None


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where a converted checkpoint's tensors came from, for the formats that record it
    (:meth:`CheckpointFormat.recorded`): the selector's text, the source's path and format name,
    each written tensor's roles (written name -> sorted role names), and ``subset_manifest``, a
    function giving the source's subset manifest (or None), read only by a format that records it."""

    selector: str
    source: str
    source_format: str
    roles: dict
    subset_manifest: object = None


class CheckpointFormat:
    """The protocol; subclasses set the class attributes and implement the methods.

    ``name``: how users name it (``--to NAME``); ``noun``: what one is called in a sentence; ``suffixes``: an output path ending so is written in
    this format when none is named; ``holds_parts``: it can store a partitioned variable's parts;
    ``keeps_state_file``: the directory's ``checkpoint`` state file names the newest one written (and a
    subset manifest, ``PREFIX.subset.json``, may lie beside one); ``takes_tf1_names``: a TF1 Saver restores
    it by variable name, so an object-based source's tensors are written under the names a TF1 graph gives them.
    """

    name = ""
    description = ""
    noun = "checkpoint"  # what one is called in a sentence: "wrote portable file out.npz"
    suffixes = ()
    holds_parts = False
    writable = True
    keeps_state_file = False
    takes_tf1_names = False
    dtypes = None  # the dtype names it holds; None: every dtype TensorFlow checkpoints hold
    locates_stored_bytes = False  # stored_bytes() names where its tensors' plain bytes lie

    def recognises(self, path) -> bool:
        """Whether ``path`` names an existing checkpoint of this format (cheap: names, a header)."""
        raise NotImplementedError

    def resolve(self, path) -> str:
        """The checkpoint's own path for ``path`` (a directory's latest, a prefix for a file of it)."""
        return str(path)

    def contents(self, path) -> Contents:
        """The tensors of the checkpoint at ``path``, read without their values."""
        raise NotImplementedError

    def read(self, path, names):
        """Yield ``(name, array)`` for each of ``names``, one in memory at a time, each verified."""
        raise NotImplementedError

    def stored_bytes(self, path) -> dict:
        """Name -> :class:`StoredBytes` of each tensor of the checkpoint at ``path`` stored as its value's plain
        bytes in one place: the one writer checks those by the checksum of what landed on the disk. Read from the
        header or index alone; empty where the format stores no tensor so (the default: every one is read). A
        format that answers sets ``locates_stored_bytes``: the writer then has its files read back as they land."""
        return {}

    def streams(self, path):
        """The checkpoint at ``path`` as verified streams of bytes, or None where this format (or the
        file system) reads only whole arrays. Else a context manager with ``streamable(name)``,
        ``pieces(name, buffers)`` (see :meth:`~subsetsaver.formats.tf.bundle.BundleReader.pieces`) and
        ``read(name)``, by the names :meth:`read` takes."""
        return None

    def part_reader(self, path):
        """A reader of the checkpoint at ``path`` whose ``parts(name)`` and ``read_part(name, region)`` read a
        partitioned tensor part by part (a context manager), or None where this format reads only whole
        tensors. A format that ``holds_parts`` must give one: the writer reads every part back through it."""
        return None

    def regions(self, path) -> dict:
        """Name -> (full shape, offset) of each tensor of the checkpoint at ``path`` that :meth:`read` gives as
        one part of a partitioned variable; empty where it gives every tensor whole."""
        return {}

    def files(self, path) -> list:
        """The files of the checkpoint at ``path`` that exist."""
        raise NotImplementedError

    def commit_file(self, path) -> str:
        """The file of the checkpoint at ``path`` whose arrival publishes it (renamed last)."""
        return str(path)

    def name_latest(self, path) -> None:
        """Once the checkpoint at ``path`` is published: name it its directory's latest, where this format
        keeps such a record."""

    def recorded(self, provenance) -> dict:
        """The strings this format records, from a :class:`Provenance`, of where a converted checkpoint's
        tensors came from (the ``metadata`` given to :meth:`write`)."""
        return {}

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        """Write ``tensors`` (``(name, array)`` or, where ``holds_parts``, ``(name, array, (full shape,
        offset))``) as a checkpoint at ``staged``, to be published as ``final``; ``specs``: ``(name,
        shape, dtype)`` of each in order, known in advance; ``metadata``: strings to record.
        Returns final file -> staged file."""
        raise UnknownFormatError(f"subsetsaver does not write {self.description or self.name} checkpoints")
