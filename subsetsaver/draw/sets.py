"""``draw_sets``: the variable sets of a graph as one picture, with what a selection saves.

Two or three sets are drawn as a Venn/Euler diagram, more (or sizes circles cannot show)
as an UpSet chart; the caption compares the estimated checkpoint of ``saved`` with a full
Saver's. This module picks the picture and writes the caption; ``venn`` and ``upset`` draw.

Example::

    draw_sets({"trainable": ss.trainable(), "conv_1/bn": ss.scope("conv_1/bn")}, "sets.svg",
              saved=ss.trainable() | ss.bn_stats(), graph=graph)
    # 'sets.svg'
"""

from __future__ import annotations

import textwrap

from .. import catalog as catalog_module
from ..selectors import format_bytes
from .canvas import SetsFigure, import_matplotlib
from .output import FIGURE_FORMATS, check_extension, save_figure
from .regions import checkpoint_bytes, full_saver_names, set_regions
from .style import variables_text
from .upset import upset_figure
from .venn import venn_figure


def draw_sets(sets: dict, path, saved=None, graph=None):
    """Draw ``sets`` (label -> selector) inside the frame of all variables and save to ``path``.

    Two or three sets give an area-proportional Venn/Euler diagram (area follows bytes),
    more give an UpSet-style chart. Every region is labelled with its variable count and
    size; the part ``saved`` covers is shaded, and the caption compares its estimated
    checkpoint with a full Saver's. The format follows the extension: .png, .svg or .pdf.

    draw_sets({"trainable": trainable(), "conv_1/bn": scope("conv_1/bn")}, "sets.svg",
              saved=trainable() | bn_stats(), graph=graph)
    # 'sets.svg'
    """
    check_extension(path, FIGURE_FORMATS, "draw_sets")
    drawing = sets_figure(sets, saved=saved, graph=graph)
    return save_figure(drawing.figure, path)


def sets_figure(sets: dict, saved=None, graph=None) -> SetsFigure:
    """The picture ``draw_sets`` saves, as a :class:`SetsFigure` (for tests and custom saving)."""
    mpl = import_matplotlib()
    catalog = catalog_module.load(graph)
    regions = set_regions(sets, saved=saved, graph=catalog)
    labels = tuple(str(label) for label in sets)
    caption = _caption(catalog, regions, saved)
    empty = [label for i, label in enumerate(labels) if not any(r.code[i] == "1" for r in regions)]
    if empty:
        caption += f"\nEmpty (no variable): {', '.join(empty)}."
    # Labels and selector text are plain text: "regex('conv$')" must not switch on math mode.
    with mpl.matplotlib.rc_context({"text.parse_math": False}):
        if len(labels) <= 3:
            figure = venn_figure(mpl, regions, labels, caption, saved is not None)
            if figure is not None:
                return figure
        return upset_figure(mpl, regions, labels, caption, saved is not None)


def _caption(catalog, regions, saved) -> str:
    total_names = [n for r in regions for n in r.names]
    lines = [f"all variables: {len(total_names)} ({format_bytes(catalog.nbytes(total_names))})."]
    if saved is not None:
        saved_names = [n for r in regions for n in r.saved_names]
        written = checkpoint_bytes(catalog, saved_names)
        full = checkpoint_bytes(catalog, full_saver_names(catalog))
        if not written:
            ratio = "nothing written"
        else:
            ratio = f"{full / written:.1f}x smaller" if full >= written else f"{written / full:.1f}x larger"
        lines.append(
            f"Shaded: what saved = {saved!r} writes: {variables_text(len(saved_names))}, "
            f"an estimated {format_bytes(written)} checkpoint vs {format_bytes(full)} for a full Saver ({ratio})."
        )
    return "\n".join(textwrap.fill(line, 110) for line in lines)
