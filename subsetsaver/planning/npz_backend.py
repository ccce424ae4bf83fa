"""The ``npz`` backend of a plan: portable ``.npz`` checkpoints, no SaveV2, no pickle.

Files are ``SAVE_PATH-STEP.npz``; a small state file (``checkpoint_npz.json``) names the
latest and the ones kept. Values travel through :mod:`~subsetsaver.planning.npz_ops`
(a save streams runs of about 32 MB into the file, a restore is one ``session.run``) and
the file format of :mod:`subsetsaver.formats.npz`.

Example::

    p = ss.plan(ss.trainable(), graph, backend='npz', max_to_keep=3)
    p.save(sess, '/host/ckpt/model', global_step=100)
    # '/host/ckpt/model-100.npz'
"""

from __future__ import annotations

import numbers
import os
import re

from .. import storage
from ..errors import CheckpointMismatchError, CheckpointNotFoundError, CorruptCheckpointError
from ..formats import npz
from .npz_layout import check_storable, compare_with_manifest, layout_of
from .npz_ops import ops_for
from .reports import describe_all

STATE_FILENAME = npz.STATE_FILENAME
STATE_FORMAT = npz.STATE_FORMAT


_BACKEND_OPTIONS = ("max_to_keep", "pad_step_number", "save_relative_paths", "name", "checksum")


