"""Pictures of a selection: the variable sets with their sizes, and the scope tree by fate.

``draw_sets`` draws two or three selectors as an area-proportional Venn/Euler diagram
(area follows bytes) inside a frame that stands for every variable, and an UpSet-style
chart for more sets. ``draw_plan`` draws a plan's scope tree with graphviz, each
variable coloured by what the plan does with it.

matplotlib, matplotlib-venn and graphviz are imported only when a picture is drawn, so
``import subsetsaver`` stays cheap.

Example::

    >>> ss.draw_sets({"trainable": ss.trainable(), "conv_1/bn": ss.scope("conv_1/bn")},
    ...              "sets.svg", saved=ss.trainable() | ss.bn_stats(), graph=graph)
    'sets.svg'
    >>> ss.draw_plan(ss.plan(ss.trainable() | ss.bn_stats(), graph), "plan.svg")
    'plan.svg'
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import shutil
import textwrap
import warnings

from .errors import SubsetSaverWarning
from .selectors import Selector, format_bytes

FIGURE_FORMATS = (".png", ".svg", ".pdf")
TREE_FORMATS = (".dot", ".gv", ".svg", ".png", ".pdf")
VIZ_EXTRA_MESSAGE = "drawing needs matplotlib and matplotlib-venn: pip install subsetsaver[viz]"
GRAPHVIZ_PACKAGE_MESSAGE = "drawing the scope tree needs the graphviz Python package: pip install graphviz"
INSTALL_DOT_HINT = (
    "Graphviz's 'dot' program is not installed, so only the .dot file was written; "
    "install it with 'apt-get install graphviz', 'brew install graphviz' or 'conda install graphviz'"
)

SAVED_COLOR = "#8cc97e"
INITIALIZED_COLOR = "#e3e3e3"
FLAGGED_COLOR = "#f29282"
SET_COLORS = ("#1f77b4", "#e07b00", "#8e44ad")
_UPSET_MAX_COLUMNS = 40
_FLAG_SEVERITIES = ("error", "warning")
_LABEL_BOX = {"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.75, "edgecolor": "none"}


# ---------------------------------------------------------------------------------
# Sizes: the one place that says how big a checkpoint of some variables is
# ---------------------------------------------------------------------------------


def checkpoint_bytes(catalog, names) -> int:
    """Estimated bytes (``.data`` plus ``.index``) of a TensorFlow checkpoint holding ``names``.

    The one place the pictures size a checkpoint: ``sizes`` replays the file layout. A
    partitioned variable counts as one tensor (its ``.data`` bytes are the same).

    >>> checkpoint_bytes(cat, ["conv_1/w", "conv_1/b"])   # 3328 bytes of values + the index
    3492
    """
    from . import sizes

    records = catalog.records_by_name
    tensors = [sizes.SavedTensor(name, records[name].dtype, tuple(records[name].shape)) for name in sorted(names)]
    return sizes.data_bytes(tensors) + sizes.index_bytes(tensors)


def full_saver_names(catalog) -> list:
    """What ``tf.compat.v1.train.Saver()`` writes: every global variable (all of a checkpoint's)."""
    from .catalog import GLOBAL_VARIABLES

    global_names = catalog.collection(GLOBAL_VARIABLES)
    return list(catalog.ordered_names) if catalog.kind == "checkpoint" else catalog.in_order(global_names)


# ---------------------------------------------------------------------------------
# Regions of a set diagram
# ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Region:
    """The variables in exactly the sets marked '1' in ``code`` (one character per set, in order).

    ``code`` of all zeros is the part of the frame outside every set.
    """

    code: str
    labels: tuple       # labels of the sets the region lies in
    names: tuple        # variables, in creation order
    nbytes: int
    saved_names: tuple  # the part of ``names`` that ``saved`` covers
    saved_bytes: int

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def saved_state(self) -> str:
        """'all', 'part' or 'none' of the region is saved."""
        if not self.saved_names:
            return "none"
        return "all" if len(self.saved_names) == len(self.names) else "part"

    @property
    def title(self) -> str:
        return _region_title(self.labels)


def _region_title(labels) -> str:
    if not labels:
        return "in none of the sets"
    if len(labels) == 1:
        return f"{labels[0]} only"
    return " ∩ ".join(labels)


def set_regions(sets: dict, saved=None, graph=None) -> list:
    """The non-empty regions of ``sets`` (label -> selector) over every variable of ``graph``.

    >>> [(r.code, r.count) for r in set_regions({"t": ss.trainable(), "bn": ss.bn_stats()}, graph=g)]
    [('00', 27), ('01', 4), ('10', 12)]
    """
    from . import catalog as catalog_module

    catalog = catalog_module.load(graph)
    labels, chosen = _named_sets(sets, catalog)
    saved_set = frozenset(_as_selector("saved", saved).names(catalog, allow_empty=True)) if saved is not None else ()
    members = {}
    for name in catalog.ordered_names:
        code = "".join("1" if name in group else "0" for group in chosen)
        members.setdefault(code, []).append(name)
    regions = []
    for code in sorted(members):
        names = tuple(members[code])
        saved_names = tuple(n for n in names if n in saved_set)
        regions.append(
            Region(
                code=code,
                labels=tuple(label for label, bit in zip(labels, code) if bit == "1"),
                names=names,
                nbytes=catalog.nbytes(names),
                saved_names=saved_names,
                saved_bytes=catalog.nbytes(saved_names),
            )
        )
    return regions


def _named_sets(sets, catalog):
    if not isinstance(sets, dict) or not sets:
        raise ValueError("draw_sets needs a dict of at least one label -> selector, e.g. {'trainable': trainable()}")
    labels = tuple(str(label) for label in sets)
    chosen = [frozenset(_as_selector(label, sel).names(catalog, allow_empty=True)) for label, sel in sets.items()]
    return labels, chosen


def _as_selector(label, value):
    if not isinstance(value, Selector):
        raise TypeError(f"set '{label}' must be a selector such as trainable() or scope('conv_1'), "
                        f"got {type(value).__name__}: {value!r}")
    return value


# ---------------------------------------------------------------------------------
# draw_sets
# ---------------------------------------------------------------------------------


@dataclasses.dataclass
class SetsFigure:
    """A drawn set picture before it is saved: the figure and what it shows.

    ``kind`` is 'venn' or 'upset'. For a Venn picture ``diagram`` is matplotlib-venn's
    VennDiagram (``diagram.patches[i]`` is region ``VENN_CODES[len(sets)][i]``), ``frame``
    the rectangle of all variables, and ``scale`` the drawn area per byte.
    """

    figure: object
    kind: str
    regions: list
    labels: tuple
    diagram: object = None
    frame: object = None
    scale: float = 0.0
    frame_to_scale: bool = True
    caption: str = ""
    area_error: float = 0.0  # the largest relative error of a region's area against its bytes


VENN_CODES = {2: ("10", "01", "11"), 3: ("100", "010", "110", "001", "101", "011", "111")}


def draw_sets(sets: dict, path, saved=None, graph=None):
    """Draw ``sets`` (label -> selector) inside the frame of all variables and save to ``path``.

    Two or three sets give an area-proportional Venn/Euler diagram (area follows bytes),
    more give an UpSet-style chart. Every region is labelled with its variable count and
    size; the part ``saved`` covers is shaded, and the caption compares its estimated
    checkpoint with a full Saver's. The format follows the extension: .png, .svg or .pdf.

    >>> draw_sets({"trainable": trainable(), "conv_1/bn": scope("conv_1/bn")}, "sets.svg",
    ...           saved=trainable() | bn_stats(), graph=graph)
    'sets.svg'
    """
    _check_extension(path, FIGURE_FORMATS, "draw_sets")
    drawing = sets_figure(sets, saved=saved, graph=graph)
    return save_figure(drawing.figure, path)


def sets_figure(sets: dict, saved=None, graph=None) -> SetsFigure:
    """The picture ``draw_sets`` saves, as a :class:`SetsFigure` (for tests and custom saving)."""
    mpl = _import_matplotlib()
    from . import catalog as catalog_module

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
            try:
                return _venn_figure(mpl, regions, labels, caption, saved is not None)
            except _NoVennLayout:
                pass
        return _upset_figure(mpl, regions, labels, caption, saved is not None)


def save_figure(figure, path):
    """Save a matplotlib figure by extension (.png, .svg with text kept as text, .pdf); returns ``path``."""
    extension = _check_extension(path, FIGURE_FORMATS, "draw_sets")
    import matplotlib

    settings = {"svg.fonttype": "none", "svg.hashsalt": "subsetsaver"}
    metadata = {".svg": {"Date": None}, ".pdf": {"CreationDate": None}, ".png": {}}[extension]
    with matplotlib.rc_context(settings):
        figure.savefig(os.fspath(path), dpi=150, bbox_inches="tight", pad_inches=0.15, metadata=metadata)
    return path


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
            f"Shaded: what saved = {saved!r} writes: {_variables(len(saved_names))}, "
            f"an estimated {format_bytes(written)} checkpoint vs {format_bytes(full)} for a full Saver ({ratio})."
        )
    return "\n".join(textwrap.fill(line, 110) for line in lines)


