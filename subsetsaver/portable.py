"""Portable checkpoints in graph mode: chosen variables to one ``.npz`` file and back.

No SaveV2/RestoreV2 (which fail on TPU runtimes without a Cloud Storage bucket) and no
pickle. A save fetches the values in runs of about 32 MB, one ``session.run`` each, and
streams them into the file while the next run is fetched (see
:mod:`subsetsaver.formats.npz`): it holds about two runs, never the whole selection, and
builds no restore op. A restore validates the whole file first
(names, shapes, dtypes, sizes, checksums), then assigns every value in ONE
``session.run`` through placeholder + assign ops built once per graph and variable and
reused (:mod:`subsetsaver.planning.npz_ops`): restoring a hundred times does not grow
the graph. Build them ahead of time with :func:`prepare_npz` (or ``ss.plan(sel,
backend='npz')``) and the graph can be finalized. Partitioned variables are stored
whole, under their full name.

Example::

    save_npz(sess, '/host/ckpt/model.npz', ss.everything())
    # '/host/ckpt/model.npz'
    report = restore_npz(sess, '/host/ckpt/model.npz')      # strict: every variable
    len(report.restored)
    # 27
"""

from __future__ import annotations

import dataclasses
import functools
import os
import weakref

from . import catalog as catalog_module
from . import storage
from .errors import CheckpointMismatchError, RestoreOpsMissingError
from .formats import npz
from .graph_mode import tensorflow
from .planning import (
    PendingSave,
    SnapshotSession,
    check_storable,
    compare_with_manifest,
    describe_all,
    layout_of,
    npz_ops_for,
    queues_for,
    save_fetches_for,
    snapshot,
)
from .selectors import as_selector


@dataclasses.dataclass(frozen=True)
class NpzRestoreReport:
    """What :func:`restore_npz` did.

    ``restored``: variable names assigned from the file. ``missing``: chosen variables
    the file lacks; ``mismatched``: chosen variables the file holds with another shape
    or dtype (``planner.Problem`` values); both left unchanged (only with
    ``strict=False``). ``unexpected``: arrays of the file that were not restored.
    """

    path: str
    restored: tuple
    missing: tuple = ()
    mismatched: tuple = ()
    unexpected: tuple = ()

    @property
    def complete(self) -> bool:
        """Every chosen variable restored and every array of the file used."""
        return not (self.missing or self.mismatched or self.unexpected)


_matchings = {}  # (id(layouts), id(manifest)) -> (layouts, manifest, result): repeated restores of one file


def _matching(layouts, manifest):
    """(missing, mismatched, unexpected names, usable layouts, their names) between the chosen variables and a file."""
    key = (id(layouts), id(manifest))
    known = _matchings.get(key)
    if known is not None and known[0] is layouts and known[1] is manifest:
        return known[2]
    missing, mismatched = compare_with_manifest(layouts, manifest, {layout.name: layout.name for layout in layouts})
    chosen = {layout.name for layout in layouts}
    unexpected = tuple(name for name in manifest.names if name not in chosen)
    bad = {p.name for p in missing + mismatched}
    usable = [layout for layout in layouts if layout.name not in bad]
    result = (missing, mismatched, unexpected, usable, tuple(layout.name for layout in usable))
    _matchings[key] = (layouts, manifest, result)
    npz.evict_oldest(_matchings)
    return result


def _mismatch_message(path, selector_text, manifest, missing, mismatched, unexpected, restorable):
    counts = [f"{len(missing)} missing"] if missing else []
    counts += [f"{len(mismatched)} shape/dtype mismatch{'es' if len(mismatched) > 1 else ''}"] if mismatched else []
    counts += [f"{len(unexpected)} not chosen"] if unexpected else []
    lines = [f"portable checkpoint '{path}' does not match the selection {selector_text}: {', '.join(counts)}"]
    lines += describe_all(missing + mismatched)
    entries = {e.name: e for e in manifest.arrays}
    for key in unexpected[:20]:
        shape, dtype, _ = npz.entry_spec(entries[key])
        lines.append(f"  not chosen: {key} [{', '.join(str(d) for d in shape)}] {dtype}")
    if len(unexpected) > 20:
        lines.append(f"  ... and {len(unexpected) - 20} more not chosen")
    if manifest.selector:
        lines.append(f"the file was saved with selector {manifest.selector}")
    lines.append(f"no variable was changed; fix: pass strict=False to restore the {restorable} variable"
                 f"{'s' if restorable != 1 else ''} both hold, or a sel that matches the file")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------
# The public functions
# ---------------------------------------------------------------------------------


def _selection(sel, graph):
    """(selector, [layout]) of ``sel`` (selector or text; None: everything()) in ``graph``."""
    sel = as_selector(sel)
    catalog = catalog_module.load(graph)
    cache = _layouts_by_graph.setdefault(catalog.graph, {})
    known = cache.get(sel)  # the same selector on the same catalog (the graph unchanged): same layouts
    if known is not None and known[0] is catalog:
        return sel, known[1]
    names = tuple(sel.names(catalog))
    if names not in cache:
        cache[names] = [layout_of(name, catalog.variables([name])) for name in names]
    cache[sel] = (catalog, cache[names])
    return sel, cache[names]


_layouts_by_graph = weakref.WeakKeyDictionary()  # graph -> {names: [Layout], selector: (catalog, [Layout])}


