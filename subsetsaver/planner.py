"""The plan: one Saver over the chosen variables, one initializer for the rest.

``plan(sel, graph)`` resolves a selector, builds every op it will ever run (the Saver's
save and restore ops, the initializer of the rest, a "what is still uninitialized"
report, and, for ``on_mismatch='initialize'``, restore ops that can load any subset),
and returns a :class:`Plan`. After that the graph may be finalized: saving and
restoring only run existing ops, one ``session.run`` per step.

Example::

    >>> p = plan(trainable() | scope('conv_1/bn') | scope('conv_2/bn'), graph)
    >>> graph.finalize()
    >>> with tf.compat.v1.Session(graph=graph) as sess:
    ...     report = p.restore_or_initialize(sess, 'ckpt/')   # latest checkpoint, or init
    ...     ...
    ...     p.save(sess, 'ckpt/model', global_step=step)
    >>> print(p.summary())
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import warnings

from . import manifest as manifest_module
from . import sizes as sizes_module
from .errors import (
    CheckpointMismatchError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmptySelectionError,
    SubsetSaverWarning,
    UninitializedVariablesError,
)
from .selectors import Selector, format_bytes
from .staging import staged_saver_class

ON_MISMATCH = ("error", "initialize")
_LISTED_UNEXPECTED = 20
_DIFFLIB_BUDGET = 250_000  # name comparisons; past this, nearest-name hints are skipped
_REJECTED_SAVER_OPTIONS = {
    "var_list": "pass a selector to plan() instead",
    "defer_build": "a plan builds everything at plan time",
}


# ---------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
    """One difference between a plan and a checkpoint.

    ``kind``: 'missing' (the plan restores ``name`` but the checkpoint lacks
    ``checkpoint_name``), 'shape' or 'dtype' (both have it, differently), or
    'unexpected' (the checkpoint holds ``checkpoint_name`` and the plan does not restore
    it; ``name`` is set when the graph has that variable and will initialize it).
    ``nearest``: for a missing name, the closest name the checkpoint does hold.
    """

    kind: str
    name: str | None
    checkpoint_name: str
    expected_shape: tuple | None = None
    expected_dtype: str | None = None
    found_shape: tuple | None = None
    found_dtype: str | None = None
    nearest: str | None = None

    @property
    def blocking(self) -> bool:
        """True for what stops a restore: missing, shape and dtype problems."""
        return self.kind != "unexpected"

    def describe(self) -> str:
        renamed = f" (checkpoint name {self.checkpoint_name})" if self.name and self.name != self.checkpoint_name else ""
        expected = _spec_text(self.expected_shape, self.expected_dtype)
        found = _spec_text(self.found_shape, self.found_dtype)
        if self.kind == "missing":
            hint = f"; nearest in the checkpoint: {self.nearest}" if self.nearest else ""
            return f"missing: {self.name}{renamed}, expected {expected}{hint}"
        if self.kind in ("shape", "dtype"):
            return f"{self.kind} mismatch: {self.name}{renamed}, expected {expected}, checkpoint has {found}"
        fate = f"; the plan initializes graph variable {self.name}" if self.name else ""
        return f"not restored: {self.checkpoint_name} {found}{fate}"


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """The pre-flight diff between a plan and a checkpoint (see :meth:`Plan.check`).

    ``problems``: every :class:`Problem`, blocking ones first in the plan's order, then
    the checkpoint's tensors the plan does not restore. ``remap``: a suggested ``remap``
    when the missing names exist under another scope prefix (else None).
    ``manifest``: the checkpoint's subsetsaver manifest, if it has one.
    """

    checkpoint: str
    selector: str
    problems: tuple
    remap: dict | None = None
    remap_resolves: int = 0
    manifest: dict | None = None

    @property
    def blocking(self) -> tuple:
        return tuple(p for p in self.problems if p.blocking)

    @property
    def ok(self) -> bool:
        """No missing, shape or dtype problem (tensors the plan ignores are fine)."""
        return not self.blocking

    def of_kind(self, kind) -> tuple:
        return tuple(p for p in self.problems if p.kind == kind)

    @property
    def missing(self) -> tuple:
        return self.of_kind("missing")

    @property
    def unexpected(self) -> tuple:
        return self.of_kind("unexpected")

    def message(self) -> str:
        """The text of the CheckpointMismatchError a restore raises for this report."""
        blocking = self.blocking
        counts = []
        for kind, label in (("missing", "missing"), ("shape", "shape mismatch"), ("dtype", "dtype mismatch")):
            count = len(self.of_kind(kind))
            if count:
                counts.append(f"{count} {label}{'es' if count > 1 and kind != 'missing' else ''}")
        lines = [f"checkpoint '{self.checkpoint}' does not match the plan {self.selector}: {', '.join(counts)}"]
        lines += ["  " + p.describe() for p in blocking]
        if self.manifest is not None:
            lines.append(f"the checkpoint was written by a plan with selector {self.manifest.get('selector')}")
        if self.remap:
            missing = len(self.missing)
            lines.append(
                f"fix: pass remap={self.remap!r} to ss.plan: the checkpoint holds "
                f"{self.remap_resolves} of the {missing} missing variable{'s' if missing > 1 else ''} under that scope"
            )
        lines.append("or: pass on_mismatch='initialize' to initialize these variables instead of restoring them")
        return "\n".join(lines)

    def __str__(self):
        head = self.message() if not self.ok else f"checkpoint '{self.checkpoint}' matches the plan {self.selector}"
        unexpected = self.unexpected
        lines = [head] + ["  " + p.describe() for p in unexpected[:_LISTED_UNEXPECTED]]
        if len(unexpected) > _LISTED_UNEXPECTED:
            lines.append(f"  ... and {len(unexpected) - _LISTED_UNEXPECTED} more tensors the plan does not restore")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class RestoreReport:
    """What :meth:`Plan.restore_or_initialize` did.

    ``checkpoint``: the prefix restored from, or None (everything initialized).
    ``restored`` / ``initialized``: variable names, in creation order. ``mismatched``:
    the problems ``on_mismatch='initialize'`` handled by initializing (empty otherwise).
    ``from_averages``: with ``use_averages``, the restored variables that came from their
    moving-average shadow (the others in ``restored`` came from their own values).
    """

    checkpoint: str | None
    restored: tuple
    initialized: tuple
    mismatched: tuple = ()
    from_averages: tuple = ()


def _spec_text(shape, dtype) -> str:
    if shape is None and dtype is None:
        return "?"
    dims = "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    return f"{dims} {dtype}"


# ---------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------


class TfBackend:
    """Writes and reads TensorFlow V2 checkpoints with a ``tf.compat.v1.train.Saver``
    whose saves are staged (:mod:`subsetsaver.staging`): a kill never tears one.

    The backend interface (a colleague's ``backend='npz'`` implements the same):

    ``__init__(graph, variables, *, partial_restore, **options)``
        ``variables``: checkpoint name -> list of ``tf.Variable`` parts (one part unless
        partitioned), in the plan's order. Builds every op now, inside ``graph``.
        ``partial_restore``: also build what :meth:`restore` needs for a subset.
    ``saver``: the object users may reach through ``plan.saver`` (None if none).
    ``save(sess, save_path, global_step=None, **options) -> prefix``: write a checkpoint.
    ``restore(sess, prefix, names=None)``: load every variable (``names=None``) or only
        those checkpoint names, in one ``session.run``, creating no op.
    ``latest_checkpoint(directory) -> prefix | None``.
    ``checkpoints(directory) -> [prefix, ...]``: the ones a restore may fall back to, latest first.
    ``prefix(path) -> prefix``: a prefix, directory or file of a checkpoint -> its prefix
        (CheckpointNotFoundError when there is none).
    ``contents(prefix) -> {checkpoint name: (shape tuple, dtype name)}``.
    ``last_checkpoints``: prefixes the backend still keeps (older ones were deleted).
    ``max_to_keep``: how many it keeps (0 or None: all). ``exists(prefix) -> bool``.
    """

    name = "tf"

    def __init__(self, graph, variables, *, partial_restore, **options):
        import tensorflow as tf

        if options.get("write_version", 2) == 1:
            raise ValueError("write_version=1 (the deprecated V1 format) is not supported; subsetsaver writes V2")
        var_list = {key: parts if len(parts) > 1 or _is_slice(parts[0]) else parts[0]
                    for key, parts in variables.items()}
        with graph.as_default():
            self.saver = staged_saver_class()(var_list, **options)
            self._partial = {}
            if partial_restore:
                with tf.compat.v1.name_scope("subsetsaver_restore_some"):
                    self._prefix_feed = tf.compat.v1.placeholder(tf.string, [], name="prefix")
                    for key, parts in variables.items():
                        self._partial[key] = _restore_op(self._prefix_feed, key, parts)

    def save(self, sess, save_path, global_step=None, **options) -> str:
        # Outside its graph's context, Saver.save would take the eager path and fail.
        with sess.graph.as_default():
            return self.saver.save(sess, save_path, global_step=global_step, **options)

    def restore(self, sess, prefix, names=None):
        saver_def = self.saver.saver_def
        if names is None:
            sess.run(saver_def.restore_op_name, {saver_def.filename_tensor_name: prefix})
        elif names:
            sess.run([self._partial[key] for key in names], {self._prefix_feed: prefix})

    @property
    def last_checkpoints(self) -> list:
        return list(self.saver.last_checkpoints)

    @property
    def max_to_keep(self):
        return self.saver.saver_def.max_to_keep

    @staticmethod
    def latest_checkpoint(directory):
        import tensorflow as tf

        return tf.train.latest_checkpoint(directory)

    @staticmethod
    def exists(prefix) -> bool:
        import tensorflow as tf

        return tf.io.gfile.exists(prefix + ".index")

    @staticmethod
    def checkpoints(directory) -> list:
        """The checkpoints the state file of ``directory`` lists, latest first."""
        import tensorflow as tf

        state = tf.train.get_checkpoint_state(directory)  # paths joined to the directory
        if state is None or not state.model_checkpoint_path:
            return []
        return list(dict.fromkeys([state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]))

    @staticmethod
    def prefix(path) -> str:
        from .catalog import checkpoint_prefix

        return checkpoint_prefix(path)

    @staticmethod
    def contents(prefix) -> dict:
        import tensorflow as tf

        from .catalog import open_checkpoint

        reader = open_checkpoint(prefix)
        shards = sorted(path[len(prefix) + len(".data-"):] for path in tf.io.gfile.glob(f"{prefix}.data-*-of-*"))
        count = shards[0].rsplit("-of-", 1)[-1] if shards else "00001"
        wanted = [f"{k:05d}-of-{count}" for k in range(int(count))] if count.isdigit() else []
        if not wanted or any(shard not in shards for shard in wanted):
            missing = [f"{prefix}.data-{shard}" for shard in wanted if shard not in shards] or [f"{prefix}.data-*"]
            raise CorruptCheckpointError(
                f"checkpoint '{prefix}' is incomplete: {', '.join(missing)} missing; copy every file of the checkpoint"
            )
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
        return {name: (tuple(shapes[name]), dtypes[name].name) for name in shapes if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


BACKENDS = {"tf": TfBackend}
# Backends living in other modules, imported on first use: name -> (module, class).
_LAZY_BACKENDS = {"npz": ("subsetsaver.portable", "NpzBackend")}


def backend_class(name):
    """The backend class registered as ``name``; ValueError naming the valid ones otherwise."""
    if name not in BACKENDS and name in _LAZY_BACKENDS:
        import importlib

        module, attribute = _LAZY_BACKENDS[name]
        BACKENDS[name] = getattr(importlib.import_module(module), attribute)
    if name not in BACKENDS:
        valid = sorted(set(BACKENDS) | set(_LAZY_BACKENDS))
        raise ValueError(f"unknown backend {name!r}; valid backends: {', '.join(repr(b) for b in valid)}")
    return BACKENDS[name]


def _is_slice(variable) -> bool:
    return getattr(variable, "_save_slice_info", None) is not None


def _restore_op(prefix_feed, key, parts):
    """Assigns of every part of one variable from one RestoreV2 (for restoring any subset)."""
    import tensorflow as tf

    specs = [part._save_slice_info.spec if _is_slice(part) else "" for part in parts]
    values = tf.raw_ops.RestoreV2(
        prefix=prefix_feed,
        tensor_names=[key] * len(parts),
        shape_and_slices=specs,
        dtypes=[part.dtype.base_dtype for part in parts],
    )
    return tf.group(*(part.assign(value, read_value=False) for part, value in zip(parts, values)))


# ---------------------------------------------------------------------------------
# remap: init_from_checkpoint's assignment-map rules
# ---------------------------------------------------------------------------------


def checkpoint_names(names, remap=None) -> dict:
    """Variable name -> checkpoint name under ``remap`` (``{checkpoint: graph}`` rules).

    ``{'old/': 'new/'}`` reads every variable under ``new/`` from ``old/`` + the rest of
    its name; ``'/'`` stands for the root on either side; ``{'old/w': 'new/w'}`` maps one
    variable (the value may also be a ``tf.Variable``). A name rule beats a scope rule,
    and the longest matching scope wins; variables no rule covers keep their names.

    >>> checkpoint_names(['net/conv/w', 'head/b'], {'model/': 'net/'})
    {'net/conv/w': 'model/conv/w', 'head/b': 'head/b'}
    """
    names = list(names)
    if not remap:
        return {name: name for name in names}
    from .selectors import variable_name

    exact, scopes = {}, []
    for source, target in dict(remap).items():
        if not isinstance(source, str):
            raise TypeError(f"remap keys are checkpoint names or scopes (str), got {type(source).__name__}: {source!r}")
        target = target if isinstance(target, str) else variable_name(target)
        if source.endswith("/") != target.endswith("/"):
            raise ValueError(
                f"remap rule {source!r}: {target!r} mixes a scope and a name; "
                "map a scope to a scope ('old/': 'new/') or a name to a name ('old/w': 'new/w')"
            )
        if source.endswith("/"):
            scopes.append(("" if source == "/" else source, "" if target == "/" else target, source, target))
        else:
            exact[target] = source
    scopes.sort(key=lambda rule: len(rule[1]), reverse=True)
    used, result = set(), {}
    for name in names:
        if name in exact:
            result[name] = exact[name]
            used.add(("name", name))
            continue
        for checkpoint_scope, graph_scope, source, _target in scopes:
            if name.startswith(graph_scope):
                result[name] = checkpoint_scope + name[len(graph_scope):]
                used.add(("scope", source))
                break
        else:
            result[name] = name
    unused = [f"{source!r}: {target!r}" for target, source in exact.items() if ("name", target) not in used]
    unused += [f"{source!r}: {target!r}" for _, _, source, target in scopes if ("scope", source) not in used]
    if unused:
        raise ValueError(
            f"remap rule {', '.join(unused)} matches no variable the plan saves; "
            "the right-hand side names variables (or scopes ending in '/') of the graph"
        )
    taken = {}
    for name, key in result.items():
        if key in taken:
            raise ValueError(f"remap sends both {taken[key]} and {name} to checkpoint name {key}")
        taken[key] = name
    return result


def suggest_remap(missing, available):
    """The scope remap that explains most ``missing`` names by ``available`` ones, or (None, 0).

    >>> suggest_remap(['net/a/w', 'net/b'], ['model/a/w', 'model/b'])
    ({'model/': 'net/'}, 2)
    """
    by_suffix = {}
    for name in available:
        parts = name.split("/")
        for cut in range(len(parts)):
            by_suffix.setdefault("/".join(parts[cut:]), set()).add("/".join(parts[:cut]))
    votes = {}
    for name in missing:
        parts = name.split("/")
        for cut in range(len(parts)):
            graph_scope = "/".join(parts[:cut])
            sources = by_suffix.get("/".join(parts[cut:]), set()) - {graph_scope}
            if sources:
                for source in sources:
                    votes[(source, graph_scope)] = votes.get((source, graph_scope), 0) + 1
                break
    if not votes:
        return None, 0
    (source, target), _ = max(votes.items(), key=lambda item: (item[1], -len(item[0][0]) - len(item[0][1])))
    rule = {(source + "/") if source else "/": (target + "/") if target else "/"}
    covered = [name for name in missing if name.startswith(target + "/" if target else "")]
    available = set(available)
    resolves = sum(1 for key in checkpoint_names(covered, rule).values() if key in available)
    return (rule, resolves) if resolves else (None, 0)


# ---------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------


def plan(sel, graph=None, *, remap=None, on_mismatch="error", backend="tf", use_averages=None, strict=False,
         **saver_kwargs) -> Plan:
    """Build the plan for saving ``sel`` and initializing every other variable.

    ``sel``: a selector or its text. ``graph``: a ``tf.Graph`` (None: the default
    graph) or a ``.meta`` file. ``remap``: restore from checkpoints whose names differ
    (see :func:`checkpoint_names`). ``on_mismatch``: 'error' (a restore with a missing,
    reshaped or retyped variable raises one CheckpointMismatchError listing them all) or
    'initialize' (those variables are initialized and reported). ``backend``: 'tf'
    (TensorFlow checkpoints through a Saver) or another registered backend (see
    :class:`TfBackend` for the interface). ``use_averages``: True, an
    ``ExponentialMovingAverage`` or its name: a restore takes each variable from its
    moving-average shadow when the checkpoint holds one (``v/ExponentialMovingAverage``),
    from the variable itself otherwise, and reports which in ``from_averages`` (see
    :class:`subsetsaver.training.AverageRestorer`). ``saver_kwargs`` go to
    ``tf.compat.v1.train.Saver`` (``max_to_keep``, ``sharded``, ...).

    The audit runs first: each error finding (e.g. batch-norm statistics the selection
    forgets) is a ``SubsetSaverWarning``; ``strict=True`` raises them as one error
    before any op is built.

    >>> p = plan(trainable() | bn_stats(), graph, max_to_keep=3)
    """
    from . import catalog as catalog_module
    from .parser import parse

    if isinstance(sel, str):
        sel = parse(sel)
    if not isinstance(sel, Selector):
        raise TypeError(f"plan() takes a selector or its text, got {type(sel).__name__}")
    if on_mismatch not in ON_MISMATCH:
        raise ValueError(f"on_mismatch={on_mismatch!r} is not one of {', '.join(repr(m) for m in ON_MISMATCH)}")
    backend_type = backend_class(backend)
    for option, why in _REJECTED_SAVER_OPTIONS.items():
        if option in saver_kwargs:
            raise TypeError(f"plan() does not take the Saver option {option!r}: {why}")

    catalog = catalog_module.load(graph)
    if catalog.graph is None:
        raise TypeError(f"plan() needs a graph with variables, not a {catalog.kind}; pass a tf.Graph or a .meta file")
    saved_names = sel.names(catalog)
    if not saved_names:
        raise EmptySelectionError(
            f"selector {sel!r} saves no variable, so there is nothing to plan; "
            "use tf.compat.v1.global_variables_initializer() to only initialize"
        )
    from .audit import audit, warn_for

    warn_for(audit(sel, catalog), strict=strict, stacklevel=2)
    return Plan(sel, catalog, saved_names, remap=remap, on_mismatch=on_mismatch, backend=backend_type,
                saver_kwargs=saver_kwargs, use_averages=use_averages)


class Plan:
    """A Saver over the chosen variables and an initializer for the rest; see :func:`plan`.

    Attributes: ``selector``, ``catalog``, ``graph``, ``saved``/``rest`` (tf.Variable
    lists, partitions expanded), ``saved_names``/``rest_names`` (names in creation
    order), ``checkpoint_names`` (name -> name in the checkpoint), ``saver``,
    ``init_op``, ``sizes``, ``backend``, ``on_mismatch``, ``remap``.
    """

    def __init__(self, selector, catalog, saved_names, *, remap, on_mismatch, backend, saver_kwargs,
                 use_averages=None):
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
        self.checkpoint_names = checkpoint_names(self.saved_names, self.remap)
        self._parts = {name: catalog.variables([name]) for name in catalog.ordered_names}
        variables = {self.checkpoint_names[name]: self._parts[name] for name in self.saved_names}
        self.backend = backend(self.graph, variables, partial_restore=on_mismatch == "initialize", **saver_kwargs)
        with self.graph.as_default(), tf.compat.v1.name_scope("subsetsaver"):
            self.init_op = tf.compat.v1.variables_initializer(self.rest, name="initialize_rest")
            self._initialize_all = tf.compat.v1.variables_initializer(self.saved + self.rest, name="initialize_all")
            self._uninitialized = tf.compat.v1.report_uninitialized_variables(
                self.saved + self.rest, name="report_uninitialized"
            )
            getattr(self._uninitialized, "mark_used", lambda: None)()  # it is run later, not now
        self._logical_name = {part.op.name: name for name, parts in self._parts.items() for part in parts}
        self._checkpoint_to_name = {key: name for name, key in self.checkpoint_names.items()}
        self.use_averages = use_averages
        self._averages = None
        if use_averages is not None and use_averages is not False:
            from .training import AverageRestorer

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
        if _is_slice(head):
            shape = tuple(head._save_slice_info.full_shape)
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
        import tensorflow as tf

        sharded = bool(getattr(self.saver, "_sharded", False))
        devices = sorted({_device(part, tf) for name in names for part in self._parts[name]}) if sharded else [""]
        tensors = []
        for key, name in sorted((keys[n], n) for n in names):
            for part in self._parts[name]:
                shard = devices.index(_device(part, tf)) if sharded else 0
                dtype = part.dtype.base_dtype.name
                shape = tuple(part.shape.as_list()) if part.shape.dims is not None else (None,)
                if _is_slice(part):
                    info = part._save_slice_info
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

    def _check(self, prefix) -> CheckReport:
        contents = self.backend.contents(prefix)
        unmatched = sorted(k for k in contents if k not in self._checkpoint_to_name)
        missing = [self.checkpoint_names[n] for n in self.saved_names if self.checkpoint_names[n] not in contents]
        remap, resolves = suggest_remap(missing, unmatched) if missing and not self.remap else (None, 0)
        nearest = _nearest_names(missing, unmatched or sorted(contents), remap)
        problems = []
        for name in self.saved_names:
            key = self.checkpoint_names[name]
            shape, dtype = self.spec(name)
            if key not in contents:
                problems.append(Problem("missing", name, key, shape, dtype, nearest=nearest.get(key)))
                continue
            problem = compare_spec(name, key, shape, dtype, contents[key])
            if problem is not None:
                problems.append(problem)
        rest = set(self.rest_names)
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
            manifest=_manifest_or_none(prefix),
        )

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
        report = self._check(prefix)
        mismatched = report.blocking
        if mismatched and self.on_mismatch == "error":
            raise CheckpointMismatchError(report.message(), mismatched)
        import tensorflow as tf

        bad = {p.name for p in mismatched}
        try:
            if not bad:
                self.backend.restore(sess, prefix)
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

    def save(self, sess, save_path, global_step=None, **options) -> str:
        """Write the checkpoint (and ``PREFIX.subset.json`` beside it); returns the prefix.

        ``options`` go to ``Saver.save`` (``write_meta_graph``, ``latest_filename``, ...).
        """
        import tensorflow as tf

        self._check_session(sess)
        save_path = os.fspath(save_path)
        parent = os.path.dirname(save_path)
        if parent and not tf.io.gfile.isdir(parent):
            raise CheckpointNotFoundError(
                f"cannot save to '{save_path}': directory '{parent}' does not exist; create it first"
            )
        # The manifests of the checkpoints this save may retire go first: a crash must not leave
        # a manifest beside a deleted checkpoint (a checkpoint without its manifest is harmless).
        retiring = self._retiring()
        kept_manifests = {prefix: _manifest_or_none(prefix) for prefix in retiring}
        for prefix in retiring:
            manifest_module.remove_manifest(prefix)
        try:
            prefix = self.backend.save(sess, save_path, global_step, **options)
        except tf.errors.FailedPreconditionError as error:
            saved = set(self.saved_names)
            names = [name for name in self._uninitialized_names(sess) if name in saved]
            if not names:
                raise
            raise UninitializedVariablesError(
                f"cannot save: {len(names)} variable{'s' if len(names) > 1 else ''} not initialized: "
                f"{', '.join(names)}; run plan.restore_or_initialize(sess, None) first",
                names,
            ) from error
        manifest_module.write_manifest(prefix, self._manifest_content())
        for old, content in kept_manifests.items():  # still kept (a rewrite, keep_checkpoint_every_n_hours)
            if content is not None and old != prefix and self.backend.exists(old):
                manifest_module.write_manifest(old, content)
        return prefix

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
        session: see :func:`subsetsaver.training.scaffold`.

        >>> with graph.as_default(), tf.compat.v1.train.MonitoredTrainingSession(
        ...         checkpoint_dir='run/', scaffold=p.scaffold()) as sess:
        ...     sess.run(train_op)
        """
        from . import training

        return training.scaffold(self, warm_start, resume_from=resume_from, **scaffold_kwargs)

    def summary(self) -> str:
        """A human table: what is saved, what is initialized, per scope, and the size comparison."""
        sizes = self.sizes
        lines = [f"plan {self.selector!r} (backend {self.backend.name!r}, on_mismatch={self.on_mismatch!r})"]
        lines.append(f"  saved        {len(self.saved_names):>6} variables  {format_bytes(sizes.saved_bytes):>10}"
                     "  (restored from the checkpoint)")
        lines.append(f"  initialized  {len(self.rest_names):>6} variables  {format_bytes(sizes.rest_bytes):>10}"
                     "  (never restored)")
        lines.append("")
        rows = [("scope", "saved", "saved size", "initialized", "initialized size")]
        for s in sizes.per_scope:
            rows.append((s.scope, str(s.saved_variables), format_bytes(s.saved_bytes), str(s.rest_variables),
                         format_bytes(s.rest_bytes)))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        for position, row in enumerate(rows):
            cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:])]
            lines.append("  " + "  ".join(cells).rstrip())
            if position == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines.append("")
        exactness = "exact" if sizes.exact else "at least: string values vary"
        lines.append(f"  checkpoint files: .data {sizes.data_bytes:,} bytes ({exactness}, "
                     f"{sizes.data_files} file{'s' if sizes.data_files > 1 else ''}), "
                     f".index ~{sizes.index_bytes:,} bytes")
        lines.append(
            f"a full Saver would write {format_bytes(sizes.full_checkpoint_bytes)}; this plan writes "
            f"{format_bytes(sizes.checkpoint_bytes)} ({sizes.ratio:.1f} times smaller)"
        )
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
        found = [raw.decode() for raw in sess.run(self._uninitialized)]
        return list(dict.fromkeys(self._logical_name.get(name, name) for name in found))

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
        return manifest_module.manifest_content(
            selector=repr(self.selector),
            variables=variables,
            initialized=self.rest_names,
            remap=self.remap,
            backend=self.backend.name,
        )


