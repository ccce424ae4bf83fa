"""Where pictures go: the file formats each picture accepts, and saving a matplotlib figure.

The extension of the path picks the format; an unknown one is refused before anything is
drawn, with the list of those that work.

Example::

    >>> check_extension("sets.SVG", FIGURE_FORMATS, "draw_sets")
    '.svg'
    >>> check_extension("plan.jpg", TREE_FORMATS, "draw_plan")
    Traceback (most recent call last):
    ValueError: draw_plan cannot write 'plan.jpg': unknown extension '.jpg'; supported: .dot, .gv, .svg, .png, .pdf
"""

import os

FIGURE_FORMATS = (".png", ".svg", ".pdf")
TREE_FORMATS = (".dot", ".gv", ".svg", ".png", ".pdf")


def check_extension(path, supported, function) -> str:
    """The lower-cased extension of ``path``, or a ValueError naming ``function`` and the ``supported`` ones."""
    extension = os.path.splitext(os.fspath(path))[1].lower()
    if extension not in supported:
        raise ValueError(
            f"{function} cannot write '{os.fspath(path)}': unknown extension '{extension}'; "
            f"supported: {', '.join(supported)}"
        )
    return extension


def save_figure(figure, path):
    """Save a matplotlib figure by extension (.png, .svg with text kept as text, .pdf); returns ``path``."""
    extension = check_extension(path, FIGURE_FORMATS, "draw_sets")
    import matplotlib

    settings = {"svg.fonttype": "none", "svg.hashsalt": "subsetsaver"}
    metadata = {".svg": {"Date": None}, ".pdf": {"CreationDate": None}, ".png": {}}[extension]
    with matplotlib.rc_context(settings):
        figure.savefig(os.fspath(path), dpi=150, bbox_inches="tight", pad_inches=0.15, metadata=metadata)
    return path
