"""File-system questions for local paths (the operating system) and others (``tf.io.gfile``).

Local paths never import TensorFlow; ``gs://``, ``ram://`` and the other schemes
TensorFlow's file systems serve go through ``tf.io.gfile``, imported only then.

Example::

    >>> exists('/ckpt/model-5.index'), is_directory('/ckpt'), list_directory('/ckpt')[:2]
    (True, True, ['checkpoint', 'model-5.data-00000-of-00001'])
"""

import os

from .atomic import is_local, local_path


def exists(path) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def is_directory(path) -> bool:
    if is_local(path):
        return os.path.isdir(local_path(path))
    import tensorflow as tf

    return tf.io.gfile.isdir(path)


def list_directory(directory) -> list:
    """The names in ``directory``; OSError when it cannot be listed."""
    if is_local(directory):
        return os.listdir(local_path(directory) or ".")
    import tensorflow as tf

    try:
        return tf.io.gfile.listdir(directory)
    except tf.errors.OpError as error:
        raise OSError(str(error)) from error


def read_bytes(path, limit) -> bytes:
    """At most ``limit`` bytes of ``path``; FileNotFoundError when there is no such file, OSError otherwise."""
    if is_local(path):
        with open(local_path(path), "rb") as handle:
            return handle.read(limit)
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(path)
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            return handle.read(limit)
    except tf.errors.OpError as error:
        raise OSError(str(error)) from error


def remove(path) -> None:
    """Delete ``path`` if it exists."""
    if is_local(path):
        try:
            os.remove(local_path(path))
        except FileNotFoundError:
            pass
        return
    import tensorflow as tf

    if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