def _import_matplotlib():
    try:
        import matplotlib
        import matplotlib_venn
        from matplotlib import patches
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(VIZ_EXTRA_MESSAGE) from error
    return _Matplotlib(matplotlib, matplotlib_venn, patches, Figure)


@dataclasses.dataclass(frozen=True)
class _Matplotlib:
    matplotlib: object
    venn: object
    patches: object
    Figure: object


def _region_label(region, saved_given, *, title) -> str:
    lines = [region.title] if title else []
    lines.append(_variables(region.count))
    lines.append(format_bytes(region.nbytes))
    if saved_given and region.saved_state == "part":
        lines.append(f"saved: {len(region.saved_names)}, {format_bytes(region.saved_bytes)}")
    elif saved_given and title:
        lines.append("saved" if region.saved_state == "all" else "not saved")
    return "\n".join(lines)


def _variables(count) -> str:
    return f"{count} variable{'s' if count != 1 else ''}"


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


def _venn_figure(mpl, regions, labels, caption, saved_given) -> SetsFigure:
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
                raise _NoVennLayout() from error
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
            title = _region_title(tuple(label for label, bit in zip(labels, code) if bit == "1"))
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
        handles = [
            mpl.patches.Patch(facecolor=SAVED_COLOR, edgecolor="#555555", label="saved"),
            mpl.patches.Patch(facecolor="white", edgecolor="#3f8f33", hatch="//", label="partly saved"),
            mpl.patches.Patch(facecolor="#f3f3f3", edgecolor="#555555", label="not saved"),
        ]
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


