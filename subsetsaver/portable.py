"""Portable checkpoints in graph mode: chosen variables to one ``.npz`` file and back.

No SaveV2/RestoreV2 (which fail on TPU runtimes without a Cloud Storage bucket) and no
pickle. A save fetches every value in ONE ``session.run`` and streams the arrays into
the file (see :mod:`subsetsaver.npzfile`). A restore validates the whole file first
(names, shapes, dtypes, sizes, checksums), then assigns every value in ONE
``session.run`` through placeholder + assign ops built once per graph and variable and
reused: restoring a hundred times does not grow the graph. Build them ahead of time
with :func:`prepare_npz` (or ``ss.plan(sel, backend='npz')``) and the graph can be
finalized. Partitioned variables are stored whole, under their full name.

Example::

    >>> save_npz(sess, '/host/ckpt/model.npz', ss.everything())
    '/host/ckpt/model.npz'
    >>> report = restore_npz(sess, '/host/ckpt/model.npz')      # strict: every variable
    >>> len(report.restored)
    27
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import re
import threading
import weakref

from . import npzfile
from .errors import CheckpointMismatchError, CheckpointNotFoundError, CorruptCheckpointError, SubsetSaverError
from .files import remove_abandoned

STATE_FILENAME = "checkpoint_npz.json"
STATE_FORMAT = "subsetsaver.npz-state"

class RestoreOpsMissingError(SubsetSaverError, RuntimeError):
    """A restore needs ops that a finalized graph can no longer get."""


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


# ---------------------------------------------------------------------------------
# Layout: how a (possibly partitioned) variable maps to one stored array
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Layout:
    """One logical variable: its parts and where each sits in the stored array.

    ``shape``: the logical (full) shape, None dims where unknown; ``region``: the stored
    array's (offset, shape) inside the full shape when the parts do not cover it (TF
    gives some slots of partitioned variables a full shape larger than their one part),
    else None; ``offsets``: each part's offset inside the stored array.
    """

    name: str
    parts: tuple
    dtype: str
    shape: tuple | None
    region: tuple | None = None
    offsets: tuple = ()

    @property
    def partitioned(self) -> bool:
        return bool(self.offsets)

    def info(self) -> dict:
        if self.region is None:
            return {}
        offset, _shape = self.region
        return {"full_shape": list(self.shape), "offset": list(offset)}

    def stored_shape(self):
        return self.region[1] if self.region is not None else self.shape

    def stored_nbytes(self) -> int:
        return math.prod(self.stored_shape()) * npzfile.numpy_dtype(self.dtype).itemsize


def _layout(name, parts) -> _Layout:
    head = parts[0]
    dtype = head.dtype.base_dtype.name
    info = getattr(head, "_save_slice_info", None)
    if info is None:
        shape = tuple(head.shape.as_list()) if head.shape.dims is not None else None
        return _Layout(name, tuple(parts), dtype, shape)
    full = tuple(info.full_shape)
    slices = [(tuple(p._save_slice_info.var_offset), tuple(p._save_slice_info.var_shape)) for p in parts]
    low = tuple(min(o[d] for o, _ in slices) for d in range(len(full)))
    high = tuple(max(o[d] + s[d] for o, s in slices) for d in range(len(full)))
    box = tuple(h - lo for h, lo in zip(high, low))
    covered = sum(math.prod(s) for _, s in slices)
    if covered != math.prod(box):
        raise ValueError(f"the parts of partitioned variable '{name}' do not tile a box; cannot store it whole")
    region = None if box == full else (low, box)
    offsets = tuple(tuple(o[d] - low[d] for d in range(len(full))) for o, _ in slices)
    return _Layout(name, tuple(parts), dtype, full, region, offsets)


def _part_slices(layout, index):
    offset = layout.offsets[index]
    shape = layout.parts[index]._save_slice_info.var_shape
    return tuple(slice(o, o + s) for o, s in zip(offset, shape))


def _check_storable(layouts):
    unsupported = [lay for lay in layouts if lay.dtype not in npzfile.STORED_AS]
    if unsupported:
        listed = ", ".join(f"{lay.name} ({lay.dtype})" for lay in unsupported)
        raise npzfile.UnsupportedDtypeError(
            f"portable checkpoints hold numeric variables only; cannot store {listed}: leave "
            f"{'them' if len(unsupported) > 1 else 'it'} out of the selection (e.g. sel - name('{unsupported[0].name}')) "
            "or use the 'tf' backend"
        )


# ---------------------------------------------------------------------------------
# The two session.run calls
# ---------------------------------------------------------------------------------

_NO_FLAT = frozenset({"int4", "uint4"})  # TF has no Split/Concat kernels for these: one feed/fetch per part
_STACK_BELOW = 64 << 10   # save: variables under this size are fetched in stacks; larger ones one by one
_GATHER_BELOW = 64 << 10  # restore: arrays under this size are gathered from the file in one pass per group


class _Ops:
    """The save and restore ops of one ordered set of variables, built once per graph (see :func:`_ops_for`).

    Variables of one dtype and shape travel together: a restore feeds one
    ``[count, *shape]`` buffer that one ``unstack`` cuts into the assigned values
    (64-byte aligned regions, so TensorFlow can use the fed memory without copying),
    and a save fetches one ``stack`` of the small ones. A handful of feeds and fetches
    instead of thousands keeps ``session.run``'s per-tensor cost out of the way, and the
    graph has about as many nodes as a Saver's. Variables of 64 KiB and more are
    fetched one by one: a stack would copy their bytes twice, and the per-tensor cost
    is small next to theirs. Partitioned variables, dtypes without Pack/Unpack kernels
    (int4, uint4) and shapes not fully known get one placeholder per part.
    """

    def __init__(self, graph, layouts):
        import tensorflow as tf

        self.layouts = {layout.name: layout for layout in layouts}
        self.groups = []       # [{"feed", "nbytes" (each), "count", "dtype"}]
        self.slot = {}         # layout name -> (group index, position in the group)
        self.part_feeds = {}   # part op name -> placeholder (layouts restored one part at a time)
        self.assigns = {}      # layout name -> [assign op per part]
        self._fetches = []     # what a save fetches, in order
        self._takes = []       # per layout: (name, index in the fetched values, position in a stack or None)
        grouped = {}
        for layout in layouts:
            head = layout.parts[0]
            if not layout.partitioned and layout.dtype not in _NO_FLAT and head.shape.is_fully_defined():
                grouped.setdefault((layout.dtype, tuple(head.shape.as_list())), []).append(layout)
        stacks = {}  # layout name -> (index of its stack in _fetches, position)
        with graph.as_default(), graph.control_dependencies(None), tf.compat.v1.name_scope("subsetsaver_npz/"):
            for (dtype, shape), members in grouped.items():
                nbytes = math.prod(shape) * tf.as_dtype(dtype).size
                parts = [layout.parts[0] for layout in members]
                if len(members) == 1:
                    feed = tf.compat.v1.placeholder(tf.as_dtype(dtype), shape, name="value")
                    values = [feed]
                else:
                    feed = tf.compat.v1.placeholder(tf.as_dtype(dtype), [len(members), *shape], name="values")
                    values = tf.unstack(feed, num=len(members))
                    if nbytes < _STACK_BELOW:
                        stacks.update((layout.name, (len(self._fetches), position))
                                      for position, layout in enumerate(members))
                        self._fetches.append(tf.stack([part.value() for part in parts]))
                for position, (layout, part, value) in enumerate(zip(members, parts, values)):
                    self.slot[layout.name] = (len(self.groups), position)
                    self.assigns[layout.name] = [part.assign(value, read_value=False)]
                self.groups.append({"feed": feed, "nbytes": nbytes, "count": len(members),
                                    "dtype": npzfile.numpy_dtype(dtype), "shape": [len(members), *shape]
                                    if len(members) > 1 else list(shape)})
            for layout in layouts:
                if layout.name in self.slot:
                    continue
                self.assigns[layout.name] = []
                for part in layout.parts:
                    feed = tf.compat.v1.placeholder(part.dtype.base_dtype, part.shape, name="value")
                    self.part_feeds[part.op.name] = feed
                    self.assigns[layout.name].append(part.assign(feed, read_value=False))
            every = [op for name in self.layouts for op in self.assigns[name]]
            self.assign_all = tf.group(*every, name="assign_all") if every else None
        for layout in layouts:
            if layout.name in stacks:
                self._takes.append((layout.name, *stacks[layout.name]))
            else:
                self._takes.append((layout.name, len(self._fetches), None))
                self._fetches.extend(layout.parts)  # the variable itself: its read op, no new op
        self._programs = {}  # names -> (manifest, _RestoreProgram): repeated restores of one file

    # -- save ---------------------------------------------------------------------------
    def fetch(self, sess, extra_fetches=()):
        """Every layout's stored array (views into the fetched stacks) in ONE session.run."""
        values = sess.run(self._fetches + list(extra_fetches))
        arrays = {}
        for name, index, position in self._takes:
            if position is not None:
                arrays[name] = values[index][position]
                continue
            layout = self.layouts[name]
            arrays[name] = _joined(layout, values[index:index + len(layout.parts)]) if layout.partitioned \
                else values[index]
        return arrays, values[len(self._fetches):]

    # -- restore --------------------------------------------------------------------------
    def restore(self, sess, archive, names):
        """Read, checksum and assign the arrays ``names`` of ``archive`` (an open npzfile.Archive)
        in ONE session.run; nothing is assigned unless every array passed."""
        key = tuple(names)
        known = self._programs.get(key)
        if known is None or known[0] is not archive.manifest:
            known = self._programs[key] = (archive.manifest, _RestoreProgram(self, archive, key))
            npzfile._evict_oldest(self._programs, keep=4)
        program = known[1]
        feeds = program.load(archive)
        if program.target is not None:
            sess.run(program.target, feeds)


