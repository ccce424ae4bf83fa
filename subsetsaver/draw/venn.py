"""The Venn/Euler picture of two or three sets: circles whose areas follow bytes, in a frame of all variables.

matplotlib-venn lays out the circles; this module shades each region by how much of it is
saved, sizes the frame to scale when it can, and places the labels: inside a region when
they fit, otherwise as callouts beside the frame, with rings for sets too small to see.
When circles cannot be laid out for the sizes, ``venn_figure`` returns None and the
caller draws an UpSet chart instead.

Example::

    sets = {"trainable": ss.trainable(), "bn": ss.bn_stats()}
    drawing = venn_figure(import_matplotlib(), set_regions(sets, graph=g), tuple(sets), "", saved_given=False)
    drawing.kind, len(drawing.diagram.patches)
    # ('venn', 3)
"""

from __future__ import annotations

import math
import warnings

from ..selectors import format_bytes
from .canvas import SetsFigure
from .regions import region_title
from .style import SAVED_COLOR, SET_COLORS, saved_legend, variables_text

_LABEL_BOX = {"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.75, "edgecolor": "none"}

VENN_CODES = {2: ("10", "01", "11"), 3: ("100", "010", "110", "001", "101", "011", "111")}


def venn_figure(mpl, regions, labels, caption, saved_given) -> SetsFigure | None:
    """The Venn/Euler picture of ``regions`` (from ``set_regions``) for one to three sets named ``labels``.

    ``caption`` (the frame's totals, what is saved) is written under the picture with notes on
    what is not to scale; ``saved_given`` says whether to shade what is saved. None when no
    circles fit the sizes (the caller draws an UpSet chart instead).
    """
    by_code = {r.code: r for r in regions}
    count = len(labels)
    drawn = max(count, 2)  # one set is drawn as venn2 with an empty second set
    codes = VENN_CODES[drawn]

    def region_of(code):
        """The region behind a venn code; with one set, the phantom second set is always '0'."""
        if code[count:].strip("0"):
            return None
        return by_code.get(code[:count])

    sizes = tuple(region_of(code).nbytes if region_of(code) else 0 for code in codes)

    figure = mpl.Figure(figsize=(8.5, 5.6))
    axes = figure.add_axes([0.22, 0.14, 0.56, 0.8])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "circle X has zero area": handled below
        try:
            venn = (mpl.venn.venn2 if drawn == 2 else mpl.venn.venn3)(
                sizes, set_labels=None, ax=axes, subset_label_formatter=lambda value: ""
            )
        except Exception as error:
            # Some shapes have no circle layout: "holes are not supported" (VennRegionException)
            # or a root finder that cannot bracket a distance (ValueError). Draw an UpSet chart.
            if type(error).__name__ == "VennRegionException" or isinstance(error, ValueError):
                return None
            raise
    for text in venn.subset_labels:
        if text is not None:
            text.set_visible(False)

    radii = [float(r) for r in venn.radii]
    centers = [(float(c.x), float(c.y)) for c in venn.centers]
    set_bytes = [sum(r.nbytes for r in regions if r.code[i] == "1") for i in range(count)]
    scale = max((math.pi * radii[i] ** 2 / set_bytes[i] for i in range(count) if set_bytes[i] > 0), default=0.0)

    # Region shading and labels.
    for index, code in enumerate(codes):
        patch = venn.patches[index]
        region = region_of(code)
        if patch is None:
            continue
        base = _mix(mpl, [SET_COLORS[i] for i, bit in enumerate(code) if bit == "1" and i < count])
        _fill(mpl, patch, region.saved_state if region else "none", base, saved_given)
        if region is None:  # drawn only because circles cannot avoid it: blank, it holds nothing
            patch.set_facecolor("white")
            patch.set_edgecolor("white")
        patch.set_zorder(2)

    # Two circles are exact; three may not be. Measure how far each drawn area is from its bytes.
    area_error, worst, worst_ratio = 0.0, None, 1.0
    drawn_total = sum(_patch_area(p) for p in venn.patches if p is not None)
    for index, code in enumerate(codes):
        if code[count:].strip("0") or not scale:
            continue
        region = region_of(code)
        patch = venn.patches[index]
        area = _patch_area(patch) if patch is not None else 0.0
        if region is None or region.nbytes == 0:
            ratio = math.inf if area > 1e-6 * drawn_total else 1.0
        else:
            ratio = area / (scale * region.nbytes)
        if abs(ratio - 1) > area_error:
            title = region_title(tuple(label for label, bit in zip(labels, code) if bit == "1"))
            area_error, worst, worst_ratio = abs(ratio - 1), title, ratio

    # The frame: all variables, its area following bytes when the shape allows it.
    total = sum(r.nbytes for r in regions)
    xs = [c[0] - r for c, r in zip(centers, radii) if r > 0] + [c[0] + r for c, r in zip(centers, radii) if r > 0]
    ys = [c[1] - r for c, r in zip(centers, radii) if r > 0] + [c[1] + r for c, r in zip(centers, radii) if r > 0]
    if not xs:
        xs, ys = [-0.5, 0.5], [-0.5, 0.5]
    box_w, box_h = max(xs) - min(xs), max(ys) - min(ys)
    margin = 0.1 * max(box_w, box_h)
    min_w, min_h = box_w + 2 * margin, box_h + 2.8 * margin  # room above the circles for set names
    wanted_area = total * scale if scale else 0.0
    frame_to_scale = wanted_area >= min_w * min_h
    if frame_to_scale:
        height = max(min_h, math.sqrt(wanted_area / 1.45))
        width = wanted_area / height
        if width < min_w:
            width, height = min_w, wanted_area / min_w
    else:
        width, height = min_w, min_h
    left = min(xs) - margin
    bottom = (min(ys) + max(ys)) / 2 - height / 2 + 0.4 * margin
    outside = by_code.get("0" * count)
    frame = mpl.patches.Rectangle((left, bottom), width, height, zorder=1, linewidth=1.2, edgecolor="#555555",
                                  facecolor="white")
    _fill(mpl, frame, outside.saved_state if outside else "none", "#999999", saved_given)
    frame.set_linewidth(1.2)
    frame.set_edgecolor("#555555" if not (saved_given and outside and outside.saved_state == "part") else "#3f8f33")
    axes.add_patch(frame)
    for i in range(count):
        if radii[i] > 0:
            axes.add_patch(mpl.patches.Circle(centers[i], radii[i], fill=False, linewidth=1.8,
                                              edgecolor=SET_COLORS[i], zorder=3))
    axes.set_xlim(left, left + width)
    axes.set_ylim(bottom, bottom + height)
    axes.set_aspect("equal", adjustable="box")
    axes.set_axis_off()

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()  # to measure text before placing it
    axes.apply_aspect()  # fit checks below need the final data-to-pixel transform
    present = [any(r.code[i] == "1" for r in regions) for i in range(count)]
    ringed = _place_set_names(axes, labels, centers, radii, present)
    callouts = []
    for index, code in enumerate(codes):
        region = region_of(code)
        if region is None:
            continue
        patch = venn.patches[index]
        label = venn.subset_labels[index]
        anchor = tuple(label.get_position()) if label is not None else _members_center(code, centers, radii)
        text = axes.text(*anchor, _region_label(region, saved_given, title=False), ha="center", va="center",
                         fontsize=9, zorder=7, gid=f"region-{region.code}", bbox=_LABEL_BOX)
        if patch is None or not _inside_patch(text, patch, renderer):
            text.remove()
            callouts.append((region, anchor))
    if outside is not None:
        label = _region_label(outside, saved_given, title=True)
        inset_x, inset_y = 0.03 * width, 0.04 * height
        spots = [  # (x, y, ha, va): the frame's corners, then the middle of its bottom and top edges
            (left + width - inset_x, bottom + inset_y, "right", "bottom"),
            (left + inset_x, bottom + inset_y, "left", "bottom"),
            (left + width - inset_x, bottom + height - inset_y, "right", "top"),
            (left + inset_x, bottom + height - inset_y, "left", "top"),
            (left + width / 2, bottom + inset_y, "center", "bottom"),
        ]
        for x, y, ha, va in spots:
            text = axes.text(x, y, label, ha=ha, va=va, fontsize=9, zorder=7, gid=f"region-{outside.code}",
                             bbox=_LABEL_BOX)
            if _clear_of_circles(text, axes, renderer, centers, radii, frame):
                break
            text.remove()
        else:
            callouts.append((outside, (left + width * 0.99, bottom + height * 0.01)))
    _place_callouts(axes, callouts, saved_given, renderer, frame_center=left + width / 2)

    if saved_given:
        handles = saved_legend(mpl, regions, partly_face="white", unsaved_face="#f3f3f3", unsaved_edge="#555555")
        axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, -0.01), ncol=3, frameon=False,
                    fontsize=9, handlelength=1.6)
    caption = "Areas follow bytes; the frame is " + caption
    if ringed:
        caption += f"\nRings (not to scale) mark sets too small to see: {', '.join(ringed)}."
    if area_error > 0.05:
        how = "holds no bytes but is drawn" if math.isinf(worst_ratio) else f"is drawn at {worst_ratio:.2g}x its size"
        caption += f"\nCircles cannot show these sets exactly: areas are approximate ('{worst}' {how})."
    if not frame_to_scale:
        caption += ("\nThe frame is not to scale: " +
                    ("the sets cover nearly all the bytes." if scale else "no set has bytes to draw."))
    axes.text(0.0, -0.1 if saved_given else -0.02, caption, transform=axes.transAxes, ha="left", va="top",
              fontsize=9, gid="caption")
    return SetsFigure(figure, "venn", regions, labels, venn, frame, scale, frame_to_scale, caption, area_error)