class _NoVennLayout(Exception):
    """matplotlib-venn found no circles for these sizes."""


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
        for y, (_, region, anchor) in zip(ys, targets):
            axes.annotate(
                _region_label(region, saved_given, title=True), anchor, xytext=(1.04 if side > 0 else -0.04, y),
                textcoords="axes fraction", ha="left" if side > 0 else "right", va="center", fontsize=9,
                annotation_clip=False, zorder=4, gid=f"region-{region.code}",
                arrowprops={"arrowstyle": "-", "color": "#666666", "linewidth": 0.8, "shrinkA": 2, "shrinkB": 0},
            )


def _text_height(axes, text, renderer) -> float:
    probe = axes.text(0, 0, text, fontsize=9, transform=axes.transAxes)
    height = probe.get_window_extent(renderer).height
    probe.remove()
    return height


def _upset_figure(mpl, regions, labels, caption, saved_given) -> SetsFigure:
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
        handles = [
            mpl.patches.Patch(facecolor=SAVED_COLOR, edgecolor="#555555", label="saved"),
            mpl.patches.Patch(facecolor="#dde6ef", edgecolor="#3f8f33", hatch="//", label="partly saved"),
            mpl.patches.Patch(facecolor="#dde6ef", edgecolor="#4d6a85", label="not saved"),
        ]
        bars.legend(handles=handles, loc="upper right", fontsize=8, frameon=False, ncol=3)
    caption = "Bars follow bytes (log scale); " + caption
    matrix.text(0.0, -0.15, caption, transform=matrix.transAxes, ha="left", va="top", fontsize=8, gid="caption")
    return SetsFigure(figure, "upset", regions, labels, caption=caption)


# ---------------------------------------------------------------------------------
# draw_plan
# ---------------------------------------------------------------------------------


@dataclasses.dataclass
class TreeItem:
    """One drawn node of the scope tree.

    ``kind``: 'scope' (an expanded scope, drawn as a header over its children),
    'collapsed' (a scope drawn as one node), 'others' (the root's smallest children,
    drawn as one node) or 'variable'. ``names`` are every variable under it.
    """

    kind: str
    path: str      # the full scope path or variable name
    label: str     # the name shown, relative to the parent
    depth: int
    names: tuple
    children: list = dataclasses.field(default_factory=list)
    scope: object = dataclasses.field(default=None, repr=False)


