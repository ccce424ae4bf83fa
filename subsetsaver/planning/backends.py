"""The backend contract of a plan, and the registry of backends by name.

A plan decides *what* is saved and restored; a backend decides *how*: ``'tf'`` writes
TensorFlow checkpoints through a staged ``Saver`` (:class:`TfBackend`), ``'npz'`` writes
portable ``.npz`` files without SaveV2 (:class:`NpzBackend`). Both implement
:class:`Backend`, and the planner talks to nothing else.

Example::

    >>> backend_class('npz')
    <class 'subsetsaver.planning.npz_backend.NpzBackend'>
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .npz_backend import NpzBackend
from .tf_backend import TfBackend


@runtime_checkable
class Backend(Protocol):
    """What a plan asks of the place its checkpoints live.

    ``__init__(graph, variables, *, partial_restore, **options)``: ``variables`` maps each
    checkpoint name to its list of ``tf.Variable`` parts (one unless partitioned), in the
    plan's order. Every op is built now, inside ``graph``; ``partial_restore`` also builds
    what :meth:`restore` needs for a subset. Unknown ``options`` raise TypeError.
    """

    name: str
    saver: object  # the object users reach through ``plan.saver`` (None if the backend has none)

    def save(self, sess, save_path, global_step=None, **options) -> str:
        """Write a checkpoint of every variable; returns its prefix (or file)."""

    def restore(self, sess, prefix, names=None) -> None:
        """Load every variable (``names=None``) or only those checkpoint names, in one
        ``session.run``, creating no op."""

    @property
    def last_checkpoints(self) -> list:
        """Prefixes the backend still keeps (older ones were deleted)."""

    @property
    def max_to_keep(self):
        """How many checkpoints it keeps (0 or None: all)."""

    def latest_checkpoint(self, directory):
        """The newest whole checkpoint in ``directory``, or None."""

    def checkpoints(self, directory):
        """The checkpoints a restore may fall back to, latest first."""

    def prefix(self, path) -> str:
        """A prefix, directory or file of a checkpoint -> its prefix (CheckpointNotFoundError if none)."""

    def contents(self, prefix) -> dict:
        """``{checkpoint name: (shape tuple, dtype name)}``, read without the values."""

    def exists(self, prefix) -> bool:
        """Whether a checkpoint is at ``prefix``."""


BACKENDS = {"tf": TfBackend, "npz": NpzBackend}


def backend_class(name):
    """The backend class registered as ``name``; ValueError naming the valid ones otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; valid backends: {', '.join(repr(b) for b in sorted(BACKENDS))}")
    return BACKENDS[name]
