"""The library's version, and the versions a file records about who wrote it; in a module of its
own so that file writers can use them without importing the package's public surface (or TensorFlow).

Example::

    >>> from subsetsaver.version import __version__, versions
    >>> sorted(versions())
    ['numpy', 'python', 'subsetsaver', 'tensorflow']
"""

import platform
import sys

__version__ = "0.1.0"


def versions() -> dict:
    """subsetsaver's, TensorFlow's (None when it is not installed; never imported for this), numpy's
    and Python's versions."""
    import importlib.metadata  # here: it loads the email package, which no command that reads needs

    import numpy as np

    tf_version = getattr(sys.modules.get("tensorflow"), "__version__", None)
    if tf_version is None:
        try:
            tf_version = importlib.metadata.version("tensorflow")
        except importlib.metadata.PackageNotFoundError:
            tf_version = None
    return {"subsetsaver": __version__, "tensorflow": tf_version, "numpy": np.__version__,
            "python": platform.python_version()}
