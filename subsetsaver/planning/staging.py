"""Crash-safe TensorFlow checkpoint saves: write under a staging prefix, then publish.

TensorFlow's Saver writes a checkpoint's files under their final names one after the
other: SaveV2 renames its ``.data`` file and then its ``.index``, and a sharded save's
MergeV2Checkpoints writes the merged ``.index`` in place. A process killed in between
leaves a torn checkpoint under the final name, and when the save overwrote a prefix (no
``global_step``) the only checkpoint there was is gone.

Here the Saver writes to a hidden staging prefix beside the target
(``.model-100.tmp-HOST-PID-RANDOM``), which is then published
(:func:`subsetsaver.formats.tf.bundle.publish_staged`): the data files under names the
checkpoint being replaced does not use, the ``.index`` last, so at every instant the final
prefix is the old checkpoint or the new one, whole. Only then does the Saver record the
checkpoint, rewrite the state file and delete the checkpoints past ``max_to_keep``, as
``Saver.save`` does. Staged files that a killed process left behind are deleted by the
next save on the same host into the same directory; the directory's writer lock keeps a
second process out.

Paths with a scheme (``gs://``, ``ram://``) are saved by the Saver directly: object stores
publish each object whole when it is closed.

Example::

    save_staged(saver, sess, 'ckpt/model', global_step=100)
    # 'ckpt/model-100'
"""

from __future__ import annotations

import functools
import numbers
import os

from .. import storage, tf_internals
from ..formats import publish
from ..formats.tf import bundle


@functools.lru_cache(maxsize=None)
def staged_saver_class():
    """``tf.compat.v1.train.Saver`` whose ``save`` is :func:`save_staged` (so also the saves a
    ``MonitoredTrainingSession``'s CheckpointSaverHook makes through a plan's scaffold)."""
    import tensorflow as tf

    class StagedSaver(tf.compat.v1.train.Saver):
        """A Saver whose save() never leaves a torn checkpoint; see :mod:`subsetsaver.staging`."""

        def save(self, sess, save_path, global_step=None, latest_filename=None, meta_graph_suffix="meta",
                 write_meta_graph=True, write_state=True, strip_default_attrs=False, save_debug_info=False):
            return save_staged(self, sess, save_path, global_step, latest_filename=latest_filename,
                               meta_graph_suffix=meta_graph_suffix, write_meta_graph=write_meta_graph,
                               write_state=write_state, strip_default_attrs=strip_default_attrs,
                               save_debug_info=save_debug_info)

    return StagedSaver


def save_staged(saver, sess, save_path, global_step=None, *, latest_filename=None, meta_graph_suffix="meta",
                write_meta_graph=True, write_state=True, strip_default_attrs=False, save_debug_info=False) -> str:
    """``saver.save(sess, save_path, global_step, ...)`` that never leaves a torn checkpoint; returns the prefix."""
    import tensorflow as tf

    write = functools.partial(tf.compat.v1.train.Saver.save, saver, sess)  # the Saver's own save, not a subclass's
    save_path = os.fspath(save_path)
    if "://" in save_path:
        return write(save_path, global_step, latest_filename=latest_filename, meta_graph_suffix=meta_graph_suffix,
                     write_meta_graph=write_meta_graph, write_state=write_state,
                     strip_default_attrs=strip_default_attrs, save_debug_info=save_debug_info)
    final = saved_prefix(saver, sess, save_path, global_step)
    staged = staging_prefix(final)
    directory = os.path.dirname(final)
    storage.hold_directory(directory)
    try:
        write(staged, write_meta_graph=False, write_state=False)
        if write_meta_graph:
            saver.export_meta_graph(f"{final}.{meta_graph_suffix}", strip_default_attrs=strip_default_attrs,
                                    save_debug_info=save_debug_info)
    except BaseException:
        remove_checkpoint_files(staged)
        raise
    bundle.publish_staged(staged, final)
    remove_checkpoint_files(staged)  # what SaveV2 left beside its files, if anything
    if write_state:
        tf_internals.saver_record_checkpoint(saver, final)
        _write_state(saver, directory, final, saver.last_checkpoints, latest_filename)
        tf_internals.saver_retire_old_checkpoints(saver, meta_graph_suffix)
    storage.remove_abandoned(directory)
    return final


def saved_prefix(saver, sess, save_path, global_step) -> str:
    """The prefix ``Saver.save`` writes: ``SAVE_PATH-STEP`` (``%08d`` with ``pad_step_number``)."""
    if global_step is None:
        return save_path
    if not isinstance(global_step, numbers.Integral):
        import tensorflow as tf

        global_step = tf.compat.v1.train.global_step(sess, global_step)
    return f"{save_path}-{global_step:08d}" if tf_internals.saver_pads_step_number(saver) else f"{save_path}-{global_step}"


def staging_prefix(final) -> str:
    """A hidden, unique prefix beside ``final``: ``DIR/.BASE.tmp-HOST-PID-RANDOM``."""
    return publish.staging_name(final)


def remove_checkpoint_files(prefix) -> None:
    """Delete ``prefix``'s .index, data shards, SaveV2's temporary files and sharded-save directory, if any."""
    directory = storage.parent(prefix)
    base = prefix[len(directory):].lstrip("/\\")
    try:
        names = storage.list_directory(directory or ".")
    except OSError:
        names = []
    temporary = [storage.join(directory, name) for name in names if name.startswith(base) and ".tempstate" in name]
    for path in bundle.bundle_files(prefix) + temporary:
        storage.remove(path)
    storage.remove_tree(prefix + "_temp")


def _write_state(saver, directory, latest, all_paths, latest_filename):
    tf_internals.checkpoint_management().update_checkpoint_state_internal(
        save_dir=directory,
        model_checkpoint_path=latest,
        all_model_checkpoint_paths=list(all_paths),
        latest_filename=latest_filename or "checkpoint",
        save_relative_paths=tf_internals.saver_relative_paths(saver),
    )
