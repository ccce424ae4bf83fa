"""The files of a TensorFlow checkpoint prefix: its ``.index`` and its ``.data-NNNNN-of-NNNNN`` shards.

Every module that lists a prefix's files asks here. A new checkpoint is published over an old
one with a shard count the old one's data files do not use (:func:`free_shard_count`), so a
reader that opens the old ``.index`` still finds the old data until the new ``.index`` replaces
it (:mod:`subsetsaver.formats.publish`).

Example::

    bundle_files('out/model')
    # ['out/model.data-00000-of-00001', 'out/model.index']
    shard_count_of('out/model.data-00000-of-00002')
    # 2
"""

from __future__ import annotations

import os
import re

from .... import storage

INDEX_SUFFIX = ".index"
_DATA = re.compile(r"\.data-(?P<shard>\d{5})-of-(?P<count>\d{5})$")


def bundle_files(prefix) -> list:
    """The files of the TensorFlow checkpoint ``prefix`` that are there: its ``.index`` and every
    ``.data-NNNNN-of-NNNNN`` shard (of any shard count), sorted."""
    prefix = os.fspath(prefix)
    directory = storage.parent(prefix)
    base = prefix[len(directory):].lstrip("/\\")
    try:
        names = storage.list_directory(directory or ".")
    except OSError:
        return []
    found = [storage.join(directory, name) if directory else name for name in names
             if name == base + INDEX_SUFFIX or (name.startswith(base + ".data-") and _DATA.search(name[len(base):]))]
    return sorted(found)


def data_files(prefix) -> list:
    """The ``.data-NNNNN-of-NNNNN`` shard files of ``prefix`` that are there, sorted."""
    return [path for path in bundle_files(prefix) if not path.endswith(INDEX_SUFFIX)]


def shard_count_of(path) -> int:
    """The shard count a data file's name says: 2 for ``model.data-00000-of-00002``."""
    return int(_DATA.search(path)["count"])


def free_shard_count(prefix, wanted=1) -> int:
    """The smallest shard count of at least ``wanted`` whose data file names no file of ``prefix`` holds,
    so that a checkpoint written with it can be published over ``prefix`` without touching the old files."""
    used = {shard_count_of(path) for path in data_files(prefix)}
    count = wanted
    while count in used:
        count += 1
    return count


def checkpoint_bytes(prefix) -> int:
    """Bytes of the files of the TensorFlow checkpoint ``prefix``."""
    return sum(storage.size(path) for path in bundle_files(prefix))
