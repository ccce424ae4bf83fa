"""Saves that don't stop training: a snapshot taken inside the graph, written by a background thread.

Ops built once, with the plan (or the first portable save of a selection), put the values of
the saved set into FIFO queues, one queue of capacity one per run of about 32 MB. A save with
``blocking=False`` runs those ops once, in one ``session.run``, and returns: a resource
variable's value is queued without a copy (TensorFlow copies a variable's buffer on its next
update while a read still holds it), a reference variable's is copied in memory, next to the
variables. A background thread then takes the runs out of the queues one at a time (one
``session.run`` each, beside the training loop's) and writes them: the TF-free bundle writer for
TensorFlow checkpoints (the bytes SaveV2 writes), the ``.npz`` writer for portable files.

One save is in flight per set of queues. A new save waits for it (``if_busy='wait'``) or is
skipped with a warning (``'skip'``); an error in the background is raised by the next save or
``wait()``. Host memory: the queued snapshot (what training changes meanwhile costs a copy)
plus the run being written, so never more than one snapshot of the saved set.

Measured on a 1 GB saved set of resource variables (2-core machine): queueing the snapshot
blocked 3-26 ms; a ``session.run`` of the same set into numpy blocked 0.4-5 s, and
``Saver.save`` into the page cache 0.8-4 s.

Example::

    pending = plan.save(sess, 'ckpt/model', global_step=step, blocking=False)
    sess.run(train_op)            # runs while the checkpoint is written
    pending.wait()
    # 'ckpt/model-100'
"""

from __future__ import annotations

import logging
import numbers
import os
import threading
import time
import warnings
import weakref

from .. import storage, tf_internals, workers
from ..errors import SubsetSaverWarning
from ..formats.tf import bundle, checkpoint_state
from .npz_backend import NpzBackend
from .npz_layout import layout_of
from .npz_ops import save_fetches_for
from .staging import saved_prefix
from .tf_backend import TfBackend

logger = logging.getLogger("subsetsaver.planning")

IF_BUSY = ("wait", "skip")
RUN_BYTES = 32 << 20  # one queue (one session.run in the background) holds about this much
BACKGROUND_NICENESS = 10  # how much lower the writing thread's priority is than the process's


class PendingSave:
    """A save running in the background: ``wait()`` returns its path or raises its error.

    ``path``: what it writes (None while a ``global_step`` tensor is unknown, and for a
    skipped save); ``skipped``: True when ``if_busy='skip'`` dropped it; ``blocked_secs``:
    how long the caller was blocked.
    """

    def __init__(self, path=None, *, skipped=False):
        self.path = path
        self.skipped = skipped
        self.blocked_secs = 0.0
        self.error = None
        self._reported = False
        self._finished = threading.Event()
        if skipped:
            self._finished.set()

    def done(self) -> bool:
        """Whether the background write has ended (written, failed or skipped)."""
        return self._finished.is_set()

    def wait(self, timeout=None):
        """Wait until the checkpoint is durable and named latest; returns its path (None if skipped).

        Raises the error of the background write (once); TimeoutError after ``timeout`` seconds.
        """
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the save of '{self.path}' is still being written after {timeout} s")
        if self.error is not None and not self._reported:
            self._reported = True
            raise self.error
        return self.path

    def __repr__(self):
        state = "skipped" if self.skipped else "failed" if self.error else "written" if self.done() else "writing"
        return f"<PendingSave {self.path!r} {state}>"


