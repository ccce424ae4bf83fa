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


def saved_states_drawn(regions) -> list:
    """Which of 'all', 'part', 'none' the drawn regions (those with variables) are in, in that order:
    a legend shows an entry only for what the picture shows."""
    states = {region.saved_state for region in regions if region.names}
    return [state for state in ("all", "part", "none") if state in states]