def _region_label(region, saved_given, *, title) -> str:
    lines = [region.title] if title else []
    lines.append(variables_text(region.count))
    lines.append(format_bytes(region.nbytes))
    if saved_given and region.saved_state == "part":
        lines.append(f"saved: {len(region.saved_names)}, {format_bytes(region.saved_bytes)}")
    elif saved_given and title:
        lines.append("saved" if region.saved_state == "all" else "not saved")
    return "\n".join(lines)


def _fill(mpl, patch, state, base_color, saved_given):
    """Shade a region: saved solid, partly saved hatched, not saved a pale tint of its sets' colour."""
    patch.set_alpha(None)
    patch.set_linewidth(0)
    if saved_given and state == "all":
        patch.set_facecolor(SAVED_COLOR)
        patch.set_edgecolor(SAVED_COLOR)
    elif saved_given and state == "part":
        patch.set_facecolor(_pale(mpl, base_color))
        patch.set_edgecolor("#3f8f33")
        patch.set_hatch("//")
    else:
        patch.set_facecolor(_pale(mpl, base_color))
        patch.set_edgecolor(_pale(mpl, base_color))


def _pale(mpl, color, amount=0.16):
    red, green, blue = mpl.matplotlib.colors.to_rgb(color)
    return (1 - amount + amount * red, 1 - amount + amount * green, 1 - amount + amount * blue)


