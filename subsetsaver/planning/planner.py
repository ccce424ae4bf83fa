"""The plan: one Saver over the chosen variables, one initializer for the rest.

``plan(sel, graph)`` resolves a selector, builds every op it will ever run (the Saver's
save and restore ops, the initializer of the rest, a "what is still uninitialized"
check of the variables a restore cannot be seen to initialize, and, for
``on_mismatch='initialize'``, restore ops that can load any subset), and returns a
:class:`Plan`. After that the graph may be finalized: saving and restoring only run
existing ops, one ``session.run`` per step. A restore reads the checkpoint's index once
per version of its files (see :func:`~subsetsaver.planning.tf_backend.cached_contents`).

Example::

    p = plan(trainable() | scope('conv_1/bn') | scope('conv_2/bn'), graph)
    graph.finalize()
    with tf.compat.v1.Session(graph=graph) as sess:
        report = p.restore_or_initialize(sess, 'ckpt/')   # latest checkpoint, or init
        ...
        p.save(sess, 'ckpt/model', global_step=step)
    print(p.summary())
"""


from __future__ import annotations

import dataclasses
import errno
import functools
import os
import warnings

from .. import catalog as catalog_module
from .. import tf_internals
from ..errors import (
    CheckpointNotFoundError,
    CheckpointWriteError,
    CorruptCheckpointError,
    RowMapError,
    SubsetSaverError,
    SubsetSaverWarning,
    UninitializedVariablesError,
    first_line,
)
from ..formats import subset_manifest
from ..graph_mode import tensorflow
from ..selectors import format_bytes
from . import sizes as sizes_module
from .arguments import audited_names, checked_selector
from .averages import AverageRestorer
from .backends import backend_class
from .background import BackgroundSaves
from .remap import checkpoint_names, nearest_names, suggest_remap
from .reports import CheckReport, Problem, RestoreReport, compare_contents
from .row_rules import RowRules, split_remap
from .scaffold import scaffold as training_scaffold
from .tf_backend import TfBackend

# errno -> how TensorFlow's errors spell it (its OpErrors carry no errno)
_WRITE_FAILURES = {errno.ENOSPC: "No space left on device", errno.EACCES: "Permission denied",
                   errno.EROFS: "Read-only file system", errno.EDQUOT: "Disk quota exceeded"}
_REJECTED_SAVER_OPTIONS = {
    "var_list": "pass a selector to plan() instead",
    "defer_build": "a plan builds everything at plan time",
}




def plan(sel, graph=None, *, remap=None, rows=None, on_mismatch="error", backend="tf", use_averages=None,
         strict=False, **saver_kwargs) -> Plan:
    """Build the plan for saving ``sel`` and initializing every other variable.

    ``sel``: a selector or its text. ``graph``: a ``tf.Graph`` (None: the default
    graph) or a ``.meta`` file. ``remap``: restore from checkpoints whose names differ
    (see :func:`checkpoint_names`; ``{"shared/emb": ["encoder/emb", "decoder/emb"]}`` reads one
    tensor into several variables). ``rows``: ``{VARIABLE_OR_SCOPE: RowMap}``, rows moved with
    their optimizer slots (see :mod:`subsetsaver.planning.row_rules`). ``on_mismatch``: 'error' (a restore with a missing,
    reshaped or retyped variable raises one CheckpointMismatchError listing them all) or
    'initialize' (those variables are initialized and reported). ``backend``: 'tf'
    (TensorFlow checkpoints through a Saver) or another registered backend (see
    :class:`TfBackend` for the interface). ``use_averages``: True, an
    ``ExponentialMovingAverage`` or its name: a restore takes each variable from its
    moving-average shadow when the checkpoint holds one (``v/ExponentialMovingAverage``),
    from the variable itself otherwise, and reports which in ``from_averages`` (see
    :class:`subsetsaver.planning.averages.AverageRestorer`). ``saver_kwargs`` go to
    ``tf.compat.v1.train.Saver`` (``max_to_keep``, ``sharded``, ...).

    The audit runs first: each error finding (e.g. batch-norm statistics the selection
    forgets) is a ``SubsetSaverWarning``; ``strict=True`` raises them as one error
    before any op is built (see :func:`subsetsaver.audit.audit_errors`).

    p = plan(trainable() | bn_stats(), graph, max_to_keep=3)
    """
    tensorflow("ss.plan")
    sel = checked_selector("plan", sel, on_mismatch)
    backend_type = backend_class(backend)
    for option, why in _REJECTED_SAVER_OPTIONS.items():
        if option in saver_kwargs:
            raise TypeError(f"plan() does not take the Saver option {option!r}: {why}")

    catalog = catalog_module.load(graph, live=True)  # a .meta file is imported: the plan builds ops in it
    if catalog.graph is None:
        raise TypeError(f"plan() needs a graph with variables, not a {catalog.kind}; pass a tf.Graph or a .meta file")
    saved_names = audited_names(sel, catalog, strict=strict)
    return Plan(sel, catalog, saved_names, remap=remap, on_mismatch=on_mismatch, backend=backend_type,
                saver_kwargs=saver_kwargs, use_averages=use_averages, rows=rows)