def _graph_of(sess, graph):
    if graph is None:
        return sess.graph
    if sess.graph is not graph:
        raise ValueError("the session runs another graph than the one given; create it with "
                         "tf.compat.v1.Session(graph=graph)")
    return graph


def prepare_npz(sel=None, graph=None) -> int:
    """Build the restore ops :func:`restore_npz` needs for ``sel`` now, so ``graph.finalize()`` may follow.

    Returns how many variable parts have restore ops. Idempotent.

    prepare_npz(ss.everything(), graph); graph.finalize()
    """
    tf = tensorflow("ss.portable.prepare_npz")
    graph = graph if graph is not None else tf.compat.v1.get_default_graph()
    _, layouts = _selection(sel, graph)
    check_storable(layouts)
    ops = npz_ops_for(graph, layouts)
    queues_for(graph, ops.save)  # for saves with blocking=False
    return sum(len(layout.parts) for layout in ops.layouts.values())


def save_npz(sess, path, sel=None, graph=None, *, checksum=npz.DEFAULT_CHECKSUM, blocking=True, if_busy="wait"):
    """Write the variables ``sel`` chooses (None: everything) to the portable file ``path``.

    The values are fetched in runs of about 32 MB and written as they come (call it between
    training steps: runs are separate ``session.run`` calls); the file is written atomically through
    the file layer (:mod:`subsetsaver.storage`), under the directory's writer lock. ``checksum``:
    'crc32' or 'sha256' per array (see :func:`subsetsaver.formats.npz.write`). Returns ``path``.

    ``blocking=False``: queue a snapshot of the selection in one ``session.run`` and write the file
    in a background thread; returns a ``PendingSave`` whose ``wait()`` returns ``path`` once the file
    is durable (see :mod:`subsetsaver.planning.background`; ``if_busy``: 'wait' for the save of this
    selection in flight, or 'skip' this one). In a finalized graph, call :func:`prepare_npz` first.

    save_npz(sess, 'model.npz', ss.trainable() | ss.bn_stats())
    # 'model.npz'
    save_npz(sess, 'model.npz', blocking=False).wait()
    # 'model.npz'
    """
    tensorflow("ss.save_npz")
    graph = _graph_of(sess, graph)
    selector, layouts = _selection(sel, graph)
    check_storable(layouts)
    fetches = save_fetches_for(graph, layouts)
    path = os.fspath(path)
    storage.hold_directory(storage.parent(path))  # one writing process per directory
    storage.remove_abandoned(storage.parent(path))
    write = functools.partial(_write_npz, path=path, selector=selector, fetches=fetches, checksum=checksum)
    if blocking:
        queues = queues_for(graph, fetches, build=False)
        if queues is not None:
            queues.settle()
        return write(sess)
    queues = queues_for(graph, fetches)
    if queues is None:
        raise RestoreOpsMissingError(
            "the graph is finalized and has no snapshot ops for a save with blocking=False of this selection; "
            "call ss.portable.prepare_npz(sel, graph) before graph.finalize()")
    taken = snapshot(queues, sess, (), if_busy)
    if taken is None:
        return PendingSave(skipped=True)
    pending = PendingSave(path)
    pending.blocked_secs = taken[1]
    runs = [run[0] for run in fetches.runs]
    nbytes = sum(run[2] for run in fetches.runs)
    return queues.launch(sess, pending, lambda take: write(SnapshotSession(graph, runs, take)), nbytes)


def _write_npz(sess, *, path, selector, fetches, checksum) -> str:
    _, arrays = fetches.stream(
        sess, prepare=lambda name, array: npz.prepare(name, array, checksum), prepare_rows=npz.prepare_rows)
    npz.write(path, arrays, selector=repr(selector), metadata={"source": "graph"}, array_info=fetches.array_info,
              checksum=checksum, describe=False)
    return path


def restore_npz(sess, path, sel=None, graph=None, strict=True) -> NpzRestoreReport:
    """Assign the variables ``sel`` chooses (None: everything) from the portable file ``path``.

    The whole file is validated before any variable changes. ``strict=True``: the file
    must hold exactly the chosen variables with their shapes and dtypes, else one
    CheckpointMismatchError lists every difference. ``strict=False``: restore the
    variables both hold with equal shapes and dtypes, leave the rest unchanged, and
    report them. A damaged or tampered file raises CorruptCheckpointError.

    restore_npz(sess, 'model.npz', ss.trainable(), strict=False).unexpected
    # ('opt/beta1_power', ...)
    """
    tensorflow("ss.restore_npz")
    graph = _graph_of(sess, graph)
    selector, layouts = _selection(sel, graph)
    check_storable(layouts)
    path = os.fspath(path)
    with npz.Archive(path) as archive:
        manifest = archive.manifest
        missing, mismatched, unexpected, usable, restored = _matching(layouts, manifest)
        if strict and (missing or mismatched or unexpected):
            message = _mismatch_message(path, repr(selector), manifest, missing, mismatched, unexpected, len(usable))
            raise CheckpointMismatchError(message, missing + mismatched)
        ops = npz_ops_for(graph, layouts)  # a finalized graph without them fails here, before reading data
        ops.restore(sess, archive, restored)
    return NpzRestoreReport(
        path=path,
        restored=restored,
        missing=tuple(p.name for p in missing),
        mismatched=tuple(mismatched),
        unexpected=unexpected,
    )
