"""Sharded safetensors: ``model-00001-of-00004.safetensors``, ... and ``model.safetensors.index.json``,
the layout Hugging Face's ``save_pretrained(max_shard_size=...)`` writes and its loaders read.

The index (``{"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}``) is the checkpoint's
path and its commit file: shards are written first, the index last, so no reader ever finds an index
that names a missing or short shard. A new checkpoint's shards never take an old one's names (their
count, ``-of-NNNNN``, is one the old index's shards do not use; the shards are split finer until it
is), so the old index reads its old shards until the new index replaces it, and the count alternates
between two values. The shards of a write killed before its index are the checkpoint's files too: never
counted (a new shard may take one's name), and removed by the next write once its index is in place.
While staged, the shards are named after the staged index
(``.INDEX.tmp-HOST-PID-RANDOM.model-00001-of-00004.safetensors``), and a staged index reads them there.
Shards are cut at tensor boundaries, as ``save_pretrained`` cuts them: a tensor larger than the limit has
a shard of its own.

Example::

    written = write_checkpoint('hf/model.safetensors.index.json', tensors, checkpoint_format=sharded(10**9),
                               specs=specs)
    written.files
    # ('hf/model-00001-of-00003.safetensors', ..., 'hf/model.safetensors.index.json')
"""

from __future__ import annotations

import json
import math
import os
import re

from ... import bounded_json, storage
from ...errors import CorruptCheckpointError
from ..format_protocol import CheckpointFormat, Contents, StoredBytes, TensorInfo
from . import codec