class NpzBackend:
    """``ss.plan(sel, backend='npz')``: the planner's backend interface over portable files.

    Files are ``SAVE_PATH-STEP.npz`` (``SAVE_PATH.npz`` without a step); the "prefix"
    of this backend is that file's path. ``max_to_keep`` (default 5, None or 0: all)
    deletes the oldest files this backend wrote. A small state file
    (``checkpoint_npz.json``, written atomically) names the latest; when it is missing
    or stale, :meth:`latest_checkpoint` takes the highest-step file whose structure
    validates, never a partial file (writes go to a temporary name, then rename).

    Saver options that mean nothing here (``sharded``, ``keep_checkpoint_every_n_hours``,
    ...) raise TypeError.
    """

    name = "npz"
    saver = None

    def __init__(self, graph, variables, *, partial_restore=False, max_to_keep=5, pad_step_number=False,
                 save_relative_paths=True, checksum=npz.DEFAULT_CHECKSUM, **options):
        unknown = sorted(set(options) - set(_BACKEND_OPTIONS))
        if unknown:
            raise TypeError(
                f"backend 'npz' does not take the Saver option{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(o) for o in unknown)}; it takes {', '.join(_BACKEND_OPTIONS)}"
            )
        self.graph = graph
        self.max_to_keep = max_to_keep
        self.pad_step_number = pad_step_number
        if checksum not in npz.CHECKSUMS:
            raise ValueError(f"checksum={checksum!r} is not one of {', '.join(repr(c) for c in npz.CHECKSUMS)}")
        self.checksum = checksum
        self._keys = list(variables)
        self._layouts = {key: layout_of(key, parts) for key, parts in variables.items()}
        check_storable(self._layouts.values())
        self._ops = ops_for(graph, list(self._layouts.values()))  # now, so the graph may be finalized
        self._kept = []

    # -- writing --------------------------------------------------------------------
    def save(self, sess, save_path, global_step=None, write_state=True, latest_filename=None) -> str:
        """Write ``SAVE_PATH-STEP.npz`` (``global_step``: a number, or a tensor/variable fetched
        in the same ``session.run`` as the values); returns its path."""
        extra = [] if global_step is None or isinstance(global_step, numbers.Number) else [global_step]
        checksum = self.checksum
        fetched, arrays = self._ops.save.stream(sess, extra, lambda name, array: npz.prepare(name, array, checksum),
                                                npz.prepare_rows)
        if extra:
            global_step = fetched[0]
        path = self._path(os.fspath(save_path), global_step)
        storage.hold_directory(storage.parent(path))
        npz.write(path, arrays, metadata={"source": "plan", "global_step": _step_json(global_step)},
                  array_info=self._ops.save.array_info, checksum=self.checksum, describe=False)
        if path in self._kept:
            self._kept.remove(path)
        self._kept.append(path)
        retired = []
        if self.max_to_keep:
            while len(self._kept) > self.max_to_keep:
                retired.append(self._kept.pop(0))
        # The state file first, then the deletions: a crash in between leaves an unlisted old file,
        # never a state file that lists a deleted one.
        if write_state:
            self._write_state(os.path.dirname(path), path, latest_filename or STATE_FILENAME)
        for old in retired:
            storage.remove(old)
        storage.remove_abandoned(storage.parent(path))  # what saves killed midway left (no state file names it)
        return path

    def _path(self, save_path, global_step):
        base = save_path[:-4] if save_path.endswith(".npz") else save_path
        if global_step is None:
            return base + ".npz"
        step = int(global_step)
        return f"{base}-{step:08d}.npz" if self.pad_step_number else f"{base}-{step}.npz"

    def _write_state(self, directory, latest, filename):
        kept = [os.path.basename(p) for p in self._kept if os.path.dirname(p) == directory]
        npz.write_state(_join(directory, filename), os.path.basename(latest), kept)

    @property
    def last_checkpoints(self) -> list:
        return list(self._kept)

    # -- reading --------------------------------------------------------------------
    def restore(self, sess, prefix, names=None):
        """Load every variable (or only the file names ``names``) in one ``session.run``."""
        keys = self._keys if names is None else list(names)
        layouts = [self._layouts[key] for key in keys]
        with npz.Archive(prefix) as archive:
            missing, mismatched = compare_with_manifest(layouts, archive.manifest, {key: key for key in keys})
            if missing or mismatched:
                lines = "\n".join(describe_all(missing + mismatched))
                raise CheckpointMismatchError(f"portable checkpoint '{prefix}' does not hold what the plan "
                                              f"restores:\n{lines}", missing + mismatched)
            self._ops.restore(sess, archive, keys)

    @staticmethod
    def latest_checkpoint(directory, latest_filename=None):
        """The latest complete ``.npz`` file in ``directory``, or None."""
        directory = os.fspath(directory)
        state = npz.read_state(_join(directory, latest_filename or STATE_FILENAME))
        if state is not None and state.latest and _complete(_join(directory, state.latest)):
            return _join(directory, state.latest)
        for candidate in _candidates(directory):
            if _complete(candidate):
                return candidate
        return None

    @classmethod
    def checkpoints(cls, directory, latest_filename=None):
        """The complete ``.npz`` files of ``directory`` (a generator): the latest, then by step."""
        directory = os.fspath(directory)
        latest = cls.latest_checkpoint(directory, latest_filename)
        if latest is None:
            return
        yield latest
        yield from (path for path in _candidates(directory) if path != latest and _complete(path))

    @staticmethod
    def exists(prefix) -> bool:
        return storage.exists(prefix)

    @classmethod
    def prefix(cls, path) -> str:
        """The ``.npz`` file behind ``path``: the file, ``path + '.npz'``, or a directory's latest."""
        path = os.fspath(path)
        if storage.is_directory(path):
            latest = cls.latest_checkpoint(path)
            if latest is None:
                raise CheckpointNotFoundError(f"no portable checkpoint (.npz) in directory '{path}'")
            return latest
        for candidate in (path, path + ".npz"):
            if storage.exists(candidate) and not storage.is_directory(candidate):
                return candidate
        raise CheckpointNotFoundError(f"no portable checkpoint at '{path}' (nor '{path}.npz')")

    @staticmethod
    def contents(prefix) -> dict:
        """``{name: (logical shape, dtype)}`` from the file's manifest (no data read)."""
        manifest = npz.read_manifest(prefix)
        return {entry.name: npz.entry_spec(entry)[:2] for entry in manifest.arrays}


def _step_json(step):
    return None if step is None else int(step)


def _join(directory, name):
    return storage.join(directory, name) if directory else name


_STEP = re.compile(r"-(\d+)\.npz$")


def _candidates(directory):
    """``.npz`` files of ``directory``, newest first: highest step, then latest modification."""
    try:
        names = storage.list_directory(directory)
    except OSError:
        return []
    ranked = []
    for name in names:
        if not name.endswith(".npz"):
            continue  # temporary files end in '.tmp-PID-RANDOM'
        path = _join(directory, name)
        match = _STEP.search(name)
        try:
            modified = storage.modified(path)
        except OSError:
            continue
        ranked.append((int(match.group(1)) if match else -1, modified, path))
    return [path for _, _, path in sorted(ranked, reverse=True)]


def _complete(path) -> bool:
    try:
        npz.read_manifest(path)
    except CorruptCheckpointError:
        return False
    return True