class SnapshotQueues:
    """Queues holding one snapshot of ``runs`` (lists of variables or tensors), built now in ``graph``.

    ``put``: the op that queues a snapshot of every run; ``take(sess, index)``: the values of
    run ``index``, in order. Also the one-save-in-flight slot of whatever saves through them.
    """

    def __init__(self, graph, runs, scope):
        import tensorflow as tf

        self.runs = [list(run) for run in runs]
        self._takes = []
        with graph.as_default(), graph.control_dependencies(None), tf.compat.v1.name_scope(scope):
            values = [[_snapshot_of(item) for item in run] for run in self.runs]
            # Every run is queued only once every value was read: a failed read (an uninitialized
            # variable) queues nothing, so no queue is left full for the next save to block on.
            queues = [tf.queue.FIFOQueue(1, [value.dtype.base_dtype for value in run], name=f"run_{index}")
                      for index, run in enumerate(values)]
            with graph.control_dependencies([value.op for run in values for value in run]):
                puts = [queue.enqueue(run) for queue, run in zip(queues, values)]
            for queue in queues:
                taken = queue.dequeue()
                self._takes.append(list(taken) if isinstance(taken, (list, tuple)) else [taken])
            self.put = tf.group(*puts, name="put")
        self._lock = threading.Lock()
        self._current = None  # the PendingSave of the last save, until its outcome is seen
        self.last_seconds = None  # how long the last save took to be durable, and its bytes
        self.last_bytes = None

    def take(self, sess, index) -> list:
        return sess.run(self._takes[index])

    # -- one save in flight ------------------------------------------------------------
    def settle(self, if_busy="wait"):
        """Before a save: wait for the one in flight (``'wait'``), or say it is busy (``'skip'``:
        returns False). Raises the last save's error if nobody has seen it yet."""
        with self._lock:
            current = self._current
        if current is None:
            return True
        if not current.done() and if_busy == "skip":
            return False
        current._finished.wait()
        with self._lock:
            if self._current is current:
                self._current = None
        if current.error is not None and not current._reported:
            current._reported = True
            raise current.error
        return True

    def wait(self, timeout=None):
        """Wait for the save in flight; its path (None if none); its error if nobody saw it yet."""
        with self._lock:
            current = self._current
        if current is None:
            return None
        path = current.wait(timeout)
        with self._lock:
            if self._current is current:
                self._current = None
        return path

    def launch(self, sess, pending, write, nbytes):
        """Run ``write(take)`` in a background thread; ``take(index)`` gives the snapshot's runs in order,
        and whatever ``write`` leaves is drained, so the queues are empty for the next save."""
        taken = set()

        def take(index):
            taken.add(index)
            return self.take(sess, index)

        def work():
            _yield_to_training()
            started = time.monotonic()
            try:
                pending.path = write(take)
                self.last_seconds, self.last_bytes = time.monotonic() - started + pending.blocked_secs, nbytes
            except BaseException as error:  # kept for wait() and the next save
                pending.error = error
                logger.error("background save of '%s' failed: %s", pending.path, error)
            finally:
                try:
                    for index in range(len(self.runs)):
                        if index not in taken:
                            self.take(sess, index)
                except Exception:  # a closed session: its queues are gone with it
                    pass
                pending._finished.set()

        with self._lock:
            self._current = pending
        workers.thread(work, "subsetsaver-save")
        return pending

    def record(self, seconds, nbytes):
        """A blocking save's duration, for the next estimate (:meth:`estimate`)."""
        self.last_seconds, self.last_bytes = seconds, nbytes

    def estimate(self, nbytes):
        """Seconds a save of ``nbytes`` should take, from the last save's rate; None before any save."""
        if not self.last_seconds or not self.last_bytes:
            return None
        return self.last_seconds * nbytes / self.last_bytes


def snapshot(queues, sess, extra_fetches=(), if_busy="wait"):
    """Queue a snapshot in one ``session.run``; returns ``(values of extra_fetches, blocked seconds)``,
    or None when a save is in flight and ``if_busy='skip'`` (with a warning)."""
    if if_busy not in IF_BUSY:
        raise ValueError(f"if_busy={if_busy!r} is not one of {', '.join(repr(b) for b in IF_BUSY)}")
    started = time.monotonic()
    if not queues.settle(if_busy):
        warnings.warn("a background save is still being written; this save was skipped (if_busy='skip')",
                      SubsetSaverWarning, stacklevel=3)
        return None
    values = sess.run([queues.put, *extra_fetches])
    return values[1:], time.monotonic() - started


# ---------------------------------------------------------------------------------
# The two writers: TensorFlow bundles (Saver order, slices) and the portable backend's own save
# ---------------------------------------------------------------------------------