class _RestoreProgram:
    """How one set of names is read from one validated file and fed: built once, reused by later restores.

    Each group of equally shaped variables fills one buffer: small arrays are gathered
    from the file in one pass (:meth:`npzfile.Archive.load_rows`), large ones read
    straight into their row. The rest (partitioned variables, ...) are loaded as arrays.
    """

    def __init__(self, ops, archive, names):
        rows = {}  # group index -> ([name], [position])
        self.singles = []
        for name in names:
            slot = ops.slot.get(name)
            if slot is None:
                self.singles.append(name)
            else:
                chosen = rows.setdefault(slot[0], ([], []))
                chosen[0].append(name)
                chosen[1].append(slot[1])
        self.groups = []  # (group info, row plan or None, {name: row position} for direct reads)
        for group, (chosen, positions) in rows.items():
            info = ops.groups[group]
            if info["nbytes"] < _GATHER_BELOW:
                self.groups.append((info, archive.plan_rows(chosen, positions, info["nbytes"]), None))
            else:
                self.groups.append((info, None, dict(zip(chosen, positions))))
        self.part_feeds = []  # (name, part index, placeholder)
        for name in self.singles:
            layout = ops.layouts[name]
            for index, part in enumerate(layout.parts):
                self.part_feeds.append((name, index, ops.part_feeds[part.op.name]))
        if names and len(names) == len(ops.layouts):
            self.target = ops.assign_all
        else:
            self.target = [op for name in names for op in ops.assigns[name]] or None
        self._layouts = ops.layouts

    def load(self, archive) -> dict:
        """The feed dict: every array read and checked (raises before returning anything on any problem)."""
        feeds, into = {}, {}
        for info, plan, direct in self.groups:
            buffer = npzfile._aligned_bytes(info["nbytes"] * info["count"])
            if plan is not None:
                archive.load_rows(plan, buffer.reshape(info["count"], info["nbytes"]))
            else:
                for name, position in direct.items():
                    into[name] = buffer[position * info["nbytes"]:(position + 1) * info["nbytes"]]
            feeds[info["feed"]] = buffer.view(info["dtype"]).reshape(info["shape"])
        arrays = archive.load(self.singles + list(into), into=into) if self.singles or into else {}
        for name, index, feed in self.part_feeds:
            layout = self._layouts[name]
            feeds[feed] = arrays[name][_part_slices(layout, index)] if layout.partitioned else arrays[name]
        return feeds


