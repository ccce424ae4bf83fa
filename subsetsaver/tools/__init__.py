"""The file-tools room: whole checkpoints in, new checkpoints out, no graph needed.

``slim`` writes a checkpoint with only the tensors a selector keeps; ``convert`` turns a
TensorFlow checkpoint into a portable ``.npz`` file and back. Both verify what they
wrote, tensor by tensor.

This room imports ``catalog``, ``selectors``, ``formats``, ``planning`` (the scratch-graph
writer in ``restore_ops``) and ``errors``.

Example::

    >>> from subsetsaver.tools import convert, slim
    >>> slim.slim('train/model-9000', '~slots()', 'serve/model').ratio
    3.0
"""

from . import convert, slim

__all__ = ["convert", "slim"]
