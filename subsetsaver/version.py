"""The library's version, in a module of its own so that file writers can record it
without importing the package's public surface.

Example::

    >>> from subsetsaver.version import __version__
"""

__version__ = "0.1.0"