def _joined(layout, parts):
    import numpy as np

    whole = np.empty(layout.stored_shape(), dtype=parts[0].dtype)
    for index, value in enumerate(parts):
        whole[_part_slices(layout, index)] = value
    return whole


# graph -> {((file name, id of first part), ...): _Ops}; weak, so graphs can be collected.
_ops_by_graph = weakref.WeakKeyDictionary()


def _ops_for(graph, layouts, *, build=True):
    """The cached _Ops of this graph and variable set; built on first use unless the graph is finalized."""
    # File name and variable: a plan's remap may store variable 'b' under the name 'a'. The cached
    # _Ops holds the variables, so their ids stay theirs.
    cache = _ops_by_graph.get(graph)
    known = cache.get(id(layouts)) if cache else None  # the same (cached) list again: skip the key
    if known is not None and known[0] is layouts:
        return known[1]
    key = tuple((layout.name, id(layout.parts[0])) for layout in layouts)
    with _build_lock:
        ops = _cached_ops(graph, layouts, key, build)
        if ops is not None and isinstance(layouts, list):
            _ops_by_graph[graph][id(layouts)] = (layouts, ops)
        return ops


_build_lock = threading.RLock()


def _cached_ops(graph, layouts, key, build):
    cache = _ops_by_graph.setdefault(graph, {})
    ops = cache.get(key)
    if ops is None and build:
        if graph.finalized:
            names = [layout.name for layout in layouts]
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise RestoreOpsMissingError(
                f"the graph is finalized and has no npz restore ops for these {len(names)} variable"
                f"{'s' if len(names) > 1 else ''} ({shown}); call ss.portable.prepare_npz(sel, graph) "
                "(or build ss.plan(sel, graph, backend='npz')) before graph.finalize()"
            )
        ops = cache[key] = _Ops(graph, layouts)
    return ops


