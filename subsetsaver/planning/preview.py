"""A plan's dry run without TensorFlow: what a plan of a ``.meta`` file saves, initializes and
writes, and how it compares with a checkpoint, read from the file's catalog alone.

:class:`PlanPreview` is a :class:`~subsetsaver.planning.planner.Plan` that builds no op: its
names, sizes, summary and checkpoint check are the planner's own, computed from catalog
entries instead of ``tf.Variable`` objects (a Saver over the default options: one ``.data``
file). It runs nothing: restoring or saving needs :func:`~subsetsaver.planning.plan` on a graph.

Example::

    preview = plan_preview("trainable() | bn_stats()", "ckpt/model-100.meta")
    preview.check("ckpt/model-100").ok
    # True
"""

from __future__ import annotations

from .. import catalog as catalog_module
from . import sizes as sizes_module
from .arguments import audited_names, checked_selector
from .planner import Plan
from .remap import checkpoint_names
from .tf_backend import TfBackend


def plan_preview(sel, source, *, remap=None, on_mismatch="error", strict=False) -> PlanPreview:
    """The :class:`PlanPreview` of saving ``sel`` from ``source`` (a ``.meta`` file or any graph
    catalog); the audit's errors are warnings (``strict=True``: one error), as :func:`plan` words them.

    plan_preview("trainable()", "model.meta").saved_names[:2]
    # ('conv_1/w', 'conv_1/b')
    """
    sel = checked_selector("plan_preview", sel, on_mismatch)
    catalog = catalog_module.load(source)
    if not catalog.traceable:
        raise TypeError(f"a plan needs a graph with variables, not a {catalog.kind}; pass a tf.Graph or a .meta file")
    saved_names = audited_names(sel, catalog, strict=strict)
    return PlanPreview(sel, catalog, saved_names, remap=remap, on_mismatch=on_mismatch)


class PlanPreview(Plan):
    """A plan's names, sizes, summary and :meth:`check`, with no Saver and no ops; see :func:`plan_preview`."""

    def __init__(self, selector, catalog, saved_names, *, remap=None, on_mismatch="error"):  # builds nothing
        self.selector = selector
        self.catalog = catalog
        self.graph = None
        self.on_mismatch = on_mismatch
        self.remap = dict(remap) if remap else None
        chosen = set(saved_names)
        self.saved_names = tuple(saved_names)
        self.rest_names = tuple(n for n in catalog.ordered_names if n not in chosen)
        self.checkpoint_names = checkpoint_names(self.saved_names, self.remap)
        self._checkpoint_to_name = {key: name for name, key in self.checkpoint_names.items()}
        self.backend = TfBackend  # its checkpoint lookups need no Saver
        self.use_averages = None
        self._averages = None
        self._rows = None  # row maps need the graph's ops: a preview has none

    def spec(self, name) -> tuple:
        entry = self.catalog.entry(name)
        return entry.shape, entry.dtype

    def _saved_tensors(self, names, keys) -> list:
        tensors = []
        for key, name in sorted((keys[n], n) for n in names):
            entry = self.catalog.entry(name)
            if entry.part_slices:
                tensors.extend(sizes_module.SavedTensor(key, entry.dtype, shape, entry.shape, offset)
                               for offset, shape in entry.part_slices)
            else:
                tensors.append(sizes_module.SavedTensor(key, entry.dtype, entry.shape))
        return tensors

    def restore_or_initialize(self, sess, checkpoint):
        raise TypeError("a plan preview runs nothing; build the plan with subsetsaver.plan(sel, graph) to restore")

    def save(self, sess, save_path, global_step=None, **options):
        raise TypeError("a plan preview runs nothing; build the plan with subsetsaver.plan(sel, graph) to save")

    def scaffold(self, warm_start=None, **options):
        raise TypeError("a plan preview runs nothing; build the plan with subsetsaver.plan(sel, graph) for a scaffold")
