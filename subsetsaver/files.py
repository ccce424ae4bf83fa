"""Small file-system helpers shared by the writers of checkpoints and manifests.

Every writer puts its bytes under a temporary name beside the target, then renames.
The temporary name says who wrote it (``PATH.tmp-HOST-PID-RANDOM``), so that a later
save can delete what a killed one left without touching another live writer's files.

Example::

    >>> temporary = temporary_name('/ckpt/model-5.npz')   # '/ckpt/model-5.npz.tmp-vm-4242-1f2e3d4c'
    >>> ...; os.replace(temporary, path); fsync_directory(os.path.dirname(path))
    >>> remove_abandoned('/ckpt')                          # what killed writers on this host left
"""

import os
import re
import shutil
import socket
import uuid

TEMPORARY_MARK = ".tmp-"
# NAME.tmp-HOST-PID-RANDOM, then whatever a writer appends (.index, .data-00000-of-00001, _temp, ...)
_TEMPORARY = re.compile(r"^(?P<stem>.+\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8})(?P<rest>(?:[-._].*)?)$")


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


def temporary_name(path) -> str:
    """A unique name beside ``path`` (same file system, so a rename is atomic) naming its writer."""
    return f"{path}{TEMPORARY_MARK}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_abandoned(directory) -> list:
    """Delete the temporary files in ``directory`` whose writer ran on this host and no longer
    runs (a save killed midway). Another host's and live processes' are left alone.
    Returns the deleted names, sorted."""
    host, removed = socket.gethostname(), []
    try:
        names = os.listdir(directory or ".")
    except FileNotFoundError:
        return []
    for name in names:
        match = _TEMPORARY.match(name)
        if match is None or match["host"] != host or _running(int(match["pid"])):
            continue
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except FileNotFoundError:  # another process cleaning up at the same time
            continue
        removed.append(name)
    return sorted(removed)


def _running(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