def _fetch_directly(sess, layouts, extra_fetches=()):
    """Without prepared ops (a finalized graph): fetch every part itself, still in ONE session.run."""
    fetches = [part for layout in layouts for part in layout.parts] + list(extra_fetches)
    values = sess.run(fetches)
    arrays, position = {}, 0
    for layout in layouts:
        parts = values[position:position + len(layout.parts)]
        position += len(layout.parts)
        arrays[layout.name] = _joined(layout, parts) if layout.partitioned else parts[0]
    return arrays, values[position:]


def _fetch(sess, layouts, extra_fetches=()):
    ops = _ops_for(sess.graph, layouts, build=not sess.graph.finalized)
    if ops is None:
        return _fetch_directly(sess, layouts, extra_fetches)
    return ops.fetch(sess, extra_fetches)


# ---------------------------------------------------------------------------------
# Comparing a file with the graph
# ---------------------------------------------------------------------------------


def _entry_spec(entry):
    """(logical shape, dtype, region) of a manifest entry."""
    info = entry.info or {}
    if "full_shape" in info:
        return tuple(info["full_shape"]), entry.dtype, (tuple(info.get("offset", ())), entry.shape)
    return entry.shape, entry.dtype, None


def _compare(layouts, manifest, keys):
    """Problems between ``layouts`` (file name ``keys[layout.name]``) and a manifest: (missing, mismatched)."""
    from .planner import Problem

    entries = {entry.name: entry for entry in manifest.arrays}
    missing, mismatched = [], []
    for layout in layouts:
        key = keys[layout.name]
        entry = entries.get(key)
        if entry is None:
            missing.append(Problem("missing", layout.name, key, layout.shape, layout.dtype))
            continue
        shape, dtype, region = _entry_spec(entry)
        shape_ok = layout.shape is None or (
            len(layout.shape) == len(shape) and all(e is None or e == f for e, f in zip(layout.shape, shape))
        )
        if shape_ok and layout.region is not None:
            shape_ok = region is not None and (tuple(region[0]), tuple(region[1])) == layout.region
        if not shape_ok or dtype != layout.dtype:
            kind = "shape" if not shape_ok else "dtype"
            mismatched.append(Problem(kind, layout.name, key, layout.shape, layout.dtype, shape, dtype))
    return missing, mismatched


_matchings = {}  # (id(layouts), id(manifest)) -> (layouts, manifest, result): repeated restores of one file


def _matching(layouts, manifest):
    """(missing, mismatched, unexpected names, usable layouts, their names) between the chosen variables and a file."""
    key = (id(layouts), id(manifest))
    known = _matchings.get(key)
    if known is not None and known[0] is layouts and known[1] is manifest:
        return known[2]
    missing, mismatched = _compare(layouts, manifest, {layout.name: layout.name for layout in layouts})
    chosen = {layout.name for layout in layouts}
    unexpected = tuple(name for name in manifest.names if name not in chosen)
    bad = {p.name for p in missing + mismatched}
    usable = [layout for layout in layouts if layout.name not in bad]
    result = (missing, mismatched, unexpected, usable, tuple(layout.name for layout in usable))
    _matchings[key] = (layouts, manifest, result)
    npzfile._evict_oldest(_matchings)
    return result


