"""The state file of a directory of portable checkpoints: ``checkpoint_npz.json``.

It names the latest ``.npz`` file and the ones a saver keeps (oldest first), by bare
file name in the same directory, the way TensorFlow's ``checkpoint`` file does for its
own checkpoints. It is written atomically, so a reader sees the old state or the new
one. Reading is forgiving: a missing, unreadable or foreign file is no state (None),
and any name that is not a bare file name (a '/' or '\\', or only dots) is dropped, so
a doctored state file cannot point outside its directory.

Example::

    write_state('/ckpt/checkpoint_npz.json', 'model-200.npz', ['model-100.npz', 'model-200.npz'])
    read_state('/ckpt/checkpoint_npz.json')
    # NpzState(latest='model-200.npz', kept=('model-100.npz', 'model-200.npz'))
"""

from __future__ import annotations

import dataclasses
import json
import os

from ... import bounded_json, storage

STATE_FILENAME = "checkpoint_npz.json"
STATE_FORMAT = "subsetsaver.npz-state"
_MAX_STATE_BYTES = 1 << 20  # a state file is read at most this far (a longer one is not valid JSON)


@dataclasses.dataclass(frozen=True)
class NpzState:
    """``latest``: the latest checkpoint's file name, or None; ``kept``: the kept files' names, oldest first."""

    latest: str | None
    kept: tuple


def is_bare_name(name) -> bool:
    """Whether ``name`` is a file name in the same directory: text, no '/' or '\\', not only dots."""
    return isinstance(name, str) and "/" not in name and "\\" not in name and name.strip(".") != ""


def read_state(path) -> NpzState | None:
    """The state at ``path``, or None when the file is missing, unreadable, not JSON or not a state file.

    A ``latest`` that is not a bare name reads as None; names in ``kept`` that are not
    bare names are left out.
    """
    path = os.fspath(path)
    try:
        data = storage.read_bytes(path, _MAX_STATE_BYTES)
    except OSError:
        return None
    try:
        state = bounded_json.loads(data)
    except ValueError:
        return None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        return None
    latest = state.get("latest")
    kept = state.get("kept")
    return NpzState(
        latest=latest if is_bare_name(latest) else None,
        kept=tuple(name for name in kept if is_bare_name(name)) if isinstance(kept, list) else (),
    )


def write_state(path, latest, kept) -> None:
    """Replace the state file ``path`` atomically: ``latest`` and ``kept`` are bare file names.

    write_state(os.path.join(directory, STATE_FILENAME), 'model-200.npz', ['model-200.npz'])
    """
    text = json.dumps({"format": STATE_FORMAT, "latest": latest, "kept": list(kept)}, indent=1) + "\n"
    storage.write_bytes(path, text.encode("utf-8"))
