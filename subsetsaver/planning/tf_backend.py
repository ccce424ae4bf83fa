"""The ``tf`` backend of a plan: TensorFlow V2 checkpoints through a staged Saver.

What a checkpoint's ``.index`` lists is read once per version of its files: :func:`cached_contents`
keeps it keyed by the identity (size, modification time, inode) of the ``.index`` and of each
``.data`` file, so a restore loop reads the index once, and a checkpoint rewritten under the same
prefix is read again.

Example::

    p = ss.plan(ss.trainable(), graph)          # backend='tf' is the default
    p.backend.contents(p.save(sess, 'ckpt/model'))['dense/w']
    # ((3, 4), 'float32')
"""

from __future__ import annotations

import collections
import os
import threading

from .. import storage, tf_internals
from ..catalog import checkpoint_contents, checkpoint_prefix, unlisted_checkpoints_error
from ..formats.tf import bundle, checkpoint_state
from .restore_ops import CheckpointRestoreOps
from .staging import staged_saver_class


class TfBackend:
    """Writes and reads TensorFlow V2 checkpoints with a ``tf.compat.v1.train.Saver``
    whose saves are staged (:mod:`subsetsaver.planning.staging`): a kill never tears one.

    ``partial_restore`` builds a :class:`~subsetsaver.planning.restore_ops.CheckpointRestoreOps`
    so that a subset can be restored (``on_mismatch='initialize'``).
    """

    name = "tf"

    def __init__(self, graph, variables, *, partial_restore, **options):
        if options.get("write_version", 2) == 1:
            raise ValueError("write_version=1 (the deprecated V1 format) is not supported; subsetsaver writes V2")
        var_list = {key: parts if len(parts) > 1 or tf_internals.slice_info(parts[0]) is not None else parts[0]
                    for key, parts in variables.items()}
        with graph.as_default():
            self.saver = staged_saver_class()(var_list, **options)
        self._partial = None
        if partial_restore:
            self._partial = CheckpointRestoreOps(graph, variables, scope="subsetsaver_restore_some")

    def save(self, sess, save_path, global_step=None, **options) -> str:
        # Outside its graph's context, Saver.save would take the eager path and fail.
        with sess.graph.as_default():
            return self.saver.save(sess, save_path, global_step=global_step, **options)

    def restore(self, sess, prefix, names=None):
        saver_def = self.saver.saver_def
        if names is None:
            sess.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: prefix})
        else:
            self._partial.run(sess, prefix, names)

    @property
    def last_checkpoints(self) -> list:
        return list(self.saver.last_checkpoints)

    @property
    def max_to_keep(self):
        return self.saver.saver_def.max_to_keep

    @staticmethod
    def latest_checkpoint(directory):
        return checkpoint_state.latest_checkpoint(directory)

    @staticmethod
    def exists(prefix) -> bool:
        return storage.exists(prefix + ".index")

    @staticmethod
    def checkpoints(directory) -> list:
        """The checkpoints the state file of ``directory`` lists, latest first; an error naming the
        checkpoints of a directory that has no state file."""
        state = checkpoint_state.read_state(directory)
        if state is None:
            error = unlisted_checkpoints_error(directory)
            if error is not None:
                raise error
            return []
        return list(dict.fromkeys([state.latest, *reversed(state.kept)]))

    @staticmethod
    def prefix(path) -> str:
        return checkpoint_prefix(path)

    @staticmethod
    def contents(prefix) -> dict:
        return dict(cached_contents(prefix))


_CONTENTS_KEPT = 64
_contents = collections.OrderedDict()  # absolute prefix -> (data file names, identity of the files, contents)
_contents_lock = threading.Lock()


def cached_contents(prefix) -> dict:
    """:func:`~subsetsaver.catalog.checkpoint_contents` of ``prefix``, read again only when one of its
    files changed or went (any save rewrites the ``.index``); the dict returned is shared: do not
    change it. Paths with a scheme (``gs://``) are read every time."""
    if "://" in prefix:
        return checkpoint_contents(prefix)
    key = os.path.abspath(prefix)
    with _contents_lock:
        cached = _contents.get(key)
    if cached is not None and _files_identity(key, cached[0]) == cached[1]:
        with _contents_lock:
            if key in _contents:
                _contents.move_to_end(key)
        return cached[2]
    names = _data_file_names(key)
    identity = _files_identity(key, names)
    contents = checkpoint_contents(prefix)  # validates the index and the data files, or raises
    if identity is not None and _files_identity(key, names) == identity:  # not rewritten while it was read
        with _contents_lock:
            _contents[key] = (names, identity, contents)
            while len(_contents) > _CONTENTS_KEPT:
                _contents.popitem(last=False)
    return contents


def _data_file_names(prefix) -> tuple:
    return tuple(bundle.data_files(prefix))


def _files_identity(prefix, data_paths):
    """The identity (device, inode, size, times) of ``PREFIX.index`` and of each of ``data_paths``;
    None when one of them cannot be read."""
    found = [storage.identity(path) for path in (prefix + ".index", *data_paths)]
    return None if None in found else tuple(found)