class BundleRuns:
    """The saved parts in the order a Saver writes them (checkpoint names sorted, parts in order),
    cut into runs of about 32 MB, and how each is added to a bundle."""

    def __init__(self, variables):
        self.runs, self.entries = [], []  # parts per run; (key, slice info or None) per part
        run, entries, size = [], [], 0
        for key in sorted(variables):
            for part in variables[key]:
                nbytes = _nbytes(part)
                if run and size + nbytes > RUN_BYTES:
                    self.runs.append(run)
                    self.entries.append(entries)
                    run, entries, size = [], [], 0
                run.append(part)
                entries.append((key, tf_internals.slice_info(part)))
                size += nbytes
        if run:
            self.runs.append(run)
            self.entries.append(entries)

    def write(self, writer, take):
        """Add every run's values to an open bundle.BundleWriter."""
        for index, entries in enumerate(self.entries):
            for (key, info), value in zip(entries, take(index)):
                if info is None:
                    writer.add(key, value)
                else:
                    writer.add_slice(key, info.full_shape, info.var_offset, value)


class SnapshotSession:
    """Stands in for a session in a backend's own save: a ``run`` of the fetches of run ``i`` of
    ``runs`` is answered with the snapshot's values of that run, so the file holds what a blocking
    save writes for those values."""

    def __init__(self, graph, runs, take):
        self.graph = graph
        self._index = {tuple(map(id, run)): index for index, run in enumerate(runs)}
        self._take = take

    def run(self, fetches, *args, **kwargs):
        index = self._index.get(tuple(map(id, fetches)))
        if index is None:
            raise RuntimeError("a background save asked for values that are not in its snapshot")
        return self._take(index)


_queues_by_fetches = weakref.WeakKeyDictionary()  # a portable selection's SaveFetches -> its SnapshotQueues
_build_lock = threading.Lock()


def queues_for(graph, fetches, *, build=True):
    """The SnapshotQueues over a portable save's runs (``SaveFetches``), built once per fetches object;
    None when not built yet and ``build`` is False (or the graph is finalized)."""
    with _build_lock:
        queues = _queues_by_fetches.get(fetches)
        if queues is None and build and not graph.finalized:
            queues = _queues_by_fetches[fetches] = SnapshotQueues(
                graph, [run[0] for run in fetches.runs], "subsetsaver_snapshot/")
        return queues


