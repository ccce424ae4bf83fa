"""What the set pictures draw on: matplotlib, imported only when a picture is drawn, and the result.

``import_matplotlib`` loads matplotlib and matplotlib-venn (or says which extra to
install), so ``import subsetsaver`` never pays for them; :class:`SetsFigure` is what the
Venn and UpSet drawings hand back before the figure is saved.

Example::

    >>> mpl = import_matplotlib()
    >>> figure = mpl.Figure(figsize=(8.5, 5.6))
"""

from __future__ import annotations

import dataclasses

VIZ_EXTRA_MESSAGE = "drawing needs matplotlib and matplotlib-venn: pip install subsetsaver[viz]"


def import_matplotlib():
    """matplotlib, matplotlib-venn and the parts of them the pictures use, or an ImportError naming the extra."""
    try:
        import matplotlib
        import matplotlib_venn
        from matplotlib import patches
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(VIZ_EXTRA_MESSAGE) from error
    return MatplotlibModules(matplotlib, matplotlib_venn, patches, Figure)


@dataclasses.dataclass(frozen=True)
class MatplotlibModules:
    """The modules ``import_matplotlib`` loaded, passed to each drawing as ``mpl``."""

    matplotlib: object
    venn: object
    patches: object
    Figure: object


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
