"""The ``checkpoint`` state file TensorFlow's Saver keeps in a checkpoint directory, without TensorFlow.

It is a text protobuf (``CheckpointState``): the latest prefix and every prefix kept,
relative to the directory or absolute::

    model_checkpoint_path: "model-9000"
    all_model_checkpoint_paths: "model-8000"
    all_model_checkpoint_paths: "model-9000"

:func:`read_state` reads it as ``tf.train.get_checkpoint_state`` does (paths joined to
the directory); :func:`write_state` replaces it atomically; :func:`unlisted_checkpoints`
finds the checkpoints of a directory whose state file is missing, so that a restore can
name them instead of silently starting from scratch. Paths with a scheme (``gs://``)
go through ``tf.io.gfile``.

Example::

    write_state('ckpt', 'ckpt/model-9000', ['ckpt/model-8000', 'ckpt/model-9000'])
    read_state('ckpt').latest
    # 'ckpt/model-9000'
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import re

from ... import storage

STATE_FILENAME = "checkpoint"
TEMPORARY = re.compile(r"\.tmp-.+-\d+-[0-9a-f]{8}")  # a writer's temporary name (storage.local)
MAX_STATE_BYTES = 1 << 20
_FIELD = re.compile(r'^\s*(\w+)\s*:\s*"((?:[^"\\]|\\.)*)"\s*$')


@dataclasses.dataclass(frozen=True)
class CheckpointState:
    """``latest``: the newest prefix; ``kept``: every prefix the state lists, oldest first (paths joined
    to the directory, as TensorFlow returns them)."""

    latest: str
    kept: tuple


def read_state(directory, filename=STATE_FILENAME) -> CheckpointState | None:
    """The state file of ``directory``, or None when it is missing, unreadable or names nothing."""
    path = _join(directory, filename)
    try:
        data = storage.read_bytes(path, MAX_STATE_BYTES)
    except OSError:
        return None
    fields = {"model_checkpoint_path": [], "all_model_checkpoint_paths": []}
    for line in data.decode("utf-8", "replace").splitlines():
        match = _FIELD.match(line)
        if match and match.group(1) in fields:
            fields[match.group(1)].append(_unescape(match.group(2)))
    if not fields["model_checkpoint_path"] or not fields["model_checkpoint_path"][-1]:
        return None
    latest = _resolve(directory, fields["model_checkpoint_path"][-1])
    kept = tuple(_resolve(directory, path) for path in fields["all_model_checkpoint_paths"])
    return CheckpointState(latest, kept or (latest,))


def latest_checkpoint(directory, filename=STATE_FILENAME):
    """The latest prefix the state file names, if its ``.index`` exists (``tf.train.latest_checkpoint``)."""
    state = read_state(directory, filename)
    if state is None or not storage.exists(state.latest + ".index"):
        return None
    return state.latest


def write_state(directory, latest, kept=(), filename=STATE_FILENAME) -> None:
    """Replace the state file of ``directory`` atomically; paths inside ``directory`` are written relative."""
    kept = list(dict.fromkeys([*kept, latest]).keys())
    kept.remove(latest)
    kept.append(latest)
    lines = [f'model_checkpoint_path: "{_escape(_relative(directory, latest))}"']
    lines += [f'all_model_checkpoint_paths: "{_escape(_relative(directory, path))}"' for path in kept]
    storage.write_bytes(_join(directory, filename), ("\n".join(lines) + "\n").encode("utf-8"))


def name_latest(prefix, filename=STATE_FILENAME) -> None:
    """Name ``prefix`` the latest checkpoint in the state file of its directory, keeping the ones it
    lists: what every command that writes a checkpoint does, so ``latest_checkpoint`` finds it.

    name_latest('serve/model'); latest_checkpoint('serve')
    # 'serve/model'
    """
    prefix = os.fspath(prefix)
    directory = os.path.dirname(prefix) or "."
    state = read_state(directory, filename)
    write_state(directory, prefix, () if state is None else state.kept, filename)


def unlisted_checkpoints(directory) -> list:
    """Prefixes of the checkpoints (``*.index``) in ``directory``, sorted; for saying what a missing
    state file leaves unnamed."""
    try:
        names = storage.list_directory(directory)
    except OSError:
        return []
    return sorted(_join(directory, name[:-len(".index")]) for name in names
                  if name.endswith(".index") and not TEMPORARY.search(name))


def _resolve(directory, path):
    return path if os.path.isabs(path) or "://" in path else _join(directory, path)


def _relative(directory, path):
    directory = os.fspath(directory)
    if "://" in path or "://" in directory:
        return path
    try:
        relative = os.path.relpath(path, directory or ".")
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def _join(directory, name):
    directory = os.fspath(directory)
    return name if not directory else directory.rstrip("/") + "/" + name


def _escape(text):
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _unescape(text):
    return codecs.escape_decode(text.encode("utf-8"))[0].decode("utf-8", "replace")
