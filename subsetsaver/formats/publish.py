"""Putting a written checkpoint in place: at every instant the previous one or the new one restores whole.

A checkpoint of several files (a TensorFlow bundle: ``PREFIX.index`` and its
``PREFIX.data-NNNNN-of-NNNNN`` shards) is written under a hidden staging name beside its
final one, verified there, and then published: its data files are moved under their final
names first and its *commit file* (the ``.index``) last, in one atomic rename. The data
files of the new checkpoint never take the names of the old one's, because the new one is
written with a shard count the old one's files do not use (:func:`free_shard_count`): a
reader that opens the old ``.index`` still finds the old data, and one that opens the new
``.index`` finds the new data. Only once the new ``.index`` is in place are the old data
files removed. A single-file checkpoint (``.npz``, ``.safetensors``) is one rename.

Object stores have no rename: there the files are written under their final names (data
objects first, the ``.index`` last, so the commit object is never there before its data).

This module also lists a checkpoint prefix's files, for every other module that needs them.

Example::

    staged = staging_name('out/model')                  # 'out/.model.tmp-HOST-PID-RANDOM'
    publish({'out/model.data-00000-of-00002': staged + '.data-00000-of-00002',
             'out/model.index': staged + '.index'}, commit='out/model.index', replaced=bundle_files('out/model'))
"""

from __future__ import annotations

import os
import re

from .. import storage

INDEX_SUFFIX = ".index"
_DATA = re.compile(r"\.data-(?P<shard>\d{5})-of-(?P<count>\d{5})$")


def staging_name(final) -> str:
    """A hidden name beside ``final`` that says who writes it: ``DIR/.BASE.tmp-HOST-PID-RANDOM``."""
    final = os.fspath(final)
    directory, base = storage.parent(final), final[len(storage.parent(final)):].lstrip("/\\")
    return storage.join(directory, "." + storage.temporary_name(base)) if directory else "." + storage.temporary_name(base)


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


def publish(staged, *, commit, replaced=()) -> None:
    """Move each staged file under its final name (``staged``: final name -> staged path), ``commit`` last,
    then delete the files of ``replaced`` that the new checkpoint did not take the place of.

    Where the file system cannot rename (object stores), the files were written under their final
    names (final name == staged path) and only the leftovers are deleted.
    """
    for final, path in staged.items():
        if final != commit and path != final:
            storage.rename(path, final)
    if staged[commit] != commit:
        storage.rename(staged[commit], commit)
    directory = storage.parent(commit)
    storage.sync_directory(directory)
    for path in set(replaced) - set(staged):
        storage.remove(path)


def discard(paths) -> None:
    """Delete ``paths`` (a failed write's staged files), whichever exist."""
    for path in paths:
        storage.remove(path)