class Plan:
    """A Saver over the chosen variables and an initializer for the rest; see :func:`plan`.

    Attributes: ``selector``, ``catalog``, ``graph``, ``saved``/``rest`` (tf.Variable
    lists, partitions expanded), ``saved_names``/``rest_names`` (names in creation
    order), ``checkpoint_names`` (name -> name in the checkpoint), ``saver``,
    ``init_op``, ``sizes``, ``backend``, ``on_mismatch``, ``remap``.
    """

    def __init__(self, selector, catalog, saved_names, *, remap, on_mismatch, backend, saver_kwargs,
                 use_averages=None, rows=None):
        import tensorflow as tf

        self.selector = selector
        self.catalog = catalog
        self.graph = catalog.graph
        self.on_mismatch = on_mismatch
        self.remap = dict(remap) if remap else None
        chosen = set(saved_names)
        self.saved_names = tuple(saved_names)
        self.rest_names = tuple(n for n in catalog.ordered_names if n not in chosen)
        self.saved = catalog.variables(self.saved_names)
        self.rest = catalog.variables(self.rest_names)
        self._parts = {name: catalog.variables([name]) for name in catalog.ordered_names}
        plain_remap, fanout = split_remap(self.remap)
        self._rows = RowRules(self, rows, fanout) if rows or fanout else None  # checked before anything is built
        if self._rows is not None and (backend.name != "tf" or use_averages not in (None, False)):
            raise RowMapError("rows= and one-to-many remap rules restore TensorFlow checkpoints: use backend='tf' "
                              "without use_averages")
        fanned = self._rows.sources if self._rows is not None else {}
        self.checkpoint_names = {**checkpoint_names([n for n in self.saved_names if n not in fanned], plain_remap),
                                 **{name: name for name in fanned}}
        variables = {self.checkpoint_names[name]: self._parts[name] for name in self.saved_names}
        self.backend = backend(self.graph, variables, partial_restore=on_mismatch == "initialize", **saver_kwargs)
        self._background = BackgroundSaves(self.graph, self.backend, variables)  # its snapshot ops, now
        with self.graph.as_default(), tf.compat.v1.name_scope("subsetsaver"):
            self.init_op = tf.compat.v1.variables_initializer(self.rest, name="initialize_rest")
            self._initialize_all = tf.group(self.init_op, *(v.initializer for v in self.saved), name="initialize_all")
            # What a restore or an initialization cannot be seen to initialize is checked after it runs.
            # The Saver's restore op assigns every saved variable, and an initializer that assigns its
            # variable initializes it; with another backend every saved variable is checked.
            restored_seen = issubclass(backend, TfBackend)
            checked = [(name, part) for names, seen in ((self.saved_names, restored_seen), (self.rest_names, True))
                       for name in names for part in self._parts[name] if not (seen and _initializes(part))]
            self._checked_names = [name for name, _part in checked]
            self._initialized = _initialized_flags([part for _name, part in checked]) if checked else None
        self._checkpoint_to_name = {key: name for name, key in self.checkpoint_names.items()}
        if self._rows is not None:
            self._rows.build()
        self.use_averages = use_averages
        self._averages = None
        if use_averages is not None and use_averages is not False:
            self._averages = AverageRestorer(self, ema=None if use_averages is True else use_averages)

    # -- what a plan is ----------------------------------------------------------------
    @property
    def saver(self):
        """The ``tf.compat.v1.train.Saver`` over :attr:`saved`, built at plan time."""
        return self.backend.saver

    def spec(self, name) -> tuple:
        """(shape, dtype name) of a variable of the graph; a partitioned one's full shape."""
        parts = self._parts[name]
        head = parts[0]
        info = tf_internals.slice_info(head)
        if info is not None:
            shape = tuple(info.full_shape)
        else:
            shape = tuple(head.shape.as_list()) if head.shape.dims is not None else None
        return shape, head.dtype.base_dtype.name

    @functools.cached_property
    def sizes(self) -> sizes_module.PlanSizes:
        """Bytes saved/initialized, exact .data and estimated .index sizes, vs a full Saver."""
        tensors = self._saved_tensors(self.saved_names, self.checkpoint_names)
        global_variables = self.catalog.collection("variables")
        global_names = [n for n in self.catalog.ordered_names if n in global_variables]
        full = self._saved_tensors(global_names, {n: n for n in global_names})
        per_scope = {}
        for fate, names in (("saved", self.saved_names), ("rest", self.rest_names)):
            for name in names:
                scope = name.split("/", 1)[0] if "/" in name else "(root)"
                counts = per_scope.setdefault(scope, {"saved": [0, 0], "rest": [0, 0]})
                counts[fate][0] += 1
                counts[fate][1] += self.catalog.nbytes([name])
        saved_bytes = self.catalog.nbytes(self.saved_names)
        rest_bytes = self.catalog.nbytes(self.rest_names)
        return sizes_module.PlanSizes(
            saved_bytes=saved_bytes,
            rest_bytes=rest_bytes,
            total_bytes=saved_bytes + rest_bytes,
            data_bytes=sizes_module.data_bytes(tensors),
            index_bytes=sizes_module.index_bytes(tensors),
            data_files=len(sizes_module.data_bytes_per_shard(tensors)),
            full_data_bytes=sizes_module.data_bytes(full),
            full_index_bytes=sizes_module.index_bytes(full),
            per_scope=tuple(
                sizes_module.ScopeSize(scope, c["saved"][0], c["saved"][1], c["rest"][0], c["rest"][1])
                for scope, c in sorted(per_scope.items())
            ),
            exact=all(t.exact for t in tensors),
        )

    def _saved_tensors(self, names, keys) -> list:
        """The tensors a Saver writes for ``names``, in its write order (sorted by key)."""
        sharded = tf_internals.saver_is_sharded(self.saver)
        devices = sorted({_device(part) for name in names for part in self._parts[name]}) if sharded else [""]
        tensors = []
        for key, name in sorted((keys[n], n) for n in names):
            for part in self._parts[name]:
                shard = devices.index(_device(part)) if sharded else 0
                dtype = part.dtype.base_dtype.name
                shape = tuple(part.shape.as_list()) if part.shape.dims is not None else (None,)
                info = tf_internals.slice_info(part)
                if info is not None:
                    tensors.append(sizes_module.SavedTensor(key, dtype, tuple(info.var_shape),
                                                            tuple(info.full_shape), tuple(info.var_offset), shard))
                else:
                    tensors.append(sizes_module.SavedTensor(key, dtype, shape, shard=shard))
        return tensors

    # -- pre-flight --------------------------------------------------------------------
    def check(self, checkpoint) -> CheckReport:
        """Compare the plan with a checkpoint (prefix, file or directory) without touching variables."""
        prefix = self.backend.prefix(checkpoint)
        return self._check(prefix)

    def _check(self, prefix, with_manifest=True) -> CheckReport:
        contents = self.backend.contents(prefix)
        rows = self._rows.decide(contents) if self._rows is not None else None
        expected = self._expected if rows is None else rows.expected
        unmatched = sorted(k for k in contents if k not in self._checkpoint_to_name and not (rows and k in rows.read))
        missing = [key for _name, key, *_spec in expected if key not in contents]
        remap, resolves = None, 0
        if missing and not self.remap:  # a suggestion is checked against every name, shape and dtype
            specs = {name: self.spec(name) for name in self.saved_names}
            remap, resolves = suggest_remap(missing, unmatched, expected=specs, contents=contents)
        nearest = nearest_names(missing, unmatched or sorted(contents), remap) if missing else {}
        problems = compare_contents(expected, contents, nearest) + (rows.problems if rows else [])
        rest = set(self.rest_names) if unmatched else ()
        for key in unmatched:
            found_shape, found_dtype = contents[key]
            problems.append(Problem("unexpected", key if key in rest else None, key,
                                    found_shape=found_shape, found_dtype=found_dtype))
        return CheckReport(
            checkpoint=prefix,
            selector=repr(self.selector),
            problems=tuple(problems),
            remap=remap,
            remap_resolves=resolves,
            manifest=_manifest_or_none(prefix) if with_manifest else None,
        )

    @functools.cached_property
    def _expected(self) -> list:
        """``(name, checkpoint name, shape, dtype)`` of every saved variable, in the plan's order."""
        return [(name, self.checkpoint_names[name], *self.spec(name)) for name in self.saved_names]

    # -- running -----------------------------------------------------------------------
    def restore_or_initialize(self, sess, checkpoint) -> RestoreReport:
        """Restore :attr:`saved` from ``checkpoint`` and initialize :attr:`rest`; or, with no
        checkpoint (None, or a directory that holds none yet), initialize everything.

        The checkpoint is checked first: with ``on_mismatch='error'`` any missing,
        reshaped or retyped variable raises one CheckpointMismatchError before a variable
        is touched. The saved variables are restored before the rest is initialized, so
        initializers that read them (moving averages of weights) see restored values.
        Given a directory, a damaged latest checkpoint (torn by a crash, truncated,
        failing its checksums) is skipped with a ``SubsetSaverWarning`` and the next
        newest one the directory lists is restored; CorruptCheckpointError if none is whole.
        """
        import tensorflow as tf

        self._check_session(sess)
        path = None if checkpoint is None else os.fspath(checkpoint)
        if path is not None and not tf.io.gfile.isdir(path):
            return self._restore_from(sess, self.backend.prefix(path))
        damaged = []
        for prefix in self.backend.checkpoints(path) if path is not None else ():
            if damaged:
                warnings.warn(f"skipped damaged checkpoint '{damaged[-1][0]}' ({first_line(damaged[-1][1])}); "
                              f"restoring '{prefix}'", SubsetSaverWarning, stacklevel=2)
            try:
                return self._restore_from(sess, prefix)
            except CorruptCheckpointError as error:
                damaged.append((prefix, error))
        if len(damaged) == 1:
            raise damaged[0][1]
        if damaged:
            listing = "\n".join(f"  '{prefix}': {first_line(error)}" for prefix, error in damaged)
            raise CorruptCheckpointError(f"no checkpoint in '{path}' is whole; each failed:\n{listing}\n"
                                         "restore from a copy, or pass None to start from initial values")
        sess.run(self._initialize_all)
        self._confirm_initialized(sess, "after initializing")
        return RestoreReport(None, (), tuple(self.catalog.ordered_names))

    def _restore_from(self, sess, prefix) -> RestoreReport:
        if self._averages is not None:
            return self._averages.restore_or_initialize(sess, prefix)
        report = self._check(prefix, with_manifest=False)  # the manifest only words an error
        mismatched = report.blocking
        if mismatched and self.on_mismatch == "error":
            report = dataclasses.replace(report, manifest=_manifest_or_none(prefix))
            raise report.error()
        import tensorflow as tf

        bad = {p.name for p in mismatched}
        try:
            if self._rows is not None:
                self._rows.restore(sess, prefix, self._rows.decide(self.backend.contents(prefix)), bad)
                fallback = [part.initializer for name in self.saved_names if name in bad for part in self._parts[name]]
                if self.rest_names or fallback:  # a session.run of nothing costs a tenth of a millisecond
                    sess.run([self.init_op] + fallback)
            elif not bad:
                self.backend.restore(sess, prefix)
                if self.rest_names:
                    sess.run(self.init_op)
            else:
                good = [self.checkpoint_names[n] for n in self.saved_names if n not in bad]
                self.backend.restore(sess, prefix, good)
                fallback = [n for n in self.saved_names if n in bad]
                sess.run([part.initializer for name in fallback + list(self.rest_names) for part in self._parts[name]])
        except tf.errors.OpError as error:
            raise CorruptCheckpointError(
                f"restoring from '{prefix}' failed: {first_line(error)}; variables may be partly restored, "
                "restore again from a good checkpoint"
            ) from error
        self._confirm_initialized(sess, f"after restoring from '{prefix}'")
        restored = tuple(n for n in self.saved_names if n not in bad)
        initialized = tuple(n for n in self.catalog.ordered_names if n in bad or n not in self.checkpoint_names)
        return RestoreReport(prefix, restored, initialized, mismatched)

    def save(self, sess, save_path, global_step=None, *, blocking=True, if_busy="wait", **options):
        """Write the checkpoint (and ``PREFIX.subset.json`` beside it); returns the prefix.

        ``options`` go to ``Saver.save`` (``write_meta_graph``, ``latest_filename``, ...). A save
        first waits for a background save in flight and raises its error, if it failed.
        ``blocking=False``: queue a snapshot of the saved set in one ``session.run`` and write it in a
        background thread; returns a :class:`~subsetsaver.planning.background.PendingSave` (its
        ``wait()`` returns the prefix once durable and named latest). ``if_busy``: 'wait' for the save
        in flight, or 'skip' this one with a warning. See :mod:`subsetsaver.planning.background`.

        plan.save(sess, 'ckpt/model', global_step=step, blocking=False).wait()
        # 'ckpt/model-100'
        """
        import tensorflow as tf

        self._check_session(sess)
        save_path = os.fspath(save_path)
        parent = os.path.dirname(save_path)
        if parent and not tf.io.gfile.isdir(parent):
            raise CheckpointNotFoundError(
                f"cannot save to '{save_path}': directory '{parent}' does not exist; create it first"
            )
        nbytes, background = self.catalog.nbytes(self.saved_names), self._background
        if not blocking:
            finish = functools.partial(self._write, sess, save_path, options=options)
            try:
                return background.save(sess, save_path, global_step, if_busy=if_busy, options=options,
                                       finish=finish, nbytes=nbytes)
            except tf.errors.FailedPreconditionError as error:
                uninitialized = self._uninitialized_error(sess)
                if uninitialized is None:
                    raise
                raise uninitialized from error
        return background.timed(lambda: self._write(sess, save_path, global_step, self.backend.save, options), nbytes)

    def wait(self, timeout=None):
        """Wait for the background save in flight (``save(blocking=False)``); returns its path, None if
        there is none; raises its error if it failed and nobody saw it yet. ``close()`` is the same."""
        return self._background.wait(timeout)

    close = wait

    def estimated_save_secs(self):
        """Seconds the next save should take (the last save's rate times this plan's bytes); None before one."""
        return self._background.estimate(self.catalog.nbytes(self.saved_names))

    def _uninitialized_error(self, sess):
        names = self._uninitialized_saved(sess)
        return UninitializedVariablesError(
            f"cannot save: {len(names)} variable{'s' if len(names) > 1 else ''} not initialized: "
            f"{', '.join(names)}; run plan.restore_or_initialize(sess, None) first", names) if names else None

    def _write(self, sess, save_path, global_step, write, options) -> str:
        """A save with ``write(sess, save_path, global_step, **options)``, which writes the checkpoint."""
        import tensorflow as tf

        # The manifests of the checkpoints this save may retire go first: a crash must not leave
        # a manifest beside a deleted checkpoint (a checkpoint without its manifest is harmless).
        retiring = self._retiring()
        kept_manifests = {prefix: _manifest_or_none(prefix) for prefix in retiring}
        for prefix in retiring:
            subset_manifest.remove_manifest(prefix)
        try:
            prefix = write(sess, save_path, global_step, **options)
        except Exception as error:
            self._put_back_manifests(kept_manifests)
            uninitialized = self._uninitialized_error(sess) \
                if isinstance(error, tf.errors.FailedPreconditionError) else None
            if uninitialized is not None:
                raise uninitialized from error
            if isinstance(error, SubsetSaverError) or not isinstance(error, (tf.errors.OpError, OSError)):
                raise
            raise self._write_error(save_path, global_step, error) from error
        subset_manifest.write_manifest(prefix, self._manifest_content())
        for old, content in kept_manifests.items():  # still kept (a rewrite, keep_checkpoint_every_n_hours)
            if content is not None and old != prefix and self.backend.exists(old):
                subset_manifest.write_manifest(old, content)
        return prefix

    def _put_back_manifests(self, manifests):
        """After a failed save: the manifests of the checkpoints it would have retired, which remain."""
        for prefix, content in manifests.items():
            if content is not None and self.backend.exists(prefix):
                subset_manifest.write_manifest(prefix, content)

    def _write_error(self, save_path, global_step, error) -> CheckpointWriteError:
        """The library's error for a save the file system refused (full, read-only, no permission)."""
        text = first_line(error)
        code = getattr(error, "errno", None)
        if code is None:
            code = next((number for number, marker in _WRITE_FAILURES.items() if marker in text), None)
        cause = os.strerror(code).lower() if code is not None else text
        sizes = self.sizes
        needed = (f"{sizes.checkpoint_bytes:,} bytes (.data {sizes.data_bytes:,}, .index ~{sizes.index_bytes:,})"
                  if self.backend.name == "tf" else f"{sizes.saved_bytes:,} bytes of values")
        directory = os.path.dirname(save_path)
        try:
            latest = self.backend.latest_checkpoint(directory or ".")
        except CorruptCheckpointError:
            latest = None
        remains = f"the latest checkpoint is still '{latest}'" if latest else "there is no earlier checkpoint there"
        step = "" if global_step is None else f" (step {global_step if isinstance(global_step, int) else '...'})"
        message = (f"cannot save '{save_path}'{step}: {cause}; it needs about {needed}; nothing was left under "
                   f"its name and {remains}; free space or save elsewhere")
        failure = CheckpointWriteError(message)
        failure.errno = code
        return failure

    def _retiring(self) -> list:
        """The checkpoints the next save deletes if it writes a new one (the oldest past max_to_keep)."""
        kept = self.backend.last_checkpoints
        if not self.backend.max_to_keep:
            return []
        return kept[:max(0, len(kept) + 1 - self.backend.max_to_keep)]

    def scaffold(self, warm_start=None, *, resume_from=None, **scaffold_kwargs):
        """A ``tf.compat.v1.train.Scaffold`` for ``MonitoredTrainingSession``: its Saver is
        :attr:`saver`, a resume restores :attr:`saved` and initializes the rest, a fresh
        start initializes everything (then runs ``warm_start``). Build it before the
        session: see :func:`subsetsaver.planning.scaffold.scaffold`.

        with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
                checkpoint_dir='run/', scaffold=p.scaffold()) as sess:
            sess.run(train_op)
        """
        return training_scaffold(self, warm_start, resume_from=resume_from, **scaffold_kwargs)

    def summary(self) -> str:
        """A human table: what is saved, what is initialized, per scope, and the size comparison."""
        sizes = self.sizes
        lines = [f"plan {self.selector!r} (backend {self.backend.name!r}, on_mismatch={self.on_mismatch!r})"]
        lines.append(f"  saved        {len(self.saved_names):>6} variables  {format_bytes(sizes.saved_bytes):>10}"
                     "  (restored from the checkpoint)")
        lines.append(f"  initialized  {len(self.rest_names):>6} variables  {format_bytes(sizes.rest_bytes):>10}"
                     "  (never restored)")
        lines += sizes_module.table_lines(sizes)
        return "\n".join(lines)

    def __repr__(self):
        return (f"<Plan {self.selector!r}: {len(self.saved_names)} saved ({format_bytes(self.sizes.saved_bytes)}), "
                f"{len(self.rest_names)} initialized ({format_bytes(self.sizes.rest_bytes)})>")

    # -- helpers -----------------------------------------------------------------------
    def _check_session(self, sess):
        if getattr(sess, "graph", None) is not self.graph:
            raise ValueError(
                "the session runs another graph than the plan's; "
                "create it with tf.compat.v1.Session(graph=plan.graph)"
            )

    def _uninitialized_names(self, sess) -> list:
        """The variables the check after a restore or initialization finds uninitialized."""
        if self._initialized is None:
            return []
        flags = sess.run(self._initialized)
        return list(dict.fromkeys(name for name, initialized in zip(self._checked_names, flags) if not initialized))

    def _uninitialized_saved(self, sess) -> list:
        """The saved variables that are not initialized (after a save failed): through the flags
        TensorFlow built with them, flags built now for the others, or, in a finalized graph, a read of
        each of those."""
        import tensorflow as tf

        parts = [(name, part) for name in self.saved_names for part in self._parts[name]]
        flags = [tf_internals.initialized_flag(part) for _name, part in parts]
        if not self.graph.finalized and any(flag is None for flag in flags):
            with self.graph.as_default(), tf.compat.v1.name_scope("subsetsaver/report_uninitialized"):
                flags = [_new_flag(part) if flag is None else flag for (_name, part), flag in zip(parts, flags)]
        found = dict(zip([i for i, flag in enumerate(flags) if flag is not None],
                         sess.run([flag for flag in flags if flag is not None])))
        for index, flag in enumerate(flags):
            read = tf_internals.value_read(parts[index][1]) if flag is None else None
            if read is not None:
                try:
                    sess.run(read.op)
                except tf.errors.FailedPreconditionError:
                    found[index] = False
                except tf.errors.OpError:
                    pass  # not known: the error the save raised says the rest
        return list(dict.fromkeys(name for index, (name, _part) in enumerate(parts) if not found.get(index, True)))

    def _confirm_initialized(self, sess, when):
        names = self._uninitialized_names(sess)
        if names:
            raise UninitializedVariablesError(
                f"{when}, {len(names)} variable{'s are' if len(names) > 1 else ' is'} still uninitialized: "
                f"{', '.join(names)}",
                names,
            )

    def _manifest_content(self) -> dict:
        variables = []
        for name in self.saved_names:
            shape, dtype = self.spec(name)
            variables.append({
                "name": name,
                "checkpoint_name": self.checkpoint_names[name],
                "shape": None if shape is None else list(shape),
                "dtype": dtype,
                "bytes": self.catalog.nbytes([name]),
                "parts": len(self._parts[name]),
            })
        return subset_manifest.manifest_content(
            selector=repr(self.selector),
            variables=variables,
            initialized=self.rest_names,
            remap=self.remap,
            backend=self.backend.name,
        )


