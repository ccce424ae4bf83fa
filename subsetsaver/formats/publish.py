"""Putting a written checkpoint in place: at every instant the previous one or the new one restores whole.

A checkpoint is written under a hidden staging name beside its final one, verified there,
and then published: its files are moved under their final names, the *commit file* its
format declares (:meth:`~subsetsaver.formats.format_protocol.CheckpointFormat.commit_file`)
last, in one atomic rename; only then are the replaced checkpoint's leftover files removed.
A format whose files must not take the old one's names before the commit (a TensorFlow
bundle's data shards) writes them under names the old one does not use
(:mod:`subsetsaver.formats.tf.bundle`). A single-file checkpoint is one rename.

Object stores have no rename: there the files are written under their final names (data
objects first, the commit object last, so it is never there before its data).

Example::

    staged = staging_name('out/model')                  # 'out/.model.tmp-HOST-PID-RANDOM'
    publish({'out/model.data-00000-of-00002': staged + '.data-00000-of-00002',
             'out/model.index': staged + '.index'}, commit='out/model.index', replaced=fmt.files('out/model'))
"""

from __future__ import annotations

import os

from .. import storage


def staging_name(final) -> str:
    """A hidden name beside ``final`` that says who writes it: ``DIR/.BASE.tmp-HOST-PID-RANDOM``."""
    final = os.fspath(final)
    directory, base = storage.parent(final), final[len(storage.parent(final)):].lstrip("/\\")
    return storage.join(directory, "." + storage.temporary_name(base)) if directory else "." + storage.temporary_name(base)


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