def _yield_to_training():
    """Lower this thread's scheduling priority (Linux: niceness is per thread), so that on a busy
    machine the training loop's thread comes first; the write then takes longer, not the steps."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICENESS))
    except (AttributeError, OSError):  # not Linux, or not allowed: the default priority
        pass


def _snapshot_of(item):
    """What a queue holds for ``item``: a tensor as it is (a stack is a copy already), a resource
    variable's read (copied by TensorFlow on the variable's next update), a copy of a reference
    variable (whose reads share its buffer, which training changes in place)."""
    import tensorflow as tf

    if isinstance(item, tf.Tensor):
        return tf.raw_ops.DeepCopy(x=item) if tf_internals.is_reference(item) else item
    read = tf_internals.standalone_read(item)
    if read is None:
        read = item.value()
    if tf_internals.is_reference(item.op.outputs[0]):
        return tf.raw_ops.DeepCopy(x=read)
    return read


def _nbytes(part) -> int:
    shape = part.shape
    if shape.dims is None or not shape.is_fully_defined() or part.dtype.base_dtype.name == "string":
        return 0
    return shape.num_elements() * part.dtype.base_dtype.size


def local_directory(path) -> str:
    return os.path.dirname(os.fspath(path)) or "."


# ---------------------------------------------------------------------------------
# A plan's background saves
# ---------------------------------------------------------------------------------

_OPTIONS = {TfBackend: ("write_meta_graph", "meta_graph_suffix", "write_state", "latest_filename",
                        "strip_default_attrs"),
            NpzBackend: ("write_state", "latest_filename")}


class BackgroundSaves:
    """A plan's saves with ``blocking=False``: its snapshot queues (built now) and how its backend's
    checkpoint is written from them. ``queues`` is None for a backend without background saves."""

    def __init__(self, graph, backend, variables):
        self.graph, self.backend = graph, backend
        self._bundle = self._runs = self.queues = None
        if isinstance(backend, TfBackend):
            self._bundle = BundleRuns(variables)
            self.queues = SnapshotQueues(graph, self._bundle.runs, "subsetsaver_snapshot/")
        elif isinstance(backend, NpzBackend):
            fetches = save_fetches_for(graph, [layout_of(key, parts) for key, parts in variables.items()])
            self.queues = queues_for(graph, fetches)
            self._runs = [run[0] for run in fetches.runs]

    def save(self, sess, save_path, global_step, *, if_busy, options, finish, nbytes) -> PendingSave:
        """Queue the snapshot now, then ``finish(step, write)`` in the background, where ``write(sess,
        save_path, step, **options)`` writes the checkpoint from the snapshot and returns its path."""
        if self.queues is None:
            raise TypeError(f"backend {self.backend.name!r} has no background saves; save with blocking=True")
        unknown = sorted(set(options) - set(_OPTIONS[type(self.backend)]))
        if unknown:
            raise TypeError(f"a save with blocking=False does not take {', '.join(repr(o) for o in unknown)}; "
                            f"it takes {', '.join(_OPTIONS[type(self.backend)])}")
        storage.hold_directory(local_directory(save_path))  # another process's lock fails now, before any snapshot
        extra = [] if global_step is None or isinstance(global_step, numbers.Integral) else [global_step]
        taken = snapshot(self.queues, sess, extra, if_busy)
        if taken is None:
            return PendingSave(skipped=True)
        values, blocked = taken
        step = int(values[0]) if extra else global_step
        pending = PendingSave(self._path(sess, save_path, step))
        pending.blocked_secs = blocked

        def write(take):
            if self._bundle is not None:
                return finish(step, lambda sess, path, step, **options: self._write_bundle(sess, path, step, take,
                                                                                          **options))
            session = SnapshotSession(self.graph, self._runs, take)
            return finish(step, lambda sess, path, step, **options: self.backend.save(session, path, step, **options))

        return self.queues.launch(sess, pending, write, nbytes)

    def timed(self, save, nbytes):
        """A blocking save: after the one in flight, timed for the next estimate."""
        if self.queues is None:
            return save()
        self.queues.settle()
        started = time.monotonic()
        path = save()
        self.queues.record(time.monotonic() - started, nbytes)
        return path

    def wait(self, timeout=None):
        return None if self.queues is None else self.queues.wait(timeout)

    def estimate(self, nbytes):
        return None if self.queues is None else self.queues.estimate(nbytes)

    def _path(self, sess, save_path, step):
        if self._bundle is not None:
            return saved_prefix(self.backend.saver, sess, save_path, step)
        base = save_path[:-4] if save_path.endswith(".npz") else save_path
        if step is None:
            return base + ".npz"
        return f"{base}-{int(step):08d}.npz" if self.backend.pad_step_number else f"{base}-{int(step)}.npz"

    def _write_bundle(self, sess, save_path, step, take, *, write_meta_graph=True, meta_graph_suffix="meta",
                      write_state=True, latest_filename=None, strip_default_attrs=False):
        """What ``Saver.save`` does, with the values from the snapshot and the TF-free bundle writer
        (which publishes the files so that the checkpoint it replaces, if any, stays whole until then)."""
        saver = self.backend.saver
        final = saved_prefix(saver, sess, save_path, step)
        with bundle.BundleWriter(final) as writer:
            self._bundle.write(writer, take)
        if write_meta_graph:
            with self.graph.as_default():  # the default graph is the thread's own
                saver.export_meta_graph(f"{final}.{meta_graph_suffix}", strip_default_attrs=strip_default_attrs)
        if write_state:  # only now, with every file durable, is it named latest
            tf_internals.saver_record_checkpoint(saver, final)
            checkpoint_state.write_state(os.path.dirname(final) or ".", final, saver.last_checkpoints,
                                 latest_filename or "checkpoint")
            tf_internals.saver_retire_old_checkpoints(saver, meta_graph_suffix)
        return final