def _mismatch_message(path, selector_text, manifest, missing, mismatched, unexpected, restorable):
    counts = [f"{len(missing)} missing"] if missing else []
    counts += [f"{len(mismatched)} shape/dtype mismatch{'es' if len(mismatched) > 1 else ''}"] if mismatched else []
    counts += [f"{len(unexpected)} not chosen"] if unexpected else []
    lines = [f"portable checkpoint '{path}' does not match the selection {selector_text}: {', '.join(counts)}"]
    lines += ["  " + p.describe() for p in missing + mismatched]
    entries = {e.name: e for e in manifest.arrays}
    for key in unexpected[:20]:
        shape, dtype, _ = _entry_spec(entries[key])
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
    from . import catalog as catalog_module
    from .parser import parse
    from .selectors import Selector, everything

    if sel is None:
        sel = everything()
    elif isinstance(sel, str):
        sel = parse(sel)
    if not isinstance(sel, Selector):
        raise TypeError(f"sel is a selector or its text, got {type(sel).__name__}")
    catalog = catalog_module.load(graph)
    cache = _layouts_by_graph.setdefault(catalog.graph, {})
    known = cache.get(sel)  # the same selector on the same catalog (the graph unchanged): same layouts
    if known is not None and known[0] is catalog:
        return sel, known[1]
    names = tuple(sel.names(catalog))
    if names not in cache:
        cache[names] = [_layout(name, catalog.variables([name])) for name in names]
    cache[sel] = (catalog, cache[names])
    return sel, cache[names]