class _Scope:
    def __init__(self, path):
        self.path = path
        self.scopes = {}
        self.variables = []  # full names
        self._names = None

    def child(self, part):
        if part not in self.scopes:
            self.scopes[part] = _Scope(f"{self.path}/{part}" if self.path else part)
        return self.scopes[part]

    def names(self):
        if self._names is None:
            self._names = tuple(self.variables) + tuple(n for s in self.scopes.values() for n in s.names())
        return self._names


def scope_tree(names, nbytes, *, max_children=16, max_depth=5, max_nodes=150) -> TreeItem:
    """The drawn tree over ``names`` (creation order): scopes expand breadth first, biggest first,
    while they are at most ``max_depth`` levels deep, have at most ``max_children`` children and
    the drawing stays within ``max_nodes`` nodes; the rest collapse into one node each.

    ``nbytes(names) -> int`` sizes a group of variables.
    """
    root = _Scope("")
    for name in names:
        parts = name.split("/")
        scope = root
        for part in parts[:-1]:
            scope = scope.child(part)
        scope.variables.append(name)

    top = TreeItem("scope", "", "", 0, root.names())
    children = _children(root, 1)
    limit = min(max_children, max_nodes - 1)
    if len(children) > limit:  # the root cannot collapse into itself: fold its smallest children
        children.sort(key=lambda item: -nbytes(item.names))
        kept, folded = children[: limit - 1], children[limit - 1:]
        order = {n: i for i, n in enumerate(names)}
        kept.sort(key=lambda item: order[item.names[0]])
        folded_names = tuple(sorted((n for item in folded for n in item.names), key=order.__getitem__))
        children = kept + [TreeItem("others", "", f"{len(folded)} more", 1, folded_names)]
    top.children = children
    drawn = 1 + len(children)
    queue = []
    for position, item in enumerate(children):
        heapq.heappush(queue, (item.depth, -nbytes(item.names), position, item))
    counter = len(children)
    while queue:
        _, _, _, item = heapq.heappop(queue)
        if item.kind != "collapsed" or item.depth > max_depth:
            continue
        kids = _children(item.scope, item.depth + 1)
        if len(kids) > max_children or drawn + len(kids) > max_nodes:
            continue
        item.kind, item.children = "scope", kids
        drawn += len(kids)
        for kid in kids:
            counter += 1
            heapq.heappush(queue, (kid.depth, -nbytes(kid.names), counter, kid))
    return top


def _children(scope, depth) -> list:
    """The items directly under ``scope``: its variables, then its sub-scopes (single chains merged)."""
    items = [TreeItem("variable", name, name.rsplit("/", 1)[-1], depth, (name,)) for name in scope.variables]
    for part, sub in scope.scopes.items():
        label = part
        while not sub.variables and len(sub.scopes) == 1:  # conv_1/bn/moments: one cluster, not three
            (next_part, sub), = sub.scopes.items()
            label = f"{label}/{next_part}"
        names = sub.names()
        if len(names) == 1:
            item = TreeItem("variable", names[0], names[0][len(sub.path) - len(label):], depth, names)
        else:
            item = TreeItem("collapsed", sub.path, label, depth, names, scope=sub)
        items.append(item)
    return items


