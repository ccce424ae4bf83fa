"""Small file-system helpers shared by the writers of checkpoints and manifests.

Example::

    >>> os.replace(temporary, path); fsync_directory(os.path.dirname(path))
"""

import os


def fsync_directory(directory):
    """Make a rename in ``directory`` durable; a no-op where directories cannot be opened."""
    try:
        descriptor = os.open(directory or ".", os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
