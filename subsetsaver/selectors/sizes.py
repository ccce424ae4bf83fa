"""Sizes in bytes as people read them, for ``explain``, plans, drawings and the command line.

Example::

    format_bytes(13_100_491)
    # '12.5 MB'
"""


def format_bytes(count: int) -> str:
    """Human size with binary units: ``format_bytes(13_100_491) == '12.5 MB'``."""
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