def draw_plan(plan, path, *, max_children=16, max_depth=5, max_nodes=150, findings=None):
    """Draw ``plan``'s scope tree with graphviz and save it to ``path`` (.dot, .gv, .svg, .png, .pdf).

    Variables are coloured by fate: saved, initialized, or flagged by the audit (the error and
    warning ``findings``; by default ``ss.audit(plan)``). Each shows its shape and
    size; each scope its totals. Scopes deeper than ``max_depth``, with more than
    ``max_children`` children, or past ``max_nodes`` drawn nodes collapse into one node
    with their count and bytes.

    The DOT source is always written beside the picture (``plan.svg`` -> ``plan.dot``).
    Without Graphviz's ``dot`` program only the .dot is written, a ``SubsetSaverWarning``
    says how to install it, and the .dot path is returned.

    ``plan`` is what ``ss.plan`` returns, or anything with its ``saved_names`` and ``catalog``
    (every other variable of the catalog is initialized, as ``rest_names`` says).

    >>> draw_plan(ss.plan(ss.trainable() | ss.bn_stats(), graph), "plan.svg")
    'plan.svg'
    """
    extension = _check_extension(path, TREE_FORMATS, "draw_plan")
    if max_children < 2 or max_depth < 1 or max_nodes < 2:
        raise ValueError("draw_plan needs max_children >= 2, max_depth >= 1 and max_nodes >= 2")
    graphviz = _import_graphviz()
    catalog = plan.catalog
    saved = frozenset(plan.saved_names)
    if findings is None:
        findings = _audit(plan)
    flags = {}
    for finding in findings:
        if finding.severity in _FLAG_SEVERITIES:
            for name in finding.variables:
                flags.setdefault(name, []).append(finding)
    tree = scope_tree(catalog.ordered_names, catalog.nbytes, max_children=max_children, max_depth=max_depth,
                      max_nodes=max_nodes)
    dot = _tree_dot(graphviz, tree, catalog, saved, flags)
    text = dot.source
    dot_path = os.fspath(path) if extension in (".dot", ".gv") else os.path.splitext(os.fspath(path))[0] + ".dot"
    with open(dot_path, "w", encoding="utf-8") as handle:
        handle.write(text)
    if extension in (".dot", ".gv"):
        return path
    if shutil.which("dot") is None:
        warnings.warn(INSTALL_DOT_HINT, SubsetSaverWarning, stacklevel=2)
        return dot_path
    try:
        rendered = dot.pipe(format=extension[1:])
    except graphviz.ExecutableNotFound:
        warnings.warn(INSTALL_DOT_HINT, SubsetSaverWarning, stacklevel=2)
        return dot_path
    with open(os.fspath(path), "wb") as handle:
        handle.write(rendered)
    return path


def _import_graphviz():
    try:
        import graphviz
    except ImportError as error:
        raise ImportError(GRAPHVIZ_PACKAGE_MESSAGE) from error
    return graphviz


def _audit(plan) -> list:
    from .audit import audit

    return list(audit(plan))


def _fate(name, saved, flags) -> str:
    if name in flags:
        return "flagged"
    return "saved" if name in saved else "initialized"


_FATE_COLORS = {"saved": SAVED_COLOR, "initialized": INITIALIZED_COLOR, "flagged": FLAGGED_COLOR}


def _tally(names, catalog, saved, flags) -> dict:
    """fate -> (count, bytes) over ``names``."""
    tally = {}
    for name in names:
        fate = _fate(name, saved, flags)
        count, size = tally.get(fate, (0, 0))
        tally[fate] = (count + 1, size + catalog.nbytes((name,)))
    return tally


def _tally_text(tally) -> str:
    return ", ".join(f"{fate} {tally[fate][0]}" for fate in ("saved", "initialized", "flagged") if fate in tally)


def _stripes(tally) -> str:
    total_bytes = sum(size for _, size in tally.values())
    total_count = sum(count for count, _ in tally.values())
    weights = [(fate, (size / total_bytes) if total_bytes else count / max(total_count, 1))
               for fate, (count, size) in tally.items()]
    weights = [(fate, w) for fate, w in weights if w > 0] or [("initialized", 1.0)]
    if len(weights) == 1:
        return _FATE_COLORS[weights[0][0]]
    order = ("saved", "initialized", "flagged")
    weights.sort(key=lambda item: order.index(item[0]))
    # graphviz wants the fractions to sum to at most 1; the last stripe takes what is left.
    parts = [f"{_FATE_COLORS[fate]};{max(w, 0.001) - 0.0005:.4f}" for fate, w in weights[:-1]]
    return ":".join(parts + [_FATE_COLORS[weights[-1][0]]])