_layouts_by_graph = weakref.WeakKeyDictionary()  # graph -> {names: [_Layout], selector: (catalog, [_Layout])}


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

    >>> prepare_npz(ss.everything(), graph); graph.finalize()
    """
    import tensorflow as tf

    graph = graph if graph is not None else tf.compat.v1.get_default_graph()
    _, layouts = _selection(sel, graph)
    _check_storable(layouts)
    return sum(len(layout.parts) for layout in _ops_for(graph, layouts).layouts.values())


def save_npz(sess, path, sel=None, graph=None, *, checksum=npzfile.DEFAULT_CHECKSUM) -> str:
    """Write the variables ``sel`` chooses (None: everything) to the portable file ``path``.

    One ``session.run`` fetches every value; the file is written atomically through
    the local filesystem or ``tf.io.gfile`` (``ram://``, ``gs://``, ...). ``checksum``:
    'crc32' or 'sha256' per array (see :func:`subsetsaver.npzfile.write`). Returns ``path``.

    >>> save_npz(sess, 'model.npz', ss.trainable() | ss.bn_stats())
    'model.npz'
    """
    graph = _graph_of(sess, graph)
    selector, layouts = _selection(sel, graph)
    _check_storable(layouts)
    arrays, _ = _fetch(sess, layouts)
    path = os.fspath(path)
    npzfile.write(path, arrays, selector=repr(selector), metadata={"source": "graph"},
                  array_info={lay.name: lay.info() for lay in layouts if lay.info()}, checksum=checksum)
    return path


def restore_npz(sess, path, sel=None, graph=None, strict=True) -> NpzRestoreReport:
    """Assign the variables ``sel`` chooses (None: everything) from the portable file ``path``.

    The whole file is validated before any variable changes. ``strict=True``: the file
    must hold exactly the chosen variables with their shapes and dtypes, else one
    CheckpointMismatchError lists every difference. ``strict=False``: restore the
    variables both hold with equal shapes and dtypes, leave the rest unchanged, and
    report them. A damaged or tampered file raises CorruptCheckpointError.

    >>> restore_npz(sess, 'model.npz', ss.trainable(), strict=False).unexpected
    ('opt/beta1_power', ...)
    """
    graph = _graph_of(sess, graph)
    selector, layouts = _selection(sel, graph)
    _check_storable(layouts)
    path = os.fspath(path)
    with npzfile.Archive(path) as archive:
        manifest = archive.manifest
        missing, mismatched, unexpected, usable, restored = _matching(layouts, manifest)
        if strict and (missing or mismatched or unexpected):
            message = _mismatch_message(path, repr(selector), manifest, missing, mismatched, unexpected, len(usable))
            raise CheckpointMismatchError(message, missing + mismatched)
        ops = _ops_for(graph, layouts)  # a finalized graph without them fails here, before reading data
        ops.restore(sess, archive, restored)
    return NpzRestoreReport(
        path=path,
        restored=restored,
        missing=tuple(p.name for p in missing),
        mismatched=tuple(mismatched),
        unexpected=unexpected,
    )


# ---------------------------------------------------------------------------------
# The planner backend
# ---------------------------------------------------------------------------------


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
                 save_relative_paths=True, checksum=npzfile.DEFAULT_CHECKSUM, **options):
        unknown = sorted(set(options) - set(_BACKEND_OPTIONS))
        if unknown:
            raise TypeError(
                f"backend 'npz' does not take the Saver option{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(o) for o in unknown)}; it takes {', '.join(_BACKEND_OPTIONS)}"
            )
        self.graph = graph
        self.max_to_keep = max_to_keep
        self.pad_step_number = pad_step_number
        if checksum not in npzfile.CHECKSUMS:
            raise ValueError(f"checksum={checksum!r} is not one of {', '.join(repr(c) for c in npzfile.CHECKSUMS)}")
        self.checksum = checksum
        self._keys = list(variables)
        self._layouts = {key: _layout(key, parts) for key, parts in variables.items()}
        _check_storable(self._layouts.values())
        self._ops = _ops_for(graph, list(self._layouts.values()))  # now, so the graph may be finalized
        self._kept = []

    # -- writing --------------------------------------------------------------------
    def save(self, sess, save_path, global_step=None, write_state=True, latest_filename=None) -> str:
        """Write ``SAVE_PATH-STEP.npz`` (``global_step``: a number, or a tensor/variable fetched
        in the same ``session.run`` as the values); returns its path."""
        layouts = [self._layouts[key] for key in self._keys]
        extra = [] if global_step is None or isinstance(global_step, numbers.Number) else [global_step]
        arrays, fetched = self._ops.fetch(sess, extra)
        if extra:
            global_step = fetched[0]
        path = self._path(os.fspath(save_path), global_step)
        npzfile.write(path, arrays, metadata={"source": "plan", "global_step": _step_json(global_step)},
                      array_info={lay.name: lay.info() for lay in layouts if lay.info()}, checksum=self.checksum)
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
            _remove(old)
        if "://" not in path:  # what saves killed midway left here (the state file never names it)
            remove_abandoned(os.path.dirname(path))
        return path

    def _path(self, save_path, global_step):
        base = save_path[:-4] if save_path.endswith(".npz") else save_path
        if global_step is None:
            return base + ".npz"
        step = int(global_step)
        return f"{base}-{step:08d}.npz" if self.pad_step_number else f"{base}-{step}.npz"

    def _write_state(self, directory, latest, filename):
        state = {"format": STATE_FORMAT, "latest": os.path.basename(latest),
                 "kept": [os.path.basename(p) for p in self._kept if os.path.dirname(p) == directory]}
        npzfile.write_bytes_atomically(_join(directory, filename), (json.dumps(state, indent=1) + "\n").encode())

    @property
    def last_checkpoints(self) -> list:
        return list(self._kept)

    # -- reading --------------------------------------------------------------------
    def restore(self, sess, prefix, names=None):
        """Load every variable (or only the file names ``names``) in one ``session.run``."""
        keys = self._keys if names is None else list(names)
        layouts = [self._layouts[key] for key in keys]
        with npzfile.Archive(prefix) as archive:
            missing, mismatched = _compare(layouts, archive.manifest, {key: key for key in keys})
            if missing or mismatched:
                lines = "\n".join("  " + p.describe() for p in missing + mismatched)
                raise CheckpointMismatchError(f"portable checkpoint '{prefix}' does not hold what the plan "
                                              f"restores:\n{lines}", missing + mismatched)
            self._ops.restore(sess, archive, keys)

    @staticmethod
    def latest_checkpoint(directory, latest_filename=None):
        """The latest complete ``.npz`` file in ``directory``, or None."""
        directory = os.fspath(directory)
        state = _read_state(_join(directory, latest_filename or STATE_FILENAME))
        if state and _complete(_join(directory, state)):
            return _join(directory, state)
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
        import tensorflow as tf

        return tf.io.gfile.exists(prefix)

    @classmethod
    def prefix(cls, path) -> str:
        """The ``.npz`` file behind ``path``: the file, ``path + '.npz'``, or a directory's latest."""
        import tensorflow as tf

        path = os.fspath(path)
        if tf.io.gfile.isdir(path):
            latest = cls.latest_checkpoint(path)
            if latest is None:
                raise CheckpointNotFoundError(f"no portable checkpoint (.npz) in directory '{path}'")
            return latest
        for candidate in (path, path + ".npz"):
            if tf.io.gfile.exists(candidate) and not tf.io.gfile.isdir(candidate):
                return candidate
        raise CheckpointNotFoundError(f"no portable checkpoint at '{path}' (nor '{path}.npz')")

    @staticmethod
    def contents(prefix) -> dict:
        """``{name: (logical shape, dtype)}`` from the file's manifest (no data read)."""
        manifest = npzfile.read_manifest(prefix)
        return {entry.name: _entry_spec(entry)[:2] for entry in manifest.arrays}


def _step_json(step):
    return None if step is None else int(step)


def _join(directory, name):
    if not directory:
        return name
    return directory.rstrip("/") + "/" + name


def _remove(path):
    import tensorflow as tf

    try:
        tf.io.gfile.remove(path)
    except tf.errors.NotFoundError:
        pass


def _read_state(path):
    import tensorflow as tf

    try:
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path, "rb") as handle:
            state = json.loads(handle.read(1 << 20).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, tf.errors.OpError):
        return None
    latest = state.get("latest") if isinstance(state, dict) and state.get("format") == STATE_FORMAT else None
    if not isinstance(latest, str) or "/" in latest or "\\" in latest or latest.strip(".") == "":
        return None  # a bare file name in the same directory, nothing else
    return latest


