"""Progress bars for long file commands: shown on a terminal once a command runs past
``SHOWN_AFTER_SECONDS``, never when stderr is piped or a file.

Example::

    with progress_bar(total_bytes, "model.npz") as bar:
        for name, array in tensors:
            write(name, array)
            bar.update(array.nbytes)
"""

from __future__ import annotations

import contextlib
import sys

SHOWN_AFTER_SECONDS = 2.0
"""How long a command runs before its bar appears: a quick one prints nothing."""
REFRESH_SECONDS = 0.1
"""Least time between two redraws of a bar."""


@contextlib.contextmanager
def progress_bar(total, label, wanted=True):
    """A tqdm bar over ``total`` bytes named ``label`` (``.update(count)``), on stderr when it is a
    terminal and ``wanted``; otherwise an object whose ``update`` does nothing."""
    if not wanted or not sys.stderr.isatty():
        yield _NoProgress()
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="B", unit_scale=True, desc=label, delay=SHOWN_AFTER_SECONDS,
              mininterval=REFRESH_SECONDS, leave=False, file=sys.stderr) as bar:
        yield bar


class _NoProgress:
    def update(self, count):
        pass