def _shape_text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _tree_dot(graphviz, tree, catalog, saved, flags):
    records = catalog.records_by_name
    dot = graphviz.Digraph("scope_tree", format="svg")
    total = _tally(tree.names, catalog, saved, flags)
    dot.attr(rankdir="LR", ordering="out", nodesep="0.06", ranksep="0.3", fontname="Helvetica", fontsize="12", labelloc="t",
             labeljust="l", compound="true",
             label=f"Scope tree: {_variables(len(tree.names))}, {format_bytes(catalog.nbytes(tree.names))} "
                   f"({_tally_text(total)})")
    dot.attr("node", fontname="Helvetica", fontsize="9", shape="box", style="rounded,filled", height="0.3",
             margin="0.06,0.03")
    dot.attr("edge", arrowhead="none", color="#9a9a9a")

    with dot.subgraph(name="cluster_legend") as legend:
        legend.attr(label="Legend", style="rounded", color="#bbbbbb", fontsize="10")
        legend.node("legend_saved", "saved (restored from the checkpoint)", fillcolor=SAVED_COLOR)
        legend.node("legend_initialized", "initialized (not in the checkpoint)", fillcolor=INITIALIZED_COLOR)
        legend.node("legend_flagged", "flagged by the audit", fillcolor=FLAGGED_COLOR)
        legend.node("legend_collapsed", "collapsed scope: count, bytes,\nstripes by bytes of each fate",
                    shape="box", style="filled", fillcolor=f"{SAVED_COLOR};0.5:{INITIALIZED_COLOR}")
        legend.edge("legend_saved", "legend_initialized", style="invis")
        legend.edge("legend_initialized", "legend_flagged", style="invis")
        legend.edge("legend_flagged", "legend_collapsed", style="invis")

    def node_id(item):
        # '/'-separated prefixes: graphviz reads ':' in a node name as a port.
        return {"scope": "s/", "collapsed": "c/", "others": "o/", "variable": "v/"}[item.kind] + (item.path or "(root)")

    def tooltip(item, tally):
        return (f"{item.path or item.label or 'all variables'}: {_variables(len(item.names))}, "
                f"{catalog.nbytes(item.names)} bytes ({_tally_text(tally)})")

    def emit(graph, item, parent_id, shade):
        identifier = node_id(item)
        tally = _tally(item.names, catalog, saved, flags)
        size = format_bytes(catalog.nbytes(item.names))
        if item.kind == "variable":
            name = item.names[0]
            record = records[name]
            fate = _fate(name, saved, flags)
            lines = [item.label, f"{_shape_text(record.shape)} {record.dtype} · {size}"]
            if fate == "flagged":
                codes = ", ".join(dict.fromkeys(f.code for f in flags[name]))
                lines.append(f"{codes} ({'saved' if name in saved else 'initialized'})")
            text = f"{name}: 1 variable, {catalog.nbytes(item.names)} bytes ({fate})"
            if fate == "flagged":
                text += " — " + " ".join(f.message for f in flags[name])
            graph.node(identifier, "\n".join(lines), fillcolor=_FATE_COLORS[fate], tooltip=text)
        elif item.kind in ("collapsed", "others"):
            title = f"{item.label}/ …" if item.kind == "collapsed" else f"… {item.label}"
            graph.node(identifier, f"{title}\n{_variables(len(item.names))} · {size}\n{_tally_text(tally)}",
                       shape="box", style="filled", fillcolor=_stripes(tally), penwidth="1.4",
                       tooltip=tooltip(item, tally))
        else:
            title = item.label or "all variables"
            graph.node(identifier, f"{title}\n{_variables(len(item.names))} · {size}\n{_tally_text(tally)}",
                       shape="tab", style="filled", fillcolor="white", fontname="Helvetica-Bold",
                       tooltip=tooltip(item, tally))
        if parent_id is not None:
            graph.edge(parent_id, identifier)
        # Inside a cluster, dot stacks the nodes emitted first at the bottom: reverse them to read top-down.
        for child in item.children if graph is dot else reversed(item.children):
            if child.kind == "scope":
                with graph.subgraph(name=f"cluster_{node_id(child)}") as cluster:
                    cluster.attr(label="", style="rounded,filled", color="#c8c8c8",
                                 fillcolor="#f6f6f6" if shade else "#ececec")
                    emit(cluster, child, identifier, not shade)
            else:
                emit(graph, child, identifier, shade)

    emit(dot, tree, None, True)
    return dot


def _check_extension(path, supported, function) -> str:
    extension = os.path.splitext(os.fspath(path))[1].lower()
    if extension not in supported:
        raise ValueError(
            f"{function} cannot write '{os.fspath(path)}': unknown extension '{extension}'; "
            f"supported: {', '.join(supported)}"
        )
    return extension