def _initializes(variable) -> bool:
    """Whether ``variable``'s initializer is an assignment of the variable itself, so that running it
    leaves the variable initialized."""
    op = getattr(variable, "initializer", None)
    return (getattr(op, "type", None) in ("AssignVariableOp", "Assign") and bool(op.inputs)
            and op.inputs[0].op is variable.op)


def _initialized_flags(variables):
    """One ``bool`` tensor: whether each of ``variables`` is initialized, what
    ``report_uninitialized_variables`` asks, through the op TensorFlow built with each variable where
    there is one (a resource variable's ``IsInitialized``), so one new op rather than one per variable."""
    import tensorflow as tf

    with tf.compat.v1.name_scope("report_uninitialized"):
        flags = [tf_internals.initialized_flag(variable) for variable in variables]
        flags = [_new_flag(variable) if flag is None else flag for variable, flag in zip(variables, flags)]
        with tf.device(os.environ.get("TF_DEVICE_FOR_UNINITIALIZED_VARIABLE_REPORTING", "/cpu:0")):
            return tf.stack(flags, name="initialized")


def _new_flag(variable):
    import tensorflow as tf

    flag = tf.compat.v1.is_variable_initialized(variable)
    tf_internals.mark_used(flag)  # it is run later, not now
    return flag


def _manifest_or_none(prefix):
    try:
        return subset_manifest.read_manifest(prefix)
    except CorruptCheckpointError:
        return None


def _device(part) -> str:
    import tensorflow as tf

    return tf.DeviceSpec.from_string(part.device or "").to_string()