def _mix(mpl, colors):
    if not colors:
        return "#ffffff"
    rgb = [mpl.matplotlib.colors.to_rgb(c) for c in colors]
    return tuple(sum(channel) / len(rgb) for channel in zip(*rgb))


def _patch_area(patch) -> float:
    """Area of a venn region in data units (its outline flattened to polygons)."""
    path = patch.get_path().transformed(patch.get_patch_transform())
    total = 0.0
    for polygon in path.to_polygons(closed_only=False):
        x, y = polygon[:, 0], polygon[:, 1]
        total += 0.5 * abs(float((x * _roll(y)).sum() - (y * _roll(x)).sum()))
    return total


def _roll(values):
    import numpy

    return numpy.roll(values, 1)


def _members_center(code, centers, radii):
    points = [centers[i] for i, bit in enumerate(code) if bit == "1"] or centers
    return (sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points))


def _text_corners(text, axes, renderer):
    box = text.get_window_extent(renderer)
    inverse = axes.transData.inverted()
    return inverse.transform([(box.x0, box.y0), (box.x1, box.y0), (box.x0, box.y1), (box.x1, box.y1),
                              ((box.x0 + box.x1) / 2, box.y0), ((box.x0 + box.x1) / 2, box.y1)])


def _inside_patch(text, patch, renderer) -> bool:
    box = text.get_window_extent(renderer)
    corners = [(box.x0, box.y0), (box.x1, box.y0), (box.x0, box.y1), (box.x1, box.y1),
               ((box.x0 + box.x1) / 2, box.y0), ((box.x0 + box.x1) / 2, box.y1)]
    # venn regions are Circles (a unit path plus a patch transform) or PathPatches: compare in pixels.
    return bool(patch.get_path().contains_points(corners, transform=patch.get_transform()).all())


def _clear_of_circles(text, axes, renderer, centers, radii, frame) -> bool:
    corners = _text_corners(text, axes, renderer)
    x0, y0 = corners.min(axis=0)
    x1, y1 = corners.max(axis=0)
    fx, fy = frame.get_xy()
    if x0 < fx or y0 < fy or x1 > fx + frame.get_width() or y1 > fy + frame.get_height():
        return False
    for (cx, cy), r in zip(centers, radii):
        nearest_x, nearest_y = min(max(cx, x0), x1), min(max(cy, y0), y1)
        if r > 0 and math.hypot(cx - nearest_x, cy - nearest_y) < r * 1.03:
            return False
    return True


