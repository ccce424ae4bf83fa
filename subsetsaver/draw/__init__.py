"""The drawing room: pictures of a selection, so a user sees what a choice of variables costs and forgets.

``draw_sets`` draws two or three selectors as an area-proportional Venn/Euler diagram
(area follows bytes) inside a frame that stands for every variable, and an UpSet-style
chart for more sets. ``draw_plan`` draws a plan's scope tree with graphviz, each
variable coloured by what the plan does with it.

Modules, each importing only those listed before it: ``style`` (the shared colours),
``output`` (file formats, saving a figure), ``regions`` (the set algebra and checkpoint
sizes), ``canvas`` (matplotlib, loaded lazily, and :class:`SetsFigure`), ``venn`` and
``upset`` (the two set pictures), ``sets`` (``draw_sets``) and ``plan_tree``
(``draw_plan``). From the rest of the package this room imports only ``selectors``,
``catalog``, ``planning.sizes``, ``audit`` and ``errors``. matplotlib, matplotlib-venn,
graphviz and numpy are imported only when a picture is drawn, so ``import subsetsaver``
stays cheap. Other rooms use the names in ``__all__``.

Example::

    ss.draw_sets({"trainable": ss.trainable(), "conv_1/bn": ss.scope("conv_1/bn")},
                 "sets.svg", saved=ss.trainable() | ss.bn_stats(), graph=graph)
    # 'sets.svg'
    ss.draw_plan(ss.plan(ss.trainable() | ss.bn_stats(), graph), "plan.svg")
    # 'plan.svg'
"""

from .canvas import SetsFigure
from .plan_tree import INSTALL_DOT_HINT, TreeItem, dot_source_path, draw_plan, scope_tree
from .regions import Region, checkpoint_bytes, set_regions
from .sets import draw_sets, sets_figure
from .style import FLAGGED_COLOR, INITIALIZED_COLOR, SAVED_COLOR
from .venn import VENN_CODES

__all__ = [
    "FLAGGED_COLOR",
    "INITIALIZED_COLOR",
    "INSTALL_DOT_HINT",
    "SAVED_COLOR",
    "VENN_CODES",
    "Region",
    "SetsFigure",
    "TreeItem",
    "checkpoint_bytes",
    "dot_source_path",
    "draw_plan",
    "draw_sets",
    "scope_tree",
    "set_regions",
    "sets_figure",
]
