"""The look the pictures share: the colour of each fate and how a count of variables reads.

Every picture colours a saved variable, an initialized one and one the audit flags the
same way, so a set diagram and a scope tree of the same plan can be read side by side.

Example::

    >>> from subsetsaver.draw.style import SAVED_COLOR, variables_text
    >>> SAVED_COLOR, variables_text(1), variables_text(12)
    ('#8cc97e', '1 variable', '12 variables')
"""

SAVED_COLOR = "#8cc97e"
INITIALIZED_COLOR = "#e3e3e3"
FLAGGED_COLOR = "#f29282"
SET_COLORS = ("#1f77b4", "#e07b00", "#8e44ad")


def variables_text(count) -> str:
    """``count`` as words: '1 variable', '3 variables'."""
    return f"{count} variable{'s' if count != 1 else ''}"


def saved_legend(mpl, regions, *, partly_face, unsaved_face, unsaved_edge) -> list:
    """The legend's entries for how much of a region is saved ('saved', 'partly saved', 'not saved'), one for
    each that a drawn region (one with variables) shows, in that order: a legend shows only what the picture
    shows. A partly saved region is hatched green over ``partly_face``; an unsaved one is drawn in
    ``unsaved_face`` edged ``unsaved_edge``, as each picture draws its regions."""
    entries = {"all": {"facecolor": SAVED_COLOR, "edgecolor": "#555555", "label": "saved"},
               "part": {"facecolor": partly_face, "edgecolor": "#3f8f33", "hatch": "//", "label": "partly saved"},
               "none": {"facecolor": unsaved_face, "edgecolor": unsaved_edge, "label": "not saved"}}
    states = {region.saved_state for region in regions if region.names}
    return [mpl.patches.Patch(**entries[state]) for state in ("all", "part", "none") if state in states]