def _place_set_names(axes, labels, centers, radii, present) -> list:
    """Each set's name above its circle. A circle too small to see gets a ring (not to scale)
    instead, and no name: its regions' callouts name it. Returns the ringed labels."""
    pixels_per_unit = axes.transData.transform((1, 0))[0] - axes.transData.transform((0, 0))[0]
    ringed = []
    for i, label in enumerate(labels):
        center, radius = centers[i], radii[i]
        if radius * pixels_per_unit >= 9:
            axes.annotate(label, (center[0], center[1] + radius), xytext=(0, 4), textcoords="offset points",
                          ha="center", va="bottom", fontsize=11, fontweight="bold", color=SET_COLORS[i], zorder=6,
                          gid=f"set-{i}", bbox=_LABEL_BOX)
        elif present[i] and radius * pixels_per_unit < 4:
            axes.plot([center[0]], [center[1]], marker="o", markersize=9, markerfacecolor="none",
                      markeredgecolor=SET_COLORS[i], markeredgewidth=1.3, zorder=6)
            ringed.append(label)
    return ringed


def _place_callouts(axes, callouts, saved_given, renderer, frame_center):
    """Labels of regions too small to hold them, in columns left and right of the frame, arrows to the region."""
    if not callouts:
        return
    to_axes = axes.transAxes.inverted()
    axes_height = axes.get_window_extent(renderer).height
    gap = 8 * renderer.points_to_pixels(1.0) / axes_height
    for side in (-1, 1):
        group = [(region, anchor) for region, anchor in callouts
                 if (anchor[0] < frame_center) == (side < 0)]
        if not group:
            continue
        targets = [(to_axes.transform(axes.transData.transform(anchor))[1], region, anchor)
                   for region, anchor in group]
        targets.sort(key=lambda item: -item[0])
        heights = [_text_height(axes, _region_label(r, saved_given, title=True), renderer) / axes_height + gap
                   for _, r, _ in targets]
        ys = [t[0] for t in targets]
        for i in range(1, len(ys)):  # push apart downwards, then upwards from the bottom
            ys[i] = min(ys[i], ys[i - 1] - (heights[i - 1] + heights[i]) / 2)
        if ys and ys[-1] - heights[-1] / 2 < 0:
            ys[-1] = heights[-1] / 2
            for i in range(len(ys) - 2, -1, -1):
                ys[i] = max(ys[i], ys[i + 1] + (heights[i] + heights[i + 1]) / 2)
        labels = [text.get_window_extent(renderer).padded(6) for text in axes.texts]  # what a leader must not cross
        for y, (_, region, anchor) in zip(ys, targets):
            x = 1.04 if side > 0 else -0.04
            target = axes.transData.transform(anchor)
            y = _clear_height(axes, x, y, target, labels)
            note = axes.annotate(
                _region_label(region, saved_given, title=True), anchor, xytext=(x, y),
                textcoords="axes fraction", ha="left" if side > 0 else "right", va="center", fontsize=9,
                annotation_clip=False, zorder=4, gid=f"region-{region.code}",
                arrowprops={"arrowstyle": "-", "color": "#666666", "linewidth": 0.8, "shrinkA": 2, "shrinkB": 0},
            )
            labels.append(note.get_window_extent(renderer).padded(6))


def _clear_height(axes, x, y, target, labels) -> float:
    """The height (axes fraction) nearest ``y`` from which a straight leader at ``x`` to ``target``
    (display coordinates) crosses no label; ``y`` itself when none is clear."""
    for step in range(0, 41):
        for candidate in ((y + 0.025 * step, y - 0.025 * step) if step else (y,)):
            if 0.0 <= candidate <= 1.0:
                start = axes.transAxes.transform((x, candidate))
                if not any(crosses_box(start, target, box) for box in labels):
                    return candidate
    return y


def crosses_box(start, end, box) -> bool:
    """Whether the segment from ``start`` to ``end`` (display points) passes through ``box`` (a Bbox)."""
    (x0, y0), (x1, y1) = start, end
    low, high = 0.0, 1.0  # Liang-Barsky clipping of the segment to the box
    for delta, distance_low, distance_high in ((x1 - x0, x0 - box.x0, box.x1 - x0), (y1 - y0, y0 - box.y0, box.y1 - y0)):
        if delta == 0:
            if distance_low < 0 or distance_high < 0:
                return False
            continue
        first, second = -distance_low / delta, distance_high / delta
        if delta < 0:
            first, second = second, first
        low, high = max(low, first), min(high, second)
        if low > high:
            return False
    return high - low > 1e-9


def _text_height(axes, text, renderer) -> float:
    probe = axes.text(0, 0, text, fontsize=9, transform=axes.transAxes)
    height = probe.get_window_extent(renderer).height
    probe.remove()
    return height
