"""TensorFlow for what builds or runs graph ops, or one error that names its install.

``pip install subsetsaver`` brings no TensorFlow: checkpoint files, layout maps, buckets and the
catalog of a binary ``.meta`` file work without it. What builds a Saver or an initializer, or runs
ops in a session, asks here first, so that without TensorFlow it stops before anything is touched,
with one line that says how to add it.

Example::

    tf = tensorflow("ss.plan")   # the module, or TensorFlowNeededError
"""

import importlib

from .errors import TensorFlowNeededError


def tensorflow(needed_for):
    """The ``tensorflow`` module; where it is not installed, :class:`TensorFlowNeededError` naming ``needed_for``
    (what asked for it, e.g. ``'ss.plan'``). A TensorFlow that is installed but fails to load raises its own error."""
    try:
        return importlib.import_module("tensorflow")
    except ModuleNotFoundError as error:
        if error.name != "tensorflow":
            raise
        raise TensorFlowNeededError(needed_for) from None
