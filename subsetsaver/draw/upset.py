"""The UpSet chart: one bar per region (bytes, log scale) over a matrix of the sets it lies in.

It draws any number of sets, so it takes over from the Venn picture for more than three
sets or for sizes circles cannot show. Only the biggest regions get a column; the rest
share one.

Example::

    sets = {"trainable": ss.trainable(), "bn": ss.bn_stats(), "opt": ss.scope("opt"), "fc1": ss.scope("fc1")}
    drawing = upset_figure(import_matplotlib(), set_regions(sets, graph=g), tuple(sets), "", saved_given=False)
    drawing.kind
    # 'upset'
"""

from __future__ import annotations

from ..selectors import format_bytes
from .canvas import SetsFigure
from .style import SAVED_COLOR, saved_legend

_UPSET_MAX_COLUMNS = 40


def upset_figure(mpl, regions, labels, caption, saved_given) -> SetsFigure:
    """The UpSet chart of ``regions`` (from ``set_regions``) for the sets named ``labels``, under ``caption``.

    ``saved_given`` says whether to shade what is saved and draw the legend for it.
    """
    columns = sorted(regions, key=lambda r: (-r.nbytes, -r.count, r.code))
    rest = columns[_UPSET_MAX_COLUMNS:]
    columns = columns[:_UPSET_MAX_COLUMNS]
    width = max(6.5, 0.72 * (len(columns) + bool(rest)) + 3.2)
    height = 3.6 + 0.3 * len(labels)
    figure = mpl.Figure(figsize=(width, height))
    grid = figure.add_gridspec(2, 1, height_ratios=[3.0, max(0.3 * len(labels), 0.9)], hspace=0.05,
                               left=0.3, right=0.97, top=0.9, bottom=0.12)
    bars = figure.add_subplot(grid[0])
    matrix = figure.add_subplot(grid[1], sharex=bars)
    positions = list(range(len(columns)))
    for x, region in zip(positions, columns):
        state = region.saved_state if saved_given else "none"
        bar = bars.bar(x, max(region.nbytes, 1), width=0.7, zorder=2,
                       color=SAVED_COLOR if state == "all" else "#dde6ef",
                       edgecolor="#3f8f33" if state == "part" else "#4d6a85", linewidth=0.8,
                       hatch="//" if state == "part" else None)[0]
        bars.annotate(f"{region.count} var{'s' if region.count != 1 else ''}\n{format_bytes(region.nbytes)}",
                      (x, bar.get_height()), xytext=(0, 2),
                      textcoords="offset points", ha="center", va="bottom", fontsize=7, gid=f"region-{region.code}")
    if rest:
        rest_bytes = sum(r.nbytes for r in rest)
        x = len(columns)
        positions.append(x)
        bars.bar(x, max(rest_bytes, 1), width=0.7, color="#f0f0f0", edgecolor="#999999", zorder=2)
        bars.annotate(f"{len(rest)} more:\n{sum(r.count for r in rest)} vars\n{format_bytes(rest_bytes)}",
                      (x, max(rest_bytes, 1)), xytext=(0, 2), textcoords="offset points", ha="center",
                      va="bottom", fontsize=7, gid="region-others")
    bars.set_yscale("log")
    bars.set_ylabel("bytes (log scale)", fontsize=9)
    bars.set_title("Variables in exactly these sets (count, size)", fontsize=10)
    bars.tick_params(axis="x", bottom=False, labelbottom=False)
    for spine in ("top", "right"):
        bars.spines[spine].set_visible(False)
    low, high = bars.get_ylim()
    bars.set_ylim(low, high * 8)

    for row in range(len(labels)):
        y = len(labels) - 1 - row
        for x, region in zip(positions, columns):
            member = region.code[row] == "1"
            matrix.scatter([x], [y], s=40, color="#333333" if member else "#dddddd", zorder=3)
    for x, region in zip(positions, columns):
        rows = [len(labels) - 1 - i for i, bit in enumerate(region.code) if bit == "1"]
        if len(rows) > 1:
            matrix.plot([x, x], [min(rows), max(rows)], color="#333333", linewidth=1.5, zorder=2)
    set_bytes = [sum(r.nbytes for r in regions if r.code[i] == "1") for i in range(len(labels))]
    set_counts = [sum(r.count for r in regions if r.code[i] == "1") for i in range(len(labels))]
    matrix.set_yticks(range(len(labels)))
    matrix.set_yticklabels([f"{label}  ({set_counts[i]}, {format_bytes(set_bytes[i])})"
                            for i, label in reversed(list(enumerate(labels)))], fontsize=8)
    matrix.set_ylim(-0.6, len(labels) - 0.4)
    matrix.set_xlim(-0.6, len(positions) - 0.4)
    matrix.tick_params(axis="x", bottom=False, labelbottom=False)
    matrix.tick_params(axis="y", left=False)
    for spine in matrix.spines.values():
        spine.set_visible(False)
    if saved_given:
        handles = saved_legend(mpl, regions, partly_face="#dde6ef", unsaved_face="#dde6ef", unsaved_edge="#4d6a85")
        bars.legend(handles=handles, loc="upper right", fontsize=8, frameon=False, ncol=3)
    caption = "Bars follow bytes (log scale); " + caption
    matrix.text(0.0, -0.15, caption, transform=matrix.transAxes, ha="left", va="top", fontsize=8, gid="caption")
    return SetsFigure(figure, "upset", regions, labels, caption=caption)