_STEP = re.compile(r"-(\d+)\.npz$")


def _candidates(directory):
    """``.npz`` files of ``directory``, newest first: highest step, then latest modification."""
    import tensorflow as tf

    try:
        names = tf.io.gfile.listdir(directory)
    except tf.errors.NotFoundError:
        return []
    ranked = []
    for name in names:
        if not name.endswith(".npz"):
            continue  # temporary files end in '.tmp-PID-RANDOM'
        path = _join(directory, name)
        match = _STEP.search(name)
        try:
            modified = tf.io.gfile.stat(path).mtime_nsec
        except tf.errors.OpError:
            continue
        ranked.append((int(match.group(1)) if match else -1, modified, path))
    return [path for _, _, path in sorted(ranked, reverse=True)]


def _complete(path) -> bool:
    try:
        npzfile.read_manifest(path)
    except CorruptCheckpointError:
        return False
    return True


# ---------------------------------------------------------------------------------
# Converters: TensorFlow checkpoint <-> portable file
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConvertReport:
    """What a conversion wrote: ``source``, ``output``, the ``kept`` and ``dropped`` names, data bytes."""

    source: str
    output: str
    kept: tuple
    dropped: tuple
    nbytes: int


def npz_catalog(path):
    """A catalog of a portable file's arrays (names, logical shapes, dtypes; roles guessed from names)."""
    from .catalog import Catalog, _Entry

    manifest = npzfile.read_manifest(path)
    entries = []
    for index, entry in enumerate(manifest.arrays):
        shape, dtype, _ = _entry_spec(entry)
        entries.append(_Entry(name=entry.name, shape=tuple(shape), dtype=dtype, nbytes=entry.nbytes,
                              parts=(entry.name,), index=index))
    return Catalog(entries, {}, kind="checkpoint")


