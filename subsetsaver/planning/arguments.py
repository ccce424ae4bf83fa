"""The checks every function that makes a plan runs on its arguments, before anything is built.

Example::

    sel = checked_selector("plan", "trainable() | bn_stats()", "error")
    audited_names(sel, catalog, strict=False)
    # ('conv_1/w', 'conv_1/b', ...)
"""

from __future__ import annotations

from ..audit import audit_errors, warn_for
from ..errors import EmptySelectionError
from ..selectors import Selector, parse

ON_MISMATCH = ("error", "initialize")
"""What a restore does with a variable the checkpoint lacks or holds differently: raise, or initialize it."""


def checked_selector(function, sel, on_mismatch) -> Selector:
    """``sel`` as a Selector (parsed from its text), once it and ``on_mismatch`` are known to be valid
    arguments of ``function`` (named in the TypeError or ValueError)."""
    if isinstance(sel, str):
        sel = parse(sel)
    if not isinstance(sel, Selector):
        raise TypeError(f"{function}() takes a selector or its text, got {type(sel).__name__}")
    if on_mismatch not in ON_MISMATCH:
        raise ValueError(f"on_mismatch={on_mismatch!r} is not one of {', '.join(repr(m) for m in ON_MISMATCH)}")
    return sel


def audited_names(sel, catalog, *, strict) -> tuple:
    """The names ``sel`` saves from ``catalog``, once the audit's errors are warned of (``strict``: raised);
    EmptySelectionError when it saves none. Warnings blame the caller of the public function that calls this."""
    saved_names = sel.names(catalog)
    if not saved_names:
        raise EmptySelectionError(
            f"selector {sel!r} saves no variable, so there is nothing to plan; "
            "use tf.compat.v1.global_variables_initializer() to only initialize"
        )
    warn_for(audit_errors(sel, catalog), strict=strict, stacklevel=3)
    return saved_names