def _device(part, tf) -> str:
    return tf.DeviceSpec.from_string(part.device or "").to_string()


def _nearest_names(missing, candidates, remap) -> dict:
    """Missing checkpoint name -> the closest name the checkpoint holds (or absent).

    A suggested remap answers directly; difflib (quadratic) only runs on small problems.
    """
    nearest = {}
    if remap:
        available = set(candidates)
        target = next(iter(remap.values()))
        covered = [name for name in missing if target == "/" or name.startswith(target)]
        nearest = {name: key for name, key in checkpoint_names(covered, remap).items() if key in available}
    rest = [name for name in missing if name not in nearest]
    if len(rest) * len(candidates) <= _DIFFLIB_BUDGET:
        for name in rest:
            close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
            if close:
                nearest[name] = close[0]
    return nearest


def compare_spec(name, key, shape, dtype, found):
    """The shape or dtype Problem of variable ``name`` against checkpoint entry ``found``
    (``(shape, dtype)`` of ``key``), or None when they fit."""
    found_shape, found_dtype = found
    if not _compatible(shape, found_shape):
        return Problem("shape", name, key, shape, dtype, found_shape, found_dtype)
    if dtype != found_dtype:
        return Problem("dtype", name, key, shape, dtype, found_shape, found_dtype)
    return None


def _compatible(expected, found) -> bool:
    if expected is None:
        return True
    return len(expected) == len(found) and all(e is None or e == f for e, f in zip(expected, found))


def _manifest_or_none(prefix):
    try:
        return manifest_module.read_manifest(prefix)
    except CorruptCheckpointError:
        return None


_TENSORFLOW_NOISE = ("Graph execution error:", "Detected at node", "Node: ", "Original stack trace", "[[")


def first_line(error) -> str:
    """The line of an error that says what went wrong; for a TensorFlow OpError, its cause
    (e.g. "... Checksum does not match ...") rather than "Graph execution error:"."""
    text = (getattr(error, "message", None) or str(error)).strip()
    lines = [line for line in text.splitlines()
             if line.strip() and not line[0].isspace() and not line.startswith(_TENSORFLOW_NOISE)]
    if lines:
        return lines[0]
    return text.splitlines()[0] if text else type(error).__name__