def checkpoint_to_npz(checkpoint, output, keep=None) -> ConvertReport:
    """Copy the tensors ``keep`` selects (None: all) of a TensorFlow checkpoint into a portable file.

    ``keep`` is evaluated on the checkpoint's names (roles guessed from names, as ``slim`` does).

    >>> checkpoint_to_npz('train/model-9000', 'model.npz', keep='~slots()').kept[:2]
    ('conv_1/b', 'conv_1/w')
    """
    from . import catalog as catalog_module
    from .parser import parse
    from .selectors import everything

    selector = everything() if keep is None else parse(keep) if isinstance(keep, str) else keep
    prefix = catalog_module.checkpoint_prefix(checkpoint)
    cat = catalog_module.checkpoint_catalog(prefix)
    kept = selector.names(cat)
    records = cat.records_by_name
    unsupported = [n for n in kept if records[n].dtype not in npzfile.STORED_AS]
    if unsupported:
        raise npzfile.UnsupportedDtypeError(
            f"portable checkpoints hold numeric tensors only; '{prefix}' has {', '.join(unsupported)} "
            f"({records[unsupported[0]].dtype}): leave them out, e.g. --keep \"{selector!r} - name('{unsupported[0]}')\""
        )
    reader = catalog_module.open_checkpoint(prefix)
    arrays = {}
    for name in kept:
        try:
            arrays[name] = reader.get_tensor(name)
        except ValueError as error:  # e.g. the mangled per-part slots of a partitioned variable
            raise CorruptCheckpointError(
                f"cannot read '{name}' from '{prefix}' as one array ({str(error).splitlines()[0]}); leave it out "
                f"(--keep \"{selector!r} - name('{name}')\") or save from the graph with ss.save_npz"
            ) from error
    npzfile.write(os.fspath(output), arrays, selector=repr(selector),
                  metadata={"source": "checkpoint", "checkpoint": os.path.basename(prefix)})
    return ConvertReport(prefix, os.fspath(output), tuple(kept),
                         tuple(n for n in cat.ordered_names if n not in set(kept)),
                         sum(a.nbytes for a in arrays.values()))


def npz_to_checkpoint(path, prefix, keep=None) -> ConvertReport:
    """Write the arrays of a portable file (``keep``: a selector on them, None: all) as a
    TensorFlow checkpoint at ``prefix`` that ``tf.compat.v1.train.Saver`` restores.

    One ``SaveV2`` in a scratch graph, fed in one ``session.run``; the written
    checkpoint is read back (``RestoreV2``) and compared bit for bit before returning.

    >>> npz_to_checkpoint('model.npz', 'ckpt/model').output
    'ckpt/model'
    """
    import numpy as np
    import tensorflow as tf

    from .parser import parse

    path, prefix = os.fspath(path), os.fspath(prefix)
    directory = os.path.dirname(prefix)
    if directory and not tf.io.gfile.isdir(directory):
        raise CheckpointNotFoundError(f"cannot write '{prefix}': directory '{directory}' does not exist; create it first")
    with npzfile.Archive(path) as archive:
        names = list(archive.manifest.names)
        if keep is not None:
            selector = parse(keep) if isinstance(keep, str) else keep
            names = selector.names(npz_catalog(path))
        entries = {e.name: e for e in archive.manifest.arrays}
        arrays = archive.load(names)
    specs = []
    for name in names:
        shape, _dtype, region = _entry_spec(entries[name])
        if region is None:
            specs.append("")
        else:
            offset, box = region
            specs.append(" ".join(str(d) for d in shape) + " " + ":".join(f"{o},{s}" for o, s in zip(offset, box)))
    graph = tf.Graph()
    with graph.as_default():
        prefix_feed = tf.compat.v1.placeholder(tf.string, [])
        feeds = [tf.compat.v1.placeholder(tf.as_dtype(arrays[n].dtype), arrays[n].shape) for n in names]
        save = tf.raw_ops.SaveV2(prefix=prefix_feed, tensor_names=names, shape_and_slices=specs, tensors=feeds)
        with tf.control_dependencies([save]):
            restored = tf.raw_ops.RestoreV2(prefix=prefix_feed, tensor_names=names, shape_and_slices=specs,
                                            dtypes=[f.dtype for f in feeds]) if names else []
    with tf.compat.v1.Session(graph=graph) as sess:
        feed_dict = {prefix_feed: prefix, **{f: arrays[n] for f, n in zip(feeds, names)}}
        values = sess.run(list(restored), feed_dict) if names else sess.run(save, feed_dict)
    for name, value in zip(names, values or []):
        original = arrays[name]
        if value.shape != original.shape or not np.array_equal(_bytes(value), _bytes(original)):
            raise CorruptCheckpointError(f"'{prefix}': tensor '{name}' read back differs from '{path}'; disk full?")
    return ConvertReport(path, prefix, tuple(names), tuple(n for n in entries if n not in set(names)),
                         sum(a.nbytes for a in arrays.values()))


def _bytes(array):
    """The array's bytes as a flat uint8 view (bit-exact comparisons, NaNs included)."""
    import numpy as np

    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)