INDEX_NAME = "model.safetensors.index.json"
INDEX_SUFFIX = ".safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 50 * 10**9
"""transformers' ``save_pretrained`` default (``"50GB"``)."""
MAX_INDEX_BYTES = 64 << 20
_SHARD = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")
_STAGED_MARK = ".tmp-"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_size(text) -> int:
    """Bytes from ``"1GB"`` (10**9), ``"500MB"``, ``"2GiB"`` (2 * 2**30) or a count of bytes, as transformers
    reads ``max_shard_size``; ValueError otherwise.

    >>> parse_size("1GB"), parse_size("2GiB"), parse_size(4096)
    (1000000000, 2147483648, 4096)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        size = text
    else:
        found = _SIZE.match(str(text)) if len(str(text)) < 40 else None
        if found is None:
            raise ValueError(f"{str(text)[:40]!r} is not a size such as 1GB, 500MB or 2GiB")
        number, unit, binary = found.groups()
        size = int(float(number) * ((1024 if binary else 1000) ** " KMGT".index(unit.upper() or " ")))
    if size <= 0:
        raise ValueError(f"a shard size must be positive, not {text!r:.40}")
    return size


def plan_shards(specs, max_bytes, avoid_counts=()) -> list:
    """``specs`` (``(name, shape, dtype)`` in order) cut into shards of at most ``max_bytes`` at tensor
    boundaries (a larger tensor alone), then the largest shard split further while the shard count is one
    of ``avoid_counts``; a list of lists of names."""
    shards, size = [], 0
    for name, shape, dtype in specs:
        nbytes = math.prod(shape) * codec.ITEM_BYTES.get(dtype, 4)
        if not shards or (shards[-1] and size + nbytes > max_bytes):
            shards.append([])
            size = 0
        shards[-1].append((name, nbytes))
        size += nbytes
    while len(shards) in set(avoid_counts):
        splittable = [index for index, shard in enumerate(shards) if len(shard) > 1]
        if not splittable:
            raise CorruptCheckpointError("cannot name the new shards apart from the directory's old ones; "
                                         "write into an empty directory")
        index = max(splittable, key=lambda position: sum(nbytes for _, nbytes in shards[position]))
        shard, half = shards[index], len(shards[index]) // 2
        shards[index:index + 1] = [shard[:half], shard[half:]]
    return [[name for name, _ in shard] for shard in shards]


def shard_name(number, count) -> str:
    return f"model-{number:05d}-of-{count:05d}.safetensors"


class ShardedSafetensorsFormat(CheckpointFormat):
    """The registry's entry; :func:`sharded` makes one that writes shards of another size."""

    name = "safetensors-sharded"
    description = "sharded safetensors"
    noun = "sharded safetensors checkpoint"
    suffixes = (INDEX_SUFFIX,)
    dtypes = frozenset(codec.CODES)
    locates_stored_bytes = True

    def __init__(self, max_shard_bytes=DEFAULT_MAX_SHARD_BYTES):
        self.max_shard_bytes = max_shard_bytes

    def recognises(self, path) -> bool:
        path = os.fspath(path)
        if storage.is_directory(path):
            return storage.exists(storage.join(path, INDEX_NAME))
        return path.endswith(INDEX_SUFFIX) and storage.exists(path)

    def resolve(self, path) -> str:
        path = os.fspath(path)
        return storage.join(path, INDEX_NAME) if storage.is_directory(path) else path

    def contents(self, path) -> Contents:
        tensors = []
        for shard, names in _by_shard(path, _weight_map(path)):
            found, _ = codec.specs(shard)
            for name in names:
                if name not in found:
                    raise CorruptCheckpointError(f"'{path}' puts '{name[:160]}' in '{shard}', which does not hold it",
                                                 path=path)
                tensors.append(TensorInfo(name, *found[name]))
        return Contents(str(path), self.name, tuple(tensors))

    def read(self, path, names):
        weight_map = _weight_map(path)
        missing = [name for name in names if name not in weight_map]
        if missing:
            raise KeyError(f"'{path}' holds no tensor '{missing[0]}'")
        run, shard = [], None
        for name in names:  # consecutive names of one shard are read in one pass over it
            where = _shard_path(path, weight_map[name])
            if where != shard and run:
                yield from codec.read(shard, run)
                run = []
            run.append(name)
            shard = where
        if run:
            yield from codec.read(shard, run)

    def stored_bytes(self, path) -> dict:
        found = {}
        for shard, names in _by_shard(path, _weight_map(path)):
            places = codec.stored_bytes(shard)
            found.update((name, StoredBytes(shard, *places[name])) for name in names if name in places)
        return found

    def files(self, path) -> list:
        path = os.fspath(path)
        directory, base = storage.parent(path), os.path.basename(path)
        if _is_staged(path):  # the staged index and the shards named after it, whichever were written
            return sorted(storage.join(directory, name) for name in _listing(directory)
                          if name == base or name.startswith(base + "."))
        shards = {_shard_path(path, shard) for shard in _named_shards(path)}
        if base == INDEX_NAME:  # and the shards a write killed before its index left under their final names
            shards |= {storage.join(directory, name) for name in _listing(directory) if _SHARD.match(name)}
        return sorted(shard for shard in shards if storage.exists(shard)) + ([path] if storage.exists(path) else [])

    def write(self, staged, tensors, *, final, specs, metadata) -> dict:
        directory = storage.parent(os.fspath(final))
        counts = {int(found.group(2)) for found in map(_SHARD.match, _named_shards(final)) if found}
        plan = plan_shards(specs, self.max_shard_bytes, counts)  # the old index's shards keep their names
        by_name = {name: (name, shape, dtype) for name, shape, dtype in specs}
        written, weight_map, stream = {}, {}, iter(tensors)
        for number, names in enumerate(plan, start=1):
            name_of_shard = shard_name(number, len(plan))
            shard_specs = [by_name[name] for name in names]
            target = _shard_path(staged, name_of_shard)
            codec.write(target, (next(stream) for _ in shard_specs), metadata, specs=shard_specs)
            written[storage.join(directory, name_of_shard)] = target
            weight_map.update((name, name_of_shard) for name in names)
        total = sum(math.prod(shape) * codec.ITEM_BYTES[dtype] for _, shape, dtype in specs)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        storage.write_bytes(staged, (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        written[os.fspath(final)] = staged
        return written


SHARDED_SAFETENSORS = ShardedSafetensorsFormat()


def sharded(max_shard_bytes) -> ShardedSafetensorsFormat:
    """The sharded format writing shards of at most ``max_shard_bytes`` (``parse_size`` reads ``"1GB"``)."""
    return ShardedSafetensorsFormat(max_shard_bytes)


def _is_staged(path) -> bool:
    base = os.path.basename(os.fspath(path))
    return base.startswith(".") and _STAGED_MARK in base


def _shard_path(index, shard) -> str:
    """Where the index at ``index`` finds ``shard``: beside it, or named after it while staged."""
    index = os.fspath(index)
    if _is_staged(index):
        return f"{index}.{shard}"
    return storage.join(storage.parent(index), shard)


def _weight_map(path) -> dict:
    try:
        index = bounded_json.loads(storage.read_bytes(path, MAX_INDEX_BYTES + 1), max_bytes=MAX_INDEX_BYTES)
    except ValueError as error:
        raise CorruptCheckpointError(f"'{path}' is not a safetensors index: {error}", path=path) from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(shard, str) and shard.endswith(codec.SUFFIX) and "/" not in shard and "\\" not in shard
            and shard not in (".", "..") for shard in weight_map.values()):
        raise CorruptCheckpointError(f"'{path}' is not a safetensors index: its \"weight_map\" must name a "
                                     ".safetensors file beside it for each tensor", path=path)
    return weight_map


def _by_shard(path, weight_map) -> list:
    """(shard path, its names in the index's order), shards in order of first mention."""
    shards = {}
    for name, shard in weight_map.items():
        shards.setdefault(_shard_path(path, shard), []).append(name)
    return list(shards.items())


def _listing(directory) -> list:
    try:
        return storage.list_directory(directory or ".")
    except OSError:
        return []


def _named_shards(index) -> set:
    """The shard files the index at ``index`` names; none where it is missing or unreadable."""
    try:
        return set(_weight_map(index).values()) if storage.exists(index) else set()
    except CorruptCheckpointError:
        return set()
